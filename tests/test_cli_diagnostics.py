"""What memdir prints about itself: ``-q`` leaves only errors on stderr, ``-v`` says what was
chosen, and ``memdir completion`` completes what the commands take; through the real CLI."""

from __future__ import annotations

from pathlib import Path


def _damage(index: Path) -> None:
    with index.open("r+b") as f:
        f.write(b"not a database " * 100)


def test_quiet_leaves_notices_off_stderr(make_workspace, run_cli, state_dir: Path) -> None:
    """``-q`` ("print only errors on stderr: no notes, warnings or progress") still printed the
    notices memdir says beside a command's output ('the index … was damaged …; moved it aside …
    and rebuilding it', 'waiting for … to finish writing'): a cron job's ``memdir -q search``
    mailed them; without ``-q`` the notice is said as before."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    run_cli("-w", str(ws), "index", check=True)
    (index,) = (state_dir / "memory").glob("*.sqlite")
    _damage(index)
    quiet = run_cli("-w", str(ws), "-q", "search", "heron", check=True)
    assert "heron" in quiet.stdout and quiet.stderr == ""
    _damage(index)
    told = run_cli("-w", str(ws), "search", "heron", check=True)
    assert "heron" in told.stdout and "was damaged" in told.stderr
