"""What long-running memdir processes cost while nothing happens: a watcher, ``memdir watch``,
``memdir mcp`` left running for days on a laptop or a small container.

Costs are counted, never timed: wake-ups are the kernel's context-switch counters of the process's
threads (``/proc/PID/task/*/status``) over a few idle seconds, compared with bounds several times
what the process needs and several times below what it cost before; threads and descriptors are
counted in ``/proc``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import cli_env
from memdir.watch import POLL_CPU_SHARE, POLL_DELAY_MS, POLL_MAX_SECONDS

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the threads in /proc")

#: Seconds of idleness whose wake-ups are counted.
IDLE_SECONDS = 3.0


def wakeups(pid: int | str, *, skip: set[str] = frozenset()) -> int:
    """Context switches of every thread of ``pid`` so far (but those whose ids are in ``skip``):
    a thread that sleeps and wakes up switches once each time."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        if tid in skip:
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as fh:
                total += sum(int(line.split()[1]) for line in fh if "ctxt_switches" in line)
        except OSError:  # a thread that ended meanwhile
            continue
    return total


_IDLE_WATCHER = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[2])
from test_idle import IDLE_SECONDS, wakeups
from memdir.api import Memory

with Memory(sys.argv[1], config={"memorySearch": {"provider": "none"}}) as mem:
    mem.sync()
    watcher = mem.watch()
    assert watcher.ready.wait(60)
    time.sleep(1.0)  # (the catch-up comparison done)
    main = str(threading.get_native_id())  # this thread sleeps: its one wake-up is not the watcher's
    before = wakeups("self", skip={main})
    time.sleep(IDLE_SECONDS)
    print(json.dumps({"wakeups": wakeups("self", skip={main}) - before, "polling": watcher.polling}))
"""


def test_an_idle_watcher_hardly_wakes_up(make_workspace, tmp_path: Path) -> None:
    """An idle watcher woke 33 times a second (watchfiles looked for changes every 30 ms): ~100
    wake-ups in 3 idle seconds, for as long as ``memdir mcp`` or a host's watcher ran.  Now ~4 a
    second (a look every 250 ms)."""
    ws = make_workspace({"MEMORY.md": "# Prefs\nAisle seat.\n", "memory/2026-01-01.md": "Apple pie.\n"})
    script = tmp_path / "idle.py"
    script.write_text(_IDLE_WATCHER)
    proc = subprocess.run([sys.executable, str(script), str(ws), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=120, env=cli_env(tmp_path / "state"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["polling"] is False  # (inotify: what is measured is the watch loop, not polling)
    assert out["wakeups"] <= 10 * IDLE_SECONDS, out


def test_memdir_watch_main_thread_sleeps_until_a_signal(make_workspace, state_dir) -> None:
    """``memdir watch``'s main thread woke every 0.2 s to look at what its signal handlers noted:
    15 wake-ups in 3 idle seconds, more than the watcher's own.  It sleeps until a signal (or the
    reader going away) wakes it, and Ctrl-C still stops it at once."""
    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "watch", "-w", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    try:
        while "(start):" not in (line := proc.stdout.readline()):
            assert line, f"watch exited before its first sync: {proc.stderr.read()}"
        main = {str(proc.pid)}
        others = set(os.listdir(f"/proc/{proc.pid}/task")) - main
        before = wakeups(proc.pid, skip=others)
        time.sleep(IDLE_SECONDS)
        woke = wakeups(proc.pid, skip=others) - before
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert woke <= 3, f"the main thread woke {woke} times in {IDLE_SECONDS:g} idle seconds"
    assert proc.returncode == 0 and "Stopped watching." in err, err


_ONE_CPU_MODEL = r"""
import json, os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # as `taskset -c N` starts it
from memdir.embeddings.local import LocalEmbeddingProvider, RunSettings

provider = LocalEmbeddingProvider(model_cache_dir=sys.argv[1])
provider.embed_batch(["the kiwi is green"])
session = provider._backend._session
print(json.dumps({"intraOp": session.get_session_options().intra_op_num_threads,
                  "asked4": RunSettings.make(threads=4).threads}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs to leave the process one of")
def test_the_model_runs_one_thread_on_one_allowed_cpu(tmp_path: Path) -> None:
    """Under ``taskset -c 0`` (or ``docker --cpuset-cpus=0``) on a machine of two or more cores, the
    embedding model ran two threads, counted from the machine's cores, which took turns on the
    one core the process may use; ``local.threads = 4`` there ran four."""
    proc = subprocess.run([sys.executable, "-c", _ONE_CPU_MODEL, os.environ["MEMDIR_CACHE_DIR"]],
                          capture_output=True, text=True, timeout=120, env=cli_env(tmp_path / "state"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["intraOp"] == 1 and out["asked4"] == 1, out


def test_the_http_mcp_server_main_loop_hardly_wakes_up(make_workspace, state_dir) -> None:
    """``memdir mcp --transport http`` with no client woke 10 times a second in its main thread
    (uvicorn's loop looks at its exit flag every 0.1 s): 30 wake-ups in 3 idle seconds.  It looks
    once a second, woken at once by SIGTERM; its answers still carry a Date header."""
    import socket

    import httpx

    ws = make_workspace({"memory/a.md": "Alpha note.\n"})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                             "-w", str(ws)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server never listened"
                time.sleep(0.1)
        assert answer.headers.get("date")
        time.sleep(1.0)  # (the start-up sync over)
        others = set(os.listdir(f"/proc/{proc.pid}/task")) - {str(proc.pid)}
        before = wakeups(proc.pid, skip=others)
        time.sleep(IDLE_SECONDS)
        woke = wakeups(proc.pid, skip=others) - before
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert woke <= 2 * IDLE_SECONDS + 2, f"the main thread woke {woke} times in {IDLE_SECONDS:g} idle seconds"


_UNDER_A_QUOTA = r"""
import json, sys
sys.stdin.readline()  # (moved into the cgroup meanwhile)
from memdir import sync
from memdir.embeddings.local import RunSettings

print(json.dumps({"threads": RunSettings.make().threads, "asked4": RunSettings.make(threads=4).threads,
                  "worker": sync.free_core()}))
"""


def _cpu_cgroup(name: str) -> Path | None:
    """A new cgroup (v1's cpu controller or v2's) whose CPU quota can be set, or None."""
    for root, controllers in ((Path("/sys/fs/cgroup/cpu"), None), (Path("/sys/fs/cgroup"), "cgroup.subtree_control")):
        if controllers is not None:
            try:
                if "cpu" not in (root / controllers).read_text().split():
                    continue
            except OSError:
                continue
        elif not (root / "cpu.cfs_quota_us").exists():
            continue
        try:
            (root / name).mkdir()
        except OSError:
            continue
        return root / name
    return None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs for a one-CPU quota to be fewer")
def test_a_cpu_quota_is_counted_as_fewer_cpus(tmp_path: Path) -> None:
    """Under a CPU quota of one CPU (``docker --cpus=1``, a Kubernetes limit, systemd's
    ``CPUQuota=100%``) on a machine of two or more, the model ran two threads (each throttled in
    turn), ``local.threads = 4`` four, and an index build could start its chunking worker beside
    the main process, both sharing the one CPU's time (~15% more CPU for nothing)."""
    import uuid

    group = _cpu_cgroup(f"memdir-test-{uuid.uuid4().hex[:8]}") if os.geteuid() == 0 else None
    if group is None:
        pytest.skip("cannot make a cgroup with a CPU quota here (needs root and a writable cgroup file system)")
    try:
        if (group / "cpu.max").exists():
            (group / "cpu.max").write_text("100000 100000")
        else:
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text("100000")
        proc = subprocess.Popen([sys.executable, "-c", _UNDER_A_QUOTA], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=cli_env(tmp_path / "state"))
        (group / "cgroup.procs").write_text(str(proc.pid))
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        for _ in range(50):  # (emptied once the child has exited)
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"threads": 1, "asked4": 1, "worker": False}


_IDLE_POLLER = r"""
import json, sys, threading, time
import memdir.watch
from memdir.api import Memory

scans = []  # (when a scan of the folders started, the CPU it took), counted, not changed
listing = memdir.watch._listing


def counted(folders):
    started, cpu = time.monotonic(), time.thread_time()
    try:
        return listing(folders)
    finally:
        scans.append((started, time.thread_time() - cpu))


memdir.watch._listing = counted
with Memory(sys.argv[1], config={"memorySearch": {"provider": "none"}}) as mem:
    mem.sync()
    watcher = mem.watch()
    assert watcher.ready.wait(120)
    deadline = time.monotonic() + 40  # (a scan's pause is 30 s at most)
    while len(scans) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    print(json.dumps({"scans": scans}))
"""


def test_polling_a_large_workspace_takes_a_small_share_of_a_cpu(tmp_path: Path) -> None:
    """Where memdir polls (WSL 2, ``WATCHFILES_FORCE_POLLING``, the OS's watch limit reached) it
    looked at every note every second whatever it cost: 5,000 notes took ~5% of a CPU for as long
    as the watcher ran, idle.  A look is made less often where it would cost more than 1% of a CPU."""
    ws = tmp_path / "ws"
    for folder in range(250):
        (ws / "memory" / f"f{folder:03d}").mkdir(parents=True)
        for note in range(20):
            (ws / "memory" / f"f{folder:03d}" / f"n{note}.md").write_text(f"Note {folder} {note}.\n")
    proc = subprocess.run([sys.executable, "-c", _IDLE_POLLER, str(ws)], capture_output=True, text=True,
                          timeout=300, env=cli_env(tmp_path / "state", WATCHFILES_FORCE_POLLING="1"))
    assert proc.returncode == 0, proc.stderr
    scans = json.loads(proc.stdout.strip().splitlines()[-1])["scans"]
    assert len(scans) >= 3, scans
    for (at, cost), (following, _) in itertools.pairwise(scans):
        # (behaviour, not speed: the pause after a scan is what its own cost asks for, on any machine)
        wanted = min(max(POLL_DELAY_MS / 1000, cost / POLL_CPU_SHARE), POLL_MAX_SECONDS)
        assert following - at >= 0.9 * wanted, (f"a scan costing {cost * 1000:.0f} ms of CPU was followed by "
                                                f"another after {following - at:.2f} s, not {wanted:.2f} s")
