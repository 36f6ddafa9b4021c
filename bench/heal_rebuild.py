"""What a user sees when the index is damaged, and how long the rebuild takes.

    python bench/heal_rebuild.py ../shared/data/locomo-dev/26/workspace [--provider auto]

Builds the index of one workspace (a copy; the embedded model by default), keeps a pristine
copy of the index file, then for each kind of damage (the cases of tests/test_self_heal.py)
restores the pristine file, damages it and runs the real CLI ``memdir search`` on a question
whose answer is known: reports the exit code, whether the right note came back, the message
printed on stderr, how many cached embeddings were salvaged, and the wall time of that search
(which includes the rebuild; when only ``status``'s full check finds the damage, plus the
``memdir index`` that rebuilds it), median of ``--repeat`` runs.  References: the first (cold)
index in-process, ``memdir index`` with no index and no cache (cold, CLI), and ``memdir search``
on an intact index (the CLI's own start-up and query cost).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from memdir.api import Memory
from test_self_heal import CASES


def cli(env: dict[str, str], ws: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "memdir", *args, "-w", str(ws)], capture_output=True, text=True,
                          env=env, timeout=1800)
    return proc, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workspace", type=Path)
    ap.add_argument("--provider", default="auto")
    ap.add_argument("--query", default=None, help="a question (default: a line of the first note)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (the median is reported)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="memdir-heal-bench-") as tmp:
        ws, state = Path(tmp) / "ws", Path(tmp) / "state"
        shutil.copytree(args.workspace, ws)
        cfg = Path(tmp) / "memdir.json"
        cfg.write_text(json.dumps({"memorySearch": {"provider": args.provider}}))
        env = {**os.environ, "MEMDIR_STATE_DIR": str(state)}
        env.pop("MEMDIR_PROVIDER", None)
        notes = sorted((ws / "memory").glob("*.md"))
        target = notes[len(notes) // 2]
        line = next(x for x in target.read_text().splitlines() if len(x.split()) > 8)
        query = args.query or " ".join(line.split()[2:12])
        with Memory(ws, config=cfg, state_dir=state) as mem:
            t0 = time.perf_counter()
            report = mem.sync()
            cold = time.perf_counter() - t0
            index = mem.index_path
        pristine = Path(tmp) / "pristine.sqlite"
        shutil.copy(index, pristine)
        with sqlite3.connect(pristine) as conn:
            cached = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
        intact = [cli(env, ws, "--config", str(cfg), "search", query, "--json") for _ in range(args.repeat)]
        ok, intact_s = intact[0][0], statistics.median(t for _, t in intact)
        for p in index.parent.glob(index.name + "*"):  # a cold rebuild: no index, no cache
            p.unlink()
        cold_cli = statistics.median(cli(env, ws, "--config", str(cfg), "index", "--force")[1]
                                     for _ in range(1))
        expect = target.relative_to(ws).as_posix()
        for name, damage in CASES.items():
            times, found, exits, said, salvaged, files_after = [], [], [], "", None, None
            for _ in range(args.repeat):
                for p in index.parent.glob(index.name + "*"):
                    p.unlink()
                shutil.copy(pristine, index)
                damage(index)
                proc, seconds = cli(env, ws, "--config", str(cfg), "search", query, "--json")
                paths = [r["path"] for r in json.loads(proc.stdout)["results"]] if proc.returncode == 0 else []
                st_proc = cli(env, ws, "--config", str(cfg), "status", "--json")[0]
                status = json.loads(st_proc.stdout)
                if status.get("files") == 0:  # damage only status's full check found: the next sync rebuilds
                    seconds += cli(env, ws, "--config", str(cfg), "index")[1]
                times.append(seconds)
                found.append(expect in paths)
                exits.append(proc.returncode)
                said = "\n".join(x for x in (proc.stderr.strip(), st_proc.stderr.strip()) if x)
                salvaged = (status.get("recovered") or {}).get("salvagedCacheEntries")
                files_after = status.get("files")
            rows.append({"case": name, "exit": max(exits), "answerFound": all(found),
                         "rebuildSecondsMedian": round(statistics.median(times), 2),
                         "rebuildSeconds": [round(t, 2) for t in times],
                         "salvagedCacheEntries": salvaged, "filesAfterStatus": files_after,
                         "message": said.replace(tmp, "$TMP")})
    intact_found = expect in [r["path"] for r in json.loads(ok.stdout)["results"]]
    print(json.dumps({"workspace": str(args.workspace), "provider": args.provider, "files": report.indexed,
                      "chunks": report.chunks, "cachedEmbeddings": cached, "coldIndexSeconds": round(cold, 2),
                      "coldCliIndexSeconds": round(cold_cli, 2), "intactSearchSeconds": round(intact_s, 2),
                      "intactAnswerFound": intact_found, "query": query, "cases": rows,
                      "loadAverage": [round(x, 2) for x in os.getloadavg()]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
