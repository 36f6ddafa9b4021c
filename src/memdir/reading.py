"""Reading a note the way the indexer, ``memory_get`` and search's widening all do: only a regular
file, never through a symlink, with the same line ends.

Apart from :mod:`memdir.workspace` (which files are memory) because a search reads notes too,
and should not import discovery to do so.
"""

from __future__ import annotations

import errno
import os
import re
import stat

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def kind_of(mode: int) -> str:
    """``"a FIFO"``, ``"a socket"``, ... for a non-regular file mode (``"not a regular file"`` otherwise)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


_LONE_CR = re.compile(r"\r(?!\n)")


def decode_note(raw: bytes) -> str:
    """A note's text with lines ending in ``\n``: a lone ``\r`` (classic Mac line ends) becomes
    ``\n``, so such a note has lines, not one long one.  ``\r\n`` is left as it is (the ``\r``
    stays on its line).  The indexer, ``memory_get`` and widening all read notes through this, so
    their line numbers agree."""
    text = raw.decode("utf-8", errors="replace")
    return _LONE_CR.sub("\n", text) if "\r" in text else text


class NotRegularFile(OSError):
    """A memory path that is a FIFO, socket, device or folder: refused before it is read."""


def read_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> bytes:
    """The bytes of a regular file, refusing anything else *before* reading it.

    ``O_NONBLOCK`` makes opening a FIFO return at once instead of waiting for a writer (a FIFO
    named ``memory/x.md`` used to hang ``memdir get`` and every later MCP call); ``fstat`` on the
    open descriptor then refuses it, so a file swapped for a FIFO after discovery is caught too.
    Symlinks are never followed (``O_NOFOLLOW``).  ``dir_fd``: ``path`` is a name in that open
    folder, so a folder swapped for a symlink after it was opened cannot redirect the read.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"{kind_of(mode)}, not a regular file", str(path))
        parts = []
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            parts.append(block)
        return b"".join(parts)
    finally:
        os.close(fd)
