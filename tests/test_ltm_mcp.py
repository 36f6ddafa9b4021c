"""The long-term memory tools over MCP: a real ``memdir mcp`` subprocess and the SDK's own client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from helpers import cli_env
from memdir.ltm.tools import LTM_TOOL_SPECS

pytest.importorskip("lancedb")


def test_ltm_tools_are_served_when_enabled(make_workspace, tmp_path: Path, state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}, "longTermMemory": {"enabled": True}}))
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memdir", "mcp", "--workspace", str(ws), "--config", str(cfg)],
        env=cli_env(state_dir))

    async def run() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert list(listed) == ["memory_search", "memory_get", "memory_append",
                                    "memory_recall", "memory_store", "memory_forget"]
            for name, spec in LTM_TOOL_SPECS.items():
                assert listed[name].inputSchema == spec.parameters
                assert listed[name].annotations.readOnlyHint is spec.read_only

            stored = await session.call_tool("memory_store", {"text": "I prefer dark mode in every editor"})
            assert stored.isError is False
            assert stored.content[0].text == 'Stored: "I prefer dark mode in every editor..."'
            assert stored.structuredContent["action"] == "created"
            memory_id = stored.structuredContent["id"]

            recalled = await session.call_tool("memory_recall", {"query": "dark mode editor"})
            assert recalled.content[0].text.startswith("Found 1 memories:\n\n1. [preference] I prefer dark mode")
            assert recalled.structuredContent["memories"][0]["id"] == memory_id

            dup = await session.call_tool("memory_store", {"text": "I prefer dark mode in every editor"})
            assert dup.structuredContent == {"action": "duplicate", "existingId": memory_id,
                                             "existingText": "I prefer dark mode in every editor"}
            forgot = await session.call_tool("memory_forget", {"memoryId": memory_id})
            assert forgot.content[0].text == f"Memory {memory_id} forgotten."
            empty = await session.call_tool("memory_recall", {"query": "dark mode editor"})
            assert empty.content[0].text == "No relevant memories found."

            # The core tools are unchanged: their text is still the JSON payload.
            found = await session.call_tool("memory_search", {"query": "notes"})
            assert json.loads(found.content[0].text) == found.structuredContent

    asyncio.run(asyncio.wait_for(run(), 120))
    from memdir.config import workspace_index_name

    # no agent id: the store is this workspace's own, keyed like its index
    assert (state_dir / "ltm" / workspace_index_name(ws) / "memories.lance").is_dir()


def test_a_client_gone_during_the_warmup_leaves_no_false_ltm_error(make_workspace, tmp_path: Path,
                                                                    state_dir: Path) -> None:
    """Regression: a client that listed the tools and left while the startup index was still being
    built (a host checking the server, a restart) closed the Memory under the warm-up thread, which
    then loaded long-term memory anyway and ended every such session with 'memdir: long-term memory
    unavailable: this Memory is closed' on stderr."""
    # the embedded model: the startup sync spends its time in one file (loading the model, embedding)
    # and finishes after the client left, as a first index does
    ws = make_workspace({"memory/2025-01-01.md": "".join(f"- decision {i}: the billing queue stays on Kafka "
                                                         f"partition {i}\n" for i in range(150))})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"longTermMemory": {"enabled": True}}))
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    for run in range(3):  # the thread may lose the race to the process's exit: three times, new notes each
        proc = subprocess.run([sys.executable, "-m", "memdir", "mcp", "--workspace", str(ws), "--config", str(cfg)],
                              input="".join(json.dumps(m) + "\n" for m in lines), env=cli_env(state_dir),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert '"memory_recall"' in proc.stdout
        assert "long-term memory unavailable" not in proc.stderr, proc.stderr
        (ws / "memory" / "2025-01-01.md").write_text("".join(f"- run {run}: queue {i} moved to topic {i * 7}\n"
                                                             for i in range(150)), encoding="utf-8")
