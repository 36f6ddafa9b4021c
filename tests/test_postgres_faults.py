"""PostgreSQL when things go wrong: connections killed, the server gone, locks held by others,
hostile note text, a malformed DSN, a schema memdir did not make, a rebuild that lost its lock.

Runs against a real server (pgserver's PostgreSQL 16 + pgvector, or $MEMDIR_TEST_DATABASE_URL).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from helpers import Backend, pg_query
from memdir.api import Memory
from memdir.config import load_config
from memdir.errors import StoreError
from memdir.stores import open_store


def _keyword_config(pg: Backend) -> dict[str, Any]:
    return pg.config({"memorySearch": {"provider": "none", "sync": {"onSearch": False}}})


def _terminate_other_backends(url: str, database: str | None = None) -> int:
    """What a server restart or an administrator does to every client connection (of one database)."""
    return pg_query(url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> "
                         "pg_backend_pid() AND backend_type = 'client backend' AND datname = "
                         "coalesce(%s, current_database())", (database,))[0][0]


def _in_thread(fn: Any, timeout: float) -> tuple[bool, Any]:
    """(finished within ``timeout``, its result or exception): a hang fails the test instead of the run."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed back to the test
            out["value"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive(), out.get("value")


# -- connections --------------------------------------------------------------------------------

@contextmanager
def _scratch_database(pg_url: str, **settings: str) -> Iterator[tuple[str, str]]:
    """``(name, url)`` of a new database with pgvector and the given per-database settings,
    dropped afterwards (connections allowed again first, in case a test refused them)."""
    db = "t_" + uuid.uuid4().hex[:10]
    pg_query(pg_url, f'CREATE DATABASE "{db}"')
    url = pg_url.replace("/postgres?", f"/{db}?") if "/postgres?" in pg_url else pg_url.rsplit("/", 1)[0] + f"/{db}"
    try:
        pg_query(url, "CREATE EXTENSION IF NOT EXISTS vector")
        for name, value in settings.items():
            pg_query(pg_url, f"ALTER DATABASE \"{db}\" SET {name} = '{value}'")
        yield db, url
    finally:
        pg_query(pg_url, f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
        pg_query(pg_url, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def test_a_long_lived_memory_answers_after_its_connections_are_killed(pg: Backend, make_workspace, tmp_path: Path):
    """A server restart (or pg_terminate_backend) between two searches of an MCP server or a reused
    Memory: the next search failed once per pooled connection before a fresh one was opened."""
    ws = make_workspace({f"memory/n{i}.md": f"kubernetes migration note {i}" for i in range(10)})
    with Memory(ws, config=_keyword_config(pg), state_dir=tmp_path) as mem:
        mem.sync()
        assert mem.search("kubernetes").results
        for _ in range(2):
            assert _terminate_other_backends(pg.url) >= 1
            time.sleep(0.2)  # the server's goodbye reaches the idle sockets
            response = mem.search("kubernetes migration")
            assert response.results, response.warnings
            assert not [w for w in response.warnings if "failed" in w], response.warnings
        (ws / "memory" / "new.md").write_text("kubernetes upgrade plan")
        _terminate_other_backends(pg.url)
        time.sleep(0.2)
        assert mem.sync().indexed == 1


def test_a_database_that_refuses_connections_is_named_in_one_line_then_used_again(pg_url: str, make_workspace,
                                                                               tmp_path: Path, monkeypatch):
    """No pooled connection to be had: one line naming the server, within the connect timeout
    (it said "couldn't get a connection after 30.00 sec"); once the server takes connections again,
    the same Memory answers."""
    from memdir.stores import pgconn

    monkeypatch.setattr(pgconn, "CONNECT_TIMEOUT", 2, raising=False)
    with _scratch_database(pg_url) as (db, url):
        ws = make_workspace({"memory/a.md": "zebra crossing"})
        with Memory(ws, config=_keyword_config(Backend("postgres", url, "memdir")), state_dir=tmp_path) as mem:
            mem.sync()
            assert mem.search("zebra").results
            pg_query(pg_url, f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
            assert _terminate_other_backends(pg_url, db) >= 1
            time.sleep(0.2)
            started = time.monotonic()
            with pytest.raises(StoreError) as err:
                mem.search("zebra")
            assert time.monotonic() - started < 20
            message = str(err.value)
            assert message.startswith("cannot connect to PostgreSQL at postgresql://") and f"/{db}#memdir" in message
            assert "\n" not in message
            pg_query(pg_url, f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
            assert mem.search("zebra").results


def test_a_malformed_dsn_never_prints_the_password(make_workspace, run_cli):
    ws = make_workspace({"memory/a.md": "hello"})
    for dsn in ("postgresql://bob:s3cret@[::1/db", "postgresql://bob:s3cret@host:5432/db?sslmode=bogus"):
        proc = run_cli("search", "hello", "-w", str(ws), env={"MEMDIR_STORE_DRIVER": "postgres",
                                                              "MEMDIR_DATABASE_URL": dsn})
        assert proc.returncode == 1, proc.stderr
        assert "s3cret" not in proc.stderr + proc.stdout, proc.stderr
        assert "PostgreSQL" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_an_ipv6_server_is_named_with_its_brackets(make_workspace, run_cli):
    # 'cannot connect to PostgreSQL at postgresql://bob@::1:5433/db#memdir' (and status's Store
    # line): the host could not be told from '::1:5433'
    from types import SimpleNamespace

    from memdir.stores.pgconn import connected_where

    ws = make_workspace({"memory/a.md": "hello"})
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            closed = s.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback here")
    proc = run_cli("search", "hello", "-w", str(ws), env={
        "MEMDIR_STORE_DRIVER": "postgres", "MEMDIR_DATABASE_URL": f"postgresql://bob:s3cret@[::1]:{closed}/db"})
    assert proc.returncode == 1, proc.stderr
    assert f"cannot connect to PostgreSQL at postgresql://bob@[::1]:{closed}/db#memdir: " in proc.stderr, proc.stderr
    info = SimpleNamespace(host="fd00::2", port=5432, user="bob", dbname="db")  # psycopg's ConnectionInfo
    assert connected_where(info, "memdir") == "postgresql://bob@[fd00::2]:5432/db#memdir"


def test_the_writer_lock_outlives_the_servers_idle_session_timeout(pg_url: str, tmp_path: Path):
    """Managed servers often set idle_session_timeout: the lock's connection idles while a sync reads
    and embeds, was closed by the server, and the lock went with it while the sync kept writing."""
    with _scratch_database(pg_url, idle_session_timeout="500ms") as (_, url):
        settings = load_config(overrides=Backend("postgres", url, "memdir").config(), state_dir=tmp_path).settings
        store = open_store(settings)
        lock = store.writer_lock()
        try:
            assert lock.acquire(0)
            time.sleep(1.5)
            assert lock.holder() is not None, "the server closed the idle lock connection"
        finally:
            lock.release()
            store.close()


def test_a_writer_lock_connection_terminated_while_it_is_set_up_is_a_lost_connection(
        pg: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The server ended the writer lock's session while it was being set up (its
    ``idle_session_timeout``; the fault test below hit it now and then under load): the raw
    ``AdminShutdown`` went out, not the "lost the connection" error a wait cut later gives."""
    import psycopg

    from memdir.stores.pgconn import DatabaseUnavailable

    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path).settings)
    try:
        lock = store.writer_lock()

        def terminated() -> Any:
            raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")

        monkeypatch.setattr(lock, "_connect", terminated)
        with pytest.raises(DatabaseUnavailable, match="lost the connection"):
            lock.acquire(5)
        monkeypatch.undo()
        again = store.writer_lock()
        assert again.acquire(5), "the thread lock was kept by the failed wait"
        again.release()
    finally:
        store.close()


def test_a_writer_lock_wait_cut_by_a_dropped_connection_leaves_the_lock_usable(pg: Backend, tmp_path: Path):
    """The connection a waiter polls the advisory lock on was killed (a server restart): the wait
    ended with an error but kept the process's per-agent thread lock, so every later sync of that
    agent in the process (an MCP server) waited for ever or was told another process was writing."""
    import psycopg

    from memdir.stores.pgconn import DatabaseUnavailable

    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path).settings)
    holder = psycopg.connect(pg.url, autocommit=True)
    try:
        waiter = store.writer_lock()
        holder.execute("SELECT pg_advisory_lock(%s)", (waiter.key,))  # another host's writer
        outcome: list[Any] = []
        t = threading.Thread(target=lambda: outcome.append(_in_thread(lambda: waiter.acquire(30), 40)[1]))
        t.start()
        assert _wait_for(lambda: pg_query(pg.url, "SELECT count(*) FROM pg_stat_activity WHERE application_name "
                                                  "LIKE 'memdir writer %%'")[0][0] == 1)
        pg_query(pg.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name "
                         "LIKE 'memdir writer %%'")
        t.join(40)
        assert isinstance(outcome[0], Exception), outcome
        holder.execute("SELECT pg_advisory_unlock(%s)", (waiter.key,))
        again = store.writer_lock()
        assert again.acquire(5), "the thread lock was kept by the failed wait"
        again.release()
        assert isinstance(outcome[0], DatabaseUnavailable) and "lost the connection" in str(outcome[0]), outcome
    finally:
        holder.close()
        store.close()


def _wait_for(predicate: Any, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


class _SlowProvider:
    """Embeds like a remote API under load: a while per batch."""

    id = "slow"
    model = "slow-4"
    provider_key = "slow"
    max_input_bytes = 1 << 20
    dims = 4

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        time.sleep(1.5)
        return [[1.0, float(len(t) % 7), 0.0, 0.0] for t in texts]

    def close(self) -> None:
        pass


def test_a_sync_outlives_the_servers_idle_in_transaction_timeout(pg_url: str, make_workspace, tmp_path: Path):
    """A sync's batch transaction is open while the provider embeds: on a server whose
    idle_in_transaction_session_timeout is shorter than that, every sync lost its connection and
    the index could never be built."""
    with _scratch_database(pg_url, idle_in_transaction_session_timeout="500ms") as (_, url):
        ws = make_workspace({"memory/a.md": "the ibis wades", "memory/b.md": "the heron waits"})
        cfg = Backend("postgres", url, "memdir").config({"memorySearch": {"sync": {"onSearch": False}}})
        with Memory(ws, config=cfg, state_dir=tmp_path, provider=_SlowProvider()) as mem:
            report = mem.sync()
            assert report.indexed == 2 and report.embedded == 2
            assert [h.path for h in mem.search("ibis").results][:1] == ["memory/a.md"]


def test_no_dsn_at_all_says_where_to_set_one(make_workspace, run_cli, tmp_path: Path):
    ws = make_workspace({"memory/a.md": "hello"})
    proc = run_cli("search", "hello", "-w", str(ws), env={"MEMDIR_STORE_DRIVER": "postgres",
                                                          "PGHOST": str(tmp_path / "no-server-here")})
    assert proc.returncode == 1 and "cannot connect to PostgreSQL" in proc.stderr, proc.stderr
    assert "MEMDIR_DATABASE_URL" in proc.stderr, proc.stderr


# -- locks held by someone else -----------------------------------------------------------------

def test_a_lock_held_by_another_session_is_waited_for_a_bounded_time(pg: Backend, make_workspace, tmp_path: Path,
                                                                   monkeypatch):
    """A long transaction elsewhere on memdir's tables hung searches and syncs for ever; now they give
    up after the lock timeout (SQLite's busy timeout) with one line saying why, and work once it ends."""
    import psycopg

    from memdir.stores import pgconn

    monkeypatch.setattr(pgconn, "LOCK_TIMEOUT", "1s", raising=False)
    ws = make_workspace({f"memory/n{i}.md": f"release checklist {i}" for i in range(5)})
    with Memory(ws, config=_keyword_config(pg), state_dir=tmp_path) as mem:
        mem.sync()
        (ws / "memory" / "n0.md").write_text("release checklist, edited")
        holder = psycopg.connect(pg.url)
        try:
            holder.execute(f'LOCK TABLE "{pg.schema}".chunks IN ACCESS EXCLUSIVE MODE')
            done, result = _in_thread(lambda: mem.store.keyword_search(["release"], 5), 30)
            assert done, "a keyword search waited for the lock without end"
            assert isinstance(result, StoreError) and "lock" in str(result), result
            assert "\n" not in str(result) and pg.schema in str(result)
            done, result = _in_thread(mem.sync, 60)
            assert done, "a sync waited for the lock without end"
            assert isinstance(result, StoreError), result
            holder.rollback()
            holder.execute(f'SELECT * FROM "{pg.schema}".indexes FOR UPDATE')  # every generation's row
            done, result = _in_thread(lambda: mem.sync(force=True), 60)
            assert done, "a rebuild waited for the generation rows without end"
            assert isinstance(result, StoreError), result
        finally:
            holder.close()
        assert mem.sync().indexed == 1
        assert mem.search("edited").results


def test_the_shared_embedding_cache_never_waits_on_rows_another_agent_holds(pg: Backend, tmp_path: Path,
                                                                            monkeypatch):
    """Agents sharing a database share the cache.  A sync touches the rows it found inside its batch
    transaction and keeps them locked through the embedding call; another agent's touch or prune
    waited for them, and touches, writes and prunes locking rows in different orders deadlocked
    (4 agents syncing overlapping notes: 3-7 syncs of 32 failed with 'deadlock detected' or
    'current transaction is aborted').  Touch and prune now skip rows another transaction holds."""
    import psycopg

    from memdir.stores import pgconn

    monkeypatch.setattr(pgconn, "LOCK_TIMEOUT", "5s", raising=False)
    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path, agent_id="a").settings)
    unit = [1.0] + [0.0] * 3
    try:
        with store.transaction():
            store.cache_put("p", "m", "k", {f"h{i}": unit for i in range(6)})
        other = psycopg.connect(pg.url)  # another agent's batch transaction, embedding
        try:
            other.execute(f'UPDATE "{pg.schema}".embedding_cache SET updated_at = 0 WHERE hash IN (\'h0\', \'h1\')')

            def touch() -> None:
                with store.transaction():
                    store.cache_touch("p", "m", "k", ["h0", "h1", "h2"])

            started = time.monotonic()
            done, result = _in_thread(touch, 20)
            assert done and result is None and time.monotonic() - started < 3, result
            done, result = _in_thread(lambda: store.cache_prune(2), 20)
            assert done and isinstance(result, int) and time.monotonic() - started < 6, result
            assert result == 2  # h0 and h1 (least recently used) are held: four others were candidates
        finally:
            other.rollback()
            other.close()
        assert store.cache_count() == 4 and store.cache_prune(2) == 2 and store.cache_count() == 2
    finally:
        store.close()


# -- content --------------------------------------------------------------------------------------

def test_a_note_with_a_nul_byte_is_indexed(pg: Backend, make_workspace, tmp_path: Path):
    """PostgreSQL text cannot hold NUL: one such note failed the whole sync (SQLite indexes it)."""
    ws = make_workspace({"memory/ok.md": "an ordinary note about zebras"})
    (ws / "memory" / "nul.md").write_bytes(b"# binary paste\n\nalpha\x00beta nulword\n")
    with Memory(ws, config=_keyword_config(pg), state_dir=tmp_path) as mem:
        report = mem.sync()
        assert report.indexed == 2 and not report.skipped
        hits = mem.search("nulword").results
        assert [h.path for h in hits] == ["memory/nul.md"]
        assert "alpha\ufffdbeta" in hits[0].snippet
        assert mem.search("zebras").results


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="needs a file system that takes any bytes in names")
def test_a_workspace_whose_name_is_not_utf8_is_indexed(pg: Backend, tmp_path: Path):
    """Its path reaches meta and state as lone surrogates (surrogateescape), which jsonb refuses:
    every sync failed with 'Unicode low surrogate must follow a high surrogate' (SQLite indexes it).
    What is read back must be the path written: the owner check compares them."""
    ws = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/ws\xff"))
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("the quetzal nests in the cloud forest")
    cfg = pg.config({"memorySearch": {"provider": "none", "sync": {"onSearch": False}}})
    for _ in range(2):  # the second run reads the owner back and must find it is this workspace
        with Memory(ws, config=cfg, state_dir=tmp_path / "state") as mem:
            mem.sync()
            assert [h.path for h in mem.search("quetzal").results] == ["memory/a.md"]
            assert mem.store.read_meta()["workspace"] == str(ws)
    from memdir.stores.postgres import json_in, json_out

    odd = {"k\udcff": ["a\x00b", "\ud800", "plain", 3, None, {"x": "\udfff"}]}
    assert json_out(json_in(odd)) == odd and "\x00" not in str(json_in(odd))


class _OddVectors:
    """A custom provider (``Memory(provider=...)``) whose vectors are not all finite or not all non-zero."""

    id = "odd"
    model = "odd-4"
    provider_key = "odd"
    max_input_bytes = 1 << 20
    dims = 4

    @staticmethod
    def vector(text: str) -> list[float]:
        for word, v in (("zero", [0.0] * 4), ("nan", [float("nan"), 1.0, 0.0, 0.0]),
                        ("inf", [float("inf"), 1.0, 0.0, 0.0])):
            if word in text:
                return v
        return [1.0, 0.5, 0.0, 0.0]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def close(self) -> None:
        pass


def test_vectors_pgvector_cannot_hold_neither_fail_the_sync_nor_score_nan(pg: Backend, make_workspace,
                                                                          tmp_path: Path):
    """pgvector refuses NaN and infinity: one such vector aborted the batch's transaction and the
    sync failed with 'current transaction is aborted'; an all-zero vector scored NaN in hybrid search."""
    import math

    ws = make_workspace({f"memory/{w}.md": f"{w} vector note" for w in ("zero", "nan", "inf", "plain")})
    cfg = pg.config({"memorySearch": {"sync": {"onSearch": False}}})
    with Memory(ws, config=cfg, state_dir=tmp_path, provider=_OddVectors()) as mem:
        report = mem.sync()
        assert report.indexed == 4 and report.embedded == 4 and not report.warnings, report
        assert mem.store.vector_count() == 4
        results = mem.search("vector note").results
        assert {h.path for h in results} == {f"memory/{w}.md" for w in ("zero", "nan", "inf", "plain")}
        assert all(math.isfinite(h.score) for h in results), [(h.path, h.score) for h in results]
        assert results[0].path == "memory/plain.md"


# -- schemas --------------------------------------------------------------------------------------

def test_a_schema_with_tables_memdir_did_not_make_is_refused_clearly(pg: Backend, tmp_path: Path):
    """A schema holding its own ``files`` table (or memdir's tables without their version record)
    failed with 'relation "files" already exists'."""
    settings = load_config(overrides=pg.config(), state_dir=tmp_path).settings
    pg_query(pg.url, f'CREATE SCHEMA "{pg.schema}"')
    pg_query(pg.url, f'CREATE TABLE "{pg.schema}".files(x int)')
    with pytest.raises(StoreError, match="already holds tables named like memdir's \\(files\\)"):
        open_store(settings)
    pg_query(pg.url, f'DROP SCHEMA "{pg.schema}" CASCADE')
    open_store(settings).close()
    pg_query(pg.url, f'DELETE FROM "{pg.schema}".schema_version')
    with pytest.raises(StoreError, match="no record of memdir's schema version"):
        open_store(settings)
    assert pg_query(pg.url, f'SELECT count(*) FROM "{pg.schema}".indexes')  # nothing dropped or re-created


def test_a_schema_dropped_under_a_long_lived_memory_is_created_again(pg: Backend, make_workspace, tmp_path: Path):
    """``DROP SCHEMA … CASCADE`` (what the damage message advises) while an MCP server runs: the schema
    was only created when a pool opened, so every later call failed until the process restarted."""
    ws = make_workspace({f"memory/n{i}.md": f"pelican sighting {i}" for i in range(4)})
    told: list[str] = []
    cfg = pg.config({"memorySearch": {"provider": "none"}})
    with Memory(ws, config=cfg, state_dir=tmp_path, notice=told.append) as mem:
        mem.sync()
        assert mem.search("pelican").results
        pg_query(pg.url, f'DROP SCHEMA "{pg.schema}" CASCADE')
        assert len(mem.search("pelican").results) == 4
        assert len(told) == 1 and "was dropped: re-created it" in told[0], told
        assert mem.status()["files"] == 4
    # A schema with some of memdir's tables left is damage for a person to look at: never re-created.
    pg_query(pg.url, f'DROP TABLE "{pg.schema}".index_state')
    with Memory(ws, config=cfg, state_dir=tmp_path) as mem, pytest.raises(StoreError, match="index_state is missing"):
        mem.search("pelican")


def test_several_processes_creating_a_fresh_schema_at_once(pg: Backend):
    """All but the first failed with 'duplicate key value violates unique constraint
    "pg_namespace_nspname_index"': each waited for the schema lock inside a transaction that
    still saw the catalog from before the wait."""
    import psycopg

    from memdir.stores.pgschema import LATEST, migrate

    conns = [psycopg.connect(pg.url, autocommit=True) for _ in range(4)]
    barrier = threading.Barrier(len(conns))

    def open_one(conn: Any) -> Any:
        conn.execute(f"SELECT to_regclass('\"{pg.schema}\".schema_version')")  # as migrate's first look does
        barrier.wait()
        return migrate(conn, pg.schema)["schema_version"]

    try:
        results = [None] * len(conns)
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _in_thread(
            lambda: open_one(conns[i]), 60)[1])) for i in range(len(conns))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [LATEST] * len(conns), results
    finally:
        for c in conns:
            c.close()


def test_opening_waits_for_another_hosts_long_migration(pg: Backend, tmp_path: Path, monkeypatch):
    """Statements give up on a lock after the lock timeout, but a migration running elsewhere (an
    index over every chunk can take minutes) is waited for: the schema then opens as migrated."""
    import psycopg

    from memdir.stores import pgconn
    from memdir.stores.pgschema import LATEST, lock_key

    monkeypatch.setattr(pgconn, "LOCK_TIMEOUT", "1s")
    other = psycopg.connect(pg.url, autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(%s)", (lock_key("schema", pg.schema),))
        timer = threading.Timer(3, lambda: other.execute("SELECT pg_advisory_unlock_all()"))
        timer.start()
        started = time.monotonic()
        store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path).settings)
        timer.join()
        assert time.monotonic() - started >= 2.5
        assert store.db.facts["schema_version"] == LATEST
        with store.db.connection() as c:
            assert c.execute("SHOW lock_timeout").fetchone()[0] == "1s"
        store.close()
    finally:
        other.close()


# -- a rebuild that lost its writer lock ----------------------------------------------------------

def test_a_rebuild_whose_generation_was_cleaned_away_is_not_published(pg: Backend, tmp_path: Path):
    """Its lock connection died (a server restart), another process took the lock and removed the
    'building' generation as a crash's leftover: publishing it retired the live index for nothing."""
    from memdir.stores.base import ChunkRow

    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path, agent_id="fence").settings)
    try:
        def write(target: Any, word: str) -> None:
            rows = [ChunkRow(f"c-{word}", "memory/a.md", "memory", 1, 1, f"h-{word}", "m", f"{word} text")]
            with target.transaction():
                target.replace_file("memory/a.md", "memory", f"f-{word}", 1, 10, rows)
                target.write_meta({"model": "m"})

        write(store, "before")
        live = pg_query(pg.url, f"SELECT id FROM \"{pg.schema}\".indexes WHERE state = 'live'")
        with pytest.raises(StoreError, match="abandoned"), store.rebuild() as fresh:
            write(fresh, "after")
            pg_query(pg.url, f'DELETE FROM "{pg.schema}".indexes WHERE id = %s', (fresh.pinned,))
        assert pg_query(pg.url, f"SELECT id FROM \"{pg.schema}\".indexes WHERE state = 'live'") == live
        assert [h.text for h in store.keyword_search(["before"], 5)] == ["before text"]
        leftovers = pg_query(pg.url, f'SELECT count(*) FROM "{pg.schema}".chunks WHERE index_id <> %s', (live[0][0],))
        assert leftovers == [(0,)]
    finally:
        store.close()


_FORKED_CHILD = """
import os, signal, sys, threading, time, traceback
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir import Memory

mem = Memory(Path({ws!r}), config={config!r}, state_dir=Path({state!r}))
mem.sync()
for _ in range(8):  # psycopg prepares a statement run often enough: the session holds it now
    assert mem.search("kafka", mode="keyword", sync=False).results
with mem.store.db.connection() as conn:
    session = conn.info.backend_pid
syncing, done = threading.Event(), threading.Event()

def progress(*_):  # a thread of the parent inside a sync (holding the writer lock) at the fork
    syncing.set()
    done.wait()

writer = threading.Thread(target=lambda: mem.sync(force=True, progress=progress))
writer.start()
syncing.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a child that hangs must not outlive the test
    code = 1
    try:
        for _ in range(8):
            hits = mem.search("kafka", mode="keyword", sync=False).results
            assert [h.path for h in hits] == ["MEMORY.md"], hits
        (Path({ws!r}) / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\\n")
        assert mem.sync(lock_timeout=20).indexed == 1  # waits for the parent's writer, then writes
        mem.close()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)
time.sleep(0.5)
done.set()
writer.join()
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "child failed"
for _ in range(8):  # the same statements on the parent's session: the child never used it
    assert mem.search("kafka", mode="keyword", sync=False).results
assert mem.search("ramen", mode="keyword", sync=False).results, "the child's write is not seen"
with mem.store.db.connection() as conn:
    assert conn.info.backend_pid == session, "the child's close ended the parent's session"
mem.close()
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_opens_its_own_connections(pg: Backend, make_workspace, tmp_path: Path):
    """gunicorn --preload, Celery prefork: a Memory used before the fork.  The child used the parent's
    pooled connections, so the two processes' statements crossed on one session (the child's search
    failed with 'prepared statement "_pg3_6" already exists', the parent's next ones too), the child's
    close ended the parent's sessions, and its sync waited out its lock_timeout on the thread lock a
    sync of the parent held at the fork."""
    import subprocess

    from helpers import SRC

    ws = make_workspace({"MEMORY.md": "# Decisions\n- Billing uses Kafka, not RabbitMQ.\n",
                         "memory/2026-01-10.md": "- Dana's cat Miso had surgery.\n"})
    script = _FORKED_CHILD.format(src=str(SRC), ws=str(ws), config=_keyword_config(pg), state=str(tmp_path / "state"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_agents_syncing_at_once_leave_a_connection_for_the_processs_searches(pg: Backend, make_workspace,
                                                                             tmp_path: Path, monkeypatch):
    """Agents of one process share a pool of poolSize connections, and a sync holds one in its
    batch's transaction while the batch is embedded: as many agents syncing as the pool is large
    took them all, and a search of any agent waited 15 s, then failed with "cannot connect to
    PostgreSQL ... no free connection within 15 s" (4 agents embedding with a slow model; here a
    pool of 1 and the wait cut to 2 s).  Each further agent open in the process adds a connection."""
    import hashlib

    from memdir.stores import pgconn

    monkeypatch.setattr(pgconn, "CONNECT_TIMEOUT", 2)
    embedding, release = threading.Event(), threading.Event()

    class HeldProvider:  # a model whose batch takes as long as the test says
        id, model, provider_key, max_input_bytes, dims = "hash", "hash-64", "hash-key", 8000, 64
        hold = False

        def embed_query(self, text: str) -> list[float]:
            return [(b - 127.5) / 128 for b in hashlib.sha512(text.encode()).digest()]

        def embed_batch(self, texts: list[str]) -> list[list[float]]:
            if self.hold:
                embedding.set()
                release.wait(20)
            return [self.embed_query(t) for t in texts]

    config = pg.config({"memorySearch": {"sync": {"onSearch": False}}}, poolSize=1)
    syncing = HeldProvider()
    a = Memory(make_workspace({"MEMORY.md": "- Billing uses Kafka.\n"}, name="a"), agent_id="a", config=config,
               state_dir=tmp_path, provider=syncing)
    b = Memory(make_workspace({"MEMORY.md": "- Dana's cat is Miso.\n"}, name="b"), agent_id="b", config=config,
               state_dir=tmp_path, provider=HeldProvider())
    try:
        a.sync()
        b.sync()
        (a.workspace / "MEMORY.md").write_text("- Billing uses RabbitMQ now.\n")
        syncing.hold = True
        writer = threading.Thread(target=a.sync)
        writer.start()
        try:
            assert embedding.wait(10)
            done, response = _in_thread(lambda: b.search("miso", mode="keyword"), 10)
        finally:
            release.set()
            writer.join(20)
        assert done and not isinstance(response, BaseException), response
        assert [hit.path for hit in response.results] == ["MEMORY.md"]
    finally:
        a.close()
        b.close()


# -- a frozen server --------------------------------------------------------------------------------

class _FreezableProxy:
    """A TCP proxy in front of the test server that can stop forwarding, both ways, while keeping its
    sockets open: what a server stopped with SIGSTOP, or a stalled proxy or VPN, looks like to a client
    (the kernel still acknowledges every packet, so keepalives never fire)."""

    def __init__(self, url: str):
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(url)
        host, port = str(parts.get("host") or "localhost"), int(parts.get("port") or 5432)
        self.target: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.url = f"postgresql://{parts.get('user') or ''}@127.0.0.1:{{}}/{parts.get('dbname') or 'postgres'}"
        if parts.get("password"):
            self.url += f"?password={parts['password']}"
        self.frozen = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = self.url.format(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            family = socket.AF_UNIX if isinstance(self.target, str) else socket.AF_INET
            server = socket.socket(family)
            server.connect(self.target)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        import select

        with a, b:
            while True:
                if self.frozen.is_set():
                    time.sleep(0.05)
                    continue
                for s in select.select([a, b], [], [], 0.05)[0]:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)

    def close(self) -> None:
        self.frozen.clear()
        self.listener.close()


def test_a_search_against_a_frozen_server_gives_up_naming_it_then_answers_again(pg: Backend, make_workspace,
                                                                                 tmp_path: Path, monkeypatch):
    """A server that stops answering after the connection was made (SIGSTOP of its backend, a proxy
    that stops forwarding) held a search of a long-lived Memory (the MCP server) for ever: keepalives
    are acknowledged by the kernel.  Each statement of a search waits a bounded time; after that the
    search fails naming the server, and once it answers again the next search does, nothing lost."""
    import memdir.api

    monkeypatch.setattr(memdir.api, "SEARCH_ANSWER_SECONDS", 2.0)
    proxy = _FreezableProxy(pg.url)
    config = Backend("postgres", proxy.url, pg.schema).config({"memorySearch": {"provider": "none"}})
    ws = make_workspace({"MEMORY.md": "- billing uses Kafka for ordering\n"})
    try:
        with Memory(ws, config=config, state_dir=tmp_path) as mem:
            mem.sync()
            assert mem.search("kafka").results
            (ws / "memory").mkdir(exist_ok=True)
            (ws / "memory" / "2026-01-02.md").write_text("- kafka retention is seven days\n")
            proxy.frozen.set()
            done, value = _in_thread(lambda: mem.search("kafka retention"), 60)
            assert done, "the search hung on the frozen server"
            assert isinstance(value, StoreError), value
            assert "no answer within 2 s" in str(value) and "127.0.0.1" in str(value), value
            proxy.frozen.clear()
            response = mem.search("kafka retention")
            assert not response.stale, response.warnings
            assert response.results[0].path == "memory/2026-01-02.md"
    finally:
        proxy.close()
