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


def test_the_files_rows_follow_other_connections_own_writes_rollbacks_and_rebuilds(tmp_path: Path):
    """Read-your-writes asks for every file's row before each search; they are kept while the
    index is unchanged, and every way the index moves shows in the next answer."""
    path = tmp_path / "idx.sqlite"
    writer, reader = SqliteStore(path), SqliteStore(path)
    with writer.transaction():
        writer.replace_file("a.md", "memory", "a", 1, 1, _rows("a.md", ["one"]))
    first = reader.file_rows()
    assert set(first) == {("a.md", "memory")}
    assert reader.file_rows() is first  # unchanged: kept, not read again
    assert not any("FROM files" in s for s in _statements(reader, reader.file_rows))

    with writer.transaction():  # another connection's commit
        writer.replace_file("b.md", "memory", "b", 2, 2, _rows("b.md", ["two"]))
    assert set(reader.file_rows()) == {("a.md", "memory"), ("b.md", "memory")}
    with reader.transaction():  # its own write
        reader.touch_file("a.md", "memory", "a", 7, 1)
    assert reader.file_rows()[("a.md", "memory")] == ("a", 7, 1)
    with pytest.raises(RuntimeError), reader.transaction():  # a rolled-back write
        reader.delete_file("b.md", "memory")
        assert ("b.md", "memory") not in reader.file_rows()  # read inside the write: uncommitted
        raise RuntimeError("abandon the write")
    assert ("b.md", "memory") in reader.file_rows()
    with reader.rebuild() as fresh, fresh.transaction():  # copied in page by page
        fresh.replace_file("g.md", "memory", "g", 1, 1, _rows("g.md", ["gee"]))
    assert set(reader.file_rows()) == {("g.md", "memory")}
    assert set(reader.file_rows("memory", ["g.md", "a.md"])) == {("g.md", "memory")}
    writer.close()
    reader.close()


def test_a_search_sees_every_edit_while_the_listing_and_the_rows_are_reused(tmp_path: Path):
    """The check before each search keeps an unchanged file's entry and its last answer; an edit,
    a note added or removed, and another process's sync all show at the next search."""
    from memdir.api import Memory

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Notes\n- the boiler code is 4471\n", encoding="utf-8")
    (ws / "memory" / "2026-03-04.md").write_text("- met Ana about the kiln\n", encoding="utf-8")
    cfg = {"memorySearch": {"provider": "none"}}
    with Memory(ws, state_dir=str(tmp_path / "state"), config=cfg) as mem:
        assert mem.search("boiler").results
        for _ in range(3):  # the same listing and rows: nothing to sync, the same answer
            assert mem.indexer.dirty_files(reuse=True) == ([], [])
            assert [r.path for r in mem.search("kiln").results] == ["memory/2026-03-04.md"]
        (ws / "memory" / "2026-03-04.md").write_text("- met Ana about the glaze\n", encoding="utf-8")
        assert [r.path for r in mem.search("glaze").results] == ["memory/2026-03-04.md"]
        assert not mem.search("kiln").results
        (ws / "memory" / "2026-03-05.md").write_text("- ordered clay\n", encoding="utf-8")
        assert [r.path for r in mem.search("clay").results] == ["memory/2026-03-05.md"]
        (ws / "memory" / "2026-03-05.md").unlink()
        assert not mem.search("clay").results
        with Memory(ws, state_dir=str(tmp_path / "state"), config=cfg) as other:  # another writer
            (ws / "MEMORY.md").write_text("# Notes\n- the boiler code is 9902\n", encoding="utf-8")
            other.sync()
            assert mem.indexer.dirty_files(reuse=True) == ([], [])  # its rows moved with the file
            assert "9902" in mem.search("boiler").results[0].snippet
