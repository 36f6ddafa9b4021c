"""Keyword search right after a write, with the warm postings patched vs dropped, side by side.

    python bench/kw_after_writes.py WORK_DIR SIZE [WRITES]

An agent writes while it searches (``memory_append``, a growing transcript), and every write
moves the index generation.  On a ``memdir bench speed`` corpus of SIZE chunks (generated in
WORK_DIR when missing), two copies of the workspace each get a warm keyword-only
:class:`memdir.api.Memory`: one patches its postings after a write (:mod:`memdir.stores.kw_postings`),
the other drops them on every generation change (the previous behaviour).  Both get the same
sequence: append a line to today's note and sync, search a corpus query, search the next one;
which copy goes first alternates.  Exactness against FTS5 is the tests' job
(tests/test_kw_postings.py).  Prints p50/p95 of the first search after a write and of the one
after it, as JSON.
"""
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from memdir.api import Memory
from memdir.bench.corpus import generate
from memdir.stores import kw_postings

work, size = Path(sys.argv[1]), int(sys.argv[2])
writes = int(sys.argv[3]) if len(sys.argv) > 3 else 100
corpus = generate(work / f"corpus-{size}", size, seed=42, n_queries=200)
PATCH = (kw_postings.PATCH_MIN_ROWS, kw_postings.PATCH_MAX_SHARE)
queries = corpus.queries


def pct(xs: list[float], p: float) -> float:
    return round(sorted(xs)[min(len(xs) - 1, int(p * len(xs)))], 3)


def step(mem: Memory, ws: Path, patch: bool, i: int) -> tuple[float, float]:
    kw_postings.PATCH_MIN_ROWS, kw_postings.PATCH_MAX_SHARE = PATCH if patch else (0, 0.0)
    with (ws / "memory" / "2100-01-01.md").open("a", encoding="utf-8") as fh:
        fh.write(f"- note {i}: {queries[(i * 7) % len(queries)]}\n")
    mem.sync(reason="bench")
    out = []
    for q in (queries[i % len(queries)], queries[(i + 1) % len(queries)]):
        t0 = time.perf_counter()
        mem.search(q, sync=False)
        out.append((time.perf_counter() - t0) * 1000)
    return out[0], out[1]


times: dict[bool, dict[str, list[float]]] = {m: {"first": [], "second": []} for m in (True, False)}
copies = {}
for patch in (True, False):
    ws = work / f"after-writes-{size}-{'patched' if patch else 'dropped'}"
    shutil.rmtree(ws, ignore_errors=True)
    shutil.copytree(corpus.workspace, ws)
    (ws / "memory" / "2100-01-01.md").write_text("# 2100-01-01\n", encoding="utf-8")
    shutil.rmtree(str(ws) + "-state", ignore_errors=True)
    copies[patch] = (ws, Memory(ws, state_dir=str(ws) + "-state", config={"memorySearch": {"provider": "none"}}))
try:
    for patch, (_ws, mem) in copies.items():
        kw_postings.PATCH_MIN_ROWS, kw_postings.PATCH_MAX_SHARE = PATCH if patch else (0, 0.0)
        mem.sync()
        for q in queries:  # warm: every query's words held once
            mem.search(q, sync=False)
            mem.search(q, sync=False)
    for i in range(writes):
        for patch in ((True, False) if i % 2 else (False, True)):
            first, second = step(copies[patch][1], copies[patch][0], patch, i)
            times[patch]["first"].append(first)
            times[patch]["second"].append(second)
finally:
    kw_postings.PATCH_MIN_ROWS, kw_postings.PATCH_MAX_SHARE = PATCH
    for ws, mem in copies.values():
        mem.close()
        shutil.rmtree(ws, ignore_errors=True)
        shutil.rmtree(str(ws) + "-state", ignore_errors=True)
report = {"size": size, "chunks": corpus.chunks, "writes": writes,
          **{("patched" if m else "dropped"): {k: {"p50": pct(v, 0.5), "p95": pct(v, 0.95),
                                                  "mean": round(statistics.mean(v), 3)} for k, v in t.items()}
             for m, t in times.items()}}
print(json.dumps(report, indent=1))
