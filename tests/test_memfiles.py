"""The one writer of memory files: confinement, never overwriting, entry format and errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memdir.daily import DailyLogError, append_daily
from memdir.memfiles import (
    MemoryFileError,
    UnsafeMemoryPath,
    append_memory_file,
    create_memory_file,
    normalise_entry,
)


@pytest.mark.parametrize("name", ["../escape.md", "a/b.md", ".hidden.md", "notes.txt", "x..md", ""])
def test_names_are_confined_to_plain_md_files(tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafeMemoryPath, match=r"not a plain \.md file name"):
        append_memory_file(tmp_path, name, "x")
    assert not (tmp_path.parent / "escape.md").exists()


def test_errors_are_one_family() -> None:
    assert DailyLogError is MemoryFileError and issubclass(MemoryFileError, ValueError)
    assert issubclass(UnsafeMemoryPath, MemoryFileError) and issubclass(UnsafeMemoryPath, OSError)
    assert str(UnsafeMemoryPath(40, "memory/x.md is a symlink")) == "memory/x.md is a symlink"


def test_memory_path_that_is_a_file_is_refused(make_workspace) -> None:
    ws = make_workspace({"memory": "not a folder\n"})
    with pytest.raises(UnsafeMemoryPath, match="not a folder"):
        append_daily(ws, "x", date="2026-03-04")


def test_missing_workspace_is_an_error_for_append_daily_but_created_for_the_hook(tmp_path: Path) -> None:
    with pytest.raises(DailyLogError, match="workspace does not exist"):
        append_daily(tmp_path / "typo", "x", date="2026-03-04")
    assert not (tmp_path / "typo").exists()
    path = create_memory_file(tmp_path / "new-ws", "2026-03-04-x", "body\n")
    assert path.read_text() == "body\n"


def test_create_never_overwrites_and_never_follows_a_symlink(tmp_path: Path) -> None:
    first = create_memory_file(tmp_path, "2026-03-04-api", "one\n")
    second = create_memory_file(tmp_path, "2026-03-04-api", "two\n")
    assert (first.name, second.name) == ("2026-03-04-api.md", "2026-03-04-api-2.md")
    assert first.read_text() == "one\n" and second.read_text() == "two\n"
    victim = tmp_path / "victim.md"
    victim.write_text("secret")
    os.symlink(victim, tmp_path / "memory" / "2026-03-05-x.md")
    third = create_memory_file(tmp_path, "2026-03-05-x", "three\n")
    assert third.name == "2026-03-05-x-2.md" and victim.read_text() == "secret"


def test_entry_normalisation() -> None:
    assert normalise_entry("\n\n  \n- note\r\n- more\r\n\n") == "- note\n- more\n"
    assert normalise_entry("  indented\n") == "  indented\n"
    with pytest.raises(MemoryFileError, match="NUL"):
        normalise_entry("a\x00b")
    with pytest.raises(MemoryFileError, match="text required"):
        normalise_entry(" \r\n ")


def test_consecutive_lines_or_blank_line_separated_entries(make_workspace) -> None:
    ws = make_workspace({"memory/2026-03-04.md": "# hand-edited"})
    append_daily(ws, "- a", date="2026-03-04")
    append_daily(ws, "- b", date="2026-03-04")
    append_daily(ws, "- c", date="2026-03-04", blank_line=True)
    append_daily(ws, "- d", date="2026-03-04", blank_line=True)
    assert (ws / "memory/2026-03-04.md").read_text() == "# hand-edited\n- a\n- b\n\n- c\n\n- d\n"


def _waiting_for_flock(inode: int) -> bool:
    """Whether some process waits for an ``flock`` on the file ``inode`` (``/proc/locks`` marks waiters ``->``)."""
    rows = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    return any(len(row) > 6 and row[1] == "->" and row[6].rsplit(":", 1)[-1] == str(inode) for row in rows)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
@pytest.mark.parametrize("how", ["rename-over", "delete"])
def test_an_append_waiting_while_an_editor_replaces_the_log_lands_in_the_new_file(make_workspace, how: str) -> None:
    """An editor saving by writing a new file and renaming it over the log (Vim, VS Code,
    JetBrains, Obsidian, a sync tool), or a deletion, while an append waited for the file's lock:
    the append wrote into the replaced file, which no name reaches, and said it had succeeded."""
    import fcntl
    import threading
    import time

    ws = make_workspace({"memory/2026-03-04.md": "# log\n- old\n"})
    log = ws / "memory/2026-03-04.md"
    holder = os.open(log, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    inode = os.fstat(holder).st_ino
    errors: list[BaseException] = []

    def append() -> None:
        try:
            append_daily(ws, "- the new entry", date="2026-03-04")
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not _waiting_for_flock(inode):
            assert time.monotonic() < deadline, "the append never waited for the lock"
            time.sleep(0.01)
        if how == "rename-over":
            (ws / "memory/.2026-03-04.md.tmp").write_text("# log\n- old\n- edited\n")
            os.replace(ws / "memory/.2026-03-04.md.tmp", log)
        else:
            log.unlink()
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
        thread.join(60)
    assert not thread.is_alive() and errors == []
    expected = "# log\n- old\n- edited\n- the new entry\n" if how == "rename-over" else "- the new entry\n"
    assert log.read_text() == expected


def _pid_namespaces_run() -> bool:
    """Whether this process may start processes in pid namespaces of their own (root, ``unshare``)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-pf", "--mount-proc", "true"], capture_output=True).returncode == 0


#: A writer on a slow disk: its fsync waits for a line on stdin, its temporary file in place meanwhile.
_SLOW_WRITER = """
import os, sys
from pathlib import Path
real = os.fsync
def slow(fd):
    print("writing", flush=True)
    sys.stdin.readline()
    real(fd)
os.fsync = slow
if sys.argv[1] == "note":
    from memdir.memfiles import create_memory_file
    print(create_memory_file(sys.argv[2], "2026-03-01-theirs", "Theirs.\\n"), flush=True)
else:
    from memdir.atomic_write import replace_file
    replace_file(Path(sys.argv[2]) / "sessions.json", b"theirs\\n")
    print("replaced", flush=True)
"""

_SWEEPER = """
import sys
from pathlib import Path
if sys.argv[1] == "note":
    from memdir.memfiles import create_memory_file
    create_memory_file(sys.argv[2], "2026-03-01-ours", "Ours.\\n")
else:
    from memdir.atomic_write import replace_file
    replace_file(Path(sys.argv[2]) / "sessions.json", b"ours\\n")
"""


@pytest.mark.skipif(not _pid_namespaces_run(), reason="needs root and unshare to make pid namespaces")
@pytest.mark.parametrize("kind", ["note", "replaced"])
def test_a_write_under_way_in_another_container_keeps_its_temporary_file(tmp_path: Path, kind: str):
    """A workspace (or state folder) shared by two containers: a note (or sessions.json) written in
    one had its temporary file removed by the other, which cannot see the writer's pid and took it
    for a killed one's: 'cannot write memory/x.md: No such file or directory; nothing was kept' (613
    of 900 notes, three containers writing at once)."""
    from helpers import cli_env

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    folder = str(ws) if kind == "note" else str(ws / "memory")
    writer = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, kind, folder], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path / "s"))
    assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    try:  # the other container, where the writer's pid is no process
        sweep = subprocess.run(["unshare", "-pf", "--mount-proc", sys.executable, "-c", _SWEEPER, kind, folder],
                               capture_output=True, text=True, timeout=60, env=cli_env(tmp_path / "s"))
        assert sweep.returncode == 0, sweep.stderr
    finally:
        out, err = writer.communicate("go\n", timeout=60)
    assert writer.returncode == 0, err
    if kind == "note":
        assert (ws / "memory" / "2026-03-01-theirs.md").read_text() == "Theirs.\n"
    else:
        assert out.strip() == "replaced" and (ws / "memory" / "sessions.json").read_text() == "theirs\n"
    assert not [n for n in os.listdir(ws / "memory") if "tmp" in n]
