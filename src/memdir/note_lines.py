"""Notes' line widths held in process for result widening, checked against the file on every use.

Widening a result (:func:`memdir.search._widen`) grows it by whole lines around its chunk, so it
needs each line's width, and a search widens up to a few dozen candidates from as many files:
reading, decoding and splitting each of them was half of a warm hybrid search at 10k chunks.  A
long-lived process (MCP server, agent loop, a reused :class:`memdir.api.Memory`) asks about the
same notes again and again, so each file's line widths (not its text: a few bytes a line) are
kept, least recently used first out, and reused while one ``lstat`` says the file is the one that
was read (same inode, size, mtime and ctime to the nanosecond).  A file edited since is read
again; one that cannot be read now has no lines (the result keeps its chunk's lines, never an
error).  Nothing is written anywhere.  Session transcripts are held the same way
(:class:`TranscriptLines`): the widths of their indexed messages and each one's JSONL line.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from memdir.textutil import literal_lines, setext_headings, weighted_len
from memdir.workspace import fs_name

#: Lines whose widths are held before the least recently used notes are let go (~4 bytes each).
MAX_LINES = 4_000_000
#: A Markdown heading, as the sections chunker reads one (:func:`memdir.chunking.chunk_sections`).
_HEADING = re.compile(r"#{1,6}\s")


class NoteLines:
    """``path → widths``: each line's weighted width (:func:`memdir.textutil.weighted_len`) plus
    its newline, the measure chunking uses; and where its sections begin (:meth:`section`)."""

    def __init__(self, max_lines: int = MAX_LINES):
        self.max_lines = max_lines
        self._files: OrderedDict[str, tuple[tuple[int, int, int, int], array[int], array[int]]] = OrderedDict()
        self._lines = 0
        self._lock = threading.Lock()  # searches may run in several threads of one process

    def widths(self, path: str | Path) -> Sequence[int]:
        return self._read(path)[0]

    def section(self, path: str | Path, first: int, last: int) -> tuple[int, int]:
        """``(top, bottom)``: the lines of the section (from its heading down to the line before
        the next heading) that lines ``first..last`` (1-based) lie in; the whole file when it has
        no heading around them."""
        widths, headings = self._read(path)
        at = bisect.bisect_right(headings, first)  # headings at or above ``first``
        top = headings[at - 1] if at else 1
        below = bisect.bisect_right(headings, last)
        bottom = headings[below] - 1 if below < len(headings) else len(widths)
        return top, bottom

    def _read(self, path: str | Path) -> tuple[Sequence[int], Sequence[int]]:
        key = fs_name(str(path))  # an indexed path is text; with an ASCII file-system encoding, not the OS's name
        try:
            st = os.lstat(key)
        except OSError:
            self._drop(key)
            return (), ()
        if not stat.S_ISREG(st.st_mode):
            self._drop(key)
            return (), ()
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            held = self._files.get(key)
            if held is not None and held[0] == sig:
                self._files.move_to_end(key)
                return held[1], held[2]
        parsed = self._parse(key)
        if parsed is None:
            self._drop(key)
            return (), ()
        widths, headings = parsed
        with self._lock:
            self._drop_locked(key)
            if len(widths) <= self.max_lines:
                self._files[key] = (sig, widths, headings)
                self._lines += len(widths)
                while self._lines > self.max_lines and self._files:
                    self._lines -= len(self._files.popitem(last=False)[1][1])
        return widths, headings

    def _parse(self, path: str) -> tuple[array[int], array[int]] | None:
        """``(widths, heading lines)`` of a note; ``None`` if it cannot be read now."""
        text = _read_text(path)
        return None if text is None else (line_widths(text), heading_lines(text))

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


def heading_lines(text: str) -> array[int]:
    """The 1-based numbers of the lines that are Markdown headings, in order (not a ``#`` line
    of a fenced code block or front matter; a Setext heading's text line), as the sections
    chunker reads them."""
    fenced = literal_lines(text)
    setext = setext_headings(text, fenced)
    if "#" not in text:
        return array("I", [n + 1 for n in sorted(setext)])
    return array("I", [n for n, line in enumerate(text.split("\n"), start=1)
                       if (line[:1] == "#" and _HEADING.match(line) and n - 1 not in fenced) or n - 1 in setext])


def _read_text(path: str) -> str | None:
    """A note's text as the indexer read it; ``None`` if it cannot be read now."""
    from memdir.reading import decode_note, read_regular

    try:
        return decode_note(read_regular(path))
    except Exception:
        return None


class TranscriptLines(NoteLines):
    """``path → widths`` of a session transcript's indexed text (one ``User: …`` or
    ``Assistant: …`` line per message, :func:`memdir.sessions.transcript.build_session_text`),
    with each text line's JSONL line: a session result widens over whole messages, and its range
    is given back in the JSONL lines the index cites.  The messages are the indexed ones; a width
    is the unredacted text's (a line holding a secret is counted a little wider than indexed)."""

    def messages(self, path: str | Path) -> tuple[Sequence[int], Sequence[int]]:
        """``(widths, jsonl_lines)``: the i-th message's text width and its line in the file."""
        return self._read(path)

    def _parse(self, path: str) -> tuple[array[int], array[int]] | None:
        from memdir.sessions.store import iter_records
        from memdir.sessions.transcript import build_session_text

        try:  # unredacted: redaction was 5/6 of reading a transcript, and only shortens a secret
            text, line_map, _stamps = build_session_text(iter_records(path), redact=False)
        except OSError:
            return None
        if not line_map:
            return array("I"), array("I")
        return line_widths(text), array("I", line_map)


#: The process's caches: every search in it widens from here.
NOTE_LINES = NoteLines()
TRANSCRIPT_LINES = TranscriptLines()
