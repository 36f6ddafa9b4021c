"""Workspaces on file systems that ignore the case of names (a USB drive's exFAT, a Windows or
macOS volume mounted here) and on case-sensitive ones holding names from them: every note is
read once, under the name memdir cites, and what a user types in another case still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import CaseInsensitiveFolder, cli_env
from memdir.config import workspace_index_name

KEYWORDS = '[memorySearch]\nprovider = "none"\n'


@pytest.fixture
def nocase(tmp_path: Path) -> Iterator[Path]:
    """A workspace folder on a mounted exFAT image (names' case ignored, kept as written)."""
    folder = CaseInsensitiveFolder(tmp_path / "exfat.img", tmp_path / "mnt")
    try:
        ws = folder.root / "ws"
        ws.mkdir()
        yield ws
    finally:
        folder.close()


def _cli(state_dir: Path, ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memdir", "--workspace", str(ws), *args],
                          capture_output=True, text=True, timeout=120, env=cli_env(state_dir))


def test_memory_md_on_a_case_insensitive_folder_is_indexed_once(nocase: Path, tmp_path: Path):
    """Where ``MEMORY.md`` and ``memory.md`` open the same file, each with an inode of its own
    (FUSE), the note was indexed under both names and every search answered it twice."""
    (nocase / "memdir.toml").write_text(KEYWORDS)
    (nocase / "Memory.md").write_text("# Memory\n\nThe pagination decision: cursor based.\n")
    (nocase / "memory").mkdir()
    (nocase / "memory" / "2026-01-02.md").write_text("Cursor pagination shipped today.\n")
    state = tmp_path / "state"
    index = _cli(state, nocase, "index", "--json")
    assert index.returncode == 0, index.stderr
    out = _cli(state, nocase, "search", "--json", "cursor pagination")
    assert out.returncode == 0, out.stderr
    paths = sorted(r["path"] for r in json.loads(out.stdout)["results"])
    assert paths == ["MEMORY.md", "memory/2026-01-02.md"]


def test_lowercase_memory_md_there_is_cited_by_its_own_name(nocase: Path, tmp_path: Path):
    (nocase / "memdir.toml").write_text(KEYWORDS)
    (nocase / "memory.md").write_text("The okapi lives in the forest.\n")
    state = tmp_path / "state"
    out = _cli(state, nocase, "search", "--json", "okapi")
    assert out.returncode == 0, out.stderr
    assert [r["path"] for r in json.loads(out.stdout)["results"]] == ["memory.md"]


def test_both_root_files_on_a_case_sensitive_folder_are_both_memory(make_workspace, tmp_path: Path):
    """As OpenClaw: two files, two notes (only one file reached by two names is one note)."""
    ws = make_workspace({"MEMORY.md": "The okapi lives in the forest.\n",
                         "memory.md": "The okapi eats leaves.\n", "memdir.toml": KEYWORDS})
    out = _cli(tmp_path / "state", ws, "search", "--json", "okapi")
    assert out.returncode == 0, out.stderr
    assert sorted(r["path"] for r in json.loads(out.stdout)["results"]) == ["MEMORY.md", "memory.md"]


def test_the_watcher_indexes_an_edit_of_memory_md_in_another_case(nocase: Path):
    """There a change is named by the name the file has (``Memory.md``), which the watcher took for
    no memory file: the edit waited for the next search or ``memdir index``."""
    import time

    from memdir.api import Memory

    note = nocase / "Memory.md"
    note.write_text("Prefers the aisle seat.\n")
    os.utime(note, (1_700_000_000, 1_700_000_000))  # settled: the watcher has no reason to look again
    mem = Memory(nocase, config={"memorySearch": {"provider": "none"}})
    try:
        mem.sync()
        events: list[dict] = []
        assert mem.watch(on_event=events.append, debounce_ms=100).ready.wait(30)  # caught up, watching
        deadline = time.monotonic() + 30
        note.write_text("Prefers the gondola now.\n")
        while not [r.path for r in mem.search("gondola", sync=False).results]:
            assert time.monotonic() < deadline, f"the edit of Memory.md was never indexed: {events}"
            time.sleep(0.05)
        assert [r.path for r in mem.search("gondola", sync=False).results] == ["MEMORY.md"], events
    finally:
        mem.close()


def test_the_watcher_indexes_an_edit_in_a_memory_folder_named_in_another_case(nocase: Path):
    """Through FUSE the watch of ``memory/`` is not the folder ``Memory/`` that editors write in:
    its edits waited for the next search or ``memdir index``."""
    import time

    from memdir.api import Memory

    (nocase / "Memory").mkdir()
    note = nocase / "Memory" / "2026-01-01.md"
    note.write_text("Prefers the aisle seat.\n")
    os.utime(note, (1_700_000_000, 1_700_000_000))
    mem = Memory(nocase, config={"memorySearch": {"provider": "none"}})
    try:
        mem.sync()
        events: list[dict] = []
        assert mem.watch(on_event=events.append, debounce_ms=100).ready.wait(30)
        deadline = time.monotonic() + 30
        with open(note, "a") as fh:
            fh.write("Booked the gondola.\n")
        while not [r.path for r in mem.search("gondola", sync=False).results]:
            assert time.monotonic() < deadline, f"the edit in Memory/ was never indexed: {events}"
            time.sleep(0.05)
        assert [r.path for r in mem.search("gondola", sync=False).results] == ["memory/2026-01-01.md"]
    finally:
        mem.close()


def test_a_change_to_a_root_note_or_memory_folder_in_another_case_is_watched(tmp_path: Path):
    from memdir.watch import WatchPlan

    ws = tmp_path / "ws"
    (ws / "Memory").mkdir(parents=True)
    plan = WatchPlan(ws, [], None)
    assert plan.file_matters(str(ws / "Memory.md")) and plan.file_matters(str(ws / "MEMORY.md"))
    assert plan.folder_matters(str(ws / "Memory"), set())
    assert not plan.file_matters(str(ws / "Memory.txt")) and not plan.folder_matters(str(ws / "Notes"), set())


def test_a_note_ending_in_upper_case_md_is_named_not_silently_left_out(make_workspace, tmp_path: Path):
    """As in OpenClaw only ``.md`` in lower case is memory; ``memory/2026-01-02.MD`` (a Windows
    tool's name) was searched nowhere without a word, and ``get`` called it 'not a Markdown file'."""
    ws = make_workspace({"MEMORY.md": "x\n", "memory/2026-01-02.MD": "The knot feeds.\n",
                         "memory/._2026-01-03.MD": "", "memdir.toml": KEYWORDS})
    state = tmp_path / "state"
    index = _cli(state, ws, "index", "--json")
    assert index.returncode == 0, index.stderr
    status = _cli(state, ws, "status", "--json")
    assert json.loads(status.stdout)["skipped"] == [
        {"path": "memory/2026-01-02.MD",
         "error": "not memory: only names ending in .md (lower case) are (rename it to 2026-01-02.md)"}]
    got = _cli(state, ws, "get", "memory/2026-01-02.MD")
    assert got.returncode != 0
    assert ("not memory: memory/2026-01-02.MD (only names ending in .md, in lower case, are memory: "
            "rename it to 2026-01-02.md)") in got.stderr


def test_a_memory_folder_in_another_case_beside_memory_is_still_named(make_workspace, tmp_path: Path):
    """``Memory/`` synced from a Mac was named 'not memory' until ``memdir append`` made
    ``memory/`` beside it: from then on its notes were left out without a word."""
    ws = make_workspace({"MEMORY.md": "x\n", "Memory/2026-01-01.md": "The stint feeds.\n", "memdir.toml": KEYWORDS})
    state = tmp_path / "state"
    assert _cli(state, ws, "append", "A new note.").returncode == 0
    index = _cli(state, ws, "index", "--json")
    assert index.returncode == 0, index.stderr
    assert json.loads(index.stdout)["skipped"] == [
        {"path": "Memory", "error": "not memory: names are case-sensitive here (merge it into memory/)"}]


def test_the_memory_folder_reached_in_another_case_is_not_named(nocase: Path, tmp_path: Path):
    (nocase / "memdir.toml").write_text(KEYWORDS)
    (nocase / "Memory").mkdir()
    (nocase / "Memory" / "2026-01-01.md").write_text("The stint feeds.\n")
    index = _cli(tmp_path / "state", nocase, "index", "--json")
    assert index.returncode == 0, index.stderr
    report = json.loads(index.stdout)
    assert (report["indexed"], report["skipped"]) == (1, [])


def test_the_whole_workspace_as_an_extra_path_there_reads_each_note_once(nocase: Path, tmp_path: Path):
    """With ``extraPaths = ["."]`` the walk of the workspace reaches ``Memory/x.md`` by the name it
    has, the memory folder's walk ``memory/x.md``: through FUSE two inodes, two notes, each
    answered twice."""
    (nocase / "memdir.toml").write_text(KEYWORDS + 'extraPaths = ["."]\n')
    (nocase / "Memory.md").write_text("Notes about the okapi.\n")
    (nocase / "Memory").mkdir()
    (nocase / "Memory" / "2026-01-01.md").write_text("Daily okapi.\n")
    (nocase / "ideas.md").write_text("An okapi idea.\n")
    out = _cli(tmp_path / "state", nocase, "search", "--json", "okapi")
    assert out.returncode == 0, out.stderr
    assert sorted(r["path"] for r in json.loads(out.stdout)["results"]) == [
        "MEMORY.md", "ideas.md", "memory/2026-01-01.md"]


def test_a_workspace_given_in_another_case_is_the_same_workspace(nocase: Path, tmp_path: Path):
    """``-w ~/Notes`` for ``~/notes`` (macOS, a USB drive) keyed a second index, transcripts and
    long-term memory of the same folder: memories stored through one spelling were missing
    through the other."""
    (nocase / "memdir.toml").write_text(KEYWORDS)
    (nocase / "MEMORY.md").write_text("The okapi lives in the forest.\n")
    os.utime(nocase / "MEMORY.md", (1_700_000_000, 1_700_000_000))  # settled: not to be read again
    other = nocase.parent / "WS"
    state = tmp_path / "state"
    assert _cli(state, nocase, "index").returncode == 0
    out = _cli(state, other, "status", "--json")
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert (st["workspace"], st["dirty"]) == (str(nocase), False)
    assert sorted(p.name for p in (state / "memory").glob("*.sqlite")) == [
        f"{workspace_index_name(nocase)}.sqlite"]


def test_state_kept_under_the_key_of_another_case_is_pointed_to(nocase: Path, tmp_path: Path):
    """What earlier versions kept under the key of ``WS`` (the same folder as ``ws`` there) is
    named by status, with the move that gives it back."""
    import sqlite3

    (nocase / "memdir.toml").write_text(KEYWORDS)
    (nocase / "MEMORY.md").write_text("x\n")
    other = nocase.parent / "WS"
    state = tmp_path / "state"
    old_key = workspace_index_name(other)
    (state / "memory").mkdir(parents=True)
    (state / "ltm" / old_key / "memories.lance").mkdir(parents=True)
    with sqlite3.connect(state / "memory" / f"{old_key}.sqlite") as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('memdir:owner', ?)", (json.dumps(str(other)),))
    conn.close()
    out = _cli(state, nocase, "status", "--json")
    assert out.returncode == 0, out.stderr
    assert (f"transcripts and long-term memories of this workspace, given as {other} (the same folder in another "
            f"case), are kept under the key {old_key}: mv {state / 'ltm' / old_key} "
            f"{state / 'ltm' / workspace_index_name(nocase)}") in json.loads(out.stdout)["issues"]


def test_an_agent_index_claimed_by_the_workspace_in_another_case_is_its_own(nocase: Path, tmp_path: Path):
    """An index made for ``--agent a -w …/WS`` records that spelling; through FUSE the two names
    are two inodes, and ``-w …/ws`` was refused: 'belongs to workspace …/WS, not …/ws'."""
    import sqlite3

    (nocase / "memdir.toml").write_text(KEYWORDS)
    (nocase / "MEMORY.md").write_text("x\n")
    state = tmp_path / "state"
    assert _cli(state, nocase, "--agent", "a", "index").returncode == 0
    index = state / "memory" / "a.sqlite"
    with sqlite3.connect(index) as conn:  # as an earlier version, given -w …/WS, recorded it
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'memory_index_meta_v1'").fetchone()
        meta = json.loads(value)
        meta["workspace"] = str(nocase.parent / "WS")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'memory_index_meta_v1'", (json.dumps(meta),))
    conn.close()
    out = _cli(state, nocase, "--agent", "a", "index")
    assert out.returncode == 0, out.stderr


def test_memory_get_of_the_root_note_in_the_other_case_cites_the_listed_name(nocase: Path, make_workspace):
    """Where ``memory.md`` is the one note, ``get("MEMORY.md")`` read it but named it
    ``MEMORY.md``, a second name for what searches cite as ``memory.md``."""
    from memdir.api import Memory

    (nocase / "memory.md").write_text("The okapi lives in the forest.\n")
    with Memory(nocase, config={"memorySearch": {"provider": "none"}}) as mem:
        got = mem.get("MEMORY.md")
        assert (got.path, got.text) == ("memory.md", "The okapi lives in the forest.\n")
        assert [r.path for r in mem.search("okapi").results] == ["memory.md"]
    ws = make_workspace({"MEMORY.md": "upper\n", "memory.md": "lower\n"})  # case kept: two notes
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        assert [(g.path, g.text) for g in (mem.get("MEMORY.md"), mem.get("memory.md"))] == [
            ("MEMORY.md", "upper\n"), ("memory.md", "lower\n")]
