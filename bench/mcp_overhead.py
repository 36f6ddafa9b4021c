"""Per-call transport overhead of ``memdir mcp --transport http``: warm ``memory_search`` over MCP
(plain urllib client and the MCP SDK's client) against the in-process Python API, for one or more
source trees side by side.

    .venv/bin/python bench/mcp_overhead.py ../shared/data/locomo-dev/26 --src before=/tmp/base/src --src after=src

Why side by side: the machine is shared, so absolute figures drift; every variant runs its own
server processes (keyword-only and hybrid) at the same time, and the rounds alternate between
them, so a before/after ratio is read from one run.  Each figure is the median of the per-round
medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openclaw_speed import PlainMCPClient, free_port, memdir_env, wait_http


def start_server(src: Path, ws: Path, state: Path, keyword: bool) -> tuple[subprocess.Popen[bytes], str]:
    env = memdir_env(state, **({"MEMDIR_PROVIDER": "none"} if keyword else {}))
    env["PYTHONPATH"] = str(src.resolve())
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                             "-w", str(ws)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    wait_http(url)
    return proc, url


def plain_ms(url: str, queries: list[str]) -> float:
    client = PlainMCPClient(url)
    client.call_tool("memory_search", {"query": queries[0]})
    times = []
    for q in queries:
        t0 = time.perf_counter()
        client.call_tool("memory_search", {"query": q})
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def sdk_ms(url: str, queries: list[str]) -> float:
    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run() -> list[float]:
        async with streamablehttp_client(url) as (r, w, _), ClientSession(r, w) as session:
            await session.initialize()
            await session.call_tool("memory_search", {"query": queries[0]})
            times = []
            for q in queries:
                t0 = time.perf_counter()
                result = await session.call_tool("memory_search", {"query": q})
                times.append(time.perf_counter() - t0)
                if result.isError:
                    raise RuntimeError(result.content[0])
            return times

    return statistics.median(anyio.run(run)) * 1000


def api_ms(memory: Any, queries: list[str]) -> float:
    memory.search(queries[0], sync=False)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        memory.search(q, sync=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sample", type=Path, help="a dataset sample folder (with workspace/ and queries.jsonl)")
    p.add_argument("--src", action="append", required=True, help="LABEL=PATH of a memdir source tree (src/)")
    p.add_argument("--calls", type=int, default=200, help="timed calls per client per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    ws = (args.sample / "workspace").resolve()
    base = [json.loads(line)["query"] for line in (args.sample / "queries.jsonl").read_text().splitlines()
            if line.strip()]
    queries = (base * (args.calls // len(base) + 1))[: args.calls]
    variants = [(s.split("=", 1)[0], Path(s.split("=", 1)[1])) for s in args.src]
    work = Path(tempfile.mkdtemp(prefix="memdir-mcp-overhead-"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from memdir.api import Memory

    states = {"keyword": work / "kw", "hybrid": work / "hy"}
    for mode, state in states.items():
        env = memdir_env(state, **({"MEMDIR_PROVIDER": "none"} if mode == "keyword" else {}))
        subprocess.run([sys.executable, "-m", "memdir", "index", "--force", "-w", str(ws)], env=env, check=True,
                       capture_output=True)
    servers: dict[tuple[str, str], tuple[subprocess.Popen[bytes], str]] = {}
    results: dict[str, list[float]] = {}
    try:
        for label, src in variants:
            for mode, state in states.items():
                servers[label, mode] = start_server(src, ws, state, mode == "keyword")
        apis = {"keyword": Memory(ws, state_dir=states["keyword"], config={"memorySearch": {"provider": "none"}}),
                "hybrid": Memory(ws, state_dir=states["hybrid"])}
        for rnd in range(args.rounds):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for mode in ("keyword", "hybrid"):
                results.setdefault(f"api {mode}", []).append(api_ms(apis[mode], queries))
                for label, _ in order:
                    url = servers[label, mode][1]
                    results.setdefault(f"{label} plain {mode}", []).append(plain_ms(url, queries))
                    results.setdefault(f"{label} sdk {mode}", []).append(sdk_ms(url, queries))
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        for m in apis.values():
            m.close()
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)
    summary = {k: round(statistics.median(v), 2) for k, v in results.items()}
    for mode in ("keyword", "hybrid"):
        api = summary[f"api {mode}"]
        print(f"{mode}: API {api:.2f} ms")
        for label, _ in variants:
            pl, sd = summary[f"{label} plain {mode}"], summary[f"{label} sdk {mode}"]
            print(f"  {label:>8}: plain {pl:.2f} ms (+{pl - api:.2f}), SDK {sd:.2f} ms (+{sd - api:.2f})")
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rounds": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
