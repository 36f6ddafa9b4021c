"""Notes' lines held in process for result widening, checked against the file on every use.

Widening a result (:func:`memdir.search._widen`) needs the whole lines around its chunk, and a
search widens up to a few dozen candidates from as many files: reading, decoding and splitting
each of them was half of a warm hybrid search at 10k chunks.  A long-lived process (MCP server,
agent loop, a reused :class:`memdir.api.Memory`) asks about the same notes again and again, so
each file's lines and their widths are kept, least recently used first out, and reused while
one ``lstat`` says the file is the one that was read (same inode, size, mtime and ctime to the
nanosecond).  A file edited since is read again; one that cannot be read now has no lines (the
result keeps its chunk's lines, never an error).  Nothing is written anywhere.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from pathlib import Path

from memdir.textutil import weighted_len

#: Characters held before the least recently used notes are let go (~a few tens of MB).
MAX_CHARS = 16_000_000


class NoteLines:
    """``path → (lines, costs)``, where ``costs[i]`` is line ``i``'s weighted width plus its newline."""

    def __init__(self, max_chars: int = MAX_CHARS):
        self.max_chars = max_chars
        self._files: OrderedDict[str, tuple[tuple[int, int, int, int], list[str], list[int], int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()  # searches may run in several threads of one process

    def get(self, path: str | Path) -> tuple[list[str], list[int]]:
        key = str(path)
        try:
            st = os.lstat(key)
        except OSError:
            self._drop(key)
            return [], []
        if not stat.S_ISREG(st.st_mode):
            self._drop(key)
            return [], []
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            held = self._files.get(key)
            if held is not None and held[0] == sig:
                self._files.move_to_end(key)
                return held[1], held[2]
        text = _read_text(path)
        lines = text.split("\n") if text is not None else []
        if text is not None and text.isascii():  # most notes: a width is a length
            costs = [n + 1 for n in map(len, lines)]
        else:
            costs = [weighted_len(line) + 1 for line in lines]
        size = st.st_size
        with self._lock:
            self._drop_locked(key)
            if lines and size <= self.max_chars:
                self._files[key] = (sig, lines, costs, size)
                self._chars += size
                while self._chars > self.max_chars and self._files:
                    self._chars -= self._files.popitem(last=False)[1][3]
        return lines, costs

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._files)

    def _drop(self, key: str) -> None:
        with self._lock:
            self._drop_locked(key)

    def _drop_locked(self, key: str) -> None:
        old = self._files.pop(key, None)
        if old is not None:
            self._chars -= old[3]


def _read_text(path: str | Path) -> str | None:
    """A note's text as the indexer read it; ``None`` if it cannot be read now."""
    from memdir.workspace import read_regular

    try:
        return read_regular(path).decode("utf-8", errors="replace")
    except Exception:
        return None


#: The process's cache: every search in it widens from here.
NOTE_LINES = NoteLines()
