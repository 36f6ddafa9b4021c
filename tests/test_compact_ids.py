"""Chunk ids and hashes are stored compactly in SQLite (a 64-hex value as its 32 bytes) and read
back as the same strings; an index written with text ids (schema 3) is rebuilt, its embedding cache kept."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cache_refs import HashProvider, _notes

from memdir.api import Memory
from memdir.chunking import chunk_id, sha256_text
from memdir.stores.sqlite import hex_key, hex_str


def test_id_key_round_trip() -> None:
    hex_id = chunk_id("memory", "memory/a.md", 1, 3, "ab" * 32, "m")
    assert hex_key(hex_id) == bytes.fromhex(hex_id) and len(hex_key(hex_id)) == 32
    assert hex_str(hex_key(hex_id)) == hex_id
    for other in ("c1", "A" * 64, "g" * 64, "ab" * 31):  # not lower-case 64-hex: kept as text
        assert hex_key(other) == other and hex_str(hex_key(other)) == other


def test_ids_stored_as_blobs_and_found_by_id(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_notes(6))
    with Memory(ws, provider=HashProvider(), state_dir=tmp_path / "state") as mem:
        mem.sync()
        conn = mem.store.conn
        kinds = {r[0] for r in conn.execute(
            "SELECT typeof(id) || typeof(hash) || length(id) || length(hash) FROM chunks "
            "UNION SELECT typeof(hash) || length(hash) FROM embedding_cache")}
        assert kinds == {"blobblob3232", "blob32"}
        rows = conn.execute("SELECT id, source, path, start_line, end_line, hash, model FROM chunks").fetchall()
        ids = [chunk_id(s, p, a, b, bytes(h).hex(), m) for _, s, p, a, b, h, m in rows]
        assert [bytes(r[0]).hex() for r in rows] == ids
        hits = mem.store.keyword_search(["topic7"], 5)
        assert hits and all(h.id in ids for h in hits)
        # scores asked by id (hybrid completion) find the rows
        assert all(v > 0 for v in mem.store.keyword_scores(["topic7"], [h.id for h in hits]).values())
        assert set(mem.store.vector_scores(HashProvider()._vec("topic7"), ids[:3])) == set(ids[:3])
        exported = [c for _, _, _, _, _, chunks in mem.store.export_files() for c in chunks]
        assert {c.id for c in exported} == set(ids)
        assert all(c.hash == sha256_text(c.text) for c in exported)
        cached = {h for _, _, _, h, _ in mem.store.export_cache()}
        assert cached == {c.hash for c in exported}
        assert set(mem.store.cache_get("hash", "hash-64", "hash-key", sorted(cached)[:3])) == set(sorted(cached)[:3])


def test_text_id_index_rebuilt_keeping_cache(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_notes(6))
    state = tmp_path / "state"
    provider = HashProvider()
    with Memory(ws, provider=provider, state_dir=state) as mem:
        mem.sync()
        conn = mem.store.conn
        # an index as schema 3 wrote it: ids and hashes as hex text
        with mem.store.transaction():
            conn.execute("UPDATE chunks SET id = lower(hex(id)), hash = lower(hex(hash))")
            conn.execute("UPDATE embedding_cache SET hash = lower(hex(hash))")
            meta = mem.store.read_meta()
            mem.store.write_meta({**meta, "schema": 3})
        embedded = provider.embedded
    provider2 = HashProvider()
    with Memory(ws, provider=provider2, state_dir=state) as mem:
        report = mem.sync()
        assert report.full and provider2.embedded == 0 and embedded > 0  # every vector from the cache
        assert json.loads(mem.store.conn.execute("SELECT value FROM meta WHERE key = 'memory_index_meta_v1'")
                          .fetchone()[0])["schema"] == 5
        assert {r[0] for r in mem.store.conn.execute("SELECT typeof(id) || typeof(hash) FROM chunks")} == {"blobblob"}
        assert {r[0] for r in mem.store.conn.execute("SELECT typeof(hash) FROM embedding_cache")} == {"blob"}
        assert mem.store.cache_count() == report.chunks  # the old cache, carried over as blobs
        assert mem.search("topic7", sync=False).results
