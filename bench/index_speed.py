"""Keyword-only indexing throughput of two memdir source trees and the stdlib FTS5 baseline, side by side.

    python bench/index_speed.py --before /tmp/old/src --after src --sizes 1000,10000 --repeats 5

Each measurement is a fresh process (the worker of ``memdir bench speed``, or the baseline's
index step alone: memdir's chunker + one stdlib ``sqlite3`` FTS5 table), run in turn per repeat so
machine load falls on all three alike; medians are reported.  Also: index size on disk, and the
no-op and one-file incremental sync of each tree (medians of 5 in one process).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_BASELINE = """
import json, sqlite3, sys, time
from pathlib import Path
from memdir.bench.adapters import PlainFts, workspace_chunks
from memdir.bench.corpus import default_chunking
from memdir.bench.speed import dir_size
a = json.loads(sys.stdin.read())
db = Path(a["db"])
for f in db.parent.glob(db.name + "*"):
    f.unlink()
c0, t0 = time.process_time(), time.perf_counter()
chunks = workspace_chunks(Path(a["workspace"]), *default_chunking())  # memdir's chunk size
fts = PlainFts(db, sqlite3)
fts.add(chunks)
secs, cpu = time.perf_counter() - t0, time.process_time() - c0
fts.close()
print(json.dumps({"seconds": secs, "cpuSeconds": cpu, "chunks": len(chunks), "bytes": dir_size(db)}))
"""

_SYNC = """
import json, os, statistics, sys, time
from pathlib import Path
from memdir.api import Memory
a = json.loads(sys.stdin.read())
out = {}
with Memory(a["workspace"], state_dir=a["state"], config={"memorySearch": {"provider": "none"}}) as mem:
    mem.sync()
    noop = []
    for _ in range(5):
        t0 = time.perf_counter(); mem.sync(reason="bench"); noop.append(time.perf_counter() - t0)
    one = []
    f = sorted(Path(a["workspace"], "memory").glob("*.md"))[len(noop)]
    original = f.read_text()
    for i in range(5):
        f.write_text(original + f"\\n- an edit number {i} about the Atlas billing service\\n")
        t0 = time.perf_counter(); rep = mem.sync(reason="bench"); one.append(time.perf_counter() - t0)
        assert rep.indexed == 1, rep
    f.write_text(original)
    mem.sync()
out = {"noopMs": statistics.median(noop) * 1000, "oneFileMs": statistics.median(one) * 1000}
print(json.dumps(out))
"""


def run(src: str | None, code: list[str], args: dict) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve())
    p = subprocess.run([sys.executable, *code], input=json.dumps(args), capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{code} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="src/ of the reference tree")
    ap.add_argument("--after", default="src", help="src/ of the tree under test")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--work", default=None, help="where corpora and indexes go (default: a temp dir)")
    ap.add_argument("--no-sync", action="store_true", help="skip the no-op / one-file sync timing")
    ap.add_argument("--json", default=None, help="write the raw figures here")
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="memdir-idx-"))
    trees = {"before": a.before, "after": a.after}
    report: dict = {}
    for n in (int(x) for x in a.sizes.split(",")):
        from memdir.bench.corpus import generate

        corpus = generate(work / f"corpus-{n}", n, seed=42)
        ws = str(corpus.workspace)
        runs: dict[str, list[dict]] = {"before": [], "after": [], "baseline": []}
        for r in range(a.repeats):
            for tag, src in trees.items():
                state = work / f"state-{n}-{tag}"
                shutil.rmtree(state, ignore_errors=True)
                runs[tag].append(run(src, ["-m", "memdir.bench.speed", "--worker", "memdir-index"],
                                     {"workspace": ws, "state": str(state), "vectors": "none"}))
            runs["baseline"].append(run(a.after, ["-c", _BASELINE],
                                        {"workspace": ws, "db": str(work / f"base-{n}.db")}))
            print(f"[{n}] repeat {r + 1}: " + ", ".join(
                f"{k} {v[-1]['chunks'] / v[-1]['seconds']:,.0f}/s" for k, v in runs.items()), file=sys.stderr)
        row = {k: {"chunksPerSec": statistics.median(x["chunks"] / x["seconds"] for x in v),
                   "chunksPerCpuSec": statistics.median(x["chunks"] / x["cpuSeconds"] for x in v),
                   "mb": v[-1]["bytes"] / 1e6, "chunks": v[-1]["chunks"]} for k, v in runs.items()}
        if not a.no_sync:
            for tag, src in trees.items():
                row[tag].update(run(src, ["-c", _SYNC], {"workspace": ws, "state": str(work / f"sync-{n}-{tag}")}))
        report[n] = row
        b, bc = row["baseline"]["chunksPerSec"], row["baseline"]["chunksPerCpuSec"]
        print(f"\n{n:,} chunks ({row['after']['chunks']:,}): medians of {a.repeats}")
        for k, v in row.items():
            extra = f"  no-op {v['noopMs']:.1f} ms  one file {v['oneFileMs']:.1f} ms" if "noopMs" in v else ""
            print(f"  {k:8s} {v['chunksPerSec']:8,.0f} chunks/s  × baseline {v['chunksPerSec'] / b:.2f}  "
                  f"{v['chunksPerCpuSec']:8,.0f} chunks/CPU-s  × {v['chunksPerCpuSec'] / bc:.2f}  "
                  f"disk {v['mb']:.1f} MB (× {v['mb'] / row['baseline']['mb']:.2f}){extra}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
