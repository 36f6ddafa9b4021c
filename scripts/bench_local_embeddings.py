"""Measure the embedded local provider: load time, throughput, query latency, peak RSS.

Why: the default batch size and thread count are chosen from these figures (SPEC §12 machine).
Chunks are ~1,500-character slices of the LoCoMo notes in ../shared/data (real prose), queries
are that data set's questions.  Each measurement that depends on process state (load time,
peak RSS) runs in a fresh subprocess.

    python scripts/bench_local_embeddings.py [--data ../shared/data/locomo-dev] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = Path("/work/shared/data/locomo-dev")


def load_chunks(data: Path, size: int = 1500, limit: int = 500) -> list[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(data.glob("*/workspace/memory/*.md")))
    chunks = [text[i : i + size] for i in range(0, len(text) - size, size)]
    if not chunks:
        raise SystemExit(f"no notes under {data}")
    while len(chunks) < limit:
        chunks += chunks
    return chunks[:limit]


def load_queries(data: Path, limit: int = 200) -> list[str]:
    out: list[str] = []
    for path in sorted(data.glob("*/queries.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line)["query"])
    return out[:limit]


def peak_rss_mb() -> float:
    """Peak RSS of this process: VmHWM (reset at exec, unlike ru_maxrss, which a child inherits
    from the parent it forked from); ru_maxrss where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(mode: str, args: argparse.Namespace) -> dict[str, object]:
    """Runs inside a fresh interpreter."""
    t0 = time.perf_counter()
    from memdir.embeddings.local import LocalEmbeddingProvider

    t_import = time.perf_counter() - t0
    provider = LocalEmbeddingProvider(threads=args.threads, batch_size=args.batch, batch_tokens=args.tokens)
    t1 = time.perf_counter()
    provider.load()
    t_load = time.perf_counter() - t1
    result: dict[str, object] = {"import_s": t_import, "load_s": t_load, "rss_after_load_mb": peak_rss_mb()}
    if mode == "load":
        t2 = time.perf_counter()
        provider.embed_query("first query after load")
        result["first_query_s"] = time.perf_counter() - t2
    elif mode == "rss":
        chunks = load_chunks(args.data, limit=500)
        t2 = time.perf_counter()
        for i in range(0, len(chunks), 5):  # ~8000-byte groups, as the indexer sends them (R§5.3)
            provider.embed_batch(chunks[i : i + 5])
        result["seconds"] = time.perf_counter() - t2
        result["peak_rss_mb"] = peak_rss_mb()
    return result


def run_child(mode: str, args: argparse.Namespace, batch: int, tokens: int) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--child", mode, "--batch", str(batch), "--tokens", str(tokens)]
    cmd += ["--data", str(args.data)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed(provider: object, texts: list[str], reps: int) -> tuple[float, float]:
    """Best wall-clock texts/s and median CPU ms per text (CPU time is robust to a busy machine)."""
    best, cpu = 0.0, []
    for _ in range(reps):
        c0, t0 = os.times(), time.perf_counter()
        provider.embed_batch(texts)  # type: ignore[attr-defined]
        wall, c1 = time.perf_counter() - t0, os.times()
        best = max(best, len(texts) / wall)
        cpu.append((c1.user - c0.user + c1.system - c0.system) * 1000 / len(texts))
    return best, statistics.median(cpu)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--child", default=None)
    parser.add_argument("--n", type=int, default=64, help="chunks per throughput run")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0

    sys.path.insert(0, str(ROOT / "src"))
    from memdir.embeddings.local import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS, LocalEmbeddingProvider

    print(
        f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} (other work skews wall-clock figures)"
    )
    for batch, tokens in ((DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS), (1, 10**9), (16, 10**9)):
        r = run_child("rss", args, batch, tokens)
        print(
            f"500 chunks in 5-chunk calls, batch {batch}, token cap {tokens}: {float(r['seconds']):.1f}s, "
            f"RSS after load {float(r['rss_after_load_mb']):.0f} MB, peak {float(r['peak_rss_mb']):.0f} MB"
        )
    loads = [run_child("load", args, DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS) for _ in range(3)]
    print(
        "load (median of 3 fresh processes): import {:.3f}s, session {:.3f}s, first query {:.3f}s".format(
            statistics.median(float(r["import_s"]) for r in loads),
            statistics.median(float(r["load_s"]) for r in loads),
            statistics.median(float(r["first_query_s"]) for r in loads),
        )
    )

    workloads = {
        "1500-char chunks": load_chunks(args.data, limit=args.n),
        "queries": load_queries(args.data, limit=256),
    }
    configs = [(1, 10**9), (8, 10**9), (16, 10**9), (32, 10**9), (16, 256), (16, 512), (16, 1024)]
    for name, texts in workloads.items():
        print(f"{name}: {len(texts)} texts")
        for batch, tokens in configs:
            provider = LocalEmbeddingProvider(threads=args.threads, batch_size=batch, batch_tokens=tokens)
            provider.embed_batch(texts[:batch])  # load + warm-up
            cps, cpu = timed(provider, texts, args.reps)
            cap = "none" if tokens >= 10**9 else str(tokens)
            print(f"  batch {batch:>2}, token cap {cap:>4}: {cps:6.1f} texts/s, {cpu:5.1f} CPU ms/text")
            provider.close()

    provider = LocalEmbeddingProvider(threads=args.threads)
    queries = load_queries(args.data)
    provider.embed_query("warm-up")
    latencies = []
    for q in queries:
        t = time.perf_counter()
        provider.embed_query(q)
        latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p95 = latencies[int(len(latencies) * 0.95) - 1]
    print(f"query latency over {len(latencies)} queries: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
