"""Writers killed (SIGKILL) in the windows a randomized crash sweep found between the kill
points other tests choose: each test kills a real ``memdir`` process at one exact call, then
checks that the next run heals and that nothing piles up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import cli_env

#: Runs the CLI with ``os.replace`` killing the process (SIGKILL) the first time its source
#: path contains the marker in ``argv[1]``, after the call when ``argv[2]`` is "after".
KILL_AT_REPLACE = textwrap.dedent("""
    import os, signal, sys
    marker, when = sys.argv.pop(1), sys.argv.pop(1)
    real = os.replace
    def replace(src, dst, **kw):
        if marker in str(src) and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst, **kw)
        if marker in str(src) and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace
    from memdir.cli import main
    raise SystemExit(main(sys.argv[1:]))
""")


def killed_cli(state_dir: Path, marker: str, when: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", KILL_AT_REPLACE, marker, when, *args], capture_output=True,
                          text=True, env=cli_env(state_dir), timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc


def keyword_workspace(tmp_path: Path, make_workspace) -> tuple[Path, tuple[str, ...]]:
    ws = make_workspace({"memory/notes.md": "# Kettle\n\nThe kettle descaler is under the sink.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    return ws, ("--workspace", str(ws), "--config", str(cfg))


def test_progress_temp_files_of_killed_writers_do_not_pile_up(tmp_path: Path, make_workspace, run_cli,
                                                                 state_dir: Path) -> None:
    """Each writer killed while it wrote ``<index>.progress`` used to leave its own
    ``<index>.progress.<pid>.tmp`` beside the index for ever (named by its pid, never reused)."""
    _, base = keyword_workspace(tmp_path, make_workspace)
    folder = state_dir / "memory"
    for _ in range(2):
        killed_cli(state_dir, ".progress.", "before", "index", "--force", *base)
        assert len(list(folder.glob("*.progress.*.tmp"))) == 1  # the kill's, the one before it removed
    run_cli("index", *base, check=True)
    assert sorted(p.name for p in folder.iterdir() if ".progress" in p.name) == []
    hits = json.loads(run_cli("search", "descaler", "--json", *base, check=True).stdout)["results"]
    assert [h["path"] for h in hits] == ["memory/notes.md"]
