"""Notes' line widths held in process for result widening, checked against the file on every use.

Widening a result (:func:`memdir.search._widen`) grows it by whole lines around its chunk, so it
needs each line's width, and a search widens up to a few dozen candidates from as many files:
reading, decoding and splitting each of them was half of a warm hybrid search at 10k chunks.  A
long-lived process (MCP server, agent loop, a reused :class:`memdir.api.Memory`) asks about the
same notes again and again, so each file's line widths (not its text: a few bytes a line) are
kept, least recently used first out, and reused while one ``lstat`` says the file is the one that
was read (same inode, size, mtime and ctime to the nanosecond).  A file edited since is read
again; one that cannot be read now has no lines (the result keeps its chunk's lines, never an
error).  Nothing is written anywhere.
"""

from __future__ import annotations

import os
import stat
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from memdir.textutil import weighted_len

#: Lines whose widths are held before the least recently used notes are let go (~4 bytes each).
MAX_LINES = 4_000_000


class NoteLines:
    """``path → widths``: each line's weighted width (:func:`memdir.textutil.weighted_len`) plus
    its newline, the measure chunking uses."""

    def __init__(self, max_lines: int = MAX_LINES):
        self.max_lines = max_lines
        self._files: OrderedDict[str, tuple[tuple[int, int, int, int], array[int]]] = OrderedDict()
        self._lines = 0
        self._lock = threading.Lock()  # searches may run in several threads of one process

    def widths(self, path: str | Path) -> Sequence[int]:
        key = str(path)
        try:
            st = os.lstat(key)
        except OSError:
            self._drop(key)
            return ()
        if not stat.S_ISREG(st.st_mode):
            self._drop(key)
            return ()
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            held = self._files.get(key)
            if held is not None and held[0] == sig:
                self._files.move_to_end(key)
                return held[1]
        text = _read_text(key)
        if text is None:
            self._drop(key)
            return ()
        widths = line_widths(text)
        with self._lock:
            self._drop_locked(key)
            if len(widths) <= self.max_lines:
                self._files[key] = (sig, widths)
                self._lines += len(widths)
                while self._lines > self.max_lines and self._files:
                    self._lines -= len(self._files.popitem(last=False)[1][1])
        return widths

    @property
    def lines(self) -> int:
        """Lines whose widths are held now."""
        return self._lines

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._lines = 0

    def __len__(self) -> int:
        return len(self._files)

    def _drop(self, key: str) -> None:
        with self._lock:
            self._drop_locked(key)

    def _drop_locked(self, key: str) -> None:
        old = self._files.pop(key, None)
        if old is not None:
            self._lines -= len(old[1])


def line_widths(text: str) -> array[int]:
    """Each line's :func:`~memdir.textutil.weighted_len` plus its newline (an ASCII line: its
    length, without a call per line)."""
    lines = text.split("\n")
    if text.isascii():  # most notes: a width is a length
        return array("I", [n + 1 for n in map(len, lines)])
    return array("I", [len(line) + 1 if line.isascii() else weighted_len(line) + 1 for line in lines])


def _read_text(path: str) -> str | None:
    """A note's text as the indexer read it; ``None`` if it cannot be read now."""
    from memdir.reading import decode_note, read_regular

    try:
        return decode_note(read_regular(path))
    except Exception:
        return None


#: The process's cache: every search in it widens from here.
NOTE_LINES = NoteLines()
