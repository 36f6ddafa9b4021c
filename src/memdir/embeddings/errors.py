"""Error types for embedding providers beyond the two in :mod:`memdir.embeddings.base`.

Why the hierarchy matters: provider selection (R§5.1) skips a provider that is merely
*unavailable* (no key, refused by ``offline``, local model absent) but surfaces real failures;
the sync engine's runtime fallback matches on the message; retries are decided from the
attributes recorded here (HTTP status, exception type), never by searching message text.
"""

from __future__ import annotations

import functools
from typing import Any

from memdir.embeddings.base import EmbeddingError, MissingApiKeyError

__all__ = [
    "BatchTimeoutError",
    "BatchUnavailableError",
    "EmbeddingError",
    "EmbeddingTimeoutError",
    "MissingApiKeyError",
    "OfflineError",
    "ProviderUnavailableError",
    "RemoteEmbeddingError",
]


class ProviderUnavailableError(EmbeddingError):
    """The provider cannot be used here; selection skips it exactly like a missing API key."""


class OfflineError(ProviderUnavailableError):
    """``memorySearch.offline = true`` forbids this network provider."""


class RemoteEmbeddingError(EmbeddingError):
    """A remote call failed; carries what the retry logic and status reporting need."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
        quota_exhausted: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.quota_exhausted = quota_exhausted
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        """Remade with its ``provider``: the default, ``cls(*args)``, lacks that required argument, so
        one raised in a worker of a process pool (a host's ``ltm.search`` there) could not be
        unpickled in the parent (multiprocessing.Pool's result thread died on it and the call
        never returned)."""
        return functools.partial(type(self), provider=self.provider), self.args, self.__dict__


class EmbeddingTimeoutError(RemoteEmbeddingError):
    """An attempt (or the caller's overall deadline) ran out of time."""


class BatchUnavailableError(RemoteEmbeddingError):
    """The provider's batch API cannot be used (endpoint missing, ``wait=false``): disable at once."""


class BatchTimeoutError(RemoteEmbeddingError):
    """A provider batch job did not finish within ``remote.batch.timeoutMinutes``."""
