"""``memory_get`` on a session transcript: ``sessions/<name>.jsonl`` read as the index reads it.

Deviates from OpenClaw, whose ``memory_get`` cannot read session paths (R§8): a session search
result cites a range of JSONL lines (widened over neighbouring messages, :mod:`memdir.search`),
and a range the agent cannot open is of no use to it.  So, with the ``sessions`` source on, a
transcript is readable as its indexed text: one ``User: …`` / ``Assistant: …`` line per message
(:func:`memdir.sessions.transcript.build_session_text`), secrets redacted exactly as indexing
redacts them, for the messages whose JSONL line lies in ``from``/``lines``; header and tool records
are never shown.  Only a regular file directly in this agent's sessions folder, not a symlink,
is read (the folder itself is followed, as indexing follows it: memdir's own state, not a path
the agent gives); a missing one reads as ``""``, as a missing memory file does (R§10.2).
"""

from __future__ import annotations

import errno
import itertools
import os

from memdir.sessions.store import parse_records
from memdir.sessions.transcript import build_session_text
from memdir.workspace import SESSIONS_PREFIX, PathError, is_transcript_name, read_allowed, session_relative

_RULE = ("memory_get reads a session transcript as sessions/<name>.jsonl: a regular file directly in this "
         "agent's sessions folder, and only with the sessions source on")


def _refused(what: str) -> PathError:
    return PathError(f"{what} ({_RULE})")


def session_name(raw: str) -> str:
    """The transcript's file name in ``sessions/<name>.jsonl``; :class:`PathError` for anything else
    (another folder, ``..``, a separator, a NUL byte, another suffix)."""
    text = session_relative(raw)
    name = text[len(SESSIONS_PREFIX):] if text.startswith(SESSIONS_PREFIX) else ""
    if "\x00" in text:
        raise _refused("invalid path: contains a NUL byte")
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise _refused(f"path not allowed: {text}")
    if not is_transcript_name(name):  # <id>.jsonl, or one /new set aside: <id>.jsonl.reset.<time>
        raise _refused(f"not a session transcript: {text}")
    return name


def read_session_lines(raw: str, sessions_dir: str | os.PathLike[str], from_line: int | None = None,
                       lines: int | None = None) -> str:
    """The indexed text of the transcript's messages on JSONL lines ``from_line`` (default 1) up to,
    not including, ``from_line + lines`` (default: to the end), joined by ``\\n``.

    The file is opened inside the opened folder without following a symlink, so it cannot be
    swapped for a link, nor the folder for another, between the check and the read.
    """
    name = session_name(raw)
    rel = SESSIONS_PREFIX + name
    flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    try:
        folder = os.open(sessions_dir, flags)
    except FileNotFoundError:
        return ""  # no transcripts yet: as a missing file
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise _refused("the sessions folder is not a folder") from exc
        raise _refused(f"cannot open the sessions folder: {exc.strerror}") from exc
    try:
        data = read_allowed(name, rel, dir_fd=folder, refuse=_refused, limit=None)  # as the indexer: no limit
    finally:
        os.close(folder)
    if data is None:
        return ""
    first = max(1, int(from_line or 1))
    # as memory files (R§10.2): neither given (or both 0) is everything, else `lines ?? to the end`, at least 1
    stop = None if lines is None or not (from_line or lines) else first + max(1, int(lines))
    # only the lines asked for are parsed: the last few lines of a long transcript parsed each of
    # its million JSON lines before them
    parts = data.split(b"\n")
    wanted = itertools.islice(parts, min(first - 1, len(parts)), None if stop is None else min(stop - 1, len(parts)))
    text, _line_map, _stamps = build_session_text(parse_records(wanted, start=first), redact=True)
    return text
