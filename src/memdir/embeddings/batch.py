"""Provider batch APIs (OpenAI Batch, Gemini async batch): settings, failure counter, polling.

Batch jobs are cheaper but slow and fragile, so a provider keeps a :class:`BatchState`: after
``limit`` (2) failures, or at once when the endpoint is missing, batch mode is switched off for
the provider's lifetime and every call goes to the direct endpoint instead (R§5.3).  A success
resets the counter.  The provider-specific request/response shapes live in ``openai.py`` and
``gemini.py``; this module holds what they share.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from memdir.embeddings.errors import BatchTimeoutError, BatchUnavailableError, RemoteEmbeddingError

#: ``progress(label, done, total)``: called while a job runs (and between direct groups).
ProgressCallback = Callable[[str, int, int], None]

#: Consecutive failures after which batch mode is disabled (R§5.3).
BATCH_FAILURE_LIMIT = 2
#: Statuses saying the server has no such batch endpoint (a gateway, a self-hosted server).
MISSING_ENDPOINT_STATUSES = (404, 405, 501)
#: OpenAI accepts at most this many requests in one batch job.
OPENAI_BATCH_MAX_REQUESTS = 50_000

T = TypeVar("T")


@dataclass(frozen=True)
class BatchSettings:
    """``memorySearch.remote.batch.*`` in the units the code uses."""

    enabled: bool = False
    wait: bool = True
    concurrency: int = 2
    poll_interval: float = 2.0
    timeout_minutes: float = 60.0

    @classmethod
    def from_config(cls, batch: Any) -> BatchSettings:
        return cls(
            enabled=bool(batch.enabled),
            wait=bool(batch.wait),
            concurrency=max(1, int(batch.concurrency)),
            poll_interval=max(1, int(batch.poll_interval_ms)) / 1000.0,
            timeout_minutes=float(batch.timeout_minutes),
        )


class BatchState:
    """Whether a provider still uses its batch API, and why not if it stopped."""

    def __init__(self, *, enabled: bool, supported: bool, limit: int = BATCH_FAILURE_LIMIT) -> None:
        self.enabled = enabled
        self.supported = supported
        self.limit = limit
        self.failures = 0
        self.jobs = 0
        self.last_error: str | None = None
        self.disabled_reason: str | None = None
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self.enabled and self.supported and self.disabled_reason is None

    def record_failure(self, error: BaseException) -> None:
        """Count one failure (a timeout counts two, R§5.3); disable at the limit or when fatal."""
        weight = 2 if isinstance(error, BatchTimeoutError) else 1
        with self._lock:
            self.last_error = str(error)
            if isinstance(error, BatchUnavailableError):
                self.disabled_reason = str(error)
                return
            self.failures += weight
            if self.failures >= self.limit:
                self.disabled_reason = (
                    f"batch mode disabled after {self.failures} failures (limit {self.limit}); "
                    f"last error: {error}"
                )

    def record_success(self) -> None:
        with self._lock:
            self.failures = 0
            self.jobs += 1

    def as_dict(self) -> dict[str, Any]:
        """For ``memdir status``: configured, usable, counters and the last error."""
        with self._lock:
            return {
                "enabled": self.enabled,
                "supported": self.supported,
                "active": self.active,
                "failures": self.failures,
                "limit": self.limit,
                "jobs": self.jobs,
                "last_error": self.last_error,
                "disabled_reason": self.disabled_reason,
            }


def batch_custom_id(
    source: str, path: str, start_line: int, end_line: int, chunk_hash: str, index: int
) -> str:
    """OpenClaw's custom id for one chunk in a batch job (R§5.3)."""
    return hashlib.sha256(
        f"{source}:{path}:{start_line}:{end_line}:{chunk_hash}:{index}".encode()
    ).hexdigest()


def default_custom_ids(texts: Sequence[str]) -> list[str]:
    """Ids when the caller gives none: the position and the text's hash, so they are unique."""
    return [
        hashlib.sha256(f"{i}:{hashlib.sha256(t.encode('utf-8')).hexdigest()}".encode()).hexdigest()
        for i, t in enumerate(texts)
    ]


def check_custom_ids(ids: Sequence[str], count: int) -> list[str]:
    ids = [str(i) for i in ids]
    if len(ids) != count:
        raise ValueError(f"got {len(ids)} custom ids for {count} texts")
    if len(set(ids)) != len(ids):
        raise ValueError("custom ids must be unique within one embed_batch call")
    return ids


@contextmanager
def batch_endpoint_required(provider: str, what: str) -> Iterator[None]:
    """A missing batch endpoint raises :class:`BatchUnavailableError` (``what: <error>``), which
    switches batch mode off at once instead of counting towards the failure limit (R§5.3)."""
    try:
        yield
    except RemoteEmbeddingError as exc:
        if exc.status in MISSING_ENDPOINT_STATUSES:
            raise BatchUnavailableError(f"{what}: {exc}", provider=provider, status=exc.status) from exc
        raise


def in_request_order(by_id: Mapping[str, T], ids: Sequence[str], label: str, provider: str) -> list[T]:
    """A job's results in the order of ``ids``; output lacking any of them fails the job."""
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise RemoteEmbeddingError(
            f"{label} failed: output lacks {len(missing)} of {len(ids)} embeddings", provider=provider
        )
    return [by_id[i] for i in ids]


@dataclass(frozen=True)
class JobStatus:
    state: str
    terminal: bool
    done: int
    total: int


def poll_job(
    *,
    label: str,
    provider: str,
    fetch: Callable[[], T],
    status_of: Callable[[T], JobStatus],
    settings: BatchSettings,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    progress: ProgressCallback | None = None,
    on_timeout: Callable[[], None] | None = None,
) -> T:
    """Fetch a job every ``poll_interval`` until it is terminal or ``timeout_minutes`` pass."""
    deadline = clock() + settings.timeout_minutes * 60.0
    while True:
        job = fetch()
        status = status_of(job)
        if progress is not None:
            progress(label, status.done, status.total)
        if status.terminal:
            return job
        now = clock()
        # the last wait ends at the deadline: a pollIntervalMs past timeoutMinutes cancelled every job
        # after its first poll, "timed out after 60 minutes" with no time gone
        if now >= deadline:
            if on_timeout is not None:
                try:
                    on_timeout()
                except Exception:  # best effort: the timeout is the error worth reporting
                    pass
            raise BatchTimeoutError(
                f"{label} timed out after {settings.timeout_minutes:g} minutes (last state {status.state})",
                provider=provider,
            )
        sleep(min(settings.poll_interval, deadline - now))


def to_int(value: Any) -> int:
    """Counts arrive as numbers (OpenAI) or int64 strings (Gemini)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
