"""Live sync against what editors, sync tools and signals do to a workspace and its index.

Every test here failed once: a same-size edit whose mtime was set back stayed unindexed, and the
other cases are described on each test.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import cli_env
from memdir.api import Memory

KEYWORDS = {"memorySearch": {"provider": "none"}}


def _found(mem: Memory, query: str) -> list[str]:
    return [r.path for r in mem.search(query, sync=False).results]


def test_a_same_size_edit_with_its_mtime_set_back_is_indexed(make_workspace) -> None:
    """``cp -p``, ``rsync -t``, ``touch -r`` or an editor restoring the mtime: the size and mtime
    were all the index compared, so the new text was never indexed (not by a sync, not before a
    search, not by the watcher woken by the write)."""
    ws = make_workspace({"memory/notes.md": "The locker code is alpha.\n"})
    note = ws / "memory" / "notes.md"
    before = os.stat(note)
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        note.write_text("The locker code is omega.\n")  # same length
        os.utime(note, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(note).st_mtime_ns == before.st_mtime_ns and os.stat(note).st_size == before.st_size
        assert mem.status()["dirty"]
        assert mem.sync().indexed == 1
        assert _found(mem, "omega") == ["memory/notes.md"]
        assert _found(mem, "alpha") == []


def test_a_same_size_edit_that_keeps_a_future_mtime_is_indexed(make_workspace) -> None:
    """Copied with ``rsync -t`` from a machine whose clock is ahead: the mtime is in the future and
    stays there across the edit; the ctime alone says the file changed."""
    ws = make_workspace({"memory/notes.md": "The locker code is alpha.\n"})
    note = ws / "memory" / "notes.md"
    future = 4_102_444_800 * 10**9  # 2100-01-01
    os.utime(note, ns=(future, future))
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        note.write_text("The locker code is omega.\n")
        os.utime(note, ns=(future, future))
        assert mem.sync().indexed == 1
        assert _found(mem, "omega") == ["memory/notes.md"]


def test_a_file_dated_past_2262_does_not_stop_every_sync(make_workspace) -> None:
    """``touch -d 3000-01-01`` on one note: its mtime in nanoseconds no longer fit SQLite's 64-bit
    integer, and every sync (and so every search) failed "Python int too large to convert"."""
    ws = make_workspace({"memory/far.md": "Dated in the far future: zucchini.\n", "memory/now.md": "Today: yam.\n"})
    far = ws / "memory" / "far.md"
    os.utime(far, (32_503_680_000, 32_503_680_000))  # 3000-01-01 (ext4 keeps it as 2446)
    with Memory(ws, config=KEYWORDS) as mem:
        assert mem.sync().indexed == 2
        assert _found(mem, "zucchini") == ["memory/far.md"] and _found(mem, "yam") == ["memory/now.md"]
        assert not mem.status()["dirty"]
        far.write_text("Dated in the far future: zucchini and leek.\n")
        os.utime(far, (32_503_680_000, 32_503_680_000))
        assert mem.sync().indexed == 1
        assert _found(mem, "leek") == ["memory/far.md"]


def test_a_file_replaced_with_an_older_copy_of_the_same_size_is_seen_before_a_search(make_workspace) -> None:
    """The read-your-writes check before a search re-stats the files it listed: it too must see a
    file swapped (a rename over it) for one with the same size and an mtime from the past."""
    ws = make_workspace({"memory/a.md": "Parking spot 17.\n", "memory/b.md": "Unrelated.\n"})
    note = ws / "memory" / "a.md"
    with Memory(ws, config={"memorySearch": {"provider": "none", "sync": {"watch": False}}}) as mem:
        assert [r.path for r in mem.search("parking").results] == ["memory/a.md"]
        old = os.stat(note)
        temp = ws / "memory" / ".a.md.tmp"
        temp.write_text("Parking spot 42.\n")
        os.utime(temp, ns=(old.st_atime_ns, old.st_mtime_ns))
        os.replace(temp, note)
        assert [r.path for r in mem.search("42").results] == ["memory/a.md"]


class _GatedProvider:
    """8-dim vectors; the first batch waits until the test opens the gate."""

    id, model, provider_key, max_input_bytes, dims = "gated", "gated-8", "gated-key", 8000, 8

    def __init__(self) -> None:
        self.entered, self.gate = threading.Event(), threading.Event()
        self.batches = 0

    def embed_query(self, text: str) -> list[float]:
        return [1.0] * 8

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.batches += 1
        self.entered.set()
        self.gate.wait(60)
        return [[1.0] * 8 for _ in texts]

    def close(self) -> None:
        pass


def test_stopping_a_watcher_stops_its_sync_before_the_next_file(make_workspace) -> None:
    """``Watcher.stop()`` (Ctrl-C or SIGTERM on ``memdir watch``) during a long build waited the
    whole join timeout, the sync ran on behind it to the end, and once the Memory was closed its
    cut-short sync was reported as an error ("trying again in 2 s") after the "stop" event."""
    ws = make_workspace({f"memory/n{i:03d}.md": f"Note {i} about quinces.\n" for i in range(300)})
    provider = _GatedProvider()
    events: list[dict] = []
    with Memory(ws, provider=provider) as mem:
        watcher = mem.watch(on_event=events.append, sync_at_start=True, files=False)
        assert provider.entered.wait(60), "the first sync never embedded"
        stopper = threading.Thread(target=watcher.stop, kwargs={"timeout": 60})
        stopper.start()
        while not watcher.stopped:
            time.sleep(0.01)
        provider.gate.set()
        stopper.join(60)
        assert not any(t.is_alive() for t in watcher._threads)
        assert provider.batches == 1  # 300 chunks are 5 batches: it stopped after the one under way
    assert [e for e in events if e["event"] == "error"] == []


def test_a_watcher_whose_state_folder_is_deleted_writes_a_new_index_there(make_workspace, state_dir) -> None:
    """The index file deleted under a long-running watcher: it kept indexing into the file that no
    longer had a name, so every other process (``memdir search``, ``status``) found no index."""
    ws = make_workspace({"memory/a.md": "Apricot jam.\n"})
    told: list[str] = []
    with Memory(ws, config=KEYWORDS, notice=told.append) as mem:
        mem.sync()
        watcher = mem.watch(debounce_ms=50)
        assert watcher.ready.wait(60)
        shutil.rmtree(state_dir)
        (ws / "memory" / "b.md").write_text("Blackberry crumble.\n")
        deadline = time.monotonic() + 60
        while not mem.index_path.exists() or watcher.pending:
            assert time.monotonic() < deadline, "the watcher never wrote a new index"
            time.sleep(0.05)
        assert any("was deleted or replaced while in use" in t for t in told)
    with Memory(ws, config=KEYWORDS) as other:  # another process's view: the file at the path
        assert _found(other, "blackberry") == ["memory/b.md"]
        assert _found(other, "apricot") == ["memory/a.md"]


def test_stopping_a_watcher_whose_sync_waits_for_another_writer_does_not_wait_for_it(make_workspace) -> None:
    """Ctrl-C on ``memdir watch`` while another process held the writer lock (a long ``memdir
    index``) took 20 s: the sync waited for the lock with no way to give up, and went on waiting
    behind the closed Memory."""
    ws = make_workspace({"memory/a.md": "Apple.\n"})
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        watcher = mem.watch(debounce_ms=50)
        assert watcher.ready.wait(60)
        fd = os.open(f"{mem.index_path}.lock", os.O_RDWR)  # another process's writer lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            (ws / "memory" / "b.md").write_text("Banana.\n")
            deadline = time.monotonic() + 60
            while not watcher.syncing:
                assert time.monotonic() < deadline, "the watcher never started its sync"
                time.sleep(0.02)
            watcher.stop(timeout=15)
            assert not any(t.is_alive() for t in watcher._threads), "the sync still waits for the lock"
        finally:
            os.close(fd)


_PAST_THE_LIMIT = r"""
import json, sys, time
from pathlib import Path
from memdir.api import Memory

ws = Path(sys.argv[1])
events = []
with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
    mem.sync()
    watcher = mem.watch(on_event=events.append, debounce_ms=50)
    assert watcher.ready.wait(60)
    (ws / "memory" / "d29" / "late.md").write_text("Written past the watch limit: kumquat.\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not mem.search("kumquat", sync=False).results:
        time.sleep(0.05)
    found = [r.path for r in mem.search("kumquat", sync=False).results]
    print(json.dumps({"found": found, "polling": watcher.state()["polling"],
                      "errors": [e["error"] for e in events if e["event"] == "error"]}))
"""


def test_a_watcher_past_the_os_watch_limit_polls_and_says_so(make_workspace, tmp_path) -> None:
    """Past ``fs.inotify.max_user_watches`` watchfiles (asked to ignore permission errors) left the
    folders beyond the limit unwatched without a word: notes written there were never indexed by
    the watcher.  Run in a user namespace whose watch limit is 8 (skipped where there are none)."""
    ws = make_workspace({f"memory/d{i:02d}/n.md": f"Note {i}.\n" for i in range(30)})
    script = tmp_path / "limit.py"
    script.write_text(_PAST_THE_LIMIT)
    probe = subprocess.run(["unshare", "-Ur", "sh", "-c", "echo 8 > /proc/sys/user/max_inotify_watches"],
                           capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no user namespaces here to lower the watch limit in")
    proc = subprocess.run(["unshare", "-Ur", "sh", "-c",
                           'echo 8 > /proc/sys/user/max_inotify_watches && exec "$0" "$1" "$2"',
                           sys.executable, str(script), str(ws)],
                          capture_output=True, text=True, timeout=120, env=cli_env(tmp_path / "state"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["found"] == ["memory/d29/late.md"]
    assert out["polling"] is True
    assert len(out["errors"]) == 1 and "watch limit" in out["errors"][0]


def test_a_folder_whose_name_is_not_utf8_does_not_break_watching(make_workspace) -> None:
    """watchfiles cannot take a path that is not UTF-8: such a folder in the watch set failed it,
    and even a listing of one (every sync lists it) failed the watch again: an error every second
    and edits elsewhere seen late or never.  The watch leaves it out, polls, and says so once."""
    ws = make_workspace({"memory/a.md": "Apple.\n"})
    bad = os.path.join(os.fsencode(ws / "memory"), b"caf\xe9")
    os.mkdir(bad)
    with open(os.path.join(bad, b"x.md"), "wb") as fh:
        fh.write(b"Not indexable: its folder name is Latin-1.\n")
    events: list[dict] = []
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        watcher = mem.watch(on_event=events.append, debounce_ms=50)
        assert watcher.ready.wait(60)
        (ws / "memory" / "b.md").write_text("Banana bread.\n")
        deadline = time.monotonic() + 60
        while _found(mem, "banana") != ["memory/b.md"]:
            assert time.monotonic() < deadline, f"the edit was never indexed: {events[-3:]}"
            time.sleep(0.05)
        os.listdir(bad)  # what every sync does: seen by inotify as an event on that name
        mem.sync()
        time.sleep(3)  # failed every second before
        errors = [e["error"] for e in events if e["event"] == "error"]
        assert len(errors) <= 1 and watcher.running, errors


def test_a_workspace_whose_path_is_not_utf8_is_still_kept_in_step(tmp_path) -> None:
    """watchfiles takes only UTF-8 paths: with the folders it cannot take left out, such a
    workspace left nothing to watch, and the watcher watched nothing without a word."""
    ws = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"notes-\xe9"))
    os.makedirs(os.path.join(ws, "memory"))
    Path(ws, "memory", "a.md").write_text("Apple.\n")
    events: list[dict] = []
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()
        watcher = mem.watch(on_event=events.append, debounce_ms=50)
        assert watcher.ready.wait(60)
        Path(ws, "memory", "b.md").write_text("Banana bread.\n")
        deadline = time.monotonic() + 60
        while _found(mem, "banana") != ["memory/b.md"]:
            assert time.monotonic() < deadline, f"the edit was never indexed: {events[-3:]}"
            time.sleep(0.05)
        errors = [e["error"] for e in events if e["event"] == "error"]
        assert len(errors) == 1 and "not UTF-8" in errors[0]


def test_a_search_after_the_index_file_was_deleted_builds_it_as_a_first_index(make_workspace, state_dir) -> None:
    """A long-running server whose index file was deleted: the search's own sync found no index
    at the path and rebuilt it whole inside the search (every note embedded again, the embedding
    cache gone with it), instead of answering "being built" as for any first index."""
    ws = make_workspace({f"memory/n{i}.md": f"Note {i} about persimmons.\n" for i in range(5)})
    provider = _GatedProvider()
    provider.gate.set()
    with Memory(ws, provider=provider) as mem:
        mem.sync()
        mem.first_index_wait = 0.2
        provider.gate.clear()
        shutil.rmtree(state_dir)
        (ws / "memory" / "n9.md").write_text("Note 9 about medlars.\n")
        answers: list = []
        searcher = threading.Thread(target=lambda: answers.append(mem.search("medlars")), daemon=True)
        searcher.start()
        searcher.join(20)
        provider.gate.set()
        assert answers, "the search waited for a whole rebuild"
        assert answers[0].stale and any("being built" in w for w in answers[0].warnings), answers[0].warnings
        deadline = time.monotonic() + 60
        while "memory/n9.md" not in [r.path for r in mem.search("medlars").results]:
            assert time.monotonic() < deadline, "the index was never built again"
            time.sleep(0.05)
    assert mem.index_path.exists()
