"""The embedding cache keeps no second copy of vectors live chunks hold: its entries for them are
references, resolved on lookup, turned back into vectors when the chunk goes, and copied as
vectors by a rebuild.  Nothing is embedded twice."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from memdir.api import Memory


class HashProvider:
    """Deterministic 64-dim vectors from a hash; counts what it is asked to embed."""

    id, model, provider_key, max_input_bytes = "hash", "hash-64", "hash-key", 8000
    dims = 64

    def __init__(self) -> None:
        self.embedded = 0

    def _vec(self, text: str) -> list[float]:
        d = hashlib.sha512(text.encode()).digest()
        return [(b - 127.5) / 128 for b in d[:64]]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)

    def embed_batch(self, texts):
        self.embedded += len(texts)
        return [self._vec(t) for t in texts]

    def close(self) -> None:
        pass


def _notes(n: int, tag: str = "") -> dict[str, str]:
    return {f"memory/2026-01-{i + 1:02d}.md": "\n".join(f"- note {i}.{j} about topic{j * 7 + i}{tag}"
                                                       for j in range(6)) + "\n" for i in range(n)}


def _refs(mem: Memory) -> tuple[int, int]:
    conn = mem.store.conn
    return conn.execute("SELECT sum(length(embedding) = 0), sum(length(embedding) > 0) FROM embedding_cache").fetchone()


def test_cache_entries_of_held_vectors_are_references(make_workspace, tmp_path: Path):
    ws = make_workspace(_notes(20))
    provider = HashProvider()
    with Memory(ws, provider=provider, state_dir=tmp_path / "state") as mem:
        report = mem.sync()
        refs, full = _refs(mem)
        assert report.embedded == refs == mem.store.cache_count() and full == 0
        # the hashes as text (the index stores a 64-hex hash as its 32 bytes)
        vectors = dict(mem.store.conn.execute("SELECT lower(hex(hash)), embedding FROM chunks"))
        got = mem.store.cache_get(provider.id, provider.model, provider.provider_key, list(vectors))
        assert set(got) == set(vectors)
        for h, v in got.items():
            text = mem.store.conn.execute("SELECT text FROM chunks WHERE hash = ?", (bytes.fromhex(h),)).fetchone()[0]
            assert np.allclose(v, provider._vec(text), atol=1e-6)
        hits = mem.search("topic7", sync=False).results
        assert hits and hits[0].path == "memory/2026-01-01.md"


def test_edits_deletions_and_rebuilds_embed_nothing_twice(make_workspace, tmp_path: Path):
    ws = make_workspace(_notes(12))
    provider = HashProvider()
    with Memory(ws, provider=provider, state_dir=tmp_path / "state") as mem:
        mem.sync()
        paid = provider.embedded
        first = ws / "memory/2026-01-01.md"
        text = first.read_text()
        first.write_text(text + "- one new line about zebras\n")  # one chunk changes
        os.utime(first, (1, 1))
        mem.sync()
        assert provider.embedded == paid + 1
        # (each small file is one chunk) the edited file's old chunk is no longer held
        assert _refs(mem) == (12, 1)
        (ws / "memory/2026-01-02.md").unlink()  # its entry must get its vector back
        mem.sync()
        assert _refs(mem) == (11, 2)
        (ws / "memory/2026-01-02.md").write_text(_notes(12)["memory/2026-01-02.md"])
        mem.sync()
        assert provider.embedded == paid + 1  # restored from the cache
        assert _refs(mem) == (12, 1)  # held again: a reference again
        mem.sync(force=True)  # a full rebuild copies the cache with the references resolved
        assert provider.embedded == paid + 1
        assert _refs(mem) == (12, 1)
        assert mem.search("zebras", sync=False).results[0].path == "memory/2026-01-01.md"
