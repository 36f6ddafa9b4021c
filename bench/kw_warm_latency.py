"""Keyword search latency, FTS5 ranking vs the warm in-process postings, side by side in one process.

    python bench/kw_warm_latency.py STATE_DIR WORKSPACE [ROUNDS]

``STATE_DIR``/``WORKSPACE``: an index ``memdir bench speed`` built (``corpus-N/workspace`` and its
keyword-only state), or any workspace (indexed keyword-only on first use).  Each round runs every
query of ``corpus.json`` (or a built-in list) through ``Memory.search`` once with the postings
switched off (FTS5 ranks) and once on, alternating which goes first; the first round is a
warm-up.  Every query's results (ids and scores) must be identical in both modes.
"""
import json
import statistics
import sys
import time
from pathlib import Path

from memdir.api import Memory
from memdir.stores.sqlite import SqliteStore

state, ws = sys.argv[1], Path(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
manifest = ws.parent / "corpus.json"
queries = json.loads(manifest.read_text())["queries"] if manifest.is_file() else [
    "what did we decide about the deploy", "who owns the budget", "incident root cause"]
times: dict[bool, list[float]] = {False: [], True: []}
with Memory(ws, state_dir=state, config={"memorySearch": {"provider": "none"}}) as mem:
    mem.sync()
    for r in range(rounds + 1):
        for i, q in enumerate(queries):
            got = {}
            for warm in ((False, True) if (i + r) % 2 == 0 else (True, False)):
                SqliteStore.WARM_KEYWORD = warm
                t0 = time.perf_counter()
                res = mem.search(q, sync=False)
                ms = (time.perf_counter() - t0) * 1000
                got[warm] = [(h.path, h.start_line, h.end_line, h.score) for h in res.results]
                if r:
                    times[warm].append(ms)
            assert got[False] == got[True], (q, got)
    print(json.dumps({"postings": mem.store.describe()["fts"]["warm"]["postings"]}))


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]


for warm, xs in times.items():
    print(f"{'warm postings' if warm else 'FTS5 ranking '}: n={len(xs)} p50={statistics.median(xs):.2f} ms "
          f"p95={pct(xs, 0.95):.2f} ms")
