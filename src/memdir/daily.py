"""Daily logs ``memory/YYYY-MM-DD.md`` and the user's "today".

This module owns the date logic: :func:`today` in the user's timezone (:mod:`memdir.timezones`)
and which file a day's notes go to.  Writing is done
by :mod:`memdir.memfiles` — the one writer of memory files — so every append is append-only,
``flock``-ed against concurrent writers (threads and processes), never fused with a
hand-edited last line, symlink-safe (the ``memory/`` folder is opened ``O_NOFOLLOW`` and the
file name is confined to it) and ``fsync``-ed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

from memdir.memfiles import MemoryFileError, append_memory_file, normalise_entry
from memdir.timezones import local_time, resolve_timezone
from memdir.workspace import MEMORY_DIR

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

DailyLogError = MemoryFileError
"""An append was refused or failed (the name this module has always raised; a ``ValueError``)."""


# --- today ------------------------------------------------------------------------------------


def today(timezone: str | None = None, *, now: dt.datetime | None = None, strict: bool = True) -> dt.date:
    """Today's date where the user is (``timezone``), else in the machine's zone.

    ``strict`` (the default) refuses an unknown timezone; ``strict=False`` falls back to the
    machine's zone (see :func:`resolve_timezone`).
    """
    tz, _ = resolve_timezone(timezone, strict=strict)
    return local_time(now, tz).date()


def coerce_date(value: dt.date | dt.datetime | str | None, timezone: str | None = None) -> dt.date:
    """A day from a ``date``, a ``datetime`` (converted to the user's zone) or ``YYYY-MM-DD``."""
    if value is None:
        return today(timezone)
    if isinstance(value, dt.datetime):
        return today(timezone, now=value)
    if isinstance(value, dt.date):
        return value
    text = str(value).strip()
    if not _DATE_RE.match(text):
        raise DailyLogError(f"invalid date {value!r}: expected YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise DailyLogError(f"invalid date {value!r}: {exc}") from exc


def daily_rel_path(day: dt.date) -> str:
    """Workspace-relative path of a day's log, e.g. ``memory/2026-01-12.md``."""
    return f"{MEMORY_DIR}/{day.isoformat()}.md"


# --- appending --------------------------------------------------------------------------------


def append_daily(workspace: str | os.PathLike[str], text: str, *,
                 date: dt.date | dt.datetime | str | None = None, timezone: str | None = None,
                 blank_line: bool = False, fsync: bool = True) -> str:
    """Append ``text`` to the day's log and return its workspace-relative path.

    ``date`` defaults to today in ``timezone`` (the user's), else local time.  The entry is
    written as whole lines; if the file does not end with a newline (edited by hand), one is
    added first so the entry never fuses with the previous line.  ``blank_line`` separates the
    entry from the previous one by an empty line (the flush's notes) instead of writing
    consecutive lines.  ``fsync`` makes the entry durable before returning: memory that
    vanishes in a crash is worse than a slow append.
    """
    ws = Path(os.path.expanduser(os.fspath(workspace))).resolve()
    normalise_entry(text)  # refuse blank text before touching the disk or the clock
    day = coerce_date(date, timezone)
    append_memory_file(ws, f"{day.isoformat()}.md", text, blank_line=blank_line, fsync=fsync,
                       create_workspace=False)
    return daily_rel_path(day)


__all__ = [
    "DailyLogError", "append_daily", "coerce_date", "daily_rel_path", "local_time", "normalise_entry",
    "resolve_timezone", "today",
]
