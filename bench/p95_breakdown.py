"""Where the search latency tail comes from: each query's first run beside its repeat, by cause.

    python bench/p95_breakdown.py WORK_DIR SIZE [keyword|hybrid] [--settle] [--json OUT]

``WORK_DIR/corpus-SIZE`` is a ``bench speed`` corpus (generated when missing: same seed and 200
queries) with its index in ``state-SIZE-kw`` / ``-vec`` (built on first use and kept).  One fresh
process does what the speed bench's search worker does (keyword: a sync and 5 no-op syncs first;
hybrid: a vector-only pass over the queries first, as the bench runs vector before hybrid; then 3
warm-up queries and every query once), then runs every query a second time ("repeat").
``--settle`` waits after the warm-up queries until the store's background keyword warm-up is done
(a long-lived process between bursts of searches, as ``bench/kw_p95.py``'s "settled").  Each
search's time is taken on the wall and as this thread's CPU time (``time.thread_time``: what
other processes on a shared machine do to it counts far less), the query embedding left out.

For the first run it also adds up, per query, the time spent in what a warm process has already
done (the methods are wrapped, results untouched): reading a phrase's postings from FTS5
(``postings``: :mod:`memdir.stores.kw_postings`), counting phrases' rows (``counts``:
``fts5vocab``) and measuring notes' lines for widening (``notes``: :mod:`memdir.note_lines`).
The first and the repeat pass must return the same results.  Printed: p50/p95 of both passes,
the slowest queries with their split, and how much of the slowest twentieth's extra time (first
minus repeat) each cause explains.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CAUSES = ("postings", "counts", "notes")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def _wrap(owner: Any, name: str, acc: dict[str, float], cause: str) -> None:
    """Time every call of ``owner.name`` into ``acc[cause]`` (thread CPU, ms; outermost call only)."""
    orig: Callable[..., Any] = getattr(owner, name)
    depth = [0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        t0 = time.thread_time()
        try:
            return orig(*args, **kwargs)
        finally:
            depth[0] -= 1
            if not depth[0]:
                acc[cause] += (time.thread_time() - t0) * 1000

    setattr(owner, name, timed)


def measure(work: Path, size: int, mode: str, settle: bool = False) -> list[dict[str, Any]]:
    from memdir import note_lines
    from memdir.api import Memory
    from memdir.bench.corpus import generate
    from memdir.bench.speed import SyntheticProvider
    from memdir.stores import fts_scores, kw_postings

    corpus = generate(work / f"corpus-{size}", size, seed=42, n_queries=200)
    acc = dict.fromkeys(CAUSES, 0.0)
    _wrap(kw_postings.KeywordPostings, "_load_phrase", acc, "postings")
    _wrap(kw_postings.KeywordPostings, "_read_together", acc, "postings")
    _wrap(fts_scores.FtsScorer, "_vocab_counts", acc, "counts")
    _wrap(note_lines.NoteLines, "widths", acc, "notes")
    kw = mode == "keyword"
    state = work / f"state-{size}-{'kw' if kw else 'vec'}"
    provider = None if kw else SyntheticProvider()
    if not kw:
        with Memory(corpus.workspace, state_dir=str(state), provider=provider,
                    config={"memorySearch": {"query": {"hybrid": {"enabled": False}}}}) as mem:
            if not (state / "built").exists():
                mem.sync()
                (state / "built").touch()
            for q in corpus.queries[:3] + corpus.queries:
                mem.search(q, sync=False)
    cfg = {"memorySearch": {"provider": "none"}} if kw else {}
    with Memory(corpus.workspace, state_dir=str(state), config=cfg, provider=provider) as mem:
        if kw:
            mem.sync()
            for _ in range(5):
                mem.sync(reason="bench")
        mem.store  # noqa: B018 - open before timing

        def run(q: str) -> dict[str, Any]:
            for k in acc:
                acc[k] = 0.0
            t0, c0 = time.perf_counter(), time.thread_time()
            r = mem.search(q, sync=False)
            embed = r.timings_ms.get("embed", 0.0)
            return {"wall": (time.perf_counter() - t0) * 1000 - embed, "cpu": (time.thread_time() - c0) * 1000 - embed,
                    **{k: round(v, 3) for k, v in acc.items()},
                    "hits": [(h.path, h.start_line, h.end_line, h.score) for h in r.results]}

        for q in corpus.queries[:3]:
            run(q)
        t0 = time.monotonic()
        while settle and time.monotonic() - t0 < 600:
            if (mem.store.describe()["fts"]["warm"].get("warmup") or {}).get("state") not in ("starting", "running"):
                break
            time.sleep(0.2)
        first = [run(q) for q in corpus.queries]
        repeat = [run(q) for q in corpus.queries]
    out = []
    for q, f, r in zip(corpus.queries, first, repeat, strict=True):
        if f["hits"] != r["hits"]:
            raise SystemExit(f"first and repeat differ for {q!r}")
        out.append({"query": q, "first": {k: v for k, v in f.items() if k != "hits"},
                    "repeat": {k: r[k] for k in ("wall", "cpu")}})
    return out


def report(rows: list[dict[str, Any]], top: int = 12) -> str:
    lines = []
    for clock in ("cpu", "wall"):
        f = [r["first"][clock] for r in rows]
        p = [r["repeat"][clock] for r in rows]
        lines.append(f"{clock:4}  first p50 {_pct(f, 50):6.2f}  p95 {_pct(f, 95):6.2f}  "
                     f"({_pct(f, 95) / _pct(f, 50):.2f}x)   repeat p50 {_pct(p, 50):6.2f}  p95 {_pct(p, 95):6.2f}  "
                     f"({_pct(p, 95) / _pct(p, 50):.2f}x)  ms")
    extra = [r["first"]["cpu"] - r["repeat"]["cpu"] for r in rows]
    lines.append(f"median first - repeat (cpu): {statistics.median(extra):.2f} ms")
    slow = sorted(rows, key=lambda r: -r["first"]["cpu"])
    lines.append(f"\nslowest {top} first runs (cpu ms): first  repeat  " + "  ".join(f"{c:>8}" for c in CAUSES))
    for r in slow[:top]:
        lines.append(f"  {r['first']['cpu']:6.2f} {r['repeat']['cpu']:7.2f}  "
                     + "  ".join(f"{r['first'][c]:8.2f}" for c in CAUSES) + f"  {r['query'][:56]}")
    tail = slow[: max(1, len(rows) // 20)]
    gap = sum(r["first"]["cpu"] - r["repeat"]["cpu"] for r in tail)
    lines.append(f"\nslowest twentieth: first - repeat = {gap:.1f} ms cpu; explained by "
                 + ", ".join(f"{c} {sum(r['first'][c] for r in tail) / gap:.0%}" for c in CAUSES if gap > 0))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("size", type=int)
    ap.add_argument("mode", nargs="?", default="keyword", choices=("keyword", "hybrid"))
    ap.add_argument("--settle", action="store_true", help="wait for the keyword warm-up before timing")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = measure(a.work, a.size, a.mode, a.settle)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    print(f"{a.size} chunks, {a.mode}{', settled' if a.settle else ''}")
    print(report(rows))


if __name__ == "__main__":
    sys.exit(main())
