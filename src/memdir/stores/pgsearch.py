"""Searching a PostgreSQL index (mixed into :class:`memdir.stores.postgres.PostgresStore`).

Every search reads one generation in one snapshot (``REPEATABLE READ, READ ONLY``: it runs on a
read replica too), so a reindex published between "which generation" and "its rows" cannot
mix two indexes.

* **Keywords**: BM25 over two ``tsvector`` columns, see :mod:`memdir.stores.pgkeyword`.
* **Vectors**: exact cosine over the agent's own rows (a B-tree range) until it has
  ``hnsw_min_vectors``; from then on its own partial HNSW index (``WHERE index_id = N``, cosine),
  built by :meth:`PgSearch.optimize` after a sync, so approximate search never filters other
  agents' neighbours.  A chunk's score is the best of its windows.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from memdir.stores import pgkeyword
from memdir.stores.base import Hit, bounded_answers
from memdir.stores.pgkeyword import pg_text

if TYPE_CHECKING:
    from memdir.stores.pgconn import Database

CHUNK_COLS = "c.id, c.path, c.source, c.start_line, c.end_line, c.text, c.ts, c.date_start, c.date_end"


def hit(r: Sequence[Any], score: float) -> Hit:
    """A :class:`Hit` from a row selected with ``CHUNK_COLS``."""
    return Hit(r[0], r[1], r[2], r[3], r[4], r[5], score, r[6], r[7], r[8])


def vec(values: Sequence[float]) -> np.ndarray:
    """A vector as pgvector takes it: float32, non-finite values as 0 (as ``embeddings.base.normalize``
    does; pgvector refuses NaN and infinity, and one such vector from a custom provider failed the
    whole batch's transaction)."""
    arr = np.asarray(values, dtype=np.float32)
    return arr if np.isfinite(arr).all() else np.where(np.isfinite(arr), arr, np.float32(0.0))


def cosine(value: Any) -> float:
    """pgvector's ``1 - (a <=> b)`` as a score: NaN (a stored all-zero vector has no direction) is 0,
    as SQLite scores it; a NaN reached the fused scores and the JSON output."""
    score = float(value)
    return 0.0 if math.isnan(score) else score


def float32(value: Any) -> np.ndarray:
    """A vector as loaded by pgvector's adapter (``Vector`` or NumPy array) as a float32 array: as a
    list of Python floats it takes 8 times the memory (the export of one large transcript's vectors
    for ``memdir migrate``: hundreds of MB)."""
    if hasattr(value, "to_numpy"):
        return np.asarray(value.to_numpy(), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


def floats(value: Any) -> list[float]:
    """A vector as loaded by pgvector's adapter (``Vector`` or NumPy array) as plain floats."""
    if hasattr(value, "to_list"):
        return [float(x) for x in value.to_list()]
    return np.asarray(value, dtype=np.float32).tolist()


@contextmanager
def same(conn: Any) -> Iterator[Any]:
    """A connection the caller already holds, usable where a pooled one would be taken."""
    yield conn


class PgSearch:
    """Keyword and vector search, score lookups and HNSW upkeep for one agent's generation."""

    agent: str
    schema: str
    ts_config: str
    ranking: str
    hnsw_min_vectors: int
    vector_enabled: bool
    pinned: int | None
    db: Database
    _dfs: pgkeyword.DfCache
    _local: threading.local

    if TYPE_CHECKING:  # provided by PostgresStore
        @property
        def fts_available(self) -> bool: ...
        def _conn(self) -> AbstractContextManager[Any]: ...
        def _scope(self) -> tuple[str, dict[str, Any]]: ...
        def _index_id(self, conn: Any = None, *, create: bool = True) -> int | None: ...

    # -- keywords ----------------------------------------------------------------------------
    def _scope_sql(self) -> tuple[str, Any]:
        if self.pinned is not None:
            return "%s", self.pinned
        return "(SELECT id FROM indexes WHERE agent = %s AND state = 'live')", self.agent

    def keyword_search(self, terms: Sequence[str], limit: int) -> list[Hit]:
        """BM25 over this generation's rows matching any phrase of ``terms``, best first.

        Phrases certainly found in at least half of the chunks are left out of the match (their IDF
        is floored at 1e-6, as in SQLite): at least the rarest phrase is always kept.
        """
        ps = pgkeyword.phrases(terms, self.ts_config, pg_text)
        if not self.fts_available or limit <= 0 or not ps:
            return []
        with self._conn() as c, c.transaction():
            if getattr(self._local, "conn", None) is None:
                c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            stamp = self._stamp(c)
            if stamp is None:
                return []
            frequent = self._frequent(c, stamp, ps) if self.ranking == "bm25" and len(ps) > 1 else {}
            keep = [ph for i, ph in enumerate(ps) if i not in frequent]
            rarest = [ps[min(frequent, key=lambda i: frequent[i])]] if frequent else []
            sql, params = pgkeyword.search_sql(keep or rarest, "%s", stamp[0], self.ranking, limit, CHUNK_COLS)
            rows = c.execute(sql, params).fetchall()
            if not rows and keep and rarest:
                # The phrases left match nothing (a word no note holds, a stem no note has): as on
                # SQLite, which leaves out phrases found nowhere too, the rarest frequent one ranks.
                # "banana zzz" (banana in every chunk) answered nothing here, every banana note there.
                keep = rarest
                sql, params = pgkeyword.search_sql(keep, "%s", stamp[0], self.ranking, limit, CHUNK_COLS)
                rows = c.execute(sql, params).fetchall()
            keep = keep or rarest
        if rows:
            for ph, df in zip(keep, rows[0][10:], strict=True):
                self._dfs.put((*stamp, ph), int(df))
        return [hit(r, self._map(float(r[9] or 0.0))) for r in rows]

    def _frequent(self, c: Any, stamp: tuple[int, int, int, int], ps: list[pgkeyword.Phrase]) -> dict[int, int]:
        """``{phrase index: lower bound of its document frequency}`` for phrases in at least half the chunks."""
        if stamp[2] < pgkeyword.PRUNE_MIN_ROWS:
            return {}
        query = pgkeyword.frequent_sql(ps, stamp[0])
        if query is None:
            return {}
        found = {int(i): int(n) for i, n in c.execute(*query)}
        for i, n in found.items():
            self._dfs.put((*stamp, ps[i]), n)  # any count from N/2 on gives the same (floored) IDF
        return found

    def _map(self, raw: float) -> float:
        return raw if self.ranking == "ts_rank_cd" else raw / (1 + raw)

    def _stamp(self, c: Any) -> tuple[int, int, int, int] | None:
        """(generation, version, N, total length): what cached document frequencies are valid for."""
        scope, arg = self._scope_sql()
        row = c.execute(f"SELECT id, version, n_docs, total_len FROM indexes WHERE id = {scope}", (arg,)).fetchone()
        return (int(row[0]), int(row[1]), int(row[2]), int(row[3])) if row else None

    def keyword_scores(self, terms: Sequence[str], ids: Sequence[str]) -> dict[str, float]:
        """The :meth:`keyword_search` score of each chunk in ``ids`` (0.0 when it does not match)."""
        wanted = list(dict.fromkeys(ids))
        out = dict.fromkeys(wanted, 0.0)
        ps = pgkeyword.phrases(terms, self.ts_config, pg_text)
        if not wanted or not ps or not self.fts_available:
            return out
        qcols = ", ".join(f"{ph.sql} AS q{i}" for i, ph in enumerate(ps))
        qparams = [p for ph in ps for p in ph.params]
        tfs = ", ".join(f"coalesce(ts_rank_cd('{{1,1,1,1}}', c.{ph.column}, q.q{i}, 0), 0)::float8"
                        for i, ph in enumerate(ps))
        with self._conn() as c, c.transaction():
            if getattr(self._local, "conn", None) is None:
                c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            stamp = self._stamp(c)
            if stamp is None:
                return out
            ix, _version, n_docs, total_len = stamp
            if self.ranking == "ts_rank_cd":
                exact = " || ".join(f"q.q{i}" for i, ph in enumerate(ps) if ph.column == "tsv") or "''::tsquery"
                for cid, score in c.execute(f"WITH q AS (SELECT {qcols}) SELECT c.id, ts_rank_cd(c.tsv, {exact}, "
                                            f"1|32)::float8 FROM chunks c, q WHERE c.index_id = %s AND c.id = ANY(%s)",
                                            [*qparams, ix, wanted]):
                    out[cid] = float(score)
                return out
            dfs: list[int] = []
            if any(self._dfs.get((*stamp, ph)) is None for ph in ps):
                self._frequent(c, stamp, ps)
            for ph in ps:
                df = self._dfs.get((*stamp, ph))
                if df is None:  # not seen in a recent search: count it on the GIN index
                    df = int(c.execute(f"SELECT count(*) FROM chunks WHERE index_id = %s AND {ph.column} @@ "
                                       f"{ph.sql}", (ix, *ph.params)).fetchone()[0])
                    self._dfs.put((*stamp, ph), df)
                dfs.append(df)
            rows = c.execute(f"WITH q AS (SELECT {qcols}) SELECT c.id, c.doc_len, {tfs} FROM chunks c, q "
                             f"WHERE c.index_id = %s AND c.id = ANY(%s)", [*qparams, ix, wanted]).fetchall()
        for r in rows:
            raw = pgkeyword.bm25([float(x) for x in r[2:]], dfs, int(r[1]), n_docs, total_len)
            out[r[0]] = self._map(raw) if any(float(x) > 0 for x in r[2:]) else 0.0
        return out

    def chunks_in_period(self, start: str, end: str, limit: int) -> list[Hit]:
        """Chunks whose dates overlap ``start..end`` (ISO days), in path and line order, score 0."""
        if limit <= 0:
            return []
        scope, args = self._scope()
        with self._conn() as c:
            rows = c.execute(f"SELECT {CHUNK_COLS} FROM chunks c WHERE c.index_id = {scope} AND c.date_start <= "
                             "%(end)s AND c.date_end >= %(start)s ORDER BY c.path, c.start_line LIMIT %(k)s",
                             {**args, "start": start, "end": end, "k": int(limit)}).fetchall()
        return [hit(r, 0.0) for r in rows]

    def first_chunks(self, paths: Sequence[str]) -> list[Hit]:
        """The first chunk of each memory file in ``paths``, in path order, score 0."""
        if not paths:
            return []
        scope, args = self._scope()
        with self._conn() as c:
            rows = c.execute(f"SELECT DISTINCT ON (c.path) {CHUNK_COLS} FROM chunks c WHERE c.index_id = {scope} "
                             "AND c.source = 'memory' AND c.path = ANY(%(paths)s) ORDER BY c.path, c.start_line, "
                             "c.end_line", {**args, "paths": sorted(set(paths))}).fetchall()
        return [hit(r, 0.0) for r in rows]

    # -- vectors -----------------------------------------------------------------------------
    @staticmethod
    def _hnsw_name(ix: int | None) -> str:
        return f"vectors_hnsw_{ix}" if ix is not None else ""

    def _may_index(self) -> bool:
        """Whether this role may build an index on the vectors table (only its owner's members may)."""
        with self._conn() as c:
            row = c.execute("SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = "
                            "to_regclass(format('%%I.vectors', %s::text))", (self.schema,)).fetchone()
        return bool(row and row[0])

    def _index_exists(self, name: str, conn: Any = None) -> bool:
        with self._conn() if conn is None else same(conn) as c:
            row = c.execute("SELECT i.indisvalid FROM pg_class r JOIN pg_index i ON i.indexrelid = r.oid "
                            "JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.relname = %s AND n.nspname = %s",
                            (name, self.schema)).fetchone()
        return bool(row and row[0])

    def vector_search(self, query: Sequence[float], limit: int) -> list[Hit]:
        """Nearest chunks by cosine (best of a chunk's windows): the agent's HNSW index if any, else exact."""
        q = vec(query)
        if not q.size or not np.any(q) or limit <= 0 or not self.vector_enabled:
            return []
        dims = int(q.size)
        nested = getattr(self._local, "conn", None) is not None
        with self._conn() as c, c.transaction():
            if not nested:
                # One snapshot for "which generation" and "its nearest rows": a swap cannot fall between.
                c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            ix = self._index_id(c, create=False)
            if ix is None:
                return []
            args = {"q": q, "ix": ix, "dims": dims}
            if not self._index_exists(self._hnsw_name(ix), c):
                rows = c.execute(
                    "WITH top AS (SELECT v.chunk_id, min(v.embedding <=> %(q)s) AS d FROM vectors v "
                    "WHERE v.index_id = %(ix)s AND v.dims = %(dims)s GROUP BY v.chunk_id ORDER BY d, v.chunk_id "
                    f"LIMIT %(k)s) SELECT {CHUNK_COLS}, 1 - top.d FROM top JOIN chunks c ON c.index_id = %(ix)s "
                    "AND c.id = top.chunk_id ORDER BY top.d, c.id", {**args, "k": int(limit)}).fetchall()
                return [hit(r, cosine(r[9])) for r in rows]
            # HNSW returns windows; a chunk's several windows can take several places, so widen until
            # ``limit`` distinct chunks are found.  The index id is a literal: the planner must see that
            # the partial index's predicate holds.  ``dims`` as in the exact path: a query of another width
            # (the model changed) cannot use the index, and casting each row to it raised "expected N
            # dimensions" instead of finding nothing.
            order = f"(v.embedding::vector({dims})) <=> %(q)s::vector({dims})"
            k = int(limit)
            while True:
                c.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(1000, max(100, 2 * k))),))
                rows = c.execute(
                    f"WITH w AS (SELECT v.chunk_id, {order} AS d FROM vectors v WHERE v.index_id = {int(ix)} "
                    f"AND v.dims = %(dims)s ORDER BY {order} LIMIT %(k)s), top AS (SELECT chunk_id, min(d) AS d "
                    "FROM w GROUP BY chunk_id "
                    f"ORDER BY d, chunk_id LIMIT %(limit)s), n AS (SELECT count(*) AS n FROM w) "
                    f"SELECT {CHUNK_COLS}, 1 - top.d, n.n FROM top JOIN chunks c ON c.index_id = %(ix)s "
                    "AND c.id = top.chunk_id, n ORDER BY top.d, c.id", {**args, "k": k, "limit": int(limit)}
                ).fetchall()
                if len(rows) >= limit or not rows or int(rows[0][10]) < k or k >= 1000:
                    return [hit(r, cosine(r[9])) for r in rows]
                k = min(1000, k * 2)

    def vector_scores(self, query: Sequence[float], ids: Sequence[str]) -> dict[str, float]:
        """Cosine of each given chunk that has a vector (best window), by primary key: no search."""
        q = vec(query)
        wanted = list(dict.fromkeys(ids))
        if not q.size or not np.any(q) or not wanted or not self.vector_enabled:
            return {}
        scope, args = self._scope()
        with self._conn() as c:
            rows = c.execute(f"SELECT chunk_id, max(1 - (embedding <=> %(q)s)) FROM vectors WHERE index_id = {scope} "
                             "AND chunk_id = ANY(%(ids)s) AND dims = %(dims)s GROUP BY chunk_id",
                             {**args, "q": q, "ids": wanted, "dims": int(q.size)}).fetchall()
        return {cid: cosine(score) for cid, score in rows}

    def optimize(self) -> None:
        """Count the generation's frequent lexemes when they are stale, and give it its HNSW index once
        it holds ``hnsw_min_vectors`` vectors (built concurrently)."""
        ix = self._index_id(create=False)
        if ix is None:
            return
        self._count_frequent(ix)
        name = self._hnsw_name(ix)
        with self._conn() as c:
            row = c.execute("SELECT count(*), max(dims) FROM vectors WHERE index_id = %s", (ix,)).fetchone()
        count, dims = int(row[0]), row[1]
        if not dims or count < max(1, self.hnsw_min_vectors) or self._index_exists(name) or not self._may_index():
            return
        conn = self.db.dedicated("memdir index build")
        try:
            # An HNSW build that outgrows maintenance_work_mem (64 MB by default) slows down many times over;
            # 100k × 384 floats with their graph need about 200 MB.  This session only.
            conn.execute("SET maintenance_work_mem = '512MB'")
            # A concurrent build waits for every older transaction on the table to end: that is its
            # nature, not a stuck lock, and giving up would throw a finished rebuild away.
            conn.execute("SET lock_timeout = 0")
            try:
                conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{self.schema}"."{name}"')  # an invalid leftover
                conn.execute(f'CREATE INDEX CONCURRENTLY "{name}" ON "{self.schema}".vectors USING hnsw '
                             f"((embedding::vector({int(dims)})) vector_cosine_ops) WHERE index_id = {int(ix)}")
            except Exception as exc:
                # Only the tables' owner may index them: a team's role granted reads and writes on a schema
                # an administrator made failed every sync (and every rebuild) from this size on.  The index
                # only speeds vector search up; without it the search is exact.
                if getattr(exc, "sqlstate", None) != "42501":  # insufficient_privilege
                    raise
                return
            # Fresh statistics, so the planner knows this agent's rows are many and picks the new index.
            conn.execute(f'ANALYZE "{self.schema}".vectors')
        finally:
            conn.close()

    def _count_frequent(self, ix: int) -> None:
        """Recount ``frequent_lexemes`` (one pass over the generation's tsvectors) once a share of its
        chunks has been rewritten since the last count (see :func:`pgkeyword.frequent_sql`); one pass
        over a large index may take minutes, so not under a search's bound on answers."""
        with bounded_answers(None), self._write() as c:
            row = c.execute("SELECT n_docs, churn, frequent_at FROM indexes WHERE id = %s FOR UPDATE", (ix,)).fetchone()
            if row is None:
                return  # the generation is gone (cleaned away by another writer): the rebuild says so
            n_docs, churn, counted_at = row
            if n_docs < pgkeyword.PRUNE_MIN_ROWS:
                if counted_at is not None:
                    c.execute("DELETE FROM frequent_lexemes WHERE index_id = %s", (ix,))
                    c.execute("UPDATE indexes SET frequent_at = NULL WHERE id = %s", (ix,))
                return
            if counted_at is not None and churn <= pgkeyword.RECOUNT_CHURN * n_docs:
                return
            c.execute("DELETE FROM frequent_lexemes WHERE index_id = %s", (ix,))
            for column in ("tsv", "tsv_stem"):
                c.execute(*pgkeyword.count_frequent_sql(ix, column))
            c.execute("UPDATE indexes SET churn = 0, frequent_at = n_docs WHERE id = %s", (ix,))
