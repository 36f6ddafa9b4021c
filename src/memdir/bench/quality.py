"""Retrieval quality on a dataset of workspaces with labelled questions (SPEC §11).

Dataset layout: ``<dir>/<sample>/workspace/`` and ``<dir>/<sample>/queries.jsonl`` with one
question a line: ``{id, query, category, relevant: [{path, line}]}``.  A relevant line is found
when a returned result has the same path and its line range contains the line.  LoCoMo's
category 5 (adversarial, no evidence) is left out.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("keyword", "vector", "hybrid")
SKIP_CATEGORIES = {5}


@dataclass
class Ranked:
    path: str
    start_line: int
    end_line: int
    score: float = 0.0


@dataclass
class QueryScore:
    recall: dict[int, float]
    hit: dict[int, float]
    rr: dict[int, float]
    lines: dict[int, int]


def score_query(relevant: Sequence[dict[str, Any]], ranked: Sequence[Ranked], ks: Sequence[int]) -> QueryScore:
    rel = [(r["path"], int(r["line"])) for r in relevant]
    out = QueryScore({}, {}, {}, {})
    for k in ks:
        top = ranked[:k]
        found = {(p, ln) for p, ln in rel if any(h.path == p and h.start_line <= ln <= h.end_line for h in top)}
        out.recall[k] = len(found) / len(rel) if rel else 0.0
        out.hit[k] = 1.0 if found else 0.0
        rr = 0.0
        for i, h in enumerate(top, start=1):
            if any(h.path == p and h.start_line <= ln <= h.end_line for p, ln in rel):
                rr = 1.0 / i
                break
        out.rr[k] = rr
        out.lines[k] = sum(h.end_line - h.start_line + 1 for h in top)
    return out


@dataclass
class Aggregate:
    n: int = 0
    sums: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))

    def add(self, s: QueryScore) -> None:
        self.n += 1
        for name, values in (("recall", s.recall), ("hit", s.hit), ("mrr", s.rr), ("lines", s.lines)):
            for k, v in values.items():
                self.sums[name][k] += v

    def means(self) -> dict[str, dict[int, float]]:
        return {name: {k: v / max(1, self.n) for k, v in ks.items()} for name, ks in self.sums.items()}


def load_samples(dataset: Path) -> list[tuple[str, Path, list[dict[str, Any]]]]:
    samples = []
    for sample in sorted(p for p in dataset.iterdir() if (p / "queries.jsonl").is_file()):
        queries = [json.loads(line) for line in (sample / "queries.jsonl").read_text().splitlines() if line.strip()]
        samples.append((sample.name, sample / "workspace", queries))
    if not samples:
        raise ValueError(f"no samples in {dataset} (expected <sample>/workspace and <sample>/queries.jsonl)")
    return samples


def mode_overrides(mode: str) -> dict[str, Any]:
    if mode == "keyword":
        return {"memorySearch": {"provider": "none"}}
    if mode == "vector":
        return {"memorySearch": {"query": {"hybrid": {"enabled": False}}}}
    return {}


def run_quality(dataset: Path, *, ks: Sequence[int] = (1, 3, 6, 10), modes: Sequence[str] = ("keyword",),
                out_dir: Path | None = None, overrides: dict[str, Any] | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Index every sample and score every question through the real search path."""
    from memdir.api import Memory

    samples = load_samples(dataset)
    kmax = max(ks)
    report: dict[str, Any] = {"dataset": str(dataset), "ks": list(ks), "modes": {}}
    for mode in modes:
        overall = Aggregate()
        by_cat: dict[int, Aggregate] = defaultdict(Aggregate)
        index_s: list[float] = []
        query_ms: list[float] = []
        for name, workspace, queries in samples:
            with tempfile.TemporaryDirectory(prefix="memdir-bench-") as state:
                cfg = _deep_merge(mode_overrides(mode), overrides or {})
                with Memory(workspace, state_dir=state, config=cfg) as mem:
                    t0 = time.perf_counter()
                    mem.sync(reason="bench")
                    index_s.append(time.perf_counter() - t0)
                    ranked_out = []
                    for q in queries:
                        if q.get("category") in SKIP_CATEGORIES or not q.get("relevant"):
                            continue
                        t1 = time.perf_counter()
                        resp = mem.search(q["query"], max_results=kmax, sync=False)
                        query_ms.append((time.perf_counter() - t1) * 1000)
                        ranked = [Ranked(r.path, r.start_line, r.end_line, r.score) for r in resp.results]
                        s = score_query(q["relevant"], ranked, ks)
                        overall.add(s)
                        by_cat[int(q.get("category", 0))].add(s)
                        ranked_out.append({"id": q["id"], "results": [r.__dict__ for r in ranked]})
                    if out_dir is not None:
                        d = out_dir / mode
                        d.mkdir(parents=True, exist_ok=True)
                        (d / f"{name}.jsonl").write_text(
                            "".join(json.dumps({"id": r["id"], "results": [
                                {"path": x["path"], "startLine": x["start_line"], "endLine": x["end_line"],
                                 "score": x["score"]} for x in r["results"]]}) + "\n" for r in ranked_out))
            if progress:
                progress(f"{mode}: sample {name} done")
        report["modes"][mode] = {
            "queries": overall.n,
            "overall": overall.means(),
            "byCategory": {c: {"queries": a.n, **a.means()} for c, a in sorted(by_cat.items())},
            "indexSeconds": index_s,
            "queryMsP50": statistics.median(query_ms) if query_ms else None,
        }
    return report


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def format_table(report: dict[str, Any]) -> str:
    ks = report["ks"]
    head = ["mode", "queries"] + [f"R@{k}" for k in ks] + [f"hit@{k}" for k in ks] + [f"MRR@{max(ks)}"] + \
        [f"lines@{k}" for k in ks]
    rows = [head]
    for mode, data in report["modes"].items():
        o = data["overall"]
        rows.append([mode, str(data["queries"])] + [f"{o['recall'][k]:.3f}" for k in ks] +
                    [f"{o['hit'][k]:.3f}" for k in ks] + [f"{o['mrr'][max(ks)]:.3f}"] +
                    [f"{o['lines'][k]:.1f}" for k in ks])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
