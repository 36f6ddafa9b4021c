"""When a failed remote call is retried, and how long memdir waits first (R§5.3).

The policy is OpenClaw's backoff (500 ms doubling, capped at 8 s, up to +20% jitter, 3
retries); what differs is how a response is read (R§18):

* Whether to retry is decided by :class:`~memdir.embeddings.http_client.HttpClient` from the
  HTTP status or exception type, never by a regex over the message (OpenClaw retried any error
  whose text happened to contain a 5xx-looking number).
* ``Retry-After`` (seconds or HTTP date) and Gemini's ``RetryInfo.retryDelay`` are parsed here so
  the server's own hint is honoured.
* An exhausted quota (``insufficient_quota``, billing) is recognised so it fails at once instead
  of being retried forever (OpenClaw PR #128945).

:class:`Timing` makes the clock, sleep and jitter injectable: tests run fast yet see every wait.
"""

from __future__ import annotations

import email.utils
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass
class Timing:
    """Clock, sleep and randomness, injectable so tests run fast yet see the computed waits."""

    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    random: Callable[[], float] = random.random


@dataclass(frozen=True)
class RetryPolicy:
    """R§5.3 backoff: 500 ms doubling, capped at 8 s, up to +20% jitter, 3 retries."""

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.2
    retry_after_cap: float = 60.0

    def backoff(self, retry: int, rand: float) -> float:
        """Seconds to wait before retry number ``retry`` (0-based); ``rand`` is in [0, 1)."""
        delay = self.base_delay * (2**retry)
        return min(self.max_delay, round(delay * (1 + self.jitter * rand), 3))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date relative to ``now`` (epoch seconds)."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.fromtimestamp(time.time() if now is None else now, UTC)
        seconds = (when - current).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None  # NaN → None


def retry_after(headers: Any) -> float | None:
    """A response's ``Retry-After`` in seconds; a date in it counts from the response's own
    ``Date`` (the server's clock), when it has one.

    Why: counted from this machine's clock, a date five seconds after the server's time was an
    hour off on a machine whose clock is an hour behind (a VM resumed with an old time): the wait
    was past what memdir waits and the call failed at once ('server asked to retry after 3605s');
    an hour ahead, it was no wait at all and every retry was spent at once."""
    value = headers.get("retry-after")
    sent = headers.get("date")
    now = None
    if value and sent:
        try:
            when = email.utils.parsedate_to_datetime(sent)
            now = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        except (TypeError, ValueError, OverflowError):
            now = None
    return parse_retry_after(value, now=now)


_RETRY_DELAY = re.compile(r'"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"')


def gemini_retry_delay(text: str) -> float | None:
    """Gemini puts its retry hint in ``error.details[].retryDelay`` ("27s") instead of a header."""
    match = _RETRY_DELAY.search(text)
    return float(match.group(1)) if match else None


#: Codes that always mean the account is out of money/quota, whatever else the response says.
_HARD_QUOTA = re.compile(r"insufficient_quota|billing_hard_limit_reached|billing_not_active", re.I)
#: Phrases that mean exhaustion unless the server also says when to come back.
_SOFT_QUOTA = re.compile(
    r"quota[ _]exceeded|exceeded your (?:current )?quota|quota has been exhausted|billing", re.I
)


def is_quota_exhausted(body: str, *, has_retry_hint: bool) -> bool:
    """A 429 that retrying will not fix.

    Gemini's per-minute limits say "You exceeded your current quota ... billing" too, but they
    carry a ``retryDelay``; so soft phrases only count when no retry hint came with them.
    """
    if _HARD_QUOTA.search(body):
        return True
    return not has_retry_hint and bool(_SOFT_QUOTA.search(body))
