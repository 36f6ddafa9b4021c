"""Leave-one-sample-out cross-validation of ranking choices (``memdir bench cv``).

Settings are never fitted to the data they are scored on: for each held-out sample (a LoCoMo
conversation), the variant of a family (e.g. fusion weights) that scores best on the *other*
samples is chosen, and only its answers on the held-out sample count.  The pooled held-out
figures are what a user with unseen notes can expect; the per-fold choices show how stable
a setting is.

Every variant runs memdir's real search path (:class:`memdir.api.Memory`).  Indexes live in
``work_dir`` and are reused between runs (the embedding cache makes a changed chunking cheap);
query vectors are cached in memory, so a sweep costs one embedding per question.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memdir.bench.adapters import Ranked, bench_memory, deep_merge, mode_overrides
from memdir.bench.quality import LOCOMO_CATEGORIES, category_of, load_samples, score_query, scored_queries

Progress = Callable[[str], None]


@dataclass
class Variant:
    """One way of searching: a mode, config overrides, ranking tuning and indexing switches."""

    name: str
    mode: str = "hybrid"
    config: dict[str, Any] = field(default_factory=dict)
    tuning: dict[str, Any] = field(default_factory=dict)
    #: Indexing switches of :mod:`memdir.sync` (``windows``, ``sections``), for ablations.
    indexing: dict[str, Any] = field(default_factory=dict)
    min_score: float | None = None

    def index_key(self) -> str:
        """Variants with the same key share an index."""
        chunking = (self.config.get("memorySearch") or {}).get("chunking")
        raw = json.dumps([self.mode == "keyword", chunking, sorted(self.indexing.items())], sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:12]


class CachedQueries:
    """An embedding provider whose query vectors are remembered (a sweep asks the same questions)."""

    def __init__(self, inner: Any):
        self._inner = inner
        self._memo: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def embed_query(self, text: str) -> list[float]:
        if text not in self._memo:
            self._memo[text] = self._inner.embed_query(text)
        return self._memo[text]


Row = dict[str, Any]


@contextmanager
def indexing_switches(switches: dict[str, bool]) -> Iterator[None]:
    """:data:`memdir.indexing_switches.INDEXING` with ``switches`` set, restored on exit; a name it does
    not have is an error (a misspelt switch measured the defaults under the variant's name)."""
    from memdir.indexing_switches import INDEXING

    unknown = sorted(set(switches) - set(INDEXING))
    if unknown:
        raise ValueError(f"unknown indexing switch {', '.join(unknown)} (known: {', '.join(INDEXING)})")
    old = dict(INDEXING)
    INDEXING.update(switches)
    try:
        yield
    finally:
        INDEXING.clear()
        INDEXING.update(old)


def run_variant(variant: Variant, samples: Sequence[Any], work_dir: Path, provider: Any, k: int = 6,
                limit: int | None = None, progress: Progress | None = None) -> list[Row]:
    """Per-question scores of one variant on every sample (each question its own search at ``k``)."""
    from memdir import query, ranking

    say = progress or (lambda _m: None)
    rows: list[Row] = []
    old_tuning = ranking.TUNING
    tuning = dict(variant.tuning)
    query.STEMMING = bool(tuning.pop("stemming", True))
    query.ID_PHRASES = bool(tuning.pop("id_phrases", True))
    query.NUMBERS = bool(tuning.pop("numbers", True))
    ranking.TUNING = replace(ranking.Tuning(), **tuning)
    try:
        with indexing_switches(variant.indexing):
            for name, workspace, queries in samples:
                todo = scored_queries(queries)
                todo = todo[:limit] if limit else todo
                cfg = deep_merge(mode_overrides(variant.mode), variant.config)
                state = work_dir / f"{name}-{variant.index_key()}"
                mem = bench_memory(workspace, state, cfg, provider=None if variant.mode == "keyword" else provider)
                try:
                    t0 = time.perf_counter()
                    mem.sync(reason="bench")
                    took = time.perf_counter() - t0
                    for q in todo:
                        t1 = time.perf_counter()
                        resp = mem.search(q["query"], max_results=k, min_score=variant.min_score, sync=False)
                        ms = (time.perf_counter() - t1) * 1000
                        ranked = [Ranked(r.path, r.start_line, r.end_line, r.score) for r in resp.results]
                        s = score_query(q["relevant"], ranked, [k])
                        rows.append({"sample": name, "id": q["id"], "category": category_of(q),
                                     "recall": s.recall[k], "hit": s.hit[k], "mrr": s.rr[k], "lines": s.lines[k],
                                     "ms": ms, "mode": resp.mode})
                finally:
                    mem.close()
                say(f"[{variant.name}] {name}: synced in {took:.1f}s, {len(todo)} questions")
    finally:
        ranking.TUNING = old_tuning
        query.STEMMING = query.ID_PHRASES = query.NUMBERS = True
    return rows


def summarise(rows: Sequence[Row]) -> dict[str, Any]:
    """Means of recall/hit/MRR/lines (overall and per category) and search latency p50/p95."""
    def means(rs: Sequence[Row]) -> dict[str, float]:
        n = max(1, len(rs))
        return {"queries": len(rs), **{m: round(sum(r[m] for r in rs) / n, 4) for m in ("recall", "hit", "mrr",
                                                                                        "lines")}}
    by_cat: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_cat[r["category"]].append(r)
    ms = sorted(r["ms"] for r in rows)
    out = {"overall": means(rows), "byCategory": {c: means(v) for c, v in sorted(by_cat.items())}}
    if ms:
        out["msP50"] = round(statistics.median(ms), 2)
        out["msP95"] = round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2)
    return out


def objective(rows: Sequence[Row]) -> tuple[float, float]:
    """What a fold maximises: mean recall@k, then MRR@k."""
    n = max(1, len(rows))
    return (sum(r["recall"] for r in rows) / n, sum(r["mrr"] for r in rows) / n)


def leave_one_out(results: dict[str, list[Row]], family: Sequence[str]) -> dict[str, Any]:
    """For each sample, pick the best variant of ``family`` on the other samples; pool held-out rows."""
    samples = sorted({r["sample"] for rows in results.values() for r in rows})
    if len(samples) < 2:  # each fold would choose on no data at all: the family's first variant, called "CV"
        raise ValueError(f"leave-one-out cross-validation needs at least two samples, not {len(samples)}")
    held: list[Row] = []
    chosen: dict[str, str] = {}
    for s in samples:
        best = max(family, key=lambda v: objective([r for r in results[v] if r["sample"] != s]))
        chosen[s] = best
        held.extend(r for r in results[best] if r["sample"] == s)
    return {"chosen": chosen, **summarise(held)}


def format_rows(named: dict[str, dict[str, Any]], markdown: bool = True) -> str:
    """One line per run: overall recall/hit/MRR/lines@k, per-category recall, latency."""
    cats = sorted({c for v in named.values() for c in v.get("byCategory", {})})
    head = ["run", "R@6", "hit@6", "MRR@6", "lines@6"] + [
        f"R@6 {LOCOMO_CATEGORIES.get(c, c)}" for c in cats] + ["ms p50", "ms p95", "chosen per fold"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, v in named.items():
        o = v["overall"]
        cells = [name, f"{o['recall']:.3f}", f"{o['hit']:.3f}", f"{o['mrr']:.3f}", f"{o['lines']:.1f}"]
        cells += [f"{v['byCategory'][c]['recall']:.3f}" if c in v["byCategory"] else "-" for c in cats]
        cells += [str(v.get("msP50", "-")), str(v.get("msP95", "-"))]
        cells.append(", ".join(f"{s}: {c}" for s, c in v.get("chosen", {}).items()) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load(dataset: Path) -> list[Any]:
    return load_samples(dataset)
