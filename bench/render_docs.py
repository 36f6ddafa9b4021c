"""Copy the tables of one ``bench/run_all.py`` run into ``docs/benchmarks.md``.

    .venv/bin/python bench/render_docs.py            # rewrite the marked blocks in place
    .venv/bin/python bench/render_docs.py --check    # exit 1 if the doc differs from the results

``docs/benchmarks.md`` is prose around marked blocks::

    <!-- results:speed -->
    ...replaced by the run's docs/results/speed.md...
    <!-- /results -->

A block is filled from ``docs/results/<name>.md`` (the table a bench printed), else from the
step's JSON through a formatter below, and says which step of which run made it.  A step the run
skipped says why; a block whose step failed or never ran stops the render, so the doc never mixes
a fresh run with an old one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)
#: Any marker, however spaced, so that one the block pattern does not take is named, not skipped.
MARKER = re.compile(r"<!--\s*(/?)\s*results\b[^>]*-->")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


def _read(name: str) -> str:
    """A file of the run; one that is missing stops the render with its name (it was a traceback)."""
    try:
        return (RESULTS / name).read_text()
    except FileNotFoundError:
        raise SystemExit(f"render_docs: {RESULTS / name} is missing (run bench/run_all.py)") from None


def _load(name: str) -> Any:
    return json.loads(_read(name))


def _run_block() -> str:
    run = _load("run.json")
    m = run["machine"]
    steps = _table(["step", "status", "seconds", "load before"],
                   [[s["name"], s["status"] + (f" ({s['reason']})" if s.get("reason") else ""),
                     s.get("seconds", ""), round(s["loadBefore"], 1)] for s in run["steps"]])
    dirty = " (with uncommitted changes)" if run.get("dirty") else ""
    return (f"One run of `bench/run_all.py` on commit `{run['commit'][:10]}`{dirty}, "
            f"{run['started']} to {run.get('finished', '?')}.\n\n"
            + _table(["", ""], [["CPU", f"{m.get('cpu') or '?'}, {m.get('cores')} cores"],
                                ["memory", f"{m.get('memGiB', '?')} GiB"], ["OS", m.get("platform")],
                                ["Python", m.get("python")], ["stdlib SQLite", m.get("stdlibSqlite")]])
            + "\n\n" + steps)


def _search_latency(d: dict[str, Any]) -> str:
    rows = []
    for mode in ("keyword", "hybrid"):
        r = d[mode]
        rows.append([mode, r["n"], r["p50"], r["p95"], r["p50_without_query_embedding"],
                     r["p95_without_query_embedding"]])
    return _table(["mode", "questions", "p50 ms", "p95 ms", "p50 ms without query embedding",
                   "p95 ms without query embedding"], rows)


def _ltm_latency(d: dict[str, Any]) -> str:
    rows = [[label, d[key]["n"], d[key]["p50"], d[key]["p95"]] for label, key in (
        ("`store` that creates a memory", "storeCreatedMs"), ("`store`, every call", "storeMs"),
        ("`search` / `memory_recall`", "searchMs"), ("`auto_recall`", "autoRecallMs"),
        ("query embedding alone", "embedQueryMs"))]
    mem = d["memories"]
    return (_table(["operation", "calls", "p50 ms", "p95 ms"], rows)
            + f"\n\n{mem['active']} active memories after {mem['storeCalls']} `store` calls "
              f"({mem['duplicates']} near-duplicates skipped), model {d['model']}, "
              f"{d['diskBytes'] / 1e6:.1f} MB on disk, load average {d['machine']['load'][0]:.1f}.")


def _ltm_recall(d: dict[str, Any]) -> str:
    rows = [[label, f"{r['stored']}/{r['planted']}", f"{r['recalledTop3']}/{r['planted']}", r["recalledTop1"],
             r["meanMemoriesPerBlock"], ", ".join(r["notStored"]) or "-"]
            for label, r in (("auto-capture", d["autoCapture"]), ("`store` directly", d["directStore"]))]
    return _table(["planting", "stored", "fact in the block (top 3)", "fact first", "memories per block",
                   "not stored"], rows)


def _watch(d: dict[str, Any]) -> str:
    return _table(["debounce ms", "notes", "edits", "found", "timeouts", "p50 ms", "p95 ms", "max ms", "load"],
                  [[d["debounceMs"], d["notes"], d["edits"], d["found"], d["timeouts"], d["p50Ms"], d["p95Ms"],
                    d["maxMs"], d["loadAverage"][0]]])


def _watch_fds(d: dict[str, Any]) -> str:
    rows = [[when, d[key]["fds"], d[key]["inotifyInstances"], d[key]["inotifyWatches"]]
            for when, key in (("before watching", "beforeWatch"), ("while watching", "whileWatching"),
                              ("after close", "afterClose"))]
    return (_table(["", "open fds", "inotify instances", "inotify watches"], rows)
            + f"\n\n{d['files']:,} files in {d['folders']:,} folders (+{d['ignoredFolders']:,} ignored folders): "
              f"index {d['indexSeconds']} s, watch set-up {d['watchSetupSeconds']} s, "
              f"an edit found after {d['editFoundSeconds']} s.")


def _heal(d: dict[str, Any]) -> str:
    def said(message: str) -> str:  # the words, without the temp folder and the time stamp
        message = re.sub(r"\$TMP/\S*?/([\w-]+\.sqlite)", r"…/\1", message)
        return re.sub(r"\.corrupt-[\d-]+", ".corrupt-<time>", message).replace("|", "\\|")

    rows = [[c["case"], c["exit"], "yes" if c["answerFound"] else "**no**", c["rebuildSecondsMedian"],
             c["salvagedCacheEntries"], said(c["message"])] for c in d["cases"]]
    return (f"{d['files']} files, {d['chunks']} chunks, provider {d['provider']}: cold index "
            f"{d['coldIndexSeconds']} s (CLI {d['coldCliIndexSeconds']} s), intact search "
            f"{d['intactSearchSeconds']} s.\n\n"
            + _table(["damage", "exit", "answer found", "heal s (median)", "cache entries kept", "what the user saw"],
                     rows))


def _remote(d: list[dict[str, Any]]) -> str:
    return _table(["phase", "samples", "chunks", "embedded", "requests", "bytes sent"],
                  [[r["phase"], r["samples"], r["chunks"], r["embedded"], r["requests"], f"{r['bytesSent']:,}"]
                   for r in d])


def _text(text: str) -> str:
    return "```text\n" + text.strip() + "\n```"


#: Steps whose bench prints plain text, shown as it is.
TEXT_STEPS = ("agent-recall", "note-styles")


#: step name -> (file under docs/results, formatter); steps whose bench prints markdown need none.
FORMATTERS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "search-latency": ("search-latency.json", _search_latency),
    "ltm-latency": ("ltm-latency.json", _ltm_latency),
    "ltm-recall": ("ltm-recall.json", _ltm_recall),
    "watch-latency": ("watch-latency.json", _watch),
    "watch-latency-100ms": ("watch-latency-100ms.json", _watch),
    "watch-fds": ("watch-fds.json", _watch_fds),
    "heal-rebuild": ("heal-rebuild.json", _heal),
    "remote-accounting": ("remote-accounting.json", _remote),
}


def render_block(name: str, steps: dict[str, dict[str, Any]]) -> str:
    """The text of one marked block, or raise if its step did not succeed in the run."""
    if name == "run":
        return _run_block()
    step = steps.get(name)
    if step is None:
        raise SystemExit(f"render_docs: step {name!r} is not in docs/results/run.json (run it with run_all)")
    if step["status"] == "skipped":
        return f"_Not measured in this run: {step['reason']}._"
    if step["status"] != "ok":
        raise SystemExit(f"render_docs: step {name!r} {step['status']} (see bench/out/run-all/{name}.log)")
    if name in TEXT_STEPS:
        body = _text(_read(f"{name}.txt"))
    elif name in FORMATTERS:
        file, fmt = FORMATTERS[name]
        body = fmt(_load(file))
    else:
        body = _read(f"{name}.md").strip()
    return f"{body}\n\n_Step `{name}`: {step['seconds']} s, load average {step['loadBefore']:.1f} before it._"


def check_markers(doc: str) -> None:
    """Every block opens and closes once, in that order, spelled as :data:`BLOCK` reads it.

    An opening marker without its closing one made the block run on to the *next* block's end:
    the render replaced both with one table and deleted the second marker; a marker spelled
    otherwise (a trailing space) was passed over, so ``--check`` said a stale block was current.
    """
    open_at: int | None = None
    for m in MARKER.finditer(doc):
        line = doc.count("\n", 0, m.start()) + 1
        closing = bool(m.group(1))
        if closing == (open_at is None):
            what = "closes no block" if closing else f"opens a block inside the one opened on line {open_at}"
            raise SystemExit(f"render_docs: {DOC.name} line {line}: {m.group(0)!r} {what}")
        open_at = None if closing else line
    if open_at is not None:
        raise SystemExit(f"render_docs: {DOC.name} line {open_at}: a block is opened and never closed "
                         "('<!-- /results -->')")
    exact = {m.start(1) for m in BLOCK.finditer(doc)} | {m.start(4) for m in BLOCK.finditer(doc)}
    for m in MARKER.finditer(doc):
        if m.start() not in exact:
            line = doc.count("\n", 0, m.start()) + 1
            raise SystemExit(f"render_docs: {DOC.name} line {line}: {m.group(0)!r} is not a marker as written: "
                             "'<!-- results:NAME -->' and a new line ... '<!-- /results -->'")


def render(doc: str) -> str:
    check_markers(doc)
    steps = {s["name"]: s for s in _load("run.json")["steps"]}
    return BLOCK.sub(lambda m: f"{m.group(1)}{render_block(m.group(2), steps)}\n{m.group(4)}", doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only say whether the doc is up to date")
    args = ap.parse_args()
    doc = DOC.read_text()
    new = render(doc)
    if args.check:
        if new != doc:
            print("docs/benchmarks.md differs from docs/results (run bench/render_docs.py)", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    print(f"rendered {len(BLOCK.findall(new))} blocks into {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
