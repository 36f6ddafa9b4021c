"""Per-call transport overhead of ``memdir mcp --transport http``: warm ``memory_search`` over MCP
(plain urllib client and the MCP SDK's client) against the in-process Python API, for one or more
source trees side by side.

    .venv/bin/python bench/mcp_overhead.py ../shared/data/locomo-dev/26 --src before=/tmp/base/src --src after=src

Why side by side: the machine is shared, so absolute figures drift; every variant runs its own
server processes (keyword-only and hybrid) at the same time, and the API and the servers take
turns call by call, so they all see the same load and a before/after ratio is read from one run.
Each figure is the median of the per-round medians.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openclaw_speed import PlainMCPClient, free_port, memdir_env, wait_http

os.environ.setdefault("MEMDIR_QUERY_CACHE_SIZE", "0")  # every timed query pays for its own vector


def start_server(src: Path, python: str, ws: Path, state: Path, keyword: bool) -> tuple[subprocess.Popen[bytes], str]:
    env = memdir_env(state, **({"MEMDIR_PROVIDER": "none"} if keyword else {}))
    env["PYTHONPATH"] = str(src.resolve())
    port = free_port()
    proc = subprocess.Popen([python, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                             "-w", str(ws)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    wait_http(url)
    return proc, url


def _timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1000


def plain_round(urls: dict[str, str], memory: Any, queries: list[str]) -> dict[str, float]:
    """Median ms per call, the API and every server taking turns call by call (same load for all)."""
    clients = {label: PlainMCPClient(url) for label, url in urls.items()}
    calls = {"api": lambda q: memory.search(q, sync=False),
             **{label: (lambda q, c=c: c.call_tool("memory_search", {"query": q})) for label, c in clients.items()}}
    for call in calls.values():
        call(queries[0])
    times: dict[str, list[float]] = {label: [] for label in calls}
    for i, q in enumerate(queries):
        order = list(calls) if i % 2 == 0 else list(calls)[::-1]
        for label in order:
            times[label].append(_timed(calls[label], q))
    return {label: statistics.median(t) for label, t in times.items()}


def sdk_round(urls: dict[str, str], queries: list[str]) -> dict[str, float]:
    """As :func:`plain_round`, through the MCP SDK's client (one session per server)."""
    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run() -> dict[str, float]:
        async with contextlib.AsyncExitStack() as stack:
            sessions = {}
            for label, url in urls.items():
                r, w, _ = await stack.enter_async_context(streamablehttp_client(url))
                sessions[label] = await stack.enter_async_context(ClientSession(r, w))
                await sessions[label].initialize()
                await sessions[label].call_tool("memory_search", {"query": queries[0]})
            times: dict[str, list[float]] = {label: [] for label in sessions}
            for i, q in enumerate(queries):
                order = list(sessions) if i % 2 == 0 else list(sessions)[::-1]
                for label in order:
                    t0 = time.perf_counter()
                    result = await sessions[label].call_tool("memory_search", {"query": q})
                    times[label].append((time.perf_counter() - t0) * 1000)
                    if result.isError:
                        raise RuntimeError(result.content[0])
            return {label: statistics.median(t) for label, t in times.items()}

    return anyio.run(run)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sample", type=Path, help="a dataset sample folder (with workspace/ and queries.jsonl)")
    p.add_argument("--src", action="append", required=True,
                   help="LABEL=PATH of a memdir source tree (src/), optionally LABEL=PATH@PYTHON to serve it "
                        "with another interpreter (e.g. a venv with other uvicorn extras)")
    p.add_argument("--calls", type=int, default=200, help="timed calls per client per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    ws = (args.sample / "workspace").resolve()
    base = [json.loads(line)["query"] for line in (args.sample / "queries.jsonl").read_text().splitlines()
            if line.strip()]
    queries = (base * (args.calls // len(base) + 1))[: args.calls]
    variants = []
    for spec in args.src:
        label, _, rest = spec.partition("=")
        path, _, python = rest.partition("@")
        variants.append((label, Path(path), python or sys.executable))
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
        for label, src, python in variants:
            for mode, state in states.items():
                servers[label, mode] = start_server(src, python, ws, state, mode == "keyword")
        apis = {"keyword": Memory(ws, state_dir=states["keyword"], config={"memorySearch": {"provider": "none"}}),
                "hybrid": Memory(ws, state_dir=states["hybrid"])}
        for rnd in range(args.rounds):
            for mode in ("keyword", "hybrid"):
                urls = {label: servers[label, mode][1] for label, _, _ in variants}
                for label, ms in plain_round(urls, apis[mode], queries).items():
                    results.setdefault(f"api {mode}" if label == "api" else f"{label} plain {mode}", []).append(ms)
                for label, ms in sdk_round(urls, queries).items():
                    results.setdefault(f"{label} sdk {mode}", []).append(ms)
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
        for label, _, _ in variants:
            pl, sd = summary[f"{label} plain {mode}"], summary[f"{label} sdk {mode}"]
            print(f"  {label:>8}: plain {pl:.2f} ms (+{pl - api:.2f}), SDK {sd:.2f} ms (+{sd - api:.2f})")
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rounds": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
