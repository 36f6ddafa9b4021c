"""Search latency p50/p95 as ``bench speed`` times it, before and after a change, side by side.

    python bench/kw_p95.py WORK_DIR OLD_SRC [SIZES] [MODES] [REPEATS]
    # e.g. git -C . archive main src | tar -x -C /tmp/old; python bench/kw_p95.py /tmp/p95 /tmp/old/src

``WORK_DIR/corpus-SIZE`` is a ``bench speed`` corpus (generated when missing: same seed and 200
queries); its keyword-only index and one with the bench's fixed random vectors are built once and
kept (``state-SIZE-kw``/``-vec``).  Each measurement is a fresh process doing what the speed
bench's search worker does (one ``Memory``, 3 warm-up queries, each query timed once, hybrid
without the query embedding), for the code in ``OLD_SRC`` ("before"), this checkout ("after"),
and this checkout once its keyword warm-up has finished ("settled": a long-lived process between
bursts of searches); repeated, medians reported.  Every variant must return the same results
(a digest of every query's hits).  Also prints the peak RSS of each process.
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def probe(work: Path, size: int, mode: str, settle: bool) -> dict:
    from memdir.api import Memory
    from memdir.bench.corpus import generate
    from memdir.bench.speed import SyntheticProvider, pct

    corpus = generate(work / f"corpus-{size}", size, seed=42, n_queries=200)
    kw = mode == "keyword"
    state = work / f"state-{size}-{'kw' if kw else 'vec'}"
    cfg = {"memorySearch": {"provider": "none"}} if kw else {}
    provider = None if kw else SyntheticProvider()
    with Memory(corpus.workspace, state_dir=str(state), config=cfg, provider=provider) as mem:
        if kw or not (state / "built").exists():
            mem.sync()
            (state / "built").touch()
        mem.store  # noqa: B018 - open before timing

        def run(q: str) -> tuple[float, list]:
            t0 = time.perf_counter()
            r = mem.search(q, sync=False)
            ms = (time.perf_counter() - t0) * 1000 - r.timings_ms.get("embed", 0.0)
            return ms, [(h.path, h.start_line, h.end_line, h.score) for h in r.results]

        for q in corpus.queries[:3]:
            run(q)
        warm: dict = {}
        if settle:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 300:
                warm = mem.store.describe()["fts"]["warm"].get("warmup") or {}
                if warm.get("state") not in ("starting", "running"):
                    break
                time.sleep(0.2)
        times, digest = [], hashlib.sha256()
        for q in corpus.queries:
            ms, hits = run(q)
            times.append(ms)
            digest.update(json.dumps(hits).encode())
        warm = mem.store.describe()["fts"]["warm"].get("warmup") or {}
    return {"p50": pct(times, 50), "p95": pct(times, 95), "digest": digest.hexdigest()[:16],
            "rssMiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "warmup": warm.get("state"), "warmEntries": warm.get("entries")}


def main() -> None:
    work, old = Path(sys.argv[1]), Path(sys.argv[2])
    sizes = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "10000,100000").split(",")]
    modes = (sys.argv[4] if len(sys.argv) > 4 else "keyword,hybrid").split(",")
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    new = HERE.parents[1] / "src"
    runs: dict[tuple[int, str, str], list[dict]] = {}
    for _ in range(repeats):
        for size in sizes:
            for mode in modes:
                for variant, src in (("before", old), ("after", new), ("settled", new)):
                    env = {**os.environ, "PYTHONPATH": str(src)}
                    out = subprocess.run([sys.executable, str(HERE), "--probe", str(work), str(size), mode,
                                          "1" if variant == "settled" else "0"], env=env, check=True,
                                         capture_output=True, text=True).stdout
                    got = json.loads(out.strip().splitlines()[-1])
                    runs.setdefault((size, mode, variant), []).append(got)
                    print(size, mode, variant, json.dumps(got), flush=True)
    print("\nsize    mode     variant  p50 (median)  p95 (median)  p95/p50  peak RSS MiB  digests")
    for (size, mode, variant), rs in runs.items():
        p50 = statistics.median(r["p50"] for r in rs)
        p95 = statistics.median(r["p95"] for r in rs)
        print(f"{size:<7} {mode:<8} {variant:<8} {p50:12.2f}  {p95:12.2f}  {p95 / p50:7.2f}  "
              f"{max(r['rssMiB'] for r in rs):12d}  {sorted({r['digest'] for r in rs})}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--probe":
        print(json.dumps(probe(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1")))
    else:
        main()
