"""Confined writers for ``<workspace>/memory/*.md`` — the only files the flush and hook create.

Every write goes through a directory descriptor for ``<ws>/memory`` opened with ``O_NOFOLLOW``
and a file name that must be a plain ``*.md`` name, so a symlinked ``memory/`` folder, a
symlinked target file or a name with a slash can never redirect a write elsewhere.  Daily-log
appends are append-only under an exclusive lock; new files are created with ``O_EXCL``, so an
existing file is never overwritten.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

MEMORY_DIR = "memory"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.md$")


class UnsafeMemoryPath(OSError):
    """A write would leave ``<ws>/memory/`` or go through a symlink; nothing was written."""


def _check_name(name: str) -> None:
    if not _SAFE_NAME.match(name) or ".." in name:
        raise UnsafeMemoryPath(errno.EINVAL, f"refusing to write {name!r}: not a plain .md file name")


@contextlib.contextmanager
def memory_dir_fd(workspace: str | os.PathLike[str], *, create: bool = True) -> Iterator[int]:
    """An ``O_DIRECTORY|O_NOFOLLOW`` descriptor for ``<ws>/memory`` (``mkdir -p`` if missing)."""
    folder = Path(workspace) / MEMORY_DIR
    if create:
        Path(workspace).mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o755)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeMemoryPath(exc.errno, f"{folder} is a symlink or not a directory") from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def append_memory_file(workspace: str | os.PathLike[str], name: str, text: str) -> Path:
    """Append ``text`` to ``<ws>/memory/<name>`` (created if missing); returns the file's path.

    Existing content is never touched: the entry is written after it, separated by a blank
    line, under ``flock`` so concurrent appenders cannot interleave.
    """
    _check_name(name)
    body = text.strip("\n")
    if not body.strip():
        raise ValueError("nothing to append: text is empty")
    with memory_dir_fd(workspace) as dfd:
        try:
            fd = os.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeMemoryPath(exc.errno, f"memory/{name} is a symlink") from exc
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UnsafeMemoryPath(errno.EINVAL, f"memory/{name} is not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            prefix = b""
            if size:
                tail = os.pread(fd, 2, max(0, size - 2))
                prefix = b"" if tail.endswith(b"\n\n") else (b"\n" if tail.endswith(b"\n") else b"\n\n")
            _write_all(fd, prefix + body.encode("utf-8") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    return Path(workspace) / MEMORY_DIR / name


def create_memory_file(workspace: str | os.PathLike[str], stem: str, text: str, *, max_tries: int = 1000) -> Path:
    """Create ``<ws>/memory/<stem>.md``, or ``<stem>-2.md``, ``-3``… if taken; never overwrites."""
    data = text.encode("utf-8")
    with memory_dir_fd(workspace) as dfd:
        for n in range(1, max_tries + 1):
            name = f"{stem}.md" if n == 1 else f"{stem}-{n}.md"
            _check_name(name)
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
            except FileExistsError:
                continue
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            return Path(workspace) / MEMORY_DIR / name
    raise FileExistsError(f"no free file name for memory/{stem}.md after {max_tries} tries")
