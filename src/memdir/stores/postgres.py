"""The PostgreSQL + pgvector store: many agents on many hosts sharing one database (SPEC §10).

:class:`PostgresStore` implements :class:`memdir.stores.base.Store` (see there for the contract)
and passes the same conformance suite as SQLite.  Plumbing (pool, migrations, writer lock) is in
:mod:`memdir.stores.pgschema`.

**Shared tables, rows keyed by index generation — not a schema per agent.**  Every agent's rows
live in the same ``files``/``chunks``/``vectors`` tables of one schema, keyed by ``index_id``, a
*generation* of one agent's index (``indexes``: agent, state building/live/retired, meta).  Why:

* one set of tables and migrations for any number of agents (hundreds of schemas would each need
  migrating, and bloat the catalog with thousands of tables and indexes);
* the embedding cache is one table shared by all agents, so two agents never embed the same text;
* it shards the way Citus shards: by a distribution column (``index_id``), co-locating an
  agent's rows; and a read replica serves every agent at once;
* an atomic full reindex is a new generation written beside the live one and published by one
  ``UPDATE`` of two ``indexes`` rows in one transaction: readers see the old generation until
  that commit (MVCC), a crash leaves an orphan ``building`` generation that the next sync
  deletes, and no table is ever renamed under a reader.

The cost of sharing tables is that one agent's search must not walk other agents' rows: the
keyword GIN index is keyed by (generation, lexeme) where ``btree_gin`` exists, and vectors are
searched exactly over the agent's own rows (a B-tree range) until the agent has
``hnsw_min_vectors``; from then on the agent gets its own *partial* HNSW index
(``WHERE index_id = N``, cosine), so approximate search never filters other agents' neighbours.

**Keyword ranking** is BM25 with FTS5's formula (k1 = 1.2, b = 0.75, ``idf = ln((N − n + 0.5) /
(n + 0.5))``), not ``ts_rank_cd``: per query term, ``ts_rank_cd`` with unit weights counts the
term's occurrences (its cover density for a single lexeme *is* the term frequency), document
frequencies are counted over the matching rows in the same statement, and N and the average
length are kept per generation.  Scores map into (0, 1) as SQLite's do (``r/(1+r)``).  Text goes
through the configured text search configuration (``english``: stemming and stop words), after
memdir's own CJK spacing (each Han/Kana character a token) and with punctuation turned into
spaces, so the parser tokenises like FTS5's ``unicode61`` (``ZX-4471-Q`` → ``zx 4471 q``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from memdir.stores.base import ChunkRow, FileRows, Hit
from memdir.stores.pgschema import AdvisoryWriterLock, Database, redact_dsn
from memdir.textutil import fts_text, has_han_or_kana, has_hangul

K1, B = 1.2, 0.75
_NON_WORD = re.compile(r"[^\w]+")
_CHUNK_COLS = "c.id, c.path, c.source, c.start_line, c.end_line, c.text, c.ts"
_LIVE = "(SELECT id FROM indexes WHERE agent = %(agent)s AND state = 'live')"


def pg_text(text: str) -> str:
    """What the text search parser sees: CJK spaced, punctuation made a separator (``unicode61``-like)."""
    return _NON_WORD.sub(" ", fts_text(text))


def doc_length(text: str) -> int:
    return len(pg_text(text).split())


def _vec(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _floats(value: Any) -> list[float]:
    """A vector as loaded by pgvector's adapter (``Vector`` or NumPy array) as plain floats."""
    if hasattr(value, "to_list"):
        return [float(x) for x in value.to_list()]
    return np.asarray(value, dtype=np.float32).tolist()


class PostgresStore:
    """One agent's index in a shared PostgreSQL schema; thread-safe (a pooled connection per call)."""

    def __init__(self, dsn: str, agent: str, *, schema: str = "memdir", pool_size: int = 4,
                 text_search_config: str = "english", hnsw_min_vectors: int = 20000,
                 ranking: str = "bm25", _db: Database | None = None, _index_id: int | None = None):
        self.dsn, self.agent, self.schema = dsn, agent, schema
        self.ts_config = text_search_config
        self.hnsw_min_vectors = hnsw_min_vectors
        self.ranking = ranking
        self.db = _db or Database.acquire(dsn, schema, pool_size)
        self._owns_db = _db is None
        self.pinned = _index_id  # a generation being built (rebuild); None = whatever is live
        self.location = redact_dsn(dsn, schema) + f"/{agent}"
        self._local = threading.local()
        self._closed = False
        self.fts_error: str | None = None
        if self._owns_db:
            self._check_ts_config()

    def _check_ts_config(self) -> None:
        with self.db.connection() as conn:
            name = self.ts_config.rpartition(".")[2]
            if conn.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s", (name,)).fetchone() is None:
                self.fts_error = f"text search configuration {self.ts_config!r} does not exist on this server"

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def fts_available(self) -> bool:
        return self.fts_error is None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._owns_db:
                self.db.release()

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """The thread's transaction connection inside :meth:`transaction`, else a pooled one."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.db.connection() as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """The enclosing :meth:`transaction`'s connection, or a pooled one in a transaction of its own."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.db.connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        outer = getattr(self._local, "conn", None)
        if outer is not None:
            with outer.transaction():
                yield outer
            return
        with self.db.connection() as conn, conn.transaction():
            self._local.conn = conn
            self._local.index_id = None
            try:
                yield conn
            finally:
                self._local.conn = None
                self._local.index_id = None

    def writer_lock(self) -> AdvisoryWriterLock:
        return AdvisoryWriterLock(self.db, self.agent)

    def describe(self) -> dict[str, Any]:
        f = self.db.facts
        n = self.vector_count()
        idx = self._hnsw_name(self._index_id(create=False)) if n else None
        has_hnsw = bool(idx) and self._index_exists(idx)
        vector = {"path": "hnsw" if has_hnsw else "exact", "version": f["pgvector"],
                  "why": (f"pgvector HNSW index (cosine) over this agent's {n} vectors" if has_hnsw else
                          f"exact cosine over this agent's {n} vectors (HNSW from {self.hnsw_min_vectors})")}
        return {"backend": "postgres", "location": self.location, "server": f["server"], "pgvector": f["pgvector"],
                "schema": self.schema, "schemaVersion": f["schema_version"], "agent": self.agent,
                "pool": {"max": self.db.pool.max_size},
                "fts": {"available": self.fts_available, "error": self.fts_error, "config": self.ts_config,
                        "tokenizer": f"tsvector {self.ts_config}, {self.ranking}",
                        "ranking": self.ranking, "gin": "btree_gin (index_id, tsv)" if f["btree_gin"] else "tsv"},
                "vector": vector}

    # -- generations -------------------------------------------------------------------------
    def _index_id(self, conn: Any = None, *, create: bool = True) -> int | None:
        """The generation this store reads and writes: pinned, else the agent's live one."""
        if self.pinned is not None:
            return self.pinned
        cached = getattr(self._local, "index_id", None)
        if cached is not None and conn is not None and conn is getattr(self._local, "conn", None):
            return int(cached)
        with self._conn() if conn is None else _same(conn) as c:
            row = c.execute("SELECT id FROM indexes WHERE agent = %s AND state = 'live'", (self.agent,)).fetchone()
            if row is None and create:
                row = c.execute("INSERT INTO indexes(agent, state, ts_config, built_by) VALUES (%s, 'live', %s, "
                                "'incremental') ON CONFLICT DO NOTHING RETURNING id", (self.agent, self.ts_config)
                                ).fetchone() or c.execute("SELECT id FROM indexes WHERE agent = %s AND "
                                                          "state = 'live'", (self.agent,)).fetchone()
        if row is None:
            return None
        if conn is not None and conn is getattr(self._local, "conn", None):
            self._local.index_id = int(row[0])
        return int(row[0])

    def _scope(self) -> tuple[str, dict[str, Any]]:
        """SQL for "this store's generation" and its parameters, resolved inside the statement."""
        if self.pinned is not None:
            return "%(ix)s", {"ix": self.pinned}
        return _LIVE, {"agent": self.agent}

    # -- meta --------------------------------------------------------------------------------
    def read_meta(self) -> dict[str, Any] | None:
        scope, args = self._scope()
        with self._conn() as c:
            row = c.execute(f"SELECT meta FROM indexes WHERE id = {scope}", args).fetchone()
        return dict(row[0]) if row and row[0] is not None else None

    def write_meta(self, meta: dict[str, Any]) -> None:
        from psycopg.types.json import Jsonb

        with self._write() as c:
            c.execute("UPDATE indexes SET meta = %s WHERE id = %s", (Jsonb(meta), self._index_id(c)))

    # -- files and chunks --------------------------------------------------------------------
    def file_rows(self, source: str | None = None) -> FileRows:
        scope, args = self._scope()
        sql = f"SELECT path, source, hash, mtime, size FROM files WHERE index_id = {scope}"
        if source:
            sql += " AND source = %(source)s"
            args = {**args, "source": source}
        with self._conn() as c:
            return {(p, s): (h, int(m), int(z)) for p, s, h, m, z in c.execute(sql, args)}

    def touch_file(self, path: str, source: str, file_hash: str, mtime_ns: int, size: int) -> None:
        with self._write() as c:
            c.execute("UPDATE files SET hash = %s, mtime = %s, size = %s WHERE index_id = %s AND path = %s "
                      "AND source = %s", (file_hash, mtime_ns, size, self._index_id(c), path, source))

    def replace_file(self, path: str, source: str, file_hash: str, mtime_ns: int, size: int,
                     chunks: Sequence[ChunkRow]) -> None:
        now = int(time.time() * 1000)
        with self._write() as c:
            ix = self._index_id(c)
            docs, length = self._delete_chunks(c, ix, path, source)
            rows = []
            vectors = []
            for ch in chunks:
                has_vec = ch.embedding is not None and len(ch.embedding) > 0
                text = pg_text(ch.text)
                rows.append((ix, ch.id, ch.path, ch.source, ch.start_line, ch.end_line, ch.hash, ch.model, ch.text,
                             self.ts_config, text, len(text.split()), has_vec, now, ch.ts))
                if has_vec:
                    vectors.append((ix, ch.id, len(ch.embedding), _vec(ch.embedding)))  # type: ignore[arg-type]
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO chunks(index_id, id, path, source, start_line, end_line, hash, model, text, tsv, "
                    "doc_len, embedded, updated_at, ts) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,"
                    "to_tsvector(%s::regconfig, %s),%s,%s,%s,%s) ON CONFLICT (index_id, id) DO UPDATE SET "
                    "path = EXCLUDED.path, source = EXCLUDED.source, start_line = EXCLUDED.start_line, "
                    "end_line = EXCLUDED.end_line, hash = EXCLUDED.hash, model = EXCLUDED.model, "
                    "text = EXCLUDED.text, tsv = EXCLUDED.tsv, doc_len = EXCLUDED.doc_len, "
                    "embedded = EXCLUDED.embedded, updated_at = EXCLUDED.updated_at, ts = EXCLUDED.ts", rows)
                if vectors:
                    cur.executemany("INSERT INTO vectors(index_id, chunk_id, dims, embedding) VALUES (%s,%s,%s,%s) "
                                    "ON CONFLICT (index_id, chunk_id, seq) DO UPDATE SET dims = EXCLUDED.dims, "
                                    "embedding = EXCLUDED.embedding", vectors)
            c.execute("INSERT INTO files(index_id, path, source, hash, mtime, size) VALUES (%s,%s,%s,%s,%s,%s) "
                      "ON CONFLICT (index_id, path, source) DO UPDATE SET hash = EXCLUDED.hash, "
                      "mtime = EXCLUDED.mtime, size = EXCLUDED.size", (ix, path, source, file_hash, mtime_ns, size))
            added = c.execute("SELECT count(*), coalesce(sum(doc_len), 0) FROM chunks WHERE index_id = %s "
                              "AND path = %s AND source = %s", (ix, path, source)).fetchone()
            self._adjust_stats(c, ix, int(added[0]) - docs, int(added[1]) - length)

    def _delete_chunks(self, c: Any, ix: int, path: str, source: str) -> tuple[int, int]:
        c.execute("DELETE FROM vectors v USING chunks c WHERE v.index_id = %s AND c.index_id = %s "
                  "AND c.id = v.chunk_id AND c.path = %s AND c.source = %s", (ix, ix, path, source))
        row = c.execute("WITH d AS (DELETE FROM chunks WHERE index_id = %s AND path = %s AND source = %s "
                        "RETURNING doc_len) SELECT count(*), coalesce(sum(doc_len), 0) FROM d",
                        (ix, path, source)).fetchone()
        return int(row[0]), int(row[1])

    @staticmethod
    def _adjust_stats(c: Any, ix: int, docs: int, length: int) -> None:
        if docs or length:
            c.execute("UPDATE indexes SET n_docs = n_docs + %s, total_len = total_len + %s WHERE id = %s",
                      (docs, length, ix))

    def delete_file(self, path: str, source: str) -> None:
        with self._write() as c:
            ix = self._index_id(c)
            docs, length = self._delete_chunks(c, ix, path, source)
            c.execute("DELETE FROM files WHERE index_id = %s AND path = %s AND source = %s", (ix, path, source))
            self._adjust_stats(c, ix, -docs, -length)

    def paths_missing_vectors(self) -> set[tuple[str, str]]:
        scope, args = self._scope()
        with self._conn() as c:
            rows = c.execute(f"SELECT DISTINCT path, source FROM chunks WHERE index_id = {scope} AND NOT embedded",
                             args).fetchall()
        return {(p, s) for p, s in rows}

    # -- keyword -----------------------------------------------------------------------------
    def _term_queries(self, terms: Sequence[str]) -> tuple[list[str], list[Any]]:
        """One tsquery SQL expression per term (phrase for CJK, prefix for Hangul), with parameters."""
        exprs: list[str] = []
        params: list[Any] = []
        for term in dict.fromkeys(t.replace('"', "") for t in terms if t):
            if has_hangul(term) and not has_han_or_kana(term):
                exprs.append("to_tsquery(%s::regconfig, quote_literal(%s) || ':*')")
                params += [self.ts_config, term.lower()]
            else:
                exprs.append("phraseto_tsquery(%s::regconfig, %s)")
                params += [self.ts_config, pg_text(term)]
        return exprs, params

    def _keyword_sql(self, terms: Sequence[str], ids: Sequence[str] | None,
                     limit: int | None) -> tuple[str, list[Any]] | None:
        """One statement: match, score every match, keep the best ``limit``, then fetch their rows."""
        exprs, params = self._term_queries(terms)
        if not exprs:
            return None
        if self.pinned is not None:
            scope_sql, scope_arg = "%s", self.pinned
        else:
            scope_sql, scope_arg = "(SELECT id FROM indexes WHERE agent = %s AND state = 'live')", self.agent
        params = [*params, scope_arg]
        n = len(exprs)
        any_q = " || ".join(f"q.q{i}" for i in range(n))
        head = (f"WITH q AS (SELECT {', '.join(f'{e} AS q{i}' for i, e in enumerate(exprs))}), "
                f"ix AS (SELECT id, n_docs, total_len FROM indexes WHERE id = {scope_sql}), ")
        if self.ranking == "ts_rank_cd":
            # PostgreSQL's own cover density, length-normalised (1) and mapped to rank/(rank+1) (32).
            scored = (f"s AS (SELECT c.id, ts_rank_cd(c.tsv, {any_q}, 1|32)::float8 AS score FROM chunks c, q, ix "
                      f"WHERE c.index_id = ix.id AND c.tsv @@ ({any_q})")
            where = " AND c.id = ANY(%s)"
        else:
            tfs = ", ".join(f"ts_rank_cd('{{1,1,1,1}}', c.tsv, q.q{i}, 0)::float8 AS f{i}" for i in range(n))
            dfs = ", ".join(f"count(*) FILTER (WHERE f{i} > 0) OVER () AS n{i}" for i in range(n))
            norm = (f"({K1} * (1 - {B} + {B} * d.doc_len / greatest(ix.total_len::float8 / greatest(ix.n_docs, 1), "
                    f"1)))")
            parts = [f"CASE WHEN f{i} > 0 THEN greatest(ln(greatest((ix.n_docs - n{i} + 0.5)::float8 / "
                     f"(n{i} + 0.5), 1e-9)), 1e-6) * f{i} * {K1 + 1} / (f{i} + {norm}) ELSE 0 END" for i in range(n)]
            scored = (f"m AS (SELECT c.id, c.doc_len, {tfs} FROM chunks c, q, ix WHERE c.index_id = ix.id "
                      f"AND c.tsv @@ ({any_q})), d AS (SELECT m.*, {dfs} FROM m), "
                      f"s AS (SELECT d.id, {' + '.join(parts)} AS score FROM d, ix WHERE true")
            where = " AND d.id = ANY(%s)"
        sql = head + scored
        if ids is not None:
            sql += where
            params.append(list(ids))
        sql += " ORDER BY score DESC, id"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(int(limit))
        sql += (f") SELECT {_CHUNK_COLS}, s.score FROM s JOIN chunks c ON c.index_id = (SELECT id FROM ix) "
                f"AND c.id = s.id ORDER BY s.score DESC, c.id")
        return sql, params

    def _keyword_hits(self, built: tuple[str, list[Any]] | None) -> list[Hit]:
        if built is None:
            return []
        with self._conn() as c:
            rows = c.execute(*built).fetchall()
        out = []
        for r in rows:
            raw = float(r[7] or 0.0)
            score = raw if self.ranking == "ts_rank_cd" else raw / (1 + raw)
            out.append(Hit(r[0], r[1], r[2], r[3], r[4], r[5], max(score, 0.001), r[6]))
        return out

    def keyword_search(self, terms: Sequence[str], limit: int) -> list[Hit]:
        """BM25 over the generation's rows matching any of ``terms``, best first."""
        if not self.fts_available or limit <= 0:
            return []
        return self._keyword_hits(self._keyword_sql(terms, None, limit))

    # -- vectors -----------------------------------------------------------------------------
    @staticmethod
    def _hnsw_name(ix: int | None) -> str:
        return f"vectors_hnsw_{ix}" if ix is not None else ""

    def _index_exists(self, name: str, conn: Any = None) -> bool:
        with self._conn() if conn is None else _same(conn) as c:
            row = c.execute("SELECT i.indisvalid FROM pg_class r JOIN pg_index i ON i.indexrelid = r.oid "
                            "JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.relname = %s AND n.nspname = %s",
                            (name, self.schema)).fetchone()
        return bool(row and row[0])

    def vector_search(self, query: Sequence[float], limit: int) -> list[Hit]:
        """Nearest chunks by cosine: the agent's HNSW index when it has one, else exact."""
        q = _vec(query)
        if not q.size or not np.any(q) or limit <= 0:
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
            if self._index_exists(self._hnsw_name(ix), c):
                c.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(1000, max(100, 2 * limit))),))
                # The index id is an integer literal so the planner can match the partial index's predicate.
                order = f"(v.embedding::vector({dims})) <=> %(q)s::vector({dims})"
                where = f"v.index_id = {int(ix)}"
            else:
                order = "v.embedding <=> %(q)s"
                where = "v.index_id = %(ix)s AND v.dims = %(dims)s"
            rows = c.execute(
                f"WITH top AS (SELECT v.chunk_id, {order} AS d FROM vectors v WHERE {where} ORDER BY {order} "
                f"LIMIT %(k)s) SELECT {_CHUNK_COLS}, 1 - top.d FROM top JOIN chunks c ON c.index_id = %(ix)s "
                f"AND c.id = top.chunk_id ORDER BY top.d, c.id",
                {"q": q, "ix": ix, "dims": dims, "k": int(limit)},
            ).fetchall()
        return [Hit(r[0], r[1], r[2], r[3], r[4], r[5], float(r[7]), r[6]) for r in rows]

    def optimize(self) -> None:
        """Give the generation its HNSW index once it holds ``hnsw_min_vectors`` vectors (builds concurrently)."""
        ix = self._index_id(create=False)
        if ix is None:
            return
        name = self._hnsw_name(ix)
        with self._conn() as c:
            row = c.execute("SELECT count(*), max(dims) FROM vectors WHERE index_id = %s", (ix,)).fetchone()
        count, dims = int(row[0]), row[1]
        if not dims or count < max(1, self.hnsw_min_vectors) or self._index_exists(name):
            return
        conn = self.db.dedicated("memdir index build")
        try:
            conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{self.schema}"."{name}"')  # an invalid leftover
            conn.execute(f'CREATE INDEX CONCURRENTLY "{name}" ON "{self.schema}".vectors USING hnsw '
                         f"((embedding::vector({int(dims)})) vector_cosine_ops) WHERE index_id = {int(ix)}")
            # Fresh statistics, so the planner knows this agent's rows are many and picks the new index.
            conn.execute(f'ANALYZE "{self.schema}".vectors')
        finally:
            conn.close()

    # -- embedding cache (shared by every agent in the schema) -------------------------------
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: Iterable[str]) -> dict[str, list[float]]:
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        with self._conn() as c:
            rows = c.execute("SELECT hash, embedding FROM embedding_cache WHERE provider = %s AND model = %s "
                             "AND provider_key = %s AND hash = ANY(%s)", (provider, model, provider_key, wanted))
            found = {h: _floats(v) for h, v in rows if v is not None}
        return {h: v for h, v in found.items() if v}

    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None:
        now = int(time.time() * 1000)
        # Sorted by key: concurrent writers of overlapping hashes lock rows in one order (no deadlock).
        rows = [(provider, model, provider_key, h, len(v), _vec(v), now) for h, v in sorted(items.items()) if len(v)]
        if not rows:
            return
        with self._conn() as c, c.cursor() as cur:
            cur.executemany("INSERT INTO embedding_cache(provider, model, provider_key, hash, dims, embedding, "
                            "updated_at) VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (provider, model, provider_key, "
                            "hash) DO UPDATE SET embedding = EXCLUDED.embedding, dims = EXCLUDED.dims, "
                            "updated_at = EXCLUDED.updated_at", rows)

    def cache_touch(self, provider: str, model: str, provider_key: str, hashes: Iterable[str]) -> None:
        wanted = sorted(set(hashes))
        if wanted:
            with self._conn() as c:
                c.execute("UPDATE embedding_cache SET updated_at = %s WHERE provider = %s AND model = %s "
                          "AND provider_key = %s AND hash = ANY(%s)",
                          (int(time.time() * 1000), provider, model, provider_key, wanted))

    def cache_prune(self, max_entries: int | None) -> int:
        """Least recently used first, across the whole shared cache (``max_entries`` bounds it all)."""
        if not max_entries:
            return 0
        with self._conn() as c:
            row = c.execute("WITH old AS (SELECT provider, model, provider_key, hash FROM embedding_cache "
                            "ORDER BY updated_at DESC, hash DESC OFFSET %s), d AS (DELETE FROM embedding_cache e "
                            "USING old WHERE (e.provider, e.model, e.provider_key, e.hash) = "
                            "(old.provider, old.model, old.provider_key, old.hash) RETURNING 1) "
                            "SELECT count(*) FROM d", (int(max_entries),)).fetchone()
        return int(row[0])

    def cache_count(self) -> int:
        with self._conn() as c:
            return int(c.execute("SELECT count(*) FROM embedding_cache").fetchone()[0])

    # -- counts ------------------------------------------------------------------------------
    def counts_by_source(self) -> dict[str, tuple[int, int]]:
        scope, args = self._scope()
        with self._conn() as c:
            files = dict(c.execute(f"SELECT source, count(*) FROM files WHERE index_id = {scope} GROUP BY source",
                                   args).fetchall())
            chunks = dict(c.execute(f"SELECT source, count(*) FROM chunks WHERE index_id = {scope} GROUP BY source",
                                    args).fetchall())
        return {s: (int(files.get(s, 0)), int(chunks.get(s, 0))) for s in set(files) | set(chunks)}

    def chunk_count(self) -> int:
        scope, args = self._scope()
        with self._conn() as c:
            return int(c.execute(f"SELECT count(*) FROM chunks WHERE index_id = {scope}", args).fetchone()[0])

    def vector_count(self) -> int:
        scope, args = self._scope()
        with self._conn() as c:
            return int(c.execute(f"SELECT count(*) FROM vectors WHERE index_id = {scope}", args).fetchone()[0])

    def vec_dims(self) -> int | None:
        scope, args = self._scope()
        with self._conn() as c:
            row = c.execute(f"SELECT max(dims) FROM vectors WHERE index_id = {scope}", args).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    # -- full rebuild ------------------------------------------------------------------------
    @contextmanager
    def rebuild(self) -> Iterator[PostgresStore]:
        """A new ``building`` generation beside the live one, published in one transaction."""
        with self._conn() as c:
            new_id = int(c.execute("INSERT INTO indexes(agent, state, ts_config, built_by) VALUES "
                                   "(%s, 'building', %s, %s) RETURNING id",
                                   (self.agent, self.ts_config, self.location)).fetchone()[0])
        old = None
        fresh = PostgresStore(self.dsn, self.agent, schema=self.schema, text_search_config=self.ts_config,
                              hnsw_min_vectors=self.hnsw_min_vectors, ranking=self.ranking, _db=self.db,
                              _index_id=new_id)
        try:
            yield fresh
            fresh.optimize()
            with self._conn() as c, c.transaction():
                old = c.execute("SELECT id FROM indexes WHERE agent = %s AND state = 'live' FOR UPDATE",
                                (self.agent,)).fetchone()
                c.execute("UPDATE indexes SET state = 'retired' WHERE agent = %s AND state = 'live'", (self.agent,))
                c.execute("UPDATE indexes SET state = 'live' WHERE id = %s", (new_id,))
        except BaseException:
            self._drop_generation(new_id)
            raise
        if old is not None:
            self._drop_generation(int(old[0]))

    def _drop_generation(self, ix: int) -> None:
        """Delete one generation's rows and its HNSW index (best effort: cleanup retries)."""
        try:
            conn = self.db.dedicated("memdir cleanup")
            try:
                conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{self.schema}"."{self._hnsw_name(ix)}"')
                with conn.transaction():
                    for table in ("vectors", "chunks", "files"):
                        conn.execute(f"DELETE FROM {table} WHERE index_id = %s", (ix,))
                    conn.execute("DELETE FROM indexes WHERE id = %s AND state <> 'live'", (ix,))
            finally:
                conn.close()
        except Exception:
            pass

    def cleanup_leftovers(self) -> None:
        """Drop generations a crashed rebuild (or an interrupted cleanup) left behind.

        Called under the writer lock, so no other rebuild of this agent is running: every
        generation that is not live is garbage.  Their embeddings are already in the shared cache.
        """
        with self._conn() as c:
            ids = [int(r[0]) for r in c.execute("SELECT id FROM indexes WHERE agent = %s AND state <> 'live'",
                                                (self.agent,))]
        for ix in ids:
            self._drop_generation(ix)

    # -- export (migrate between backends) ---------------------------------------------------
    def export_files(self) -> Iterator[tuple[str, str, str, int, int, list[ChunkRow]]]:
        """Every file row with its chunks and vectors, for copying an index to another store."""
        scope, args = self._scope()
        with self._conn() as c:
            files = c.execute(f"SELECT path, source, hash, mtime, size FROM files WHERE index_id = {scope} "
                              "ORDER BY source, path", args).fetchall()
            ix = self._index_id(c, create=False)
        for path, source, fhash, mtime, size in files:
            with self._conn() as c:
                rows = c.execute(
                    "SELECT c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.model, c.text, v.embedding, "
                    "c.ts FROM chunks c LEFT JOIN vectors v ON v.index_id = c.index_id AND v.chunk_id = c.id "
                    "AND v.seq = 0 WHERE c.index_id = %s AND c.path = %s AND c.source = %s ORDER BY c.start_line, c.id",
                    (ix, path, source)).fetchall()
            chunks = [ChunkRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                               None if r[8] is None else _floats(r[8]), r[9])
                      for r in rows]
            yield path, source, fhash, int(mtime), int(size), chunks

    def export_cache(self) -> Iterator[tuple[str, str, str, str, list[float]]]:
        """Cache entries, least recently used first (so a copy keeps the LRU order)."""
        with self._conn() as c:
            rows = c.execute("SELECT provider, model, provider_key, hash, embedding FROM embedding_cache "
                             "ORDER BY updated_at, hash").fetchall()
        for p, m, k, h, v in rows:
            yield p, m, k, h, _floats(v)


@contextmanager
def _same(conn: Any) -> Iterator[Any]:
    yield conn
