"""What progress output costs ``memdir index``: two source trees side by side, stderr not a terminal.

    python bench/progress_overhead.py --before /tmp/old/src --after src \\
        --keyword WORKSPACE --hybrid WORKSPACE [--repeats 5]

Each run is a fresh ``memdir index`` process with stderr to a pipe (where the newer tree prints
progress lines); the two trees alternate per repeat so machine load falls on both alike.
``--keyword``: ``--force`` rebuilds of a keyword-only index (one state folder per tree).
``--hybrid``: first builds with the default local model in an empty state folder each time (no
embedding cache to hit).  Reported: medians of the seconds memdir itself reports ("in N s"), and
the progress lines each run printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SECONDS = re.compile(r" in ([\d.]+)s\b")


def run(src: Path, workspace: Path, state: Path, config: Path | None, force: bool) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMDIR_")}
    env.update(PYTHONPATH=str(src), MEMDIR_STATE_DIR=str(state))
    if os.environ.get("MEMDIR_CACHE_DIR"):
        env["MEMDIR_CACHE_DIR"] = os.environ["MEMDIR_CACHE_DIR"]
    args = [sys.executable, "-m", "memdir", "index", "-w", str(workspace)]
    args += ["--config", str(config)] if config else []
    args += ["--force"] if force else []
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    found = SECONDS.search(proc.stdout)
    assert found, proc.stdout
    return float(found.group(1)), sum(line.startswith("indexing:") for line in proc.stderr.splitlines())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--keyword", type=Path)
    ap.add_argument("--hybrid", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    trees = {"before": a.before.resolve(), "after": a.after.resolve()}
    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="memdir-progress-") as tmp:
        root = Path(tmp)
        kw = root / "kw.json"
        kw.write_text('{"memorySearch": {"provider": "none"}}')
        for kind, workspace in (("keyword", a.keyword), ("hybrid", a.hybrid)):
            if workspace is None:
                continue
            times: dict[str, list[float]] = {name: [] for name in trees}
            lines: dict[str, list[int]] = {name: [] for name in trees}
            if kind == "keyword":
                for name, src in trees.items():  # a first build, untimed: the runs are rebuilds
                    run(src, workspace, root / f"kw-{name}", kw, False)
            for i in range(a.repeats):
                for name, src in (trees.items() if i % 2 == 0 else reversed(trees.items())):
                    if kind == "keyword":
                        secs, n = run(src, workspace, root / f"kw-{name}", kw, True)
                    else:
                        state = root / f"hy-{name}"
                        shutil.rmtree(state, ignore_errors=True)
                        secs, n = run(src, workspace, state, None, False)
                    times[name].append(secs)
                    lines[name].append(n)
                    print(f"{kind} {name} #{i + 1}: {secs:.2f}s, {n} progress lines", file=sys.stderr)
            med = {name: statistics.median(v) for name, v in times.items()}
            out[kind] = {"median_s": med, "after_over_before": med["after"] / med["before"],
                         "runs_s": times, "progress_lines": lines}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
