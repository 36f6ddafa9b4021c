"""A deterministic embedding provider for long-term memory tests that need exact similarities.

``AxisProvider`` gives each registered text a chosen vector; any other text gets a stable
pseudo-random unit vector (nearly orthogonal to everything else in 64 dimensions).  ``near(c)``
builds a vector with cosine ``c`` to axis 0, so thresholds can be tested at their edges.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

DIMS = 64


def axis(i: int) -> list[float]:
    v = [0.0] * DIMS
    v[i] = 1.0
    return v


def near(cos: float, base: int = 0, other: int = 1) -> list[float]:
    """A unit vector whose cosine with ``axis(base)`` is ``cos``."""
    v = [0.0] * DIMS
    v[base] = cos
    v[other] = math.sqrt(max(0.0, 1 - cos * cos))
    return v


class AxisProvider:
    id = "fake"
    max_input_bytes = 8000

    def __init__(self, vectors: dict[str, list[float]] | None = None, model: str = "axis-1"):
        self.vectors = dict(vectors or {})
        self.model = model
        self.provider_key = f"key-{model}"
        self.calls: list[list[str]] = []
        self.closed = False

    @property
    def dims(self) -> int:
        return DIMS

    def _vec(self, text: str) -> list[float]:
        if text in self.vectors:
            return list(self.vectors[text])
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        rng = np.random.default_rng(seed)
        v = rng.standard_normal(DIMS)
        v[:4] = 0.0  # keep clear of the axes tests use
        return (v / np.linalg.norm(v)).tolist()

    def embed_query(self, text: str) -> list[float]:
        self.calls.append([text])
        return self._vec(text)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._vec(t) for t in texts]

    def close(self) -> None:
        self.closed = True
