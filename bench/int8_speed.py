"""The embedded model as shipped (fp32 MatMuls after onnxruntime folds the int8 weights) beside
``local.integerKernels`` (memdir.embeddings.int8) and ``local.fusedAttention``
(memdir.embeddings.fused), alternated in one run, medians:

    .venv/bin/python bench/int8_speed.py ../shared/data/locomo-dev/26 [--repeats 5] [--variants fp32,fused]
        [--skip index,cli] [--out FILE]

* bare query embedding (``embed_query``, every question of the sample, alternating per question)
* warm in-process hybrid search (``Memory.search``, query embedding included)
* cold CLI ``memdir search Q --json --no-sync`` (hybrid, fresh process, model load included)
* a full index with embeddings (fresh state folder, so no embedding cache), per repeat

The derived models are built into a private cache folder before anything is timed.
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

from memdir.api import Memory
from memdir.bench.quality import load_samples, scored_queries
from memdir.embeddings.local import LocalEmbeddingProvider

os.environ.setdefault("MEMDIR_QUERY_CACHE_SIZE", "0")  # every timed query pays for its own vector

OFF = {"integerKernels": False, "fusedAttention": False}
VARIANTS = {"fp32": OFF, "int8": {**OFF, "integerKernels": True}, "fused": {**OFF, "fusedAttention": True}}


def median_ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1000, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sample", type=Path, help="a LoCoMo dataset sample folder (workspace/ + queries.jsonl)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variants", default="fp32,int8,fused", help=f"comma-separated, of {','.join(VARIANTS)}")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out: index, cli")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    names = args.variants.split(",")
    skip = set(filter(None, args.skip.split(",")))
    settings = {name: VARIANTS[name] for name in names}
    work = Path(tempfile.mkdtemp(prefix="int8-speed-"))
    os.environ["MEMDIR_CACHE_DIR"] = str(work / "cache")
    ((_, workspace, queries),) = [s for s in load_samples(args.sample.parent) if s[0] == args.sample.name]
    questions = [q["query"] for q in scored_queries(queries)]
    report: dict[str, object] = {"sample": str(args.sample), "questions": len(questions)}

    providers = {name: LocalEmbeddingProvider(integer_kernels=cfg["integerKernels"],
                                              fused_attention=cfg["fusedAttention"])
                 for name, cfg in settings.items()}
    for p in providers.values():
        p.embed_query("warm up")
    if "int8" in providers:
        assert providers["int8"]._backend.numerics, "the integer copy was not used"
    if "fused" in providers:
        assert providers["fused"]._backend.fused_attention, "the fused copy was not used"
    embed: dict[str, list[float]] = {k: [] for k in providers}
    for _ in range(args.repeats):
        for q in questions:
            for name, p in providers.items():
                t0 = time.perf_counter()
                p.embed_query(q)
                embed[name].append(time.perf_counter() - t0)
    report["embed_query_ms"] = {k: median_ms(v) for k, v in embed.items()}
    for p in providers.values():
        p.close()
    print("embed_query_ms", report["embed_query_ms"], file=sys.stderr, flush=True)

    configs = {}
    for name, cfg in settings.items():
        configs[name] = work / f"{name}.json"
        configs[name].write_text(json.dumps({"memorySearch": {"local": cfg}}))
    index: dict[str, list[float]] = {k: [] for k in settings}
    for r in range(1 if "index" in skip else args.repeats):
        for name in settings:
            mem = Memory(workspace, state_dir=work / f"index-{name}-{r}", config=json.loads(configs[name].read_text()))
            t0 = time.perf_counter()
            mem.sync()
            index[name].append(time.perf_counter() - t0)
            mem.close()
    if "index" not in skip:
        report["full_index_s"] = {k: round(statistics.median(v), 2) for k, v in index.items()}
        print("full_index_s", report["full_index_s"], file=sys.stderr, flush=True)

    mems = {name: Memory(workspace, state_dir=work / f"index-{name}-0", config=json.loads(configs[name].read_text()))
            for name in settings}
    for mem in mems.values():
        for q in questions[:5]:
            mem.search(q, max_results=6, sync=False)
    search: dict[str, list[float]] = {k: [] for k in settings}
    for _ in range(args.repeats):
        for q in questions:
            for name, mem in mems.items():
                t0 = time.perf_counter()
                res = mem.search(q, max_results=6, sync=False)
                search[name].append(time.perf_counter() - t0)
                assert res.mode == "hybrid", res.mode
    report["warm_hybrid_search_ms"] = {k: median_ms(v) for k, v in search.items()}
    for mem in mems.values():
        mem.close()
    print("warm_hybrid_search_ms", report["warm_hybrid_search_ms"], file=sys.stderr, flush=True)

    cli: dict[str, list[float]] = {k: [] for k in settings}
    modes: dict[str, list[str]] = {k: [] for k in settings}
    for r in range(0 if "cli" in skip else args.repeats):
        for name in settings:
            cmd = [sys.executable, "-m", "memdir", "search", questions[r % len(questions)], "--json", "--no-sync",
                   "--workspace", str(workspace), "--state-dir", str(work / f"index-{name}-0"),
                   "--config", str(configs[name])]
            t0 = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            cli[name].append(time.perf_counter() - t0)
            modes[name].append(json.loads(out.stdout).get("mode"))
    if "cli" not in skip:
        report["cold_cli_hybrid_ms"] = {k: median_ms(v) for k, v in cli.items()}
        report["cold_cli_modes"] = modes
        print("cold_cli_hybrid_ms", report["cold_cli_hybrid_ms"], file=sys.stderr, flush=True)
    report["load_average"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
