"""Peak memory and wall time of indexing one huge file with embeddings (the default local model).

    python bench/bigfile_rss.py                                  # 20,000 sections + a 200,000-line log
    python bench/bigfile_rss.py --old-src /tmp/old/src --repeats 3   # another checkout side by side
    python bench/bigfile_rss.py --sections 0 --log-lines 0 --daily-files 60   # an ordinary workspace

Why: a full index embeds each file's chunks in one call, so a single huge ``MEMORY.md`` or daily
log puts all of its vectors in memory at once; this bench shows what that costs.  The workspace
is generated in a temp dir from a fixed seed: a ``MEMORY.md`` of ``--sections`` short sections,
one daily log ``memory/2026-01-01.md`` of ``--log-lines`` lines, and optionally ``--daily-files``
ordinary daily logs.  Each run is ``memdir index --json`` in a fresh process with a fresh state
dir (the embedding cache starts empty), provider ``local`` (the embedded model, offline); its
peak RSS is the child's ``ru_maxrss`` from ``wait4`` (the chunking worker, a process of its own,
is not counted).  With ``--old-src`` the two trees run alternately and medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("atlas billing invoice deploy server cache index query vector memory agent notes report "
         "meeting budget client project launch review design draft branch merge release ticket "
         "customer payment refund schedule travel flight hotel dinner recipe garden running "
         "coffee backup database kernel network router printer laptop phone camera music").split()
TICKS = "ok done ping call sent paid ran fix bug ate gym".split()
NAMES = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Oscar Peggy Trent".split()


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(NAMES))
    if rng.random() < 0.2:
        words.append(str(rng.randint(100, 99999)))
    return " ".join(words)


def make_workspace(root: Path, *, sections: int, log_lines: int, daily_files: int, seed: int) -> None:
    """Write the workspace: deterministic for a given seed and sizes."""
    rng = random.Random(seed)
    mem = root / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    if sections:
        with open(root / "MEMORY.md", "w", encoding="utf-8") as fh:
            fh.write("# Long-term memory\n\n")
            for i in range(sections):
                fh.write(f"## {rng.choice(NAMES)} {rng.choice(WORDS)} {i}\n\n")
                fh.write(f"- {_sentence(rng, 4, 10)}\n")
                fh.write("\n")
    if log_lines:
        with open(mem / "2026-01-01.md", "w", encoding="utf-8") as fh:
            for _ in range(log_lines):
                fh.write(f"- {rng.choice(TICKS)}\n")  # tiny lines: ~160 to a chunk
    for d in range(daily_files):
        day = f"2025-{1 + d // 28 % 12:02d}-{1 + d % 28:02d}"
        lines = [f"# {day}", ""] + [f"- {_sentence(rng, 5, 14)}" for _ in range(rng.randint(20, 60))]
        (mem / f"{day}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_index(workspace: Path, state: Path, src: str | None) -> dict[str, float]:
    """One ``memdir index`` in a fresh process: wall seconds, peak RSS (MB), chunks indexed."""
    env = dict(os.environ)
    env.update({"MEMDIR_PROVIDER": "local", "MEMDIR_QUERY_CACHE_SIZE": "0"})
    env.pop("MEMDIR_AGENT", None)
    if src:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "memdir", "--workspace", str(workspace), "--state-dir", str(state),
           "index", "--json", "--no-progress"]
    t0 = time.perf_counter()
    # cwd: not this checkout, so that ``-m`` finds ``src``'s memdir, not a folder named memdir here
    proc = subprocess.run(cmd, env=env, capture_output=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    # the maximum over this process's reaped children: the one run when called by :func:`measure`
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"memdir index failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')[-3000:]}")
    report = json.loads(proc.stdout)
    return {"seconds": wall, "cpuSeconds": usage.ru_utime + usage.ru_stime, "rssMB": usage.ru_maxrss / 1024,
            "chunks": report.get("chunks", 0),
            "embedded": report.get("embedded", 0)}


def measure(workspace: Path, src: str | None) -> dict[str, float]:
    """:func:`run_index` from a fresh intermediate process, whose children's maximum RSS is this
    run's alone (``RUSAGE_CHILDREN`` of a long-lived parent only ever grows)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import bigfile_rss as b; from pathlib import Path; "
            "print(json.dumps(b.run_index(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] or None)))")
    with tempfile.TemporaryDirectory(prefix="bigrss-state-") as state:
        out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(workspace), state, src or ""],
                             check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", type=int, default=20_000, help="sections of MEMORY.md")
    ap.add_argument("--log-lines", type=int, default=200_000, help="lines of memory/2026-01-01.md")
    ap.add_argument("--daily-files", type=int, default=0, help="ordinary daily logs besides")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"),
                    help="the memdir tree measured (default: this checkout's src)")
    ap.add_argument("--old-src", help="another checkout's src, run alternately with --src")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trees = {"new": args.src} | ({"old": args.old_src} if args.old_src else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="bigrss-ws-") as tmp:
        ws = Path(tmp) / "workspace"
        make_workspace(ws, sections=args.sections, log_lines=args.log_lines, daily_files=args.daily_files,
                       seed=args.seed)
        size = sum(f.stat().st_size for f in ws.rglob("*.md"))
        print(f"workspace: {size / 1e6:.1f} MB of Markdown", file=sys.stderr)
        for r in range(args.repeats):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                got = measure(ws, trees[name])
                runs[name].append(got)
                print(f"run {r + 1} {name}: {got['seconds']:.1f} s ({got['cpuSeconds']:.1f} s CPU), "
                      f"{got['rssMB']:.0f} MB peak RSS, "
                      f"{got['chunks']} chunks", file=sys.stderr)
    summary = {name: {"src": trees[name], "runs": rs,
                      "medianSeconds": statistics.median(x["seconds"] for x in rs),
                      "medianCpuSeconds": statistics.median(x["cpuSeconds"] for x in rs),
                      "medianRssMB": statistics.median(x["rssMB"] for x in rs),
                      "chunks": rs[-1]["chunks"]} for name, rs in runs.items()}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{'tree':<5} {'chunks':>7} {'wall s':>7} {'CPU s':>7} {'peak RSS MB':>12}  (medians)  src")
    for name, s in summary.items():
        print(f"{name:<5} {s['chunks']:>7} {s['medianSeconds']:>7.1f} {s['medianCpuSeconds']:>7.1f} "
              f"{s['medianRssMB']:>12.0f}  {s['src']}")


if __name__ == "__main__":
    main()
