"""What a store remembers between searches (the change log's state, chunk rows per generation)
is dropped when the index moves: another connection's commit, its own writes, a rolled-back
write, a rebuild copied in page by page."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memdir.stores import vectors as vecs
from memdir.stores.base import ChunkRow
from memdir.stores.sqlite import SqliteStore

DIMS = 8


def _rows(path: str, texts: list[str], seed: int = 1) -> list[ChunkRow]:
    rng = np.random.default_rng(seed)
    return [ChunkRow(f"{path}#{i}", path, "memory", i + 1, i + 1, f"h-{path}-{t}", "m", t,
                     rng.standard_normal(DIMS).astype(np.float32).tolist()) for i, t in enumerate(texts)]


def _generation_now(store: SqliteStore) -> tuple[str | None, int]:
    epoch, _lo, hi = vecs.state(store.conn)
    return epoch, hi


def _statements(store: SqliteStore, action) -> list[str]:
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    try:
        action()
    finally:
        store.conn.set_trace_callback(None)
    return seen


def test_the_log_state_is_read_again_after_another_connections_commit(tmp_path: Path):
    path = tmp_path / "idx.sqlite"
    writer, reader = SqliteStore(path), SqliteStore(path)
    with writer.transaction():
        writer.replace_file("a.md", "memory", "a", 1, 1, _rows("a.md", ["one", "two"]))
    before = reader._generation()
    assert before == _generation_now(reader)
    # unchanged: remembered, the log is not read again
    assert not any("vec_log" in s for s in _statements(reader, reader._generation))

    reader.conn.execute("SAVEPOINT t")  # inside one read snapshot a commit elsewhere is not seen
    try:
        assert reader._generation() == before
        with writer.transaction():
            writer.replace_file("b.md", "memory", "b", 1, 1, _rows("b.md", ["three"]))
        assert reader._generation() == before
    finally:
        reader.conn.execute("RELEASE t")
    after = reader._generation()
    assert after != before and after == _generation_now(reader) == _generation_now(writer)
    writer.close()
    reader.close()


def test_own_writes_and_a_rolled_back_write_move_the_state(tmp_path: Path):
    store = SqliteStore(tmp_path / "idx.sqlite")
    first = store._generation()
    with store.transaction():
        store.replace_file("a.md", "memory", "a", 1, 1, _rows("a.md", ["one"]))
    second = store._generation()
    assert second != first and second == _generation_now(store)
    with pytest.raises(RuntimeError), store.transaction():
        store.replace_file("b.md", "memory", "b", 1, 1, _rows("b.md", ["two"]))
        assert store._generation() != second  # read inside the write: the uncommitted log
        raise RuntimeError("abandon the write")
    assert store._generation() == second == _generation_now(store)
    q = np.ones(DIMS, dtype=np.float32).tolist()
    assert {h.path for h in store.vector_search(q, 10)} == {"a.md"}
    with store.rebuild() as fresh, fresh.transaction():  # copied in page by page: a new epoch
        fresh.replace_file("g.md", "memory", "g", 1, 1, _rows("g.md", ["gee"]))
    assert store._generation() == _generation_now(store) != second
    assert {h.path for h in store.vector_search(q, 10)} == {"g.md"}
    store.close()


def test_chunk_rows_are_kept_per_generation_and_read_again_after_a_write(tmp_path: Path):
    path = tmp_path / "idx.sqlite"
    writer, reader = SqliteStore(path), SqliteStore(path)
    with writer.transaction():
        writer.replace_file("a.md", "memory", "a", 1, 1, _rows("a.md", ["old one", "old two"]))
    q = np.ones(DIMS, dtype=np.float32).tolist()
    first = reader.vector_search(q, 5)
    assert {h.text for h in first} == {"old one", "old two"}
    # the same generation: the rows come from memory (no chunk row is read), the hits are the same
    again: list = []
    seen = _statements(reader, lambda: again.extend(reader.vector_search(q, 5)))
    assert not any("FROM chunks c WHERE c.rowid IN" in s for s in seen)
    assert again == first
    ids = [h.id for h in first]
    seen = _statements(reader, lambda: reader.vector_scores(q, ids))
    assert not any("WHERE id IN" in s for s in seen)

    # the same chunk ids with new text, written by another connection
    with writer.transaction():
        writer.replace_file("a.md", "memory", "a2", 2, 2, _rows("a.md", ["new one", "new two"]))
    now = reader.vector_search(q, 5)
    assert {h.text for h in now} == {"new one", "new two"}
    assert sorted(h.id for h in now) == sorted(ids)
    assert set(reader.vector_scores(q, ids)) == set(ids)
    with writer.transaction():
        writer.delete_file("a.md", "memory")
    assert reader.vector_search(q, 5) == []
    assert reader.vector_scores(q, ids) == {}
    writer.close()
    reader.close()


def test_the_remembered_phrases_follow_the_terms_and_the_stemming_switch(tmp_path: Path, monkeypatch):
    from memdir import query

    store = SqliteStore(tmp_path / "idx.sqlite")
    stemmed = store._phrases(["running", "dogs"])
    assert stemmed == query.fts5_phrases(["running", "dogs"]) and any(c == "stems" for c, _ in stemmed)
    stemmed.clear()  # a caller's list is its own
    assert store._phrases(["running", "dogs"]) == query.fts5_phrases(["running", "dogs"])
    assert store._phrases(["cats"]) == query.fts5_phrases(["cats"])
    monkeypatch.setattr(query, "STEMMING", False)
    assert store._phrases(["cats"]) == [("text", '"cats"')]
    store.close()
