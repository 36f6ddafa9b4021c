"""Writes that fail part-way (disk full, a file size limit, a read-only folder), as real subprocesses.

A full disk is simulated with ``RLIMIT_FSIZE``: Python ignores SIGXFSZ, so a write past the limit
stops short and the next one fails with EFBIG, exactly where ENOSPC would strike.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from helpers import cli_env

KEYWORD = json.dumps({"memorySearch": {"provider": "none"}})


def _limited(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` capping the size of any file the child writes."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _memdir(state_dir: Path, *args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memdir", *args], capture_output=True, text=True, timeout=120,
                          env=cli_env(state_dir), preexec_fn=None if limit is None else _limited(limit))


def test_append_on_a_full_disk_leaves_the_daily_log_as_it_was(make_workspace, state_dir: Path) -> None:
    """The entry used to be written up to the limit and left there: a half line at the log's end,
    which the next append then continued."""
    ws = make_workspace({"memdir.json": KEYWORD})
    first = _memdir(state_dir, "-w", str(ws), "append", "kangaroo line before the disk filled")
    assert first.returncode == 0, first.stderr
    (log,) = (ws / "memory").glob("*.md")
    before = log.read_bytes()
    out = _memdir(state_dir, "-w", str(ws), "append", "x" * 20_000 + " platypus", limit=len(before) + 100)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing was written" in lines[0] and log.name in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert log.read_bytes() == before
    again = _memdir(state_dir, "-w", str(ws), "append", "wombat line after space was freed")
    assert again.returncode == 0, again.stderr
    after = log.read_bytes()
    assert after.startswith(before) and after[len(before):] == b"wombat line after space was freed\n"


def test_session_hook_on_a_full_disk_keeps_no_partial_file(tmp_path: Path, state_dir: Path) -> None:
    """A dated session file cut short used to stay (a truncated memory), and the next run wrote
    ``-2.md`` beside it."""
    ws = tmp_path / "ws"
    transcript = tmp_path / "s" / "abc.jsonl"
    transcript.parent.mkdir()
    records = ({"type": "message", "message": {"role": "user", "content": f"walrus {i} " * 40}} for i in range(15))
    transcript.write_text("".join(json.dumps(r) + "\n" for r in records))
    script = textwrap.dedent(f"""
        from datetime import datetime, UTC
        from memdir.sessions.hook import run_session_memory_hook
        res = run_session_memory_hook(action="new", session_key="agent:main:main", workspace={str(ws)!r},
                                      previous_entry={{"sessionId": "abc", "sessionFile": {str(transcript)!r}}},
                                      now=datetime(2026, 3, 4, 5, 6, tzinfo=UTC))
        print(res.path or "", "|", res.error or "")
    """)

    def hook(limit: int | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              env=cli_env(state_dir), preexec_fn=None if limit is None else _limited(limit))

    failed = hook(1000)
    assert failed.returncode == 0, failed.stderr
    assert "File too large" in failed.stdout and "nothing was kept" in failed.stdout
    assert list((ws / "memory").iterdir()) == []
    ok = hook(None)
    path = Path(ok.stdout.split("|")[0].strip())
    assert path.name == "2026-03-04-0506.md", ok.stdout
    assert "walrus 14" in path.read_text()
    assert sorted(p.name for p in (ws / "memory").iterdir()) == ["2026-03-04-0506.md"]
