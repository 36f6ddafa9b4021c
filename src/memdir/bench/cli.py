"""``memdir bench quality|compare|speed|rescore``: argument parsing and output for the benches.

Kept apart from :mod:`memdir.cli` so the main CLI only pays for this module when ``bench`` runs.
Tables (or ``--json``/``--markdown``) go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir.cli import CliError, UsageError, _score  # failures the CLI reports (as JSON too with --json)


def _int_list(raw: str) -> list[int]:
    try:
        values = [int(x) for x in raw.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {raw!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {raw!r}")
    return values


def _positive_int(raw: str) -> int:
    return _whole(raw, 1)


def _whole(raw: str, least: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {raw!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected at least {least}, got {raw!r}")
    return value


def _count_or_zero(raw: str) -> int:
    """A count where 0 skips the step (``--embed-subset``, ``--concurrency``): ``-1`` skipped it too, quietly."""
    return _whole(raw, 0)


def _seconds(raw: str, *, zero: bool) -> float:
    """A finite number of seconds (0 allowed when ``zero``): ``--budget nan`` ran every query and wrote
    ``NaN`` into the --json report, which jq refuses; ``--seconds 0`` divided by zero after the run."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "more than 0"
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, {least}, got {raw!r}")
    return value


def _budget(raw: str) -> float:
    return _seconds(raw, zero=True)


def _duration(raw: str) -> float:
    return _seconds(raw, zero=False)


def _size_list(raw: str) -> list[int]:
    """``1000,10k,100k`` → [1000, 10000, 100000]."""
    out = []
    for part in raw.replace(" ", "").lower().split(","):
        if not part:
            continue
        mult = 1000 if part.endswith("k") else 1
        try:
            out.append(int(float(part.rstrip("k")) * mult))
        except (ValueError, OverflowError):  # inf, 1e400: a traceback
            raise argparse.ArgumentTypeError(f"bad size {part!r} (e.g. 1000,10k,100k)") from None
    if not out or any(v <= 0 for v in out):
        raise argparse.ArgumentTypeError(f"expected positive sizes, got {raw!r}")
    return out


def configure(parser: argparse.ArgumentParser, add_globals: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add the bench subcommands to ``memdir bench``; ``add_globals`` adds ``-v``/``-q`` to each (a
    bench's own ``--quiet`` kept ``memdir -q bench ...`` printing progress: its default won)."""
    sub = parser.add_subparsers(dest="bench_command", metavar="BENCH")

    def common_quality(p: argparse.ArgumentParser) -> None:
        p.add_argument("dataset", type=Path, help="folder of <sample>/workspace + <sample>/queries.jsonl")
        p.add_argument("--k", type=_int_list, default=[1, 3, 6, 10], help="cut-offs (default 1,3,6,10)")
        p.add_argument("--min-score", type=_score, default=None,
                       help="memdir's score floor (default: configured, 0.35); 0 keeps every ranked result")
        p.add_argument("--json", action="store_true", help="print the report as JSON")
        p.add_argument("--markdown", action="store_true", help="print Markdown tables")
        p.add_argument("--out", type=Path, help="write ranked results per query (JSONL per sample) and report.json")
        p.add_argument("--plot", type=Path, help="write a recall@k chart (PNG) here; needs memdir[bench]")
        p.add_argument("--limit", type=_positive_int, default=None,
                       help="score only the first N questions of each sample (quick runs, slow systems)")
        p.add_argument("--strict", action="store_true",
                       help="exit 1 when a system was skipped or did not run in its intended mode")
        add_globals(p)
        p.add_argument("--config", "-c", default=argparse.SUPPRESS,
                       help="config file whose memorySearch settings every memdir run uses (runs are labelled "
                            "with its name; a missing file is an error)")

    p = sub.add_parser("quality", help="recall@k, hit@k, MRR and lines returned on a labelled dataset",
                       description="Score memdir's search modes (keyword, vector, hybrid) on a labelled dataset.")
    common_quality(p)
    p.add_argument("--mode", default="all",
                   help="keyword, vector, hybrid, all, or a comma list (default all); a mode that cannot run "
                        "as asked (no embedding model) is reported as what it really ran")

    p = sub.add_parser("compare", help="score several retrieval systems side by side on a dataset",
                       description="Score retrieval systems through adapters: memdir[:keyword|:vector|:hybrid], "
                                   "bm25, openclaw-v2.27-keyword, openclaw-cli.")
    common_quality(p)
    p.add_argument("--adapters", default="memdir:keyword,memdir:hybrid,bm25,openclaw-v2.27-keyword",
                   help="comma list of adapters (default memdir:keyword,memdir:hybrid,bm25,openclaw-v2.27-keyword)")

    p = sub.add_parser("speed", help="indexing, sync, search latency, cold start, memory, disk vs baselines",
                       description="Speed on generated corpora of daily logs, beside a stdlib FTS5 and a NumPy "
                                   "baseline measured in the same run.")
    p.add_argument("--sizes", type=_size_list, default=[1000, 10000, 100000],
                   help="corpus sizes in chunks (default 1000,10000,100000; 10k style accepted)")
    p.add_argument("--embed-subset", type=_count_or_zero, default=256,
                   help="chunks embedded with the default model when one is available (default 256; 0 skips)")
    p.add_argument("--queries", type=_positive_int, default=200, help="queries per corpus (default 200)")
    p.add_argument("--budget", type=_budget, default=20.0, help="seconds per latency series, at least 20 queries")
    p.add_argument("--seed", type=int, default=42, help="corpus seed (default 42)")
    p.add_argument("--work-dir", type=Path, help="keep corpora and indexes here (reused when seed/size match)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--out", type=Path, help="write report.json here")
    p.add_argument("--plot-dir", type=Path, help="write latency and indexing charts (PNG) here; needs memdir[bench]")
    add_globals(p)

    p = sub.add_parser("backends", help="SQLite and PostgreSQL side by side: indexing, sync, search, disk, "
                                        "concurrent searchers, recall",
                       description="The same corpus and searches on both store backends (see memdir.bench.backends).")
    p.add_argument("--dsn", help="PostgreSQL to use (default $MEMDIR_DATABASE_URL); bench_* schemas are dropped")
    p.add_argument("--sizes", type=_size_list, default=[10000, 100000], help="corpus sizes (default 10k,100k)")
    p.add_argument("--queries", type=_positive_int, default=200, help="queries per corpus (default 200)")
    p.add_argument("--budget", type=_budget, default=15.0, help="seconds per latency series, at least 20 queries")
    p.add_argument("--concurrency", type=_count_or_zero, default=8,
                   help="concurrent searcher processes (default 8; 0 skips)")
    p.add_argument("--seconds", type=_duration, default=20.0, help="how long the concurrent searchers run")
    p.add_argument("--quality", type=Path, help="also score recall@k of both backends on this dataset")
    p.add_argument("--seed", type=int, default=42, help="corpus seed (default 42)")
    p.add_argument("--work-dir", type=Path, help="keep corpora and SQLite indexes here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", type=Path, help="write report.json here")
    add_globals(p)

    p = sub.add_parser("rescore", help="re-score ranked results written by --out against a dataset",
                       description="Score a folder of <sample>.jsonl ranked results (as written by --out).")
    p.add_argument("dataset", type=Path, help="folder of <sample>/workspace + <sample>/queries.jsonl")
    p.add_argument("results", type=Path, help="one system's folder, e.g. OUT/memdir-keyword")
    p.add_argument("--k", type=_int_list, default=None,
                   help="cut-offs (default: the run's, from the report.json beside the folder, else 1,3,6,10)")
    p.add_argument("--limit", type=_positive_int, default=None,
                   help="score the first N questions of each sample (default: the run's --limit, from the "
                        "report.json beside the folder)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_globals(p)


def _progress(args: argparse.Namespace) -> Any:
    if getattr(args, "quiet", False):
        return None
    return lambda msg: print(msg, file=sys.stderr, flush=True)


def _check_plots(args: argparse.Namespace) -> None:
    if getattr(args, "plot", None) or getattr(args, "plot_dir", None):
        from memdir.bench.plots import require_matplotlib

        require_matplotlib()  # before minutes of measuring, not after


def run(args: argparse.Namespace) -> int:
    """Dispatch ``memdir bench …``; returns the exit code."""
    cmd = getattr(args, "bench_command", None)
    if cmd is None:
        raise UsageError("choose a benchmark: memdir bench {quality,compare,speed,backends,rescore} ... "
                         "(memdir bench -h)")
    _check_plots(args)
    _note_ignored_environment(args, cmd)
    if cmd in ("quality", "compare"):
        return _quality(args, cmd)
    if cmd == "speed":
        return _speed(args)
    if cmd == "backends":
        return _backends(args)
    return _rescore(args)


def _note_ignored_environment(args: argparse.Namespace, cmd: str) -> None:
    """Say which of the shell's memdir settings the bench does not use (it runs memdir's defaults,
    or the ``--config`` file's settings, whatever the shell holds)."""
    if cmd == "rescore" or getattr(args, "quiet", False):
        return
    from memdir.bench.adapters import ignored_environment

    ignored = [n for n in ignored_environment() if not (cmd == "backends" and n == "MEMDIR_DATABASE_URL")]
    if ignored:
        print(f"note: {', '.join(ignored)} ignored: benches run memdir's defaults"
              + (", or the settings of a --config file" if cmd in ("quality", "compare") else ""),
              file=sys.stderr, flush=True)


def _backends(args: argparse.Namespace) -> int:
    import os
    import tempfile

    from memdir.bench.backends import format_report, preflight, quality_side_by_side, run_backends

    dsn = args.dsn or os.environ.get("MEMDIR_DATABASE_URL", "")
    if not dsn:
        raise UsageError("bench backends needs a PostgreSQL: --dsn URL or $MEMDIR_DATABASE_URL")
    try:
        preflight(dsn)
    except (ImportError, ValueError) as exc:
        raise CliError(str(exc)) from None
    # Without --work-dir the corpora and SQLite indexes (hundreds of MB at 100k chunks) were left in
    # the temp folder after every run.
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="memdir-bench-backends-"))
    report: dict[str, Any] = {}
    try:
        if args.sizes:
            report = run_backends(args.sizes, dsn=dsn, work_dir=work, seed=args.seed, n_queries=args.queries,
                                  budget_s=args.budget, concurrency=args.concurrency, seconds=args.seconds,
                                  progress=_progress(args))
        if args.quality:
            report["quality"] = quality_side_by_side(args.quality, dsn=dsn, progress=_progress(args))
    except ValueError as exc:  # a malformed --quality dataset, named
        raise CliError(str(exc)) from None
    finally:
        if not args.work_dir:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json or not report.get("sizes"):
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0


def _quality(args: argparse.Namespace, cmd: str) -> int:
    from memdir.bench.adapters import MEMDIR_MODES, make_adapters
    from memdir.bench.quality import format_table, run_quality

    if cmd == "quality":
        modes = list(MEMDIR_MODES) if args.mode == "all" else [m.strip() for m in args.mode.split(",") if m.strip()]
        bad = [m for m in modes if m not in MEMDIR_MODES]
        if bad or not modes:
            raise UsageError(f"unknown mode {','.join(bad) or args.mode!r} (keyword, vector, hybrid or all)")
        names = [f"memdir:{m}" for m in modes]
    else:
        names = [n.strip() for n in args.adapters.split(",") if n.strip()]
        if not names:  # it printed nothing and exited 0
            raise UsageError("--adapters: name at least one system (memdir, memdir:keyword, bm25, ...)")
    try:
        overrides, label = _config_overrides(getattr(args, "config", None))
        adapters = make_adapters(names, min_score=args.min_score, overrides=overrides, label=label)
        report = run_quality(args.dataset, ks=args.k, adapters=adapters, out_dir=args.out, limit=args.limit,
                             progress=_progress(args), config_file=getattr(args, "config", None))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.plot:
        from memdir.bench.plots import plot_quality

        plot_quality(report, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report, markdown=args.markdown))
    bad_runs = [n for n, r in report["runs"].items() if r.get("skipped") or r.get("fallback")]
    return 1 if args.strict and bad_runs else 0


def _config_overrides(path: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The ``memorySearch`` settings of a ``--config`` file, for every memdir run, and a label
    (the file's name) for the runs' names; a missing or invalid file is an error (ValueError)."""
    if not path:
        return None, None
    from memdir.config import load_config

    loaded = load_config(config_path=path, env={})
    ms = loaded.settings.memory_search.model_dump(mode="json", by_alias=True, exclude_none=True)
    ms.get("store", {}).pop("path", None)  # every sample gets its own index
    return {"memorySearch": ms}, Path(path).name


def _speed(args: argparse.Namespace) -> int:
    from memdir.bench.speed import format_speed, run_speed

    report = run_speed(args.sizes, embed_subset=args.embed_subset, n_queries=args.queries, budget_s=args.budget,
                       seed=args.seed, work_dir=args.work_dir, progress=_progress(args))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.plot_dir:
        from memdir.bench.plots import plot_index, plot_latency

        for path in (plot_latency(report, args.plot_dir / "speed-latency.png"),
                     plot_index(report, args.plot_dir / "speed-index.png")):
            print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else format_speed(report, markdown=args.markdown))
    return 0


def _rescore(args: argparse.Namespace) -> int:
    from memdir.bench.quality import _cell, rescore

    try:
        result = rescore(args.dataset, args.results, args.k, limit=args.limit)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        o = result["overall"]
        extra = f", {result['unknownIds']} results for questions not in the dataset" if result["unknownIds"] else ""
        print(f"{result['queries']} questions ({result['missing']} without results{extra}) "
              + "  ".join(f"R@{k} {_cell(o, 'recall', str(k))}" for k in result["ks"])
              + f"  MRR@{result['ks'][-1]} {_cell(o, 'mrr', str(result['ks'][-1]))}")
    return 0
