"""PostgreSQL connections for :mod:`memdir.stores.postgres`: the pool and the writer lock.

* **Connections** come from one ``psycopg_pool.ConnectionPool`` per (DSN, schema) and process,
  shared by every store that uses it and closed with the last of them.  Each connection gets
  ``search_path = <schema>, <pgvector's schema>, public`` and pgvector's binary type adapters.
  Opening the pool brings the schema up to date first (:mod:`memdir.stores.pgschema`).
  A forked child (gunicorn ``--preload``, Celery prefork) opens pools of its own: the parent's
  sessions are neither used nor closed there.  The pool holds ``poolSize`` connections plus one
  for each further agent open in the process (a sync holds one while it embeds a batch).
* **Failures are bounded and said in one line**: connecting gives up after ``CONNECT_TIMEOUT``,
  a lock held by someone else is waited for ``LOCK_TIMEOUT`` (SQLite's busy timeout), and both,
  like a connection lost mid-call, raise :class:`DatabaseUnavailable` naming the server (never
  the password).  A pooled connection the server closed while it sat idle (a restart,
  ``pg_terminate_backend``) is noticed when it is taken and replaced: a long-lived process
  (the MCP server, a reused ``Memory``) keeps answering instead of failing once per connection.
* **A frozen server is given up on**: within a search (:func:`memdir.stores.base.bounded_answers`)
  a statement whose answer does not come in ``SEARCH_ANSWER_SECONDS`` has its connection's socket
  shut from a timer thread, which ends libpq's wait; the pool then replaces the connection.  A
  server stopped with SIGSTOP, or a proxy that stopped forwarding, still acknowledges packets, so
  keepalives never fire and ``statement_timeout`` runs on the frozen server itself: without this a
  search hung for ever.  Index builds, migrations and cleanups are not bounded (minutes is normal).
* **The writer lock** is a session-level ``pg_try_advisory_lock`` on a hash of (schema, agent),
  held on a connection of its own for a whole sync: it works across hosts (``flock`` does not),
  and the server drops it when the holder's connection dies, so there are no stale locks.
"""

from __future__ import annotations

import os
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from memdir.errors import StoreError
from memdir.lock import is_stopped, pid_here, pid_space, thread_wait
from memdir.stores.base import AnswerBound, answer_bound
from memdir.stores.pgschema import LATEST, TABLES, lock_key, migrate, schema_version, set_search_path

EXTRA_HINT = "PostgreSQL support needs the postgres extra: pip install 'memdir[postgres]'"
#: Seconds to wait for the server to accept a connection (and for a free pooled connection).
CONNECT_TIMEOUT = 15
#: Seconds a call waits for the pool to hand out or open a connection before opening one itself
#: (or, if the server cannot be reached, saying so at once), unless every pooled connection is in use.
POOL_QUICK_WAIT = 1.0
#: Seconds the pool retries a lost server (1, 2, 4 s apart) before it stops and the next call starts
#: over: with psycopg_pool's default (300 s, the gaps doubling to 128 s) a process went on failing for
#: minutes after the server was back.
RECONNECT_TIMEOUT = 10.0
#: How long a statement waits for a lock another session holds on memdir's tables (SQLite's busy timeout).
LOCK_TIMEOUT = "30s"
#: libpq keepalives: a server that vanished (host down, network cut) is noticed within about a minute.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
              # Notes are Unicode: a client encoding from the environment (PGCLIENTENCODING=LATIN1, a
              # DSN's options) made every note with a character outside it fail with UnicodeEncodeError.
              "client_encoding": "UTF8"}


class DatabaseUnavailable(StoreError):
    """The server cannot be reached, dropped the connection, or kept a lock too long; the message
    names the server (never the password) in one line."""


class PostgresExtraMissing(StoreError, ImportError):
    """``store.driver = "postgres"`` without the postgres extra: a :class:`~memdir.errors.MemdirError`
    (it was an ImportError only, past a host's ``except MemdirError``), and an ImportError as before."""


def require_psycopg() -> Any:
    """Import psycopg, or say which extra to install."""
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
        from pgvector.psycopg.vector import register_vector_info  # noqa: F401
    except ImportError as exc:
        raise PostgresExtraMissing(f"{EXTRA_HINT} ({exc.name or exc} is missing)") from None
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
    where = f"{_bracketed(host)}:{port}" if port and not host.startswith("/") else _bracketed(host)
    return f"postgresql://{user + '@' if user else ''}{where}/{db}#{schema}"


def _bracketed(host: str) -> str:
    """An IPv6 address in brackets, as in a URL: "postgresql://bob@::1:5433/db" could not be told
    from host "::1:5433"."""
    return f"[{host}]" if ":" in host and not host.startswith(("/", "[")) else host


def connected_where(info: Any, schema: str) -> str:
    """:func:`redact_dsn` for the server a connection reached: what libpq resolved (a service file,
    ``PG*`` variables, the host of a list that answered), where the DSN alone said "localhost"."""
    host = str(info.host or "localhost")
    where = host if host.startswith("/") else f"{_bracketed(host)}:{info.port}"
    user = info.user or ""
    return f"postgresql://{user + '@' if user else ''}{where}/{info.dbname}#{schema}"


def _one_line(exc: BaseException) -> str:
    """libpq's message (a line per host tried, then hints) as one line."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


def bad_dsn_message(dsn: str, exc: BaseException) -> str:
    """libpq's complaint about a DSN it cannot parse, without the DSN it quotes (it holds the password)."""
    text = _one_line(exc)
    for quoted in re.findall(r'"([^"]*)"', text):
        if len(quoted) > 20 and quoted in dsn:
            text = text.replace(f'"{quoted}"', "the DSN")
    text = re.sub(r"(://[^:/@?#\s]*:)[^@\s]*@", r"\1***@", text)
    return f"invalid PostgreSQL connection string (store.dsn / MEMDIR_DATABASE_URL): {text}"


class _Cut:
    """Shuts a waiting connection's socket if the timer fires before the wait ends (once only)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()
        self.state = "waiting"  # -> "answered" | "cut"

    def fire(self) -> None:
        with self.lock:
            if self.state != "waiting":
                return
            self.state = "cut"
            try:  # a duplicate of the descriptor: the connection's own is closed by its owner only
                sock = socket.socket(fileno=os.dup(self.fd))
            except OSError:
                return
            try:
                sock.shutdown(socket.SHUT_RDWR)  # libpq's poll wakes up and reads the end of the stream
            except OSError:
                pass
            finally:
                sock.close()

    def finish(self) -> bool:
        """Stop the timer's effect; whether it already cut the connection."""
        with self.lock:
            if self.state == "waiting":
                self.state = "answered"
            return self.state == "cut"


_WATCHED: list[Any] = []


def watched_class() -> Any:
    """psycopg's ``Connection`` whose waits for the server honour :func:`answer_bound` (made once,
    psycopg being imported only when PostgreSQL is used)."""
    if _WATCHED:
        return _WATCHED[0]
    import psycopg

    class NoAnswer(psycopg.OperationalError):
        """The server did not answer a bounded statement in time; the connection was closed."""

    class WatchedConnection(psycopg.Connection):  # type: ignore[type-arg]
        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            bound = answer_bound()
            if bound is None or bound.seconds is None:
                return super().wait(gen, *args, **kwargs)
            if bound.expired is not None:  # one statement went unanswered: do not wait on another
                self.close()
                raise NoAnswer(bound.expired)
            try:
                cut = _Cut(self.pgconn.socket)
            except psycopg.Error:
                return super().wait(gen, *args, **kwargs)  # closed: psycopg says so
            timer = threading.Timer(bound.seconds, cut.fire)
            timer.daemon = True
            timer.start()
            try:
                result = super().wait(gen, *args, **kwargs)
            except psycopg.OperationalError:
                if not cut.finish():
                    raise
                self.close()
                bound.expired = no_answer(bound)
                raise NoAnswer(bound.expired) from None
            finally:
                timer.cancel()
            if cut.finish():  # the answer came as the socket was shut: the session cannot go on
                self.close()
            return result

    WatchedConnection.NoAnswer = NoAnswer  # type: ignore[attr-defined]
    _WATCHED.append(WatchedConnection)
    return WatchedConnection


def no_answer(bound: AnswerBound) -> str:
    return (f"no answer within {bound.seconds:g} s (the server, or a proxy or VPN on the way, is frozen or "
            "stopped forwarding): memdir closed the connection, and the next call opens another")


def _dead(conn: Any) -> bool:
    """Whether an idle pooled connection was closed by the server meanwhile.

    An idle connection receives nothing, so a readable socket means the server said goodbye
    (a restart, ``pg_terminate_backend``): only then is it asked, one round trip, to be sure.
    """
    if conn.closed or conn.broken:
        return True
    try:
        if not select.select([conn.fileno()], [], [], 0)[0]:
            return False
        conn.execute("")
        return False
    except Exception:
        return True


# -- pools ------------------------------------------------------------------------------------

#: Forks this process descends from (moved in a forked child: see :attr:`Database.pool`).
_FORKS = [0]
#: Pools and writer-lock connections a forked child inherited from its parent: never used there
#: (their sockets are the parent's sessions) nor closed (closing one ends the parent's session
#: on the server), and kept for the child's life.
_INHERITED: list[Any] = []
#: Taken while a forked child replaces an inherited pool (made anew in the child).
_POOL_GUARD = threading.Lock()


def _after_fork_in_child() -> None:
    """In a forked child: the parent's pools, their connections and its thread locks are not the
    child's.  Using them interleaved the two processes' messages on one socket (a search failed with
    'prepared statement "_pg3_6" already exists', or read another's rows), a child's ``close`` ended
    the parent's sessions, and a lock a parent thread held at the fork (a sync) was held for ever."""
    global _POOL_GUARD, _THREAD_GUARD
    _FORKS[0] += 1
    _POOL_GUARD = threading.Lock()
    _THREAD_GUARD = threading.Lock()
    _THREAD_LOCKS.clear()
    Database._guard = threading.Lock()
    Database._registry.clear()  # a store opened in the child gets a pool of its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Database:
    """A migrated schema and a connection pool onto it, shared per process and refcounted."""

    _registry: ClassVar[dict[tuple[str, str], Database]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, dsn: str, schema: str, pool_size: int):
        psycopg = require_psycopg()
        from pgvector.psycopg.vector import register_vector_info
        from psycopg.types import TypeInfo

        self.dsn, self.schema = dsn, schema
        self.where = redact_dsn(dsn, schema)
        self.refs = 0
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT, **KEEPALIVES) as conn:
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (LOCK_TIMEOUT,))
                self.where = connected_where(conn.info, schema)
                self.facts = migrate(conn, schema)
                info = TypeInfo.fetch(conn, f'"{self.facts["vector_schema"]}".vector')
        except psycopg.errors.LockNotAvailable as exc:
            raise self.lock_error(exc) from None
        except psycopg.errors.QueryCanceled as exc:  # (an OperationalError, but the server was reached)
            raise self.cancel_error(exc) from None
        except StoreError as exc:  # pgvector missing, a schema this role may not create…: say which server
            raise type(exc)(f"PostgreSQL at {self.where}: {exc}") from None
        except psycopg.OperationalError as exc:
            unset = "" if dsn else " (no DSN is set: store.dsn or MEMDIR_DATABASE_URL; libpq's defaults were tried)"
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {self.where}{unset}: {_one_line(exc)}"
                                      ) from None
        except psycopg.ProgrammingError as exc:
            if getattr(exc, "sqlstate", None):
                raise  # the server's own error (permissions, a foreign table in the schema…)
            raise StoreError(bad_dsn_message(dsn, exc)) from None
        ext_schema = self.facts["vector_schema"]

        def configure(conn: Any) -> None:
            register_vector_info(conn, info)
            set_search_path(conn, schema, ext_schema)

        def configure_pooled(conn: Any) -> None:
            configure(conn)
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (LOCK_TIMEOUT,))
            # A sync's batch transaction stays open while the provider embeds the batch (seconds, or
            # minutes for a remote batch job): a server's idle_in_transaction_session_timeout shorter
            # than that closed the connection in every sync, so the index could never be built.  A
            # dead client is still noticed, by the keepalives.
            conn.execute("SELECT set_config('idle_in_transaction_session_timeout', '0', false)")

        self._configure = configure_pooled
        self._pool_size = pool_size
        self._pool = self._open_pool()
        self._forks = _FORKS[0]

    def _open_pool(self) -> Any:
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(self.dsn, min_size=1, max_size=self._max_size(), timeout=CONNECT_TIMEOUT,
                              reconnect_timeout=RECONNECT_TIMEOUT,
                              kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT, **KEEPALIVES},
                              connection_class=watched_class(),
                              configure=self._configure, open=True, name=f"memdir-{self.schema}")
        pool.wait(timeout=30)
        return pool

    def _max_size(self) -> int:
        """``poolSize``, plus one for each further store using the pool (another agent open in this
        process): a sync holds a pooled connection in its batch's transaction while the batch is
        embedded (seconds, minutes with a remote batch job), so four agents syncing at once took
        every connection of a pool of 4, and any search in the process waited 15 s, then failed
        with "cannot connect to PostgreSQL ... no free connection within 15 s"."""
        return self._pool_size + max(self.refs - 1, 0)

    def _fit_pool(self) -> None:
        pool = self.pool
        if pool.max_size != self._max_size():
            pool.resize(1, self._max_size())

    @property
    def pool(self) -> Any:
        """This process's pool: a forked child opens its own on first use (the parent's is kept,
        unused and open, in :data:`_INHERITED`)."""
        if self._forks != _FORKS[0]:
            with _POOL_GUARD:
                if self._forks != _FORKS[0]:
                    _INHERITED.append(self._pool)
                    self._pool = self._open_pool()
                    self._forks = _FORKS[0]
        return self._pool

    def lock_error(self, exc: BaseException) -> DatabaseUnavailable:
        return DatabaseUnavailable(
            f"PostgreSQL at {self.where}: gave up after waiting {LOCK_TIMEOUT} for a lock another session holds "
            f"on memdir's tables (a long transaction? see pg_stat_activity): {_one_line(exc)}")

    def cancel_error(self, exc: BaseException) -> DatabaseUnavailable:
        """A statement the server cancelled (its ``statement_timeout``), named as such: it was shown
        bare ("canceling statement due to statement timeout"), or as a failure to connect."""
        return DatabaseUnavailable(
            f"PostgreSQL at {self.where} cancelled one of memdir's statements: {_one_line(exc)} (the role's or "
            "database's statement_timeout is too short for it, or an administrator cancelled it); try again, or "
            "raise statement_timeout for memdir's role")

    @classmethod
    def acquire(cls, dsn: str, schema: str, pool_size: int) -> Database:
        with cls._guard:
            db = cls._registry.get((dsn, schema))
            if db is None:
                db = cls(dsn, schema, pool_size)
                cls._registry[(dsn, schema)] = db
            db.refs += 1
            db._fit_pool()
            return db

    def release(self) -> None:
        with self._guard:
            self.refs -= 1
            if self.refs > 0:
                if self._forks == _FORKS[0]:
                    self._fit_pool()
                return
            if self._registry.get((self.dsn, self.schema)) is self:  # (a forked child's may be another)
                del self._registry[(self.dsn, self.schema)]
        if self._forks == _FORKS[0]:  # an inherited pool is the parent's: never closed here
            self._pool.close()

    def recreate_schema(self) -> bool:
        """Create memdir's schema again if it was dropped whole (``DROP SCHEMA … CASCADE``, as the
        damage message advises) while this process kept its pool; ``True`` if it did.

        The schema is created only when a store's pool opens, so a long-lived process (the MCP
        server) otherwise failed every call until restarted.  A schema with any of memdir's tables
        or its version record left is not touched: that is damage a person must look at.
        """
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT, **KEEPALIVES) as conn:
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (LOCK_TIMEOUT,))
            left = conn.execute("SELECT count(*) FROM unnest(%s::text[]) t WHERE to_regclass(format('%%I.%%I', "
                                "%s::text, t)) IS NOT NULL", ([*TABLES, "schema_version"], self.schema)).fetchone()[0]
            if left:
                return False
            self.facts = migrate(conn, self.schema)
        return True

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection known to be alive when handed out; failures as :class:`DatabaseUnavailable`."""
        import psycopg
        from psycopg_pool import PoolTimeout

        bound = answer_bound()
        if bound is not None and bound.expired is not None:  # (a connection is not even waited for)
            raise DatabaseUnavailable(f"PostgreSQL at {self.where}: {bound.expired}")
        pool = self.pool
        try:
            conn = self._live_connection(pool, POOL_QUICK_WAIT)
        except PoolTimeout:
            conn = None
        pooled = conn is not None
        if conn is None and pool.get_stats().get("pool_size", 0) >= pool.max_size:
            try:  # every connection is in use: wait for one
                conn = self._live_connection(pool, CONNECT_TIMEOUT)
                pooled = True
            except PoolTimeout:
                raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {self.where}: "
                                          f"{self._why_unreachable()}") from None
        if conn is None:
            # The pool could open one but has none: the server was lost and the pool waits to retry.
            # Opened here instead: the server's own reason at once if it is still down, else a
            # connection for this call while the pool catches up.
            conn = self.dedicated("memdir")
        try:
            yield conn
        except watched_class().NoAnswer as exc:
            raise DatabaseUnavailable(f"PostgreSQL at {self.where}: {exc}") from None
        except psycopg.errors.LockNotAvailable as exc:
            raise self.lock_error(exc) from exc
        except psycopg.errors.QueryCanceled as exc:
            raise self.cancel_error(exc) from exc
        except psycopg.OperationalError as exc:
            if not (conn.closed or conn.broken):
                raise  # a query cancelled, a statement timeout: the connection is fine
            raise DatabaseUnavailable(f"lost the connection to PostgreSQL at {self.where}: {_one_line(exc)}"
                                      ) from exc
        finally:
            if pooled:
                pool.putconn(conn)
            else:
                conn.close()

    @staticmethod
    def _live_connection(pool: Any, timeout: float) -> Any:
        """From the pool, skipping (and closing) connections the server closed while they sat idle."""
        for _ in range(pool.max_size + 1):
            conn = pool.getconn(timeout)
            if not _dead(conn):
                return conn
            conn.close()
            pool.putconn(conn)  # closed: the pool discards it and opens a fresh one
        return pool.getconn(timeout)

    def _why_unreachable(self) -> str:
        """Why no pooled connection came: one direct attempt gives libpq's own reason."""
        import psycopg

        try:
            psycopg.connect(self.dsn, connect_timeout=CONNECT_TIMEOUT).close()
        except Exception as exc:
            return _one_line(exc)
        return f"no free connection within {CONNECT_TIMEOUT} s"

    def dedicated(self, application_name: str, *, watched: bool = False) -> Any:
        """A connection outside the pool (the writer lock, concurrent index builds); ``watched``: its
        statements honour :func:`answer_bound` (the writer lock's, not an index build's)."""
        import psycopg

        try:
            cls = watched_class() if watched else psycopg.Connection
            conn = cls.connect(self.dsn, autocommit=True, application_name=application_name[:63],
                                   connect_timeout=CONNECT_TIMEOUT, **KEEPALIVES)
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {self.where}: {_one_line(exc)}") from None
        self._configure(conn)
        return conn


# -- the writer lock --------------------------------------------------------------------------

#: Per (DSN, lock key): the same schema and agent in another database (or server) is another index,
#: whose sync must not wait for this one's; one database named by two DSNs is still excluded by the
#: advisory lock itself (two sessions).
_THREAD_LOCKS: dict[tuple[str, int], threading.Lock] = {}
_THREAD_GUARD = threading.Lock()


class AdvisoryWriterLock:
    """One writer per agent index across hosts: a session-level advisory lock on its own connection."""

    #: What a sync says when :meth:`still_held` finds the lock gone.
    how_lost = ("went with its connection to the database server, closed during this sync, and could not be "
                "taken again (another memdir process holds it now, or the server cannot be reached)")

    def __init__(self, db: Database, agent: str):
        self.db = db
        self.key = lock_key("writer", db.schema, agent)
        self._conn: Any = None
        self._forks = _FORKS[0]
        self._thread_lock = self._process_lock()

    def _process_lock(self) -> threading.Lock:
        """This process's thread lock for the key (advisory locks are re-entrant per session:
        threads exclude each other here)."""
        with _THREAD_GUARD:
            return _THREAD_LOCKS.setdefault((self.db.dsn, self.key), threading.Lock())

    def _here(self) -> None:
        """In a forked child, forget what the parent held: its thread lock (a sync of the parent's
        held it for ever here) and its lock session (the parent's, kept open and unused)."""
        if self._forks != _FORKS[0]:
            self._forks = _FORKS[0]
            self._thread_lock = self._process_lock()
            if self._conn is not None:
                _INHERITED.append(self._conn)
                self._conn = None

    def held_here(self) -> bool:
        """Whether a thread of this process holds the lock (or is taking it)."""
        self._here()
        return self._thread_lock.locked()

    def acquire(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._here()
        if not self._thread_lock.acquire(timeout=thread_wait(timeout)):
            return False
        conn = None
        try:
            conn = self._connect()
            while not conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0]:
                if deadline is not None and time.monotonic() >= deadline:
                    conn.close()
                    self._thread_lock.release()
                    return False
                time.sleep(0.05)
            self._check_schema(conn)
        except BaseException as exc:
            # Whatever cut the wait short (the connection killed, Ctrl-C), the thread lock must not be
            # kept: every later sync of this agent in the process would wait for it for ever.
            # (a terminated session's error, class 57P, can arrive before psycopg marks the connection broken)
            # (terminated while _connect set the connection up, conn is still None: AdminShutdown went out raw)
            # (or libpq's own "consuming input failed", no SQLSTATE at all, also before it is marked broken:
            # the polling statement cannot fail otherwise)
            import psycopg

            state = str(getattr(exc, "sqlstate", None) or "")
            broken = state.startswith(("57P", "08")) or (conn is not None and (
                conn.closed or conn.broken or (not state and isinstance(exc, psycopg.OperationalError))))
            if conn is not None:
                conn.close()
            self._thread_lock.release()
            if broken and isinstance(exc, Exception):
                raise DatabaseUnavailable(f"lost the connection to PostgreSQL at {self.db.where} while waiting "
                                          f"for the writer lock: {_one_line(exc)}") from exc
            raise
        self._conn = conn
        return True

    def _check_schema(self, conn: Any) -> None:
        """Refuse to write, under the lock, into a schema a newer memdir has migrated since this
        process opened it (checked then only): a ``memdir mcp`` running for days went on writing
        with this version's layout beside the newer hosts' of the team, which the README says an
        older memdir refuses."""
        current = schema_version(conn, self.db.schema)
        if current > LATEST:
            raise StoreError(f"PostgreSQL at {self.db.where}: database schema {self.db.schema!r} is at version "
                             f"{current}, newer than this memdir understands ({LATEST}): a newer memdir migrated it "
                             "since this process started; restart this process with the newer memdir (nothing was "
                             "written)")

    def release(self) -> None:
        self._here()
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

    def _connect(self) -> Any:
        # (the pid space before the host name: the server cuts an application name at 63 bytes)
        conn = self.db.dedicated(f"memdir writer {os.getpid()}#{pid_space()}@{socket.gethostname()}", watched=True)
        if conn.info.server_version >= 140000:
            # The connection idles while the sync reads and embeds; a server's idle_session_timeout
            # (managed services set one) closed it, and with it the lock, while the sync went on writing.
            conn.execute("SELECT set_config('idle_session_timeout', '0', false)")
        return conn

    def still_held(self) -> bool:
        """Held while its session is, checked before each write: the server drops the lock with the
        session (pg_terminate_backend, a proxy closing an idle connection), and a sync that went on
        writing then wrote beside the next writer.  A lock so lost is taken again if it is free."""
        self._here()
        conn = self._conn
        if conn is None:
            return False
        if not _dead(conn):
            return True
        conn.close()
        fresh = None
        try:
            fresh = self._connect()
            if fresh.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0]:
                self._conn, fresh = fresh, None
                return True
        except Exception:
            pass  # the server cannot be reached (or dropped this connection too): not held
        finally:
            if fresh is not None:
                fresh.close()
        return False

    def holder(self) -> dict[str, Any] | None:
        """The holding client's pid and host (from its application name) and since when."""
        with self.db.connection() as conn:
            row = conn.execute(
                "SELECT a.application_name, extract(epoch FROM a.backend_start), a.pid FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                # advisory locks are per database, pg_locks shows every database's: the same schema and
                # agent in another database of the server (staging beside production) is another index
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND l.classid = %s AND l.objid = %s AND l.objsubid = 1",
                ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF),
            ).fetchone()
        if row is None:
            return None
        name, since, backend = row
        out: dict[str, Any] = {"since": float(since) if since is not None else None, "backendPid": backend}
        if name and name.startswith("memdir writer "):
            pid, _, host = name[len("memdir writer "):].partition("@")
            pid, _, space = pid.partition("#")
            out.update({"pid": int(pid) if pid.isdigit() else pid, "host": host})
            if space:
                out["pids"] = space
            # (a writer of this host stopped with Ctrl-Z never lets go: waits give up on it and say so;
            # one of another container with the same host name is none of this one's processes)
            if pid_here(out) and is_stopped(out["pid"]):  # (by the host name when an older memdir's)
                out["stopped"] = True
        return out

    def __enter__(self) -> AdvisoryWriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
