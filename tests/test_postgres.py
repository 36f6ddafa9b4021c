"""PostgreSQL-only behaviour: many agents and hosts on one server, crashes, locks, HNSW, errors.

Runs against a real server (pgserver's PostgreSQL 16 + pgvector, or $MEMDIR_TEST_DATABASE_URL).
The behaviours both backends share are in test_store_contract.py, test_sync.py and friends.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from helpers import Backend, cli_env, deep_merge, pg_query
from memdir.api import Memory
from memdir.config import load_config
from memdir.stores import open_store


class HashProvider:
    """A deterministic embedding provider (no model): same text, same unit vector; counts its calls."""

    id = "hash"
    model = "sha256-16"
    provider_key = "hash"
    max_input_bytes = 1 << 20
    dims = 16

    def __init__(self) -> None:
        self.embedded: list[str] = []

    @staticmethod
    def vector(text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(16)
        return (v / np.linalg.norm(v)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.vector(text)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded.extend(texts)
        return [self.vector(t) for t in texts]

    def close(self) -> None:
        pass


def _snapshot(mem: Memory) -> tuple[dict, dict]:
    """Files and chunks of an index, comparable across agents (ids include path, lines, hash, model)."""
    files, chunks = {}, {}
    for path, source, fhash, _mtime, _size, rows in mem.store.export_files():
        files[(path, source)] = fhash
        for c in rows:
            chunks[c.id] = (c.path, c.start_line, c.end_line, c.text, c.embedding is not None)
    return files, chunks


def _wait(predicate, timeout: float = 60.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


# -- the writer lock --------------------------------------------------------------------------

def test_writer_lock_is_an_advisory_lock_across_processes_and_dies_with_its_holder(pg: Backend, tmp_path: Path):
    settings = load_config(overrides=pg.config(), state_dir=tmp_path).settings
    store = open_store(settings)
    try:
        lock = store.writer_lock()
        assert lock.acquire(0)
        holder = lock.holder()
        assert holder["pid"] == os.getpid() and holder["host"]
        probe = ("import sys; from memdir.config import load_config; from memdir.stores import open_store; "
                 "s = open_store(load_config().settings); l = s.writer_lock(); ok = l.acquire(float(sys.argv[1])); "
                 "print(ok, flush=True); import os, time; time.sleep(float(sys.argv[2])) if ok else None; "
                 "os._exit(0) if sys.argv[3] == 'exit' else None")
        env = cli_env(tmp_path, **pg.env())
        other = subprocess.run([sys.executable, "-c", probe, "0", "0", "exit"], env=env, capture_output=True,
                               text=True, timeout=60)
        assert other.stdout.strip() == "False", other.stderr  # another process cannot take it
        lock.release()
        assert lock.holder() is None
        # a holder killed with SIGKILL: the server ends its session and the lock is free again
        proc = subprocess.Popen([sys.executable, "-c", probe, "0", "300", "exit"], env=env, stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "True"
        assert lock.holder()["pid"] == proc.pid
        assert not lock.acquire(0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert lock.acquire(30)
        lock.release()
    finally:
        store.close()


def test_two_threads_of_one_process_exclude_each_other(pg: Backend, tmp_path: Path):
    import threading

    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path).settings)
    inside: list[int] = []
    overlaps: list[int] = []

    def worker() -> None:
        lock = store.writer_lock()
        for _ in range(10):
            assert lock.acquire(30)
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            time.sleep(0.001)
            inside.pop()
            lock.release()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps
    store.close()


# -- many processes, many agents --------------------------------------------------------------

def _workspace(make_workspace, n_files: int, name: str = "ws") -> Path:
    words = "apple banana cherry delta echo foxtrot golf hotel india juliet kilo lima mike".split()
    files = {}
    for i in range(n_files):
        body = "\n".join(f"- note {i}.{j}: " + " ".join(words[(i + j + k) % len(words)] for k in range(12))
                         for j in range(30))
        files[f"memory/2025-{1 + i % 12:02d}-{1 + i % 28:02d}-{i}.md"] = f"# file {i}\n{body}\nmarker{i}\n"
    return make_workspace(files, name=name)


def test_two_processes_syncing_the_same_agent(pg: Backend, make_workspace, state_dir: Path):
    ws = _workspace(make_workspace, 300)
    env = cli_env(state_dir, MEMDIR_PROVIDER="none", **pg.env())
    cmd = [sys.executable, "-m", "memdir", "index", "--json", "-w", str(ws)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    reports = [json.loads(o[0]) for o in outs]
    # one of them built the index; the other waited for the lock and found nothing left to do
    assert sorted(r["indexed"] for r in reports) == [0, 300]
    cfg = pg.config({"memorySearch": {"provider": "none"}})
    with Memory(ws, config=cfg, state_dir=state_dir) as mem, \
            Memory(ws, config=cfg, state_dir=state_dir, agent_id="clean") as clean:
        clean.sync(force=True)
        assert _snapshot(mem) == _snapshot(clean)
        assert mem.status()["chunks"] == clean.status()["chunks"]
    generations = pg_query(pg.url, f'SELECT state, count(*) FROM "{pg.schema}".indexes GROUP BY state')
    assert generations == [("live", 2)]  # this workspace's index and the clean one, nothing left over


def test_a_hundred_agents_share_one_database_without_leaking(pg: Backend, make_workspace, state_dir: Path):
    provider = HashProvider()
    shared = "The team handbook says we deploy on Tuesdays after the standup."
    cfg = pg.config()
    n = 100
    for i in range(n):
        ws = make_workspace({f"memory/agent-{i}.md": f"Agent {i} keeps the secret codeword zq{i}x in mind.\n",
                             "memory/handbook.md": shared + "\n"}, name=f"ws{i}")
        with Memory(ws, agent_id=f"agent-{i}", config=cfg, state_dir=state_dir, provider=provider) as mem:
            assert mem.sync().indexed == 2
    # the shared embedding cache: the common note was embedded once for all hundred agents
    assert len(provider.embedded) == n + 1 and sum(shared in t for t in provider.embedded) == 1
    for i in range(n):
        ws = state_dir.parent / f"ws{i}"
        with Memory(ws, agent_id=f"agent-{i}", config=cfg, state_dir=state_dir, provider=provider) as mem:
            assert [h.path for h in mem.store.keyword_search([f"zq{i}x"], 10)] == [f"memory/agent-{i}.md"]
            j = (i + 37) % n
            assert not mem.store.keyword_search([f"zq{j}x"], 10)  # another agent's words are not here
            mine = {f"memory/agent-{i}.md", "memory/handbook.md"}
            assert {r.path for r in mem.search(f"zq{j}x", sync=False).results} <= mine
            # agent j's chunk vector is in the table (cosine 1.0 to this query) but not in this agent's index
            theirs = HashProvider.vector(f"Agent {j} keeps the secret codeword zq{j}x in mind.\n")
            assert {h.path for h in mem.store.vector_search(theirs, 10)} == mine
            assert mem.status()["files"] == 2
    rows = pg_query(pg.url, f'SELECT count(DISTINCT agent), count(*) FROM "{pg.schema}".indexes')
    assert rows == [(n, n)]


# -- crashes ----------------------------------------------------------------------------------

def test_kill_9_during_a_postgres_reindex(pg: Backend, make_workspace, state_dir: Path):
    ws = _workspace(make_workspace, 1500)
    env = cli_env(state_dir, MEMDIR_PROVIDER="none", **pg.env())
    subprocess.run([sys.executable, "-m", "memdir", "index", "-w", str(ws)], env=env, check=True, timeout=600)
    building = (f'SELECT count(*) FROM "{pg.schema}".chunks c JOIN "{pg.schema}".indexes i ON i.id = c.index_id '
                "WHERE i.state = 'building'")
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "index", "--force", "-w", str(ws)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait(lambda: pg_query(pg.url, building)[0][0] > 0), "the rebuild never started writing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert pg_query(pg.url, building)[0][0] > 0, "the kill should land during the rebuild"
    out = subprocess.run([sys.executable, "-m", "memdir", "search", "marker42", "--no-sync", "--json", "-w", str(ws)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and '"memory/' in out.stdout, out.stderr  # the old index still answers
    again = subprocess.run([sys.executable, "-m", "memdir", "index", "-w", str(ws), "--json"], env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    states = pg_query(pg.url, f'SELECT state FROM "{pg.schema}".indexes')
    assert states == [("live",)], "the orphaned generation is cleaned up by the next sync"
    cfg = pg.config({"memorySearch": {"provider": "none"}})
    with Memory(ws, config=cfg, state_dir=state_dir) as mem, \
            Memory(ws, config=cfg, state_dir=state_dir, agent_id="clean") as clean:
        clean.sync(force=True)
        assert _snapshot(mem) == _snapshot(clean)
        assert mem.status()["files"] == 1500


# -- vectors ----------------------------------------------------------------------------------

def test_large_agents_get_their_own_hnsw_index(pg: Backend, make_workspace, state_dir: Path):
    # 1500 one-line chunks: enough rows that the planner prefers an index to sorting them all
    files = {f"memory/n{i}.md": "".join(f"note {i}.{j} about topic{(i + j) % 7}\n" for j in range(50))
             for i in range(30)}
    ws = make_workspace(files)
    provider = HashProvider()
    cfg = pg.config({"memorySearch": {"chunking": {"tokens": 8, "overlap": 0}}}, hnswMinVectors=1000)
    with Memory(ws, config=cfg, state_dir=state_dir, provider=provider) as mem:
        mem.sync()
        assert mem.status()["vector"]["path"] == "hnsw"
        ix = pg_query(pg.url, f"SELECT id FROM \"{pg.schema}\".indexes WHERE state = 'live'")[0][0]
        scans = f"SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'vectors_hnsw_{ix}'"
        before = pg_query(pg.url, scans)[0][0]
        assert mem.status()["vector"]["vectors"] == 1500
        target = next(c for path, *_, rows in mem.store.export_files() if path == "memory/n17.md" for c in rows)
        q = target.embedding
        hits = mem.store.vector_search(q, 5)
        exact = sorted(((float(np.dot(q, c.embedding)), c.path) for *_, rows in mem.store.export_files()
                        for c in rows), reverse=True)[:5]
        assert [h.path for h in hits] == [p for _, p in exact]
        assert hits[0].id == target.id
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        # statistics reach pg_stat_* when the (pooled, now idle) backend flushes them: within ~10 s
        assert _wait(lambda: pg_query(pg.url, scans)[0][0] > before, timeout=30, step=0.5), "HNSW index not used"
        # a small agent in the same tables is searched exactly and never sees the large one's rows
        small = make_workspace({"memory/s.md": "a small agent's only note\n"}, name="small")
        with Memory(small, agent_id="small", config=cfg, state_dir=state_dir, provider=provider) as other:
            other.sync()
            assert other.status()["vector"]["path"] == "exact"
            assert [h.path for h in other.store.vector_search(q, 5)] == ["memory/s.md"]


# -- keyword ranking --------------------------------------------------------------------------

def test_bm25_matches_sqlite_fts5_with_the_simple_configuration(pg: Backend, make_workspace, tmp_path: Path):
    from memdir.query import keyword_terms

    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(60)]
    files = {f"memory/f{i}.md": " ".join(rng.choice(vocab, size=int(rng.integers(5, 60)))) for i in range(120)}
    ws = make_workspace(files)
    base = {"memorySearch": {"provider": "none"}}
    with Memory(ws, config=base, state_dir=tmp_path / "a") as lite, \
            Memory(ws, config=pg.config(base, textSearchConfig="simple"), state_dir=tmp_path / "b") as post:
        lite.sync()
        post.sync()
        for query in ("w1", "w2 w3", "w5 w7 w11 w13", "w59 w0"):
            terms = keyword_terms(query)
            a = [(h.id, round(h.score, 4)) for h in lite.store.keyword_search(terms, 20)]
            b = [(h.id, round(h.score, 4)) for h in post.store.keyword_search(terms, 20)]
            assert len(a) == len(b) and a, query
            assert {i: s for i, s in a} == pytest.approx({i: s for i, s in b}, abs=2e-3), query


def test_words_in_half_the_chunks_are_left_out_of_the_match(pg: Backend, tmp_path: Path):
    """As SQLite does: their IDF is floored at 1e-6, so leaving them out changes no score, and a
    match on them would visit most rows.  The count they are pruned by is a lower bound kept true
    by the churn since it was taken, so a word that stops being common is matched again at once."""
    from memdir.query import keyword_terms
    from memdir.stores import ChunkRow

    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path, agent_id="freq").settings)

    def write(file: int, common: bool) -> None:
        path = f"memory/f{file:02d}.md"
        rows = [ChunkRow(f"{file}:{j}", path, "memory", j + 1, j + 1, f"h{file}:{j}", "m",
                         f"{'common ' if common else ''}filler words {file} {j}{' rare' if j == 7 else ''}")
                for j in range(100)]
        with store.transaction():
            store.replace_file(path, "memory", f"fh{file}{common}", 1, 1, rows)

    try:
        for f in range(21):
            write(f, common=True)
        store.optimize()
        frequent = {w for (w,) in pg_query(pg.url, f'SELECT lexeme FROM "{pg.schema}".frequent_lexemes')}
        assert {"common", "filler", "words", "word"} <= frequent and "rare" not in frequent
        terms = keyword_terms("common rare")
        hits = store.keyword_search(terms, 50)
        assert sorted(h.id for h in hits) == sorted(f"{f}:7" for f in range(21))  # only the rare word matched
        full = store.keyword_scores(terms, [h.id for h in hits])  # every phrase, IDF floored
        assert {h.id: h.score for h in hits} == pytest.approx(full, abs=1e-5)
        assert len(store.keyword_search(keyword_terms("common filler"), 10)) == 10  # the rarest phrase is kept
        for f in range(12):  # 1200 of 2100 chunks lose the word: it is no longer in half of them
            write(f, common=False)
        assert len(store.keyword_search(terms, 2100)) == 900 + 12  # matched again before any recount
        store.optimize()  # the churn (2400 chunks) asks for a recount
        assert "common" not in {w for (w,) in pg_query(pg.url, f'SELECT lexeme FROM "{pg.schema}".frequent_lexemes')}
    finally:
        store.close()


# -- configuration and errors -----------------------------------------------------------------

def test_status_deep_names_backend_server_and_pgvector(pg: Backend, make_workspace, run_cli):
    ws = make_workspace({"memory/a.md": "hello"})
    env = {"MEMDIR_PROVIDER": "none", **pg.env()}
    run_cli("index", "-w", str(ws), env=env, check=True)
    st = json.loads(run_cli("status", "--deep", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert st["store"]["backend"] == "postgres" and st["indexExists"] is True
    assert st["postgres"]["server"].startswith("PostgreSQL 16") and st["postgres"]["pgvector"] >= "0.5"
    assert st["indexPath"].startswith("postgresql://") and f"#{pg.schema}/" in st["indexPath"]
    text = run_cli("status", "--deep", "-w", str(ws), env=env, check=True).stdout
    assert "Backend: postgres · PostgreSQL 16" in text and "pgvector" in text


def test_missing_extra_is_named(make_workspace, run_cli, state_dir: Path):
    ws = make_workspace({"memory/a.md": "hello"})
    code = ("import sys; sys.modules['psycopg'] = None; from memdir.cli import main; "
            f"sys.exit(main(['status', '-w', {str(ws)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=cli_env(state_dir, MEMDIR_STORE_DRIVER="postgres",
                                      MEMDIR_DATABASE_URL="postgresql://localhost/x"))
    assert proc.returncode == 1 and "pip install 'memdir[postgres]'" in proc.stderr, proc.stderr


def test_unreachable_server_is_a_clear_error_without_the_password(make_workspace, run_cli):
    ws = make_workspace({"memory/a.md": "hello"})
    env = {"MEMDIR_STORE_DRIVER": "postgres", "MEMDIR_DATABASE_URL": "postgresql://bob:s3cret@127.0.0.1:9/nodb"}
    proc = run_cli("search", "hello", "-w", str(ws), env=env)
    assert proc.returncode == 1
    assert "cannot connect to PostgreSQL at postgresql://bob@127.0.0.1:9/nodb" in proc.stderr
    assert "s3cret" not in proc.stderr


def test_schema_is_versioned_and_a_newer_database_is_refused(pg: Backend, tmp_path: Path):
    from memdir.stores.pgschema import LATEST

    settings = load_config(overrides=pg.config(), state_dir=tmp_path).settings
    open_store(settings).close()
    open_store(settings).close()  # idempotent
    versions = pg_query(pg.url, f'SELECT version FROM "{pg.schema}".schema_version ORDER BY version')
    assert [v for (v,) in versions] == list(range(1, LATEST + 1))
    pg_query(pg.url, f"INSERT INTO \"{pg.schema}\".schema_version(version, description) VALUES ({LATEST + 1}, 'x')")
    with pytest.raises(RuntimeError, match="newer than this memdir"):
        open_store(settings)


# -- memdir migrate ---------------------------------------------------------------------------

def test_migrate_to_postgres_and_back_reembeds_nothing(pg: Backend, make_workspace, tmp_path: Path):
    ws = _workspace(make_workspace, 40)
    provider = HashProvider()
    lite_cfg = deep_merge(pg.config(), {"memorySearch": {"store": {"driver": "sqlite"}}})  # dsn set, not used
    with Memory(ws, agent_id="mig", config=lite_cfg, state_dir=tmp_path / "a", provider=provider) as lite:
        lite.sync()
        embedded = len(provider.embedded)
        before = _snapshot(lite)
        expected = [(r.path, r.start_line) for r in lite.search("banana marker7", sync=False).results]
        report = lite.migrate("postgres")
        assert (report["files"], report["vectors"]) == (40, before[1].__len__())
        assert report["cacheEntries"] == lite.store.cache_count() > 0
    with Memory(ws, agent_id="mig", config=pg.config(), state_dir=tmp_path / "a", provider=provider) as post:
        again = post.sync()
        assert not again.full and again.indexed == 0 and len(provider.embedded) == embedded
        assert _snapshot(post) == before
        assert [(r.path, r.start_line) for r in post.search("banana marker7", sync=False).results] == expected
        assert post.store.cache_count() == report["cacheEntries"]
        # and back, into a fresh SQLite index in another state folder
        back_cfg = pg.config({"memorySearch": {"store": {"path": str(tmp_path / "b" / "copy.sqlite")}}})
    with Memory(ws, agent_id="mig", config=back_cfg, state_dir=tmp_path / "b", provider=provider) as post2:
        assert post2.migrate("sqlite")["files"] == 40
    with Memory(ws, agent_id="mig", config={"memorySearch": {"store": {"path": str(tmp_path / "b" / "copy.sqlite")}}},
                state_dir=tmp_path / "b", provider=provider) as lite2:
        assert lite2.sync().indexed == 0 and len(provider.embedded) == embedded
        assert _snapshot(lite2) == before


def test_migrate_cli(pg: Backend, make_workspace, run_cli):
    ws = make_workspace({"memory/a.md": "the quokka ate lunch", "MEMORY.md": "# prefs\ndark mode"})
    run_cli("index", "-w", str(ws), env={"MEMDIR_PROVIDER": "none"}, check=True)
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    same = run_cli("migrate", "--to", "sqlite", "-w", str(ws), env=env)
    assert same.returncode == 1 and 'store.driver is already "sqlite"' in same.stderr
    out = json.loads(run_cli("migrate", "--to", "postgres", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert (out["files"], out["chunks"]) == (2, 2) and out["to"].startswith("postgresql://")
    env["MEMDIR_STORE_DRIVER"] = "postgres"
    report = json.loads(run_cli("index", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert not report["full"] and report["indexed"] == 0
    hits = json.loads(run_cli("search", "quokka", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert hits["results"][0]["path"] == "memory/a.md"


def test_migrate_waits_for_the_locks_as_long_as_asked(pg: Backend, make_workspace, tmp_path: Path):
    """``migrate(..., lock_timeout=math.inf)``, "wait as long as it takes", raised OverflowError
    ("timestamp out of range for platform time_t") from the writer lock; NaN (which ``sync`` refuses)
    was taken, and its deadline never came: behind a held lock it waited for ever."""
    import math

    ws = make_workspace({"memory/a.md": "the quokka ate lunch", "MEMORY.md": "# prefs\ndark mode"})
    lite_cfg = deep_merge(pg.config(), {"memorySearch": {"provider": "none", "store": {"driver": "sqlite"}}})
    with Memory(ws, agent_id="inf", config=lite_cfg, state_dir=tmp_path) as lite:
        lite.sync()
        with pytest.raises(ValueError, match="lock_timeout must be a number of seconds or None, not NaN"):
            lite.migrate("postgres", lock_timeout=math.nan)
        assert lite.migrate("postgres", lock_timeout=math.inf)["files"] == 2
        with Memory(ws, agent_id="inf", config=deep_merge(pg.config(), {"memorySearch": {"provider": "none"}}),
                    state_dir=tmp_path / "b") as post:
            back = post.migrate("sqlite", lock_timeout=1e300)
        assert back["files"] == 2


def test_forward_migration_keeps_an_older_schemas_data(pg: Backend, tmp_path: Path):
    import psycopg

    from memdir.stores.pgschema import LATEST, migrate

    with psycopg.connect(pg.url, autocommit=True) as conn:
        migrate(conn, pg.schema, upto=1)  # a database created by the first release
        conn.execute("INSERT INTO indexes(agent, state, ts_config, meta) VALUES ('main', 'live', 'english', "
                     "'{\"model\": \"old\"}') RETURNING id")
        conn.execute("INSERT INTO files(index_id, path, source, hash, mtime, size) VALUES (1, 'memory/a.md', "
                     "'memory', 'h', 1, 1)")
        conn.execute("INSERT INTO chunks(index_id, id, path, source, start_line, end_line, hash, model, text, tsv, "
                     "doc_len, embedded, updated_at) VALUES (1, 'c1', 'memory/a.md', 'memory', 1, 1, 'h', 'old', "
                     "'the quokka ate lunch', to_tsvector('simple', 'the quokka ate lunch'), 4, false, 0)")
    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path, agent_id="main").settings)
    try:
        versions = [v for (v,) in pg_query(pg.url, f'SELECT version FROM "{pg.schema}".schema_version ORDER BY 1')]
        assert versions == list(range(1, LATEST + 1)) and LATEST >= 2
        assert store.read_meta() == {"model": "old"}
        assert list(store.file_rows()) == [("memory/a.md", "memory")]
        assert [h.id for h in store.keyword_search(["quokka"], 5)] == ["c1"]
        assert store.describe()["schemaVersion"] == LATEST
    finally:
        store.close()


# -- quality ----------------------------------------------------------------------------------

def test_gate_quality_matches_sqlite(pg_url: str):
    """The gate dataset on both backends, hybrid and keyword: recall@k within 0.02 of SQLite.

    (The full comparison on LoCoMo dev is ``memdir bench backends --quality``; README and the
    closing note of issue 15 give its figures.)
    """
    from memdir.bench.backends import quality_side_by_side

    report = quality_side_by_side(Path(__file__).parent / "data" / "gate", dsn=pg_url, ks=(1, 3, 6))
    runs = report["runs"]
    for mode in ("hybrid", "keyword"):
        lite, post = runs[f"sqlite:{mode}"], runs[f"postgres:{mode}"]
        assert lite["queries"] == post["queries"] > 0
        assert not lite["fallback"] and not post["fallback"], (lite["fallback"], post["fallback"])
        for k in (1, 3, 6):
            assert post["overall"]["recall"][str(k)] >= lite["overall"]["recall"][str(k)] - 0.02, (mode, k)


def test_config_show_never_prints_the_database_password(run_cli, make_workspace):
    ws = make_workspace({"memory/a.md": "a"})
    out = run_cli("config", "show", "-w", str(ws), env={"MEMDIR_DATABASE_URL": "postgresql://bob:s3cret@db:5432/m"},
                  check=True).stdout
    assert "postgresql://bob:***@db:5432/m" in out and "s3cret" not in out


def test_config_show_names_the_postgresql_index_not_an_unused_sqlite_file(run_cli, make_workspace):
    ws = make_workspace({"memory/a.md": "a"})
    env = {"MEMDIR_DATABASE_URL": "postgresql://bob:s3cret@db:5432/m", "MEMDIR_STORE_DRIVER": "postgres"}
    proc = run_cli("config", "show", "-w", str(ws), "--agent", "bot", "--json", env=env, check=True)
    rows = {row["key"]: row["value"] for row in json.loads(proc.stdout)["settings"]}
    assert rows["memorySearch.store.driver"] == "postgres"
    assert rows["indexPath"] == "postgresql://bob@db:5432/m#memdir/bot", rows["indexPath"]
    assert "s3cret" not in proc.stdout


def test_a_bad_schema_name_is_named_as_the_user_writes_it(run_cli, make_workspace):
    ws = make_workspace({"memory/a.md": "a"})
    proc = run_cli("config", "show", "-w", str(ws), env={"MEMDIR_PG_SCHEMA": "1bad"})
    assert proc.returncode != 0
    assert "memorySearch.store.postgres.schema = '1bad' from $MEMDIR_PG_SCHEMA" in proc.stderr, proc.stderr
    assert "dbSchema" not in proc.stderr and "db_schema" not in proc.stderr


# -- the side-by-side bench -------------------------------------------------------------------

def test_bench_backends_measures_both_backends_side_by_side(pg_url: str, run_cli, tmp_path: Path):
    out = tmp_path / "out"
    proc = run_cli("bench", "backends", "--dsn", pg_url, "--sizes", "300", "--queries", "20", "--budget", "0.5",
                   "--concurrency", "2", "--seconds", "1.5", "--work-dir", str(tmp_path / "work"), "--out", str(out),
                   "--quiet", timeout=900)
    try:
        assert proc.returncode == 0, proc.stderr
        report = json.loads((out / "report.json").read_text())
        entry = report["sizes"]["300"]
        assert entry["chunks"] >= 300
        for backend in ("sqlite", "postgres"):
            e = entry[backend]
            assert e["index"]["chunks"] == entry["chunks"] and e["index"]["chunksPerSecond"] > 0
            assert e["noopSyncMs"] > 0 and e["diskBytes"] > 100_000
            for mode in ("keyword", "vector", "hybrid"):
                assert e[mode]["n"] >= 20 and 0 < e[mode]["p50"] <= e[mode]["p95"], (backend, mode)
            conc = e["concurrent"]
            assert conc["searchers"] == 2 and conc["queriesPerSecond"] > 0 and conc["n"] > 2
        assert len(report["machine"]["loadBefore"]) == 3 and report["machine"]["cpus"] >= 1
        table = proc.stdout.splitlines()
        assert any(line.startswith(f"| {entry['chunks']} | sqlite") for line in table)
        assert any(line.startswith(f"| {entry['chunks']} | postgres (exact)") and "| 2× " in line for line in table)
        assert "load average" in proc.stdout
    finally:
        pg_query(pg_url, 'DROP SCHEMA IF EXISTS "bench_300" CASCADE')


@pytest.mark.parametrize("to", ["postgres", "sqlite"])
def test_migrate_without_a_source_index_creates_nothing(pg: Backend, make_workspace, run_cli, state_dir: Path,
                                                        to: str):
    # Before: `memdir migrate --to postgres` of a workspace never indexed created an empty SQLite
    # index (and copied its nothing into the database) and said "copied 0 files"; --to sqlite
    # likewise left an empty index file behind.
    ws = make_workspace({"memory/a.md": "the quokka ate lunch"})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    if to == "sqlite":
        env["MEMDIR_STORE_DRIVER"] = "postgres"
    out = run_cli("migrate", "--to", to, "--json", "-w", str(ws), env=env)
    assert out.returncode == 1, out.stdout
    error = json.loads(out.stdout)["error"]["message"]
    assert error.startswith("nothing to migrate: ") and "holds no index yet (run memdir index first)" in error, error
    assert "Traceback" not in out.stderr
    assert not list(state_dir.rglob("*.sqlite*")), list(state_dir.rglob("*"))
    agents = pg_query(pg.url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (pg.schema,))
    if agents[0][0]:
        assert pg_query(pg.url, f'SELECT agent FROM "{pg.schema}".indexes') == []


def test_a_rebuild_leaves_fresh_planner_statistics(pg: Backend, make_workspace, state_dir: Path):
    """The first searches after a build were planned on the tables' old statistics (none at all
    on a new schema) until autovacuum looked, a minute or more later."""
    ws = _workspace(make_workspace, 20)
    with Memory(ws, config=pg.config({"memorySearch": {"provider": "none"}}), state_dir=state_dir) as mem:
        mem.sync()
        rows = pg_query(pg.url, "SELECT relname, last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE "
                                f"schemaname = '{pg.schema}' AND relname IN ('chunks', 'files') ORDER BY relname")
        assert rows == [("chunks", True), ("files", True)]
        counted = pg_query(pg.url, f"SELECT reltuples FROM pg_class WHERE oid = '\"{pg.schema}\".chunks'::regclass")
        assert counted[0][0] == mem.status()["chunks"]


def test_watch_names_the_database_index_not_a_sqlite_file(pg: Backend, make_workspace, state_dir: Path):
    ws = _workspace(make_workspace, 2)
    env = cli_env(state_dir, MEMDIR_PROVIDER="none", **pg.env())
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "watch", "--json", "-w", str(ws)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start = json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert start["event"] == "start"
    assert pg.schema in start["indexPath"] and not start["indexPath"].endswith(".sqlite"), start


# -- progress -----------------------------------------------------------------------------------

def test_status_and_searches_say_how_far_a_build_into_postgresql_is(pg: Backend, make_workspace):
    """The build's progress file goes beside where a SQLite index would be, a folder nothing makes
    for an index in PostgreSQL: its write failed without a word, so while a first build ran status
    named the writer's pid alone and every search said "(pid N, listing files)" to its end."""
    para = "- Reviewed the Atlas billing service with Dana; replay and retention came up again.\n" * 40
    ws = make_workspace({f"memory/2026-02-{i % 28 + 1:02d}-n{i}.md": f"# Note {i}\n\n" + para * 3
                         for i in range(60)})
    cfg = pg.config({"memorySearch": {"provider": "none"}})
    seen: list[tuple[dict, list[str]]] = []
    with Memory(ws, config=cfg) as mem, Memory(ws, config=cfg) as other:
        mem.indexer.progress_file.min_interval = 0

        def progress(done: int, total: int, label: str) -> None:
            if 0 < done < total and not seen:
                seen.append((other.status()["writer"], other.search("Atlas billing").warnings))

        mem.sync(progress=progress)
    assert seen, "the build had one batch only"
    writer, warnings = seen[0]
    assert writer["pid"] == os.getpid() and 0 < writer["done"] < writer["total"] == 60, writer
    assert [w for w in warnings if f"{writer['done']}/60 files" in w], warnings
