"""Re-run every benchmark that ``docs/benchmarks.md`` cites, in one run, from the checked-out code.

    .venv/bin/python bench/run_all.py                    # everything (45 min to 1.5 h on 2 cores)
    .venv/bin/python bench/run_all.py --only quality-modes,quality-gate --dataset ../shared/data/locomo-dev

Each step's report lands in ``docs/results/<step>.json`` (and ``.md`` where the bench prints a
table), its log in ``bench/out/run-all/<step>.log``; a partial run (``--only``) writes its reports
to ``bench/out/run-all/partial/`` instead, never into the docs; ``docs/results/run.json`` records the commit,
the machine, the load before each step and what ran, was skipped (and why) or failed.  Then
``bench/render_docs.py`` copies the tables into ``docs/benchmarks.md``.  Steps that need a tool
this machine may not have (OpenClaw, memsearch under ``.bench-tools/``; PostgreSQL through
``pgserver`` or ``$MEMDIR_DATABASE_URL``) are skipped with the reason, never faked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
IMG = ROOT / "docs" / "img"
LOGS = ROOT / "bench" / "out" / "run-all"
PARTIAL = LOGS / "partial"
TOOLS = ROOT / ".bench-tools"
PY = sys.executable
MEMDIR = [PY, "-m", "memdir"]


@dataclass
class Step:
    """One bench: its command, where its stdout goes, and what it needs to run at all."""

    name: str
    argv: list[str]
    stdout: str | None = None  # file name under docs/results for the printed table/report
    needs: Callable[[], str | None] = lambda: None  # a reason to skip, or None
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: int = 3 * 3600


def _openclaw() -> str | None:
    found = list(TOOLS.glob("**/node_modules/openclaw/package.json"))
    return None if found else "OpenClaw is not installed (bench/setup-openclaw.sh 2026.9.6 .bench-tools/openclaw)"


def _memsearch() -> str | None:
    found = (TOOLS / "memsearch-venv" / "bin" / "python").exists()
    return None if found else "memsearch is not installed (bench/setup-memsearch.sh)"


def first_sample(dev: Path) -> Path | None:
    """The conversation the one-sample steps use: LoCoMo's ``26`` (the docs' figures), else the
    dataset's first sample (another dataset need not hold conversation 26)."""
    if (dev / "26" / "workspace").is_dir():
        return dev / "26"
    found = sorted(p for p in dev.iterdir() if (p / "workspace").is_dir() and (p / "queries.jsonl").is_file()) \
        if dev.is_dir() else []
    return found[0] if found else None


def steps(dev: Path, gate: Path, work: Path, dsn: str | None, fast: bool, results: Path = RESULTS,
          img: Path = IMG) -> list[Step]:
    """The benches in order; reports and charts are written under ``results`` and ``img``."""
    sizes = "1000,10000" if fast else "1000,10000,100000"
    sample = first_sample(dev) or dev / "26"
    adapters = ["memdir:keyword", "memdir:vector", "memdir:hybrid", "bm25", "openclaw-v2.27-keyword"]
    if _memsearch() is None:
        adapters.append("memsearch")
    if _openclaw() is None:
        adapters += ["openclaw-hybrid", "openclaw-hybrid:undated", "openclaw-cli"]
    out = work / "out"
    return [
        Step("quality-modes", [*MEMDIR, "bench", "quality", str(dev), "--mode", "all", "--k", "1,3,6,10",
                               "--markdown", "--quiet", "--out", str(out / "quality-modes"),
                               "--plot", str(img / "quality-modes.png")], "quality-modes.md"),
        Step("quality-gate", [*MEMDIR, "bench", "quality", str(gate), "--mode", "all", "--k", "1,3,6",
                              "--markdown", "--quiet", "--out", str(out / "quality-gate")], "quality-gate.md"),
        Step("cv-families", [PY, "bench/cv_locomo.py", str(dev), "--part", "families", "--work-dir", str(work / "cv"),
                             "--out", str(results / "cv-families.json")], "cv-families.md"),
        Step("cv-ablations", [PY, "bench/cv_locomo.py", str(dev), "--part", "ablations", "--work-dir",
                              str(work / "cv"), "--out", str(results / "cv-ablations.json")], "cv-ablations.md"),
        Step("quality-compare", [*MEMDIR, "bench", "compare", str(dev), "--adapters", ",".join(adapters), "--k", "6",
                                 "--markdown", "--quiet", "--out", str(out / "quality-compare"),
                                 "--plot", str(img / "quality-compare.png")], "quality-compare.md"),
        Step("note-styles", [PY, "bench/note_styles.py", str(dev), "--cv", "--work-dir", str(work / "styles")],
             "note-styles.txt"),
        Step("search-latency", [PY, "bench/search_latency.py", "main", str(results / "search-latency.json"), str(dev)]),
        Step("speed", [*MEMDIR, "bench", "speed", "--sizes", sizes, "--work-dir", str(work / "speed"), "--markdown",
                       "--quiet", "--out", str(out / "speed"), "--plot-dir", str(img)], "speed.md"),
        Step("openclaw-speed", [PY, "bench/openclaw_speed.py", str(sample), "--queries", "40", "--cli-runs", "5",
                                "--out", str(results / "openclaw-speed.json")], "openclaw-speed.md", needs=_openclaw),
        Step("backends", [*MEMDIR, "bench", "backends", "--sizes", "10000" if fast else "10000,100000",
                          "--concurrency", "8", "--quality", str(dev), "--work-dir", str(work / "backends"),
                          "--out", str(out / "backends")], "backends.md",
             needs=lambda: None if dsn else "no PostgreSQL (pgserver not installed and $MEMDIR_DATABASE_URL unset)",
             env={"MEMDIR_DATABASE_URL": dsn or ""}),
        Step("ltm-latency", [PY, "bench/ltm_latency.py", "--n", "1000", "--queries", "200",
                             "--json", str(results / "ltm-latency.json")]),
        Step("ltm-recall", [PY, "bench/ltm_recall.py", "--json", str(results / "ltm-recall.json")]),
        Step("agent-recall", [PY, "bench/agent_recall.py", "--json", str(results / "agent-recall.json")],
             "agent-recall.txt"),
        Step("watch-latency", [PY, "bench/watch_latency.py", str(sample / "workspace"), "--edits", "100"],
             "watch-latency.json"),
        Step("watch-latency-100ms", [PY, "bench/watch_latency.py", str(sample / "workspace"), "--edits", "100",
                                     "--debounce-ms", "100"], "watch-latency-100ms.json"),
        Step("watch-fds", [PY, "bench/watch_fds.py", "--files", "10000", "--folders", "1000",
                           "--ignored-folders", "5000"], "watch-fds.json"),
        Step("heal-rebuild", [PY, "bench/heal_rebuild.py", str(sample / "workspace"), "--repeat", "3"],
             "heal-rebuild.json"),
        Step("remote-accounting", [PY, "bench/remote_accounting.py", str(dev)], "remote-accounting.json"),
    ]


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import sqlite3

    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
                            "platform": platform.platform(), "stdlibSqlite": sqlite3.sqlite_version}
    try:
        info["memGiB"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return info


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


@contextmanager
def postgres(dsn: str | None) -> Iterator[str | None]:
    """``$MEMDIR_DATABASE_URL`` if set, else a throwaway pgserver (PostgreSQL 16 + pgvector), else None."""
    if dsn:
        yield dsn
        return
    try:
        import pgserver
    except ImportError:
        yield None
        return
    data = Path(tempfile.mkdtemp(prefix="memdir-bench-pg-"))
    server = pgserver.get_server(data, cleanup_mode=None)
    try:
        yield server.get_uri()
    finally:
        try:
            pgserver.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, user=server.system_user)
        finally:
            shutil.rmtree(data, ignore_errors=True)


def run_step(step: Step, results: Path = RESULTS) -> dict[str, Any]:
    reason = step.needs()
    record: dict[str, Any] = {"name": step.name, "argv": [os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a
                                                          for a in step.argv],
                              "loadBefore": os.getloadavg()[0]}
    if reason:
        record.update(status="skipped", reason=reason)
        print(f"-- {step.name}: skipped ({reason})", file=sys.stderr, flush=True)
        return record
    print(f"-- {step.name}: {' '.join(record['argv'])}", file=sys.stderr, flush=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    from memdir.bench.adapters import CONFIG_ENV

    # Not the shell's memdir settings: MEMDIR_CONFIG or MEMDIR_PROVIDER reached the scripts that
    # build their own Memory (search_latency.py, watch_latency.py, ...), under the docs' figures.
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_ENV}
    env.update({"MEMDIR_QUERY_CACHE_SIZE": "0", **step.env})  # time every query's vector
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # cold starts should use byte-code caches, as an install does
    t0 = time.monotonic()
    with open(LOGS / f"{step.name}.log", "w") as log:
        try:
            proc = subprocess.run(step.argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
                                  timeout=step.timeout_s)
            code, stdout = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            code, stdout = -1, exc.stdout or ""
    record.update(seconds=round(time.monotonic() - t0, 1), exitCode=code, loadAfter=os.getloadavg()[0],
                  status="ok" if code == 0 else "failed")
    if step.stdout and stdout:
        (results / step.stdout).write_text(stdout if isinstance(stdout, str) else stdout.decode())
    if code == 0 and "--out" in step.argv:  # the bench's full report beside its table
        report = Path(step.argv[step.argv.index("--out") + 1]) / "report.json"
        if report.is_file():
            shutil.copyfile(report, results / f"{step.name}.json")
    print(f"   {record['status']} in {record['seconds']} s", file=sys.stderr, flush=True)
    return record


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "data" / "locomo-dev")
    ap.add_argument("--gate", type=Path, default=ROOT / "tests" / "data" / "gate")
    ap.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "memdir-run-all")
    ap.add_argument("--only", help="comma list of step names (a partial run: run.json says so)")
    ap.add_argument("--fast", action="store_true", help="smaller speed sizes (not for the docs)")
    args = ap.parse_args()
    if first_sample(args.dataset) is None:
        print(f"run_all: no LoCoMo dataset at {args.dataset} (<sample>/workspace and <sample>/queries.jsonl; "
              "see scripts/locomo_to_dataset.py)", file=sys.stderr)
        return 2
    only = {s.strip() for s in args.only.split(",") if s.strip()} if args.only is not None else None
    known = [s.name for s in steps(args.dataset.resolve(), args.gate.resolve(), args.work_dir, None, args.fast)]
    if only is not None and (not only or only - set(known)):  # a typo ran nothing and said nothing
        print(f"run_all: unknown step {', '.join(sorted(only - set(known))) or '(none given)'} in --only "
              f"(steps: {', '.join(known)})", file=sys.stderr)
        return 2
    # A partial run writes beside its logs, never into docs/: its tables landed in docs/results,
    # where render_docs.py put them under the full run's header (commit, machine, times): one doc
    # quoting two runs.  Only a full run is rendered.
    results = RESULTS if only is None else PARTIAL
    img = IMG if only is None else PARTIAL / "img"
    results.mkdir(parents=True, exist_ok=True)
    img.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))  # tracked files only
    meta: dict[str, Any] = {"commit": git("rev-parse", "HEAD"), "dirty": dirty,
                            "started": started, "machine": machine(), "partial": only is not None,
                            "fast": args.fast, "steps": []}
    needs_pg = only is None or "backends" in only  # (a partial run without it starts no server)
    with postgres(os.environ.get("MEMDIR_DATABASE_URL")) if needs_pg else nullcontext(None) as dsn:
        for step in steps(args.dataset.resolve(), args.gate.resolve(), args.work_dir, dsn, args.fast, results, img):
            if only and step.name not in only:
                continue
            meta["steps"].append(run_step(step, results))
            meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            (results / ("run.json" if only is None else "run-partial.json")).write_text(json.dumps(meta, indent=2))
    failed = [s["name"] for s in meta["steps"] if s["status"] == "failed"]
    if failed:
        print(f"run_all: failed: {', '.join(failed)} (logs in {LOGS})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
