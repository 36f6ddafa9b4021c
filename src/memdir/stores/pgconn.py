"""PostgreSQL connections for :mod:`memdir.stores.postgres`: the pool and the writer lock.

* **Connections** come from one ``psycopg_pool.ConnectionPool`` per (DSN, schema) and process,
  shared by every store that uses it and closed with the last of them.  Each connection gets
  ``search_path = <schema>, <pgvector's schema>, public`` and pgvector's binary type adapters.
  Opening the pool brings the schema up to date first (:mod:`memdir.stores.pgschema`).
* **The writer lock** is a session-level ``pg_try_advisory_lock`` on a hash of (schema, agent),
  held on a connection of its own for a whole sync: it works across hosts (``flock`` does not),
  and the server drops it when the holder's connection dies, so there are no stale locks.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from memdir.stores.pgschema import lock_key, migrate, set_search_path

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

    def held_here(self) -> bool:
        """Whether a thread of this process holds the lock (or is taking it)."""
        return self._thread_lock.locked()

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
