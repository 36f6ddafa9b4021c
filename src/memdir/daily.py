"""Append-only daily logs: ``memory/YYYY-MM-DD.md`` in the user's timezone.

Several writers may append to the same day's file at once (an agent, the flush, the session
hook, other processes on the machine).  Each append therefore

* opens the file with ``O_APPEND | O_NOFOLLOW`` (a symlink is refused, never followed),
* takes an exclusive ``flock`` on it, so "does the file end with a newline?" and the write
  happen as one step among cooperating writers,
* writes whole, newline-terminated lines in a single ``write`` call (``O_APPEND`` puts them at
  the end of the file even if a non-cooperating writer appended meanwhile), and
* never truncates, seeks or rewrites: existing entries are never touched.

The functions here are safe to call from several threads and several processes.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import re
import stat
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memdir.workspace import MEMORY_DIR

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class DailyLogError(ValueError):
    """An append was refused or failed; the message says why."""


def user_tz(name: str | None) -> dt.tzinfo | None:
    """The configured ``userTimezone`` (IANA name), or ``None`` for the machine's local zone."""
    if not name or not name.strip():
        return None
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise DailyLogError(f"unknown timezone {name!r} (userTimezone must be an IANA name such as "
                            "'Europe/Berlin')") from exc


def today(timezone: str | None = None, *, now: dt.datetime | None = None) -> dt.date:
    """Today's date where the user is (``timezone``), else in the machine's local zone."""
    tz = user_tz(timezone)
    if now is None:
        return dt.datetime.now(tz).date()
    if now.tzinfo is None:
        now = now.astimezone()  # naive: treat as machine-local time
    return now.astimezone(tz).date() if tz else now.astimezone().date()


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


def normalise_entry(text: str) -> str:
    """Entry text as whole lines: ``\\r\\n``/``\\r`` become ``\\n``, trailing blanks go, one final ``\\n``."""
    if not isinstance(text, str):
        raise DailyLogError("text must be a string")
    body = text.replace("\r\n", "\n").replace("\r", "\n").rstrip()
    if "\x00" in body:
        raise DailyLogError("text contains a NUL byte")
    if not body.strip():
        raise DailyLogError("text required")
    return body + "\n"


def _memory_dir(workspace: Path) -> Path:
    """``<workspace>/memory``, created if missing; refused if it is a symlink or not a folder."""
    folder = workspace / MEMORY_DIR
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    except FileNotFoundError as exc:
        raise DailyLogError(f"workspace does not exist: {workspace}") from exc
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise DailyLogError(f"refusing to write through a symlink: {MEMORY_DIR}/")
    if not stat.S_ISDIR(st.st_mode):
        raise DailyLogError(f"{MEMORY_DIR} exists but is not a folder")
    return folder


def append_daily(workspace: str | os.PathLike[str], text: str, *,
                 date: dt.date | dt.datetime | str | None = None, timezone: str | None = None,
                 fsync: bool = True) -> str:
    """Append ``text`` to the day's log and return its workspace-relative path.

    ``date`` defaults to today in ``timezone`` (the user's), else local time.  The entry is
    written as whole lines; if the file does not end with a newline (edited by hand), one is
    added first so the entry never fuses with the previous line.  ``fsync`` makes the entry
    durable before returning: memory that vanishes in a crash is worse than a slow append.
    """
    ws = Path(os.path.expanduser(os.fspath(workspace))).resolve()
    entry = normalise_entry(text).encode("utf-8")
    day = coerce_date(date, timezone)
    rel = daily_rel_path(day)
    folder = _memory_dir(ws)
    path = folder / f"{day.isoformat()}.md"
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DailyLogError(f"refusing to write through a symlink: {rel}") from exc
        raise DailyLogError(f"cannot open {rel} for appending: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DailyLogError(f"{rel} is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            data = entry
            size = os.fstat(fd).st_size
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + entry
            _write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return rel


def _write_all(fd: int, data: bytes) -> None:
    """One ``write`` normally; a short write (disk nearly full, signal) is finished, not dropped."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise DailyLogError("write to the daily log made no progress")
        view = view[written:]


__all__ = ["DailyLogError", "append_daily", "coerce_date", "daily_rel_path", "normalise_entry", "today", "user_tz"]
