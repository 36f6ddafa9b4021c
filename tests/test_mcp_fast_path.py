"""The ``tools/call`` fast path of ``memdir mcp --transport http`` answers exactly as the SDK does.

Two real servers (uvicorn on loopback, in threads, over one Memory) take the same raw HTTP
requests: one with the fast path, one with ``MEMDIR_MCP_FAST_PATH=0`` (every request through the
SDK).  Their answers must match byte for byte; what the fast path does not take (other methods,
unknown tools, ``_meta``, bad headers, unknown sessions) must reach the SDK untouched.  The SDK's
own client drives the fast path too.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from mcp import ClientSession
from mcp.client import streamable_http

from memdir.api import Memory
from memdir.mcp_server import MemdirMCP, build_server

http_client = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
# Response headers whose values differ between two servers by nature.
VARYING = {"date", "mcp-session-id"}


class StallingMemory(Memory):
    """``memory_get`` of ``slow.md`` hangs until released: a call to cancel or to time out."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.stalled = threading.Event()
        self.release = threading.Event()

    def get(self, path, *, from_line=None, lines=None):
        if path == "slow.md":
            self.stalled.set()
            self.release.wait(30)
        return super().get(path, from_line=from_line, lines=lines)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(memory: Memory, monkeypatch: pytest.MonkeyPatch, *, fast: bool,
            call_timeout: float = 120.0) -> Iterator[tuple[str, MemdirMCP]]:
    port = _free_port()
    server = build_server(memory, port=port, call_timeout=call_timeout)
    with monkeypatch.context() as env:
        if not fast:
            env.setenv("MEMDIR_MCP_FAST_PATH", "0")
        app = server.streamable_http_app()
    assert (server.fast_path is not None) is fast
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp", server
    finally:
        uv.should_exit = True
        thread.join(15)


def _open_session(client: httpx.Client, url: str) -> dict[str, str]:
    opened = client.post(url, json=INIT, headers=HEADERS)
    assert opened.status_code == 200
    headers = {**HEADERS, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    assert client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                       headers=headers).status_code == 202
    return headers


def _call(request_id: Any, name: str, arguments: Any = None, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, **params}
    if arguments is not None:
        body["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": body}


def _same(a: httpx.Response, b: httpx.Response) -> None:
    assert (a.status_code, a.content) == (b.status_code, b.content)
    assert {k: v for k, v in a.headers.items() if k not in VARYING} == \
        {k: v for k, v in b.headers.items() if k not in VARYING}
    assert ("mcp-session-id" in a.headers) == ("mcp-session-id" in b.headers)


@pytest.fixture
def memory(make_workspace):
    ws = make_workspace({
        "MEMORY.md": "# Long-term\n\nBilling uses Kafka because ordering matters.\nDeploys happen on Tuesdays.\n",
        "memory/2026-01-10.md": "Met Priya; cursor-based pagination chosen for the public API.\n",
    })
    mem = StallingMemory(ws, config={"memorySearch": {"provider": "none"}})
    mem.sync()
    yield mem
    mem.release.set()
    mem.close()


def test_fast_answers_are_the_sdks_bytes_and_the_rest_goes_to_the_sdk(memory, monkeypatch):
    with serving(memory, monkeypatch, fast=True) as (fast_url, fast), \
            serving(memory, monkeypatch, fast=False) as (sdk_url, _), httpx.Client(timeout=30) as client:
        fast_h, sdk_h = _open_session(client, fast_url), _open_session(client, sdk_url)

        def both(body: Any, *, headers: dict[str, str] | None = None, fast_headers: dict[str, str] | None = None,
                 raw: bytes | None = None) -> tuple[httpx.Response, httpx.Response]:
            content = raw if raw is not None else json.dumps(body).encode()
            a = client.post(fast_url, content=content, headers=fast_headers or {**fast_h, **(headers or {})})
            b = client.post(sdk_url, content=content, headers={**sdk_h, **(headers or {})})
            _same(a, b)
            return a, b

        # The first call on a session goes through the SDK (which also proves the session initialized).
        both(_call(2, "memory_search", {"query": "billing queue"}))
        assert fast.fast_path is not None and fast.fast_path.calls == 0

        hot = [
            _call(3, "memory_search", {"query": "which queue for billing", "maxResults": 2}),
            _call("req-4", "memory_search", {"query": "pagination", "minScore": 0}),
            _call(5, "memory_get", {"path": "memory/2026-01-10.md", "from": 1, "lines": 1}),
            _call(6, "memory_get", {"path": "../secrets.md"}),  # an error result (isError)
            _call(7, "memory_search", {"query": "  "}),  # another
            _call(8, "memory_search"),  # no arguments at all
            _call(9, "memory_search", {"q": "Kafka", "extra": [1, {"x": None}]}),  # lenient, as the SDK path
            _call(10, "memory_append", {"text": "- The wombat job runs at 03:00 — ünïcode ✓."}),
            _call(11, "memory_search", {"query": "wombat job"}),  # read-your-writes
            _call(12, "memory_get", {"path": "memory/1999-01-01.md"}),
        ]
        for n, body in enumerate(hot, 1):
            a, _ = both(body)
            assert a.headers["mcp-session-id"] == fast_h["mcp-session-id"]
            assert json.loads(a.content)["id"] == body["id"]
            assert fast.fast_path.calls == n
        assert b"\\u" not in both(_call(13, "memory_search", {"query": "wombat"}))[0].content  # UTF-8, as pydantic

        taken = fast.fast_path.calls
        deferred: list[dict[str, Any]] = [
            {"body": _call(20, "memory_delete", {"path": "MEMORY.md"})},  # unknown tool: the SDK's error
            {"body": _call(21, "memory_search", {"query": "Kafka"}, _meta={"progressToken": "p1"})},
            {"body": {"jsonrpc": "2.0", "id": 22, "method": "tools/list"}},
            {"body": {"jsonrpc": "2.0", "id": 23, "method": "ping"}},
            {"body": _call(24, "memory_search", "not an object")},
            {"body": _call(True, "memory_search", {"query": "Kafka"})},
            {"body": [_call(25, "memory_search", {"query": "Kafka"})]},
            {"body": None, "raw": b'{"jsonrpc": "2.0", "id": 26, "method": "tools/call", '},
            {"body": _call(27, "memory_search", {"query": "Kafka"}), "headers": {"mcp-protocol-version": "1999-01-01"}},
            {"body": _call(28, "memory_search", {"query": "Kafka"}), "headers": {"Origin": "http://evil.example.com"}},
            {"body": _call(29, "memory_search", {"query": "Kafka"}), "headers": {"Host": "evil.example.com"}},
            {"body": _call(30, "memory_search", {"query": "Kafka"}), "headers": {"Content-Type": "text/plain"}},
            {"body": _call(31, "memory_search", {"query": "Kafka"}), "headers": {"Accept": "text/html"}},
            {"body": _call(32, "memory_search", {"query": "Kafka"}), "headers": {"mcp-session-id": "0" * 32}},
        ]
        for case in deferred:
            both(case["body"], headers=case.get("headers"), raw=case.get("raw"))
        assert fast.fast_path.calls == taken  # all answered by the SDK, as before

        # The SDK's own client rides the fast path after its first call.
        async def sdk_client() -> None:
            async with http_client(fast_url) as (read, write, _), ClientSession(read, write) as session:
                await session.initialize()
                listed = (await session.list_tools()).tools
                assert [t.name for t in listed] == ["memory_search", "memory_get", "memory_append"]
                for _ in range(3):
                    result = await session.call_tool("memory_search", {"query": "which queue for billing"})
                    assert result.isError is False
                    assert json.loads(result.content[0].text)["results"][0]["path"] == "MEMORY.md"
                    assert result.structuredContent == json.loads(result.content[0].text)
                refused = await session.call_tool("memory_get", {"path": "../x.md"})
                assert refused.isError is True and "path not allowed" in refused.content[0].text
                unknown = await session.call_tool("memory_nope", {})
                assert unknown.isError is True and "unknown tool" in unknown.content[0].text

        anyio.run(sdk_client)
        assert fast.fast_path.calls == taken + 3  # the first search went through the SDK

        # An ended session is the SDK's to answer (404), fast path or not.
        assert client.delete(fast_url, headers=fast_h).status_code == 200
        assert client.delete(sdk_url, headers=sdk_h).status_code == 200
        both(_call(40, "memory_search", {"query": "Kafka"}))
        assert fast.fast_path.calls == taken + 3


def test_cancelled_and_timed_out_calls_answer_as_through_the_sdk(memory, monkeypatch):
    with serving(memory, monkeypatch, fast=True, call_timeout=2.0) as (fast_url, fast), \
            serving(memory, monkeypatch, fast=False, call_timeout=2.0) as (sdk_url, _), \
            httpx.Client(timeout=30) as client, ThreadPoolExecutor(2) as pool:
        answers: dict[str, list[httpx.Response]] = {"cancel": [], "timeout": []}
        for url in (fast_url, sdk_url):
            headers = _open_session(client, url)
            assert client.post(url, json=_call(2, "memory_search", {"query": "Kafka"}), headers=headers).is_success
            # cancelled by the client while it hangs in its thread
            memory.stalled.clear()
            pending = pool.submit(client.post, url, json=_call(3, "memory_get", {"path": "slow.md"}), headers=headers)
            assert memory.stalled.wait(10)
            if url == fast_url:  # as the SDK's transport: the session does not expire while a call runs
                transport = fast._session_manager._server_instances[headers["mcp-session-id"]]
                assert transport.idle_scope.deadline == math.inf
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3, "reason": "t"}}
            refused = client.post(url, json=note, headers={**headers, "Origin": "http://evil.example.com"})
            assert refused.status_code == 403
            time.sleep(0.3)
            assert not pending.done()  # a refused notification cancels nothing
            assert client.post(url, json=note, headers=headers).status_code == 202
            answers["cancel"].append(pending.result(10))
            # left to hang until the server's deadline
            answers["timeout"].append(client.post(url, json=_call(4, "memory_get", {"path": "slow.md"}),
                                                  headers=headers))
            assert client.post(url, json=_call(5, "memory_get", {"path": "MEMORY.md"}), headers=headers).is_success
        assert fast.fast_path is not None and fast.fast_path.calls == 3
        assert transport._requests_in_flight == 0 and math.isfinite(transport.idle_scope.deadline)
        memory.release.set()

    for a, b in answers.values():
        _same(a, b)
    assert json.loads(answers["cancel"][0].content) == {"jsonrpc": "2.0", "id": 3,
                                                        "error": {"code": 0, "message": "Request cancelled"}}
    timed_out = json.loads(answers["timeout"][0].content)["result"]
    assert timed_out["isError"] is True and "did not finish within 2 s" in timed_out["structuredContent"]["error"]


@pytest.mark.parametrize("request_id", [7, "req-8", 0, -3, 2**53 + 1])
def test_written_answer_is_the_models_bytes(request_id):
    """The fast path writes a successful answer in one step; the SDK's models give the same bytes."""
    from mcp.types import CallToolResult, JSONRPCMessage, JSONRPCResponse, ServerResult, TextContent

    from memdir.mcp_server import result_json
    from memdir.tools import to_json

    payloads = [
        {"results": [{"path": "memory/a.md", "startLine": 1, "endLine": 3, "score": 0.511612,
                      "snippet": "- ünïcode ✓ 😀 \u2028 tab\t nul\x00 bell\x07 del\x7f quote\" back\\slash"}],
         "provider": "none", "model": None, "citations": "auto", "mode": "fts-only"},
        {"results": [{"score": s} for s in (1e-06, 2.5e-07, 1.5e-05, 0.0001, 1.0, 0.0, -0.0, 1e16, 1e22,
                                            123456789012345678.0, 10**20, -5, True, False)],
         "warnings": ["a", "b"], "stale": True, "fallback": {"from": "hybrid", "reason": "x"}},
        {"results": [], "nested": [[], {}, [None, {"k": [1, 2.5]}]], "": "empty key"},
        {"score": float("nan"), "other": float("inf")},
    ]
    for payload in payloads:
        text = to_json(payload)
        try:
            result = ServerResult(CallToolResult(content=[TextContent(type="text", text=text)],
                                                 structuredContent=payload, isError=False))
            reply = JSONRPCResponse(jsonrpc="2.0", id=request_id,
                                    result=result.model_dump(by_alias=True, mode="json", exclude_none=True))
            expected: bytes | None = JSONRPCMessage(reply).model_dump_json(by_alias=True, exclude_none=True).encode()
        except Exception:
            expected = None  # the models cannot write it: the fast path leaves it to them too
        assert result_json(request_id, text, payload) == expected
