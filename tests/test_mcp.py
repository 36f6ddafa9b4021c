"""``memdir mcp`` as a real subprocess, driven by the MCP SDK's own clients (stdio and HTTP)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client import streamable_http
from mcp.client.stdio import stdio_client

from helpers import cli_env, stop_process
from memdir.mcp_server import HostNotAllowed, check_loopback_host
from memdir.tools import TOOL_SPECS

# The SDK renamed its HTTP client within 1.x; use whichever this installed version has.
http_client = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client


@pytest.fixture
def served(make_workspace, tmp_path):
    ws = make_workspace({
        "MEMORY.md": "# Long-term\n\nBilling uses Kafka because ordering matters.\n",
        "memory/2026-01-10.md": "Met Priya; cursor-based pagination chosen for the public API.\n",
    })
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    return ws, cfg


def _text(result, *, error: bool = False) -> dict:
    assert result.isError is error  # failures are flagged, so a host can tell them from results
    payload = json.loads(result.content[0].text)  # OpenClaw's payload text either way
    assert result.structuredContent == payload  # same payload, also as structured content
    return payload


def _index_of(ws: Path, cfg: Path, state_dir: Path) -> Path:
    from memdir.config import load_config

    return load_config(workspace=ws, config_path=cfg, state_dir=state_dir).settings.index_path


def _indexed_files(index: Path) -> int:
    import sqlite3

    if not index.exists():
        return 0
    with sqlite3.connect(f"file:{index}?mode=ro", uri=True) as conn:
        try:
            return conn.execute("SELECT count(*) FROM files").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


async def _exercise(session: ClientSession, ws: Path, index: Path) -> None:
    init = await session.initialize()
    # The server indexes at startup (sync.onSessionStart), before any search asks for it.
    for _ in range(200):
        if _indexed_files(index) == 2:
            break
        await asyncio.sleep(0.05)
    assert _indexed_files(index) == 2
    assert init.serverInfo.name == "memdir"
    assert init.instructions and init.instructions.startswith("## Memory Recall")

    listed = (await session.list_tools()).tools
    assert [t.name for t in listed] == ["memory_search", "memory_get", "memory_append"]
    for tool in listed:
        spec = TOOL_SPECS[tool.name]
        assert tool.description == spec.description and tool.inputSchema == spec.parameters
        assert tool.annotations.readOnlyHint is spec.read_only

    found = _text(await session.call_tool("memory_search", {"query": "which queue for billing", "maxResults": 3}))
    assert found["results"][0]["path"] == "MEMORY.md" and found["mode"] == "fts-only"
    assert found["results"][0]["snippet"].endswith(f"Source: {found['results'][0]['citation']}")

    got = _text(await session.call_tool("memory_get", {"path": "memory/2026-01-10.md", "from": 1, "lines": 1}))
    assert got == {"text": "Met Priya; cursor-based pagination chosen for the public API.",
                   "path": "memory/2026-01-10.md"}
    refused = _text(await session.call_tool("memory_get", {"path": "../secrets.md"}), error=True)
    assert refused["disabled"] is True and refused["error"].startswith("path not allowed")
    missing = _text(await session.call_tool("memory_get", {"path": "memory/1999-01-01.md"}))
    assert missing == {"text": "", "path": "memory/1999-01-01.md"}  # R§10.2: a missing log reads as empty
    empty = _text(await session.call_tool("memory_search", {"query": "  "}), error=True)
    assert empty == {"results": [], "error": "query required"}
    blank = _text(await session.call_tool("memory_append", {"text": ""}), error=True)
    assert blank["appended"] is False and blank["error"] == "text required"
    # a model told "if nothing to store, reply with NO_REPLY" that appends the token writes nothing
    silent = _text(await session.call_tool("memory_append", {"text": " NO_REPLY\n"}), error=True)
    assert silent["appended"] is False and silent["error"].startswith("NO_REPLY is a reply, not a note"), silent
    assert not any("NO_REPLY" in p.read_text() for p in (ws / "memory").glob("*.md"))
    nothing = _text(await session.call_tool("memory_search", {"query": "zebra okapi"}))
    assert nothing["results"] == []  # no hits is a result, not a failure

    before = dt.date.today()
    appended = _text(await session.call_tool("memory_append", {"text": "- Decided: the wombat job runs at 03:00."}))
    assert appended["appended"] is True
    assert appended["path"] in {f"memory/{d.isoformat()}.md" for d in (before, dt.date.today())}
    assert (ws / appended["path"]).read_text().endswith("- Decided: the wombat job runs at 03:00.\n")
    after = _text(await session.call_tool("memory_search", {"query": "wombat job"}))
    assert after["results"] and after["results"][0]["path"] == appended["path"]  # read-your-writes
    assert "stale" not in after

    # An edit made outside the server is seen by the long-lived index too.
    (ws / "memory" / "2026-01-11.md").write_text("Chose the platypus cache for sessions.\n")
    external = _text(await session.call_tool("memory_search", {"query": "platypus cache"}))
    assert external["results"][0]["path"] == "memory/2026-01-11.md"

    unknown = await session.call_tool("memory_delete", {"path": "MEMORY.md"})
    assert unknown.isError is True and "unknown tool" in unknown.content[0].text


def test_stdio_server_with_the_sdk_client(served, state_dir):
    ws, cfg = served
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memdir", "mcp", "--workspace", str(ws), "--config", str(cfg)],
        env=cli_env(state_dir),
    )

    async def run() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await _exercise(session, ws, _index_of(ws, cfg, state_dir))

    asyncio.run(asyncio.wait_for(run(), 90))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not start listening")


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def test_streamable_http_on_loopback_with_origin_checking(served, state_dir):
    ws, cfg = served
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
         "--workspace", str(ws), "--config", str(cfg)],
        env=cli_env(state_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_listening(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"

        async def run() -> None:
            async with http_client(url) as (read, write, _), ClientSession(read, write) as session:
                await _exercise(session, ws, _index_of(ws, cfg, state_dir))

        asyncio.run(asyncio.wait_for(run(), 90))

        with httpx.Client(timeout=10) as client:
            # Refused before any MCP processing: 403 (older 1.x SDKs answered 400).
            foreign = client.post(url, json=INIT, headers={**HEADERS, "Origin": "http://evil.example.com"})
            assert foreign.status_code in (400, 403) and foreign.text == "Invalid Origin header"
            lookalike = client.post(url, json=INIT, headers={**HEADERS, "Origin": f"http://localhost.evil.example:{port}"})
            assert lookalike.status_code in (400, 403) and lookalike.text == "Invalid Origin header"
            rebound = client.post(url, json=INIT, headers={**HEADERS, "Host": f"evil.example.com:{port}"})
            assert rebound.status_code == 421  # DNS rebinding: a foreign Host name is refused
            local = client.post(url, json=INIT, headers={**HEADERS, "Origin": f"http://localhost:{port}"})
            assert local.status_code == 200
    finally:
        stop_process(proc)
    assert f"http://127.0.0.1:{port}/mcp" in (proc.stderr.read() if proc.stderr else "")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_non_loopback_host_is_refused(run_cli, served, host):
    ws, cfg = served
    proc = run_cli("mcp", "--transport", "http", "--host", host, "--workspace", str(ws), "--config", str(cfg),
                   timeout=30)
    assert proc.returncode == 2  # bad usage, as --port 70000 (it was 1)
    assert f"refusing to listen on '{host}'" in proc.stderr and "loopback only" in proc.stderr


def test_loopback_host_check():
    for ok in ("127.0.0.1", "::1", "[::1]", "localhost", "LOCALHOST", "127.0.0.2"):
        check_loopback_host(ok)
    for bad in ("0.0.0.0", "::", "", "10.0.0.1", "localhost.evil.com", "[::]"):
        with pytest.raises(HostNotAllowed):
            check_loopback_host(bad)


def test_cli_search_does_not_import_mcp(served, state_dir):
    ws, cfg = served
    code = (
        "import sys\n"
        "from memdir.cli import main\n"
        f"rc = main(['--workspace', {str(ws)!r}, '--config', {str(cfg)!r}, 'search', 'kafka', '--json'])\n"
        "print(rc, sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(state_dir),
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "0 []"
    assert '"path": "MEMORY.md"' in proc.stdout


def test_disabled_memory_is_an_error_result(make_workspace):
    """``memorySearch.enabled = false``: OpenClaw's disabled payload, flagged as an error for MCP hosts."""
    from memdir import Memory
    from memdir.mcp_server import build_server
    from memdir.tools import call_tool, is_error_payload

    ws = make_workspace({"MEMORY.md": "x\n"})
    with Memory(ws, config={"memorySearch": {"enabled": False, "provider": "none"}}) as mem:
        result = call_tool(mem, "memory_search", {"query": "x"})
        assert result.payload["disabled"] is True and result.is_error
        server = build_server(mem)
        called = asyncio.run(server.call_tool("memory_search", {"query": "x"}))
        assert called.isError is True and json.loads(called.content[0].text) == result.payload
        ok = call_tool(mem, "memory_get", {"path": "MEMORY.md"})
        assert ok.is_error and "disabled" in ok.payload["error"]
    assert not is_error_payload({"results": [], "warnings": ["keyword search only"], "stale": True})


def test_http_client_disconnects_leave_no_traceback(served, state_dir, tmp_path):
    """Clients that end their session or vanish mid-session are normal: no ClosedResourceError traceback."""
    ws, cfg = served
    port = _free_port()
    err = tmp_path / "server.err"
    with err.open("w") as err_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
             "--workspace", str(ws), "--config", str(cfg)],
            env=cli_env(state_dir), stdout=subprocess.DEVNULL, stderr=err_fh, text=True,
        )
        try:
            _wait_listening(port, proc)
            client = tmp_path / "client.py"
            client.write_text(
                "import asyncio, os, sys\n"
                "from mcp import ClientSession\n"
                "from mcp.client import streamable_http\n"
                "connect = getattr(streamable_http, 'streamable_http_client', None) or "
                "streamable_http.streamablehttp_client\n"
                "async def main(mode):\n"
                f"    async with connect('http://127.0.0.1:{port}/mcp') as (r, w, _), ClientSession(r, w) as s:\n"
                "        await s.initialize()\n"
                "        if mode == 'mid-call':\n"
                "            asyncio.ensure_future(s.call_tool('memory_search', {'query': 'billing'}))\n"
                "            await asyncio.sleep(0.01)\n"
                "        else:\n"
                "            await s.call_tool('memory_search', {'query': 'billing'})\n"
                "            await asyncio.sleep(0.3)\n"
                "        if mode != 'close':\n"
                "            os._exit(0)  # vanish without closing the session\n"
                "    # 'close': leave the context managers: the session ends, its streams close\n"
                "asyncio.run(main(sys.argv[1]))\n")
            for mode in ("close", "idle", "mid-call", "close"):
                done = subprocess.run([sys.executable, str(client), mode], env=cli_env(state_dir),
                                      capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
            # A client that vanishes half-way through sending its request body (starlette's
            # ClientDisconnect inside the SDK's POST handler): deterministic, unlike 'mid-call'.
            body = json.dumps(INIT).encode()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                            + f"Content-Length: {len(body) + 500}\r\n\r\n".encode() + body[:20])
                time.sleep(0.2)
            time.sleep(1.0)  # let the server notice the dropped streams
            assert proc.poll() is None, "the server keeps running"
            with httpx.Client(timeout=10) as http:  # and keeps answering
                assert http.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers=HEADERS).status_code == 200
        finally:
            stop_process(proc)
    stderr = err.read_text()
    assert "Traceback" not in stderr and "ClosedResourceError" not in stderr, stderr
    assert f"http://127.0.0.1:{port}/mcp" in stderr


def test_client_gone_filter_keeps_real_errors_only():
    """Disconnect records (cut-off bodies included) are dropped; a real server error is kept."""
    import logging

    from starlette.requests import ClientDisconnect

    from memdir.mcp_server import ClientGoneFilter

    def record(msg: str, exc: BaseException | None) -> logging.LogRecord:
        info = (type(exc), exc, None) if exc is not None else None
        return logging.LogRecord("mcp.server.streamable_http", logging.ERROR, __file__, 1, msg, None, info)

    gone = ClientGoneFilter()
    assert not gone.filter(record("Error handling POST request", ClientDisconnect()))
    assert not gone.filter(record("x", BaseExceptionGroup("g", [ClientDisconnect(), ConnectionResetError()])))
    assert not gone.filter(record("Received exception from stream: ", None))
    assert gone.filter(record("Error handling POST request", ValueError("bad json")))
    assert gone.filter(record("x", BaseExceptionGroup("g", [ClientDisconnect(), ValueError("bad")])))
    assert gone.filter(record("Received exception from stream: boom", None))


def test_stdio_server_run_at_a_terminal_says_what_it_waits_for(make_workspace, state_dir):
    # ``memdir --workspace ~/agent mcp``, as listed in the README, sat silent at a terminal
    import os
    import pty
    import threading

    ws = make_workspace({"MEMORY.md": "- a note\n"})
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "-w", str(ws)], stdin=slave,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    os.close(slave)
    stuck = threading.Timer(60, proc.kill)  # no line at all fails the test, never hangs it
    stuck.start()
    try:
        line = proc.stderr.readline()
    finally:
        stuck.cancel()
        stop_process(proc)
        os.close(master)
    assert "MCP server on stdio" in line and str(ws) in line and "Ctrl-C" in line


@pytest.mark.parametrize(("stop_signal", "code"), [(2, 130), (15, 143)], ids=["ctrl_c", "sigterm"])
def test_ctrl_c_ends_the_stdio_server_while_it_waits_for_input(make_workspace, state_dir, stop_signal, code):
    # the read of stdin ran in a worker thread that SIGINT could neither cancel nor leave behind:
    # memdir mcp went on (even after a second Ctrl-C) until a line or the end of input came; and
    # SIGTERM, which a host stopping its server sends, ended it at once with -15
    import os

    ws = make_workspace({"MEMORY.md": "- a note\n"})
    read_end, write_end = os.pipe()  # input that stays open, as a host's or a terminal's
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "-w", str(ws)], stdin=read_end,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    os.close(read_end)
    try:
        os.write(write_end, b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
        assert '"id":1' in proc.stdout.readline().replace(" ", "")  # serving, and reading stdin
        proc.send_signal(stop_signal)
        _, err = proc.communicate(timeout=20)
    finally:
        os.close(write_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code and "Traceback" not in err and "Fatal" not in err, err
