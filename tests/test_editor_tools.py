"""Notes as editors, sync tools and version control leave them: what they keep beside a note (a
deleted copy, an old version, a temporary file) is never found as the note itself.

Real files in a temp workspace, real SQLite, a real watcher (inotify) where it matters.
"""

from __future__ import annotations

import os
import time

from memdir.api import Memory

KEYWORDS = {"memorySearch": {"provider": "none"}}


def found(mem: Memory, query: str, *, sync: bool = True) -> list[str]:
    return sorted({r.path for r in mem.search(query, sync=sync).results})


def eventually(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"the watcher never got there: {what}")
        time.sleep(0.05)


def test_deleted_and_superseded_copies_that_tools_keep_are_not_notes(make_workspace) -> None:
    """Obsidian moves a deleted note to ``.trash/``, Syncthing keeps each overwritten version in
    ``.stversions/`` (``note~20260101-120000.md``), Dropbox its cache in ``.dropbox.cache/``, all
    under the note's own ``.md`` name: a search found the deleted or old text as if current."""
    ws = make_workspace({
        "memory/trip.md": "The ferry now leaves at nine.\n",
        "memory/.trash/old-plan.md": "The ferry leaves at seven (deleted plan).\n",
        "memory/.stversions/trip~20260101-120000.md": "The ferry leaves at eight (old version).\n",
        "memory/.dropbox.cache/2026-01-01/trip (deleted 1234).md": "The ferry leaves at six.\n",
    })
    with Memory(ws, config=KEYWORDS) as mem:
        report = mem.sync()
        assert report.indexed == 1
        assert found(mem, "ferry") == ["memory/trip.md"]
        assert found(mem, "seven") == found(mem, "eight") == found(mem, "six") == []
        assert mem.status()["files"] == 1


def test_a_note_deleted_in_obsidian_leaves_the_search_results_of_a_watcher(make_workspace) -> None:
    """Obsidian deletes a note by moving it into the vault's ``.trash/``: the watcher synced, found
    it there and indexed it again, so the deleted note kept answering searches."""
    ws = make_workspace({"memory/keep.md": "Aisle seat.\n", "memory/draft.md": "The quokka plan is off.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        events: list[dict] = []
        watcher = mem.watch(on_event=events.append, debounce_ms=50)
        assert watcher.ready.wait(30)
        (ws / "memory" / ".trash").mkdir()
        os.rename(ws / "memory" / "draft.md", ws / "memory" / ".trash" / "draft.md")
        eventually(lambda: not watcher.pending and any(e["event"] == "sync" for e in events), "a sync")
        eventually(lambda: found(mem, "quokka", sync=False) == [], "the deleted note gone", timeout=20)
        assert mem.status()["files"] == 1
