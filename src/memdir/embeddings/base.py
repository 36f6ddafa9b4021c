"""The embedding-provider seam: every provider (local ONNX, OpenAI, Gemini, ...) looks like this.

The index and the search pipeline only ever talk to an :class:`EmbeddingProvider`; they never
know whether vectors come from an in-process model or over HTTP.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from memdir.errors import MemdirError

#: Hard cap on one embedding input, in UTF-8 bytes (R§5.2).
HARD_INPUT_LIMIT_BYTES = 8000
#: A non-batch embed call carries at most this many UTF-8 bytes of text (R§5.3).
BATCH_MAX_BYTES = 8000


class EmbeddingError(MemdirError):
    """An embedding call failed; the message says which provider and why (a :class:`MemdirError`:
    a long-term memory search against a provider that is down raised it past a host's
    ``except MemdirError``)."""


class MissingApiKeyError(EmbeddingError):
    """No API key for a remote provider: ``auto`` skips it, an explicit choice reports it."""


@runtime_checkable
class EmbeddingProvider(Protocol):
    """What the index needs from an embedding model."""

    #: Provider id, e.g. ``"local"``, ``"openai"``.
    id: str
    #: Model name as recorded in the index (prefixes such as ``openai/`` stripped).
    model: str
    #: Fingerprint of the endpoint (R§5.5); part of the cache key and the index identity.
    provider_key: str
    #: Largest input in UTF-8 bytes before a chunk is split (R§5.2).
    max_input_bytes: int

    @property
    def dims(self) -> int | None:
        """Vector width, known once the model has produced (or declared) a vector."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """Embed a search query (some providers use a query-specific task type)."""
        ...

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed documents, one vector per input, in order."""
        ...

    def close(self) -> None:
        """Release model sessions or HTTP connections."""
        ...


#: Query vectors a provider remembers (~12 KB each at 384 dimensions); the environment variable
#: ``MEMDIR_QUERY_CACHE_SIZE`` overrides it (0: off, as the latency benches run, so that every
#: timed query pays for its vector).
QUERY_CACHE_SIZE = 256
#: Longer queries are not remembered (pasted documents are not asked twice).
QUERY_CACHE_MAX_CHARS = 2000


class QueryVectors:
    """The last :data:`QUERY_CACHE_SIZE` query vectors of one provider, by exact text.

    Why: an agent asks the same thing again (a retried tool call, auto-recall on an unchanged
    prompt, the same question in the next session of a long-lived server), and each vector costs
    a model run (4-6 ms on two cores) or an HTTP call that is billed.  Vectors are a pure
    function of (provider identity, text), so the key includes the provider key: a provider whose
    numerics change (a fallback to another model path) never returns an old vector.
    """

    def __init__(self, size: int | None = None) -> None:
        self.size = query_cache_size() if size is None else size
        self._items: OrderedDict[tuple[str, str], tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def get_or_embed(self, key: str, text: str, embed: Callable[[str], list[float]]) -> list[float]:
        """The vector remembered for ``text`` under provider ``key``, else ``embed(text)`` (kept
        when it succeeded).  Callers get their own list: changing it changes nothing here."""
        if self.size <= 0 or len(text) > QUERY_CACHE_MAX_CHARS:
            return embed(text)
        item = (key, text)
        with self._lock:
            found = self._items.get(item)
            if found is not None:
                self._items.move_to_end(item)
                self.hits += 1
                return list(found)
        vector = embed(text)
        with self._lock:
            self._items[item] = tuple(vector)
            self._items.move_to_end(item)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return vector

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def query_cache_size() -> int:
    """:data:`QUERY_CACHE_SIZE`, or ``MEMDIR_QUERY_CACHE_SIZE`` when set to a whole number."""
    raw = os.environ.get("MEMDIR_QUERY_CACHE_SIZE", "").strip()
    try:
        return max(0, int(raw)) if raw else QUERY_CACHE_SIZE
    except ValueError:
        return QUERY_CACHE_SIZE


def provider_key(payload: dict[str, object]) -> str:
    """SHA-256 of compact JSON in the given key order (R§5.5)."""
    import hashlib  # not at the top: a keyword search never needs it, and it costs a cold CLI 2 ms

    return hashlib.sha256(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def simple_provider_key(provider: str, model: str) -> str:
    return provider_key({"provider": provider, "model": model})


#: ``simple_provider_key("none", "fts-only")``, written out so that importing this module hashes nothing
FTS_ONLY_PROVIDER_KEY = "b2f409223dd1bd19cedee3332de54748a5f323765d4cdcbbb29295199cfde125"


def normalize(vector: Sequence[float]) -> list[float]:
    """Sanitise non-finite values to 0 and L2-normalise; near-zero vectors stay as they are (R§5.1)."""
    import numpy as np  # here, not at module top: the keyword-only CLI path never needs NumPy

    arr = np.asarray(vector, dtype=np.float64)
    arr = np.where(np.isfinite(arr), arr, 0.0)
    norm = float(np.linalg.norm(arr))
    if norm < 1e-10:
        return arr.tolist()
    return (arr / norm).tolist()


def is_zero(vector: Sequence[float]) -> bool:
    return not vector or all((not math.isfinite(v)) or abs(v) < 1e-12 for v in vector)


def one_line(error: BaseException | str) -> str:
    """An error's message on one line: a library's (onnxruntime's argument list, the Hugging Face
    hub's advice) may span several, and a warning or fallback note must stay one line."""
    return " ".join(str(error).split())


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def group_by_bytes(texts: Sequence[str], max_bytes: int = BATCH_MAX_BYTES) -> list[list[int]]:
    """Greedy in-order grouping of inputs so each group stays within ``max_bytes`` (R§5.3).

    A single oversized input goes alone.  Returns lists of indices into ``texts``.
    """
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, text in enumerate(texts):
        n = utf8_len(text)
        if current and size + n > max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        groups.append(current)
    return groups


def split_by_bytes(text: str, max_bytes: int) -> list[str]:
    """Split text into pieces of at most ``max_bytes`` UTF-8 bytes, never inside a code point."""
    if max_bytes <= 0 or utf8_len(text) <= max_bytes:
        return [text]
    pieces: list[str] = []
    rest = text
    while rest:
        if utf8_len(rest) <= max_bytes:
            pieces.append(rest)
            break
        lo, hi = 1, len(rest)
        while lo < hi:  # largest prefix (in code points) that fits
            mid = (lo + hi + 1) // 2
            if utf8_len(rest[:mid]) <= max_bytes:
                lo = mid
            else:
                hi = mid - 1
        pieces.append(rest[:lo])
        rest = rest[lo:]
    return pieces
