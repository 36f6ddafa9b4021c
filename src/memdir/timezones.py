"""The user's timezone (``userTimezone``, an IANA name; unset → the machine's zone).

Apart from :mod:`memdir.daily` because every search asks for it (a question's "last week"),
and a search should not import the daily-log writer, nor ``zoneinfo`` until a zone is named.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo


def _zone(name: str | None) -> ZoneInfo | None:
    if not name:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: 'Europe' is a folder, a name too long
        return None


def unknown_timezone(name: str | None) -> str | None:
    """Why ``name`` cannot be the ``userTimezone``, or ``None`` when it is unset or a zone this
    machine knows."""
    wanted = (name or "").strip()
    if not wanted or _zone(wanted) is not None:
        return None
    from zoneinfo import available_timezones

    database = "" if available_timezones() else "; this machine has no timezone database (pip install tzdata)"
    return f"unknown timezone {name!r} (userTimezone must be an IANA name such as 'Europe/Berlin'){database}"


#: How long the machine's zone is trusted before ``/etc/localtime`` is read again: resolving that
#: symlink costs a dozen ``lstat`` calls, paid on every search, while the zone changes rarely.
HOST_ZONE_TTL_S = 30.0
_host_zone_cache: tuple[str | None, float, tuple[dt.tzinfo, str]] | None = None


def _host_zone() -> tuple[dt.tzinfo, str]:
    """The machine's zone (see :func:`_read_host_zone`), re-read when ``$TZ`` changes or after
    :data:`HOST_ZONE_TTL_S` seconds."""
    global _host_zone_cache
    env, now = os.environ.get("TZ"), time.monotonic()
    cached = _host_zone_cache
    if cached is not None and cached[0] == env and now < cached[1]:
        return cached[2]
    found = _read_host_zone(env)
    _host_zone_cache = (env, now + HOST_ZONE_TTL_S, found)
    return found


#: The machine's zone file when ``$TZ`` is unset (a link into the zone database, or a copy of one).
LOCALTIME = "/etc/localtime"


def _read_host_zone(env: str | None) -> tuple[dt.tzinfo, str]:
    """The machine's zone with a name for humans: ``$TZ``, else ``/etc/localtime``'s target."""
    if env is not None:
        name: str | None = env.lstrip(":")
        path = name if name.startswith("/") else None  # TZ=/usr/share/zoneinfo/Europe/Berlin (glibc)
    else:
        name = path = os.path.realpath(LOCALTIME)
    if path is not None:
        name = path.split("zoneinfo/", 1)[1] if "zoneinfo/" in path else None
    zone = _zone(name)
    if zone is not None and name:
        return zone, name
    if path is not None and (copied := _zone_file(path)) is not None:
        return copied, dt.datetime.now(copied).tzname() or "UTC"
    try:
        local = dt.datetime.now().astimezone().tzinfo or dt.UTC  # what the C library uses (e.g. a POSIX $TZ rule)
    except ValueError:  # an offset of a whole day (TZ=UTC+24, POSIX's limit), which Python cannot hold:
        local = dt.UTC  # every append failed with "offset must be a timedelta strictly between ..."
    return local, local.tzname(None) or "UTC"


def _zone_file(path: str) -> dt.tzinfo | None:
    """The zone in a zone file outside the database (``/etc/localtime`` copied rather than linked,
    as in many container images), with its rules: the offset of today alone puts a summer
    message written after midnight on the day before, once the clocks went back."""
    from zoneinfo import ZoneInfo

    try:
        # non-blocking, and only a regular file: a FIFO would wait for a writer
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
            return ZoneInfo.from_file(fh) if stat.S_ISREG(os.fstat(fh.fileno()).st_mode) else None
    except (OSError, ValueError):  # missing, a folder, not a zone file
        return None


def resolve_timezone(name: str | None = None, *, strict: bool = False) -> tuple[dt.tzinfo, str]:
    """``(tzinfo, name)`` for ``userTimezone``; unset → the machine's zone.

    An unknown name raises :class:`memdir.daily.DailyLogError` when ``strict`` (choosing which file
    a note goes to), else falls back to the machine's zone (prompts, context: never fail over a typo).
    """
    if name is not None and not isinstance(name, str):  # ('int' object has no attribute 'strip', from deep inside)
        raise TypeError(f"timezone must be an IANA name such as 'Europe/Paris', not {type(name).__name__}")
    wanted = (name or "").strip()
    if wanted:
        zone = _zone(wanted)
        if zone is not None:
            return zone, wanted
        if strict:
            from memdir.memfiles import MemoryFileError  # daily.DailyLogError

            raise MemoryFileError(unknown_timezone(name) or f"unknown timezone {name!r}")
    return _host_zone()


def local_time(now: dt.datetime | None, tz: dt.tzinfo) -> dt.datetime:
    """``now`` (default: this instant) in ``tz``; a naive ``now`` is machine-local time."""
    if now is None:
        return dt.datetime.now(tz)
    if not isinstance(now, dt.datetime):  # a date or "2026-01-12": "'str' object has no attribute 'tzinfo'"
        raise TypeError(f"now must be a datetime, not {type(now).__name__}")
    if now.tzinfo is None:
        now = now.astimezone()
    return now.astimezone(tz)
