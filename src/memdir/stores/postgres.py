"""The PostgreSQL + pgvector store: many agents on many hosts sharing one database (SPEC §10).

:class:`PostgresStore` implements :class:`memdir.stores.base.Store` (see there for the contract)
and passes the same conformance suite as SQLite.  This module holds its lifecycle, generations
and writes; search is :mod:`~memdir.stores.pgsearch` (keywords: :mod:`~memdir.stores.pgkeyword`),
the shared embedding cache and export :mod:`~memdir.stores.pgcache`, checking and healing
:mod:`~memdir.stores.pghealth`, connections and the writer lock :mod:`~memdir.stores.pgconn`,
the schema and its migrations :mod:`~memdir.stores.pgschema`.

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
keyword GIN indexes are keyed by (generation, lexeme) where ``btree_gin`` exists, and vectors are
searched exactly over the agent's own rows until it is large enough for an HNSW index of its own.
Keywords are BM25 with FTS5's formula over an exact and a stemmed ``tsvector`` column.  Measured
on LoCoMo dev (760 scored questions): recall@6 0.844 keyword / 0.869 hybrid, SQLite 0.843 /
0.867; ``ts_rank_cd`` instead of BM25 gives 0.489 keyword.

**Read replicas**: a store opened on a hot standby (or with a role that may not write) is
read-only (``readonly_reason`` says why): searches answer from the replica, writes are refused.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from memdir.errors import IndexDamaged, StoreError
from memdir.stores import pgkeyword
from memdir.stores.base import ChunkRow, FileRows
from memdir.stores.pgcache import PgCache
from memdir.stores.pgconn import AdvisoryWriterLock, Database
from memdir.stores.pghealth import PgHealth
from memdir.stores.pgkeyword import doc_length, memdir_stems, pg_text, stem_column
from memdir.stores.pgsearch import PgSearch, same, vec

_LIVE = "(SELECT id FROM indexes WHERE agent = %(agent)s AND state = 'live')"
#: The meta key recording :data:`memdir.stores.pgkeyword.TEXT_FORM` (kept out of what read_meta returns).
_TEXT_FORM_KEY = "pgTextForm"


#: JSON values (meta, state) hold paths, and a path that is not UTF-8 comes with lone surrogates
#: (``surrogateescape``), which jsonb refuses, as it refuses NUL: a workspace with such a name could
#: not be indexed.  Each is kept as a code point of Supplementary Private Use Area-A and mapped back
#: on reading, so the workspace read back is the one written (the owner check compares them).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_STAND_INS = re.compile("[\U000F0000-\U000F0800]")


def _stand_in(m: re.Match[str]) -> str:
    ch = m.group()
    return chr(0xF0800) if ch == "\x00" else chr(0xF0000 + ord(ch) - 0xD800)


def _restore(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return "\x00" if cp == 0xF0800 else chr(0xD800 + cp - 0xF0000)


def json_in(value: Any) -> Any:
    """``value`` as jsonb can hold it (see ``_UNSTORABLE``)."""
    if isinstance(value, str):
        return _UNSTORABLE.sub(_stand_in, value)
    if isinstance(value, dict):
        return {json_in(k): json_in(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_in(v) for v in value]
    return value


def json_out(value: Any) -> Any:
    """The value :func:`json_in` was given."""
    if isinstance(value, str):
        return _STAND_INS.sub(_restore, value)
    if isinstance(value, dict):
        return {json_out(k): json_out(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_out(v) for v in value]
    return value


def stored_text(text: str) -> str:
    """A chunk's text as a PostgreSQL ``text`` value, which cannot hold NUL: U+FFFD in its place
    (a note with one NUL byte otherwise failed the whole sync; SQLite keeps the byte)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


@contextmanager
def _encodable(db: Database, path: str) -> Iterator[None]:
    """Say what to do when the database's encoding cannot hold a character of a note.

    A database created with another encoding than UTF-8 (LATIN1, WIN1252) refused the first note
    with an emoji as "character with byte sequence … has no equivalent in encoding", CONTEXT:
    "unnamed portal parameter $9", naming neither the note nor the cause, and nothing was indexed.
    """
    try:
        yield
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != "22P05":  # untranslatable_character
            raise
        why = (str(exc).strip().splitlines() or ["untranslatable character"])[0]
        raise StoreError(f"PostgreSQL at {db.where} cannot store {path}: {why}; memdir needs a database created "
                         "with ENCODING 'UTF8' (CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0)") from None


class PostgresStore(PgSearch, PgCache, PgHealth):
    """One agent's index in a shared PostgreSQL schema; thread-safe (a pooled connection per call)."""

    def __init__(self, dsn: str, agent: str, *, schema: str = "memdir", pool_size: int = 4,
                 text_search_config: str = "english", hnsw_min_vectors: int = 20000,
                 ranking: str = "bm25", readonly: bool = False, vector_enabled: bool = True,
                 _db: Database | None = None, _index_id: int | None = None):
        self.dsn, self.agent, self.schema = dsn, agent, schema
        #: ``store.vector.enabled``: false turns vector search off, as on SQLite (vectors are still stored).
        self.vector_enabled = vector_enabled
        self.ts_config = text_search_config
        self.hnsw_min_vectors = hnsw_min_vectors
        self.ranking = ranking
        self.db = _db or Database.acquire(dsn, schema, pool_size)
        self._owns_db = _db is None
        self.pinned = _index_id  # a generation being built (rebuild); None = whatever is live
        self.location = self.db.where + f"/{agent}"
        server_ro = self.db.facts.get("readonly")
        #: Nothing may be written: asked for, or the server is a replica, or the role may not write.
        self.readonly = bool(readonly or server_ro)
        self.readonly_reason: str | None = server_ro
        #: What :meth:`recover` did last (``{"problem", "droppedGeneration", …}``).
        self.recovery: dict[str, Any] | None = None
        self._dfs = pgkeyword.DfCache()
        self._local = threading.local()
        self._closed = False
        self.fts_error: str | None = None
        self._built_ts_config: str | None = None  # of the generation read_meta last read
        self._built_text_form: int | None = None  # its pgkeyword.TEXT_FORM (None: no meta read)
        if self._owns_db:
            try:
                self._check_ts_config()
            except BaseException:
                self.close()
                raise

    @classmethod
    def open(cls, dsn: str, agent: str, *, notice: Any = None, readonly: bool = False,
             **kwargs: Any) -> PostgresStore:
        """Open the agent's index, healing it first if a cheap check finds it damaged."""
        store = cls(dsn, agent, readonly=readonly, **kwargs)
        if not store.readonly:
            try:
                problem = store.check()
                if problem is not None:
                    store.recover(problem, notice=notice)
            except BaseException:
                store.close()
                raise
        return store

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

    def _refuse_writes(self) -> None:
        if self.readonly:
            raise StoreError(f"the index {self.location} is read-only ({self.readonly_reason or 'opened read-only'}):"
                             " searches work, writes need the primary server and a role that may write")

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """The enclosing :meth:`transaction`'s connection, or a pooled one in a transaction of its own."""
        self._refuse_writes()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.db.connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        self._refuse_writes()
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
        vector: dict[str, Any] = {
            "path": "hnsw" if has_hnsw else "exact", "version": f["pgvector"],
            "why": (f"pgvector HNSW index (cosine) over this agent's {n} vectors" if has_hnsw else
                    f"exact cosine over this agent's {n} vectors (HNSW from {self.hnsw_min_vectors})")}
        if not self.vector_enabled:
            vector = {"path": "disabled", "version": f["pgvector"], "why": "store.vector.enabled is false"}
        elif not has_hnsw and n >= max(1, self.hnsw_min_vectors) and not self._may_index():
            vector["why"] += f"; this role may not build it (only the owner of {self.schema}.vectors may)"
        return {"backend": "postgres", "location": self.location, "server": f["server"], "pgvector": f["pgvector"],
                "schema": self.schema, "schemaVersion": f["schema_version"], "agent": self.agent,
                "pool": {"max": self.db.pool.max_size},
                "fts": {"available": self.fts_available, "error": self.fts_error, "config": self.ts_config,
                        # the default's stems are memdir's own, as SQLite's (pgkeyword.memdir_stems)
                        "tokenizer": (f"tsvector, stems as SQLite's, {self.ranking}" if memdir_stems(self.ts_config)
                                      else f"tsvector {self.ts_config}, {self.ranking}"),
                        "ranking": self.ranking, "gin": "btree_gin (index_id, tsv)" if f["btree_gin"] else "tsv"},
                "vector": vector}

    # -- generations -------------------------------------------------------------------------
    def _index_id(self, conn: Any = None, *, create: bool = True) -> int | None:
        """The generation this store reads and writes: pinned, else the agent's live one."""
        if self.pinned is not None:
            return self.pinned
        create = create and not self.readonly
        cached = getattr(self._local, "index_id", None)
        if cached is not None and conn is not None and conn is getattr(self._local, "conn", None):
            return int(cached)
        with self._conn() if conn is None else same(conn) as c:
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
            row = c.execute(f"SELECT meta, ts_config FROM indexes WHERE id = {scope}", args).fetchone()
        self._built_ts_config = row[1] if row else None
        self._built_text_form = None
        if not row or row[0] is None:
            return None
        if not isinstance(row[0], dict):
            raise IndexDamaged(f"the index metadata is a JSON {type(row[0]).__name__}, not an object ({self.location})")
        meta = dict(json_out(row[0]))
        form = meta.pop(_TEXT_FORM_KEY, 1)  # (an index from before the key: the first form)
        self._built_text_form = form if isinstance(form, int) else 1
        return meta

    def newer_format(self) -> str | None:
        """The keyword text form of the generation :meth:`read_meta` last read when a newer memdir
        wrote it, or ``None``: this one rebuilt it back ("keyword text form changed (4 → 3)"), the
        newer one's next sync rebuilt it again, and so on while hosts of both versions shared it."""
        form = self._built_text_form
        if form is not None and form > pgkeyword.TEXT_FORM:
            return f"keyword text form {form}; this memdir's is {pgkeyword.TEXT_FORM}"
        return None

    def older_format(self) -> str | None:
        """The keyword text form of the generation :meth:`read_meta` last read when an older memdir
        wrote it ("keyword text form changed (2 → 3)"), or ``None``: what no setting explains (a
        search said "the settings changed" while an older host rebuilt the index back)."""
        form = self._built_text_form
        if form is not None and form < pgkeyword.TEXT_FORM:
            return f"keyword text form changed ({form} → {pgkeyword.TEXT_FORM})"
        return None

    def rebuild_reason(self) -> str | None:
        """Why the generation :meth:`read_meta` last read must be rebuilt for this store's settings.

        Its keyword columns were stemmed with the text search configuration it records: after
        ``textSearchConfig`` changed, queries stemmed with the new one missed every word whose stems
        differ, and nothing rebuilt the index (the index identity has no such key).
        """
        if self.fts_error:
            return None
        form = self._built_text_form
        if form is not None and form != pgkeyword.TEXT_FORM:
            # its keyword columns hold words as another version spelt them: the query's words,
            # spelt as now, would miss them (accents: "café" was kept, is now "cafe")
            return f"keyword text form changed ({form} → {pgkeyword.TEXT_FORM}: words spelt and stemmed as on SQLite)"
        built = self._built_ts_config
        if built is None or built == self.ts_config:
            return None
        return f"textSearchConfig changed ({built!r} → {self.ts_config!r})"

    def write_meta(self, meta: dict[str, Any]) -> None:
        from psycopg.types.json import Jsonb

        with self._write() as c:
            # the spelling of the keyword columns this generation's rows were written with
            stored = {**meta, _TEXT_FORM_KEY: pgkeyword.TEXT_FORM}
            c.execute("UPDATE indexes SET meta = %s WHERE id = %s", (Jsonb(json_in(stored)), self._index_id(c)))

    def get_state(self, key: str) -> Any:
        scope, args = self._scope()
        with self._conn() as c:
            row = c.execute(f"SELECT value FROM index_state WHERE index_id = {scope} AND key = %(key)s",
                            {**args, "key": key}).fetchone()
        return json_out(row[0]) if row else None

    def set_state(self, key: str, value: Any) -> None:
        """Kept per generation, as meta is: a rebuild starts with none and publishes its own."""
        from psycopg.types.json import Jsonb

        with self._write() as c:
            ix = self._index_id(c)
            if value is None:
                c.execute("DELETE FROM index_state WHERE index_id = %s AND key = %s", (ix, key))
            else:
                c.execute("INSERT INTO index_state(index_id, key, value) VALUES (%s, %s, %s) ON CONFLICT "
                          "(index_id, key) DO UPDATE SET value = EXCLUDED.value", (ix, key, Jsonb(json_in(value))))

    def change_token(self) -> Any:
        """The live generation and its write version: changes with every write and every rebuild."""
        scope, args = self._scope()
        with self._conn() as c:
            row = c.execute(f"SELECT id, version FROM indexes WHERE id = {scope}", args).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    # -- files and chunks --------------------------------------------------------------------
    def file_rows(self, source: str | None = None, paths: Sequence[str] | None = None) -> FileRows:
        scope, args = self._scope()
        sql = f"SELECT path, source, hash, mtime, size FROM files WHERE index_id = {scope}"
        if source:
            sql += " AND source = %(source)s"
            args = {**args, "source": source}
        if paths is not None:
            sql += " AND path = ANY(%(paths)s)"
            args = {**args, "paths": list(paths)}
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
                rows.append((ix, ch.id, ch.path, ch.source, ch.start_line, ch.end_line, ch.hash, ch.model,
                             stored_text(ch.text), pg_text(ch.text), *stem_column(ch.text, self.ts_config),
                             doc_length(ch.text), has_vec, now, ch.ts, ch.date_start, ch.date_end))
                if has_vec:
                    windows = max(1, int(ch.windows))
                    flat = vec(ch.embedding)  # type: ignore[arg-type]
                    dims = flat.size // windows
                    vectors.extend((ix, ch.id, w, dims, flat[w * dims:(w + 1) * dims]) for w in range(windows))
            with c.cursor() as cur, _encodable(self.db, path):
                cur.executemany(
                    "INSERT INTO chunks(index_id, id, path, source, start_line, end_line, hash, model, text, tsv, "
                    "tsv_stem, doc_len, embedded, updated_at, ts, date_start, date_end) VALUES (%s,%s,%s,%s,%s,%s,"
                    "%s,%s,%s,to_tsvector('simple', %s),to_tsvector(%s::regconfig, %s),%s,%s,%s,%s,%s,%s) "
                    "ON CONFLICT (index_id, id) DO UPDATE SET path = EXCLUDED.path, source = EXCLUDED.source, "
                    "start_line = EXCLUDED.start_line, end_line = EXCLUDED.end_line, hash = EXCLUDED.hash, "
                    "model = EXCLUDED.model, text = EXCLUDED.text, tsv = EXCLUDED.tsv, tsv_stem = EXCLUDED.tsv_stem, "
                    "doc_len = EXCLUDED.doc_len, embedded = EXCLUDED.embedded, updated_at = EXCLUDED.updated_at, "
                    "ts = EXCLUDED.ts, date_start = EXCLUDED.date_start, date_end = EXCLUDED.date_end", rows)
                if vectors:
                    cur.executemany("INSERT INTO vectors(index_id, chunk_id, seq, dims, embedding) "
                                    "VALUES (%s,%s,%s,%s,%s) ON CONFLICT (index_id, chunk_id, seq) DO UPDATE SET "
                                    "dims = EXCLUDED.dims, embedding = EXCLUDED.embedding", vectors)
            c.execute("INSERT INTO files(index_id, path, source, hash, mtime, size) VALUES (%s,%s,%s,%s,%s,%s) "
                      "ON CONFLICT (index_id, path, source) DO UPDATE SET hash = EXCLUDED.hash, "
                      "mtime = EXCLUDED.mtime, size = EXCLUDED.size", (ix, path, source, file_hash, mtime_ns, size))
            added = c.execute("SELECT count(*), coalesce(sum(doc_len), 0) FROM chunks WHERE index_id = %s "
                              "AND path = %s AND source = %s", (ix, path, source)).fetchone()
            self._adjust_stats(c, ix, int(added[0]) - docs, int(added[1]) - length, int(added[0]) + docs)

    def _delete_chunks(self, c: Any, ix: int, path: str, source: str) -> tuple[int, int]:
        c.execute("DELETE FROM vectors v USING chunks c WHERE v.index_id = %s AND c.index_id = %s "
                  "AND c.id = v.chunk_id AND c.path = %s AND c.source = %s", (ix, ix, path, source))
        row = c.execute("WITH d AS (DELETE FROM chunks WHERE index_id = %s AND path = %s AND source = %s "
                        "RETURNING doc_len) SELECT count(*), coalesce(sum(doc_len), 0) FROM d",
                        (ix, path, source)).fetchone()
        return int(row[0]), int(row[1])

    @staticmethod
    def _adjust_stats(c: Any, ix: int, docs: int, length: int, churn: int) -> None:
        """BM25's N and total length, the version that invalidates cached document frequencies, and
        the chunks written or deleted since frequent lexemes were counted (``pgkeyword.frequent_sql``)."""
        c.execute("UPDATE indexes SET n_docs = n_docs + %s, total_len = total_len + %s, version = version + 1, "
                  "churn = churn + %s WHERE id = %s", (docs, length, churn, ix))

    def delete_file(self, path: str, source: str) -> None:
        with self._write() as c:
            ix = self._index_id(c)
            docs, length = self._delete_chunks(c, ix, path, source)
            c.execute("DELETE FROM files WHERE index_id = %s AND path = %s AND source = %s", (ix, path, source))
            self._adjust_stats(c, ix, -docs, -length, docs)

    def paths_missing_vectors(self) -> set[tuple[str, str]]:
        scope, args = self._scope()
        with self._conn() as c:
            rows = c.execute(f"SELECT DISTINCT path, source FROM chunks WHERE index_id = {scope} AND NOT embedded",
                             args).fetchall()
        return {(p, s) for p, s in rows}

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
        with self._write() as c:
            new_id = int(c.execute("INSERT INTO indexes(agent, state, ts_config, built_by) VALUES "
                                   "(%s, 'building', %s, %s) RETURNING id",
                                   (self.agent, self.ts_config, self.location)).fetchone()[0])
        old = None
        fresh = PostgresStore(self.dsn, self.agent, schema=self.schema, text_search_config=self.ts_config,
                              hnsw_min_vectors=self.hnsw_min_vectors, ranking=self.ranking,
                              vector_enabled=self.vector_enabled, _db=self.db, _index_id=new_id)
        try:
            yield fresh
            fresh.optimize()
            with self._conn() as c, c.transaction():
                # Still ours?  A writer whose lock connection died (a server restart) may have kept going
                # while another process took the lock and cleaned this generation away: publishing it
                # would retire the live index for one with no row in ``indexes``.
                mine = c.execute("SELECT state FROM indexes WHERE id = %s FOR UPDATE", (new_id,)).fetchone()
                if mine is None or mine[0] != "building":
                    raise StoreError(f"the rebuild of {self.location} was abandoned: another process removed its "
                                     "generation (this one lost its writer lock, was the connection to the server "
                                     "dropped?); the live index is unchanged, run the sync again")
                old = c.execute("SELECT id FROM indexes WHERE agent = %s AND state = 'live' FOR UPDATE",
                                (self.agent,)).fetchone()
                c.execute("UPDATE indexes SET state = 'retired' WHERE agent = %s AND state = 'live'", (self.agent,))
                c.execute("UPDATE indexes SET state = 'live' WHERE id = %s", (new_id,))
        except BaseException:
            self._drop_generation(new_id)
            raise
        if old is not None:
            self._drop_generation(int(old[0]))
        self._analyze()

    def reading_build(self, ix: int) -> PostgresStore | None:
        """A read-only view of this agent's generation ``ix`` while it is being built, else ``None``.

        README: a search during a first build answers from what is built so far; on PostgreSQL it
        answered nothing ("results will appear when it is done") where SQLite reads the build's
        temporary file: each file's rows are committed as it is written, so they can be read."""
        with self._conn() as c:
            row = c.execute("SELECT 1 FROM indexes WHERE id = %s AND agent = %s AND state = 'building'",
                            (ix, self.agent)).fetchone()
        if row is None:
            return None
        return PostgresStore(self.dsn, self.agent, schema=self.schema, text_search_config=self.ts_config,
                             hnsw_min_vectors=self.hnsw_min_vectors, ranking=self.ranking, readonly=True,
                             vector_enabled=self.vector_enabled, _db=self.db, _index_id=ix)

    def _analyze(self) -> None:
        """Fresh planner statistics after a rebuild (best effort): until autovacuum's next look (a
        minute or more) the planner costed the new generation's searches on the old row counts."""
        try:
            conn = self.db.dedicated("memdir analyze")
            try:
                conn.execute("SET lock_timeout = '2s'")  # another agent's ANALYZE or HNSW build: skip it
                conn.execute(f'ANALYZE "{self.schema}".chunks, "{self.schema}".vectors, "{self.schema}".files')
            finally:
                conn.close()
        except Exception:
            pass

    def _drop_generation(self, ix: int) -> None:
        """Delete one generation's rows and its HNSW index (best effort: cleanup retries)."""
        try:
            conn = self.db.dedicated("memdir cleanup")
            try:
                try:
                    conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{self.schema}"."{self._hnsw_name(ix)}"')
                except Exception as exc:
                    # A role that does not own the tables may not drop an index the owner built: the rows
                    # go all the same (a generation kept for that grew the tables with every rebuild),
                    # and the partial index, matching no row any more, is left for the owner.
                    if getattr(exc, "sqlstate", None) != "42501":
                        raise
                with conn.transaction():
                    for table in ("vectors", "chunks", "files", "index_state", "frequent_lexemes"):
                        conn.execute(f"DELETE FROM {table} WHERE index_id = %s", (ix,))
                    conn.execute("DELETE FROM indexes WHERE id = %s AND state <> 'live'", (ix,))
            finally:
                conn.close()
        except Exception:
            pass

    def publish(self) -> None:
        """Nothing to do: every write transaction commits when it ends."""

    def cleanup_leftovers(self) -> None:
        """Drop generations a crashed rebuild (or an interrupted cleanup) left behind.

        Called under the writer lock, so no other rebuild of this agent is running: every
        generation that is not live is garbage.  Their embeddings are already in the shared cache.
        """
        if self.readonly:
            return
        with self._conn() as c:
            ids = [int(r[0]) for r in c.execute("SELECT id FROM indexes WHERE agent = %s AND state <> 'live'",
                                                (self.agent,))]
        for ix in ids:
            self._drop_generation(ix)

    def _forget_stats(self) -> None:
        self._dfs = pgkeyword.DfCache()
