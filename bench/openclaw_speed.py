"""memdir and OpenClaw side by side on one LoCoMo workspace: indexing, one-shot CLI searches, warm
searches (memdir's Python API and ``memdir mcp`` over streamable HTTP; OpenClaw's gateway
``/tools/invoke``), with the same MiniLM for both.

    .venv/bin/python bench/openclaw_speed.py ../shared/data/locomo-dev/26 --queries 20 --out report.json

OpenClaw (``bench/setup-openclaw.sh 2026.9.6``) is found as the ``openclaw-cli`` adapter finds it
(``MEMDIR_BENCH_OPENCLAW_PREFIX``, ``.bench-tools/openclaw``…).  Its embeddings come from memdir's
embedded model served over a loopback OpenAI-compatible ``/v1/embeddings``
(:class:`memdir.testing.provider_server.ProviderServer`), so both systems embed with the very same
MiniLM.  memdir is measured first, then OpenClaw, in one run on the same queries; the ratio column
is memdir ÷ OpenClaw (read it with the machine's load, which the report records).  Without OpenClaw
the memdir side is still measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

os.environ.setdefault("MEMDIR_QUERY_CACHE_SIZE", "0")  # every timed query pays for its own vector

API_KEY = "memdir-bench-key"
GATEWAY_TOKEN = "memdir-bench-gateway-token"
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def median_ms(values: list[float]) -> float | None:
    return round(statistics.median(values) * 1000, 1) if values else None


def timed(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}… failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-800:]}")
    return wall, proc.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing answered at {url}")


# -- memdir ------------------------------------------------------------------------------------

def memdir_env(state: Path, **extra: str) -> dict[str, str]:
    src = Path(__file__).resolve().parents[1] / "src"
    # The user's MEMDIR_* settings are dropped, except the query-vector cache's size: a server that
    # remembered the vectors of queries timed before would answer the repeated ones without embedding.
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("MEMDIR_") or k == "MEMDIR_QUERY_CACHE_SIZE") and not k.endswith("_API_KEY")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed memdir has byte-code caches
    env.update(PYTHONPATH=str(src), MEMDIR_STATE_DIR=str(state), **extra)
    return env


def measure_memdir(ws: Path, queries: list[str], warm: list[str], work: Path, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    memdir = [sys.executable, "-m", "memdir"]
    kw_state, hy_state = work / "memdir-kw", work / "memdir-hybrid"
    kw_env = memdir_env(kw_state, MEMDIR_PROVIDER="none")
    hy_env = memdir_env(hy_state)
    out["indexKeyword"] = timed([*memdir, "index", "--force", "-w", str(ws)], kw_env)[0]
    out["indexHybrid"] = timed([*memdir, "index", "--force", "-w", str(ws)], hy_env)[0]
    cli = {"hybrid": [], "keyword": []}
    for q in queries[:runs]:
        cli["hybrid"].append(timed([*memdir, "search", q, "--json", "--no-sync", "-w", str(ws)], hy_env)[0])
        cli["keyword"].append(timed([*memdir, "search", q, "--json", "--no-sync", "-w", str(ws)], kw_env)[0])
    out["cliHybridMs"], out["cliKeywordMs"] = median_ms(cli["hybrid"]), median_ms(cli["keyword"])

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from memdir.api import Memory

    with Memory(ws, state_dir=hy_state) as mem:
        for q in warm:
            mem.search(q, sync=False)
        api, api_kw, embed = [], [], []
        for q in queries:
            t0 = time.perf_counter()
            r = mem.search(q, sync=False)
            api.append(time.perf_counter() - t0)
            embed.append(r.timings_ms.get("embed", 0.0) / 1000)
        with Memory(ws, state_dir=kw_state, config={"memorySearch": {"provider": "none"}}) as kw:
            for q in warm:
                kw.search(q, sync=False)
            for q in queries:
                t0 = time.perf_counter()
                kw.search(q, sync=False)
                api_kw.append(time.perf_counter() - t0)
    out["apiHybridMs"], out["apiHybridEmbedMs"] = median_ms(api), median_ms(embed)
    out["apiKeywordMs"] = median_ms(api_kw)
    out.update(measure_mcp(ws, queries, warm, hy_env, kw_env))
    return out


class PlainMCPClient:
    """JSON-RPC over streamable HTTP with the stdlib's urllib, one request per call.

    Why: OpenClaw's gateway is timed with plain ``urllib`` POSTs, so memdir's server is timed with
    the same client; the MCP SDK's own client (anyio streams, pydantic models) adds a few
    milliseconds of its own per call, reported apart.
    """

    def __init__(self, url: str):
        self.url, self.session_id, self.next_id = url, None, 1
        self.post({"method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                      "clientInfo": {"name": "memdir-bench", "version": "0"}}})
        self.post({"method": "notifications/initialized"}, notify=True)

    def post(self, message: dict[str, Any], notify: bool = False) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", **message}
        if not notify:
            body["id"], self.next_id = self.next_id, self.next_id + 1
        headers = dict(MCP_HEADERS, **({"mcp-session-id": self.session_id} if self.session_id else {}))
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers)
        with urllib.request.urlopen(req, timeout=120) as resp:
            self.session_id = resp.headers.get("mcp-session-id") or self.session_id
            raw = resp.read()
        return dict(json.loads(raw)) if raw.strip() else {}

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = self.post({"method": "tools/call", "params": {"name": name, "arguments": arguments}})
        if "result" not in answer or answer["result"].get("isError"):
            raise RuntimeError(f"{name} failed: {json.dumps(answer)[:300]}")
        return dict(answer["result"])


def measure_mcp(ws: Path, queries: list[str], warm: list[str], hy_env: dict[str, str],
                kw_env: dict[str, str]) -> dict[str, float | None]:
    """Median wall time of ``memory_search`` through ``memdir mcp --transport http`` (one session
    per client): with a plain HTTP client (as OpenClaw's gateway is timed) and with the MCP SDK's."""
    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    out: dict[str, float | None] = {}
    for label, env in (("Hybrid", hy_env), ("Keyword", kw_env)):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                                 "-w", str(ws)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_http(f"http://127.0.0.1:{port}/mcp")
            plain = PlainMCPClient(f"http://127.0.0.1:{port}/mcp")
            for q in warm:
                plain.call_tool("memory_search", {"query": q})
            times = []
            for q in queries:
                t0 = time.perf_counter()
                plain.call_tool("memory_search", {"query": q})
                times.append(time.perf_counter() - t0)
            out[f"mcp{label}Ms"] = median_ms(times)

            async def run(port: int = port) -> list[float]:
                async with streamablehttp_client(f"http://127.0.0.1:{port}/mcp") as (r, w, _), \
                        ClientSession(r, w) as session:
                    await session.initialize()
                    for q in warm:
                        await session.call_tool("memory_search", {"query": q})
                    times = []
                    for q in queries:
                        t0 = time.perf_counter()
                        await session.call_tool("memory_search", {"query": q})
                        times.append(time.perf_counter() - t0)
                    return times

            out[f"mcpSdk{label}Ms"] = median_ms(anyio.run(run))
        finally:
            proc.terminate()
            proc.wait(30)
    return out


# -- OpenClaw ----------------------------------------------------------------------------------

class OpenClaw:
    def __init__(self, command: list[str], work: Path, embed_url: str | None):
        self.command = command
        self.home = work / ("openclaw-hybrid" if embed_url else "openclaw-kw")
        self.ws = self.home / "workspace"
        self.embed_url = embed_url

    def prepare(self, ws: Path) -> dict[str, str]:
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.copytree(ws, self.ws)
        # 2026.9 reads `memory.search` (and owns sync/watch itself); older ones agents.defaults.memorySearch.
        ms: dict[str, Any] = {"enabled": True}
        if self.embed_url:
            ms.update(provider="openai-compatible", model="all-MiniLM-L6-v2",
                      remote={"baseUrl": self.embed_url + "/v1", "apiKey": API_KEY})
        cfg = {"agents": {"defaults": {"workspace": str(self.ws)}}, "memory": {"search": ms}}
        (self.home / "openclaw.json").write_text(json.dumps(cfg, indent=2))
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OPENCLAW_")}
        env.update(HOME=str(self.home), OPENCLAW_STATE_DIR=str(self.home),
                   OPENCLAW_CONFIG_PATH=str(self.home / "openclaw.json"), NO_COLOR="1", CI="1")
        return env

    def gateway_search_ms(self, env: dict[str, str], queries: list[str],
                          warm: list[str]) -> tuple[float | None, str | None]:
        port = free_port()
        proc = subprocess.Popen([*self.command, "gateway", "run", "--port", str(port), "--bind", "loopback",
                                 "--auth", "token", "--token", GATEWAY_TOKEN, "--allow-unconfigured"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_http(f"http://127.0.0.1:{port}/", timeout=180)

            def call(q: str) -> dict[str, Any]:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/tools/invoke",
                    data=json.dumps({"tool": "memory_search", "args": {"query": q}}).encode(),
                    headers={"Authorization": f"Bearer {GATEWAY_TOKEN}", "Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as resp:
                    return dict(json.loads(resp.read()))

            for q in warm:
                first = call(q)
                if not first.get("ok"):
                    return None, f"/tools/invoke answered {json.dumps(first)[:300]}"
            times = []
            for q in queries:
                t0 = time.perf_counter()
                call(q)
                times.append(time.perf_counter() - t0)
            return median_ms(times), None
        except Exception as exc:
            return None, f"gateway: {exc}"
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def measure_openclaw(ws: Path, queries: list[str], warm: list[str], work: Path, runs: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from memdir.bench.adapters import OpenClawInstall, find_openclaw
    from memdir.embeddings.local import LocalEmbeddingProvider
    from memdir.testing.provider_server import ProviderServer

    found = find_openclaw()
    if not isinstance(found, OpenClawInstall):
        return {"skipped": str(found)}
    out: dict[str, Any] = {"version": found.version}
    model = LocalEmbeddingProvider()
    server = ProviderServer(api_key=API_KEY)
    server._vectors = model.embed_batch  # type: ignore[method-assign]  # real MiniLM, not fake vectors
    try:
        for label, url in (("Keyword", None), ("Hybrid", server.url)):
            oc = OpenClaw(found.command, work, url)
            env = oc.prepare(ws)
            out[f"index{label}"] = timed([*found.command, "memory", "index", "--force"], env)[0]
            cli = []
            for q in queries[:runs]:
                cli.append(timed([*found.command, "memory", "search", "--json", "--query", q], env)[0])
            out[f"cli{label}Ms"] = median_ms(cli)
            out[f"gateway{label}Ms"], note = oc.gateway_search_ms(env, queries, warm)
            if note:
                out[f"gateway{label}Note"] = note
    finally:
        server.stop()
        model.close()
    return out


#: Untimed calls each warm path (API, MCP, OpenClaw's gateway) gets before its timed ones.
WARMUP_CALLS = 10

ROWS = (("full index, keyword only (s)", "indexKeyword"), ("full index with MiniLM (s)", "indexHybrid"),
        ("CLI search, fresh process, hybrid (ms)", "cliHybridMs"),
        ("CLI search, fresh process, keyword (ms)", "cliKeywordMs"))


def table(memdir: dict[str, Any], openclaw: dict[str, Any]) -> str:
    lines = ["| operation | OpenClaw | memdir | ratio |", "|---|---:|---:|---:|"]

    def row(label: str, o: Any, m: Any) -> None:
        ratio = f"{m / o:.3f}" if isinstance(o, (int, float)) and isinstance(m, (int, float)) and o else "-"
        lines.append(f"| {label} | {o if o is not None else '-'} | {m if m is not None else '-'} | {ratio} |")

    for label, key in ROWS:
        o, m = openclaw.get(key), memdir.get(key)
        row(label, round(o, 2) if isinstance(o, float) else o, round(m, 2) if isinstance(m, float) else m)
    row("warm hybrid: memdir Python API (incl. query embedding) vs OpenClaw gateway /tools/invoke (ms)",
        openclaw.get("gatewayHybridMs"), memdir.get("apiHybridMs"))
    row("warm hybrid: `memdir mcp` streamable HTTP vs OpenClaw gateway /tools/invoke, same HTTP client (ms)",
        openclaw.get("gatewayHybridMs"), memdir.get("mcpHybridMs"))
    row("warm keyword: `memdir mcp` HTTP vs OpenClaw gateway (ms)", openclaw.get("gatewayKeywordMs"),
        memdir.get("mcpKeywordMs"))
    lines.append("")
    lines.append(f"memdir warm keyword: API {memdir.get('apiKeywordMs')} ms, MCP HTTP {memdir.get('mcpKeywordMs')} ms; "
                 f"hybrid query embedding {memdir.get('apiHybridEmbedMs')} ms of the API's {memdir.get('apiHybridMs')}")
    lines.append("MCP calls are timed with a plain HTTP client (stdlib urllib, one connection per call), as OpenClaw's "
                 f"gateway is; through the MCP SDK's Python client: hybrid {memdir.get('mcpSdkHybridMs')} ms, "
                 f"keyword {memdir.get('mcpSdkKeywordMs')} ms")
    for k, v in openclaw.items():
        if k.endswith("Note") or k == "skipped":
            lines.append(f"OpenClaw {k}: {v}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sample", type=Path, help="a dataset sample folder (with workspace/ and queries.jsonl)")
    p.add_argument("--queries", type=int, default=20, help="warm queries per system")
    p.add_argument("--cli-runs", type=int, default=5, help="fresh-process searches per system")
    p.add_argument("--out", type=Path, help="write the JSON report here")
    p.add_argument("--skip-openclaw", action="store_true")
    args = p.parse_args()
    ws = (args.sample / "workspace").resolve()
    asked = [json.loads(line)["query"] for line in (args.sample / "queries.jsonl").read_text().splitlines()
             if line.strip()]
    # A server's first calls after it starts (or after a pause) run on cold caches; both systems get
    # the same few untimed calls first, with questions that are not timed afterwards.
    queries, warm = asked[: args.queries], asked[args.queries:][:WARMUP_CALLS] or asked[:1]
    work = Path(tempfile.mkdtemp(prefix="memdir-vs-openclaw-"))
    try:
        memdir = measure_memdir(ws, queries, warm, work, args.cli_runs)
        openclaw = {"skipped": "--skip-openclaw"} if args.skip_openclaw else measure_openclaw(
            ws, queries, warm, work, args.cli_runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {"sample": str(args.sample), "queries": len(queries), "warmupCalls": len(warm), "memdir": memdir,
              "openclaw": openclaw, "loadavg": list(os.getloadavg())}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    print(table(memdir, openclaw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
