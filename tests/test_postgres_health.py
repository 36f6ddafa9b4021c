"""A damaged PostgreSQL index heals itself, as a damaged SQLite file does (test_self_heal.py).

Each case damages one agent's rows the way hand edits and bugs do (metadata that is not an
object, BM25 statistics that drifted from the chunks, chunks marked embedded whose vectors are
gone), then runs the real CLI: the search answers, ``status`` says once what happened and which
generation was dropped, ``index`` rebuilds, another agent in the same tables is untouched, and
the shared embedding cache means nothing is embedded again.  A table dropped by hand is damage
no rebuild can mend: the error says what to do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import Backend, pg_query
from memdir.api import Memory
from test_postgres import HashProvider

NONE = {"MEMDIR_PROVIDER": "none"}
N_FILES = 40


def notes() -> dict[str, str]:
    filler = "The weekly review covered budgets, hiring and the roadmap in some detail. " * 6
    return {f"memory/2026-01-{i:03d}.md": f"# Day {i}\n\nToday's codeword is kiwi{i}x.\n\n{filler}\n"
            for i in range(N_FILES)}


def live(pg: Backend, prefix: str = "ws-") -> str:
    """The live generation of the agent whose key starts with ``prefix`` (a workspace-keyed index)."""
    return f"SELECT id FROM \"{pg.schema}\".indexes WHERE starts_with(agent, '{prefix}') AND state = 'live'"


def meta_not_an_object(pg: Backend) -> None:
    pg_query(pg.url, f"UPDATE \"{pg.schema}\".indexes SET meta = '[1, 2]' WHERE id IN ({live(pg)})")


def statistics_drifted(pg: Backend) -> None:
    pg_query(pg.url, f'UPDATE "{pg.schema}".indexes SET n_docs = n_docs + 7 WHERE id IN ({live(pg)})')


def vectors_gone(pg: Backend) -> None:
    pg_query(pg.url, f'UPDATE "{pg.schema}".chunks SET embedded = true WHERE index_id IN ({live(pg)})')


CASES: dict[str, Callable[[Backend], None]] = {
    "meta-not-an-object": meta_not_an_object, "statistics-drifted": statistics_drifted, "vectors-gone": vectors_gone,
}


@pytest.fixture
def built(pg: Backend, make_workspace, run_cli) -> tuple[Path, Path, dict[str, str]]:
    """This workspace's agent and another agent (``bystander``) in the same tables."""
    ws = make_workspace(notes(), name="ws")
    other = make_workspace({"memory/b.md": "The bystander's codeword is fig8z.\n"}, name="other")
    env = {**NONE, **pg.env()}
    run_cli("index", "-w", str(ws), env=env, check=True)
    run_cli("index", "-w", str(other), "--agent", "bystander", env=env, check=True)
    return ws, other, env


@pytest.mark.parametrize("case", list(CASES))
def test_each_kind_of_damage_is_healed_and_search_still_answers(case, built, pg: Backend, run_cli):
    ws, other, env = built
    before = pg_query(pg.url, live(pg))
    CASES[case](pg)

    found = run_cli("search", "kiwi17x", "--json", "-w", str(ws), env=env)
    assert found.returncode == 0, found.stderr
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["memory/2026-01-017.md"]
    st = run_cli("status", "--json", "-w", str(ws), env=env)
    assert st.returncode == 0, st.stderr
    said = found.stderr + st.stderr
    assert said.count("was damaged") == 1, said  # said once, naming the index and the generation dropped
    status = json.loads(st.stdout)
    assert status["recovered"]["droppedGeneration"] == before[0][0]
    assert f"dropped its rows (generation {before[0][0]})" in said and status["indexPath"] in said
    # Damage the search ran into (the metadata) is rebuilt by that search; damage only status's
    # full check finds is set aside there and rebuilt by the next sync.
    assert status["files"] in (0, N_FILES)
    text = run_cli("status", "-w", str(ws), env=env, check=True).stdout
    assert f"Recovered: the index was damaged ({status['recovered']['problem']}); dropped its rows" in text

    again = run_cli("index", "-w", str(ws), env=env)
    assert again.returncode == 0 and "was damaged" not in again.stderr, again.stderr
    status = json.loads(run_cli("status", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert status["files"] == N_FILES and status["dirty"] is False
    assert not pg_query(pg.url, f'SELECT 1 FROM "{pg.schema}".chunks WHERE index_id = %s', (before[0][0],))
    # the other agent in the same tables never noticed
    fig = json.loads(run_cli("search", "fig8z", "--json", "-w", str(other), "--agent", "bystander", env=env,
                             check=True).stdout)
    assert [r["path"] for r in fig["results"]] == ["memory/b.md"] and "recovered" not in json.loads(
        run_cli("status", "--json", "-w", str(other), "--agent", "bystander", env=env, check=True).stdout)


def test_a_recovery_embeds_nothing_again(pg: Backend, make_workspace, tmp_path: Path):
    ws = make_workspace(notes(), name="ws")
    provider = HashProvider()
    with Memory(ws, config=pg.config(), state_dir=tmp_path, provider=provider) as mem:
        assert mem.sync().embedded > 0
    paid = len(provider.embedded)
    meta_not_an_object(pg)
    told: list[str] = []
    with Memory(ws, config=pg.config(), state_dir=tmp_path, provider=provider, notice=told.append) as mem:
        report = mem.sync()
        assert report.full and report.indexed == N_FILES
        assert len(provider.embedded) == paid, "the rebuild re-embedded text the shared cache held"
        assert len(told) == 1 and "embedding cache is kept" in told[0]
        assert mem.recoveries[0]["problem"].startswith("the index metadata")
        assert [r.path for r in mem.search("kiwi5x", mode="keyword").results][:1] == ["memory/2026-01-005.md"]


def test_a_table_dropped_by_hand_is_named_with_what_to_do(pg: Backend, make_workspace, run_cli):
    ws = make_workspace({"memory/a.md": "the quokka ate lunch"})
    env = {**NONE, **pg.env()}
    run_cli("index", "-w", str(ws), env=env, check=True)
    pg_query(pg.url, f'DROP TABLE "{pg.schema}".index_state')
    proc = run_cli("search", "quokka", "-w", str(ws), env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "index_state is missing from schema" in proc.stderr and f'DROP SCHEMA "{pg.schema}" CASCADE' in proc.stderr
    pg_query(pg.url, f'DROP SCHEMA "{pg.schema}" CASCADE')  # as the message says: memdir starts over
    hits = json.loads(run_cli("search", "quokka", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert [r["path"] for r in hits["results"]] == ["memory/a.md"]


def _raised(fn: Callable[[], object]) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:  # handed back to the test
        return exc
    return None


_HOLD_WRITER = """
import json, sys, time
from memdir.api import Memory
mem = Memory(sys.argv[1], config=json.loads(sys.argv[2]), state_dir=sys.argv[3])
lock = mem.store.writer_lock()
assert lock.acquire(5)
print("held", flush=True)
time.sleep(120)
"""


def test_healing_waits_a_bounded_time_for_a_writer_that_never_finishes(pg: Backend, make_workspace, tmp_path: Path,
                                                                        monkeypatch):
    # Before: healing a damaged index waited for the writer lock without end: a search (or any
    # open) of a damaged index hung for as long as another client held it, or a memdir writer was
    # stopped with Ctrl-Z.  Now it gives up with one line naming the holder and what to do.
    import os
    import signal
    import subprocess
    import sys
    import threading

    import psycopg

    import memdir.lock
    import memdir.stores.pghealth
    from memdir.lock import LockTimeout

    monkeypatch.setattr(memdir.stores.pghealth, "RECOVER_LOCK_WAIT", 1.0, raising=False)
    monkeypatch.setattr(memdir.lock, "STOPPED_WRITER_WAIT", 0.0)
    ws = make_workspace({"memory/a.md": "the quokka ate lunch\n"})
    config = pg.config({"memorySearch": {"provider": "none"}})
    with Memory(ws, config=config, state_dir=tmp_path) as mem:
        mem.sync()
        key = mem.store.writer_lock().key

    def open_damaged() -> BaseException | None:
        meta_not_an_object(pg)
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                with Memory(ws, config=config, state_dir=tmp_path) as opened:
                    opened.search("quokka")
                outcome.append(None)
            except BaseException as exc:  # handed back to the test
                outcome.append(exc)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "healing waited for the writer lock without end"
        return outcome[0]

    other = psycopg.connect(pg.url, autocommit=True)  # a client that is not memdir holds the lock
    try:
        other.execute("SELECT pg_advisory_lock(%s)", (key,))
        backend = other.info.backend_pid
        got = open_damaged()
        assert isinstance(got, LockTimeout), got
        assert "is damaged (the index metadata" in str(got) and "was not rebuilt" in str(got)
        who = f"a PostgreSQL client that is not memdir (server backend pid {backend})"
        assert f"{who} has held its writer lock for 1 s" in str(got)
        assert "pid ?" not in str(got) and "\n" not in str(got)
    finally:
        other.close()

    holder = subprocess.Popen([sys.executable, "-c", _HOLD_WRITER, str(ws), json.dumps(config), str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        os.kill(holder.pid, signal.SIGSTOP)  # a memdir writer of this host, stopped with Ctrl-Z
        monkeypatch.setattr(memdir.stores.pghealth, "RECOVER_LOCK_WAIT", 60.0)  # given up on sooner: it is stopped
        with Memory(ws, config=config, state_dir=tmp_path) as mem:  # a sync, too, gives up on it
            syncing: list[BaseException | None] = []
            t = threading.Thread(target=lambda: syncing.append(_raised(mem.sync)), daemon=True)
            t.start()
            t.join(30)
            assert not t.is_alive(), "a sync waited for a stopped writer without end"
            assert isinstance(syncing[0], LockTimeout) and f"kill -CONT {holder.pid}" in str(syncing[0]), syncing
        got = open_damaged()
        assert isinstance(got, LockTimeout), got
        assert f"pid {holder.pid} holds the writer lock" in str(got) and f"kill -CONT {holder.pid}" in str(got)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
    with Memory(ws, config=config, state_dir=tmp_path) as mem:  # the lock free again: healed
        assert [r.path for r in mem.search("quokka").results] == ["memory/a.md"] and mem.recoveries


def test_a_stopped_writer_with_another_host_name_on_this_machine_is_seen_stopped(pg: Backend, make_workspace,
                                                                                 tmp_path: Path):
    """A writer in a container of its own host name that shares this one's pids (`--pid=host`, a
    pod sharing its process namespace) was judged by its host name: stopped with Ctrl-Z, it was
    'another memdir process (pid N on host box-2)' for ever, never the stopped writer it was."""
    import os
    import shutil
    import signal
    import subprocess
    import sys

    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run(
            ["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare to give a process a host name of its own")
    ws = make_workspace({"memory/a.md": "the quokka ate lunch\n"})
    config = pg.config({"memorySearch": {"provider": "none"}})
    holder = subprocess.Popen(["unshare", "--uts", "sh", "-c", 'hostname box-2 && exec "$0" -c "$1" "$2" "$3" "$4"',
                               sys.executable, _HOLD_WRITER, str(ws), json.dumps(config), str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        os.kill(holder.pid, signal.SIGSTOP)
        with Memory(ws, config=config, state_dir=tmp_path) as mem:
            who = mem.store.writer_lock().holder()
        assert who is not None and who["pid"] == holder.pid and who["host"] == "box-2"
        assert who.get("stopped") is True
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
