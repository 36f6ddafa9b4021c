"""What long-running memdir processes cost while nothing happens: a watcher, ``memdir watch``,
``memdir mcp`` left running for days on a laptop or a small container.

Costs are counted, never timed: wake-ups are the kernel's context-switch counters of the process's
threads (``/proc/PID/task/*/status``) over a few idle seconds, compared with bounds several times
what the process needs and several times below what it cost before; threads and descriptors are
counted in ``/proc``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env

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
