"""SQLite and PostgreSQL side by side: ``memdir bench backends --dsn URL`` (or ``$MEMDIR_DATABASE_URL``).

Per corpus size (the generated corpus of :mod:`memdir.bench.corpus`, vectors from the fixed
random embedder of :mod:`memdir.bench.speed`, so the model's cost is left out), for each backend:

* a full index build (chunks/s; PostgreSQL includes its HNSW build when the index is large);
* a no-op sync (median of 5);
* keyword, vector and hybrid search through ``Memory.search`` (p50/p95, query embedding excluded);
* size on disk (SQLite: the file; PostgreSQL: every relation of the bench schema, indexes included);
* ``--concurrency`` searcher *processes* running hybrid searches at once against one index/server
  (aggregate queries/s, per-query p50/p95).

With ``--quality DATASET`` it also scores recall@k of both backends (hybrid and keyword, plus
PostgreSQL's ``ts_rank_cd`` ranking and the ``simple`` configuration) on a labelled dataset.
Each size uses its own schema (``bench_<size>``), dropped first.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from memdir.bench.corpus import generate
from memdir.bench.speed import SyntheticProvider, summary, timed_queries

BACKENDS = ("sqlite", "postgres")


def _config(backend: str, dsn: str, schema: str, **extra: Any) -> dict[str, Any]:
    if backend == "sqlite":
        return {}
    return {"memorySearch": {"store": {"driver": "postgres", "dsn": dsn, "postgres": {"schema": schema, **extra}}}}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _disk_bytes(backend: str, mem: Any, dsn: str, schema: str) -> int:
    if backend == "sqlite":
        path = mem.index_path
        return sum(os.path.getsize(str(path) + s) for s in ("", "-wal") if os.path.exists(str(path) + s))
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
                           "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
                           (schema,)).fetchone()
    return int(row[0])


def preflight(dsn: str) -> None:
    """Check that PostgreSQL can be used before any work: the SQLite side of a size runs first, so a
    missing ``memdir[postgres]`` extra or an unreachable server was found only after it (minutes at
    100k chunks), and the extra was then reported as a bare ``No module named 'psycopg'``.

    Raises ``ImportError`` naming the extra, or ``ValueError`` naming the server (never the password).
    """
    from memdir.stores.pgconn import CONNECT_TIMEOUT, _one_line, bad_dsn_message, redact_dsn, require_psycopg

    psycopg = require_psycopg()
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            conn.execute("SELECT 1")
    except psycopg.ProgrammingError as exc:  # a DSN libpq cannot parse: its message quotes the DSN
        raise ValueError(f"bench backends: {bad_dsn_message(dsn, exc)}") from None
    except psycopg.Error as exc:
        where = redact_dsn(dsn, "bench").rsplit("#", 1)[0]
        raise ValueError(f"bench backends cannot reach PostgreSQL at {where}: {_one_line(exc)}") from None


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


MODES = {"keyword": {"memorySearch": {"provider": "none"}},
         "vector": {"memorySearch": {"query": {"hybrid": {"enabled": False}}}},
         "hybrid": {}}


def _searcher(args: dict[str, Any]) -> list[float]:
    """One concurrent searcher process: opens and warms its index, waits for the others, then runs
    hybrid searches for ``seconds``; returns latencies in ms."""
    from memdir.bench.adapters import bench_memory

    cfg = args["config"]
    out: list[float] = []
    with bench_memory(args["workspace"], args["state"], cfg, agent_id=args["agent"],
                      provider=SyntheticProvider()) as mem:
        mem.search(args["queries"][0], sync=False)
        args["ready"].wait()  # every searcher opened and warmed: start together
        i = args["offset"]
        deadline = time.monotonic() + args["seconds"]
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            mem.search(args["queries"][i % len(args["queries"])], sync=False)
            out.append((time.perf_counter() - t0) * 1000)
            i += 1
    return out


def bench_backend(backend: str, corpus: Any, size: int, *, dsn: str, work: Path, budget_s: float,
                  concurrency: int, seconds: float) -> dict[str, Any]:
    from memdir.bench.adapters import bench_memory

    schema = f"bench_{size}"
    state = work / f"state-{backend}-{size}"
    agent = f"bench{size}"
    if backend == "postgres":
        _drop_schema(dsn, schema)
    else:
        for f in state.glob("memory/*"):
            f.unlink()
    base = _config(backend, dsn, schema)
    out: dict[str, Any] = {}
    with bench_memory(corpus.workspace, state, base, agent_id=agent, provider=SyntheticProvider()) as mem:
        t0 = time.perf_counter()
        rep = mem.sync(reason="bench", force=True)
        secs = time.perf_counter() - t0
        out["index"] = {"seconds": round(secs, 2), "chunks": rep.chunks, "chunksPerSecond": round(rep.chunks / secs, 1),
                        "vectorPath": mem.store.describe()["vector"]["path"]}
        noop = []
        for _ in range(5):
            t0 = time.perf_counter()
            mem.sync(reason="bench")
            noop.append((time.perf_counter() - t0) * 1000)
        out["noopSyncMs"] = round(statistics.median(noop), 1)
        out["diskBytes"] = _disk_bytes(backend, mem, dsn, schema)
    for mode, extra in MODES.items():
        provider = None if mode == "keyword" else SyntheticProvider()
        with bench_memory(corpus.workspace, state, _merge(base, extra), agent_id=agent, provider=provider) as mem:

            def run(q: str, mem: Any = mem) -> float:
                t0 = time.perf_counter()
                r = mem.search(q, sync=False)
                return (time.perf_counter() - t0) * 1000 - r.timings_ms.get("embed", 0.0)

            out[mode] = summary(timed_queries(run, corpus.queries, budget_s))
    if concurrency > 0:
        with multiprocessing.Manager() as manager, ProcessPoolExecutor(max_workers=concurrency) as pool:
            ready = manager.Barrier(concurrency)
            jobs = [{"workspace": str(corpus.workspace), "agent": agent, "state": str(state), "config": base,
                     "queries": corpus.queries, "offset": i * 17, "ready": ready, "seconds": seconds}
                    for i in range(concurrency)]
            lat = [x for part in pool.map(_searcher, jobs) for x in part]
        out["concurrent"] = {"searchers": concurrency, "queriesPerSecond": round(len(lat) / seconds, 1),
                             **summary(lat)}
    return out


def run_backends(sizes: list[int], *, dsn: str, work_dir: Path, seed: int = 42, n_queries: int = 200,
                 budget_s: float = 15.0, concurrency: int = 8, seconds: float = 20.0,
                 progress: Any = None) -> dict[str, Any]:
    report: dict[str, Any] = {"sizes": {}, "machine": {"cpus": os.cpu_count(), "loadBefore": _load()}}
    for size in sizes:
        corpus = generate(work_dir / f"corpus-{size}", size, seed=seed, n_queries=n_queries)
        entry: dict[str, Any] = {"files": corpus.files, "chunks": corpus.chunks}
        for backend in BACKENDS:
            if progress:
                progress(f"{backend} at {size} chunks")
            entry[backend] = bench_backend(backend, corpus, size, dsn=dsn, work=work_dir, budget_s=budget_s,
                                           concurrency=concurrency, seconds=seconds)
        report["sizes"][str(size)] = entry
    report["machine"]["loadAfter"] = _load()
    return report


def _load() -> list[float]:
    """1, 5 and 15 minute load averages: the machine is shared, and the report says how busy it was."""
    return [round(x, 2) for x in os.getloadavg()]


class _AgentPerSample:
    """A memdir adapter that gives each sample its own agent id (one database holds them all)."""

    def __init__(self, inner: Any, label: str):
        self.inner = inner
        self.name = label
        self.description = label
        self.intended_mode = inner.intended_mode

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def index(self, workspace: Path, state_dir: Path) -> Any:
        from memdir.bench.adapters import _MemdirSession, bench_memory, deep_merge, mode_overrides

        inner = self.inner
        cfg = deep_merge(mode_overrides(inner.mode), inner.overrides)
        mem = bench_memory(workspace, state_dir, cfg, agent_id=f"q-{Path(workspace).parent.name}",
                           provider=inner.provider)
        t0 = time.perf_counter()
        try:
            mem.sync(reason="bench")
        except BaseException:
            mem.close()
            raise
        return _MemdirSession(mem, inner.mode, inner.min_score, time.perf_counter() - t0)

    def run(self, workspace: Path, state_dir: Path, queries: Any, k: int) -> Any:
        session = self.index(workspace, state_dir)
        try:
            return [session.search(q, k) for q in queries]
        finally:
            session.close()


def quality_side_by_side(dataset: Path, *, dsn: str, modes: tuple[str, ...] = ("hybrid", "keyword"),
                         ks: tuple[int, ...] = (6,), limit: int | None = None, progress: Any = None) -> dict[str, Any]:
    """recall@k of SQLite and PostgreSQL (BM25 / ts_rank_cd, english / simple) on one dataset.

    k = 6 by default (an agent's ``maxResults``): each k is its own search, so more ks cost more runs.
    """
    from memdir.bench.adapters import MemdirAdapter
    from memdir.bench.quality import run_quality

    _drop_schema(dsn, "bench_quality")
    variants = [("sqlite", {}), ("postgres", {}), ("postgres-simple", {"textSearchConfig": "simple"}),
                ("postgres-ts_rank_cd", {"ranking": "ts_rank_cd"})]
    adapters: list[Any] = []
    for mode in modes:
        for label, extra in variants:
            if mode == "hybrid" and label != "postgres" and label != "sqlite":
                continue  # ranking variants are compared on keywords alone (their only difference)
            backend = "sqlite" if label == "sqlite" else "postgres"
            schema = "bench_quality" if label in ("sqlite", "postgres") else f"bench_quality_{label[9:]}"
            if backend == "postgres" and schema != "bench_quality":
                _drop_schema(dsn, schema)
            inner = MemdirAdapter(mode, overrides=_config(backend, dsn, schema, **extra))
            adapters.append(_AgentPerSample(inner, f"{label}:{mode}"))
    return run_quality(dataset, ks=ks, adapters=adapters, limit=limit, progress=progress)


def format_report(report: dict[str, Any]) -> str:
    lines = ["| chunks | backend | index chunks/s | no-op sync ms | keyword p50/p95 ms | vector p50/p95 ms | "
             "hybrid p50/p95 ms | disk MB | concurrent searchers: q/s (p50/p95 ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for entry in report["sizes"].values():
        for b in BACKENDS:
            e = entry[b]
            conc = e.get("concurrent") or {}

            def pp(d: dict[str, Any]) -> str:
                return f"{d.get('p50', 0):.1f} / {d.get('p95', 0):.1f}"

            lines.append(f"| {entry['chunks']} | {b} ({e['index']['vectorPath']}) | {e['index']['chunksPerSecond']} | "
                         f"{e['noopSyncMs']} | {pp(e['keyword'])} | {pp(e['vector'])} | {pp(e['hybrid'])} | "
                         f"{e['diskBytes'] / 1e6:.0f} | "
                         + (f"{conc['searchers']}× {conc['queriesPerSecond']} ({pp(conc)}) |" if conc else "- |"))
    m = report.get("machine") or {}
    if m:
        lines.append(f"\n{m.get('cpus')} CPUs; load average (1/5/15 min) {m.get('loadBefore')} before, "
                     f"{m.get('loadAfter')} after")
    if report.get("quality"):
        from memdir.bench.quality import format_table

        lines.append("\nRecall on the quality dataset, both backends:\n")
        lines.append(format_table(report["quality"], markdown=True, categories=False))
    return "\n".join(lines)
