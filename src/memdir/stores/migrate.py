"""Copy one agent's index between backends (``memdir migrate --to postgres|sqlite``).

Everything derived from the files moves as it is — file stats, chunks, vectors, the embedding
cache and the index identity (meta) — so the next sync on the new backend finds nothing to
re-chunk and nothing to re-embed.  The copy goes through the Store protocol only: it is written
into the target's shadow index (:meth:`Store.rebuild`) and published in one step, so a failed
copy leaves the target as it was, and the source is never modified.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from memdir.errors import StoreError
from memdir.stores.base import Store

if TYPE_CHECKING:
    from memdir.sync import Progress

T = TypeVar("T")

#: Files per write transaction, and cache entries per insert.
FILES_PER_TX = 200
CACHE_BATCH = 1000


class SourceDamaged(StoreError):
    """The index being copied is damaged (``problem`` says how); the copy was abandoned."""

    def __init__(self, message: str, problem: str):
        super().__init__(message)
        self.problem = problem


@contextmanager
def source_damage(source: Store) -> Iterator[None]:
    """Damage met reading ``source`` raised as :class:`SourceDamaged` (the caller heals the index as
    a search would, then copies it): it stopped the copy with SQLite's bare "database disk image is
    malformed", naming neither the index nor what to do."""
    try:
        yield
    except SourceDamaged:
        raise
    except Exception as exc:
        if not source.is_damage(exc):
            raise
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SourceDamaged(f"the index {source.location} is damaged ({why}): the copy was abandoned, the target "
                            "left as it was", why) from exc


def _reading(source: Store, rows: Iterator[T]) -> Iterator[T]:
    """``rows`` read from ``source`` (:func:`source_damage`); the target's own errors, raised where
    it is written, are not seen here."""
    with source_damage(source):
        yield from rows


def copy_index(source: Store, target: Store, progress: Progress | None = None) -> dict[str, Any]:
    """Replace ``target``'s contents with ``source``'s; returns what was copied.

    ``progress(done, total, label)`` is told the cache entries copied (``label.unit`` is "cache
    entries"), then the files (``label.chunks_done`` / ``chunks_planned``: the chunks): a large index
    took minutes without a word.
    """
    from memdir.sync import ProgressLabel

    started = time.monotonic()
    with source_damage(source):
        meta = source.read_meta()
        if meta is not None and progress is not None:
            cache_total, file_total, chunk_total = (source.export_cache_count(), len(source.file_rows()),
                                                    source.chunk_count())
    if meta is None:
        raise ValueError(f"nothing to migrate: {source.location} holds no index yet (run memdir index first)")
    counts = {"files": 0, "chunks": 0, "vectors": 0, "cacheEntries": 0}

    def tell(unit: str) -> None:
        if progress is None:
            return
        if unit == "files":
            progress(counts["files"], file_total, ProgressLabel("Copying the index", counts["chunks"], chunk_total))
        else:
            progress(counts["cacheEntries"], max(cache_total, counts["cacheEntries"]),
                     ProgressLabel("Copying the embedding cache", unit=unit))

    with target.rebuild() as fresh:
        batch: dict[tuple[str, str, str], dict[str, Any]] = {}

        def flush_cache() -> None:
            with fresh.transaction():
                for (provider, model, key), items in batch.items():
                    fresh.cache_put(provider, model, key, items)
            batch.clear()

        pending = 0
        # closed where the copy stops (its PostgreSQL cursor holds a pooled connection in a transaction,
        # which an exception's traceback kept open for as long as the exception was kept)
        with closing(_reading(source, source.export_cache())) as entries:
            for provider, model, key, h, vector in entries:  # least recently used first
                batch.setdefault((provider, model, key), {})[h] = vector
                counts["cacheEntries"] += 1
                pending += 1
                if pending >= CACHE_BATCH:
                    flush_cache()
                    pending = 0
                    tell("cache entries")
        if batch:
            flush_cache()
        if counts["cacheEntries"]:
            tell("cache entries")
        files = _reading(source, source.export_files())
        while True:
            with fresh.transaction():
                n = 0
                for path, src, fhash, mtime, size, chunks in files:
                    fresh.replace_file(path, src, fhash, mtime, size, chunks)
                    counts["files"] += 1
                    counts["chunks"] += len(chunks)
                    counts["vectors"] += sum(1 for c in chunks if c.embedding is not None and len(c.embedding))
                    n += 1
                    tell("files")
                    if n >= FILES_PER_TX:
                        break
            if n < FILES_PER_TX:
                break
        with fresh.transaction():
            fresh.write_meta(meta)
    target.optimize()
    return {"from": source.location, "to": target.location, **counts,
            "seconds": round(time.monotonic() - started, 3)}
