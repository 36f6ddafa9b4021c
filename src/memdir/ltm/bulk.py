"""Near neighbours for ``ltm import``: each bullet against the store and the bullets before it.

Why in memory: an import searched LanceDB once or twice a bullet and wrote each one as a
commit of its own (3,000 bullets: minutes, 10,000: over ten).  The store's vectors are read once,
each block of bullets is scored with one matrix product, and the writes go in a few commits.
A store too big to hold in memory (:data:`IN_MEMORY_FLOATS`) is searched a bullet at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memdir.ltm.store import LanceTable

#: The most vector components of a store read into memory at once (64 MB of float32).
IN_MEMORY_FLOATS = 16_000_000
BLOCK = 256


def scores(matrix: np.ndarray, norms_sq: np.ndarray, vectors: np.ndarray, scoring: str) -> np.ndarray:
    """The store's score of each of ``vectors`` (rows) against each row of ``matrix``: cosine, or
    R§14's ``1/(1+d²)`` with ``scoring = "openclaw"`` (what :meth:`LanceTable.search` answers)."""
    if matrix.shape[0] == 0 or vectors.shape[0] == 0:
        return np.zeros((vectors.shape[0], matrix.shape[0]), dtype=np.float32)
    dots = vectors @ matrix.T
    vv = np.einsum("ij,ij->i", vectors, vectors)[:, None]
    if scoring == "openclaw":
        return 1.0 / (1.0 + np.maximum(0.0, norms_sq[None, :] + vv - 2.0 * dots))
    return dots / np.sqrt(np.maximum(norms_sq[None, :] * vv, 1e-30))


class Neighbours:
    """The store as it was when the import began, and the bullets of the import (``vectors``)."""

    def __init__(self, table: LanceTable, vectors: np.ndarray, *, scoring: str):
        self.table = table
        self.scoring = scoring
        self.vectors = vectors
        self.vector_norms = np.einsum("ij,ij->i", vectors, vectors) if len(vectors) else np.zeros(0)
        exists = table.exists()
        count = table.count() if exists else 0
        width = vectors.shape[1] if vectors.ndim == 2 else 0
        self.in_memory = count * max(width, 1) <= IN_MEMORY_FLOATS
        if exists and self.in_memory:
            self.records, self.matrix = table.matrix()
        else:
            self.records = table.all(include_superseded=True) if exists else []
            self.matrix = np.zeros((0, width), dtype=np.float32)
        self.by_id = {r.id: i for i, r in enumerate(self.records)}
        self.active = np.array([r.active for r in self.records], dtype=bool)
        self.categories = np.array([r.category for r in self.records], dtype=object)
        self.norms = np.einsum("ij,ij->i", self.matrix, self.matrix) if len(self.matrix) else np.zeros(0)
        #: Bullets of this import stored as active memories, by position.
        self.pending = np.zeros(len(vectors), dtype=bool)
        self._block = -1
        self._store_scores = np.zeros((0, 0))
        self._item_scores = np.zeros((0, 0))

    def _scores(self, position: int) -> tuple[np.ndarray | None, np.ndarray]:
        block = position // BLOCK
        if block != self._block:
            rows = self.vectors[block * BLOCK:(block + 1) * BLOCK]
            if self.in_memory:
                self._store_scores = scores(self.matrix, self.norms, rows, self.scoring)
            end = min(len(self.vectors), (block + 1) * BLOCK)
            self._item_scores = scores(self.vectors[:end], self.vector_norms[:end], rows, self.scoring)
            self._block = block
        row = position - block * BLOCK
        return (self._store_scores[row] if self.in_memory else None), self._item_scores[row][:position]

    def near(self, position: int, *, min_score: float, limit: int, category: str | None = None,
             items: bool = True) -> list[tuple[float, Any]]:
        """Up to ``limit`` active memories scoring ≥ ``min_score`` for bullet ``position``, best first:
        ``(score, MemoryRecord)`` from the store, ``(score, position)`` for an earlier bullet."""
        found: list[tuple[float, Any]] = []
        store, earlier = self._scores(position)
        if store is not None:
            mask = self.active & (store >= min_score)
            if category is not None:
                mask &= self.categories == category
            for i in np.flatnonzero(mask):
                found.append((float(store[i]), self.records[i]))
        elif self.table.exists():
            for hit in self.table.search(self.vectors[position], limit=limit, min_score=min_score,
                                         category=category):
                i = self.by_id.get(hit.id)
                if i is None or self.active[i]:
                    found.append((float(hit.score or 0.0), hit))
        if items:
            mask = self.pending[:position] & (earlier >= min_score)
            found += [(float(earlier[j]), int(j)) for j in np.flatnonzero(mask)]
        found.sort(key=lambda pair: -pair[0])
        return found[:limit]

    def supersede(self, memory_id: str) -> None:
        i = self.by_id.get(memory_id)
        if i is not None:
            self.active[i] = False

    def update(self, memory_id: str, vector: np.ndarray, category: str) -> None:
        """A stored memory a bullet of this import rewrote (its id named, its text edited)."""
        i = self.by_id.get(memory_id)
        if i is not None and self.in_memory:
            self.matrix[i] = vector
            self.norms[i] = float(vector @ vector)
            self.categories[i] = category

    def vector_of(self, memory_id: str) -> np.ndarray | None:
        i = self.by_id.get(memory_id)
        return self.matrix[i] if i is not None and self.in_memory else None
