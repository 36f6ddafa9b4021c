"""Running the CLI as a user that permissions apply to (tests run as root in some places).

Root reads a ``chmod 000`` file and writes a read-only folder, so a permission test run as root
proves nothing.  When the tests run as root, these helpers run the command as ``nobody`` through
``setpriv``, in a scratch folder that user can reach; otherwise they run it as the current user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import cli_env

NOBODY = 65534


def can_drop_privileges() -> bool:
    return os.geteuid() != 0 or shutil.which("setpriv") is not None


@contextmanager
def shared_scratch() -> Iterator[Path]:
    """A folder the unprivileged user can reach (pytest's tmp folders are private to root)."""
    if not can_drop_privileges():
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    root = Path(tempfile.mkdtemp(prefix="memdir-perm-"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        for folder, dirs, _ in os.walk(root):
            for d in dirs:
                try:
                    os.chmod(os.path.join(folder, d), 0o755)
                except OSError:
                    pass
        shutil.rmtree(root, ignore_errors=True)


def give_away(path: Path) -> None:
    """Hand ``path`` (recursively) to the unprivileged user when the tests run as root."""
    if os.geteuid() != 0:
        return
    for folder, dirs, files in os.walk(path):
        os.chown(folder, NOBODY, NOBODY)
        for name in dirs + files:
            os.chown(os.path.join(folder, name), NOBODY, NOBODY, follow_symlinks=False)


def run_cli_as_user(state_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``memdir ARGS`` as the unprivileged user (nobody under root, else the current user)."""
    cmd = [sys.executable, "-m", "memdir", *args]
    if os.geteuid() == 0:
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
    env = {**cli_env(state_dir), "HOME": str(state_dir.parent)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=state_dir.parent)
