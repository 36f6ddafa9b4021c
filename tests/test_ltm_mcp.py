"""The long-term memory tools over MCP: a real ``memdir mcp`` subprocess and the SDK's own client."""

from __future__ import annotations

import asyncio
import json
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
