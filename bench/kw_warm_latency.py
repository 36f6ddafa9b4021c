"""Keyword and hybrid search latency, FTS5 ranking vs the warm in-process postings, side by side.

    python bench/kw_warm_latency.py WORK_DIR SIZE [ROUNDS]

``WORK_DIR/corpus-SIZE`` is a corpus of ``memdir bench speed`` (generated here when missing, the
same seed and queries); its keyword-only index and one with the bench's fixed random vectors are
built on first use and kept (``state-SIZE-kw``/``-vec``), so a second run times search only.  In
one process per mode, each round runs every query through ``Memory.search`` once with the
postings switched off (FTS5 ranks) and once on, alternating which goes first; round 0 is a
warm-up.  Every query must rank the same chunks in the same order, scores equal to 1e-12.
Hybrid times exclude the query embedding (as ``bench speed`` reports them).
"""
import json
import statistics
import sys
import time
from pathlib import Path

from memdir.api import Memory
from memdir.bench.corpus import generate
from memdir.bench.speed import SyntheticProvider
from memdir.stores.sqlite import SqliteStore

work, size = Path(sys.argv[1]), int(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
corpus = generate(work / f"corpus-{size}", size, seed=42, n_queries=200)


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]


report = {"size": size, "chunks": corpus.chunks}
for mode in ("keyword", "hybrid"):
    kw = mode == "keyword"
    cfg = {"memorySearch": {"provider": "none"}} if kw else {}
    times: dict[bool, list[float]] = {False: [], True: []}
    with Memory(corpus.workspace, state_dir=str(work / f"state-{size}-{'kw' if kw else 'vec'}"), config=cfg,
                provider=None if kw else SyntheticProvider()) as mem:
        mem.sync()
        for r in range(rounds + 1):
            for i, q in enumerate(corpus.queries):
                got = {}
                for warm in ((False, True) if (i + r) % 2 == 0 else (True, False)):
                    SqliteStore.WARM_KEYWORD = warm
                    t0 = time.perf_counter()
                    res = mem.search(q, sync=False)
                    ms = (time.perf_counter() - t0) * 1000 - res.timings_ms.get("embed", 0.0)
                    got[warm] = [(h.path, h.start_line, h.end_line, h.score) for h in res.results]
                    if r:
                        times[warm].append(ms)
                # the same chunks in the same order; scores to 1e-12 (the hybrid merge's scores for
                # chosen chunks were FtsScorer's, which differ from FTS5's own by an ulp at times)
                assert [g[:3] for g in got[False]] == [g[:3] for g in got[True]], (q, got)
                assert all(abs(a[3] - b[3]) < 1e-12 for a, b in zip(got[False], got[True], strict=True)), (q, got)
        report[mode] = {"warm": mem.store.describe()["fts"]["warm"]}
    for warm, xs in times.items():
        report[mode]["postings" if warm else "fts5"] = {"n": len(xs), "p50": round(statistics.median(xs), 2),
                                                         "p95": round(pct(xs, 0.95), 2)}
    print(mode, json.dumps(report[mode]), flush=True)
