"""Names at the limits of file systems and other platforms' names: the index's own files beside a
long index name, Windows paths in the config, workspace paths with odd characters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import cli_env


def _cli(state_dir: Path, ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memdir", "--workspace", str(ws), *args],
                          capture_output=True, text=True, timeout=120, env=cli_env(state_dir))


def test_a_store_path_too_long_for_the_files_beside_it_is_refused_by_name(make_workspace, tmp_path: Path):
    """An index name of 242 bytes fits the file system, but the first build's
    ``….sqlite.tmp-<id>`` did not: 'Memory index failed: [Errno 36] File name too long'."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    index = tmp_path / ("é" * 117 + ".sqlite")  # 241 bytes
    (ws / "memdir.toml").write_text(f'[memorySearch]\nprovider = "none"\nstore.path = "{index}"\n')
    out = _cli(tmp_path / "state", ws, "index")
    assert out.returncode != 0
    assert "names an index file of 241 bytes; at most 215" in out.stderr, out.stderr
    assert "Errno" not in out.stderr and not index.exists()


def test_the_longest_store_path_allowed_builds_rebuilds_and_searches(make_workspace, tmp_path: Path):
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    index = tmp_path / ("é" * 104 + ".sqlite")  # 215 bytes
    (ws / "memdir.toml").write_text(f'[memorySearch]\nprovider = "none"\nstore.path = "{index}"\n')
    state = tmp_path / "state"
    for args in (("index",), ("index", "--force"), ("search", "heron")):
        out = _cli(state, ws, *args)
        assert out.returncode == 0, (args, out.stderr)
    assert "MEMORY.md" in out.stdout and index.is_file()
