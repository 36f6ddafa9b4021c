"""Cold start of the embedded model with and without the saved optimised graph
(memdir.embeddings.saved_graph), alternated in one run, medians:

    .venv/bin/python bench/saved_graph_speed.py ../shared/data/locomo-dev/26 [--repeats 10] [--out FILE]

* bit-identity: every non-empty line of the sample's Markdown files plus every question, embedded
  by a provider on the original model and one on the saved graph (fresh sessions)
* model load in a fresh process (``LocalEmbeddingProvider.load``: session build, checksums and
  tokenizer in parallel, plus the probe run with the saved graph), the session build alone, and
  the process's peak RSS
* cold CLI ``memdir search Q --json --no-sync`` (hybrid, fresh process), wall time and peak RSS

"off" is ``MEMDIR_SAVED_GRAPH=0`` (the original model, as before); "on" loads the saved graph,
built into a private cache folder before anything is timed; "first" is the first use (an empty
cache folder: the session is built from the original model and its graph saved).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memdir.api import Memory
from memdir.bench.quality import load_samples, scored_queries
from memdir.embeddings.local import LocalEmbeddingProvider

LOAD_SCRIPT = """
import json, time
from memdir.embeddings.local import LocalEmbeddingProvider
p = LocalEmbeddingProvider()
b = p._backend
inner = b._create_session
spent = []
def timed(ort):
    t0 = time.perf_counter(); s = inner(ort); spent.append(time.perf_counter() - t0); return s
b._create_session = timed
t0 = time.perf_counter(); p.load(); load = time.perf_counter() - t0
# VmHWM, not ru_maxrss: that one keeps the forking parent's peak across exec.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"load": load, "session": spent[0], "rss_kb": hwm,
                  "loaded_from": str(b.loaded_from)}))
"""
MODES = {"off": "0", "on": "1"}


def med(xs: list[float], scale: float = 1000.0) -> float:
    return round(statistics.median(xs) * scale, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sample", type=Path, help="a LoCoMo dataset sample folder (workspace/ + queries.jsonl)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="saved-graph-speed-"))
    cache = work / "cache"
    os.environ["MEMDIR_CACHE_DIR"] = str(cache)
    ((_, workspace, queries),) = [s for s in load_samples(args.sample.parent) if s[0] == args.sample.name]
    questions = [q["query"] for q in scored_queries(queries)]
    texts = [line.strip() for f in sorted(Path(workspace).rglob("*.md"))
             for line in f.read_text(encoding="utf-8").splitlines() if line.strip()] + questions
    report: dict[str, object] = {"sample": str(args.sample), "texts": len(texts)}

    vectors = {}
    for mode, value in MODES.items():
        os.environ["MEMDIR_SAVED_GRAPH"] = value
        for _ in range(2 if mode == "on" else 1):  # "on": the first session saves, the second loads
            with LocalEmbeddingProvider() as provider:
                vectors[mode] = np.asarray(provider.embed_batch(texts))
                loaded_from = str(provider._backend.loaded_from)
        report[f"loaded_from_{mode}"] = loaded_from
    assert str(cache) in report["loaded_from_on"], report
    same = int(np.all(vectors["on"] == vectors["off"], axis=1).sum())
    report["identical_vectors"] = f"{same}/{len(texts)}"
    print("identical vectors", report["identical_vectors"], file=sys.stderr, flush=True)

    state = work / "state"
    os.environ["MEMDIR_SAVED_GRAPH"] = "1"
    mem = Memory(workspace, state_dir=state)
    mem.sync()
    mem.close()

    envs = {mode: {**os.environ, "MEMDIR_SAVED_GRAPH": value} for mode, value in MODES.items()}
    load: dict[str, dict[str, list[float]]] = {m: {"load": [], "session": [], "rss": []}
                                               for m in (*MODES, "first")}
    cli: dict[str, dict[str, list[float]]] = {m: {"wall": [], "rss": []} for m in MODES}
    for r in range(args.repeats):
        for mode in (MODES if r % 2 == 0 else list(MODES)[::-1]):
            proc = subprocess.run([sys.executable, "-c", LOAD_SCRIPT], capture_output=True, text=True,
                                  env=envs[mode], check=True)
            got = json.loads(proc.stdout)
            assert (str(cache) in got["loaded_from"]) == (mode == "on"), got
            load[mode]["load"].append(got["load"])
            load[mode]["session"].append(got["session"])
            load[mode]["rss"].append(got["rss_kb"])
        # The first use: an empty cache, so the session is built from the original and saved.
        first_env = {**envs["on"], "MEMDIR_CACHE_DIR": str(work / f"first-{r}")}
        got = json.loads(subprocess.run([sys.executable, "-c", LOAD_SCRIPT], capture_output=True, text=True,
                                        env=first_env, check=True).stdout)
        assert str(work / f"first-{r}") not in got["loaded_from"], got
        assert (work / f"first-{r}" / "models").is_dir(), got
        for key, value in (("load", got["load"]), ("session", got["session"]), ("rss", got["rss_kb"])):
            load["first"][key].append(value)
        for mode in (MODES if r % 2 == 0 else list(MODES)[::-1]):
            cmd = [sys.executable, "-m", "memdir", "--workspace", str(workspace), "--state-dir", str(state),
                   "search", questions[r % len(questions)], "--json", "--no-sync"]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=envs[mode])
            out, err = proc.stdout, proc.stderr
            cli[mode]["wall"].append(time.perf_counter() - t0)
            assert proc.returncode == 0, err
            assert json.loads(out).get("mode") == "hybrid", out[:200]
    # Peak RSS of a CLI process: RUSAGE_CHILDREN is the max over all children, so each reading
    # comes from a wrapper process that runs one search.
    for mode in MODES:
        cmd = [sys.executable, "-c",
               "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
               sys.executable, "-m", "memdir", "--workspace", str(workspace), "--state-dir", str(state),
               "search", questions[0], "--json", "--no-sync"]
        for _ in range(3):
            out = subprocess.run(cmd, capture_output=True, text=True, env=envs[mode], check=True).stdout
            cli[mode]["rss"].append(float(out.strip()))
    report["model_load_ms"] = {m: med(v["load"]) for m, v in load.items()}
    report["session_build_ms"] = {m: med(v["session"]) for m, v in load.items()}
    report["model_load_peak_rss_mb"] = {m: med(v["rss"], 1 / 1024) for m, v in load.items()}
    report["cold_cli_hybrid_ms"] = {m: med(v["wall"]) for m, v in cli.items()}
    report["cold_cli_peak_rss_mb"] = {m: med(v["rss"], 1 / 1024) for m, v in cli.items()}
    report["repeats"] = args.repeats
    report["saved_graph_disk_mb"] = round(sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 2**20, 1)
    report["load_average"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
