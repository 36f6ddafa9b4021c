"""Speed at 1k/10k/100k chunks, each figure beside a plain baseline measured in the same run.

What is measured, per corpus size (see :mod:`memdir.bench.corpus` for the generated workspace):

* indexing throughput, keyword-only, over the whole corpus; and with vectors from a fixed random
  embedder (storage and sqlite-vec cost without the model's);
* no-op sync (nothing changed) — against a bare ``os.scandir`` + ``stat`` walk of the same files;
* search latency p50/p95 for keyword, vector and hybrid, the query embedding timed apart;
* CLI cold start of ``memdir search`` (median of 5 subprocesses) — against ``python -c`` opening
  the baseline database with the standard ``sqlite3`` module and running one query;
* peak RSS of each phase (its own subprocess, read with ``wait4``) and index size on disk.

Baselines: one FTS5 table in stdlib ``sqlite3`` over the same chunks (memdir's chunker), queried
with an OR of the words and ordered by bm25; NumPy brute force over the same vectors; "plain
hybrid" is the two plus a weighted merge.  Every phase runs in its own process so peak memory is
per phase and the two SQLite libraries (stdlib, sqlean) never share a process (SPEC §12).

With an embedding provider available, the default model also embeds a subset of chunks
(``embed_subset``) and its query latency is measured; without one that part is skipped with the
reason.  Vectors for the full-size corpora are always the fixed random ones: embedding 100k
chunks with a CPU model would take hours here and time the model, not memdir.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memdir.bench.corpus import default_chunking, generate

DIMS = 384
DEFAULT_SIZES = (1000, 10000, 100000)
Progress = Callable[[str], None]


# -- a fixed random embedder ----------------------------------------------------------------

def synthetic_vector(text: str, dims: int = DIMS) -> np.ndarray:
    """A unit vector fixed by the text's SHA-256: same text, same vector, in every process."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


class SyntheticProvider:
    """An :class:`~memdir.embeddings.base.EmbeddingProvider` with no model: times storage and search."""

    id = "bench-synthetic"
    model = f"fixed-random-unit-{DIMS}"
    provider_key = "bench-synthetic"
    max_input_bytes = 1 << 20  # never split: same chunks as the keyword index and the baseline
    #: computed here on the CPU, like the loaded default model: searches embed the query inline,
    #: as they do with that model, rather than on the pool thread kept for remote providers
    loaded_in_process = True

    @property
    def dims(self) -> int:
        return DIMS

    def embed_query(self, text: str) -> list[float]:
        return synthetic_vector(text).tolist()

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [synthetic_vector(t).tolist() for t in texts]

    def close(self) -> None:
        pass


# -- small helpers ---------------------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (nearest rank, as latency reports use); None for no values."""
    if not values:
        return None
    s = sorted(values)
    idx = min(len(s) - 1, max(0, int(np.ceil(q / 100 * len(s))) - 1))
    return round(float(s[idx]), 3)


def summary(values: Sequence[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": pct(values, 50), "p95": pct(values, 95)}


def dir_size(*paths: Path) -> int:
    total = 0
    for p in paths:
        for f in Path(p.parent).glob(p.name + "*") if not p.is_dir() else p.rglob("*"):
            if f.is_file():
                total += f.stat().st_size
    return total


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children: a large full build chunks and stems
    in a worker process (:mod:`memdir.build_worker`), whose time counts too."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_queries(fn: Callable[[str], Any], queries: Sequence[str], budget_s: float,
                  min_n: int = 20) -> list[Any]:
    """Run ``fn`` over the queries (after 3 warm-ups) until done or out of time (≥ ``min_n``)."""
    for q in queries[:3]:
        fn(q)
    out = []
    start = time.perf_counter()
    for i, q in enumerate(queries):
        out.append(fn(q))
        if i + 1 >= min_n and time.perf_counter() - start > budget_s:
            break
    return out


# -- workers (each runs in its own process) --------------------------------------------------

def _w_memdir_index(a: dict[str, Any]) -> dict[str, Any]:
    from memdir.bench.adapters import bench_memory

    provider = SyntheticProvider() if a["vectors"] == "synthetic" else None
    cfg = {} if provider else {"memorySearch": {"provider": "none"}}
    with bench_memory(a["workspace"], a["state"], cfg, provider=provider) as mem:
        c0, t0 = cpu_seconds(), time.perf_counter()
        rep = mem.sync(reason="bench")
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        index_path = mem.index_path
        vectors = mem.store.vector_count()
        vec_path = mem.store.describe()["vector"]["path"]
    return {"seconds": wall, "cpuSeconds": cpu, "chunks": rep.chunks, "files": rep.indexed, "vectors": vectors,
            "vectorPath": vec_path, "indexPath": str(index_path), "bytes": dir_size(index_path)}


def _w_memdir_search(a: dict[str, Any]) -> dict[str, Any]:
    from memdir.bench.adapters import bench_memory

    queries, budget = a["queries"], a["budget"]
    out: dict[str, Any] = {}
    with bench_memory(a["workspace"], a["state_kw"], {"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
        noop = []
        for _ in range(5):
            t0 = time.perf_counter()
            rep = mem.sync(reason="bench")
            noop.append((time.perf_counter() - t0) * 1000)
        out["noopSync"] = {"median": round(statistics.median(noop), 3), "runs": [round(x, 3) for x in noop],
                           "indexed": rep.indexed}

        def kw(q: str) -> tuple[float, int]:
            t0 = time.perf_counter()
            r = mem.search(q, sync=False)
            assert r.mode == "fts-only"
            return (time.perf_counter() - t0) * 1000, len(r.results)

        res = timed_queries(kw, queries, budget)
        out["keyword"] = {**summary([t for t, _ in res]), "meanResults": statistics.mean(n for _, n in res)}
    if a.get("state_vec"):
        for mode, cfg in (("vector", {"memorySearch": {"query": {"hybrid": {"enabled": False}}}}), ("hybrid", {})):
            with bench_memory(a["workspace"], a["state_vec"], cfg, provider=SyntheticProvider()) as mem:
                mem.store  # noqa: B018 - open before timing

                def run(q: str) -> tuple[float, float, float, str]:
                    t0 = time.perf_counter()
                    r = mem.search(q, sync=False)
                    wall = (time.perf_counter() - t0) * 1000
                    embed = r.timings_ms.get("embed", 0.0)
                    return wall - embed, embed, r.timings_ms.get("vector", 0.0), r.mode

                res = timed_queries(run, queries, budget)
                out[mode] = {**summary([s for s, _, _, _ in res]), "embedSynthetic": summary([e for _, e, _, _ in res]),
                             "vectorPart": summary([v for _, _, v, _ in res]),
                             "modes": sorted({m for _, _, _, m in res})}
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out["maxRssKb"] = ru.ru_maxrss
    return out


def _w_baseline(a: dict[str, Any]) -> dict[str, Any]:
    import sqlite3  # the standard library's SQLite, on purpose: the baseline is what anyone has

    from memdir.bench.adapters import PlainFts, or_query, workspace_chunks

    queries, budget = a["queries"], a["budget"]
    db = Path(a["db"])
    for f in db.parent.glob(db.name + "*"):
        f.unlink()
    out: dict[str, Any] = {"sqlite": sqlite3.sqlite_version}
    c0, t0 = cpu_seconds(), time.perf_counter()
    chunks = workspace_chunks(Path(a["workspace"]), *default_chunking())
    fts = PlainFts(db, sqlite3)
    fts.add(chunks)
    out["index"] = {"seconds": time.perf_counter() - t0, "cpuSeconds": cpu_seconds() - c0, "chunks": len(chunks),
                    "bytes": dir_size(db)}
    # The least a no-op sync can do: list the files and stat each one.
    walks = []
    for _ in range(5):
        t0 = time.perf_counter()
        n = _stat_walk(Path(a["workspace"]))
        walks.append((time.perf_counter() - t0) * 1000)
    out["statWalk"] = {"median": round(statistics.median(walks), 3), "files": n}

    def kw(q: str) -> tuple[float, list[tuple[str, int, int, float]]]:
        t0 = time.perf_counter()
        rows = fts.search(or_query(q), 6)
        return (time.perf_counter() - t0) * 1000, rows

    res = timed_queries(kw, queries, budget)
    out["keyword"] = {**summary([t for t, _ in res]), "meanResults": statistics.mean(len(r) for _, r in res)}
    out["maxRssKbFts"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    t0 = time.perf_counter()
    matrix = np.stack([synthetic_vector(t) for _, _, _, t in chunks]) if chunks else np.zeros((0, DIMS), np.float32)
    out["vectorBuildSeconds"] = time.perf_counter() - t0
    where = [(p, s, e) for p, s, e, _ in chunks]

    def vec_top(q: str, k: int) -> list[tuple[tuple[str, int, int], float]]:
        sims = matrix @ synthetic_vector(q)
        k = min(k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(where[i], float(sims[i])) for i in top]

    def vec(q: str) -> float:
        t0 = time.perf_counter()
        vec_top(q, 6)
        return (time.perf_counter() - t0) * 1000

    out["vector"] = summary(timed_queries(vec, queries, budget))

    def hybrid(q: str) -> float:
        t0 = time.perf_counter()
        scores: dict[tuple[str, int, int], float] = {}
        for key, s in vec_top(q, 24):
            scores[key] = 0.7 * s
        for p, s, e, r in fts.search(or_query(q), 24):
            scores[(p, int(s), int(e))] = scores.get((p, int(s), int(e)), 0.0) + 0.3 * (-r / (1 - r))
        sorted(scores.items(), key=lambda kv: -kv[1])[:6]
        return (time.perf_counter() - t0) * 1000

    out["hybrid"] = summary(timed_queries(hybrid, queries, budget))
    out["maxRssKb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fts.close()
    return out


def _stat_walk(root: Path) -> int:
    n = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.name.endswith(".md"):
                    e.stat(follow_symlinks=False)
                    n += 1
    return n


def _w_embed(a: dict[str, Any]) -> dict[str, Any]:
    """The default embedding model: memdir indexing a subset, raw model throughput, query latency."""
    from memdir.bench.adapters import bench_memory, workspace_chunks
    from memdir.config import load_config
    from memdir.embeddings.registry import select_provider

    sel = select_provider(load_config(overrides={}, env={}, check_workspace=False).settings.memory_search)
    if sel.provider is None:
        return {"skipped": sel.unavailable_reason or "no embedding provider"}
    provider = sel.provider
    texts = [t for _, _, _, t in workspace_chunks(Path(a["workspace"]), *default_chunking())]
    out: dict[str, Any] = {"provider": provider.id, "model": provider.model}
    provider.embed_batch(texts[:2])  # load the model before timing
    t0 = time.perf_counter()
    for i in range(0, len(texts), 16):
        provider.embed_batch(texts[i : i + 16])
    raw = time.perf_counter() - t0
    out["raw"] = {"seconds": raw, "chunks": len(texts), "chunksPerSec": len(texts) / raw if raw else None}
    with bench_memory(a["workspace"], a["state"], {}) as mem:
        mem.selection  # noqa: B018
        t0 = time.perf_counter()
        rep = mem.sync(reason="bench")
        wall = time.perf_counter() - t0
        out["memdir"] = {"seconds": wall, "chunks": rep.chunks, "embedded": rep.embedded,
                         "chunksPerSec": rep.chunks / wall if wall else None}
        qs = a["queries"][:50]
        times = []
        for q in qs:
            t1 = time.perf_counter()
            mem.selection.provider.embed_query(q)
            times.append((time.perf_counter() - t1) * 1000)
        out["queryEmbed"] = summary(times)
        hy = timed_queries(lambda q: mem.search(q, sync=False), qs, 20)
        out["hybridModes"] = sorted({r.mode for r in hy})
        out["hybridTotal"] = summary([sum(r.timings_ms.values()) for r in hy])
    out["maxRssKb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "memdir-index": _w_memdir_index,
    "memdir-search": _w_memdir_search,
    "baseline": _w_baseline,
    "embed": _w_embed,
}


def _package_root() -> str:
    import memdir

    return str(Path(memdir.__file__).resolve().parents[1])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a measured subprocess: this very memdir first on the path."""
    from memdir.bench.adapters import CONFIG_ENV

    # The caller's MEMDIR_* settings are not the bench's: MEMDIR_INDEX_PATH sent the cold-start
    # search to another index (which it then built), MEMDIR_CONFIG changed its settings.
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_ENV}
    # Time what an installed memdir does: with byte-code caches (pip writes them at install).  A
    # PYTHONDONTWRITEBYTECODE=1 in the caller's shell made every cold start recompile memdir.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = _package_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def run_measured(cmd: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 3600,
                 stdin_data: str | None = None) -> tuple[int, str, str, float, int]:
    """``(returncode, stdout, stderr, wall seconds, peak RSS KiB)`` of one subprocess (``wait4``)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, stdin=subprocess.PIPE if stdin_data else
                                subprocess.DEVNULL, env=env, text=True)
        if stdin_data:
            assert proc.stdin is not None
            proc.stdin.write(stdin_data)
            proc.stdin.close()
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), wall, ru.ru_maxrss


def run_worker(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one worker in a fresh interpreter; its JSON result plus the process's peak RSS."""
    code, out, err, wall, rss = run_measured([sys.executable, "-m", "memdir.bench.speed", "--worker", kind],
                                             env=child_env(), stdin_data=json.dumps(args))
    if code != 0:
        raise RuntimeError(f"bench worker {kind} failed ({code}):\n{err.strip()[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["processRssKb"] = rss
    result["processSeconds"] = wall
    return result


def cold_start(cmd: Sequence[str], env: dict[str, str], runs: int = 5) -> dict[str, Any]:
    """Median wall time and peak RSS of ``runs`` fresh processes (after one untimed warm-up)."""
    run_measured(cmd, env=env)
    walls, rss = [], []
    for _ in range(runs):
        code, _out, err, wall, peak = run_measured(cmd, env=env)
        if code != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])}… failed ({code}): {err.strip()[-500:]}")
        walls.append(wall * 1000)
        rss.append(peak)
    return {"medianMs": round(statistics.median(walls), 1), "runsMs": [round(w, 1) for w in walls],
            "maxRssKb": max(rss)}


_BASELINE_CLI = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1])\n"
    "q = ' OR '.join('\"%s\"' % w for w in sys.argv[2].lower().split())\n"
    "print(c.execute('SELECT path, start_line, end_line FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT 6',"
    " (q,)).fetchall())\n"
)


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, Python and SQLite versions: what a reader needs to weigh the figures."""
    # The stdlib sqlite3 version comes from a child: this process may already hold sqlean's SQLite.
    stdlib_sqlite = subprocess.run([sys.executable, "-c", "import sqlite3; print(sqlite3.sqlite_version)"],
                                   capture_output=True, text=True).stdout.strip() or None
    cpu = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("", platform.machine(), platform.processor()):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu, "cores": os.cpu_count(), "avx2": ("avx2" in flags) if flags else None,
        "avx512f": ("avx512f" in flags) if flags else None, "memGiB": mem_gib,
        "os": platform.platform(), "python": platform.python_version(), "stdlibSqlite": stdlib_sqlite,
        "numpy": np.__version__,
    }
    try:
        from memdir import db

        info["memdirSqlite"] = db.binding_name()
    except Exception as exc:  # sqlean missing: memdir falls back to the stdlib module
        info["memdirSqlite"] = f"unknown ({exc})"
    try:
        from importlib.metadata import version

        import sqlite_vec  # noqa: F401

        info["sqliteVec"] = version("sqlite-vec")
    except Exception:
        info["sqliteVec"] = None
    try:
        info["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 2)


def run_speed(sizes: Sequence[int] = DEFAULT_SIZES, *, embed_subset: int = 256, n_queries: int = 200,
              budget_s: float = 20.0, seed: int = 42, work_dir: Path | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
    """Generate each corpus, measure memdir and the baselines side by side; the report."""
    if n_queries < 1:  # else a statistics error after the corpus and both indexes were built
        raise ValueError(f"n_queries must be at least 1, not {n_queries}")
    say = progress or (lambda _m: None)
    own_tmp = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="memdir-speed-")) if work_dir is None else Path(work_dir)
    root.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine_info(), "seed": seed, "queries": n_queries,
                              "budgetSeconds": budget_s, "sizes": [], "embedding": None,
                              "notes": ["vector and hybrid latencies use fixed random unit vectors (dim "
                                        f"{DIMS}) in memdir and in the NumPy baseline alike: they time search, "
                                        "not a model; the query embedding is timed apart"]}
    try:
        for n in sizes:
            say(f"[{n}] generating corpus")
            t0 = time.perf_counter()
            corpus = generate(root / f"corpus-{n}", n, seed=seed, n_queries=n_queries)
            gen_s = time.perf_counter() - t0
            ws = corpus.workspace
            st_kw, st_vec = root / f"state-{n}-kw", root / f"state-{n}-vec"
            for d in (st_kw, st_vec):
                shutil.rmtree(d, ignore_errors=True)
            entry: dict[str, Any] = {"size": n, "corpus": {"files": corpus.files, "chunks": corpus.chunks,
                                                           "mb": round(corpus.chars / 1e6, 1),
                                                           "generateSeconds": round(gen_s, 2)}}
            say(f"[{n}] {corpus.files} files, ~{corpus.chunks} chunks: memdir keyword-only index")
            entry["memdirIndex"] = run_worker("memdir-index", {"workspace": str(ws), "state": str(st_kw),
                                                               "vectors": "none"})
            say(f"[{n}] memdir index with fixed random vectors")
            entry["memdirIndexVectors"] = run_worker("memdir-index", {"workspace": str(ws), "state": str(st_vec),
                                                                      "vectors": "synthetic"})
            say(f"[{n}] memdir no-op sync and search latency")
            entry["memdirSearch"] = run_worker("memdir-search", {
                "workspace": str(ws), "state_kw": str(st_kw), "state_vec": str(st_vec),
                "queries": corpus.queries, "budget": budget_s})
            say(f"[{n}] baselines: stdlib sqlite3 FTS5 and NumPy brute force")
            base_db = root / f"baseline-{n}.sqlite"
            entry["baseline"] = run_worker("baseline", {"workspace": str(ws), "db": str(base_db),
                                                        "queries": corpus.queries, "budget": budget_s})
            say(f"[{n}] CLI cold start")
            q = corpus.queries[min(1, len(corpus.queries) - 1)]  # (--queries 1 failed here, minutes in)
            env = child_env({"MEMDIR_STATE_DIR": str(st_kw), "MEMDIR_PROVIDER": "none"})
            env.pop("MEMDIR_CONFIG", None)
            base_cmd = [sys.executable, "-m", "memdir", "search", q, "--json", "--workspace", str(ws)]
            entry["coldStart"] = {
                "memdir": cold_start(base_cmd, env),
                "memdirNoSync": cold_start([*base_cmd, "--no-sync"], env),
                "baseline": cold_start([sys.executable, "-c", _BASELINE_CLI, str(base_db), q], env),
                "python": cold_start([sys.executable, "-c", "pass"], env),
            }
            report["sizes"].append(entry)
            say(f"[{n}] done")
        if embed_subset > 0 and sizes:
            say(f"embedding model on a {embed_subset}-chunk subset")
            sub = root / f"subset-{embed_subset}"
            corpus = generate(sub, embed_subset, seed=seed, n_queries=50)
            shutil.rmtree(sub / "state", ignore_errors=True)
            report["embedding"] = run_worker("embed", {"workspace": str(corpus.workspace), "state": str(sub / "state"),
                                                       "queries": corpus.queries})
            if report["embedding"].get("skipped"):
                say(f"embedding skipped: {report['embedding']['skipped']}")
    finally:
        if own_tmp:
            shutil.rmtree(root, ignore_errors=True)
    return report


# -- output ----------------------------------------------------------------------------------

def _fmt(v: float | None, digits: int = 1, unit: str = "") -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}{unit}"
    return f"{v:.{digits}f}{unit}"


def _mb(kb_or_bytes: float | None, kib: bool = False) -> float | None:
    if kb_or_bytes is None:
        return None
    return kb_or_bytes / 1024 if kib else kb_or_bytes / 1e6


def speed_rows(entry: dict[str, Any]) -> list[tuple[str, float | None, float | None, int]]:
    """``(metric, memdir, baseline, digits)`` rows for one size; the ratio is memdir ÷ baseline."""
    mi, mv, ms, b, cs = (entry["memdirIndex"], entry["memdirIndexVectors"], entry["memdirSearch"], entry["baseline"],
                         entry["coldStart"])
    rows: list[tuple[str, float | None, float | None, int]] = [
        ("index, keyword-only (chunks/s, wall) ↑", mi["chunks"] / mi["seconds"],
         b["index"]["chunks"] / b["index"]["seconds"], 0),
        ("index, keyword-only (chunks/CPU-s) ↑", mi["chunks"] / max(mi["cpuSeconds"], 1e-9),
         b["index"]["chunks"] / max(b["index"]["cpuSeconds"], 1e-9), 0),
        ("index + fixed random vectors (chunks/s) ↑", mv["chunks"] / mv["seconds"],
         b["index"]["chunks"] / (b["index"]["seconds"] + b["vectorBuildSeconds"]), 0),
        ("no-op sync vs stat walk (ms) ↓", ms["noopSync"]["median"], b["statWalk"]["median"], 1),
    ]
    for mode in ("keyword", "vector", "hybrid"):
        m, bb = ms.get(mode) or {}, b.get(mode) or {}
        rows.append((f"{mode} search p50 (ms) ↓", m.get("p50"), bb.get("p50"), 2))
        rows.append((f"{mode} search p95 (ms) ↓", m.get("p95"), bb.get("p95"), 2))
    rows += [
        ("CLI cold start `memdir search` (ms) ↓", cs["memdir"]["medianMs"], cs["baseline"]["medianMs"], 0),
        ("CLI cold start `--no-sync` (ms) ↓", cs["memdirNoSync"]["medianMs"], cs["baseline"]["medianMs"], 0),
        ("peak RSS, indexing (MiB) ↓", _mb(mi["processRssKb"], kib=True), _mb(b["maxRssKbFts"], kib=True), 0),
        ("peak RSS, search process (MiB) ↓", _mb(ms["processRssKb"], kib=True), _mb(b["processRssKb"], kib=True), 0),
        ("peak RSS, CLI search (MiB) ↓", _mb(cs["memdir"]["maxRssKb"], kib=True),
         _mb(cs["baseline"]["maxRssKb"], kib=True), 0),
        ("index on disk, keyword-only (MB) ↓", _mb(mi["bytes"]), _mb(b["index"]["bytes"]), 1),
        ("index on disk, with vectors (MB) ↓", _mb(mv["bytes"]),
         _mb(b["index"]["bytes"] + mv["vectors"] * DIMS * 4), 1),
    ]
    return rows


def format_speed(report: dict[str, Any], *, markdown: bool = False) -> str:
    """One table: a row per metric, memdir | baseline | ratio for each corpus size."""
    sizes = report["sizes"]
    head = ["metric"]
    for e in sizes:
        head += [f"{e['size']:,}: memdir", "baseline", "×"]
    rows = [head]
    per_size = [speed_rows(e) for e in sizes]
    for i, (label, *_rest) in enumerate(per_size[0] if per_size else []):
        row = [label]
        for rs in per_size:
            _, m, b, d = rs[i]
            row += [_fmt(m, d), _fmt(b, d), _fmt(ratio(m, b), 2) if ratio(m, b) is not None else "-"]
        rows.append(row)
    out = []
    if markdown:
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(head, widths,
                                                                                               strict=True))))
        out.append("  ".join("-" * w for w in widths))
        for r in rows[1:]:
            out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    lines = ["\n".join(out), ""]
    corp = ", ".join(f"{e['size']:,}: {e['corpus']['files']:,} files / {e['corpus']['chunks']:,} chunks / "
                     f"{e['corpus']['mb']} MB" for e in sizes)
    lines.append(f"corpora: {corp}")
    lines.append("baseline = stdlib sqlite3 FTS5 (one table, OR of the words, bm25) + NumPy brute force; "
                 "× = memdir ÷ baseline (↑ higher is better, ↓ lower is better)")
    if sizes:
        cs = sizes[-1]["coldStart"]
        lines.append(f"bare `python -c pass` start: {cs['python']['medianMs']:.0f} ms")
    emb = report.get("embedding")
    if emb:
        if emb.get("skipped"):
            lines.append(f"embedding model: not measured ({emb['skipped']})")
        else:
            lines.append(
                f"embedding model {emb['provider']}/{emb['model']} on {emb['memdir']['chunks']} chunks: memdir "
                f"indexes {emb['memdir']['chunksPerSec']:.1f} chunks/s, the raw model {emb['raw']['chunksPerSec']:.1f} "
                f"chunks/s (× {ratio(emb['memdir']['chunksPerSec'], emb['raw']['chunksPerSec'])}); query embedding "
                f"p50 {emb['queryEmbed']['p50']} ms, p95 {emb['queryEmbed']['p95']} ms")
    for note in report.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines if not markdown else [x if i < 2 else f"- {x}" for i, x in enumerate(lines)])


def _worker_main(kind: str) -> int:
    args = json.loads(sys.stdin.read())
    result = WORKERS[kind](args)
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        raise SystemExit(_worker_main(sys.argv[2]))
    raise SystemExit("usage: memdir bench speed [--sizes ...] (this module's own entry point is for workers)")
