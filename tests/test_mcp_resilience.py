"""One tool call never stalls the MCP server; the server's watcher keeps its index live.

The server runs as a real ``memdir mcp`` subprocess driven by the MCP SDK's stdio client (a FIFO
posing as a note; a note edited by hand), and in-process over the SDK's memory transport for a
call that genuinely hangs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.memory import create_connected_server_and_client_session

from helpers import cli_env
from memdir.api import Memory
from memdir.config import load_config
from memdir.mcp_server import build_server


def _payload(result, *, error: bool = False) -> dict:
    assert result.isError is error
    return json.loads(result.content[0].text)


def test_a_fifo_note_over_mcp_and_a_second_call_that_still_answers(make_workspace, tmp_path: Path, state_dir):
    ws = make_workspace({"MEMORY.md": "# Prefs\nBilling uses Kafka because ordering matters.\n"})
    (ws / "memory").mkdir(exist_ok=True)
    os.mkfifo(ws / "memory" / "x.md")
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "memdir", "mcp", "--workspace", str(ws), "--config", str(cfg)],
                                   env=cli_env(state_dir))

    index = load_config(workspace=ws, config_path=cfg, state_dir=state_dir).settings.index_path

    async def run() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            deadline = time.monotonic() + 60
            while not _indexed(index, "MEMORY.md"):  # the start-up index (a search meanwhile says "being built")
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            got = _payload(await session.call_tool("memory_get", {"path": "memory/x.md"}), error=True)
            assert got["disabled"] is True and "FIFO" in got["error"] and got["text"] == ""
            found = _payload(await session.call_tool("memory_search", {"query": "which queue for billing"}))
            assert found["results"][0]["path"] == "MEMORY.md"
            again = _payload(await session.call_tool("memory_get", {"path": "MEMORY.md", "from": 2, "lines": 1}))
            assert again["text"] == "Billing uses Kafka because ordering matters."

    asyncio.run(asyncio.wait_for(run(), 120))


def _indexed(index: Path, path: str) -> bool:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{index}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT 1 FROM files WHERE path = ?", (path,)).fetchone() is not None
    except sqlite3.Error:
        return False


class StallingMemory(Memory):
    """A real Memory whose ``get`` hangs until released (a read stuck on a dead network mount)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.stalled = threading.Event()

    def get(self, path, *, from_line=None, lines=None):
        self.stalled.set()
        self.release.wait(60)
        return super().get(path, from_line=from_line, lines=lines)


def test_a_stalled_call_times_out_and_never_blocks_the_next(make_workspace):
    ws = make_workspace({"MEMORY.md": "# Prefs\nThe standup moved to 09:30 on Tuesdays.\n"})
    mem = StallingMemory(ws, config={"memorySearch": {"provider": "none"}})
    mem.sync()
    server = build_server(mem, call_timeout=3.0)

    async def run() -> None:
        async with create_connected_server_and_client_session(server._mcp_server) as session:
            stuck: dict = {}

            async def call_get() -> None:
                stuck["result"] = await session.call_tool("memory_get", {"path": "MEMORY.md"})

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_get)
                while not mem.stalled.is_set():
                    await anyio.sleep(0.01)
                # the get is stuck in its thread; a search still answers meanwhile
                found = _payload(await session.call_tool("memory_search", {"query": "standup Tuesdays"}))
                assert found["results"][0]["path"] == "MEMORY.md"
                assert "result" not in stuck
            timed_out = _payload(stuck["result"], error=True)
            assert timed_out["disabled"] is True and "did not finish within 3 s" in timed_out["error"]
            mem.release.set()
            later = _payload(await session.call_tool("memory_search", {"query": "standup"}))
            assert later["results"]

    try:
        anyio.run(run)
    finally:
        mem.release.set()
        mem.close()


def test_the_mcp_servers_watcher_indexes_hand_edits(make_workspace, tmp_path: Path, state_dir):
    """With ``sync.watch`` on, a note written by hand is indexed without any search asking."""
    ws = make_workspace({"MEMORY.md": "# Prefs\nLikes green tea.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none", "sync": {"watchDebounceMs": 100}}}))
    index = load_config(workspace=ws, config_path=cfg, state_dir=state_dir).settings.index_path
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "memdir", "mcp", "--workspace", str(ws), "--config", str(cfg)],
                                   env=cli_env(state_dir))

    def indexed(path: str) -> bool:
        return _indexed(index, path)

    async def run() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            deadline = time.monotonic() + 60
            while not indexed("MEMORY.md") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            (ws / "memory").mkdir(exist_ok=True)
            (ws / "memory" / "hand.md").write_text("Written by hand: the boat is moored at pier 7.\n")
            deadline = time.monotonic() + 60
            while not indexed("memory/hand.md"):  # nothing asked the server anything
                assert time.monotonic() < deadline, "the watcher never indexed the hand edit"
                await asyncio.sleep(0.05)
            found = _payload(await session.call_tool("memory_search", {"query": "boat moored pier"}))
            assert found["results"][0]["path"] == "memory/hand.md" and "stale" not in found

    asyncio.run(asyncio.wait_for(run(), 150))
