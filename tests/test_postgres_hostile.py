"""PostgreSQL under a team's crashes and races: a writer whose lock connection was killed,
another process taking the agent's lock over meanwhile, timeouts the server imposes.

Runs against a real server (pgserver's PostgreSQL 16 + pgvector, or $MEMDIR_TEST_DATABASE_URL).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import Backend, pg_query
from memdir.api import Memory
from memdir.lock import WriterLockLost


class _GatedProvider:
    """Embeds when the test lets it: the first batch waits until ``go`` is set."""

    id = "gated"
    model = "gated-4"
    provider_key = "gated"
    max_input_bytes = 1 << 20
    dims = 4

    def __init__(self) -> None:
        self.embedding = threading.Event()
        self.go = threading.Event()

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.embedding.set()
        assert self.go.wait(60), "the test never let the batch go"
        return [[1.0, float(len(t) % 7), 0.0, 0.0] for t in texts]

    def close(self) -> None:
        pass


def test_a_writer_whose_lock_connection_was_killed_stops_before_writing_beside_the_new_writer(
        pg: Backend, make_workspace, tmp_path: Path):
    """The connection that holds a sync's advisory lock was closed by the server (an administrator's
    pg_terminate_backend, a proxy or firewall dropping an idle connection): the lock went with it and
    another process took it, but the sync believed it still held it and kept writing beside the new
    writer (two writers of one agent: statistics counted twice, the index thrown away as damaged)."""
    ws = make_workspace({f"memory/n{i:03d}.md": f"heron note number {i}\n" for i in range(100)})  # two batches
    provider = _GatedProvider()
    cfg = pg.config({"memorySearch": {"sync": {"onSearch": False}}})
    with Memory(ws, config=cfg, state_dir=tmp_path, provider=provider) as mem:
        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(_raised(mem.sync)))
        worker.start()
        other = psycopg.connect(pg.url, autocommit=True)
        try:
            assert provider.embedding.wait(60), "the sync never reached its first batch"
            key = mem.store.writer_lock().key
            killed = pg_query(pg.url, "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                                      "WHERE application_name LIKE 'memdir writer %%'")[0][0]
            assert killed == 1
            # another host's writer takes the agent's lock at once
            assert other.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
            provider.go.set()
            worker.join(60)
            assert not worker.is_alive()
        finally:
            provider.go.set()
            other.close()
        assert isinstance(outcome[0], WriterLockLost), outcome
        assert "writer lock" in str(outcome[0]) and "connection" in str(outcome[0]), outcome
        # nothing was written after the lock was lost: at most the batch being embedded then
        assert mem.store.chunk_count() <= 64
        assert mem.store.check(thorough=True) is None
        # and the next sync (the other writer gone) completes the index
        report = mem.sync()
        assert mem.store.chunk_count() == 100 and report.indexed + 64 >= 100


def _raised(fn: Any) -> Any:
    try:
        return fn()
    except BaseException as exc:  # handed to the test
        return exc


def test_a_writer_whose_lock_connection_was_killed_takes_the_free_lock_again_and_finishes(
        pg: Backend, make_workspace, tmp_path: Path):
    """The same, with no other writer about: the sync takes the lock again on a new connection and
    completes, and the lock is held by this process (not left to the dead session) until it ends."""
    ws = make_workspace({f"memory/n{i:03d}.md": f"heron note number {i}\n" for i in range(100)})
    provider = _GatedProvider()
    cfg = pg.config({"memorySearch": {"sync": {"onSearch": False}}})
    with Memory(ws, config=cfg, state_dir=tmp_path, provider=provider) as mem:
        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(_raised(mem.sync)))
        worker.start()
        try:
            assert provider.embedding.wait(60), "the sync never reached its first batch"
            killed = pg_query(pg.url, "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                                      "WHERE application_name LIKE 'memdir writer %%'")[0][0]
            assert killed == 1
        finally:
            provider.go.set()
            worker.join(60)
        assert not worker.is_alive()
        assert not isinstance(outcome[0], BaseException), outcome
        assert outcome[0].indexed == 100 and mem.store.chunk_count() == 100
        assert mem.store.writer_lock().holder() is None  # released at the end
        assert mem.store.check(thorough=True) is None


@pytest.mark.parametrize("table", ["schema_version", "chunks"])
def test_a_statement_the_servers_statement_timeout_cancels_is_named_as_such(table: str, pg: Backend, make_workspace,
                                                                           run_cli):
    """A role or database with a short statement_timeout: the statement cancelled while opening the
    schema was reported as "cannot connect to PostgreSQL", and one cancelled in a search as a bare
    "canceling statement due to statement timeout" naming neither the server nor what to change."""
    ws = make_workspace({"memory/a.md": "the ibis wades in the marsh\n"})
    run_cli("index", "-w", str(ws), env={**pg.env(), "MEMDIR_PROVIDER": "none"}, check=True)
    url = pg.url + ("&" if "?" in pg.url else "?") + "options=-c%20statement_timeout%3D300"
    holder = psycopg.connect(pg.url)  # another session's long transaction holds the table
    try:
        holder.execute(f'LOCK TABLE "{pg.schema}".{table} IN ACCESS EXCLUSIVE MODE')
        proc = run_cli("search", "ibis", "--json", "--no-sync", "-w", str(ws),
                       env={**pg.env(), "MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": url})
    finally:
        holder.close()
    assert proc.returncode == 1, proc.stdout
    error = json.loads(proc.stdout)["error"]["message"]
    assert error.startswith("PostgreSQL at postgresql://") and "cancelled one of memdir's statements" in error, error
    assert "statement_timeout" in error and "cannot connect" not in error, error
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# -- the shared embedding cache ---------------------------------------------------------------------

def test_a_sync_embedding_a_batch_holds_no_lock_on_the_cache_rows_it_found(pg: Backend, make_workspace,
                                                                           tmp_path: Path):
    """Agents syncing overlapping notes share the cache: a sync touched the rows it found before
    embedding, inside its batch transaction, and kept them locked through the embedding and the
    writes.  Agent A touched h0 and went on to write h1 while agent B touched h1 and went on to write
    h0: each waited for the other ("deadlock detected"; 4 agents x 5 syncs of 300 shared notes:
    1-3 syncs failed per run).  The touch now comes after the batch's own cache writes."""
    cfg = pg.config({"memorySearch": {"sync": {"onSearch": False}}})
    seed = _GatedProvider()
    seed.go.set()
    with Memory(make_workspace({"memory/a.md": "the ibis wades\n"}, name="seed"), config=cfg, state_dir=tmp_path,
                provider=seed, agent_id="seed") as mem:
        mem.sync()
    ws = make_workspace({"memory/a.md": "the ibis wades\n", "memory/b.md": "the heron waits\n"})
    provider = _GatedProvider()
    other = psycopg.connect(pg.url)  # another agent's batch transaction
    with Memory(ws, config=cfg, state_dir=tmp_path, provider=provider) as mem:
        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(_raised(mem.sync)))
        worker.start()
        try:
            assert provider.embedding.wait(60), "the sync never reached its batch"  # a.md's vector: a hit
            rows = other.execute(f'SELECT hash FROM "{pg.schema}".embedding_cache FOR UPDATE NOWAIT').fetchall()
            assert len(rows) == 1
        finally:
            provider.go.set()
            worker.join(60)
            other.close()
        assert not isinstance(outcome[0], BaseException), outcome
        assert mem.store.vector_count() == 2 and mem.store.cache_count() == 2


def test_a_failed_cache_write_costs_the_batch_its_vectors_not_the_sync(pg: Backend, make_workspace, tmp_path: Path,
                                                                      monkeypatch):
    """A cache statement that failed inside the batch transaction (another session holding the shared
    table past lock_timeout, a deadlock) aborted that transaction: the sync went on without vectors,
    as meant, but every write then failed with "current transaction is aborted" and so did the sync."""
    from memdir.stores import pgconn

    monkeypatch.setattr(pgconn, "LOCK_TIMEOUT", "1s", raising=False)
    ws = make_workspace({"memory/a.md": "the ibis wades\n", "memory/b.md": "the heron waits\n"})
    provider = _GatedProvider()
    provider.go.set()
    cfg = pg.config({"memorySearch": {"sync": {"onSearch": False}}})
    with Memory(ws, config=cfg, state_dir=tmp_path, provider=provider) as mem:
        mem.store.cache_count()  # the schema exists
        holder = psycopg.connect(pg.url)
        try:
            holder.execute(f'LOCK TABLE "{pg.schema}".embedding_cache IN EXCLUSIVE MODE')  # reads pass, writes wait
            report = mem.sync()
        finally:
            holder.close()
        assert report.indexed == 2 and mem.store.chunk_count() == 2
        assert mem.store.vector_count() == 0 and report.warnings
        assert [h.path for h in mem.search("ibis").results][:1] == ["memory/a.md"]
        mem.sync()
        assert mem.store.vector_count() == 2 and mem.store.cache_count() == 2


# -- the server gone and back -------------------------------------------------------------------------

def test_a_long_lived_memory_fails_at_once_while_the_server_is_gone_and_answers_when_it_is_back(
        pg_url: str, make_workspace, tmp_path: Path, monkeypatch):
    """The pool retries a lost server with a growing back-off (1, 2, 4 … 128 s apart).  While the
    server was down, every call of a long-lived process (an MCP server) waited the whole pool
    timeout (a search twice: 30 s) for a failure libpq reports at once; once it was back, calls kept
    failing until the pool's next retry, minutes later after a long outage (emulated here by
    retries 300 s apart and a pool timeout of 600 s: both waits would outlast the test)."""
    from psycopg_pool.base import AttemptWithBackoff

    from memdir.errors import StoreError
    from memdir.stores import pgconn
    from test_postgres_faults import _in_thread, _scratch_database, _terminate_other_backends

    monkeypatch.setattr(pgconn, "CONNECT_TIMEOUT", 600, raising=False)
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 300.0)
    with _scratch_database(pg_url) as (db, url):
        ws = make_workspace({"memory/a.md": "zebra crossing\n"})
        cfg = Backend("postgres", url, "memdir").config({"memorySearch": {"provider": "none"}})
        with Memory(ws, config=cfg, state_dir=tmp_path) as mem:
            mem.sync()
            pg_query(pg_url, f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')  # the server is gone
            assert _terminate_other_backends(pg_url, db) >= 1
            done, outcome = _in_thread(lambda: mem.search("zebra"), 60)
            assert done, "a search waited for the pool while the server refused every connection"
            assert isinstance(outcome, StoreError) and "cannot connect to PostgreSQL" in str(outcome), outcome
            assert "\n" not in str(outcome)
            pg_query(pg_url, f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')  # and back
            done, outcome = _in_thread(lambda: mem.search("zebra"), 60)
            assert done, "the first search after the server came back waited for the pool's next retry"
            assert not isinstance(outcome, BaseException), outcome
            assert [h.path for h in outcome.results] == ["memory/a.md"]
            (ws / "memory" / "b.md").write_text("zebra stripes\n")
            assert mem.sync().indexed == 1


def test_index_json_names_the_database_index_not_a_sqlite_file(pg: Backend, make_workspace, run_cli):
    """``memdir index --json`` on PostgreSQL reported ``indexPath`` as a SQLite file that does not exist
    (as did the first search's notice): a newcomer checking where the index went
    looked for a file.  ``status`` already named the database."""
    ws = make_workspace({"memory/a.md": "the ibis wades\n"})
    env = {**pg.env(), "MEMDIR_PROVIDER": "none",
           "MEMDIR_DATABASE_URL": pg.url.replace("postgres:@", "postgres:s3cret@", 1)}
    report = json.loads(run_cli("index", "--json", "-w", str(ws), env=env, check=True).stdout)
    status = json.loads(run_cli("status", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert report["indexPath"] == status["indexPath"] and report["indexPath"].startswith("postgresql://")
    assert f"#{pg.schema}/" in report["indexPath"] and "s3cret" not in report["indexPath"]


def test_the_pools_reconnection_reports_stay_out_of_the_clis_one_error_line():
    """A server restarted during ``memdir migrate``/``index``: besides memdir's one error line, the
    CLI printed psycopg_pool's warning for each reconnection attempt ("memdir: WARNING: error
    connecting in 'memdir-…': …").  They are shown with -v."""
    code = ("import argparse, logging, sys; from memdir.cli import _configure_logging; "
            "_configure_logging(argparse.Namespace(verbose=int(sys.argv[1]), quiet=False)); "
            "logging.getLogger('psycopg.pool').warning(\"error connecting in 'memdir-x'\"); "
            # a connection lost mid-sync: psycopg's own line beside memdir's 'lost the connection'
            "logging.getLogger('psycopg').warning('error ignored terminating <psycopg.Pipeline [BAD]>: lost'); "
            "logging.getLogger('memdir.sync').warning('own warning')")
    quiet, verbose = (subprocess.run([sys.executable, "-c", code, v], capture_output=True, text=True, timeout=60)
                      for v in ("0", "1"))
    assert "own warning" in quiet.stderr and "error connecting" not in quiet.stderr, quiet.stderr
    assert "Pipeline" not in quiet.stderr, quiet.stderr
    assert "error connecting" in verbose.stderr and "Pipeline" in verbose.stderr, verbose.stderr
