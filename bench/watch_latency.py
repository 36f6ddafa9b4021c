"""Watch latency: a line appended to a note by hand → found by a search, with nothing but the
watcher indexing it (searches run with ``sync=False``).

    python bench/watch_latency.py ../shared/data/locomo-dev/26/workspace --edits 100
    python bench/watch_latency.py WS --edits 100 --debounce-ms 100 --provider none

The workspace is copied to a temporary folder first (nothing is written to the original).  Each
edit appends a line with a unique nonsense word to one of the notes (round robin), then polls
``Memory.search`` every 10 ms until that note comes back; the next edit waits for the watcher to
go idle.  Prints p50/p95/max in milliseconds as JSON, with the load average (the machine is
shared: quote the figures with it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memdir.api import Memory


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def run(workspace: Path, edits: int, debounce_ms: int | None, provider: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="memdir-watch-bench-") as tmp:
        ws = Path(tmp) / "ws"
        shutil.copytree(workspace, ws)
        notes = sorted(p for p in (ws / "memory").rglob("*.md"))
        cfg = {"memorySearch": {"provider": provider}}
        with Memory(ws, config=cfg, state_dir=Path(tmp) / "state") as mem:
            t0 = time.perf_counter()
            report = mem.sync()
            index_s = time.perf_counter() - t0
            watcher = mem.watch(debounce_ms=debounce_ms)
            time.sleep(0.5)
            latencies: list[float] = []
            timeouts = 0
            for i in range(edits):
                while watcher.pending:
                    time.sleep(0.01)
                note = notes[i % len(notes)]
                word = f"qzx{i:03d}wvk"
                rel = note.relative_to(ws).as_posix()
                start = time.perf_counter()
                with open(note, "a", encoding="utf-8") as fh:
                    fh.write(f"\nAdded by hand: the {word} token.\n")
                deadline = start + 120
                while True:
                    if rel in [r.path for r in mem.search(word, sync=False).results]:
                        latencies.append((time.perf_counter() - start) * 1000)
                        break
                    if time.perf_counter() > deadline:
                        timeouts += 1
                        break
                    time.sleep(0.01)
            state = watcher.state()
    return {
        "workspace": str(workspace), "notes": len(notes), "chunks": report.chunks, "provider": provider,
        "initialIndexSeconds": round(index_s, 2), "debounceMs": state["debounceMs"], "edits": edits,
        "found": len(latencies), "timeouts": timeouts,
        "p50Ms": round(statistics.median(latencies), 1) if latencies else None,
        "p95Ms": round(percentile(latencies, 95), 1) if latencies else None,
        "maxMs": round(max(latencies), 1) if latencies else None,
        "minMs": round(min(latencies), 1) if latencies else None,
        "syncs": state["syncs"], "loadAverage": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workspace", type=Path)
    ap.add_argument("--edits", type=int, default=100)
    ap.add_argument("--debounce-ms", type=int, default=None, help="default: sync.watchDebounceMs (1500)")
    ap.add_argument("--provider", default="auto", help="embedding provider (auto = the embedded model)")
    args = ap.parse_args(argv)
    print(json.dumps(run(args.workspace, args.edits, args.debounce_ms, args.provider), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
