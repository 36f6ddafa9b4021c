"""``memdir mcp --transport http`` against hostile clients and signals.

Every request gets an answer (an ``id`` the SDK cannot use, a batch, JSON nested too deeply), a
port in use is one clear error, and SIGTERM stops the server promptly even with a call stalled in
flight or a client that sent half a request.  Real servers: uvicorn in a thread over one Memory,
and ``memdir mcp`` as a subprocess.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import cli_env
from memdir.api import Memory
from test_mcp_fast_path import HEADERS, INIT, _call, _free_port, _open_session, serving


@pytest.fixture
def workspace(make_workspace, tmp_path: Path) -> tuple[Path, Path]:
    ws = make_workspace({"MEMORY.md": "# Long-term\n\nBilling uses Kafka because ordering matters.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    return ws, cfg


@contextlib.contextmanager
def _warm_session(ws: Path, monkeypatch, fast: bool) -> Iterator[tuple[httpx.Client, str, dict[str, str]]]:
    """``(client, url, session headers)`` of a served keyword-only Memory that answered one search."""
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as memory, \
            serving(memory, monkeypatch, fast=fast) as (url, _), httpx.Client(timeout=30) as client:
        headers = _open_session(client, url)
        assert client.post(url, json=_call(1, "memory_search", {"query": "Kafka"}), headers=headers).is_success
        yield client, url, headers


@pytest.mark.parametrize("fast", [True, False])
def test_every_request_the_sdk_would_leave_unanswered_gets_an_error(workspace, monkeypatch, fast):
    with _warm_session(workspace[0], monkeypatch, fast) as (client, url, headers):

        def refused(content: bytes, code: int, why: str) -> None:
            answer = client.post(url, content=content, headers=headers)
            assert answer.status_code == 400
            assert answer.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": why}}

        for bad_id in ({"a": 1}, [2], None, True, 1.5):  # the SDK took these as notifications: 202, no answer
            refused(json.dumps(_call(bad_id, "memory_search", {"query": "Kafka"})).encode(), -32600,
                    "Invalid Request: an id must be a string or an integer")
        refused(json.dumps({"jsonrpc": "2.0", "id": {}, "method": "tools/list"}).encode(), -32600,
                "Invalid Request: an id must be a string or an integer")
        refused(json.dumps([_call(3, "memory_search", {"query": "Kafka"})]).encode(), -32600,
                "Invalid Request: batches are not supported: send one message per request")
        deep = b"[" * 100_000 + b"]" * 100_000  # a 500 and a traceback, through the SDK and the fast path
        refused(deep, -32700, "Parse error: the JSON is nested too deeply")
        nested_call = json.dumps(_call(4, "memory_search", {"query": "Kafka"})).encode()
        refused(nested_call.replace(b'"Kafka"', b"[" * 5000 + b"]" * 5000), -32700,
                "Parse error: the JSON is nested too deeply")

        latin1 = json.dumps(_call(6, "memory_search", {"query": "café"}), ensure_ascii=False).encode("latin-1")
        refused(latin1, -32700, "Parse error: the body is not UTF-8 (invalid continuation byte at byte 115)")
        refused(b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}', -32700,
                "Parse error: a number has too many digits")

        # What the SDK answers itself is left to it; a foreign Origin is refused before anything else.
        assert client.post(url, content=b"nope", headers=headers).json()["error"]["code"] == -32700
        evil = client.post(url, json=_call({"a": 1}, "memory_search", {"query": "Kafka"}),
                           headers={**headers, "Origin": "http://evil.example.com"})
        assert evil.status_code == 403
        good = client.post(url, json=_call(5, "memory_search", {"query": "Kafka"}), headers=headers)
        assert good.json()["id"] == 5 and good.json()["result"]["isError"] is False


@pytest.mark.parametrize("fast", [True, False])
def test_a_lone_surrogate_is_replaced_as_over_stdio_not_a_500(workspace, monkeypatch, fast):
    """The SDK could not write a lone surrogate back (an id, the path in memory_get's answer): 500."""
    ws, _ = workspace
    with _warm_session(ws, monkeypatch, fast) as (client, url, headers):
        for body in (b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memory_get",'
                     b'"arguments":{"path":"memory/\\udc80x.md"}}}',
                     b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memory_get",'
                     b'"arguments":{"path":"memory/\xed\xb2\x80x.md"}}}'):  # the same, as raw UTF-8 bytes
            answer = client.post(url, content=body, headers=headers)
            assert answer.status_code == 200
            assert answer.json()["result"]["structuredContent"] == {"text": "", "path": "memory/\ufffd\ufffd\ufffdx.md"}
        answer = client.post(url, content=b'{"jsonrpc":"2.0","id":"r\\ud800","method":"tools/call","params":'
                                           b'{"name":"memory_search","arguments":{"query":"Kafka"}}}', headers=headers)
        assert answer.status_code == 200 and answer.json()["id"] == "r\ufffd\ufffd\ufffd"
        appended = client.post(url, content=b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":'
                                             b'"memory_append","arguments":{"text":"- tea \\ud83d please"}}}',
                               headers=headers).json()["result"]["structuredContent"]
        assert appended["appended"] is True
        assert (ws / appended["path"]).read_text(encoding="utf-8").endswith("- tea \ufffd\ufffd\ufffd please\n")


@pytest.mark.parametrize("fast", [True, False])
def test_an_unknown_method_or_bad_params_are_named_in_the_error(workspace, monkeypatch, caplog, fast):
    """The SDK answered an unknown method, and params it could not take, with ``-32602 "Invalid
    request parameters"`` and empty data, logging pydantic's forty-line dump (a notification it
    does not know too); the error now has JSON-RPC's code and names the method or the field."""
    with _warm_session(workspace[0], monkeypatch, fast) as (client, url, headers):

        def error(message: dict[str, Any], session: dict[str, str] = headers) -> tuple[int, int, str]:
            answer = client.post(url, json=message, headers=session)
            assert answer.json()["id"] == message["id"]
            return answer.status_code, answer.json()["error"]["code"], answer.json()["error"]["message"]

        assert error({"jsonrpc": "2.0", "id": "m", "method": "no/such/method"}) == (
            200, -32601, "Method not found: no/such/method")
        assert error(_call(7, "memory_search", "Kafka")) == (
            200, -32602, "Invalid params for tools/call: params.arguments: Input should be a valid dictionary")
        opening = {**INIT, "params": {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        assert error(opening, HEADERS) == (
            200, -32602, "Invalid params for initialize: params.protocolVersion: Field required")
        quiet = client.post(url, json={"jsonrpc": "2.0", "method": "notifications/no-such-thing"}, headers=headers)
        assert quiet.status_code == 202 and quiet.content == b""
        # an unknown session is still the SDK's to refuse, and ordinary calls go on
        unknown = client.post(url, json={"jsonrpc": "2.0", "id": 8, "method": "no/such/method"},
                              headers={**headers, "mcp-session-id": "nope"})
        assert unknown.status_code == 404
        good = client.post(url, json=_call(9, "memory_search", {"query": "Kafka"}), headers=headers)
        assert good.json()["result"]["isError"] is False
    assert "validation error" not in caplog.text and "Field required [" not in caplog.text


@pytest.mark.parametrize("fast", [True, False])
def test_json_that_is_no_message_is_an_invalid_request_not_a_validation_dump(workspace, monkeypatch, fast):
    """A body of valid JSON that is no JSON-RPC message (42, a string, ``{"id": 1, "method": "ping"}``
    without ``jsonrpc``) was answered ``-32602`` with pydantic's four-error dump as its message;
    it is ``-32600`` with the words stdio uses."""
    with _warm_session(workspace[0], monkeypatch, fast) as (client, url, headers):
        for body in (b"42", b'"ping"', b"null", b'{"id": 1, "method": "ping"}', b'{"jsonrpc": "2.0"}'):
            answer = client.post(url, content=body, headers=headers)
            assert (answer.status_code, answer.json()) == (400, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "Invalid Request: not a JSON-RPC 2.0 request, notification or response "
                                           "(jsonrpc, id, method, params)"}}), body
        good = client.post(url, json=_call(9, "memory_search", {"query": "Kafka"}), headers=headers)
        assert good.json()["result"]["isError"] is False


@pytest.mark.parametrize("fast", [True, False])
def test_a_client_that_accepts_any_type_gets_json_not_406(workspace, monkeypatch, fast):
    """curl, requests and fetch send ``Accept: */*`` and urllib no Accept at all; a request written
    by hand with them got 406 "Client must accept application/json", which they do.  A type
    that is not JSON is still refused."""
    with Memory(workspace[0], config={"memorySearch": {"provider": "none"}}) as memory, \
            serving(memory, monkeypatch, fast=fast) as (url, server), httpx.Client(timeout=30) as client:
        del client.headers["accept"]  # httpx's own default is */*
        for accept in ("*/*", "application/*", None):
            headers = {"Content-Type": "application/json", **({} if accept is None else {"Accept": accept})}
            opened = client.post(url, json=INIT, headers=headers)
            assert opened.status_code == 200, (accept, opened.text)
            session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
            for i in (2, 3):  # the second on a warm session: the fast path's, when it is on
                answer = client.post(url, json=_call(i, "memory_search", {"query": "Kafka"}), headers=session)
                assert answer.status_code == 200 and answer.json()["result"]["isError"] is False, answer.text
        refused = client.post(url, json=INIT, headers={"Content-Type": "application/json", "Accept": "text/html"})
        assert refused.status_code == 406
    assert fast is (server.fast_path is not None and server.fast_path.calls > 0)


@pytest.mark.parametrize("fast", [True, False])
def test_a_response_to_nothing_the_server_asked_is_taken_quietly(workspace, monkeypatch, caplog, fast):
    """memdir asks a client nothing; a response POSTed anyway was taken by the SDK for an internal
    error: "Internal Server Error" sent down the client's event stream, an ERROR logged."""
    with _warm_session(workspace[0], monkeypatch, fast) as (client, url, headers), \
            client.stream("GET", url, headers={**headers, "Accept": "text/event-stream"}) as events:
        assert events.status_code == 200
        for stray in ({"jsonrpc": "2.0", "id": 13, "result": {}},
                      {"jsonrpc": "2.0", "id": "x", "error": {"code": -32601, "message": "Method not found"}}):
            answer = client.post(url, json=stray, headers=headers)
            assert (answer.status_code, answer.content) == (202, b"")
        without_session = client.post(url, json={"jsonrpc": "2.0", "id": 14, "result": {}}, headers=HEADERS)
        assert without_session.status_code == 400  # the SDK's "Missing session ID", not a 500
        pong = client.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers)
        assert pong.json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        # the event stream got nothing: ending the session ends it, and what it held is read
        assert client.delete(url, headers=headers).status_code == 200
        assert b"Internal Server Error" not in events.read()
    assert "unknown request ID" not in caplog.text


@pytest.mark.parametrize("fast", [True, False])
def test_a_stream_asked_to_resume_is_a_new_stream_not_a_500(workspace, monkeypatch, fast):
    """A client reconnecting its event stream sends Last-Event-ID; with no event store the SDK
    answered nothing, so uvicorn sent a 500 "Internal Server Error" and logged "ASGI callable
    returned without starting response".  There is nothing to replay: it gets a new stream."""
    with _warm_session(workspace[0], monkeypatch, fast) as (client, url, headers):
        resume = {**headers, "Accept": "text/event-stream", "Last-Event-ID": "7"}
        with client.stream("GET", url, headers=resume) as events:
            assert (events.status_code, events.headers["content-type"]) == (200, "text/event-stream")
            assert client.delete(url, headers=headers).status_code == 200  # ends the stream
            assert events.read() == b""


def test_a_port_in_use_is_one_clear_error_before_anything_starts(workspace, state_dir):
    ws, cfg = workspace
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                               "-w", str(ws), "-c", str(cfg)], capture_output=True, text=True, timeout=60,
                              env=cli_env(state_dir))
    assert proc.returncode == 1
    assert proc.stderr == (f"memdir: cannot listen on http://127.0.0.1:{port}: the port is already in use "
                           "(another memdir mcp?); stop that server or choose another --port\n")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="needs the IPv6 loopback address")
def test_host_localhost_is_served_on_both_loopback_addresses(workspace, state_dir, tmp_path):
    """``localhost`` is ``::1`` first on macOS and many Linux systems, and a client that does not
    fall back to IPv4 (Node before 20) was refused by a server bound to 127.0.0.1 alone."""
    ws, cfg = workspace
    port = _free_port()
    errors = (tmp_path / "stderr").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--host", "localhost",
                             "--port", str(port), "-w", str(ws), "-c", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=errors, env=cli_env(state_dir))
    try:
        with httpx.Client(timeout=60) as client:
            for address in (f"[::1]:{port}", f"127.0.0.1:{port}"):
                deadline = time.monotonic() + 60
                while True:
                    try:
                        # the Host header a client that resolved localhost sends, whichever address
                        answer = client.post(f"http://{address}/mcp", json=INIT,
                                             headers={**HEADERS, "Host": f"localhost:{port}"})
                        break
                    except httpx.TransportError:
                        assert proc.poll() is None and time.monotonic() < deadline, address
                        time.sleep(0.05)
                assert answer.status_code == 200, address
                assert answer.json()["result"]["serverInfo"]["name"]
    finally:
        proc.terminate()
        proc.wait(30)
    errors.seek(0)
    assert f"http://localhost:{port}/mcp" in errors.read()


def test_host_localhost_with_its_ipv6_port_taken_is_one_clear_error(workspace, state_dir):
    """Another program on ``[::1]:port`` would answer the clients that reach localhost there."""
    if not _ipv6_loopback():
        pytest.skip("needs the IPv6 loopback address")
    ws, cfg = workspace
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with socket.socket() as probe:  # the test needs the IPv4 side of that port free
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                pytest.skip("the port is taken on 127.0.0.1 too")
        proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--host", "localhost",
                               "--port", str(port), "-w", str(ws), "-c", str(cfg)], capture_output=True, text=True,
                              timeout=60, env=cli_env(state_dir))
    assert proc.returncode == 1
    assert proc.stderr == (f"memdir: cannot listen on http://localhost (::1):{port}: the port is already in use "
                           "(another memdir mcp?); stop that server or choose another --port\n")


def _flock_waiters(pid: int) -> bool:
    """Whether process ``pid`` is blocked waiting for an flock (``/proc/locks`` marks waiters ``->``)."""
    rows = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    return any(len(row) > 5 and row[1] == "->" and row[5] == str(pid) for row in rows)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
@pytest.mark.parametrize("stalled", [True, False])
def test_sigterm_answers_a_stalled_call_and_stops_with_a_half_sent_request(workspace, state_dir, tmp_path, stalled):
    """uvicorn waited for every request: SIGTERM took the call's 120 s deadline, or forever.  A call
    that is only slow (its lock is let go just after SIGTERM) still answers what it did."""
    ws, cfg = workspace
    port = _free_port()
    errors = (tmp_path / "stderr").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                             "-w", str(ws), "-c", str(cfg)], stdout=subprocess.DEVNULL, stderr=errors,
                            env=cli_env(state_dir))
    url = f"http://127.0.0.1:{port}/mcp"
    daily = ws / "memory" / f"{dt.date.today().isoformat()}.md"
    daily.parent.mkdir(exist_ok=True)
    answers: dict[str, Any] = {}
    try:
        with httpx.Client(timeout=60) as client, daily.open("a") as held:
            deadline = time.monotonic() + 60
            while True:
                try:
                    headers = _open_session(client, url)
                    break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline
                    time.sleep(0.05)
            fcntl.flock(held, fcntl.LOCK_EX)  # another writer holds today's log: the append waits

            def append() -> None:
                answers["append"] = client.post(url, json=_call(2, "memory_append", {"text": "- note"}),
                                                headers=headers)

            caller = threading.Thread(target=append)
            caller.start()
            while not _flock_waiters(proc.pid):
                assert caller.is_alive() and time.monotonic() < deadline
                time.sleep(0.02)
            with socket.create_connection(("127.0.0.1", port)) as half:  # a body that never comes whole
                head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                half.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
                             "Content-Length: 1000\r\n\r\n{".encode())
                time.sleep(0.2)
                proc.terminate()
                if not stalled:
                    time.sleep(0.3)
                    fcntl.flock(held, fcntl.LOCK_UN)
                caller.join(30)
                assert not caller.is_alive()
                proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    payload = answers["append"].json()["result"]["structuredContent"]
    errors.seek(0)
    assert "Traceback" not in errors.read()
    if stalled:
        assert payload == {"path": "", "appended": False,
                           "error": "memory_append was not finished: the memdir MCP server is stopping"}
        assert "- note" not in daily.read_text()
    else:
        assert payload == {"path": f"memory/{daily.name}", "appended": True}
        assert daily.read_text().endswith("- note\n")


def test_a_call_stuck_for_good_does_not_keep_the_process_alive(tmp_path):
    """anyio's worker threads are joined at exit: a call abandoned at its deadline but never
    returning kept the interpreter (``memdir mcp`` after its client left) running for ever."""
    script = tmp_path / "stuck.py"
    script.write_text(
        "import anyio, threading\n"
        "from mcp.shared.memory import create_connected_server_and_client_session\n"
        "from memdir.api import Memory\n"
        "from memdir.mcp_server import build_server\n"
        "class Stuck(Memory):\n"
        "    def get(self, path, **kw):\n"
        "        threading.Event().wait()\n"
        f"memory = Stuck({str(tmp_path)!r}, config={{'memorySearch': {{'provider': 'none'}}}})\n"
        "server = build_server(memory, call_timeout=0.5)\n"
        "async def main():\n"
        "    async with create_connected_server_and_client_session(server._mcp_server) as client:\n"
        "        result = await client.call_tool('memory_get', {'path': 'MEMORY.md'})\n"
        "        print(result.structuredContent['error'], flush=True)\n"
        "anyio.run(main)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env=cli_env(tmp_path / "state"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "memory_get did not finish within 0.5 s; the server is still serving other calls\n"


def test_init_answers_with_the_guard_in_front(workspace, monkeypatch):
    """The guard replays what it read: an ordinary session still opens and lists the tools."""
    ws, _ = workspace
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as memory, \
            serving(memory, monkeypatch, fast=True) as (url, _), httpx.Client(timeout=30) as client:
        opened = client.post(url, json=INIT, headers=HEADERS)
        assert opened.status_code == 200 and opened.json()["result"]["serverInfo"]["name"] == "memdir"
        headers = _open_session(client, url)
        listed = client.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
        assert [t["name"] for t in listed.json()["result"]["tools"]] == ["memory_search", "memory_get",
                                                                        "memory_append"]


def test_connections_to_the_bound_port_have_nagle_off():
    """asyncio sets TCP_NODELAY only on connections of a socket made as IPPROTO_TCP; a plain
    ``create_server`` socket left Nagle on, and the SDK's client waited 40 ms a call for it."""
    import asyncio

    from memdir.mcp_server import listen

    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                accepted.set_result(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP,
                                                                                  socket.TCP_NODELAY))

        sock = listen("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
        return nodelay

    assert asyncio.run(main()) != 0


def test_call_threads_run_calls_side_by_side_and_pass_errors_back():
    """The daemon threads that replaced anyio's: parallel calls, answers and errors, thread reuse."""
    import anyio

    from memdir.mcp_server import CallThreads

    threads = CallThreads()
    barrier = threading.Barrier(8, timeout=10)  # eight calls that only finish if they all run at once

    def meet(n: int) -> tuple[int, bool]:
        barrier.wait()
        return n, threading.current_thread().daemon

    def fail() -> None:
        raise ValueError("refused")

    async def main() -> None:
        answers: list[tuple[int, bool]] = []

        async def one(n: int) -> None:
            answers.append(await threads.run(meet, n))

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(one, n)
        assert sorted(answers) == [(n, True) for n in range(8)]
        with pytest.raises(ValueError, match="refused"):
            await threads.run(fail)
        names = {await threads.run(lambda: threading.current_thread().name) for _ in range(20)}
        assert names == {"memdir-mcp-call"}
        assert len(threads._idle) == 8  # one after another, the calls reused the idle threads

    anyio.run(main)


def test_stopping_with_a_client_connected_says_nothing_but_the_banner(workspace, state_dir, tmp_path):
    """uvicorn logged "ERROR: ASGI callable returned without completing response." for the SDK
    client's open event stream when the server stopped under it."""
    import anyio
    from mcp import ClientSession

    from test_mcp_fast_path import http_client

    ws, cfg = workspace
    port = _free_port()
    errors = (tmp_path / "stderr").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                             "-w", str(ws), "-c", str(cfg)], stdout=subprocess.DEVNULL, stderr=errors,
                            env=cli_env(state_dir))
    url = f"http://127.0.0.1:{port}/mcp"

    async def connected() -> None:
        async with http_client(url) as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            assert (await session.call_tool("memory_search", {"query": "Kafka"})).isError is False
            proc.terminate()
            await anyio.to_thread.run_sync(proc.wait, 30)

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        with contextlib.suppress(Exception):  # the client may complain that its server went away
            anyio.run(connected)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errors.seek(0)
    assert errors.read().splitlines() == [f"memdir MCP server: http://127.0.0.1:{port}/mcp (workspace {ws}; "
                                          "Ctrl-C stops it)", "memdir: terminated"]


def test_a_server_out_of_file_descriptors_says_so_once_and_recovers(workspace, state_dir, tmp_path):
    """100 connections held open to a server with ``ulimit -n 48``: asyncio logged each failed
    accept with its traceback (up to 2048 a wake-up), and each log line's lazy import failed in
    turn ("--- Logging error ---"): 340,000 lines on stderr in ten seconds.  Now one line says
    why, and the server answers again once the connections are gone."""
    import resource

    ws, cfg = workspace
    port = _free_port()
    log = tmp_path / "stderr.txt"

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
                                 "-w", str(ws), "-c", str(cfg)], stdout=subprocess.DEVNULL, stderr=err,
                                env=cli_env(state_dir), preexec_fn=low_limit)
    url = f"http://127.0.0.1:{port}/mcp"
    held: list[socket.socket] = []
    try:
        with httpx.Client(timeout=10) as client:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if client.post(url, json=INIT, headers=HEADERS).status_code == 200:
                        break
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.2)
            for _ in range(100):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(2)  # the server runs out of descriptors accepting them
            for s in held:
                s.close()
            answered = None
            deadline = time.monotonic() + 60
            while answered != 200 and time.monotonic() < deadline:
                with contextlib.suppress(httpx.TransportError):
                    answered = client.post(url, json=INIT, headers=HEADERS).status_code
            assert answered == 200, log.read_text()[-2000:]
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait(30)
    lines = log.read_text().splitlines()
    assert len(lines) < 10 and "Logging error" not in log.read_text(), lines[:20]
    assert any("cannot accept connections: Too many open files" in line for line in lines), lines
