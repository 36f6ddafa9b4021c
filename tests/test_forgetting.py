"""Forgetting forgets: text deleted from the notes (a note removed, a line edited away) is gone from
every file memdir derived from them, not only from search results.

Each test plants a unique marker, makes memdir forget it, then reads the raw bytes of every file
under the state folder (the index, its WAL, sidecars, caches) for the marker in any case (FTS5
keeps its terms folded to lower case)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memdir import Memory
from memdir.testing.provider_server import ProviderServer

MARKER = "ZQXforgetmarker4471"
OTHER = "QWVsecondmarker9203"


def remnants(root: Path, *markers: str) -> list[str]:
    """The files under ``root`` whose bytes hold any of ``markers`` (ASCII case ignored)."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes().lower()
            found += [f"{path.relative_to(root)}: {m}" for m in markers if m.lower().encode() in data]
    return found


def filler(n: int) -> dict[str, str]:
    """Notes enough that the index has pages the forgotten ones do not fill alone."""
    return {f"memory/2026-01-{i % 28 + 1:02d}-n{i}.md":
            f"# Note {i}\n\nOrdinary words about gardening number {i}, tomatoes and peppers.\n" for i in range(40)}


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer(dims=64) as srv:
        yield srv


def _remote_config(ws: Path, server: ProviderServer) -> None:
    (ws / "memdir.toml").write_text(
        '[memorySearch]\nprovider = "openai"\n'
        f'[memorySearch.remote]\nbaseUrl = "{server.url}/v1"\napiKey = "test-key"\n', encoding="utf-8")


def test_index_force_leaves_nothing_of_a_deleted_note_in_the_state_folder(
        make_workspace, state_dir: Path, server: ProviderServer) -> None:
    """The rebuild copies its rows into the live file (an index with an embedding cache): the old
    rows' pages were freed, not cleared, so the deleted note's text stayed in the index's bytes."""
    ws = make_workspace({**filler(40), "memory/2026-01-10.md": f"# Keys\n\nMy password is {MARKER} keep it.\n",
                         "memory/2026-01-11.md": f"# Other\n\nThe door code {OTHER} for the shed.\n"})
    _remote_config(ws, server)
    with Memory(ws) as mem:
        mem.sync()
        assert remnants(state_dir, MARKER, OTHER)  # (the test plants what it looks for)
        (ws / "memory/2026-01-10.md").unlink()
        (ws / "memory/2026-01-11.md").write_text("# Other\n\nThe shed is painted green.\n", encoding="utf-8")
        mem.sync(force=True)
        assert mem.status()["mode"] != "fts-only"
        assert not mem.search(MARKER, mode="keyword").results
    assert remnants(state_dir, MARKER, OTHER) == []


def test_a_sync_leaves_nothing_of_a_deleted_note_or_an_edited_away_line(make_workspace, state_dir: Path,
                                                                         keyword_config) -> None:
    """FTS5 hid a deleted row's words behind a marker and kept them in its segment until a merge
    (for a note indexed long ago, possibly never): the index's bytes still spelt the password."""
    ws = make_workspace({**filler(40), "memory/2026-01-10.md":
                         f"# Keys\n\nGardening.\n\nMy password is {MARKER} keep it.\n\nTomatoes.\n",
                         "memory/2026-01-11.md": f"# Other\n\nThe door code {OTHER} for the shed.\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        assert remnants(state_dir, MARKER, OTHER)  # (the test plants what it looks for)
        (ws / "memory/2026-01-10.md").write_text("# Keys\n\nGardening.\n\nTomatoes.\n", encoding="utf-8")
        (ws / "memory/2026-01-11.md").unlink()
        mem.sync()
        assert not mem.search(MARKER).results and not mem.search(OTHER).results
    assert remnants(state_dir, MARKER, OTHER) == []


def test_a_long_lived_memory_keeps_no_deleted_note_in_its_write_ahead_log(make_workspace, state_dir: Path,
                                                                           keyword_config) -> None:
    """The WAL keeps every page a write made: a memdir mcp or watch, which hold the index open
    for days, still spelt a deleted note out in ``<index>-wal`` (only the last close removed it)."""
    ws = make_workspace(filler(40))
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        (ws / "memory/2026-01-10.md").write_text(f"# Keys\n\nMy password is {MARKER} keep it.\n", encoding="utf-8")
        mem.sync()
        assert mem.search(MARKER).results
        (ws / "memory/2026-01-10.md").unlink()  # a removal alone: no note indexed by that sync
        mem.sync()
        assert not mem.search(MARKER).results
        assert remnants(state_dir, MARKER) == []


def test_ltm_forget_leaves_the_memory_in_no_file_and_no_older_version(tmp_path: Path) -> None:
    """LanceDB marks a deleted row deleted and keeps the versions before it (an hour at least, 64
    of them before a cleanup): the forgotten memory stayed spelt out in the table's data file and
    came back whole from an older version."""
    with _long_term(tmp_path) as ltm:
        for i in range(2):
            ltm.store(f"I like fruit number {i}, apples above all", category="preference")
        secret = ltm.store(f"My locker code is {MARKER}, remember it", category="fact").record
        ltm.store(f"The office door code is {OTHER} on weekdays", category="fact")
        assert ltm.forget(secret.id[:8]).action == "deleted"
        assert ltm.forget(query=f"The office door code is {OTHER} on weekdays").action == "deleted"
        assert len(ltm.list()) == 2 and not [r for r in ltm.search(MARKER, min_score=0) if MARKER in r.text]
        assert not [t for t in _every_version(ltm) if MARKER in t or OTHER in t]
    assert remnants(tmp_path / "state", MARKER, OTHER) == []


def _long_term(tmp_path: Path) -> Any:
    pytest.importorskip("lancedb")
    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory

    (tmp_path / "ws").mkdir()
    settings = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "state", agent_id="main").settings
    return LongTermMemory(settings, provider=AxisProvider())


def _every_version(ltm: Any) -> list[str]:
    """The texts a checkout of each version of the table left on disk gives back."""
    import lancedb

    table = lancedb.connect(str(ltm.db_path)).open_table("memories")
    texts = []
    for version in table.list_versions():
        table.checkout(version["version"])
        texts += table.to_arrow().column("text").to_pylist()
    return texts


def test_ltm_import_of_an_edited_bullet_leaves_nothing_of_the_old_text(tmp_path: Path) -> None:
    """A memory edited through an export (a pasted code taken out of the bullet) and imported back
    was rewritten in place, its old text kept in the row LanceDB marked deleted and in older
    versions, as a forget's was."""
    with _long_term(tmp_path) as ltm:
        ltm.store("I like apples above all fruit", category="preference")
        ltm.store(f"The gym locker code is {MARKER} on the left", category="fact")
        edited = ltm.export().replace(f"is {MARKER} on", "is on")
        assert MARKER not in edited and ltm.import_markdown(edited).updated
        assert [m.text for m in ltm.list()] == ["I like apples above all fruit", "The gym locker code is on the left"]
        assert not [t for t in _every_version(ltm) if MARKER in t]
    assert remnants(tmp_path / "state", MARKER) == []


def test_turning_secure_delete_on_neither_waits_for_another_writer_nor_fails_the_open(
        make_workspace, state_dir: Path, keyword_config) -> None:
    """Turning FTS5's secure-delete on in an index an earlier memdir wrote is a write: on a full
    disk (or behind another writer) it must not fail the open, which serves searches read-only."""
    import sqlean

    ws = make_workspace({**filler(5), "memory/2026-01-10.md": f"# Keys\n\nThe code {MARKER}.\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        index = mem.index_path
    conn = sqlean.connect(str(index), isolation_level=None)
    conn.execute("DELETE FROM chunks_fts_config WHERE k = 'secure-delete'")  # as an earlier memdir left it
    conn.execute("BEGIN IMMEDIATE")  # another writer holds the index
    try:
        with Memory(ws, config=keyword_config) as mem:
            assert [r.path for r in mem.search(MARKER, sync=False).results] == ["memory/2026-01-10.md"]
    finally:
        conn.execute("ROLLBACK")
    with Memory(ws, config=keyword_config) as mem:  # the writer gone: the deletion sets it
        (ws / "memory/2026-01-10.md").unlink()
        mem.sync()
    assert remnants(state_dir, MARKER) == []


def _secure_delete_on(index: Path) -> bool:
    import sqlean

    conn = sqlean.connect(str(index))
    try:
        row = conn.execute("SELECT 1 FROM chunks_fts_config WHERE k = 'secure-delete' AND v = 1").fetchone()
        return row is not None
    finally:
        conn.close()


def test_an_append_pays_no_secure_delete_and_an_edit_that_removes_words_does(make_workspace, state_dir: Path,
                                                                             keyword_config) -> None:
    """FTS5's secure-delete made every sync of an edited note 3x slower (64 against 19 ms of CPU at
    10k chunks), where the common edit, an append to today's log, re-indexes words that all stay
    in the index: only an edit that takes words out of a note (or a deletion) asks for it."""
    ws = make_workspace({**filler(5), "memory/2026-01-10.md": "# Log\n\nWatered the tomatoes.\n"})
    log = ws / "memory/2026-01-10.md"
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        log.write_text(log.read_text() + f"\nMy password is {MARKER} keep it.\n", encoding="utf-8")
        mem.sync()
        assert not _secure_delete_on(mem.index_path)
        assert [r.path for r in mem.search(MARKER).results] == ["memory/2026-01-10.md"]
        log.write_text("# Log\n\nWatered the tomatoes.\n", encoding="utf-8")
        mem.sync()
        assert _secure_delete_on(mem.index_path)
        assert not mem.search(MARKER).results
    assert remnants(state_dir, MARKER) == []
