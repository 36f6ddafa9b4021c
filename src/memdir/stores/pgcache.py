"""The embedding cache and the export of a PostgreSQL index (mixed into
:class:`memdir.stores.postgres.PostgresStore`).

The cache is one table for every agent of a schema, keyed by (provider, model, provider key,
chunk hash): two agents never embed the same text twice, a rebuild or a recovery needs no copy
of it, and ``cache_prune`` bounds the shared table (least recently used first).  The export
feeds ``memdir migrate``: every file with its chunks and vectors, and the cache in LRU order.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from memdir.stores.base import ChunkRow, bounded_answers, lru_stamp
from memdir.stores.pgsearch import float32, floats, vec

#: Cache entries read per round trip by :meth:`PgCache.export_cache`.
EXPORT_PAGE = 200


class PgCache:
    """Shared embedding cache and export."""

    _local: threading.local
    if TYPE_CHECKING:  # provided by PostgresStore
        def _conn(self) -> AbstractContextManager[Any]: ...
        def _write(self) -> AbstractContextManager[Any]: ...
        def _scope(self) -> tuple[str, dict[str, Any]]: ...
        def _index_id(self, conn: Any = None, *, create: bool = True) -> int | None: ...

    # -- embedding cache (shared by every agent in the schema) -------------------------------
    @contextmanager
    def _cache_conn(self, write: bool = False) -> Iterator[Any]:
        """A connection for one cache statement; inside the caller's transaction, in a savepoint.

        Why: a cache statement that failed there (a deadlock, a lock or statement timeout) aborted
        the sync's whole batch transaction; the sync carries on without the cache, as it should, but
        each of its writes then failed with "current transaction is aborted" and the sync with them.
        """
        with self._write() if write else self._conn() as c:
            if c is getattr(self._local, "conn", None):
                with c.transaction():
                    yield c
            else:
                yield c

    def cache_get(self, provider: str, model: str, provider_key: str, hashes: Iterable[str]) -> dict[str, list[float]]:
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        with self._cache_conn() as c:
            rows = c.execute("SELECT hash, embedding FROM embedding_cache WHERE provider = %s AND model = %s "
                             "AND provider_key = %s AND hash = ANY(%s)", (provider, model, provider_key, wanted))
            found = {h: floats(v) for h, v in rows if v is not None}
        return {h: v for h, v in found.items() if v}

    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None:
        if not any(len(v) for v in items.values()):
            return
        with self._cache_conn(write=True) as c, c.cursor() as cur:
            now = lru_stamp(c)
            # Sorted by key: concurrent writers of overlapping hashes lock rows in one order (no deadlock).
            rows = [(provider, model, provider_key, h, len(v), vec(v), now) for h, v in sorted(items.items()) if len(v)]
            cur.executemany("INSERT INTO embedding_cache(provider, model, provider_key, hash, dims, embedding, "
                            "updated_at) VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (provider, model, provider_key, "
                            "hash) DO UPDATE SET embedding = EXCLUDED.embedding, dims = EXCLUDED.dims, "
                            "updated_at = EXCLUDED.updated_at", rows)

    def cache_touch(self, provider: str, model: str, provider_key: str, hashes: Iterable[str]) -> None:
        """Rows another agent's transaction holds are skipped, not waited for (it is using them right
        now, so they are recent anyway): a touch sits in a sync's batch transaction, whose locks last
        until it commits, and two agents touching and writing shared rows deadlocked (the sync
        touches after it writes, see :meth:`memdir.sync.Indexer._embed`)."""
        wanted = sorted(set(hashes))
        if wanted:
            with self._cache_conn(write=True) as c:
                c.execute("UPDATE embedding_cache e SET updated_at = %s FROM (SELECT hash FROM embedding_cache "
                          "WHERE provider = %s AND model = %s AND provider_key = %s AND hash = ANY(%s) "
                          "ORDER BY hash FOR UPDATE SKIP LOCKED) s WHERE e.provider = %s AND e.model = %s "
                          "AND e.provider_key = %s AND e.hash = s.hash",
                          (lru_stamp(c), provider, model, provider_key, wanted, provider, model, provider_key))

    def cache_prune(self, max_entries: int | None) -> int:
        """Least recently used first, across the whole shared cache (``max_entries`` bounds it all).

        Rows another transaction holds are left for the next prune: deleting in whatever order the
        plan visits rows, two agents' prunes (or a prune and a sync writing the cache) deadlocked.
        """
        if not max_entries:
            return 0
        with bounded_answers(None), self._write() as c:  # (one statement over the whole cache)
            row = c.execute("WITH old AS (SELECT provider, model, provider_key, hash FROM embedding_cache "
                            "ORDER BY updated_at DESC, hash DESC OFFSET %s), v AS (SELECT e.ctid AS t FROM "
                            "embedding_cache e JOIN old USING (provider, model, provider_key, hash) "
                            "FOR UPDATE OF e SKIP LOCKED), d AS (DELETE FROM embedding_cache e USING v "
                            "WHERE e.ctid = v.t RETURNING 1) SELECT count(*) FROM d", (int(max_entries),)).fetchone()
        return int(row[0])

    def cache_count(self) -> int:
        with self._conn() as c:
            return int(c.execute("SELECT count(*) FROM embedding_cache").fetchone()[0])

    # -- export (migrate between backends) ---------------------------------------------------
    def export_files(self, only: Collection[tuple[str, str]] | None = None,
                     ) -> Iterator[tuple[str, str, str, int, int, list[ChunkRow]]]:
        """Every file row (or those of ``only``) with its chunks and vectors, for copying an index
        to another store, or a file's rows into a rebuild."""
        scope, args = self._scope()
        with self._conn() as c:
            files = c.execute(f"SELECT path, source, hash, mtime, size FROM files WHERE index_id = {scope} "
                              "ORDER BY source, path", args).fetchall()
            ix = self._index_id(c, create=False)
        if only is not None:
            files = [f for f in files if (f[0], f[1]) in only]
        for path, source, fhash, mtime, size in files:
            with self._conn() as c:
                rows = c.execute(
                    "SELECT c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.model, c.text, c.ts, "
                    "c.date_start, c.date_end, array(SELECT v.embedding FROM vectors v WHERE v.index_id = c.index_id "
                    "AND v.chunk_id = c.id ORDER BY v.seq) FROM chunks c WHERE c.index_id = %s AND c.path = %s "
                    "AND c.source = %s ORDER BY c.start_line, c.id", (ix, path, source)).fetchall()
            chunks = []
            for r in rows:
                windows = [float32(v) for v in r[11] or []]  # (as Python floats: 8 times the memory)
                chunks.append(ChunkRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                                       (windows[0] if len(windows) == 1 else np.concatenate(windows)) if windows
                                       else None, r[8], r[9], r[10],
                                       max(1, len(windows))))
            yield path, source, fhash, int(mtime), int(size), chunks

    def export_cache_count(self) -> int:
        scope, args = self._scope()
        with self._conn() as c:
            return int(c.execute("SELECT count(*) FROM embedding_cache e WHERE (e.model, e.hash) IN (SELECT DISTINCT "
                                 f"model, hash FROM chunks WHERE index_id = {scope})", args).fetchone()[0])

    def export_cache(self) -> Iterator[tuple[str, str, str, str, np.ndarray]]:
        """This agent's cache entries (those of its chunks' texts and models), least recently used
        first (so a copy keeps the LRU order).

        Not the whole table: it is the team's, and ``migrate --to sqlite`` of one agent copied every
        other agent's vectors into that agent's file (read into memory at once, however many).
        """
        scope, args = self._scope()
        # Read through a server-side cursor, a page at a time: fetched at once, the vectors of an agent
        # of 20,000 chunks took 133 MB (384 dimensions; four times that with 1,536) before the first
        # was written to the target
        with self._conn() as c, c.transaction(), c.cursor(name="memdir_export_cache") as cur:
            cur.itersize = EXPORT_PAGE
            cur.execute("SELECT e.provider, e.model, e.provider_key, e.hash, e.embedding FROM embedding_cache e "
                        "WHERE (e.model, e.hash) IN (SELECT DISTINCT model, hash FROM chunks WHERE index_id = "
                        f"{scope}) ORDER BY e.updated_at, e.hash", args)
            for p, m, k, h, v in cur:
                yield p, m, k, h, float32(v)
