"""What memdir prints about itself: ``-q`` leaves only errors on stderr, ``-v`` says what was
chosen, and ``memdir completion`` completes what the commands take; through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import cli_env


def _damage(index: Path) -> None:
    with index.open("r+b") as f:
        f.write(b"not a database " * 100)


def test_quiet_leaves_notices_off_stderr(make_workspace, run_cli, state_dir: Path) -> None:
    """``-q`` ("print only errors on stderr: no notes, warnings or progress") still printed the
    notices memdir says beside a command's output ('the index … was damaged …; moved it aside …
    and rebuilding it', 'waiting for … to finish writing'): a cron job's ``memdir -q search``
    mailed them; without ``-q`` the notice is said as before."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    run_cli("-w", str(ws), "index", check=True)
    (index,) = (state_dir / "memory").glob("*.sqlite")
    _damage(index)
    quiet = run_cli("-w", str(ws), "-q", "search", "heron", check=True)
    assert "heron" in quiet.stdout and quiet.stderr == ""
    _damage(index)
    told = run_cli("-w", str(ws), "search", "heron", check=True)
    assert "heron" in told.stdout and "was damaged" in told.stderr


def test_verbose_names_the_embedding_model_and_why(make_workspace, run_cli, tmp_path: Path) -> None:
    """``-v`` named the config file and the index, but not the embedding provider and model nor why
    another was used: a user asking why searches ignored the provider they configured had no
    answer there.  One line says it: the one chosen, the one requested, and a fallback's reason."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    cfg = tmp_path / "memdir.json"
    lines = {}
    for name, search in (("keyless", {"provider": "openai", "fallback": "none"}),
                         ("keyed", {"provider": "openai", "remote": {"apiKey": "k", "baseUrl": "http://127.0.0.1:9/v1"}})):
        cfg.write_text(json.dumps({"memorySearch": search}))
        proc = run_cli("-w", str(ws), "-c", str(cfg), "-v", "search", "heron", "--mode", "keyword", check=True)
        lines[name] = [line for line in proc.stderr.splitlines() if "embeddings: " in line and "INFO" in line]
    assert lines["keyless"] == ['memdir: INFO: memdir.api: embeddings: none, keyword search only (requested openai: '
                                'No API key found for provider "openai" (set memorySearch.remote.apiKey or '
                                'OPENAI_API_KEY))'], lines
    assert lines["keyed"] == ["memdir: INFO: memdir.api: embeddings: openai, model text-embedding-3-small "
                              "(requested openai)"], lines
    quiet = run_cli("-w", str(ws), "-c", str(cfg), "search", "heron", "--mode", "keyword", check=True)
    assert "embeddings: " not in quiet.stderr  # only asked for


def test_keyword_only_by_choice_is_no_note_on_every_search(make_workspace, run_cli, tmp_path: Path) -> None:
    """``provider = "none"`` (keyword only, as the README's config offers) printed 'note: embeddings
    disabled by configuration' on every search, and put it in every ``--json`` (and MCP) answer's
    warnings, for a setting the user made on purpose; ``index`` already said nothing of it."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    base = ("-w", str(ws), "-c", str(cfg))
    run_cli(*base, "index", check=True)
    plain = run_cli(*base, "search", "heron", check=True)
    as_json = run_cli(*base, "search", "heron", "--json", check=True)
    assert "heron" in plain.stdout and plain.stderr == ""
    assert "warnings" not in json.loads(as_json.stdout) and as_json.stderr == ""
    cfg.write_text(json.dumps({"memorySearch": {"provider": "openai", "fallback": "none"}}))  # configured, no key
    assert "No API key found" in run_cli(*base, "search", "heron", check=True).stderr  # still said


_COMPLETE = r'''
eval "$(memdir completion bash)"
fn=$(complete -p memdir | sed -E 's/.*-F ([^ ]+).*/\1/')
while IFS= read -r line; do
  COMP_LINE="$line"; COMP_POINT=${#line}; read -ra COMP_WORDS <<< "$line"
  [[ "$line" == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
  "$fn" memdir "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
  echo "${COMPREPLY[*]}"
done
'''


def test_bash_completes_get_paths_in_the_workspace_and_agent_ids(make_workspace, state_dir: Path,
                                                                  tmp_path: Path) -> None:
    """In bash with the README's ``eval "$(memdir completion bash)"``, ``memdir -w ~/agent get <Tab>``
    offered the current folder's files (which ``get`` refuses: it takes workspace-relative paths)
    and never ``memory/…``, and ``--agent <Tab>`` offered files too; it offers the workspace's
    memory files and the agent ids of the state folder (a workspace's own index is no agent id),
    reading no config and opening no index."""
    import shutil

    if shutil.which("bash") is None:
        import pytest

        pytest.skip("no bash")
    ws = make_workspace({"MEMORY.md": "- a\n", "memory/2026-01-12.md": "- b\n", "memory/2026-02-01.md": "- c\n",
                         "memory/.trash/old.md": "- d\n", "notes.txt": "x\n"}, name="agent-ws")
    cwd = tmp_path / "elsewhere"
    (cwd / "memory").mkdir(parents=True)
    (cwd / "memory" / "stray.md").write_text("x\n")
    for made in ("memory/ops.sqlite", "memory/ops.sqlite.lock", "memory/agent-ws-0123abcd89.sqlite",
                 "agents/research/sessions/", "agents/agent-ws-0123abcd89/sessions/"):
        (state_dir / made).parent.mkdir(parents=True, exist_ok=True)
        if not made.endswith("/"):
            (state_dir / made).write_text("")
    listed = sorted(p.relative_to(state_dir) for p in state_dir.rglob("*"))
    shim = tmp_path / "bin" / "memdir"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m memdir "$@"\n')
    shim.chmod(0o755)
    lines = [f"memdir -w {ws} get ", f"memdir get --workspace {ws} memory/2026-01", "memdir --agent ",
             "memdir search x -a r"]
    env = cli_env(state_dir, PATH=f"{shim.parent}:{os.environ['PATH']}")
    done = subprocess.run(["bash", "-c", _COMPLETE], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    got = [line.split() for line in done.stdout.splitlines()]
    assert [w for w in got[0] if not w.startswith("-")] == ["MEMORY.md", "memory/2026-01-12.md",
                                                           "memory/2026-02-01.md"], got
    assert got[1:] == [["memory/2026-01-12.md"], ["ops", "research"], ["research"]], got
    assert sorted(p.relative_to(state_dir) for p in state_dir.rglob("*")) == listed  # nothing opened or made


_UNKNOWN_TOOL = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
]


def _mcp(ws: Path, state_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """A stdio MCP session calling a tool memdir does not have; stdin stays open until its answer."""
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "-w", str(ws), *flags, "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(state_dir))
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for message in _UNKNOWN_TOOL:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        proc.stdin.close()
        proc.wait(timeout=60)
        out, err = proc.stdout.read(), proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + out, err)


def test_quiet_leaves_the_libraries_warnings_off_stderr(make_workspace, state_dir: Path) -> None:
    """``memdir -q mcp`` (errors only) still printed the MCP SDK's warnings: the root logger stayed
    at WARNING, and only memdir's own were raised to errors."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    done = _mcp(ws, state_dir, "-q")
    answer = json.loads(done.stdout.splitlines()[1])
    assert answer["id"] == 2 and answer["result"]["isError"], done.stdout  # the client is told
    assert done.stderr == "", done.stderr


def test_an_unknown_tool_call_is_no_warning_on_the_servers_stderr(make_workspace, state_dir: Path) -> None:
    """Every call of a tool memdir does not have printed the MCP SDK's 'Tool 'nope' not listed, no
    validation will be performed' to the host's log, which is untrue (memdir refuses the call,
    naming its tools) and one line a call for a client calling it in a loop."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    done = _mcp(ws, state_dir)
    answer = json.loads(done.stdout.splitlines()[1])
    assert answer["result"]["isError"] and "unknown tool: 'nope'" in answer["result"]["content"][0]["text"]
    assert "not listed" not in done.stderr, done.stderr


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _http_server_told(ws: Path, state_dir: Path, tmp_path: Path, *flags: str) -> str:
    """What ``memdir mcp --transport http`` printed on stderr for a request that is no HTTP."""
    import socket
    import time

    port = _free_port()
    errors = (tmp_path / f"stderr{len(flags)}").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "-w", str(ws), *flags, "mcp", "--transport", "http",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=errors, env=cli_env(state_dir))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        with conn:
            conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert conn.recv(100).startswith(b"HTTP/1.1 400")
    finally:
        proc.terminate()
        proc.wait(30)
    errors.seek(0)
    return errors.read()


def test_the_http_servers_own_lines_are_memdirs_and_quiet_with_q(make_workspace, state_dir: Path,
                                                                  tmp_path: Path) -> None:
    """uvicorn printed through handlers of its own, outside memdir's logging: 'WARNING:  Invalid
    HTTP request received.' for every such request under ``-q`` too, in a format of its own and
    past the masking memdir's log lines get."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    quiet = _http_server_told(ws, state_dir, tmp_path, "-q")
    assert "Invalid HTTP request" not in quiet, quiet
    told = _http_server_told(ws, state_dir, tmp_path)
    assert "memdir: WARNING: Invalid HTTP request received." in told.splitlines(), told


def test_quiet_http_server_prints_nothing_on_stderr(make_workspace, state_dir: Path, tmp_path: Path) -> None:
    """``memdir -q mcp --transport http`` (errors only) still printed its banner ('memdir MCP server:
    http://…/mcp (workspace …; Ctrl-C stops it)'), which is no error, as the stdio server's note
    for a terminal is not printed under ``-q``; without ``-q`` it is said as before."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    assert _http_server_told(ws, state_dir, tmp_path, "-q") == ""
    assert "memdir MCP server: http://127.0.0.1:" in _http_server_told(ws, state_dir, tmp_path)


def test_quiet_chat_leaves_notices_off_stderr(make_workspace, run_cli, state_dir: Path) -> None:
    """``memdir -q chat`` printed the notices of its Memory (an index healed) through a printer of
    its own, past ``-q``; the chat's errors are still said."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    run_cli("-w", str(ws), "index", check=True)
    (index,) = (state_dir / "memory").glob("*.sqlite")
    _damage(index)
    chat = subprocess.run([sys.executable, "-m", "memdir", "-q", "-w", str(ws), "chat", "--base-url",
                           f"http://127.0.0.1:{_free_port()}/v1", "--model", "m"], input="hello\n",
                          capture_output=True, text=True, timeout=120, env=cli_env(state_dir))
    assert "cannot reach the chat API" in chat.stderr and "was damaged" not in chat.stderr, chat.stderr


def test_quiet_ltm_import_leaves_its_note_off_stderr(make_workspace, run_cli, tmp_path: Path) -> None:
    """``memdir -q ltm import`` still printed 'Lines not understood (not bullets): 2' on stderr, a
    note about the file, which ``-q`` leaves out; without ``-q`` it is said as before."""
    import pytest

    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    notes = tmp_path / "import.md"
    notes.write_text("- I prefer dark mode\nsome prose that is no bullet\n")
    base = ("-w", str(ws), "-c", str(cfg), "ltm", "import", str(notes))
    quiet = run_cli("-q", *base, check=True)
    assert "Imported: 1 created" in quiet.stdout and quiet.stderr == "", quiet.stderr
    assert "Lines not understood (not bullets): 2" in run_cli(*base, check=True).stderr
