"""A keyword-only SQLite index holds no empty embedding cache: the cache table and the indexes only
vectors need are created with the first cached vector (each table or index costs a page even when
empty).  An index written before (schema 4, with the empty tables) is rebuilt once, keeping a cache
that has entries; a missing cache is not damage."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.test_cache_refs import HashProvider, _notes

from memdir.api import Memory
from memdir.stores import sqlite_health as health
from memdir.stores.sqlite import SqliteStore

KEYWORD = {"memorySearch": {"provider": "none"}}
CACHE_OBJECTS = {"embedding_cache", "idx_cache_updated", "idx_cache_hash", "idx_chunks_hash"}

# The tables an index had before schema 5, as that version created them.
_OLD_CACHE_DDL = """
CREATE TABLE embedding_cache(
    provider TEXT NOT NULL, model TEXT NOT NULL, provider_key TEXT NOT NULL,
    hash TEXT NOT NULL, embedding BLOB NOT NULL, dims INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, PRIMARY KEY(provider, model, provider_key, hash));
CREATE INDEX idx_cache_updated ON embedding_cache(updated_at);
CREATE INDEX idx_cache_hash ON embedding_cache(hash);
CREATE INDEX idx_chunks_hash ON chunks(hash) WHERE embedding IS NOT NULL;
"""


def _names(index: Path) -> set[str]:
    with sqlite3.connect(index) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


def _schema(index: Path) -> int:
    with sqlite3.connect(index) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'memory_index_meta_v1'").fetchone()
    return int(json.loads(row[0])["schema"])


def test_a_keyword_only_index_has_no_cache_tables_and_is_healthy(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_notes(8))
    state = tmp_path / "state"
    with Memory(ws, state_dir=state, config=KEYWORD) as mem:
        report = mem.sync()
        index = mem.index_path
        assert report.chunks > 0
        assert mem.store.cache_count() == 0 and list(mem.store.export_cache()) == []
        assert mem.store.cache_get("p", "m", "k", ["ab" * 32]) == {}
        assert mem.store.cache_prune(1) == 0
        with mem.store.transaction():
            mem.store.cache_touch("p", "m", "k", ["ab" * 32])
            mem.store.cache_put("p", "m", "k", {})  # nothing to cache: still no table
        assert mem.store.check() is None
    names = _names(index)
    assert not names & CACHE_OBJECTS, names & CACHE_OBJECTS
    # meta and files keep their rows in their primary-key B-tree (no separate autoindex page)
    assert "sqlite_autoindex_meta_1" not in names and "sqlite_autoindex_files_1" not in names
    with sqlite3.connect(index) as conn:
        assert health.probe(conn, fts_expected=True) is None
    # reopened: not taken for damage, nothing rebuilt, the same answers
    with Memory(ws, state_dir=state, config=KEYWORD) as mem:
        again = mem.sync()
        assert not again.full and mem.recoveries == []
        assert [r.path for r in mem.search("topic7", sync=False, min_score=0).results][:1] == ["memory/2026-01-01.md"]
    assert _names(index) == names


def test_the_first_cached_vector_creates_the_cache(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_notes(8))
    state = tmp_path / "state"
    with Memory(ws, state_dir=state, config=KEYWORD) as mem:
        mem.sync()
        index = mem.index_path
    assert "embedding_cache" not in _names(index)
    provider = HashProvider()
    with Memory(ws, state_dir=state, provider=provider) as mem:
        report = mem.sync()  # a new identity (a model): a rebuild that embeds every chunk
        assert report.full and provider.embedded == report.chunks > 0
        assert mem.store.cache_count() == report.chunks
        hashes = [bytes(h).hex() for (h,) in mem.store.conn.execute("SELECT hash FROM chunks")]
        assert len(mem.store.cache_get(provider.id, provider.model, provider.provider_key, hashes)) == len(set(hashes))
    assert _names(index) >= CACHE_OBJECTS
    # and back to keyword-only: the cache is kept for when the model comes back
    with Memory(ws, state_dir=state, config=KEYWORD) as mem:
        assert mem.sync().full
        assert mem.store.cache_count() == report.chunks
    again = HashProvider()
    with Memory(ws, state_dir=state, provider=again) as mem:
        assert mem.sync().full and again.embedded == 0


def test_a_schema_4_keyword_index_is_rebuilt_once_without_its_empty_cache(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_notes(8))
    state = tmp_path / "state"
    with Memory(ws, state_dir=state, config=KEYWORD) as mem:
        mem.sync()
        index = mem.index_path
        found = mem.search("topic7", sync=False, min_score=0).results
        with mem.store.transaction() as c:
            for stmt in _OLD_CACHE_DDL.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            mem.store.write_meta({**mem.store.read_meta(), "schema": 4})
    assert _names(index) >= CACHE_OBJECTS
    with Memory(ws, state_dir=state, config=KEYWORD) as mem:
        assert mem.sync().full
        assert not mem.sync().full  # once
        assert mem.search("topic7", sync=False, min_score=0).results == found
    assert not _names(index) & CACHE_OBJECTS and _schema(index) == 5


def test_a_schema_4_index_with_vectors_keeps_its_cache(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_notes(8))
    state = tmp_path / "state"
    provider = HashProvider()
    with Memory(ws, state_dir=state, provider=provider) as mem:
        mem.sync()
        with mem.store.transaction():
            mem.store.write_meta({**mem.store.read_meta(), "schema": 4})
        cached = mem.store.cache_count()
        index = mem.index_path
    again = HashProvider()
    with Memory(ws, state_dir=state, provider=again) as mem:
        assert mem.sync().full and again.embedded == 0
        assert mem.store.cache_count() == cached > 0
    assert _schema(index) == 5


def test_salvage_into_a_fresh_index_creates_the_cache(make_workspace, tmp_path: Path) -> None:
    """A recovery copies the cache of a damaged index into an index that has none yet."""
    ws = make_workspace(_notes(8))
    provider = HashProvider()
    with Memory(ws, state_dir=tmp_path / "state", provider=provider) as mem:
        mem.sync()
        old, cached = mem.index_path, mem.store.cache_count()
    fresh = SqliteStore(tmp_path / "fresh.sqlite")
    try:
        assert "embedding_cache" not in _names(fresh.path)
        with fresh.transaction() as c:
            assert health.salvage_cache(old, c) == cached > 0
        assert fresh.cache_count() == cached
    finally:
        fresh.close()
    # nothing to salvage (a keyword-only index): still no table
    with Memory(ws, state_dir=tmp_path / "kw", config=KEYWORD) as mem:
        mem.sync()
        kw_index = mem.index_path
    empty = SqliteStore(tmp_path / "empty.sqlite")
    try:
        with empty.transaction() as c:
            assert health.salvage_cache(kw_index, c) == 0
        assert "embedding_cache" not in _names(empty.path)
    finally:
        empty.close()
