"""PostgreSQL plumbing for :mod:`memdir.stores.postgres`: connections, the schema and its
migrations, and the writer lock.

* **Connections** come from one ``psycopg_pool.ConnectionPool`` per (DSN, schema) and process,
  shared by every store that uses it and closed with the last of them.  Each connection gets
  ``search_path = <schema>, <pgvector's schema>, public`` and pgvector's binary type adapters.
* **The schema** is versioned: ``schema_version`` lists the migrations applied; opening a store
  applies the missing ones in order, in one transaction, under a transaction-level advisory lock
  (two hosts starting at once never race), and refuses a database newer than this memdir.
* **The writer lock** is a session-level ``pg_try_advisory_lock`` on a hash of (schema, agent),
  held on a connection of its own for a whole sync: it works across hosts (``flock`` does not),
  and the server drops it when the holder's connection dies, so there are no stale locks.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

#: pgvector 0.5.0 introduced HNSW indexes; older versions cannot serve memdir.
MIN_PGVECTOR = (0, 5, 0)
EXTRA_HINT = "PostgreSQL support needs the postgres extra: pip install 'memdir[postgres]'"


def require_psycopg() -> Any:
    """Import psycopg, or say which extra to install."""
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
        from pgvector.psycopg.vector import register_vector_info  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{EXTRA_HINT} ({exc.name or exc} is missing)") from None
    return psycopg


def resolve_dsn(configured: str | None) -> str:
    """The configured DSN, else ``$MEMDIR_DATABASE_URL``, else ``""`` (libpq's ``PG*`` variables)."""
    return (configured or os.environ.get("MEMDIR_DATABASE_URL") or "").strip()


def redact_dsn(dsn: str, schema: str) -> str:
    """``postgresql://user@host:port/db#schema`` with no password, for messages and ``status``."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return f"postgresql://?#{schema}"
    env = os.environ
    user = parts.get("user") or env.get("PGUSER") or ""
    host = str(parts.get("host") or env.get("PGHOST") or "localhost")
    port = parts.get("port") or env.get("PGPORT") or ""
    db = parts.get("dbname") or env.get("PGDATABASE") or user
    where = f"{host}:{port}" if port and not host.startswith("/") else host
    return f"postgresql://{user + '@' if user else ''}{where}/{db}#{schema}"


def version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


# -- migrations -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Any, dict[str, Any]], None]


def _v1_tables(conn: Any, ctx: dict[str, Any]) -> None:
    """The shared tables, keyed by index generation (``indexes.id``), see stores/postgres.py."""
    conn.execute(
        """
        CREATE TABLE indexes(
            id bigserial PRIMARY KEY,
            agent text NOT NULL,
            state text NOT NULL CHECK (state IN ('building', 'live', 'retired')),
            ts_config text NOT NULL,
            meta jsonb,
            n_docs bigint NOT NULL DEFAULT 0,
            total_len bigint NOT NULL DEFAULT 0,
            created_at timestamptz NOT NULL DEFAULT now(),
            built_by text);
        CREATE UNIQUE INDEX indexes_one_live ON indexes(agent) WHERE state = 'live';
        CREATE INDEX indexes_agent ON indexes(agent);
        CREATE TABLE files(
            index_id bigint NOT NULL, path text NOT NULL, source text NOT NULL, hash text NOT NULL,
            mtime bigint NOT NULL, size bigint NOT NULL, PRIMARY KEY(index_id, path, source));
        CREATE TABLE chunks(
            index_id bigint NOT NULL, id text NOT NULL, path text NOT NULL, source text NOT NULL,
            start_line int NOT NULL, end_line int NOT NULL, hash text NOT NULL, model text NOT NULL,
            text text NOT NULL, tsv tsvector NOT NULL, doc_len int NOT NULL, embedded boolean NOT NULL,
            updated_at bigint NOT NULL, ts bigint, PRIMARY KEY(index_id, id));
        CREATE INDEX chunks_file ON chunks(index_id, path, source);
        CREATE INDEX chunks_unembedded ON chunks(index_id) WHERE NOT embedded;
        CREATE TABLE vectors(
            index_id bigint NOT NULL, chunk_id text NOT NULL, seq smallint NOT NULL DEFAULT 0,
            dims int NOT NULL, embedding vector NOT NULL, PRIMARY KEY(index_id, chunk_id, seq));
        ALTER TABLE vectors ALTER COLUMN embedding SET STORAGE PLAIN;
        CREATE TABLE embedding_cache(
            provider text NOT NULL, model text NOT NULL, provider_key text NOT NULL, hash text NOT NULL,
            dims int NOT NULL, embedding vector NOT NULL, updated_at bigint NOT NULL,
            PRIMARY KEY(provider, model, provider_key, hash));
        ALTER TABLE embedding_cache ALTER COLUMN embedding SET STORAGE PLAIN;
        CREATE INDEX embedding_cache_lru ON embedding_cache(updated_at);
        """
    )
    # With btree_gin the keyword index is keyed by (index generation, lexeme): a query for one agent
    # never walks another agent's postings.  Without it (not every server has the contrib module),
    # one GIN over the lexemes, filtered by generation afterwards.
    if ctx.get("btree_gin"):
        conn.execute("CREATE INDEX chunks_tsv ON chunks USING gin(index_id, tsv)")
    else:
        conn.execute("CREATE INDEX chunks_tsv ON chunks USING gin(tsv)")


def _v2_stems_dates(conn: Any, ctx: dict[str, Any]) -> None:
    """Exact and stemmed keyword columns (as SQLite's two FTS5 columns), per-chunk dates, a write version.

    ``tsv`` now holds unstemmed tokens; rows written before keep their old vector until the
    identity change that came with this schema (index schema 2) rebuilds them.
    """
    conn.execute(
        """
        ALTER TABLE chunks ADD COLUMN tsv_stem tsvector, ADD COLUMN date_start text, ADD COLUMN date_end text;
        ALTER TABLE indexes ADD COLUMN version bigint NOT NULL DEFAULT 0;
        -- keep a chunk's row (text and both tsvectors) inline and uncompressed up to a page: phrase matches
        -- are rechecked and the best rows ranked on their tsvectors, and de-TOASTing cost more than either
        -- (measured: moving them out of line made a 10k-chunk keyword search 4x slower)
        ALTER TABLE chunks SET (toast_tuple_target = 8160);
        CREATE INDEX chunks_dates ON chunks(index_id, date_start, date_end);
        """
    )
    key = "index_id, tsv_stem" if ctx.get("btree_gin") else "tsv_stem"
    conn.execute(f"CREATE INDEX chunks_tsv_stem ON chunks USING gin({key})")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "shared tables keyed by index generation; tsvector GIN; pgvector vectors; shared cache",
              _v1_tables),
    Migration(2, "exact + stemmed tsvector columns, per-chunk dates, generation write version", _v2_stems_dates),
)
LATEST = MIGRATIONS[-1].version


def lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key, the same on every host."""
    digest = hashlib.sha256("\0".join(("memdir", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _ensure_extension(conn: Any) -> tuple[str, str]:
    """pgvector's version and schema, creating the extension when this role may."""
    row = conn.execute("SELECT e.extversion, n.nspname FROM pg_extension e JOIN pg_namespace n "
                       "ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
    if row is None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except Exception as exc:
            raise RuntimeError(
                "the pgvector extension is not installed in this database and this role cannot install it "
                f"({str(exc).strip()}); ask an administrator to run: CREATE EXTENSION vector; "
                f"(pgvector >= {'.'.join(map(str, MIN_PGVECTOR))})") from None
        row = conn.execute("SELECT e.extversion, n.nspname FROM pg_extension e JOIN pg_namespace n "
                           "ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
    version, ext_schema = str(row[0]), str(row[1])
    if version_tuple(version) < MIN_PGVECTOR:
        raise RuntimeError(f"pgvector {version} is too old: memdir needs >= {'.'.join(map(str, MIN_PGVECTOR))} "
                           "(HNSW indexes); run ALTER EXTENSION vector UPDATE")
    return version, ext_schema


def _try_btree_gin(conn: Any) -> bool:
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'").fetchone():
        return True
    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'btree_gin'").fetchone():
        return False
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
        return True
    except Exception:
        return False


def migrate(conn: Any, schema: str, upto: int | None = None) -> dict[str, Any]:
    """Bring ``schema`` to the latest version (or ``upto``); returns server facts for ``describe``."""
    from psycopg import sql

    target = LATEST if upto is None else upto
    pgvector, ext_schema = _ensure_extension(conn)
    btree_gin = _try_btree_gin(conn)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("schema", schema),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        set_search_path(conn, schema, ext_schema)
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version(version int PRIMARY KEY, description text NOT NULL, "
                     "applied_at timestamptz NOT NULL DEFAULT now())")
        current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
        if current > LATEST:
            raise RuntimeError(f"database schema {schema!r} is at version {current}, newer than this memdir "
                               f"understands ({LATEST}): upgrade memdir")
        ctx = {"btree_gin": btree_gin}
        for m in MIGRATIONS:
            if current < m.version <= target:
                m.apply(conn, ctx)
                conn.execute("INSERT INTO schema_version(version, description) VALUES (%s, %s)",
                             (m.version, m.description))
                current = m.version
    server = conn.execute("SHOW server_version").fetchone()[0]
    return {"server": f"PostgreSQL {server}", "pgvector": pgvector, "vector_schema": ext_schema,
            "btree_gin": btree_gin, "schema_version": current}


def set_search_path(conn: Any, schema: str, ext_schema: str) -> None:
    path = ", ".join(dict.fromkeys(f'"{s}"' for s in (schema, ext_schema, "public")))
    conn.execute("SELECT set_config('search_path', %s, false)", (path,))


# -- pools ------------------------------------------------------------------------------------

class Database:
    """A migrated schema and a connection pool onto it, shared per process and refcounted."""

    _registry: ClassVar[dict[tuple[str, str], Database]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, dsn: str, schema: str, pool_size: int):
        psycopg = require_psycopg()
        from pgvector.psycopg.vector import register_vector_info
        from psycopg.types import TypeInfo
        from psycopg_pool import ConnectionPool

        self.dsn, self.schema = dsn, schema
        self.refs = 0
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=15) as conn:
                self.facts = migrate(conn, schema)
                info = TypeInfo.fetch(conn, f'"{self.facts["vector_schema"]}".vector')
        except psycopg.OperationalError as exc:
            raise ConnectionError(f"cannot connect to PostgreSQL at {redact_dsn(dsn, schema)}: "
                                  f"{str(exc).strip()}") from None
        ext_schema = self.facts["vector_schema"]

        def configure(conn: Any) -> None:
            register_vector_info(conn, info)
            set_search_path(conn, schema, ext_schema)

        self.pool = ConnectionPool(dsn, min_size=1, max_size=pool_size, kwargs={"autocommit": True},
                                   configure=configure, open=True, name=f"memdir-{schema}")
        self.pool.wait(timeout=30)
        self._register = configure

    @classmethod
    def acquire(cls, dsn: str, schema: str, pool_size: int) -> Database:
        with cls._guard:
            db = cls._registry.get((dsn, schema))
            if db is None:
                db = cls(dsn, schema, pool_size)
                cls._registry[(dsn, schema)] = db
            db.refs += 1
            return db

    def release(self) -> None:
        with self._guard:
            self.refs -= 1
            if self.refs > 0:
                return
            self._registry.pop((self.dsn, self.schema), None)
        self.pool.close()

    @contextmanager
    def connection(self) -> Iterator[Any]:
        with self.pool.connection() as conn:
            yield conn

    def dedicated(self, application_name: str) -> Any:
        """A connection outside the pool (the writer lock, concurrent index builds)."""
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, application_name=application_name[:63],
                               keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3)
        self._register(conn)
        return conn


# -- the writer lock --------------------------------------------------------------------------

_THREAD_LOCKS: dict[int, threading.Lock] = {}
_THREAD_GUARD = threading.Lock()


class AdvisoryWriterLock:
    """One writer per agent index across hosts: a session-level advisory lock on its own connection."""

    def __init__(self, db: Database, agent: str):
        self.db = db
        self.key = lock_key("writer", db.schema, agent)
        self._conn: Any = None
        with _THREAD_GUARD:  # advisory locks are re-entrant per session: threads exclude each other here
            self._thread_lock = _THREAD_LOCKS.setdefault(self.key, threading.Lock())

    def acquire(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._thread_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        try:
            conn = self.db.dedicated(f"memdir writer {os.getpid()}@{socket.gethostname()}")
        except BaseException:
            self._thread_lock.release()
            raise
        while True:
            if conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0]:
                self._conn = conn
                return True
            if deadline is not None and time.monotonic() >= deadline:
                conn.close()
                self._thread_lock.release()
                return False
            time.sleep(0.05)

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except Exception:
            pass  # closing the connection releases it anyway
        finally:
            conn.close()
            self._thread_lock.release()

    def holder(self) -> dict[str, Any] | None:
        """The holding client's pid and host (from its application name) and since when."""
        with self.db.connection() as conn:
            row = conn.execute(
                "SELECT a.application_name, extract(epoch FROM a.backend_start), a.pid FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.classid = %s AND l.objid = %s AND l.objsubid = 1",
                ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF),
            ).fetchone()
        if row is None:
            return None
        name, since, backend = row
        out: dict[str, Any] = {"since": float(since) if since is not None else None, "backendPid": backend}
        if name and name.startswith("memdir writer "):
            pid, _, host = name[len("memdir writer "):].partition("@")
            out.update({"pid": int(pid) if pid.isdigit() else pid, "host": host})
        return out

    def __enter__(self) -> AdvisoryWriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
