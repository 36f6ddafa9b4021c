"""One big file indexed with the real local model: its vectors are held compactly, and what is
written is exactly what the model produced (float32 of the L2-normalised vectors)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from memdir.api import Memory
from memdir.embeddings.local import LocalEmbeddingProvider

SECTIONS = 1500


def _big_memory_md(sections: int) -> str:
    """A curated file of many tiny sections: one short chunk each, so the model runs fast."""
    words = "atlas invoice garden coffee router budget flight kernel".split()
    return "# Memory\n\n" + "".join(
        f"## Note {i}\n\n- {words[i % 8]} {words[i * 3 % 8]} item {i}\n\n" for i in range(sections))


def test_a_big_files_vectors_are_held_as_float32_not_python_lists(make_workspace, tmp_path: Path):
    """Peak Python memory of indexing one 1,500-chunk file stays within a few times what its
    float32 vectors take (2.3 MB): 14 MB, most of it the tokenizer's.  With the vectors as lists
    of Python floats (32 bytes a value) it was 31 MB.  tracemalloc counts allocations, so machine
    load cannot move the figure."""
    ws = make_workspace({"MEMORY.md": _big_memory_md(SECTIONS)})
    provider = LocalEmbeddingProvider()
    provider.load()  # the model's own memory is not what is measured
    with Memory(ws, provider=provider, state_dir=tmp_path / "state") as mem:
        tracemalloc.start()
        try:
            report = mem.sync()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        dims = provider.dims or 384
        assert report.chunks >= SECTIONS and report.embedded >= SECTIONS
        vectors = SECTIONS * dims * 4  # the float32 vectors: 2.3 MB
        assert peak < 10 * vectors, f"peak {peak / 1e6:.1f} MB for {vectors / 1e6:.1f} MB of float32 vectors"


def test_what_is_written_is_the_models_float32_vectors(make_workspace, tmp_path: Path):
    """Chunks (one window or several) and cache entries hold the float32 rounding of the model's
    normalised vectors, bit for bit, whichever path (embed_batch lists, embed_matrix rows) made them."""
    long_line = "- " + " ".join(f"{i * 7919:08x}" for i in range(120))  # more tokens than one window
    ws = make_workspace({"MEMORY.md": _big_memory_md(40), "memory/2026-01-02.md": long_line + "\n"})
    provider = LocalEmbeddingProvider()
    with Memory(ws, provider=provider, state_dir=tmp_path / "state") as mem:
        mem.sync()
        rows = mem.store.conn.execute("SELECT text, embedding FROM chunks ORDER BY rowid").fetchall()
        windows = mem.indexer._windows  # the pieces of a chunk the model reads
        many = 0
        for text, blob in rows:
            pieces = windows(text)
            many += len(pieces) > 1
            expected = np.asarray(provider.embed_batch(pieces), dtype="<f4").tobytes()
            assert blob == expected, text[:60]
        assert many, "no chunk had several windows"
        texts = [text for text, _ in rows[:20]]
        matrix = provider.embed_matrix(texts)
        assert matrix.dtype == np.float32 and matrix.shape == (20, provider.dims)
        assert matrix.tobytes() == np.asarray(provider.embed_batch(texts), dtype=np.float32).tobytes()
        cached = mem.store.cache_get(provider.id, provider.model, provider.provider_key,
                                     [h for (h,) in mem.store.conn.execute("SELECT lower(hex(hash)) FROM chunks")])
        assert cached and all(v.dtype == np.float32 for v in cached.values())


class _Memo:
    """A provider wrapper as a bench or a user writes one: its own ``embed_batch`` (remembering
    every text's vector), everything else passed on to the model."""

    def __init__(self, inner: LocalEmbeddingProvider):
        self._inner = inner
        self.asked: list[str] = []

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def embed_batch(self, texts, **_):
        self.asked.extend(texts)
        return self._inner.embed_batch(texts)


class _Override(LocalEmbeddingProvider):
    """A subclass that changes ``embed_batch`` only."""

    calls = 0

    def embed_batch(self, texts, **kwargs):
        type(self).calls += 1
        return super().embed_batch(texts, **kwargs)


def test_a_wrapper_with_its_own_embed_batch_is_never_bypassed(make_workspace, tmp_path: Path):
    """The float32 path (``embed_matrix``) is taken only when the provider's own class defines
    it: a wrapper's ``embed_batch`` (a memo in the note-styles bench) was skipped through
    ``__getattr__``, and every text was embedded again."""
    ws = make_workspace({"MEMORY.md": _big_memory_md(40)})
    memo = _Memo(LocalEmbeddingProvider())
    with Memory(ws, provider=memo, state_dir=tmp_path / "a") as mem:
        report = mem.sync()
        assert report.embedded >= 40 and len(memo.asked) == report.embedded
    sub = _Override()
    with Memory(ws, provider=sub, state_dir=tmp_path / "b") as mem:
        assert mem.sync().embedded >= 40 and _Override.calls >= 1
