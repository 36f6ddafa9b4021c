"""What surrounds the crash-safe core: races, read-only state, full disks, waiting writers.

Real processes and real files: two workspaces claiming one agent id at the same moment, a state
folder the user cannot write, a rebuild that runs out of disk, a writer that has to wait, and a
search issued while a first full index is still being built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import Backend, cli_env
from memdir.api import Memory
from memdir.config import load_config
from memdir.lock import FileWriterLock
from unprivileged import give_away, run_cli_as_user, shared_scratch

NONE = {"MEMDIR_PROVIDER": "none"}


def _notes(tag: str, n: int = 30) -> dict[str, str]:
    return {f"memory/{tag}-{i:03d}.md": f"# {tag} {i}\n\nNote {i} of {tag}: codeword {tag}{i}q.\n" for i in range(n)}


def index_of(ws: Path, state_dir: Path, **kwargs) -> Path:
    return load_config(workspace=ws, state_dir=state_dir, **kwargs).settings.index_path


def _first_batch_written(progress: Path) -> bool:
    """Whether a build's progress file says its first batch of files is committed."""
    try:
        return (json.loads(progress.read_text()).get("done") or 0) > 0
    except (OSError, ValueError):
        return False


def _wait_for(predicate, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# --- two workspaces, one agent id, started at the same moment ------------------------------------

RACER = textwrap.dedent("""
    import sys, time
    start = float(sys.argv[1])
    while time.time() < start:
        time.sleep(0.001)
    from memdir.cli import main
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.parametrize("command", ["index", "search"])
def test_two_workspaces_racing_for_one_agent_id(command, make_workspace, state_dir, tmp_path: Path):
    a = make_workspace(_notes("apple"), name="ws-a")
    b = make_workspace(_notes("berry"), name="ws-b")
    env = {**cli_env(state_dir), **NONE}
    start = time.time() + 2.0  # both processes are up and importing well before this
    args = {"index": ["index"], "search": ["search", "codeword", "--json"]}[command]
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(start), "-w", str(ws), "--agent", "shared", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for ws in (a, b)]
    outs = [p.communicate(timeout=180) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], outs
    winner, loser = (a, b) if codes[0] == 0 else (b, a)
    lost_err = outs[codes.index(1)][1]
    assert f"belongs to workspace {winner}, not {loser}" in lost_err
    with Memory(winner, agent_id="shared", config={"memorySearch": {"provider": "none"}}) as mem:
        files = set(mem.store.file_rows())
        assert len(files) == 30 and all(p.startswith(f"memory/{'apple' if winner == a else 'berry'}-")
                                        for p, _ in files)
    # and the loser is refused again later, never served the winner's notes
    again = subprocess.run([sys.executable, "-m", "memdir", "search", "codeword", "-w", str(loser), "--agent",
                            "shared"], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 1 and "belongs to workspace" in again.stderr


# --- read-only state folder ------------------------------------------------------------------------

def test_searches_work_from_a_read_only_state_folder():
    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        for rel, text in _notes("plum", 5).items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text)
        cfg = root / "cfg.json"
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        with Memory(ws, config=cfg, state_dir=state) as mem:
            mem.sync()
        for folder, _dirs, files in os.walk(root):
            os.chmod(folder, 0o755)
            for f in files:
                os.chmod(os.path.join(folder, f), 0o644)
        if os.geteuid() != 0:  # root-owned folders are read-only for nobody; as a user, drop write bits
            os.chmod(state / "memory", 0o555)
        (ws / "memory" / "plum-009.md").write_text("A note written after the index: codeword plum9q.\n")
        try:
            found = run_cli_as_user(state, "search", "plum3q", "--json", "-w", str(ws), "--config", str(cfg))
            assert found.returncode == 0, found.stderr
            payload = json.loads(found.stdout)
            assert [r["path"] for r in payload["results"]] == ["memory/plum-003.md"]
            assert payload["stale"] is True
            assert any("could not be updated" in w for w in payload["warnings"])
            st = run_cli_as_user(state, "status", "-w", str(ws), "--config", str(cfg))
            assert st.returncode == 0, st.stderr
            assert "Read-only:" in st.stdout and "Indexed: 5/6 files" in st.stdout
            index = run_cli_as_user(state, "index", "-w", str(ws), "--config", str(cfg))
            assert index.returncode == 1 and "cannot be updated" in index.stderr and str(state) in index.stderr
        finally:
            os.chmod(state / "memory", 0o755)


# --- full disk, leftovers, a directory where the index should be -----------------------------------

FSIZE = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from memdir.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def test_a_rebuild_that_runs_out_of_space_cleans_up_and_keeps_the_old_index(make_workspace, state_dir, run_cli):
    ws = make_workspace({k: v + ("Lots of words about the garden and the shed. " * 40) for k, v in
                         _notes("fig", 60).items()})
    assert run_cli("index", "-w", str(ws), env=NONE).returncode == 0
    index = index_of(ws, state_dir)
    limit = index.stat().st_size // 2
    env = {**cli_env(state_dir), **NONE}
    out = subprocess.run([sys.executable, "-c", FSIZE, str(limit), "index", "--force", "-w", str(ws)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1, out.stderr
    assert f"rebuilding the index {index} failed: " in out.stderr and "the index as it was is unchanged" in out.stderr
    assert not list(state_dir.glob("memory/*.tmp-*")), "the failed rebuild left its temp files"
    found = run_cli("search", "fig7q", "--json", "-w", str(ws), env=NONE)
    assert {r["path"] for r in json.loads(found.stdout)["results"]} == {"memory/fig-007.md"}


def test_a_rebuild_on_a_really_full_disk(make_workspace, tmp_path: Path, run_cli):
    """The same on a small tmpfs (ENOSPC, "database or disk is full"), where mounting is allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        ws = make_workspace({k: v + ("Words about the orchard. " * 60) for k, v in _notes("yam", 60).items()})
        state = mnt / "state"
        cfg = tmp_path / "cfg.json"
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        env = {"MEMDIR_STATE_DIR": str(state)}
        first = run_cli("index", "-w", str(ws), "--config", str(cfg), env=env)
        assert first.returncode == 0, first.stderr
        index = index_of(ws, state)
        filler = mnt / "filler"
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        filler.write_bytes(b"x" * max(0, free - index.stat().st_size // 3))
        forced = run_cli("index", "--force", "-w", str(ws), "--config", str(cfg), env=env)
        assert forced.returncode == 1
        assert f"rebuilding the index {index} failed" in forced.stderr and "full" in forced.stderr, forced.stderr
        assert not list(index.parent.glob("*.tmp-*"))
        filler.unlink()
        found = run_cli("search", "yam7q", "--json", "-w", str(ws), "--config", str(cfg), env=env)
        assert {r["path"] for r in json.loads(found.stdout)["results"]} == {"memory/yam-007.md"}
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_a_killed_rebuilds_temp_files_are_removed_on_the_next_open(make_workspace, state_dir, run_cli):
    ws = make_workspace(_notes("kiwi", 5))
    assert run_cli("index", "-w", str(ws), env=NONE).returncode == 0
    index = index_of(ws, state_dir)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}.tmp-0123456789ab{suffix}").write_bytes(index.read_bytes() if not suffix else b"")
    st = run_cli("status", "--json", "-w", str(ws), env=NONE)  # an open, not a write
    assert st.returncode == 0, st.stderr
    assert not list(state_dir.glob("memory/*.tmp-*"))
    assert json.loads(st.stdout)["files"] == 5


def test_a_folder_named_like_a_rebuilds_temp_file_is_left_alone(make_workspace, state_dir, run_cli):
    """Removing it failed (IsADirectoryError), and with it every search, index and status."""
    ws = make_workspace(_notes("kiwi", 5))
    assert run_cli("index", "-w", str(ws), env=NONE).returncode == 0
    index = index_of(ws, state_dir)
    folder = Path(f"{index}.tmp-notmine")
    folder.mkdir()
    (ws / "memory" / "new.md").write_text("# New\n\nzebra77q\n")
    for args in (("search", "zebra77q", "--json"), ("index",), ("index", "--force"), ("status", "--json")):
        proc = run_cli(*args, "-w", str(ws), env=NONE)
        assert proc.returncode == 0, (args, proc.stderr)
    assert folder.is_dir()


def test_an_index_path_that_is_a_directory_is_named(make_workspace, tmp_path: Path, run_cli):
    ws = make_workspace(_notes("lime", 2))
    folder = tmp_path / "index-dir"
    folder.mkdir()
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none", "store": {"path": str(folder)}}}))
    for args in (["search", "lime"], ["index"], ["status"]):
        out = run_cli(*args, "-w", str(ws), "--config", str(cfg))
        assert out.returncode == 1, out.stdout
        assert f"cannot open the index {folder}: it is a directory" in out.stderr


# --- a second writer says whom it waits for -----------------------------------------------------------

def test_a_waiting_writer_says_whom_it_waits_for(make_workspace, state_dir):
    ws = make_workspace(_notes("pear", 3))
    index = index_of(ws, state_dir)
    lock = FileWriterLock(index)
    assert lock.acquire(0)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "memdir", "index", "-w", str(ws)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**cli_env(state_dir), **NONE})
        first = proc.stderr.readline()  # blocks until the CLI says something
        assert first.strip() == (f"memdir: waiting for another memdir process (pid {os.getpid()}) to finish "
                                 f"writing {index}")
        time.sleep(0.5)
        assert proc.poll() is None, "the writer did not wait"
    finally:
        lock.release()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "3 indexed" in out
    assert "waiting for another" not in err  # said once


# --- a search during a first full index --------------------------------------------------------------

BUILDER = textwrap.dedent("""
    import hashlib, os, sys, time
    from memdir.api import Memory

    class Gated:
        id, model, provider_key, max_input_bytes, dims = "gated", "gated-8", "gated-key", 8000, 8
        calls = 0
        def _vec(self, t):
            return [(b - 127.5) / 128 for b in hashlib.sha256(t.encode()).digest()[:8]]
        def embed_query(self, t):
            return self._vec(t)
        def embed_batch(self, texts):
            Gated.calls += 1
            while Gated.calls > 1 and not os.path.exists(sys.argv[2]):
                time.sleep(0.05)
            return [self._vec(t) for t in texts]
        def close(self):
            pass

    with Memory(sys.argv[1], provider=Gated()) as mem:
        print(mem.sync().indexed, flush=True)
""")


def test_a_search_during_the_first_index_answers_at_once(make_workspace, state_dir, tmp_path: Path, run_cli):
    ws = make_workspace(_notes("date", 150))
    gate = tmp_path / "gate"
    index = index_of(ws, state_dir)
    builder = subprocess.Popen([sys.executable, "-c", BUILDER, str(ws), str(gate)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=cli_env(state_dir))
    try:
        progress = Path(f"{index}.progress")

        _wait_for(lambda: _first_batch_written(progress), what="the builder's first batch")
        found = run_cli("search", "date3q", "--json", "-w", str(ws), env=NONE, timeout=120)
        assert found.returncode == 0, found.stderr
        payload = json.loads(found.stdout)
        assert payload["stale"] is True
        note = next(w for w in payload["warnings"] if "being built" in w)
        assert f"pid {builder.pid}, " in note and "/150 files" in note and "partial" in note
        assert [r["path"] for r in payload["results"]] == ["memory/date-003.md"]  # from what is built so far
        assert builder.poll() is None, "the build finished before the search: nothing was tested"
        text = run_cli("status", "-w", str(ws), env=NONE)
        assert f"Writer: pid {builder.pid} is indexing (" in text.stdout and "/150 files, " in text.stdout
        assert " chunks)" in text.stdout, text.stdout  # the chunks of the files read so far
        writer = json.loads(run_cli("status", "--json", "-w", str(ws), env=NONE).stdout)["writer"]
        assert writer["pid"] == builder.pid and writer["total"] == 150 and writer["chunksPlanned"] > 0
    finally:
        gate.touch()
        out, err = builder.communicate(timeout=180)
    assert builder.returncode == 0 and out.strip() == "150", err
    done = run_cli("search", "date140q", "--json", "-w", str(ws), env=NONE)
    payload = json.loads(done.stdout)
    assert "stale" not in payload and "memory/date-140.md" in [r["path"] for r in payload["results"]]


def test_a_search_during_a_first_index_in_postgresql_answers_from_what_is_built(pg: Backend, make_workspace,
                                                                                state_dir, tmp_path: Path, run_cli):
    """As on SQLite (README: "a search answers at once from what is built so far"): PostgreSQL
    answered nothing until the build was published ("results will appear when it is done")."""
    ws = make_workspace(_notes("date", 150))
    gate = tmp_path / "gate"
    progress = Path(f"{index_of(ws, state_dir)}.progress")  # beside where a SQLite index would be
    env = {**cli_env(state_dir), **pg.env()}
    builder = subprocess.Popen([sys.executable, "-c", BUILDER, str(ws), str(gate)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(lambda: _first_batch_written(progress), what="the builder's first batch")
        found = run_cli("search", "date3q", "--json", "-w", str(ws), env={**NONE, **pg.env()}, timeout=120)
        payload = json.loads(found.stdout)
        assert payload["stale"] is True and any("partial" in w for w in payload["warnings"]), payload
        assert [r["path"] for r in payload["results"]] == ["memory/date-003.md"]
        assert builder.poll() is None, "the build finished before the search: nothing was tested"
    finally:
        gate.touch()
        out, err = builder.communicate(timeout=180)
    assert builder.returncode == 0 and out.strip() == "150", err


def test_a_long_running_host_answers_while_it_builds_its_first_index(make_workspace, tmp_path: Path):
    import threading

    release = threading.Event()

    class Slow:
        id, model, provider_key, max_input_bytes, dims = "slow", "slow-8", "slow-key", 8000, 8

        def embed_query(self, t):
            return [1.0] * 8

        def embed_batch(self, texts):
            release.wait(120)
            return [[1.0] * 8 for _ in texts]

        def close(self):
            pass

    ws = make_workspace(_notes("yuzu", 20))
    with Memory(ws, provider=Slow()) as mem:
        mem.first_index_wait = 0.2
        resp = mem.search("yuzu4q")
        assert resp.stale and any("being built" in w for w in resp.warnings)
        release.set()

        def built() -> bool:
            r = mem.search("yuzu4q")
            return not r.stale and "memory/yuzu-004.md" in [x.path for x in r.results]

        _wait_for(built, what="the background first index")


def test_a_first_search_that_must_build_says_so_when_it_takes_a_while(make_workspace):
    class Slow:
        id, model, provider_key, max_input_bytes, dims = "slow", "slow-8", "slow-key", 8000, 8

        def embed_query(self, t):
            return [1.0] * 8

        def embed_batch(self, texts):
            time.sleep(1.5)
            return [[1.0] * 8 for _ in texts]

        def close(self):
            pass

    told: list[str] = []
    ws = make_workspace(_notes("okra", 3))
    with Memory(ws, provider=Slow(), notice=told.append) as mem:
        assert "memory/okra-001.md" in [r.path for r in mem.search("okra1q").results]
        assert len(told) == 1 and told[0].startswith(f"no index yet for {ws}: building it before searching")
        told.clear()
        mem.search("okra2q")
        assert told == []


@pytest.mark.parametrize("opener", ["memdir", "stdlib"])
def test_connections_opening_one_new_database_at_once_all_get_wal(tmp_path: Path, opener: str) -> None:
    """Switching a new file to WAL from several connections at the same moment used to fail with
    "database is locked" (SQLite returns busy there without calling the busy handler)."""
    import sqlite3
    import threading

    from memdir import db

    errors: list[str] = []
    modes: list[str] = []

    def open_one(path: Path) -> None:
        try:
            if opener == "memdir":
                conn = db.connect(path, timeout=10)
            else:
                conn = sqlite3.connect(path, timeout=10, check_same_thread=False)
                db.enable_wal(conn, 10)
            modes.append(conn.execute("PRAGMA journal_mode").fetchone()[0])
            conn.close()
        except Exception as exc:  # collected: a thread's exception would not fail the test
            errors.append(repr(exc))

    for n in range(60):
        path = tmp_path / f"new-{n}.sqlite"
        threads = [threading.Thread(target=open_one, args=(path,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == [] and modes == ["wal"] * 240


def test_an_index_on_a_read_only_mount_is_not_said_to_need_a_chmod(make_workspace, tmp_path: Path, run_cli):
    """An index on a file system mounted read-only (a container's ``:ro`` volume) was refused with
    "… is read-only (mode 644): make it writable (chmod u+rw)": its mode is writable and a chmod
    fails there too.  It says the mount is read-only; searches still answer from the index."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
        env = {"MEMDIR_STATE_DIR": str(mnt / "state")}
        assert run_cli("index", "-w", str(ws), env=NONE | env).returncode == 0
        index = index_of(ws, mnt / "state")
        assert subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True).returncode == 0
        (ws / "memory").mkdir()
        (ws / "memory" / "a.md").write_text("- Deploy on Tuesday.\n")

        out = run_cli("index", "-w", str(ws), env=NONE | env)
        assert out.returncode == 1
        assert f"{index} is on a file system mounted read-only: remount it read-write" in out.stderr, out.stderr
        assert "chmod" not in out.stderr
        found = json.loads(run_cli("search", "otter", "--json", "-w", str(ws), env=NONE | env).stdout)
        assert [r["path"] for r in found["results"]] == ["MEMORY.md"] and found["stale"]
        assert any("mounted read-only" in w for w in found["warnings"])
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_an_index_whose_folder_cannot_be_written_names_the_folder():
    """An index file this user may write in a folder it may not (chmod a-w on the state folder's
    memory/) failed every update with SQLite's "attempt to write a readonly database": the -wal
    and -shm are made in the folder, which nothing named."""
    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        ws.mkdir()
        state.mkdir()
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        cfg = root / "cfg.json"
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        os.chmod(cfg, 0o644)
        give_away(root)
        args = ("-w", str(ws), "--config", str(cfg))
        assert run_cli_as_user(state, "index", *args).returncode == 0
        (state / "memory").chmod(0o500)
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n- The kiwi is new.\n")
        why = f"this user cannot write its own folder {state / 'memory'} (mode 500): chmod u+rwx it"
        try:
            out = run_cli_as_user(state, "index", *args)
            assert out.returncode == 1 and why in out.stderr and "readonly database" not in out.stderr, out.stderr
            found = json.loads(run_cli_as_user(state, "search", "otter", "--json", *args).stdout)
            assert [r["path"] for r in found["results"]] == ["MEMORY.md"] and found["stale"]
            assert any(why in w for w in found["warnings"]), found["warnings"]
        finally:
            (state / "memory").chmod(0o700)
