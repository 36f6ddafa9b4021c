"""Watch mode on a real file system: what a user does to a workspace reaches the index by itself.

Searches here never sync (``sync=False``): only the watcher can have indexed what they find.
Deadlines are generous and nothing asserts latency (the machine running this may be loaded).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import cli_env
from memdir.api import Memory
from memdir.watch import WatchPlan, folders_under

DEADLINE = 60.0


@contextlib.contextmanager
def watch_cli(ws: Path, state_dir, *args: str) -> Iterator[subprocess.Popen]:
    """``memdir [args] watch`` on ``ws`` (keyword only), stopped once its first sync is printed
    and killed on the way out; a readline that never returns fails the test, never hangs it."""
    proc = subprocess.Popen([sys.executable, "-m", "memdir", *args, "-w", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    stuck = threading.Timer(DEADLINE, proc.kill)
    stuck.start()
    try:
        while "(start):" not in (line := proc.stdout.readline()):
            assert line, f"watch exited before its first sync: {proc.stderr.read()}"
        yield proc
    finally:
        stuck.cancel()
        if proc.poll() is None:
            proc.kill()


def found(mem: Memory, query: str) -> list[str]:
    return [r.path for r in mem.search(query, sync=False).results]


def eventually(check, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"the watcher never got there: {what}")
        time.sleep(0.05)


@pytest.fixture
def watched(make_workspace, tmp_path: Path):
    ws = make_workspace({"MEMORY.md": "# Prefs\nPrefers the aisle seat.\n", "memory/2026-02-01.md": "Apple pie.\n"})
    team = tmp_path / "team"
    team.mkdir()
    (team / "handbook.md").write_text("Expense limit is 50 euros.\n")
    mem = Memory(ws, config={"memorySearch": {"provider": "none", "extraPaths": [str(team)]}})
    mem.sync()
    events: list[dict] = []
    watcher = mem.watch(on_event=events.append, debounce_ms=100)
    eventually(lambda: any(e["event"] == "watching" for e in events), "watching")
    yield ws, team, mem, events
    mem.close()
    assert not watcher.running


def test_create_edit_rename_delete(watched):
    ws, _, mem, _ = watched
    note = ws / "memory" / "2026-02-02.md"
    note.write_text("Booked the dentist for Friday.\n")
    eventually(lambda: found(mem, "dentist") == ["memory/2026-02-02.md"], "a new note")
    with open(note, "a") as fh:
        fh.write("Also renewed the parking permit.\n")
    eventually(lambda: found(mem, "parking permit") == ["memory/2026-02-02.md"], "an edit")
    note.rename(ws / "memory" / "2026-02-03.md")
    eventually(lambda: found(mem, "dentist") == ["memory/2026-02-03.md"], "a rename")
    (ws / "memory" / "2026-02-03.md").unlink()
    eventually(lambda: found(mem, "dentist") == [], "a delete")
    (ws / "MEMORY.md").write_text("# Prefs\nPrefers the window seat now.\n")
    eventually(lambda: found(mem, "window seat") == ["MEMORY.md"], "a root file edit")


def test_a_file_written_straight_into_a_new_folder(watched):
    ws, _, mem, _ = watched
    deep = ws / "memory" / "projects" / "2026" / "q1"
    deep.mkdir(parents=True)
    (deep / "kickoff.md").write_text("Kickoff: the zeppelin project starts in March.\n")
    eventually(lambda: found(mem, "zeppelin") == ["memory/projects/2026/q1/kickoff.md"], "a note in a new folder")
    (deep / "later.md").write_text("Later: the zeppelin needs helium permits.\n")  # the new folder is watched too
    eventually(lambda: "memory/projects/2026/q1/later.md" in found(mem, "helium permits"), "a later note there")


def test_the_memory_folder_deleted_and_recreated(watched):
    ws, _, mem, _ = watched
    shutil.rmtree(ws / "memory")
    eventually(lambda: found(mem, "apple pie") == [], "the folder's notes removed")
    (ws / "memory").mkdir()
    (ws / "memory" / "again.md").write_text("Back again: the quokka exhibit reopened.\n")
    eventually(lambda: found(mem, "quokka") == ["memory/again.md"], "a note in the re-created folder")
    (ws / "memory" / "more.md").write_text("The quokka keeper is named Imogen.\n")
    eventually(lambda: "memory/more.md" in found(mem, "Imogen"), "a later note in the re-created folder")


def test_the_workspace_deleted_and_recreated(watched):
    ws, _, mem, _ = watched
    shutil.rmtree(ws)
    eventually(lambda: found(mem, "aisle seat") == [], "the workspace's notes removed")
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "phoenix.md").write_text("Rebuilt from scratch: the phoenix plan.\n")
    eventually(lambda: found(mem, "phoenix plan") == ["memory/phoenix.md"], "a note in the re-created workspace")


def test_extra_paths_are_watched(watched, tmp_path: Path):
    _, team, mem, _ = watched
    (team / "handbook.md").write_text("Expense limit is now 80 euros.\n")
    eventually(lambda: found(mem, "80 euros") == ["../team/handbook.md"], "an extra path edit")
    (team / "sub").mkdir()
    (team / "sub" / "travel.md").write_text("Travel policy: trains under six hours.\n")
    eventually(lambda: found(mem, "trains six hours") == ["../team/sub/travel.md"], "an extra path new folder")


def test_ignored_folders_are_never_watched_or_indexed(watched):
    ws, _, mem, events = watched
    nm = ws / "memory" / "node_modules" / "pkg"
    nm.mkdir(parents=True)
    (nm / "README.md").write_text("A package readme about marmalade.\n")
    (ws / "memory" / "real.md").write_text("A real note about marmalade.\n")
    eventually(lambda: found(mem, "marmalade") == ["memory/real.md"], "the real note")
    watched_folders = mem.watcher.plan.folders()
    assert not any("node_modules" in f for f in watched_folders)
    assert not any(e.get("path", "").startswith("memory/node_modules/pkg/") for e in events)


def test_interval_sync_runs_without_any_change(make_workspace):
    ws = make_workspace({"memory/a.md": "Alpha.\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
        events: list[dict] = []
        mem.watch(on_event=events.append, interval_minutes=0.005)  # every 0.3 s
        eventually(lambda: sum(e.get("reason") == "interval" for e in events if e["event"] == "sync") >= 2,
                   "two interval syncs")


def test_an_endless_interval_leaves_the_watcher_syncing(make_workspace):
    """``intervalMinutes = inf`` (or 1e308) made the sync thread's wait an OverflowError: the thread
    died and the watcher never synced a change again."""
    ws = make_workspace({"memory/a.md": "Alpha.\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none", "sync": {"intervalMinutes": float("inf")}}}) as mem:
        mem.sync()
        events: list[dict] = []
        mem.watch(on_event=events.append, debounce_ms=50)
        eventually(lambda: mem.watcher.ready.is_set(), "the watches in place")
        (ws / "memory" / "b.md").write_text("Bravo: the okapi plan.\n")
        eventually(lambda: found(mem, "okapi plan") == ["memory/b.md"], "a change synced")
        assert all(t.is_alive() for t in mem.watcher._threads)


def test_watch_arguments_are_checked_as_the_config_and_the_flag_are(make_workspace, state_dir):
    """``mem.watch(debounce_ms=-5)`` was taken as 0 (``--debounce-ms -5`` is bad usage, the config
    key refuses it), ``math.inf`` raised OverflowError, ``interval_minutes=NaN`` (a config error)
    turned the interval sync off quietly, and a debounce or interval of 400 digits (``memdir watch
    --debounce-ms``, a JSON config) failed "integer division result too large for a float"."""
    import math

    ws = make_workspace({"memory/a.md": "Alpha.\n"})
    huge = 10**400
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        for bad, kind, words in ((-5, ValueError, "debounce_ms must be a finite number of milliseconds, 0 or more"),
                                 (math.inf, ValueError, "not inf"), ("10", TypeError, "not str")):
            with pytest.raises(kind, match=words):
                mem.watch(debounce_ms=bad)
        with pytest.raises(ValueError, match="interval_minutes must be a number of minutes"):
            mem.watch(interval_minutes=math.nan)
        state = mem.watch(debounce_ms=huge, interval_minutes=huge, files=False).state()
        assert (state["debounceMs"], state["intervalMinutes"]) == (7 * 86400 * 1000, 7 * 86400 / 60)
    with watch_cli(ws, state_dir, "watch", "--debounce-ms", str(huge)) as proc:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_status_says_when_a_sync_is_pending(make_workspace):
    ws = make_workspace({"memory/a.md": "Alpha.\n"})
    cfg = {"memorySearch": {"provider": "none", "sync": {"searchBudgetMs": 60_000}}}  # a loaded machine
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        mem.watch(debounce_ms=60_000)  # a long debounce: the change stays pending
        (ws / "memory" / "b.md").write_text("Beta.\n")
        eventually(lambda: mem.status()["watch"]["pending"], "pending")
        st = mem.status()
        assert st["syncPending"] is True and st["dirtyFiles"] == ["memory/b.md"]
        assert mem.search("beta").results[0].path == "memory/b.md"  # and a search does not wait for it


def test_watch_plan_walks_iteratively_and_skips_ignored(tmp_path: Path):
    root = tmp_path / "memory"
    folder = root
    folder.mkdir()
    for _ in range(1100):
        folder = folder / "d"
        folder.mkdir()
    (root / ".git" / "objects").mkdir(parents=True)
    (root / "venv").mkdir()
    folders = folders_under(str(root))
    assert len(folders) == 1101 and not any(".git" in f or f.endswith("venv") for f in folders)
    plan = WatchPlan(tmp_path, [], None)
    assert plan.file_matters(str(root / "x.md")) and not plan.file_matters(str(root / ".git" / "x.md"))
    assert not plan.file_matters(str(root / "x.txt")) and plan.file_matters(str(tmp_path / "MEMORY.md"))
    chain = [root]
    while True:
        subs = [Path(e.path) for e in os.scandir(chain[-1]) if e.name == "d"]
        if not subs:
            break
        chain.append(subs[0])
    for f in reversed(chain[1:]):
        f.rmdir()


def test_memdir_watch_stops_when_the_reader_of_its_output_goes_away(make_workspace, state_dir):
    """``memdir watch --json | head -1``: the watcher's threads swallowed the BrokenPipeError, so the
    watch ran on, unread, until killed; it now exits quietly with 141 at the next event."""
    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "watch", "--json", "--debounce-ms", "50", "-w", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    try:
        assert json.loads(proc.stdout.readline())["event"] == "start"
        proc.stdout.close()  # the reader goes away, as head does
        deadline = time.monotonic() + DEADLINE
        for i in range(10_000):  # each change is an event to write
            (ws / "memory" / "b.md").write_text(f"Beta note {i}.\n")
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 141 and "Traceback" not in err, err


def test_memdir_watch_keeps_indexing_while_its_output_is_not_read(make_workspace, state_dir):
    """A reader that stops reading (a consumer that froze, a pager left at a page): the watcher's sync
    thread printed each event, so once the pipe was full the next write blocked it, nothing more was
    indexed and SIGTERM waited for ever.  Events are written by a thread of their own."""
    import fcntl
    import termios

    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "watch", "--json", "--debounce-ms", "50", "-w", str(ws)],
                            stdout=write_end, stderr=subprocess.DEVNULL,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    os.close(write_end)
    probe = Memory(ws, config={"memorySearch": {"provider": "none"}}, state_dir=state_dir)
    try:
        def pending() -> int:
            return int.from_bytes(fcntl.ioctl(read_end, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)

        deadline = time.monotonic() + DEADLINE
        while pending() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # started: the first line is out
        long = "n" * 200  # (each change event is a few hundred bytes: the pipe fills in a few hundred)
        for i in range(400):
            (ws / "memory" / f"{long}{i}.md").write_text(f"Note {i}.\n")
            if i % 20 == 19:
                time.sleep(0.2)
        while pending() < 60_000 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pending() >= 60_000, "the pipe never filled"
        (ws / "memory" / "last.md").write_text("Zebrafinch sighting.\n")
        while not probe.search("zebrafinch", sync=False).results and time.monotonic() < deadline:
            time.sleep(0.2)
        assert probe.search("zebrafinch", sync=False).results, "the watch stopped indexing once its output was full"
        proc.terminate()
        proc.wait(timeout=30)  # the pipe still full
    finally:
        probe.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)
    assert proc.returncode == 0


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_memdir_watch_cli_prints_json_events_and_stops_cleanly_on_ctrl_c(make_workspace, state_dir, stop_signal):
    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "watch", "--json", "--debounce-ms", "100", "-w", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    try:
        events = []

        def until(predicate, what):
            deadline = time.monotonic() + DEADLINE
            while True:
                line = proc.stdout.readline()
                assert line, f"watch exited before {what}: {proc.stderr.read()}"
                events.append(json.loads(line))
                if predicate(events[-1]):
                    return
                assert time.monotonic() < deadline, f"no {what}"

        until(lambda e: e["event"] == "sync" and e["reason"] == "start", "first sync")
        (ws / "memory" / "b.md").write_text("Beta note.\n")
        until(lambda e: e["event"] == "sync" and e["reason"] == "watch" and e["indexed"] == 1, "watch sync")
        if not any(e.get("event") == "change" for e in events):
            # (the watch reports a change up to half a second after it: the comparison made once
            # the watches are in place may have synced the note first)
            until(lambda e: e["event"] == "change", "change event")
        assert {"event": "change", "change": "added", "path": "memory/b.md"} in [
            {k: e.get(k) for k in ("event", "change", "path")} for e in events]
        proc.send_signal(stop_signal)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["event"] == "stop"
    assert "Traceback" not in err


def test_the_reference_agent_loop_warms_and_watches(make_workspace):
    from memdir.agent import MemoryIndexBackend

    ws = make_workspace({"MEMORY.md": "# Prefs\nThe user's sister is called Marguerite.\n"})
    mem = Memory(ws, config={"memorySearch": {"provider": "none", "sync": {"watchDebounceMs": 100}}})
    try:
        warm = MemoryIndexBackend(mem).start()
        assert warm is not None
        warm.join(DEADLINE)
        assert found(mem, "Marguerite") == ["MEMORY.md"]  # indexed at session start, not by the search
        (ws / "memory").mkdir()
        (ws / "memory" / "hand.md").write_text("Edited by hand: Marguerite moved to Lyon.\n")
        eventually(lambda: "memory/hand.md" in found(mem, "Lyon"), "the agent's watcher")
    finally:
        mem.close()


def test_memdir_watch_with_q_says_nothing_on_stderr(make_workspace, state_dir):
    # "Stopped watching." was printed on stderr under -q, which leaves only errors there
    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    with watch_cli(ws, state_dir, "-q", "watch") as proc:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == "", err


def test_a_tiny_interval_syncs_at_most_once_a_second_and_nan_is_refused(make_workspace):
    """``intervalMinutes = 1e-9`` synced ~130 times a second; NaN silently meant "off"."""
    from memdir.config import ConfigError
    from memdir.watch import MIN_INTERVAL_SECONDS, Watcher

    ws = make_workspace({"memory/a.md": "Alpha.\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none", "sync": {"intervalMinutes": 1e-9}}}) as mem:
        assert Watcher(mem, files=False).interval == MIN_INTERVAL_SECONDS == 1.0
        assert Watcher(mem, files=False, interval_minutes=1e300).interval == 7 * 86400
        assert Watcher(mem, files=False, interval_minutes=-1).interval is None
    with pytest.raises(ConfigError, match="intervalMinutes must be a number of minutes"):
        Memory(ws, config={"memorySearch": {"provider": "none", "sync": {"intervalMinutes": float("nan")}}})


def test_memdir_watch_spells_out_an_escape_sequence_in_a_file_name(make_workspace, state_dir):
    """``memdir watch`` printed each changed file's name raw: a note named with an escape sequence
    (synced from elsewhere) retitled and cleared the terminal; ``--json`` keeps the name as it is."""
    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    with watch_cli(ws, state_dir, "watch", "--debounce-ms", "50") as proc:
        (ws / "memory" / "b\x1b]0;PWNED\x07.md").write_text("Beta note.\n")
        seen = ""
        while "(watch):" not in (line := proc.stdout.readline()):
            assert line, f"watch exited before its sync: {proc.stderr.read()}"
            seen = line
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert seen.rstrip("\n").endswith(" added memory/b\\x1b]0;PWNED\\x07.md"), seen


def test_memdir_watch_says_why_a_file_was_skipped(make_workspace, state_dir):
    """A sync line said "1 skipped" and no more: a memory folder left unread for want of file
    descriptors (every note in it missing from searches) looked like a stray file."""
    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    os.close(os.open(os.path.join(os.fsencode(ws / "memory"), b"caf\xe9.md"), os.O_CREAT | os.O_WRONLY))
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "watch", "--debounce-ms", "50", "-w", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    try:
        assert proc.stdout.readline().startswith("Watching ")
        line = proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = "(start): 1 indexed, 0 removed, 1 skipped (memory/caf\\xe9.md: file name is not valid UTF-8) in"
    assert said in line, line
