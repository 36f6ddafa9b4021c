"""File descriptors and inotify watches used while watching a big tree.

    python bench/watch_fds.py --files 10000 --folders 1000 [--ignored-folders 5000]

Builds ``memory/`` with FILES notes spread over FOLDERS folders (plus, optionally, a
``memory/node_modules`` tree with IGNORED_FOLDERS folders that must cost nothing), indexes it
keyword-only, starts the watcher and counts this process's open descriptors and inotify watches
(``/proc/self/fdinfo``) before and after.  Then edits one deep note and checks the watcher
indexes it.  Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from memdir.api import Memory


def fd_counts() -> dict[str, int]:
    fds = os.listdir("/proc/self/fd")
    watches = inotify = 0
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "inotify" in target:
            inotify += 1
            try:
                with open(f"/proc/self/fdinfo/{fd}") as fh:
                    watches += sum(1 for line in fh if line.startswith("inotify wd:"))
            except OSError:
                pass
    return {"fds": len(fds), "inotifyInstances": inotify, "inotifyWatches": watches}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--folders", type=int, default=1_000)
    ap.add_argument("--ignored-folders", type=int, default=0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memdir-fd-bench-") as tmp:
        ws = Path(tmp) / "ws"
        per = max(1, args.files // args.folders)
        made = 0
        for d in range(args.folders):
            folder = ws / "memory" / f"f{d // 100:02d}" / f"d{d:04d}"
            folder.mkdir(parents=True)
            for i in range(per):
                (folder / f"n{i:02d}.md").write_text(f"Note {d}-{i}: token t{d}x{i}.\n")
                made += 1
        for d in range(args.ignored_folders):
            (ws / "memory" / "node_modules" / f"p{d // 100:03d}" / f"m{d:05d}").mkdir(parents=True)
        with Memory(ws, config={"memorySearch": {"provider": "none"}}, state_dir=Path(tmp) / "state") as mem:
            t0 = time.perf_counter()
            mem.sync()
            index_s = time.perf_counter() - t0
            before = fd_counts()
            events: list[dict] = []
            t0 = time.perf_counter()
            watcher = mem.watch(on_event=events.append, debounce_ms=100)
            while not any(e["event"] == "watching" for e in events):
                time.sleep(0.01)
            time.sleep(0.5)  # let the watch set settle
            setup_s = time.perf_counter() - t0
            during = fd_counts()
            target = ws / "memory" / "f09" / "d0999" / "n09.md"
            target.write_text("Edited while watching: the okapi token.\n")
            t0 = time.perf_counter()
            while "memory/f09/d0999/n09.md" not in [r.path for r in mem.search("okapi", sync=False).results]:
                time.sleep(0.02)
                if time.perf_counter() - t0 > 120:
                    break
            seen_s = time.perf_counter() - t0
            folders = watcher.state()["watchedFolders"]
        after = fd_counts()
    print(json.dumps({"files": made, "folders": args.folders, "ignoredFolders": args.ignored_folders,
                      "watchedFolders": folders, "indexSeconds": round(index_s, 2),
                      "watchSetupSeconds": round(setup_s, 2), "editFoundSeconds": round(seen_s, 2),
                      "beforeWatch": before, "whileWatching": during, "afterClose": after,
                      "loadAverage": [round(x, 2) for x in os.getloadavg()]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
