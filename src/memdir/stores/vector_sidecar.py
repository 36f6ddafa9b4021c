"""The int8 vector matrix saved beside the index (``<index>.vec8``), for the next process.

A one-shot ``memdir search`` at 100k chunks spent 1.3-1.8 s reading every vector blob out of
SQLite to build its matrix; reading this file (a quarter of the float32 bytes) takes tens of
milliseconds.  It is derived state and never trusted blindly: its header names the index's
vectors epoch and the change-log position it reflects, and a CRC covers its arrays.  A reader
uses it only when the epoch matches and the log still holds every change since (the caller
applies those), else it reloads from SQLite and writes a new one.  The position alone is not
proof: an index restored from a backup and written to again reaches the same positions by another
history.  So the header also keeps the last few log entries it reflects, each with a CRC of its
chunk's vectors then (``tail``), and the caller checks them against the index before use.  Writes go to a temp file
renamed over the old one, so a process killed at any moment leaves the old file, the new one,
or a temp file nobody reads; a truncated or corrupt file fails the size or CRC check and is
rebuilt.
"""

from __future__ import annotations

import json
import os
import stat
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"MEMDIR-VEC8-2\n"  # -1 files had no ``tail``: rebuilt once
_ALIGN = 64


def sidecar_path(index_path: Path) -> Path:
    return Path(f"{index_path}.vec8")


def _crc(*parts: Any) -> int:
    crc = 0
    for p in parts:
        crc = zlib.crc32(memoryview(p).cast("B"), crc)
    return crc


def write(path: Path, matrix: np.ndarray, scale: np.ndarray, chunks: np.ndarray, *, epoch: str | None,
          seq: int, max_windows: int, tail: list[list[Any]]) -> bool:
    """Save ``matrix`` (int8 rows), ``scale`` (per row) and ``chunks`` (rowid per row), with
    ``tail`` (the last log entries at ``seq``, see :func:`memdir.stores.vectors.log_tail`); False
    if the folder is not writable."""
    import numpy as np

    if _newer_format(path):
        return False
    matrix = np.ascontiguousarray(matrix, dtype=np.int8)
    scale = np.ascontiguousarray(scale, dtype="<f4")
    chunks = np.ascontiguousarray(chunks, dtype="<i8")
    header = json.dumps({"epoch": epoch, "seq": int(seq), "rows": len(chunks), "dims": int(matrix.shape[1]),
                         "maxWindows": int(max_windows), "tail": tail,
                         "crc": _crc(chunks, scale, matrix)}).encode()
    head = MAGIC + len(header).to_bytes(4, "little") + header
    head += b"\0" * (-len(head) % _ALIGN)
    from memdir.atomic_write import hold_temp

    tmp = Path(f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        # private (0600), as the index: its vectors are the notes' embeddings (it came out 0644)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        if not hold_temp(fd, str(tmp)):  # (removed at once by another container's sweep: no file this time)
            return False
        with open(fd, "wb") as fh:
            fh.write(head)
            fh.write(memoryview(chunks).cast("B"))
            fh.write(memoryview(scale).cast("B"))
            fh.write(memoryview(matrix).cast("B"))
            os.replace(tmp, path)  # (still held)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def _newer_format(path: Path) -> bool:
    """Whether ``path`` holds the sidecar of a newer memdir (``MEMDIR-VEC8-3`` or later): an older one
    replaced it with its own, which the newer one then read as no sidecar and replaced again, each
    process of either reading every vector out of SQLite (1.3-1.8 s at 100k chunks) when the two ran
    one after the other."""
    prefix = MAGIC[: MAGIC.rindex(b"-") + 1]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        head = os.read(fd, 32) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return False
    finally:
        os.close(fd)
    version = head[len(prefix):].split(b"\n", 1)[0]
    return head.startswith(prefix) and version.isdigit() and int(version) > int(MAGIC[len(prefix):-1])


def remove_newer(path: Path) -> None:
    """Delete a newer memdir's sidecar once this memdir has rebuilt the index it described (a
    downgrade made for good: ``memdir index --force``), so that this one's can be saved again."""
    if _newer_format(path):
        try:
            os.unlink(path)
        except OSError:
            pass


def remove_leftovers(path: Path) -> None:
    """Delete temp files of writers that died before renaming them (the pid is in the name)."""
    from memdir.atomic_write import temps_of, writer_gone

    # (only names of the form written: agent 'x.sqlite.vec8.tmp-1''s index is named after x's sidecar)
    for leftover in temps_of(f"{path}.tmp-", r"[0-9]+-[0-9A-Za-z]+"):
        pid = leftover.rsplit(".tmp-", 1)[1].split("-", 1)[0]
        if not writer_gone(int(pid), leftover):
            continue  # its writer is alive (here, or in a container sharing the state folder)
        try:
            os.unlink(leftover)
        except OSError:
            pass


def read(path: Path, *, dims: int, epoch: str | None, lo: int, hi: int
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, list[Any]] | None:
    """``(matrix, scale, chunks, seq, max_windows, tail)`` read from ``path``, or ``None`` if it is
    missing, damaged, for other vectors, or older than the change log can bring up to date (the
    caller still checks ``tail``).

    Read into memory, not mapped: a file truncated under a mapping would kill the process."""
    import numpy as np

    try:
        # (non-blocking, regular files only: a FIFO at that name waited for a writer for ever)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            head = fh.read(4096)
            if head[: len(MAGIC)] != MAGIC:
                return None
            n = int.from_bytes(head[len(MAGIC) : len(MAGIC) + 4], "little")
            start = len(MAGIC) + 4
            meta = json.loads(head[start : start + n])
            offset = start + n + (-(start + n) % _ALIGN)
            rows, width, seq = int(meta["rows"]), int(meta["dims"]), int(meta["seq"])
            tail = meta["tail"]
            if width != dims or meta["epoch"] != epoch or not (lo - 1 <= seq <= hi) or not isinstance(tail, list):
                return None
            size = rows * (8 + 4 + width)
            if os.fstat(fh.fileno()).st_size != offset + size:
                return None
            fh.seek(offset)
            data = np.empty(size, dtype=np.uint8)
            if fh.readinto(memoryview(data)) != size:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    chunks = data[: rows * 8].view("<i8")
    scale = data[rows * 8 : rows * 12].view("<f4")
    matrix = data[rows * 12 :].view(np.int8).reshape(rows, width)
    if _crc(chunks, scale, matrix) != meta.get("crc"):
        return None
    return matrix, scale, chunks, seq, int(meta.get("maxWindows") or 1), tail
