"""The LoCoMo dev questions over the same facts written in other styles of notes.

    .venv/bin/python bench/note_styles.py ../shared/data/locomo-dev --work-dir /tmp/memdir-styles \
        --out /tmp/memdir-styles/report.json

LoCoMo gives every conversation day as a daily log (``memory/YYYY-MM-DD.md``), so everything
tuned on it was tuned on daily logs.  This script rewrites each conversation, turn for turn, as

* ``daily``: as given (the reference: the published figures);
* ``undated``: the same files named without a date (``memory/conv-notes-03.md``) and without
  their ``# YYYY-MM-DD`` heading, so they are chunked as curated notes (by sections);
* ``memory-md``: the whole conversation in one ``MEMORY.md``, a ``## Session N, time`` section
  per day;
* ``transcript``: each day an agent session transcript (``sessions/session-03.jsonl``, one
  message record per turn, the first speaker as the user), indexed with the ``sessions`` source;

keeps a map from every evidence line to its line in the new layout (for transcripts the JSONL
line memdir cites), and scores every mode with memdir's defaults through the same code as
``memdir bench quality`` (category 5 left out; each search asks for 6 results).  Beside the
figures it prints each style's chunks (count, mean and largest size) and counts returned line
ranges that do not fit the file (past its end, or a transcript line that holds no message).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memdir.bench.adapters import Answer, MemdirAdapter, Session, deep_merge
from memdir.bench.cv import CachedQueries, indexing_switches
from memdir.bench.quality import category_label, load_samples, run_adapter

STYLES = ("daily", "undated", "memory-md", "transcript")
MODES = ("hybrid", "keyword", "vector")
K = 6
SESSIONS_CONFIG = {"memorySearch": {"experimental": {"sessionMemory": True}, "sources": ["memory", "sessions"]}}

_DATE_HEADING = re.compile(r"^# (\d{4}-\d{2}-\d{2})\s*$")
_SESSION_HEADING = re.compile(r"^## Session \d+(?:, (.*))?$")
_TURN = re.compile(r"^- ([^:]+): (.*)$")

LineMap = dict[tuple[str, int], tuple[str, int]]


@dataclass
class Day:
    """One session of a daily log: the log's path and date, the session heading and its turns
    ``(line, speaker, text)``."""

    path: str
    date: str
    heading: str
    turns: list[tuple[int, str, str]] = field(default_factory=list)


def parse_day(workspace: Path, rel: str) -> list[Day]:
    """The sessions of a LoCoMo daily log (``# date``, then per session ``## Session N, time`` and
    one ``- Speaker: text`` turn a line).  Two sessions on one day share the day's log, as
    ``scripts/locomo_to_dataset.py`` writes them: such a log was refused ("a second session
    heading"), so conversations with them could not be measured at all."""
    where = workspace / rel  # named in full: the same file name is in every sample
    lines = where.read_text(encoding="utf-8").split("\n")
    m = _DATE_HEADING.match(lines[0])
    if not m:
        raise ValueError(f"{where}: expected a '# YYYY-MM-DD' first line (a LoCoMo daily log)")
    sessions = [Day(rel, m.group(1), "")]
    for n, line in enumerate(lines[1:], start=2):
        if _SESSION_HEADING.match(line):
            if sessions[-1].heading or sessions[-1].turns:
                sessions.append(Day(rel, m.group(1), ""))
            sessions[-1].heading = line
        elif (t := _TURN.match(line)) is not None:
            sessions[-1].turns.append((n, t.group(1), t.group(2)))
        elif line.strip():
            raise ValueError(f"{where}:{n}: not a heading or a turn: {line[:60]!r}")
    return sessions


def _session_time(day: Day) -> datetime:
    """The day and the time its heading gives (``1:56 pm``), else noon."""
    m = _SESSION_HEADING.match(day.heading)
    when = (m.group(1) if m else None) or ""
    base = datetime.fromisoformat(day.date)
    try:
        t = datetime.strptime(when.strip().lower().replace(".", ""), "%I:%M %p")
    except ValueError:
        return base.replace(hour=12)
    return base.replace(hour=t.hour, minute=t.minute)


class _Writer:
    """Lines of one output file, with the map from source lines to the lines written."""

    def __init__(self, path: str, line_map: LineMap):
        self.path = path
        self.lines: list[str] = []
        self.map = line_map

    def add(self, text: str, source: tuple[str, int] | None = None) -> None:
        self.lines.append(text)
        if source is not None:
            self.map[source] = (self.path, len(self.lines))

    def write(self, root: Path) -> None:
        target = root / self.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(self.lines) + "\n", encoding="utf-8")


def convert(workspace: Path, style: str, out: Path) -> LineMap:
    """Write ``workspace``'s daily logs in ``style`` under ``out`` (``out/workspace`` and, for
    transcripts, ``out/sessions``); return the map ``(path, line) -> (new path, new line)`` of
    every turn."""
    memory = sorted(p.relative_to(workspace).as_posix() for p in (workspace / "memory").glob("*.md"))
    by_file = [parse_day(workspace, rel) for rel in memory]  # each log's sessions
    days = [session for sessions in by_file for session in sessions]
    line_map: LineMap = {}
    ws = out / "workspace"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    if style == "daily":
        for rel in memory:
            n_lines = len((workspace / rel).read_text(encoding="utf-8").split("\n"))
            line_map.update({(rel, n): (rel, n) for n in range(1, n_lines + 1)})
            shutil.copyfile(workspace / rel, ws / rel)
        turns = {(day.path, n) for day in days for n, _, _ in day.turns}
        for key in [k for k in line_map if k not in turns]:  # only turns are evidence, as in the other styles
            del line_map[key]
    elif style in ("undated", "memory-md"):
        single = _Writer("MEMORY.md", line_map) if style == "memory-md" else None
        if single:
            single.add("# Conversation notes")
            single.add("")
        for i, sessions in enumerate(by_file, start=1):
            w = single or _Writer(f"memory/conv-notes-{i:02d}.md", line_map)
            for s, day in enumerate(sessions):
                if s and not single:
                    w.add("")
                w.add(day.heading)
                w.add("")
                for n, speaker, text in day.turns:
                    w.add(f"- {speaker}: {text}", (day.path, n))
                if single:
                    w.add("")
            if not single:
                w.write(ws)
        if single:
            single.write(ws)
    elif style == "transcript":
        speakers = list(dict.fromkeys(s for d in days for _, s, _ in d.turns))
        sessions = out / "sessions"
        for i, day in enumerate(days, start=1):
            w = _Writer(f"sessions/session-{i:02d}.jsonl", line_map)
            start = _session_time(day)
            w.add(json.dumps({"type": "session", "version": 3, "id": f"session-{i:02d}",
                              "timestamp": start.isoformat() + "Z", "cwd": "/"}))
            for j, (n, speaker, text) in enumerate(day.turns):
                role = "user" if speaker == speakers[0] else "assistant"
                stamp = (start + timedelta(seconds=30 * j)).isoformat() + "Z"
                w.add(json.dumps({"type": "message", "timestamp": stamp, "message": {
                    "role": role, "content": [{"type": "text", "text": f"{speaker}: {text}"}]}},
                    ensure_ascii=False), (day.path, n))
            w.write(out)
        sessions.mkdir(parents=True, exist_ok=True)
    else:
        raise ValueError(f"unknown style {style!r} (expected one of {', '.join(STYLES)})")
    return line_map


def map_queries(queries: Sequence[dict[str, Any]], line_map: LineMap) -> list[dict[str, Any]]:
    """The questions with their evidence moved to the new layout (an unmapped line is an error)."""
    out = []
    for q in queries:
        rel = []
        for r in q.get("relevant") or []:
            key = (str(r["path"]), int(r["line"]))
            if key not in line_map:
                raise ValueError(f"{q['id']}: evidence {key} is not a turn line")
            path, line = line_map[key]
            rel.append({"path": path, "line": line})
        out.append({**q, "relevant": rel})
    return out


def build_dataset(dataset: Path, style: str, out: Path, samples: Sequence[str] | None = None) -> Path:
    """``out/<style>/<sample>/{workspace,sessions,queries.jsonl}`` for every (chosen) sample."""
    root = out / style
    if root.exists():
        shutil.rmtree(root)
    for name, workspace, queries in load_samples(dataset):
        if samples and name not in samples:
            continue
        target = root / name
        line_map = convert(workspace, style, target)
        with (target / "queries.jsonl").open("w", encoding="utf-8") as fh:
            for q in map_queries(queries, line_map):
                fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    return root


# -- indexing and checking -----------------------------------------------------------------------

class CachedProvider(CachedQueries):
    """The local model with every text's vector remembered, queries and documents alike, so the
    modes and styles that index the same text embed it once (vectors are the model's own)."""

    def __init__(self, inner: Any):
        super().__init__(inner)
        self._documents: dict[str, list[float]] = {}

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._documents))
        if missing:
            for t, v in zip(missing, self._inner.embed_batch(missing), strict=True):
                self._documents[t] = v
        return [self._documents[t] for t in texts]


@dataclass
class Stats:
    """Chunks per style and returned ranges that do not fit their file."""

    chunks: list[tuple[int, int]] = field(default_factory=list)  # (chars, lines) of each chunk
    results: int = 0
    bad: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        chars = [c for c, _ in self.chunks]
        lines = [n for _, n in self.chunks]
        return {"chunks": len(chars), "meanChars": round(statistics.fmean(chars), 1) if chars else 0,
                "maxChars": max(chars, default=0), "meanLines": round(statistics.fmean(lines), 2) if lines else 0,
                "maxLines": max(lines, default=0), "results": self.results, "badRanges": len(self.bad),
                "badExamples": self.bad[:5]}


class StyleAdapter(MemdirAdapter):
    """memdir in one mode on a converted sample: transcripts go to the sessions folder before the
    index is built; chunk sizes are recorded and every returned range is checked."""

    def __init__(self, mode: str, style: str, stats: Stats, **kw: Any):
        overrides = SESSIONS_CONFIG if style == "transcript" else {}
        super().__init__(mode, overrides=overrides, label=style, **kw)
        self.stats = stats

    def index(self, workspace: Path, state_dir: Path) -> Session:
        import time

        from memdir.bench.adapters import _MemdirSession, bench_memory, mode_overrides

        cfg = deep_merge(self.overrides, mode_overrides(self.mode))
        mem = bench_memory(workspace, state_dir, cfg, provider=self.provider)
        sessions = workspace.parent / "sessions"
        if sessions.is_dir():
            target = mem.settings.sessions_dir
            target.mkdir(parents=True, exist_ok=True)
            for p in sorted(sessions.glob("*.jsonl")):
                shutil.copyfile(p, target / p.name)
        t0 = time.perf_counter()
        try:
            mem.sync(reason="bench")
            rows = mem.store.conn.execute("SELECT text, start_line, end_line FROM chunks").fetchall()
        except BaseException:
            mem.close()
            raise
        if self.mode == "hybrid":
            self.stats.chunks.extend((len(t), e - s + 1) for t, s, e in rows)
        return _CheckedSession(_MemdirSession(mem, self.mode, self.min_score, time.perf_counter() - t0),
                               workspace, self.stats)


class _CheckedSession(Session):
    def __init__(self, inner: Session, workspace: Path, stats: Stats):
        self.inner = inner
        self.index_seconds = inner.index_seconds
        self.workspace = workspace
        self.stats = stats
        self._valid: dict[str, set[int]] = {}

    def _lines(self, path: str) -> set[int]:
        """Lines a result may cite: every line of a note, the message lines of a transcript."""
        if path not in self._valid:
            if path.startswith("sessions/"):
                raw = (self.workspace.parent / path).read_text(encoding="utf-8").split("\n")
                ok = {n for n, line in enumerate(raw, start=1) if '"type": "message"' in line}
            else:
                f = self.workspace / path
                ok = set(range(1, len(f.read_text(encoding="utf-8").split("\n")) + 1)) if f.is_file() else set()
            self._valid[path] = ok
        return self._valid[path]

    def search(self, query: str, k: int) -> Answer:
        ans = self.inner.search(query, k)
        for r in ans.ranked:
            self.stats.results += 1
            valid = self._lines(r.path)
            if r.start_line > r.end_line or r.start_line not in valid or r.end_line not in valid:
                self.stats.bad.append(f"{r.path}:{r.start_line}-{r.end_line}")
        return ans

    def close(self) -> None:
        self.inner.close()


def run(dataset: Path, work_dir: Path, styles: Sequence[str], modes: Sequence[str], *,
        samples: Sequence[str] | None = None, limit: int | None = None, provider: Any = None,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Convert, index and score: ``{styles: {style: {chunks..., modes: {mode: run}}}}``."""
    report: dict[str, Any] = {"dataset": str(dataset), "k": K, "styles": {}}
    for style in styles:
        root = build_dataset(dataset, style, work_dir, samples)
        stats = Stats()
        entry: dict[str, Any] = {"modes": {}}
        for mode in modes:
            # keyword = no provider at all (an override would be used even with provider "none")
            adapter = StyleAdapter(mode, style, stats, provider=None if mode == "keyword" else provider)
            entry["modes"][mode] = run_adapter(adapter, load_samples(root), [K], limit=limit, progress=progress)
        entry.update(stats.as_dict())
        report["styles"][style] = entry
    return report


# -- tuning candidates for curated notes (measured, never defaults) ------------------------------

#: Variants for styles chunked by sections: ``(name, config, indexing switches, widening)``;
#: widening is ``""`` (as memdir does: a curated result grows within its section, or not at all
#: with ``widen_sections`` off) or ``"all"`` (widened like a daily-log result, across headings).
CURATED_VARIANTS: tuple[tuple[str, dict[str, Any], dict[str, Any], str], ...] = (
    ("sections 200/40 widened within their section (default)", {}, {}, ""),
    ("sections 200/40 unwidened (before)", {}, {"widen_sections": False}, ""),
    ("sections 200/40 widened to 1600 chars", {}, {}, "all"),
    ("sections 300/60 unwidened", {"memorySearch": {"chunking": {"tokens": 300, "overlap": 60}}},
     {"widen_sections": False}, ""),
    ("sections 400/80 unwidened", {"memorySearch": {"chunking": {"tokens": 400, "overlap": 80}}},
     {"widen_sections": False}, ""),
    ("size chunks 200/40 widened (as daily logs)", {}, {"sections": False}, "all"),
)


@contextmanager
def curated_widening(how: str) -> Iterator[None]:
    """Search with curated results widened like daily-log results (``how == "all"``: across
    headings): a bench-only patch of :mod:`memdir.search`, undone on exit."""
    from memdir import search

    if how != "all":
        yield
        return
    by_sections = search._by_sections
    search._by_sections = lambda _path: False
    try:
        yield
    finally:
        search._by_sections = by_sections


def curated_cv(root: Path, work_dir: Path, provider: Any, *, limit: int | None = None,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Hybrid runs of :data:`CURATED_VARIANTS` on one converted style, and the one chosen by
    leave-one-conversation-out CV (:func:`memdir.bench.cv.leave_one_out`)."""
    from memdir.bench.cv import Variant, leave_one_out, run_variant, summarise

    samples = load_samples(root)
    results: dict[str, list[dict[str, Any]]] = {}
    table: dict[str, Any] = {}
    for name, config, indexing, widen in CURATED_VARIANTS:
        with curated_widening(widen):
            results[name] = run_variant(Variant(name, config=config, indexing=indexing), samples, work_dir,
                                        provider, k=K, limit=limit, progress=progress)
        table[name] = summarise(results[name])
    table["chosen by CV"] = leave_one_out(results, [v[0] for v in CURATED_VARIANTS])
    return table


#: Candidates for transcripts: ``(name, config, indexing switches)``.  A converted sample has no
#: memory files, so its chunk size is the sessions source's alone; ``widen_sessions`` widens a
#: result over its neighbouring messages to ``Tuning.expand_chars``, as a daily log's is.
TRANSCRIPT_VARIANTS: tuple[tuple[str, dict[str, Any], dict[str, bool]], ...] = (
    ("transcript chunks 200/40 unwidened (before)", {}, {"widen_sessions": False}),
    ("transcript chunks 300/60 unwidened", {"memorySearch": {"chunking": {"tokens": 300, "overlap": 60}}},
     {"widen_sessions": False}),
    ("transcript chunks 400/80 unwidened", {"memorySearch": {"chunking": {"tokens": 400, "overlap": 80}}},
     {"widen_sessions": False}),
    ("transcript chunks 200/40 widened over messages to 1600 chars", {}, {"widen_sessions": True}),
    ("transcript chunks 400/80 widened over messages to 1600 chars",
     {"memorySearch": {"chunking": {"tokens": 400, "overlap": 80}}}, {"widen_sessions": True}),
)


def transcript_cv(root: Path, work_dir: Path, provider: Any, *, limit: int | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Hybrid runs of :data:`TRANSCRIPT_VARIANTS` on the transcript style, and the CV choice;
    each run also counts the returned ranges that are not message lines of their transcript."""
    from memdir.bench.cv import leave_one_out, summarise
    from memdir.bench.quality import category_of, score_query, scored_queries

    say = progress or (lambda _m: None)
    results: dict[str, list[dict[str, Any]]] = {}
    table: dict[str, Any] = {}
    for name, config, switches in TRANSCRIPT_VARIANTS:
        stats = Stats()
        adapter = StyleAdapter("hybrid", "transcript", stats, provider=provider)
        adapter.overrides = deep_merge(adapter.overrides, config)
        rows: list[dict[str, Any]] = []
        with indexing_switches(switches):
            for sample, workspace, queries in load_samples(root):
                todo = scored_queries(queries)[:limit] if limit else scored_queries(queries)
                state = work_dir / f"{sample}-{len(results)}"
                if state.exists():
                    shutil.rmtree(state)
                session = adapter.index(workspace, state)
                try:
                    for q in todo:
                        ans = session.search(q["query"], K)
                        sc = score_query(q["relevant"], ans.ranked, [K])
                        rows.append({"sample": sample, "id": q["id"], "category": category_of(q),
                                     "recall": sc.recall[K], "hit": sc.hit[K], "mrr": sc.rr[K],
                                     "lines": sc.lines[K], "ms": ans.ms, "mode": ans.mode})
                finally:
                    session.close()
                say(f"[{name}] {sample}: {len(todo)} questions")
        results[name] = rows
        table[name] = summarise(rows) | {"badRanges": len(stats.bad), "badExamples": stats.bad[:5]}
    table["chosen by CV"] = leave_one_out(results, [v[0] for v in TRANSCRIPT_VARIANTS])
    return table


def format_report(report: dict[str, Any]) -> str:
    k = str(report["k"])
    head = ["style", "mode", "category", "queries", f"R@{k}", f"hit@{k}", f"MRR@{k}", f"lines@{k}"]
    rows = [head]
    for style, entry in report["styles"].items():
        for mode, r in entry["modes"].items():
            ran = "" if not r.get("fallback") else " !"
            for cat, data in [("all", r["overall"] | {"queries": r["queries"]}), *r["byCategory"].items()]:
                rows.append([style, mode + ran, category_label(cat), str(data["queries"]),
                             f"{data['recall'][k]:.3f}", f"{data['hit'][k]:.3f}", f"{data['mrr'][k]:.3f}",
                             f"{data['lines'][k]:.1f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append("")
    out.append("style        chunks  mean chars  max chars  mean lines  max lines  results  bad ranges")
    for style, e in report["styles"].items():
        out.append(f"{style:<12} {e['chunks']:>6}  {e['meanChars']:>10}  {e['maxChars']:>9}  {e['meanLines']:>10}"
                   f"  {e['maxLines']:>9}  {e['results']:>7}  {e['badRanges']:>10}"
                   + (f"  e.g. {', '.join(e['badExamples'])}" if e["badExamples"] else ""))
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/memdir-styles"))
    ap.add_argument("--styles", default=",".join(STYLES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--samples", help="comma-separated sample names (default: all)")
    ap.add_argument("--limit", type=int, help="first N scored questions per sample")
    ap.add_argument("--cv", action="store_true",
                    help="also measure chunking/widening candidates for the undated styles and transcripts "
                         "(hybrid, leave-one-conversation-out CV)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--out", type=Path, help="also write the JSON report here")
    args = ap.parse_args(argv)
    styles = [s.strip() for s in args.styles.split(",") if s.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    samples = [s.strip() for s in args.samples.split(",") if s.strip()] if args.samples else None
    # Checked before the model loads and the work folder is emptied: a typo failed with a traceback
    # half-way, and an unknown --samples name scored nothing ("dataset folder not found: <work-dir>/daily").
    for what, given, known in (("--styles", styles, STYLES), ("--modes", modes, MODES)):
        if not given or set(given) - set(known):
            ap.error(f"{what}: expected a comma list of {', '.join(known)}, got {','.join(given) or 'nothing'}")
    if args.limit is not None and args.limit < 1:
        ap.error(f"--limit: expected at least 1, got {args.limit}")
    try:
        names = [name for name, _, _ in load_samples(args.dataset)]
    except ValueError as exc:
        ap.exit(2, f"note_styles: {exc}\n")
    unknown = sorted(set(samples or ()) - set(names))
    if unknown:
        ap.error(f"--samples: no sample {', '.join(unknown)} in {args.dataset} (it has {', '.join(names)})")
    if args.cv and len(samples or names) < 2:
        ap.error("--cv chooses each candidate on the other conversations: it needs at least two samples")
    from memdir.embeddings.local import LocalEmbeddingProvider

    provider = CachedProvider(LocalEmbeddingProvider())
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        report = run(args.dataset, args.work_dir, styles, modes, samples=samples, limit=args.limit,
                     provider=provider, progress=say)
    except ValueError as exc:  # a daily log not in LoCoMo's layout, named
        ap.exit(2, f"note_styles: {exc}\n")
    if args.cv:
        report["candidatesCV"] = {}
        for style in (s for s in styles if s in ("undated", "memory-md")):
            report["candidatesCV"][style] = curated_cv(args.work_dir / style, args.work_dir / f"cv-{style}", provider,
                                                    limit=args.limit, progress=say)
        if "transcript" in styles:
            report["candidatesCV"]["transcript"] = transcript_cv(
                args.work_dir / "transcript", args.work_dir / "cv-transcript", provider, limit=args.limit,
                progress=say)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    if not args.json:
        from memdir.bench.cv import format_rows

        for style, table in report.get("candidatesCV", {}).items():
            print(f"\nCandidates for {style} (hybrid; each fold chooses on the other conversations):\n")
            print(format_rows(table))
            bad = {name: v["badRanges"] for name, v in table.items() if "badRanges" in v}
            if bad:
                print("\nreturned ranges that are not message lines: "
                      + ", ".join(f"{name}: {n}" for name, n in bad.items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
