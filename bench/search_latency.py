"""Search latency over all LoCoMo dev questions for whichever memdir is on sys.path: p50/p95 per mode.

    PYTHONPATH=/path/to/old/checkout/src python bench/search_latency.py before OUT/before.json [DATASET]
    python bench/search_latency.py after OUT/after.json [DATASET]       # DATASET: ../shared/data/locomo-dev

Indexes go to /tmp/lat-TAG/ (kept, so a second run times search only).  Each question is one
`Memory.search(max_results=6)`; "without query embedding" subtracts `timings_ms.embed`.
"""
import json
import os
import statistics
import sys
import time
from pathlib import Path

import memdir
from memdir.api import Memory
from memdir.bench.quality import load_samples, scored_queries

os.environ.setdefault("MEMDIR_QUERY_CACHE_SIZE", "0")  # every timed query pays for its own vector

tag, out = sys.argv[1], sys.argv[2]
samples = load_samples(Path(sys.argv[3] if len(sys.argv) > 3 else "../shared/data/locomo-dev"))
res = {"code": memdir.__file__}
for mode in ("keyword", "hybrid"):
    tot, noembed = [], []
    for name, ws, qs in samples:
        cfg = {"memorySearch": {"provider": "none"}} if mode == "keyword" else {}
        mem = Memory(ws, state_dir=f"/tmp/lat-{tag}/{mode}-{name}", config=cfg)
        mem.sync()
        qq = scored_queries(qs)
        for q in qq[:5]:
            mem.search(q["query"], max_results=6, sync=False)  # warm-up
        for q in qq:
            t0 = time.perf_counter()
            r = mem.search(q["query"], max_results=6, sync=False)
            ms = (time.perf_counter() - t0) * 1000
            tot.append(ms)
            noembed.append(ms - r.timings_ms.get("embed", 0.0))
        mem.close()
    def q(xs, p):
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]
    res[mode] = {"n": len(tot), "p50": round(statistics.median(tot), 2), "p95": round(q(tot, 0.95), 2),
                 "p50_without_query_embedding": round(statistics.median(noembed), 2),
                 "p95_without_query_embedding": round(q(noembed, 0.95), 2)}
    print(tag, mode, res[mode], file=sys.stderr, flush=True)
Path(out).write_text(json.dumps(res, indent=2))
