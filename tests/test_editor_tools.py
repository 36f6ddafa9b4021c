"""Notes as editors, sync tools and version control leave them: what they keep beside a note (a
deleted copy, an old version, a temporary file) is never found as the note itself.

Real files in a temp workspace, real SQLite, a real watcher (inotify) where it matters.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from helpers import run_git
from memdir.api import Memory
from memdir.errors import MemdirError

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
    ``.stversions/`` (``note~20260101-120000.md``), Dropbox its cache in ``.dropbox.cache/``, an
    interrupted ``rsync --delay-updates`` the new half copy in ``.~tmp~/``, all under the note's
    ``.md`` name: a search found the deleted, old or half text as if current."""
    ws = make_workspace({
        "memory/trip.md": "The ferry now leaves at nine.\n",
        "memory/.trash/old-plan.md": "The ferry leaves at seven (deleted plan).\n",
        "memory/.stversions/trip~20260101-120000.md": "The ferry leaves at eight (old version).\n",
        "memory/.dropbox.cache/2026-01-01/trip (deleted 1234).md": "The ferry leaves at six.\n",
        "memory/.~tmp~/trip.md": "The ferry leaves from wharf gam",  # rsync --delay-updates, interrupted
    })
    with Memory(ws, config=KEYWORDS) as mem:
        report = mem.sync()
        assert report.indexed == 1
        assert found(mem, "ferry") == ["memory/trip.md"]
        assert found(mem, "seven") == found(mem, "eight") == found(mem, "six") == found(mem, "wharf") == []
        assert mem.status()["files"] == 1


def test_deleted_and_old_copies_other_sync_tools_and_note_apps_keep_are_not_notes(make_workspace, tmp_path) -> None:
    """Logseq moves a deleted page to ``logseq/.recycle/`` and keeps earlier versions in
    ``logseq/bak/`` and ``logseq/version-files/``; MEGA keeps deleted and overwritten files in
    ``.debris/``, Resilio Sync in ``.sync/Archive/``, VS Code's Local History in ``.history/``; a
    file manager's trash on a shared or removable drive is ``.Trash-1000/``, ``.Trashes/``,
    ``$RECYCLE.BIN/``, ``#recycle/`` or ``@Recycle/``.  All under the notes' ``.md`` names: a
    search found the deleted or old text as if current, and the watcher watched those folders.
    A ``bak/`` folder of one's own (not Logseq's) is notes."""
    from memdir.watch import WatchPlan

    old = "The ferry leaves at seven (deleted or old).\n"
    graph = tmp_path / "graph"
    for rel, text in {"pages/trip.md": "The ferry now leaves at nine.\n", "logseq/config.edn": "{}\n",
                      "logseq/.recycle/pages_trip.md": old, "logseq/bak/pages/trip/2026-01-01T10_00_00.md": old,
                      "logseq/version-files/base/pages/trip.md": old}.items():
        (graph / rel).parent.mkdir(parents=True, exist_ok=True)
        (graph / rel).write_text(text)
    ws = make_workspace({
        "memory/trip.md": "The ferry now leaves at nine.\n",
        "memory/bak/ideas.md": "Kiwi jam.\n",
        "memory/.debris/2026-01-01/trip.md": old,
        "memory/.sync/Archive/trip.md": old,
        "memory/.history/trip_20260101120000.md": old,
        "memory/.Trash-1000/files/trip.md": old,
        "memory/.Trashes/501/trip.md": old,
        "memory/$RECYCLE.BIN/S-1-5-21/$Rtrip.md": old,
        "memory/#recycle/trip.md": old,
        "memory/@Recycle/trip.md": old,
    })
    with Memory(ws, config={**KEYWORDS, "memorySearch": {"provider": "none", "extraPaths": [str(graph)]}}) as mem:
        report = mem.sync()
        assert report.indexed == 3
        assert found(mem, "ferry") == ["../graph/pages/trip.md", "memory/trip.md"]
        assert found(mem, "seven") == []
        assert found(mem, "kiwi") == ["memory/bak/ideas.md"]
        watched = WatchPlan(ws, [graph], None).folders()
    assert sorted(os.path.relpath(f, tmp_path) for f in watched) == [
        "graph", "graph/logseq", "graph/pages", "ws", "ws/memory", "ws/memory/bak"]


def test_the_settings_folders_of_obsidian_and_foam_in_a_vault_are_not_notes(make_workspace, tmp_path) -> None:
    """A vault in extraPaths holds its app's settings: Obsidian's ``.obsidian/`` (a plugin installed
    from its repository brings its README and changelog; a second config folder such as
    ``.obsidian-mobile``), Foam's ``.foam/templates/``.  They were indexed and watched as the
    user's notes: a search for "kubernetes" cited a plugin's README.  The folder listed in
    extraPaths itself is still walked."""
    from memdir.watch import WatchPlan

    vault = tmp_path / "vault"
    for rel, text in {"Infra.md": "We run kubernetes on three nodes.\n",
                      ".obsidian/app.json": "{}\n", ".obsidian/workspace.json": '{"main": {}}\n',
                      ".obsidian/plugins/k8s-helper/README.md": "# k8s helper\nRender kubernetes manifests.\n",
                      ".obsidian/plugins/k8s-helper/manifest.json": "{}\n",
                      ".obsidian-mobile/plugins/x/CHANGELOG.md": "Fixed kubernetes icons.\n",
                      ".foam/templates/new-note.md": "# ${FOAM_TITLE}\nkubernetes checklist\n"}.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text)
    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none", "extraPaths": [str(vault)]}}) as mem:
        assert mem.sync().indexed == 2
        assert found(mem, "kubernetes") == ["../vault/Infra.md"]
        watched = WatchPlan(ws, [vault], None).folders()
    assert sorted(os.path.relpath(f, tmp_path) for f in watched) == ["vault", "ws", "ws/memory"]
    templates = vault / ".foam" / "templates"
    with Memory(ws, config={"memorySearch": {"provider": "none", "extraPaths": [str(vault), str(templates)]}}) as mem:
        assert found(mem, "kubernetes") == ["../vault/.foam/templates/new-note.md", "../vault/Infra.md"]


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


@pytest.mark.parametrize("link", ["emacs lock", "loop"])
def test_a_polling_watcher_is_not_misled_by_an_emacs_lock_or_a_symlink_loop(make_workspace, monkeypatch,
                                                                            link: str) -> None:
    """watchfiles polls instead of taking file events on WSL 2 and with WATCHFILES_FORCE_POLLING,
    and its polling follows symlinks: Emacs's lock ``.#note.md`` (a link to nowhere) was reported
    deleted at every poll, a sync a second while the note was open in Emacs, and a symlink loop
    failed the whole watch every second, so no edit was ever indexed by the watcher."""
    monkeypatch.setenv("WATCHFILES_FORCE_POLLING", "1")
    ws = make_workspace({"memory/a.md": "Apple pie.\n"})
    name = ".#a.md" if link == "emacs lock" else "loop"
    (ws / "memory" / name).symlink_to("ann@laptop.4242:1700000000" if link == "emacs lock" else name)
    events: list[dict] = []
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        watcher = mem.watch(on_event=events.append, debounce_ms=50)
        assert watcher.ready.wait(30)
        (ws / "memory" / "b.md").write_text("Banana bread.\n")
        eventually(lambda: found(mem, "banana", sync=False) == ["memory/b.md"], "the new note indexed", timeout=30)
        time.sleep(2.5)  # two more polls: none may report the link
        watcher.stop()
    assert [e for e in events if e["event"] == "error"] == []
    assert [e["path"] for e in events if e["event"] == "change"] == ["memory/b.md"]


def _evict(note: Path) -> None:
    """What iCloud Drive does to a note it evicts ("Optimize Mac Storage"): the file goes, a small
    hidden placeholder ``.<name>.icloud`` stays in its place."""
    (note.parent / f".{note.name}.icloud").write_bytes(b"bplist00\xd1\x01\x02")
    note.unlink()


def test_a_note_icloud_evicted_stays_found_until_it_is_downloaded_again(make_workspace) -> None:
    """Evicted, a note was removed from the index: the user's note (still in iCloud, downloaded
    when opened) was no longer found by any search.  It is kept now, and status says why."""
    ws = make_workspace({"MEMORY.md": "Prefers the aisle seat.\n", "memory/trip.md": "The ferry leaves at nine.\n",
                         "memory/other.md": "Apple pie.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        _evict(ws / "memory" / "trip.md")
        _evict(ws / "MEMORY.md")
        assert mem.sync().removed == 0
        assert found(mem, "ferry") == ["memory/trip.md"]
        assert found(mem, "aisle") == ["MEMORY.md"]
        status = mem.status()
        assert status["removedCount"] == 0 and status["files"] == 3
        why = {s["path"]: s["error"] for s in status["skipped"]}
        assert "evicted by iCloud" in why["memory/trip.md"] and "evicted by iCloud" in why["MEMORY.md"]
        # downloaded again, edited elsewhere meanwhile: the new text is indexed
        (ws / "memory" / ".trip.md.icloud").unlink()
        (ws / "memory" / "trip.md").write_text("The ferry leaves at ten.\n")
        mem.sync()
        assert found(mem, "ten") == ["memory/trip.md"] and found(mem, "nine") == []
        # deleted while evicted (the placeholder goes too): removed
        _evict(ws / "memory" / "trip.md")
        mem.sync()
        (ws / "memory" / ".trip.md.icloud").unlink()
        assert mem.sync().removed == 1
        assert found(mem, "ferry") == []


def test_a_note_nextcloud_freed_stays_found_until_it_is_downloaded_again(make_workspace) -> None:
    """Nextcloud's and ownCloud's desktop clients free a note's local copy ("virtual files") by
    leaving ``<name>.nextcloud`` (``.owncloud``) in its place: as with iCloud's placeholders, the
    note was removed from the index and dropped out of every search, though it is still there."""
    ws = make_workspace({"MEMORY.md": "Prefers the aisle seat.\n", "memory/trip.md": "The ferry leaves at nine.\n",
                         "memory/other.md": "Apple pie.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        (ws / "memory" / "trip.md").unlink()
        (ws / "memory" / "trip.md.nextcloud").write_bytes(b"\x00")
        (ws / "MEMORY.md").unlink()
        (ws / "MEMORY.md.owncloud").write_bytes(b"\x00")
        assert mem.sync().removed == 0
        assert found(mem, "ferry") == ["memory/trip.md"] and found(mem, "aisle") == ["MEMORY.md"]
        why = {s["path"]: s["error"] for s in mem.status()["skipped"]}
        assert why["memory/trip.md"].startswith("evicted by Nextcloud (only its placeholder is on this disk)")
        assert why["MEMORY.md"].startswith("evicted by ownCloud")
        watcher = mem.watch(debounce_ms=50)  # deleted while freed: its placeholder goes, and so does the note
        assert watcher.ready.wait(30)
        (ws / "memory" / "trip.md.nextcloud").unlink()
        eventually(lambda: found(mem, "ferry", sync=False) == [], "the deleted note gone", timeout=20)


def test_a_watcher_removes_a_note_deleted_while_icloud_had_evicted_it(make_workspace) -> None:
    """Deleting an evicted note removes only its placeholder: the watcher took that for no note of
    its own and never synced, so the deleted note stayed in the index."""
    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n", "memory/other.md": "Apple pie.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        _evict(ws / "memory" / "trip.md")
        mem.sync()
        assert found(mem, "ferry", sync=False) == ["memory/trip.md"]
        watcher = mem.watch(debounce_ms=50)
        assert watcher.ready.wait(30)
        (ws / "memory" / ".trip.md.icloud").unlink()
        eventually(lambda: found(mem, "ferry", sync=False) == [], "the deleted note gone", timeout=20)


def test_a_note_or_folder_replaced_by_a_symlink_is_named_not_silently_dropped(make_workspace, tmp_path: Path) -> None:
    """A note moved to a synced drive and linked back, or a folder of notes linked in: symlinks are
    never followed, but inside ``memory/`` they were left out without a word (only a linked
    ``MEMORY.md`` or ``memory/`` was named), and the note silently vanished from every search.
    Emacs's lock files (``.#note.md``, links to nowhere) are no notes and stay unnamed, as do
    other hidden links and links to other files."""
    from memdir.workspace import discover

    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n", "memory/other.md": "Apple pie.\n"})
    drive = tmp_path / "drive"
    (drive / "projects").mkdir(parents=True)
    (drive / "projects" / "plan.md").write_text("Launch in May.\n")
    (drive / "photo.png").write_bytes(b"\x89PNG")
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        os.replace(ws / "memory" / "trip.md", drive / "trip.md")
        (ws / "memory" / "trip.md").symlink_to(drive / "trip.md")
        (ws / "memory" / "projects").symlink_to(drive / "projects")
        (ws / "memory" / "photo.png").symlink_to(drive / "photo.png")
        (ws / "memory" / ".#other.md").symlink_to("user@host.4242:1700000000")
        (ws / "memory" / ".obsidian").symlink_to(drive)
        report = mem.sync()
        assert report.removed == 1 and found(mem, "ferry") == []
        why = {s["path"]: s["error"] for s in mem.status()["skipped"]}
        assert sorted(why) == ["memory/projects", "memory/trip.md"]
        assert why["memory/trip.md"].startswith("a symlink (not followed: keep the file itself")
        assert why["memory/projects"].startswith("a symlink (not followed: keep the folder itself")
        assert [s["path"] for s in report.skipped] == ["memory/projects", "memory/trip.md"]
    # a listing holding only symlinks is still reused by the check before each search
    assert discover(ws).folders is not None


def _apple_double(xattr: bytes) -> bytes:
    """The ``._<name>`` file macOS writes beside a file on a volume that cannot hold its metadata:
    an AppleDouble header (magic, version, "Mac OS X" filler, two entries), then the entries."""
    import struct

    attr = b"ATTR" + b"\x00" * 30 + xattr
    return (b"\x00\x05\x16\x07" + b"\x00\x02\x00\x00" + b"Mac OS X        " + struct.pack(">H", 2)
            + struct.pack(">III", 9, 50, len(attr)) + struct.pack(">III", 2, 50 + len(attr), 286)
            + attr + b"\x00" * 286)


def test_macos_metadata_files_beside_notes_are_not_notes(make_workspace) -> None:
    """Notes copied from a Mac (a network share, a USB drive, a tar or zip) come with a binary
    ``._note.md`` each: those were indexed, and a search for "Safari" cited ``memory/._trip.md``
    with a snippet of NUL bytes.  A note that merely has such a name is still indexed."""
    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n",
                         "memory/._real.md": "A note named oddly: kiwi.\n"})
    (ws / "memory" / "._trip.md").write_bytes(_apple_double(b"com.apple.quarantine\x000083;65a1b2c3;Safari;"))
    with Memory(ws, config=KEYWORDS) as mem:
        report = mem.sync()
        assert report.indexed == 2 and report.skipped == []
        assert found(mem, "Safari quarantine") == []
        assert found(mem, "kiwi") == ["memory/._real.md"]
        assert mem.status()["files"] == 2


def test_macos_metadata_beside_a_transcript_is_no_transcript(make_workspace, tmp_path) -> None:
    """A sessions folder copied from a Mac (a share, a tar) holds ``._t.jsonl`` beside ``t.jsonl``:
    it was indexed as a transcript (no messages) and counted in status's files."""
    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n"})
    cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                            "experimental": {"sessionMemory": True}}}
    with Memory(ws, state_dir=tmp_path / "state", config=cfg) as mem:
        folder = mem.settings.sessions_dir
        folder.mkdir(parents=True)
        (folder / "t.jsonl").write_text('{"type":"message","message":{"role":"user","content":"the pelican"}}\n')
        (folder / "._t.jsonl").write_bytes(_apple_double(b"com.apple.quarantine\x000083;65a1b2c3;Safari;"))
        report = mem.sync()
        assert (report.scanned, report.indexed, report.skipped) == (2, 2, [])
        assert mem.status()["files"] == 2
        assert found(mem, "pelican") == ["sessions/t.jsonl"]


def test_an_emacs_lock_that_is_a_regular_file_is_not_a_note(make_workspace) -> None:
    """Where the file system has no symlinks (exFAT, FAT, many SMB shares) Emacs locks a note it
    edits with a regular file ``.#note.md`` holding ``user@host.pid:boot``: it was indexed while
    the note was open, a search for the user or host citing it.  A note that merely has such a
    name is still indexed."""
    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n",
                         "memory/.#trip.md": "ann@laptop.example.org.4242:1700000000",
                         "memory/sub/.#plan.md": "ann@laptop.31337\n",
                         "memory/.#real.md": "A note named oddly: ann@laptop kiwi.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        report = mem.sync()
        assert report.indexed == 2 and report.skipped == []
        assert found(mem, "laptop") == ["memory/.#real.md"]
        assert mem.status()["files"] == 2


class _VanishingListing:
    """``os.scandir`` as when ``git checkout`` deletes while a sync lists: the folder ``gone`` is
    deleted just before it is entered, the note ``going`` just after its folder was listed."""

    def __init__(self, real, gone: Path, going: Path) -> None:
        self.real, self.gone, self.going = real, gone, going

    def __call__(self, path):
        import contextlib
        import shutil

        if isinstance(path, int):  # (a folder descriptor: not a listing of discovery's)
            return self.real(path)
        if Path(path) == self.gone:
            shutil.rmtree(path, ignore_errors=True)
        with self.real(path) as it:
            entries = list(it)
        if Path(path) == self.going.parent:
            with contextlib.suppress(FileNotFoundError):
                self.going.unlink()
        return contextlib.nullcontext(iter(entries))


def test_folders_and_notes_deleted_while_a_sync_lists_them_are_gone_not_unreadable(make_workspace,
                                                                                  monkeypatch) -> None:
    """A sync that ran during a ``git checkout`` (the watcher's after five debounces, the check
    before a search, ``memdir index``) reported each folder and note deleted under it as
    "folder not readable: No such file or directory", and status kept listing them as skipped
    files after the sync, though nothing was wrong."""
    from memdir import workspace

    ws = make_workspace({"memory/keep.md": "Aisle seat.\n", "memory/old/a.md": "Apple pie.\n",
                         "memory/sub/b.md": "Banana bread.\n", "memory/sub/c.md": "Cherry tart.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        monkeypatch.setattr(workspace.os, "scandir",
                            _VanishingListing(os.scandir, ws / "memory" / "old", ws / "memory" / "sub" / "b.md"))
        report = mem.sync()
        monkeypatch.undo()
        assert report.skipped == [] and report.removed == 2
        assert found(mem, "apple") == found(mem, "banana") == []
        assert found(mem, "cherry") == ["memory/sub/c.md"]
        status = mem.status()
        assert status["skipped"] == [] and status["issues"] == [] and not status["dirty"]


def test_a_sync_conflict_copy_of_memory_md_is_named_not_silently_left_out(make_workspace, run_cli) -> None:
    """Two machines changed MEMORY.md: Syncthing (or Dropbox, Nextcloud) keeps the other one's
    version beside it as a conflict copy.  At the top of the workspace only MEMORY.md is memory,
    so that version was never searched and nothing said so; status names it now."""
    ws = make_workspace({
        "MEMORY.md": "Prefers the aisle seat.\n",
        "MEMORY.sync-conflict-20260112-093000-ABCDEFG.md": "Prefers the window seat.\n",
        "MEMORY (Ann's conflicted copy 2026-01-12).md": "Prefers the middle seat.\n",
        "memory/trip.sync-conflict-20260112-093000-ABCDEFG.md": "The ferry leaves at nine.\n",  # a note
        "notes-conflict.md": "Not memory at all.\n",
    })
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        assert found(mem, "ferry") == ["memory/trip.sync-conflict-20260112-093000-ABCDEFG.md"]
        skipped = {s["path"]: s["error"] for s in mem.status()["skipped"]}
    assert sorted(skipped) == ["MEMORY (Ann's conflicted copy 2026-01-12).md",
                               "MEMORY.sync-conflict-20260112-093000-ABCDEFG.md"]
    assert all("conflict copy of MEMORY.md" in why for why in skipped.values())
    out = run_cli("--workspace", str(ws), "--config", str(_keyword_file(ws)), "status").stdout
    assert "MEMORY.sync-conflict-20260112-093000-ABCDEFG.md: a sync tool's conflict copy" in out


def test_icloud_and_google_drive_copies_of_memory_md_are_named_not_silently_left_out(make_workspace) -> None:
    """iCloud Drive keeps the other machine's version of a file both changed as ``MEMORY 2.md``,
    Google Drive as ``MEMORY (1).md``: left out of every search (only MEMORY.md is memory at the
    top) and named nowhere.  A note of one's own beside it (``MEMORY 2025.md``?) is left alone."""
    ws = make_workspace({"MEMORY.md": "Prefers the aisle seat.\n", "MEMORY 2.md": "Prefers the window seat.\n",
                         "MEMORY (1).md": "Prefers the middle seat.\n", "MEMORY 2025.md": "Plans.\n",
                         "MEMORY 0.md": "Zero.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        skipped = {s["path"]: s["error"] for s in mem.status()["skipped"]}
    assert sorted(skipped) == ["MEMORY (1).md", "MEMORY 2.md"]
    assert all(why.startswith("a copy of MEMORY.md (iCloud's or Google Drive's name for a conflicting version)")
               for why in skipped.values())


def test_a_sync_conflict_copy_of_an_extra_file_is_named_not_silently_left_out(make_workspace, tmp_path) -> None:
    """extraPaths lists a file in a synced folder (``~/Dropbox/team/decisions.md``): the copy a sync
    tool kept of the other machine's version beside it was searched nowhere and named nowhere, as
    MEMORY.md's copies were.  Other notes in that folder are not extraPaths' business."""
    team = tmp_path / "team"
    team.mkdir()
    (team / "decisions.md").write_text("Ship on Tuesday.\n")
    (team / "decisions (Ann's conflicted copy 2026-01-12).md").write_text("Ship on Thursday.\n")
    (team / "decisions 2.md").write_text("Ship on Friday.\n")
    (team / "decisions-archive.md").write_text("Shipped last year.\n")
    (team / "other.sync-conflict-20260112-093000-ABCDEFG.md").write_text("Not listed.\n")
    ws = make_workspace({"MEMORY.md": "Prefers the aisle seat.\n"})
    config = {"memorySearch": {"provider": "none", "extraPaths": [str(team / "decisions.md")]}}
    with Memory(ws, config=config) as mem:
        mem.sync()
        skipped = {s["path"]: s["error"] for s in mem.status()["skipped"]}
    assert sorted(skipped) == ["../team/decisions (Ann's conflicted copy 2026-01-12).md", "../team/decisions 2.md"]
    assert skipped["../team/decisions 2.md"] == (
        "a copy of decisions.md (iCloud's or Google Drive's name for a conflicting version), not indexed "
        "(extraPaths lists decisions.md, not it): merge what it holds into decisions.md")


def _keyword_file(ws: Path) -> Path:
    import json

    path = ws.parent / "keywords.json"
    path.write_text(json.dumps(KEYWORDS))
    return path


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_copies_git_mergetool_leaves_beside_a_conflicted_note_are_not_notes(make_workspace) -> None:
    """``git mergetool`` writes ``2026-02-01_BASE_<pid>.md``, ``_LOCAL_``, ``_REMOTE_`` and
    ``_BACKUP_`` beside a conflicted daily log while the merge tool is open, and keeps them after a
    failed merge with ``mergetool.keepTemporaries`` (or when it is killed): each was indexed as a
    daily log, so a search answered the note's lines again from every copy, the base's with the
    text both sides had replaced.  They are named in status; a note merely named so is indexed."""
    ws = make_workspace({"memory/2026-02-01.md": "The ferry leaves at seven.\n", "memory/plan_LOCAL_2.md": "kiwi\n"})
    assert run_git(ws, "init", "-q", "-b", "main").returncode == 0
    for step in (["add", "-A"], ["commit", "-qm", "base"], ["checkout", "-qb", "theirs"]):
        assert run_git(ws, *step).returncode == 0
    (ws / "memory" / "2026-02-01.md").write_text("The ferry leaves at nine.\n")
    assert run_git(ws, "commit", "-qam", "theirs").returncode == 0
    assert run_git(ws, "checkout", "-q", "main").returncode == 0
    (ws / "memory" / "2026-02-01.md").write_text("The ferry leaves at eight.\n")
    assert run_git(ws, "commit", "-qam", "ours").returncode == 0
    assert run_git(ws, "merge", "theirs").returncode != 0  # a conflict
    merge = run_git(ws, "-c", "mergetool.failing.cmd=false", "-c", "mergetool.failing.trustExitCode=true",
                 "-c", "mergetool.keepTemporaries=true", "mergetool", "--tool=failing", "memory/2026-02-01.md")
    left = sorted(p.name for p in (ws / "memory").iterdir() if p.name.startswith("2026-02-01_"))
    assert len(left) == 3, (merge.stdout, merge.stderr)  # BASE, LOCAL, REMOTE
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        assert found(mem, "ferry") == ["memory/2026-02-01.md"]
        assert found(mem, "seven") == []
        assert found(mem, "kiwi") == ["memory/plan_LOCAL_2.md"]
        skipped = {s["path"]: s["error"] for s in mem.status()["skipped"]}
    assert sorted(skipped) == [f"memory/{name}" for name in left]
    assert all("git mergetool's" in why and "copy of memory/2026-02-01.md" in why for why in skipped.values())


def test_a_note_git_crypt_keeps_encrypted_is_named_not_indexed_nor_appended_to(make_workspace) -> None:
    """A memory repository cloned and not unlocked (git-crypt) holds each encrypted note as
    ``\\0GITCRYPT\\0`` and ciphertext: it was indexed as text (searches cited its binary noise), and
    an append wrote text after the ciphertext, which git-crypt unlock then could not decrypt.  It is
    named in status and refused, nothing written; what was indexed of it stays until it is unlocked."""
    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n"})
    note = ws / "memory" / "2026-01-12.md"
    note.write_text("Kiwi fact.\n")
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        ciphertext = b"\x00GITCRYPT\x00" + bytes(range(12)) + b"\x9f\xfe Safari kiwi\x00\x81"
        note.write_bytes(ciphertext)  # git-crypt lock
        report = mem.sync()
        assert [s["path"] for s in report.skipped] == ["memory/2026-01-12.md"]
        assert "encrypted by git-crypt" in report.skipped[0]["error"]
        assert found(mem, "Safari") == []
        assert found(mem, "kiwi fact") == ["memory/2026-01-12.md"]  # (as indexed before the lock)
        with pytest.raises(MemdirError, match=r"is encrypted by git-crypt.*nothing was written"):
            mem.append_daily("Decided: ship on Friday", date="2026-01-12")
    assert note.read_bytes() == ciphertext
