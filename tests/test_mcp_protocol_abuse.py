"""``memdir mcp`` over stdio fed raw JSON-RPC: malformed messages, huge arguments, end of input.

A host (or a broken client) can send anything; the server must answer what it can, keep
serving, and exit 0 quietly when its input ends, as a stdio MCP server is expected to.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from helpers import cli_env

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "qa", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _call(i: int, name: str, arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


@pytest.fixture
def workspace(make_workspace, tmp_path: Path) -> tuple[Path, Path]:
    ws = make_workspace({"MEMORY.md": "Billing uses Kafka because ordering matters.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    return ws, cfg


def _serve(ws: Path, cfg: Path, state_dir: Path, lines: list[str]) -> tuple[subprocess.CompletedProcess[str],
                                                                              dict[Any, dict[str, Any]]]:
    """Send ``lines``, read until every request with an id is answered, then close stdin (how a
    stdio host ends a session) and wait for the server to exit."""
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: the SDK can log a lot there
        proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
                                env=cli_env(state_dir))
        assert proc.stdin is not None and proc.stdout is not None
        wanted = set()
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and "id" in msg:
                wanted.add(msg["id"])
            proc.stdin.write(line + "\n")
        proc.stdin.flush()
        answers: dict[Any, dict[str, Any]] = {}
        timer = threading.Timer(120, proc.kill)  # a server that stops answering fails the test, never hangs it
        timer.start()
        try:
            while not wanted <= answers.keys():
                line = proc.stdout.readline()
                if not line:
                    break
                msg = json.loads(line)
                answers[msg.get("id")] = msg
            proc.stdin.close()
            out = proc.stdout.read()
            proc.wait(60)
        finally:
            timer.cancel()
        errors.seek(0)
        err = errors.read()
    for line in out.splitlines():
        msg = json.loads(line)
        answers[msg.get("id")] = msg
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), answers


def test_the_stdio_server_exits_0_quietly_when_its_input_ends(workspace, state_dir: Path):
    """Regression: every stdio session ended with exit 1 and "memdir: I/O operation on closed
    file." on stderr (the SDK closes stdout when the session ends; the CLI then flushed it)."""
    ws, cfg = workspace
    proc, answers = _serve(ws, cfg, state_dir, [json.dumps(INIT), json.dumps(INITIALIZED),
                                                json.dumps(_call(2, "memory_get", {"path": "MEMORY.md"}))])
    assert answers[2]["result"]["isError"] is False
    assert proc.returncode == 0, proc.stderr
    assert "closed file" not in proc.stderr


def test_requests_piped_in_whole_are_all_answered_before_the_server_exits(workspace, state_dir: Path):
    """``printf '…' | memdir mcp`` (the requests written, then stdin closed at once) got an answer to
    ``initialize`` only: the SDK cancels the calls in flight when its input ends, so the others
    were dropped without a word and the ``memory_append`` among them was not made."""
    ws, cfg = workspace
    lines = [INIT, INITIALIZED, _call(2, "memory_append", {"text": "The piped note about herons."}),
             _call(3, "memory_search", {"query": "Kafka ordering"}), _call(4, "memory_get", {"path": "MEMORY.md"}),
             {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}]
    proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)], text=True,
                          input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True,
                          env=cli_env(state_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}
    assert sorted(answers) == [1, 2, 3, 4, 5] and all("result" in m for m in answers.values()), proc.stdout
    assert answers[3]["result"]["structuredContent"]["results"][0]["path"] == "MEMORY.md"
    (log,) = (ws / "memory").glob("*.md")
    assert log.read_text() == "The piped note about herons.\n"


def test_malformed_json_rpc_and_huge_arguments_never_stop_the_server(workspace, state_dir: Path):
    ws, cfg = workspace
    lines = [
        json.dumps(INIT), json.dumps(INITIALIZED),
        "{this is not json",
        json.dumps([1, 2, 3]),
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "no/such/method"}),
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": 5}}),
        json.dumps(_call(5, "memory_search", {"query": "kafka " * 40_000})),  # 240 KB of query
        json.dumps(_call(6, "memory_get", {"path": "memory/" + "a/" * 20_000 + "x.md"})),
        json.dumps(_call(7, "memory_search", {"query": "NEAR( \" * - OR"})),
        json.dumps(_call(8, "memory_get", {"path": "MEMORY.md", "from": -(2**70), "lines": 2**70})),
        json.dumps(_call(9, "memory_search", {"query": "kafka", "maxResults": "lots", "minScore": [1]})),
        json.dumps(_call(10, "memory_search", "not an object")),
        json.dumps(_call(11, "memory_search", {"query": "ordering"})),
    ]
    proc, answers = _serve(ws, cfg, state_dir, lines)
    assert proc.returncode == 0, proc.stderr
    assert answers[3]["error"]["code"] == -32601  # method not found
    assert "error" in answers[4] or answers[4]["result"]["isError"] is True
    assert answers[5]["result"]["isError"] is False
    assert json.loads(answers[5]["result"]["content"][0]["text"])["results"][0]["path"] == "MEMORY.md"
    assert answers[6]["result"]["isError"] is True
    assert answers[7]["result"]["isError"] is False
    assert json.loads(answers[7]["result"]["content"][0]["text"])["results"] == []
    got = json.loads(answers[8]["result"]["content"][0]["text"])
    assert got["text"].rstrip("\n") == "Billing uses Kafka because ordering matters."
    assert answers[9]["result"]["isError"] is False
    assert "error" in answers[10] or answers[10]["result"]["isError"] is True
    # and after all of that, an ordinary call still answers
    assert json.loads(answers[11]["result"]["content"][0]["text"])["results"][0]["path"] == "MEMORY.md"


@pytest.mark.slow
def test_a_session_that_ends_during_the_start_up_index_says_nothing_on_stderr(make_workspace, state_dir: Path):
    """A host that starts the server and ends the session at once (a health check, a client that
    lists tools and quits) often gets "memdir: background index at startup failed: Cannot operate
    on a closed database." on stderr: closing the Memory cut the start-up sync short, which is not
    a failure worth reporting, and nothing is lost (the next start indexes again).  It depends on
    timing (2 sessions in 3 here), so five sessions are run."""
    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n", "memory/2026-01-12.md": "- first note\n"})
    built = subprocess.run([sys.executable, "-m", "memdir", "index", "-w", str(ws)], capture_output=True, text=True,
                           timeout=120, env=cli_env(state_dir))
    assert built.returncode == 0, built.stderr
    noise = []
    for i in range(5):
        with open(ws / "memory" / "2026-01-12.md", "a") as fh:  # something for the start-up sync to do
            fh.write(f"- note {i}\n")
        proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "-w", str(ws)],  # the embedded model
                              input=json.dumps(INIT) + "\n" + json.dumps(INITIALIZED) + "\n", capture_output=True,
                              text=True, timeout=120, env=cli_env(state_dir))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "memdir"
        noise += [line for line in proc.stderr.splitlines() if "failed" in line]
    assert noise == []


def test_every_line_the_server_cannot_take_is_answered_so_no_client_waits(workspace, state_dir: Path):
    """The SDK's stdio transport sent no answer for a line it could not validate, so the client
    waited forever: a lone surrogate escape in a question, an ``id`` that is an object, a batch,
    text that is not JSON.  Each now gets its JSON-RPC answer, and the server keeps serving."""
    ws, cfg = workspace
    lone = '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_search", ' \
           '"arguments": {"query": "\\ud800kafka"}}}'
    lines = [json.dumps(INIT), json.dumps(INITIALIZED), lone,
             json.dumps({"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"}),
             json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": []}),
             json.dumps([_call(4, "memory_search", {"query": "kafka"})]),
             "{this is not json", "", "   ",
             json.dumps(_call(5, "memory_search", {"query": "ordering"}))]
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
                                env=cli_env(state_dir))
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n".join(lines) + "\n")
        proc.stdin.flush()
        got: list[dict[str, Any]] = []
        timer = threading.Timer(120, proc.kill)
        timer.start()
        try:
            while len(got) < 7:  # initialize, 2, 3, three without a usable id, 5 (calls may finish in any order)
                line = proc.stdout.readline()
                if not line:
                    break
                got.append(json.loads(line))
            proc.stdin.close()
            proc.wait(60)
        finally:
            timer.cancel()
    by_id = {json.dumps(m.get("id")): m for m in got}
    found = json.loads(by_id["2"]["result"]["content"][0]["text"])  # answered, the surrogate replaced
    assert found["results"][0]["path"] == "MEMORY.md"
    assert by_id["3"]["error"]["code"] == -32600  # its own id, so the client waiting on 3 hears back
    unnamed = [m["error"]["code"] for m in got if m.get("id") is None]
    assert sorted(unnamed) == [-32700, -32600, -32600]  # the object id, the batch, the non-JSON line
    assert len(got) == 7
    assert json.loads(by_id["5"]["result"]["content"][0]["text"])["results"][0]["path"] == "MEMORY.md"
    assert proc.returncode == 0


def test_a_line_too_long_is_skipped_and_answered_not_held_whole(workspace, state_dir: Path):
    """A line with no end (``memdir mcp < /dev/zero``, a client that never sends its newline) was
    gathered whole, taking every byte of memory: a line over the limit is dropped to its newline,
    answered with an error, and the server keeps serving."""
    from memdir.mcp_stdio import MAX_LINE_CHARS

    ws, cfg = workspace
    huge = '{"jsonrpc": "2.0", "method": "tools/list", "pad": "' + "x" * (MAX_LINE_CHARS + 10) + '"}'
    proc, answers = _serve(ws, cfg, state_dir, [json.dumps(INIT), json.dumps(INITIALIZED), huge,
                                                json.dumps(_call(5, "memory_search", {"query": "kafka"}))])
    assert "over 16,777,216 characters was skipped" in answers[None]["error"]["message"]
    assert answers[None]["error"]["code"] == -32600
    assert json.loads(answers[5]["result"]["content"][0]["text"])["results"][0]["path"] == "MEMORY.md"
    assert proc.returncode == 0


def test_a_client_that_stops_reading_ends_the_server_quietly_with_141(workspace, state_dir: Path):
    """A host that closed the server's stdout (it went away, or stopped reading) while still
    sending: the next answer failed to be written and the server exited 1 saying "memdir: unhandled
    errors in a TaskGroup (1 sub-exception)"; it exits 141 quietly, as every command does when
    its reader goes away."""
    import os
    import time

    ws, cfg = workspace
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)],
                                stdin=subprocess.PIPE, stdout=write_end, stderr=errors, env=cli_env(state_dir))
        os.close(write_end)
        assert proc.stdin is not None
        timer = threading.Timer(60, proc.kill)  # a server that never ends fails the test, never hangs it
        timer.start()
        try:
            proc.stdin.write((json.dumps(INIT) + "\n" + json.dumps(INITIALIZED) + "\n").encode())
            proc.stdin.flush()
            with os.fdopen(read_end, "rb") as answers:
                assert b'"id":1' in answers.readline()
            for i in range(2, 40):  # the client is gone; its last calls still arrive
                try:
                    proc.stdin.write((json.dumps(_call(i, "memory_get", {"path": "MEMORY.md"})) + "\n").encode())
                    proc.stdin.flush()
                except BrokenPipeError:  # the server ended first
                    break
                if proc.poll() is not None:
                    break
                time.sleep(0.05)
            proc.wait(30)
        finally:
            timer.cancel()
        errors.seek(0)
        err = errors.read()
    assert proc.returncode == 141, err
    assert err.strip() == "", err


def test_an_unknown_method_or_bad_params_are_named_in_the_error_not_a_dump_on_stderr(workspace, state_dir: Path):
    """The SDK answered each of these ``-32602 "Invalid request parameters"`` with empty data (an
    unknown method, a request before ``initialize``, ``arguments`` that are a string), which told a
    client nothing, and wrote pydantic's forty-line dump to stderr for each, and for a notification
    it does not know.  Each gets the code JSON-RPC gives it and a message naming what is wrong."""
    ws, cfg = workspace
    lines = [json.dumps({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}),  # before initialize
             json.dumps(INIT), json.dumps(INITIALIZED),
             json.dumps({"jsonrpc": "2.0", "method": "notifications/no-such-thing", "params": {}}),
             json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}),
             json.dumps({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}),
             json.dumps(_call(3, "memory_search", "kafka")),
             json.dumps({"jsonrpc": "2.0", "id": "4", "method": "tools/call", "params": {"arguments": {}}}),
             json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call"}),
             json.dumps(_call(6, "memory_search", {"query": "ordering"}))]
    proc, answers = _serve(ws, cfg, state_dir, lines)
    assert proc.returncode == 0, proc.stderr
    errors = {i: (answers[i]["error"]["code"], answers[i]["error"]["message"]) for i in (0, 2, 3, "4", 5)}
    assert errors == {
        0: (-32600, "Invalid Request: the session is not initialized: send initialize first"),
        2: (-32601, "Method not found: no/such/method"),
        3: (-32602, "Invalid params for tools/call: params.arguments: Input should be a valid dictionary"),
        "4": (-32602, "Invalid params for tools/call: params.name: Field required"),
        5: (-32602, "Invalid params for tools/call: params: Field required"),
    }
    assert answers[6]["result"]["structuredContent"]["results"][0]["path"] == "MEMORY.md"
    assert len(answers) == 7  # initialize's too; the notifications are not answered
    assert "validation error" not in proc.stderr and "Field required" not in proc.stderr, proc.stderr


def test_a_prompt_or_resource_memdir_does_not_serve_is_the_specs_error_without_a_traceback(workspace,
                                                                                          state_dir: Path):
    """memdir lists no prompts and no resources; asking for one by name was answered with code 0
    (no JSON-RPC code) and, for a prompt, a traceback on stderr.  The spec's codes now: -32602 for
    an unknown prompt, -32002 "Resource not found" for a resource."""
    ws, cfg = workspace
    lines = [json.dumps(INIT), json.dumps(INITIALIZED),
             json.dumps({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"}),
             json.dumps({"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "recall"}}),
             json.dumps({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "file:///etc/passwd"}})]
    proc, answers = _serve(ws, cfg, state_dir, lines)
    assert proc.returncode == 0
    assert answers[2]["result"] == {"prompts": []}
    assert answers[3]["error"] == {"code": -32602, "message": "Unknown prompt: recall (memdir serves no prompts)"}
    assert answers[4]["error"] == {"code": -32002, "data": {"uri": "file:///etc/passwd"},
                                   "message": "Resource not found: file:///etc/passwd (memdir serves no resources)"}
    assert "Traceback" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr


def test_a_byte_order_mark_before_the_first_line_is_not_taken_for_bad_json(workspace, state_dir: Path):
    """A host whose stdin encoding writes a BOM first (.NET's Encoding.UTF8, PowerShell with
    $OutputEncoding set to it) had its initialize answered "Parse error: the line is not JSON"
    with id null, so it waited for its answer until its timeout; Windows line ends are taken too."""
    ws, cfg = workspace
    lines = [INIT, INITIALIZED, _call(2, "memory_search", {"query": "Kafka"})]
    piped = b"\xef\xbb\xbf" + b"".join(json.dumps(m).encode() + b"\r\n" for m in lines)
    proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)], input=piped,
                          capture_output=True, env=cli_env(state_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}
    assert sorted(answers) == [1, 2], proc.stdout
    assert answers[1]["result"]["serverInfo"]["name"] == "memdir"
    assert answers[2]["result"]["structuredContent"]["results"][0]["path"] == "MEMORY.md"


def test_a_response_to_nothing_the_server_asked_is_not_answered(workspace, state_dir: Path):
    """memdir never asks the client anything, yet a stray response (a client replaying one, or
    reporting an error with id null) got the client a log message "Internal Server Error", and
    one the SDK could not read an "Invalid Request" error: a client that answers errors would
    loop.  JSON-RPC never answers a response; the server goes on serving."""
    ws, cfg = workspace
    lines = [json.dumps(INIT), json.dumps(INITIALIZED),
             json.dumps({"jsonrpc": "2.0", "id": 13, "result": {}}),
             json.dumps({"jsonrpc": "2.0", "id": 14, "error": {"code": -32601, "message": "Method not found"}}),
             json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}),
             json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})]
    proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)], text=True,
                          input="".join(line + "\n" for line in lines), capture_output=True,
                          env=cli_env(state_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = {m.get("id"): m for m in map(json.loads, proc.stdout.splitlines())}
    assert set(answers) == {1, 2} and answers[2]["result"] == {}, proc.stdout
    assert "Internal Server Error" not in proc.stdout and "ERROR" not in proc.stderr, proc.stderr


def test_initialized_alone_lets_requests_through_as_the_sdk_does(workspace, state_dir: Path):
    """The SDK counts a session as initialized at notifications/initialized too; the check made
    before it (a request before initialize is refused) must not refuse what the SDK serves."""
    ws, cfg = workspace
    proc, answers = _serve(ws, cfg, state_dir, [json.dumps(INITIALIZED),
                                                json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})])
    assert proc.returncode == 0
    assert [t["name"] for t in answers[2]["result"]["tools"]] == ["memory_search", "memory_get", "memory_append"]


def test_a_server_started_in_the_root_folder_without_a_workspace_says_so(workspace, state_dir: Path):
    """Claude Desktop starts its servers in /: an entry without --workspace served the root's
    memory, empty, so every search found nothing without a word and an append went to /memory.
    It is bad usage naming the fix; --workspace or MEMDIR_WORKSPACE still serve from /."""
    ws, cfg = workspace
    command = [sys.executable, "-m", "memdir", "mcp", "-c", str(cfg)]
    init = json.dumps(INIT) + "\n"
    refused = subprocess.run(command, cwd="/", input=init, capture_output=True, text=True, timeout=60,
                             env=cli_env(state_dir))
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "no workspace given, and the current folder is / " in refused.stderr
    assert "add --workspace /path/to/agent-workspace" in refused.stderr
    for given, env in ((["-w", str(ws)], cli_env(state_dir)), ([], cli_env(state_dir, MEMDIR_WORKSPACE=str(ws)))):
        served = subprocess.run(command + given, cwd="/", input=init, capture_output=True, text=True, timeout=60,
                                env=env)
        assert served.returncode == 0, served.stderr
        assert json.loads(served.stdout)["result"]["serverInfo"]["name"] == "memdir"


def test_a_call_the_client_cancels_gets_no_answer(workspace, state_dir: Path):
    """The spec says a cancelled request is not answered; the SDK answered it "Request cancelled"
    (code 0), which a client no longer waiting for it logs as a response for an unknown message
    ID (each Esc in Claude Code).  A long memory_search cancelled in flight is not answered; the
    server goes on."""
    ws, cfg = workspace
    words = [f"w{i:05d}x" for i in range(20_000)]
    slow = " ".join(words[(i * 7919) % len(words)] for i in range(250_000))  # a 2 MB question: seconds of work
    lines = [INIT, INITIALIZED, _call(2, "memory_search", {"query": slow}),
             {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "Esc"}},
             {"jsonrpc": "2.0", "id": 3, "method": "ping"}]
    proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)], text=True,
                          input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True,
                          env=cli_env(state_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}
    assert answers[3]["result"] == {}
    assert "error" not in answers.get(2, {}), answers[2]  # (a search that beat its cancel may answer)


def test_json_nested_too_deeply_is_said_so_not_called_not_json(workspace, state_dir: Path):
    """A line of valid JSON nested deeper than Python reads was answered "the line is not JSON",
    which sent the client's author looking for a syntax error; it says what HTTP says."""
    ws, cfg = workspace
    deep = json.dumps(_call(2, "memory_search", {"query": "Kafka"})).replace('"Kafka"', "[" * 50_000 + "]" * 50_000)
    lines = [json.dumps(INIT), deep, json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"})]
    proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "-w", str(ws), "-c", str(cfg)], text=True,
                          input="".join(line + "\n" for line in lines), capture_output=True,
                          env=cli_env(state_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = {m.get("id"): m for m in map(json.loads, proc.stdout.splitlines())}
    assert answers[None]["error"] == {"code": -32700, "message": "Parse error: the JSON is nested too deeply"}
    assert answers[3]["result"] == {}
