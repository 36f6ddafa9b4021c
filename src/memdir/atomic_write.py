"""Replacing a small file whole, so that a reader or a crash sees the old file or the new one.

Used for files memdir writes itself (the session store, the long-term memory mirror, derived
model files): the bytes go to a temporary file beside the target, are flushed to disk, and the
temporary file is renamed over the target (atomic on POSIX and on Windows' same volume).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes, *, prefix: str | None = None) -> None:
    """Write ``data`` to ``path`` whole; the temporary file (``prefix``, else ``.<name>.``) never stays."""
    fd, tmp = tempfile.mkstemp(prefix=prefix or f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
