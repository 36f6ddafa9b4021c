"""The writer lock and the state folder under hostile conditions: the lock file deleted or
replaced while held, folders and files other users own, other processes holding the lock.

Each test sets up the race by hand (a raw ``flock`` from this process, a child waiting at a known
point) rather than hoping it shows up.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import SRC, cli_env
from memdir import Memory
from memdir.lock import FileWriterLock, LockTimeout
from unprivileged import give_away, run_cli_as_user, shared_scratch

FILES = {
    "MEMORY.md": "# Decisions\n- Billing uses Kafka, not RabbitMQ.\n",
    "memory/2026-01-10.md": "- Dana's cat Miso had surgery.\n",
}


def _hold_new_file(path: Path) -> int:
    """Another writer: the file now at ``path`` (created if missing), ``flock``-ed."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _has_open(pid: int, path: Path, timeout: float = 20) -> bool:
    """Whether process ``pid`` has ``path`` open (waits for it to open it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                        return True
                except OSError:
                    pass
        except FileNotFoundError:
            return False
        time.sleep(0.02)
    return False


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to see the waiter's files")
def test_a_waiter_whose_lock_file_was_replaced_waits_for_the_one_at_the_path(tmp_path: Path):
    # Before: a writer waiting on the lock file got its flock once the old holder let go, although
    # the file had been replaced meanwhile and another writer held the one at the path: two writers.
    index = tmp_path / "index.sqlite"
    holder = FileWriterLock(index)
    assert holder.acquire(0)
    code = (f"import sys; sys.path.insert(0, {str(SRC)!r}); from pathlib import Path; "
            f"from memdir.lock import FileWriterLock; "
            f"print(FileWriterLock(Path({str(index)!r})).acquire(timeout=1.5), flush=True)")
    waiter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert _has_open(waiter.pid, holder.path)  # waiting on the original file
        os.unlink(holder.path)
        other = _hold_new_file(holder.path)  # another writer takes the new file at the path
        try:
            holder.release()  # the original file's lock is free now
            out, _ = waiter.communicate(timeout=30)
        finally:
            os.close(other)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert out.strip() == "False"


def test_a_sync_whose_lock_file_is_deleted_and_taken_by_another_writer_stops_before_writing(
        make_workspace, keyword_config):
    # Before: deleting <index>.lock while a sync ran let the next writer flock a new file and
    # write the same index at the same time as the first one.
    ws = make_workspace(FILES)
    mem = Memory(ws, config=keyword_config)
    lock_path = Path(f"{mem.index_path}.lock")
    other: list[int] = []

    def progress(done: int, total: int, label: object = None) -> None:
        if not other:  # (called before anything is written)
            os.unlink(lock_path)
            other.append(_hold_new_file(lock_path))

    try:
        with pytest.raises(LockTimeout, match="deleted or replaced"):
            mem.sync(progress=progress)
        assert mem.status()["files"] == 0  # nothing written alongside the other writer
    finally:
        for fd in other:
            os.close(fd)
    assert mem.sync(lock_timeout=2).indexed == 2
    assert mem.search("Kafka", mode="keyword").results[0].path == "MEMORY.md"
    mem.close()


def test_a_sync_whose_lock_file_is_deleted_takes_the_new_one_and_goes_on(make_workspace, keyword_config):
    # Nobody else is writing: the sync takes the lock at the path again (so a writer starting now
    # waits for it) and finishes.
    ws = make_workspace(FILES)
    mem = Memory(ws, config=keyword_config)
    lock_path = Path(f"{mem.index_path}.lock")
    seen: list[object] = []

    def progress(done: int, total: int, label: object = None) -> None:
        if not seen:
            os.unlink(lock_path)
            seen.append(None)
        elif len(seen) == 1 and lock_path.exists():
            seen.append(FileWriterLock(mem.index_path).holder())

    report = mem.sync(progress=progress)
    assert report.indexed == 2
    assert seen[1] is not None and seen[1]["pid"] == os.getpid()  # held while it wrote
    assert FileWriterLock(mem.index_path).holder() is None  # and given back
    mem.close()


def _run_as_user(root: Path, *args: str) -> dict:
    proc = run_cli_as_user(root / "state", *args, "-w", str(root / "ws"), "--config", str(root / "memdir.json"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--json" in args else {"out": proc.stdout + proc.stderr}


def _indexed_by_user(root: Path) -> tuple[Path, Path]:
    """A workspace with one note under ``root`` (keyword-only config, state folder), handed to the
    unprivileged user and indexed by them: ``(workspace, index path)``."""
    ws = root / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("- The boiler was serviced in March.\n")
    (root / "state").mkdir()
    (root / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    give_away(root)
    _run_as_user(root, "index")
    return ws, Path(_run_as_user(root, "status", "--json")["indexPath"])


@pytest.mark.parametrize("locked", ["memory/sub", "memory"])
def test_notes_in_a_folder_made_unreadable_are_kept_and_the_folder_named(locked: str):
    # Before: after `chmod 000 memory/sub` the next sync removed every note indexed from it (the
    # files were all still there) and the index lost them until the folder was readable again.
    with shared_scratch() as root:
        ws = root / "ws"
        (ws / "memory" / "sub").mkdir(parents=True)
        (ws / "MEMORY.md").write_text("# Prefs\n- The launch codename is Bluebird.\n")
        (ws / "memory" / "sub" / "trip.md").write_text("- Renew the passport before the Lisbon trip.\n")
        (root / "state").mkdir()
        (root / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        give_away(root)
        _run_as_user(root, "index")
        os.chmod(ws / locked, 0)

        out = _run_as_user(root, "index")["out"]
        assert f"skipped {locked}: folder not readable: Permission denied" in out
        assert "0 removed" in out
        st = _run_as_user(root, "status", "--json")
        assert st["files"] == 2 and st["removedCount"] == 0
        assert [s["path"] for s in st["skipped"]] == [locked]
        found = _run_as_user(root, "search", "Lisbon passport", "--json")
        assert [r["path"] for r in found["results"]] == ["memory/sub/trip.md"]

        os.chmod(ws / locked, 0o755)  # readable again, and the note deleted: now it goes
        os.unlink(ws / "memory" / "sub" / "trip.md")
        assert "1 removed" in _run_as_user(root, "index")["out"]
        assert _run_as_user(root, "status", "--json")["skipped"] == []


@pytest.mark.parametrize(("suffix", "mode"), [("-wal", 0o644), ("-wal", 0o600), (".lock", 0o644)])
def test_a_write_ahead_log_or_lock_left_by_another_user_is_named(suffix: str, mode: int):
    # Before: a -wal (and -shm) left by memdir run as root made every `index` fail with "attempt to
    # write a readonly database" or "unable to open database file", naming neither the file nor
    # the fix, and searches went stale without saying why.
    if os.geteuid() != 0:
        pytest.skip("needs root to leave a file owned by another user")
    with shared_scratch() as root:
        ws, index = _indexed_by_user(root)
        # what a root process killed while it wrote leaves behind (its lock file: an older memdir)
        for left in (("-wal", "-shm") if suffix == "-wal" else (suffix,)):
            Path(f"{index}{left}").unlink(missing_ok=True)
            Path(f"{index}{left}").write_bytes(b"")
            os.chmod(f"{index}{left}", mode)
        (ws / "memory" / "b.md").write_text("- Renew the passport before June.\n")
        give_away(ws)

        proc = run_cli_as_user(root / "state", "index", "-w", str(ws), "--config", str(root / "memdir.json"))
        assert proc.returncode == 1
        assert f"{index}{suffix} belongs to root (uid 0)" in proc.stderr and "chown" in proc.stderr
        found = _run_as_user(root, "search", "boiler", "--json")
        assert [r["path"] for r in found["results"]] == ["memory/a.md"] and found["stale"]
        assert any(f"{index}{suffix} belongs to root" in w for w in found["warnings"])


@pytest.mark.parametrize("made_by_root", ["the state folder's memory/", "the index file"])
def test_an_index_made_private_by_root_is_named_with_its_owner(made_by_root: str):
    # Before: 'sudo memdir index' under root's umask 077 left memory/ 0700 (or the index 0600)
    # owned by root, and every later command of the user failed with Python's bare "[Errno 13]
    # Permission denied: '<index>'" (search, index, status) or SQLite's "unable to open database
    # file", naming neither the owner nor the fix.
    if os.geteuid() != 0:
        pytest.skip("needs root to leave a folder owned by another user")
    with shared_scratch() as root:
        ws = root / "ws"
        (ws / "memory").mkdir(parents=True)
        (ws / "memory" / "a.md").write_text("- The boiler was serviced in March.\n")
        (root / "state").mkdir()
        (root / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        give_away(root)
        if made_by_root == "the index file":
            (root / "state" / "memory").mkdir(mode=0o755)
            give_away(root / "state")
        args = ("-w", str(ws), "--config", str(root / "memdir.json"))
        env = {**os.environ, "PYTHONPATH": str(SRC), "MEMDIR_STATE_DIR": str(root / "state")}
        subprocess.run([sys.executable, "-m", "memdir", "index", *args], env=env, check=True, capture_output=True,
                       preexec_fn=lambda: os.umask(0o077))  # what sudo runs it as
        (index,) = (root / "state" / "memory").glob("*.sqlite")
        blocked = root / "state" / "memory" if made_by_root != "the index file" else index

        for command in (("search", "boiler"), ("index",), ("status",)):
            proc = run_cli_as_user(root / "state", *command, *args)
            assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
            assert f"{blocked} belongs to root (uid 0)" in proc.stderr and "chown" in proc.stderr, proc.stderr
            assert "Errno" not in proc.stderr and "unable to open" not in proc.stderr


def _lock_holder(index: Path) -> subprocess.Popen[str]:
    """Another process holding ``index``'s writer lock (until killed)."""
    code = (f"import sys, time; sys.path.insert(0, {str(SRC)!r}); from pathlib import Path; "
            f"from memdir.lock import FileWriterLock; FileWriterLock(Path({str(index)!r})).acquire(); "
            f"print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc to see a process is stopped")
def test_a_writer_stopped_while_holding_the_lock_is_named_and_not_waited_for_forever(
        make_workspace, keyword_config, run_cli, monkeypatch):
    # Before: `memdir index` waited for ever for a writer stopped with Ctrl-Z or SIGSTOP (it never
    # releases the lock until resumed), and `status` said it "is indexing".
    import memdir.lock
    from memdir.lock import is_stopped

    ws = make_workspace(FILES)
    (ws / "memdir.json").write_text(json.dumps(keyword_config))
    mem = Memory(ws)
    mem.sync()
    (ws / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\n")
    holder = _lock_holder(mem.index_path)
    try:
        os.kill(holder.pid, signal.SIGSTOP)
        end = time.monotonic() + 10
        while not is_stopped(holder.pid) and time.monotonic() < end:
            time.sleep(0.01)
        assert FileWriterLock(mem.index_path).holder()["stopped"] is True
        text = run_cli("status", "-w", str(ws)).stdout
        assert f"Writer: pid {holder.pid} is stopped (Ctrl-Z or SIGSTOP)" in text and f"kill -CONT {holder.pid}" in text

        monkeypatch.setattr(memdir.lock, "STOPPED_WRITER_WAIT", 0.0)  # (10 s by default)
        with pytest.raises(LockTimeout, match=f"pid {holder.pid} holds the writer lock .* but is stopped"):
            mem.sync(lock_timeout=20)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
    assert mem.sync(lock_timeout=5).indexed == 1  # once it is gone, syncs go on
    mem.close()


@pytest.mark.parametrize("folder", ["notes#2", "what?", "100%41"])
def test_an_index_in_a_folder_named_with_uri_characters_opens_read_only(tmp_path: Path, folder: str):
    # Before: read-only opens went through a ``file:`` URI with the path as it was: a '#' or '?'
    # cut it short and '%41' was decoded, so a read-only state folder (and salvaging a damaged
    # index's cache) failed with "unable to open database file" or read another file.
    from memdir import db
    from memdir.stores import sqlite_health

    path = tmp_path / folder / "index.sqlite"
    path.parent.mkdir()
    conn = db.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (42)")
    conn.close()
    for open_ in (lambda: db.connect(path, readonly=True), lambda: sqlite_health.connect_readonly(path)):
        ro = open_()
        assert ro.execute("SELECT x FROM t").fetchall() == [(42,)]
        ro.close()


def test_the_embedding_cache_is_salvaged_from_a_state_folder_named_with_a_hash(make_workspace, tmp_path: Path):
    from test_self_heal import CASES, N_FILES, HashProvider, notes

    ws = make_workspace(notes())
    provider = HashProvider()
    state = tmp_path / "state#2"
    with Memory(ws, provider=provider, state_dir=state) as mem:
        mem.sync()
        index = mem.index_path
    paid = provider.embedded
    CASES["bad-meta-json"](index)
    with Memory(ws, provider=provider, state_dir=state, notice=lambda m: None) as mem:
        assert mem.sync().indexed == N_FILES
        assert mem.recoveries[0]["salvagedCacheEntries"] > 0
    assert provider.embedded == paid  # nothing embedded again


def test_symlinks_planted_beside_an_index_in_a_cloned_repository_are_not_written_through(tmp_path: Path):
    # Before: a repository whose memdir.json puts the index in the repository, with a symlink at
    # the lock file's name, emptied the file it pointed to (here ~/.bashrc) on `memdir index`
    # (taking the lock truncates the file); the progress file's temporary name likewise.
    from helpers import cli_env
    from memdir.progress import ProgressFile, read_progress

    victim = tmp_path / "home" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text("export PATH=$HOME/bin:$PATH\n")
    repo = tmp_path / "repo"
    (repo / "memory").mkdir(parents=True)
    (repo / "memory" / "notes.md").write_text("- The kettle descaler is under the sink.\n")
    (repo / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none",
                                                                   "store": {"path": ".idx/index.sqlite"}}}))
    (repo / ".idx").mkdir()
    (repo / ".idx" / "index.sqlite.lock").symlink_to(victim)
    proc = subprocess.run([sys.executable, "-m", "memdir", "index"], cwd=repo, capture_output=True, text=True,
                          env=cli_env(tmp_path / "state"), timeout=120)
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert proc.returncode == 1 and "index.sqlite.lock is a symbolic link" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

    index = tmp_path / "index.sqlite"
    Path(f"{index}.progress.{os.getpid()}.tmp").symlink_to(victim)
    progress = ProgressFile(index, workspace=str(repo))
    progress.start("full")  # (not written: the link is removed instead)
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n"
    progress.update(1, 2)
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert read_progress(index)["done"] == 1


def test_the_writer_lock_is_taken_when_its_holder_note_cannot_be_written(tmp_path: Path):
    # Before: on a full disk (here: a file size limit) writing the holder's pid into the lock file
    # failed, and with it every sync, with a bare "[Errno 28] No space left on device".
    code = (f"import resource, signal, sys; sys.path.insert(0, {str(SRC)!r}); "
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)); "
            "from pathlib import Path; from memdir.lock import FileWriterLock; "
            f"lock = FileWriterLock(Path({str(tmp_path / 'index.sqlite')!r})); print(lock.acquire(0)); "
            f"print(lock.holder() is not None)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["True", "True"], proc.stderr


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc to see a process is stopped")
def test_a_search_waiting_for_a_stopped_first_build_says_it_is_stopped(make_workspace, run_cli, state_dir):
    # Before: "the index is being built (pid N); results will appear when it is done", which they
    # never would while that builder stays stopped.
    from memdir.lock import is_stopped

    ws = make_workspace(FILES)
    env = {"MEMDIR_PROVIDER": "none"}
    index = Path(json.loads(run_cli("status", "--json", "-w", str(ws), env=env).stdout)["indexPath"])
    holder = _lock_holder(index)
    try:
        os.kill(holder.pid, signal.SIGSTOP)
        end = time.monotonic() + 10
        while not is_stopped(holder.pid) and time.monotonic() < end:
            time.sleep(0.01)
        found = run_cli("search", "Kafka", "--json", "-w", str(ws), env=env)
        warnings = json.loads(found.stdout)["warnings"]
        assert any("the index is being built" in w and f"pid {holder.pid} is stopped" in w
                   and f"kill -CONT {holder.pid}" in w for w in warnings), warnings
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()


def test_a_search_giving_up_on_a_stopped_writer_says_who_and_how_to_resume_it(make_workspace, run_cli, state_dir):
    # Before: the search answered within its budget, stale, with only "the index may be stale":
    # read as a moment's lag, though the edited note would not be indexed until the stopped
    # writer was resumed, and nothing named it (only `status` did).
    from memdir.lock import is_stopped

    ws = make_workspace(FILES)
    env = {"MEMDIR_PROVIDER": "none"}
    run_cli("index", "-w", str(ws), env=env)
    index = Path(json.loads(run_cli("status", "--json", "-w", str(ws), env=env).stdout)["indexPath"])
    (ws / "memory" / "2026-01-11.md").write_text("- Kafka retention is seven days.\n")
    (ws / "MEMORY.md").write_text("# Moved down\n\n" + FILES["MEMORY.md"])  # (a result whose lines moved)
    holder = _lock_holder(index)
    try:
        os.kill(holder.pid, signal.SIGSTOP)
        end = time.monotonic() + 10
        while not is_stopped(holder.pid) and time.monotonic() < end:
            time.sleep(0.01)
        out = json.loads(run_cli("search", "Kafka", "--json", "-w", str(ws), env=env).stdout)
        assert out["stale"] is True and out["results"], out
        assert any(f"pid {holder.pid} is writing the index but is stopped" in w and f"kill -CONT {holder.pid}" in w
                   for w in out["warnings"]), out["warnings"]
        # (the search had sync on: it is no advice to a search that could not catch up)
        assert not any("search with sync on" in w for w in out["warnings"]), out["warnings"]
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()


def test_an_append_waiting_for_a_stopped_writer_of_the_file_gives_up_and_says_so(tmp_path: Path, monkeypatch):
    # Before: an append waited for ever for another process's lock on the daily file (a writer
    # stopped mid-append with Ctrl-Z, a script holding it): `memdir append` hung without a word.
    import threading

    import memdir.memfiles
    from memdir.memfiles import MemoryFileError, append_memory_file

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    note = ws / "memory" / "2026-01-10.md"
    note.write_text("- first entry\n")
    monkeypatch.setattr(memdir.memfiles, "APPEND_LOCK_WAIT", 0.3)
    other = _hold_new_file(note)  # (another open file: flock excludes it even in this process)
    outcome: list[BaseException | None] = []

    def append() -> None:
        try:
            append_memory_file(ws, "2026-01-10.md", "second entry")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=append, daemon=True)
    thread.start()
    try:
        thread.join(10)
        assert not thread.is_alive(), "the append is still waiting for the lock"
    finally:
        os.close(other)
        thread.join(10)
    assert isinstance(outcome[0], MemoryFileError)
    assert "memory/2026-01-10.md" in str(outcome[0]) and "nothing was written" in str(outcome[0])
    assert note.read_text() == "- first entry\n"
    append_memory_file(ws, "2026-01-10.md", "second entry")  # the lock free again: appended
    assert note.read_text().endswith("second entry\n")


def test_a_folder_deleted_during_the_listing_is_not_kept_as_unreadable(make_workspace, monkeypatch):
    # Only folders that may still hold notes keep them: one deleted between being seen and being
    # listed is gone (its notes too), one that cannot be read is kept.
    import memdir.workspace
    from memdir.workspace import discover

    ws = make_workspace({"memory/gone/a.md": "a\n", "memory/locked/b.md": "b\n", "memory/c.md": "c\n"})
    real = os.scandir

    def scandir(path):
        if str(path).endswith("gone"):
            raise FileNotFoundError(2, "No such file or directory")
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(memdir.workspace.os, "scandir", scandir)
    found = discover(ws)
    assert [f.path for f in found.files] == ["memory/c.md"]
    assert found.unlisted == ["memory/locked"]


def test_a_workspace_moved_under_the_same_agent_id_is_told_how_to_take_its_index_back(make_workspace, run_cli,
                                                                                       state_dir, tmp_path: Path):
    # Before: only "give this workspace its own agent id": a renamed workspace had no way forward
    # (`index --force` is refused as well).
    # (moved to another disk: a copy, then the folder removed; a folder renamed is the same folder,
    # and keeps its index)
    ws = make_workspace(FILES, name="notes")
    env = {"MEMDIR_PROVIDER": "none"}
    assert run_cli("-w", str(ws), "--agent", "main", "index", env=env).returncode == 0
    moved = Path(shutil.copytree(ws, tmp_path / "notes-2026"))
    shutil.rmtree(ws)
    refused = run_cli("-w", str(moved), "--agent", "main", "index", env=env)
    index = state_dir / "memory" / "main.sqlite"
    assert refused.returncode == 1
    assert f"{ws} no longer exists: if it was moved here, delete {index}" in refused.stderr
    index.unlink()
    assert run_cli("-w", str(moved), "--agent", "main", "index", env=env).returncode == 0


def test_memdir_run_as_root_in_a_users_state_folder_leaves_the_lock_file_to_that_user():
    # Before: `sudo memdir index` on a user's state folder left <index>.lock owned by root, and
    # every later run as the user failed with "Permission denied: …lock".
    if os.geteuid() != 0:
        pytest.skip("needs root")
    with shared_scratch() as root:
        ws, index = _indexed_by_user(root)
        Path(f"{index}.lock").unlink()
        (ws / "memory" / "b.md").write_text("- Renew the passport before June.\n")
        with Memory(ws, config=root / "memdir.json", state_dir=root / "state") as mem:  # as root
            assert mem.sync().indexed == 1
        assert os.stat(f"{index}.lock").st_uid != 0
        (ws / "memory" / "c.md").write_text("- The zebra crossing is repainted.\n")
        give_away(ws)
        assert "1 indexed" in _run_as_user(root, "index")["out"]  # the user indexes again


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc to see a process is stopped")
def test_healing_a_damaged_index_does_not_wait_for_ever_for_a_stopped_writer(make_workspace, keyword_config,
                                                                             monkeypatch):
    # Before: moving a damaged index aside waited for the writer lock with no limit: a writer
    # stopped with Ctrl-Z hung every process that opened the index.
    import threading

    import memdir.lock
    from memdir.lock import is_stopped
    from test_self_heal import CASES

    ws = make_workspace(FILES)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        index = mem.index_path
    CASES["garbage-header"](index)
    monkeypatch.setattr(memdir.lock, "STOPPED_WRITER_WAIT", 0.0)
    holder = _lock_holder(index)
    outcome: list[BaseException | None] = []

    def search() -> None:
        try:
            with Memory(ws, config=keyword_config, notice=lambda m: None) as mem:
                mem.search("Kafka", mode="keyword")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=search, daemon=True)
    try:
        os.kill(holder.pid, signal.SIGSTOP)
        end = time.monotonic() + 10
        while not is_stopped(holder.pid) and time.monotonic() < end:
            time.sleep(0.01)
        thread.start()
        thread.join(20)
        assert not thread.is_alive(), "still waiting for the stopped writer"
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
        thread.join(20)
    assert isinstance(outcome[0], LockTimeout) and f"pid {holder.pid}" in str(outcome[0])
    assert "is stopped" in str(outcome[0])


def _indexed(ws: Path, run_cli: Any, env: dict[str, str]) -> Path:
    """The index of ``ws`` after a ``memdir index`` that succeeded: the file the tests tamper with."""
    assert run_cli("index", "-w", str(ws), env=env).returncode == 0
    return Path(json.loads(run_cli("status", "--json", "-w", str(ws), env=env).stdout)["indexPath"])


def test_a_fifo_at_the_lock_or_progress_files_name_does_not_hang_status(make_workspace, run_cli, state_dir):
    # Before: `status` opened <index>.lock to read its holder and, a FIFO being there, waited for
    # a writer for ever; `index` failed with a bare "[Errno 22] Invalid argument".
    ws = make_workspace(FILES)
    env = {"MEMDIR_PROVIDER": "none"}
    index = _indexed(ws, run_cli, env)
    lock = Path(f"{index}.lock")
    lock.unlink()
    os.mkfifo(lock)
    status = run_cli("status", "--json", "-w", str(ws), env=env, timeout=20)
    assert status.returncode == 0 and json.loads(status.stdout)["writer"] is None
    progress = Path(f"{index}.progress")  # and one at the progress file's, while a writer runs
    os.mkfifo(progress)
    lock.unlink()
    holder = _lock_holder(index)
    try:
        status = run_cli("status", "--json", "-w", str(ws), env=env, timeout=20)
        assert json.loads(status.stdout)["writer"]["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
    lock.unlink()
    os.mkfifo(lock)
    refused = run_cli("index", "-w", str(ws), env=env, timeout=20)
    assert refused.returncode == 1
    assert f"the writer lock {lock} is a FIFO, not a regular file: remove it" in refused.stderr, refused.stderr


def test_a_fifo_in_place_of_the_settings_snapshot_does_not_hang_the_cli(make_workspace, run_cli, state_dir):
    # Before: every command opened <state>/cache/settings-*.json and, a FIFO being there, waited
    # for a writer for ever.
    ws = make_workspace(FILES)
    env = {"MEMDIR_PROVIDER": "none"}
    assert run_cli("search", "Kafka", "-w", str(ws), env=env).returncode == 0
    snapshots = list((state_dir / "cache").glob("settings-*.json"))
    assert snapshots
    for snapshot in snapshots:
        snapshot.unlink()
        os.mkfifo(snapshot)
    found = run_cli("search", "Kafka", "--json", "-w", str(ws), env=env, timeout=30)
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["MEMORY.md"]


def test_a_fifo_in_place_of_the_vector_sidecar_does_not_hang_a_search(make_workspace):
    # Before: loading the vectors opened <index>.vec8 and, a FIFO being there, waited for ever.
    import threading

    from memdir.stores.vector_sidecar import sidecar_path
    from test_self_heal import HashProvider

    ws = make_workspace(FILES)
    with Memory(ws, provider=HashProvider()) as mem:
        mem.sync()
        mem.search("Kafka")  # (writes the sidecar)
        sidecar = sidecar_path(mem.index_path)
    sidecar.unlink(missing_ok=True)
    os.mkfifo(sidecar)
    found: list[list[str]] = []

    def search() -> None:
        with Memory(ws, provider=HashProvider()) as mem:
            found.append([r.path for r in mem.search("Kafka", mode="vector").results])

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():  # (let the stuck reader go before failing)
        fd = os.open(sidecar, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(10)
        pytest.fail("the search waited on the FIFO")
    assert len(found) == 1  # (answered; hash vectors carry no meaning to rank by)


def test_a_file_system_without_file_locks_is_named(make_workspace, keyword_config, monkeypatch):
    # Before: a state folder on an NFS mount without a lock service failed every sync with a bare
    # "[Errno 37] No locks available", naming neither the file nor the cause.
    import errno

    import memdir.lock

    ws = make_workspace(FILES)
    real = fcntl.flock

    def flock(fd: int, op: int) -> None:
        if op & fcntl.LOCK_EX:
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        real(fd, op)

    monkeypatch.setattr(memdir.lock.fcntl, "flock", flock)
    expected = r"cannot lock .*\.lock: No locks available \(does its file system support"
    with Memory(ws, config=keyword_config) as mem, pytest.raises(OSError, match=expected):
        mem.sync()


def test_an_index_made_read_only_by_its_owner_says_how_to_make_it_writable():
    # Before: "attempt to write a readonly database" on every index; the "belongs to another user"
    # wording would be wrong here (the file is this user's).
    with shared_scratch() as root:
        ws, index = _indexed_by_user(root)
        os.chmod(index, 0o444)
        (ws / "memory" / "b.md").write_text("- Renew the passport before June.\n")
        give_away(ws)
        proc = run_cli_as_user(root / "state", "index", "-w", str(ws), "--config", str(root / "memdir.json"))
        assert proc.returncode == 1
        assert f"{index} is read-only (mode 444): make it writable (chmod u+rw)" in proc.stderr, proc.stderr


def test_a_lock_whose_holder_is_not_recorded_is_named_without_pid_question_marks(make_workspace, keyword_config,
                                                                               run_cli):
    # Before: "waiting for another memdir process (pid ?)" and "the index is being built (pid ?, …)"
    # when the lock file did not say who held it (taken by another tool, or its note not written).
    import threading

    ws = make_workspace(FILES)
    (ws / "memdir.json").write_text(json.dumps(keyword_config))
    told: list[str] = []
    with Memory(ws, notice=told.append) as mem:
        mem.index_path.parent.mkdir(parents=True, exist_ok=True)
        other = _hold_new_file(Path(str(mem.index_path) + ".lock"))  # flock-ed, nothing written in it
        try:
            found = mem.search("Kafka")
            building = [w for w in found.warnings if "the index is being built" in w]
            assert building and building[0].startswith("the index is being built (listing files)"), found.warnings
            assert mem.status()["writer"] == {}  # (it said nothing of a writer)
            text = run_cli("status", "-w", str(ws)).stdout
            assert "Writer: another process (the lock does not say which) holds the writer lock" in text, text
            syncing = threading.Thread(target=mem.sync, daemon=True)
            syncing.start()
            end = time.monotonic() + 10
            while not told and time.monotonic() < end:
                time.sleep(0.01)
        finally:
            os.close(other)
        syncing.join(20)
        assert not syncing.is_alive()
        location = mem.store.location
    assert told[0] == f"waiting for another process (the lock does not say which) to finish writing {location}", told
    assert not any("pid ?" in line for line in told + found.warnings)


def test_a_state_folder_deleted_as_the_index_is_opened_is_named_and_the_next_try_rebuilds(
        make_workspace, keyword_config, tmp_path: Path, monkeypatch):
    # Before: `rm -rf` of the state folder between the index's folder being made and the file's
    # first write made SQLite say "disk I/O error", printed as "(is the disk full, or a file size
    # limit reached?)".  The removal is timed by hand: just before the index file's first write.
    import shutil

    import memdir.db
    from memdir.errors import StoreError

    ws = make_workspace(FILES)
    (ws / "memdir.json").write_text(json.dumps(keyword_config))
    state = tmp_path / "gone-state"
    real = memdir.db.enable_wal
    removed: list[str] = []

    def enable_wal(conn, *args, **kwargs):
        if not removed:
            removed.append("yes")
            shutil.rmtree(state)
        return real(conn, *args, **kwargs)

    monkeypatch.setattr(memdir.db, "enable_wal", enable_wal)
    with Memory(ws, state_dir=state) as mem:
        with pytest.raises(StoreError) as caught:
            mem.search("Kafka")
        message = str(caught.value)
        assert removed and f"its folder {state / 'memory'} was removed while it was being opened" in message
        assert "run the command again" in message and "disk I/O" not in message
        assert [r.path for r in mem.search("Kafka").results] == ["MEMORY.md"]  # the next try builds it


def test_a_directory_at_the_lock_files_name_is_named_with_what_to_do(make_workspace, run_cli, state_dir):
    # Before: index failed, and a search's sync before searching, with Python's bare "[Errno 21]
    # Is a directory: '…/x.sqlite.lock'", which said nothing of what the file is or what to do.
    ws = make_workspace(FILES)
    env = {"MEMDIR_PROVIDER": "none"}
    index = _indexed(ws, run_cli, env)
    lock = Path(f"{index}.lock")
    lock.unlink()
    lock.mkdir()
    says = f"the writer lock {lock} is a directory, not a regular file: remove it"
    refused = run_cli("index", "-w", str(ws), env=env, timeout=20)
    assert refused.returncode == 1 and says in refused.stderr, refused.stderr
    assert "Errno" not in refused.stderr
    (ws / "memory" / "2026-02-01.md").write_text("- A new note to index.\n")  # a search's sync writes
    searched = run_cli("search", "-w", str(ws), "anything", env=env, timeout=20)
    assert says in searched.stderr and "stale" in searched.stderr, searched.stderr
    lock.rmdir()
    assert run_cli("index", "-w", str(ws), env=env).returncode == 0


@pytest.mark.parametrize(("suffix", "planted"), [("-wal", "link"), ("-shm", "link"), ("-wal", "directory")])
def test_a_write_ahead_log_that_is_no_file_is_named_and_nothing_written_through_it(
        make_workspace, run_cli, state_dir, tmp_path: Path, suffix: str, planted: str):
    # Before: a -wal or -shm replaced by a symlink (a state folder restored from a backup tool that
    # keeps links, a planted link) or a folder made every update fail with SQLite's "unable to open
    # database file", and searches stale saying the same: nothing named the file or what to do.
    ws = make_workspace(FILES)
    env = {"MEMDIR_PROVIDER": "none"}
    index = _indexed(ws, run_cli, env)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    for left in ("-wal", "-shm"):
        Path(f"{index}{left}").unlink(missing_ok=True)
    planted_at = Path(f"{index}{suffix}")
    planted_at.symlink_to(victim) if planted == "link" else planted_at.mkdir()
    (ws / "memory" / "b.md").write_text("- Renew the passport before June.\n")
    kind = "a symbolic link" if planted == "link" else "a directory"
    says = f"{planted_at} is {kind}, not a regular file: SQLite does not open the index's"
    refused = run_cli("index", "-w", str(ws), env=env)
    assert refused.returncode == 1 and says in refused.stderr, refused.stderr
    searched = run_cli("search", "--json", "-w", str(ws), "anything", env=env)
    assert any(says in w for w in json.loads(searched.stdout)["warnings"]), searched.stdout
    assert victim.read_text() == "keep\n"


def _pid_namespaces_run() -> bool:
    """Whether this process may start processes in pid namespaces of their own (root, ``unshare``)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-pf", "--mount-proc", "true"], capture_output=True).returncode == 0


def _holder_in_own_pid_namespace(index: Path, shell: str) -> subprocess.Popen[str]:
    """A process of another container (pid namespace) holding ``index``'s writer lock until its
    stdin closes; ``shell`` runs it (``{}`` is the holder's command line)."""
    code = (f"import sys; sys.path.insert(0, {str(SRC)!r}); from pathlib import Path; "
            f"from memdir.lock import FileWriterLock; FileWriterLock(Path({str(index)!r})).acquire(); "
            f"print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen(["unshare", "-pf", "--mount-proc", "sh", "-c", shell.format(f'{sys.executable} -c "$0"'),
                             code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.skipif(not _pid_namespaces_run(), reason="needs root and unshare to make pid namespaces")
def test_a_writer_with_this_processs_pid_in_another_container_is_not_taken_for_a_thread_of_it(
        make_workspace, keyword_config, state_dir):
    """Two containers sharing the state folder, memdir pid 1 in each: a search said the other's
    sync was 'a sync of this process (its watcher, or another thread)', and `memdir index` waited
    for it without a word."""
    ws = make_workspace(FILES)
    config = {"memorySearch": {**keyword_config["memorySearch"], "sync": {"searchBudgetMs": 100}}}
    (ws / "memdir.json").write_text(json.dumps(config))
    with Memory(ws, state_dir=state_dir) as mem:
        mem.sync()
        index = mem.index_path
    (ws / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\n")
    holder = _holder_in_own_pid_namespace(index, "exec {}")  # (pid 1 there)
    memdir = ["unshare", "-pf", "--mount-proc", sys.executable, "-m", "memdir", "-w", str(ws)]
    try:
        search = subprocess.run([*memdir, "search", "ramen", "--json"], capture_output=True, text=True, timeout=60,
                                env=cli_env(state_dir))
        assert search.returncode == 0, search.stderr
        warnings = json.loads(search.stdout)["warnings"]
        assert any("another memdir process (pid 1 in another container or pid namespace)" in w for w in warnings)
        assert not any("this process" in w for w in warnings)
        index_run = subprocess.Popen([*memdir, "index"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=cli_env(state_dir))
        assert index_run.stderr is not None
        assert "waiting for another memdir process (pid 1 in another container" in index_run.stderr.readline()
    finally:
        holder.communicate("", timeout=30)  # (lets go of the lock)
    assert index_run.wait(timeout=60) == 0
    assert "1 indexed" in index_run.communicate()[0]


@pytest.mark.skipif(not _pid_namespaces_run(), reason="needs root and unshare to make pid namespaces")
def test_a_stopped_process_of_this_container_is_not_taken_for_another_containers_writer(
        make_workspace, keyword_config, state_dir):
    """The writer is pid 2 of its container, and pid 2 of this one is a stopped process: status said
    'Writer: pid 2 is stopped (Ctrl-Z or SIGSTOP) …: resume it with `kill -CONT 2`', a process
    that had nothing to do with it, and waits gave up on a writer that was running."""
    ws = make_workspace(FILES)
    (ws / "memdir.json").write_text(json.dumps(keyword_config))
    with Memory(ws, state_dir=state_dir) as mem:
        mem.sync()
        index = mem.index_path
    holder = _holder_in_own_pid_namespace(index, "{}; true")  # (sh is pid 1 there, the holder pid 2)
    try:
        status = subprocess.run(["unshare", "-pf", "--mount-proc", "sh", "-c",
                                 'sleep 60 & kill -STOP $!; exec "$0" -m memdir -w "$1" status; kill -9 $!',
                                 sys.executable, str(ws)], capture_output=True, text=True, timeout=60,
                                env=cli_env(state_dir))
        assert status.returncode == 0, status.stderr
        assert "Writer: pid 2 in another container or pid namespace is indexing" in status.stdout
        # and from the host, which sees the holder by a pid of its own
        assert FileWriterLock(index).holder()["pid"] not in (1, 2)
    finally:
        holder.communicate("", timeout=30)


@pytest.mark.skipif(not _pid_namespaces_run(), reason="needs root and unshare to make pid namespaces")
def test_a_first_build_in_another_container_is_not_named_by_this_searchs_own_pid(make_workspace, keyword_config,
                                                                                   state_dir):
    """A search in a container (memdir its pid 1) while another container built the first index:
    'the index is being built (pid 1, listing files)', pid 1 being the search itself there."""
    ws = make_workspace(FILES)
    (ws / "memdir.json").write_text(json.dumps(keyword_config))
    with Memory(ws, state_dir=state_dir) as mem:
        index = mem.index_path  # (nothing built)
    holder = _holder_in_own_pid_namespace(index, "exec {}")
    try:
        search = subprocess.run(["unshare", "-pf", "--mount-proc", sys.executable, "-m", "memdir", "-w", str(ws),
                                 "search", "ramen", "--json"], capture_output=True, text=True, timeout=60,
                                env=cli_env(state_dir))
    finally:
        holder.communicate("", timeout=30)
    assert search.returncode == 0, search.stderr
    assert ("the index is being built (pid 1 in another container or pid namespace, listing files)"
            in " ".join(json.loads(search.stdout)["warnings"]))
