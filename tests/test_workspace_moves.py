"""Workspaces and state over their lifetime: a workspace renamed, moved or copied while memdir
runs or between runs, its state folder carried to another place."""

from __future__ import annotations

import os

import pytest

from memdir.api import Memory
from memdir.errors import MemdirError


def test_a_workspace_renamed_under_a_running_memory_keeps_its_index_and_says_why(make_workspace, keyword_config):
    """A long-running server (MCP, watch) whose workspace folder was renamed away found no files,
    removed every note from the index and answered searches with nothing, without a word."""
    ws = make_workspace({"MEMORY.md": "We chose RabbitMQ for billing.\n", "memory/2026-01-01.md": "Cursors.\n"})
    with Memory(ws, config=keyword_config) as mem:
        assert mem.sync().indexed == 2
        moved = ws.with_name("ws-moved")
        os.rename(ws, moved)
        response = mem.search("rabbitmq")
        assert [r.path for r in response.results] == ["MEMORY.md"]
        assert any("no longer exists" in w for w in response.warnings)
        with pytest.raises(MemdirError, match=f"workspace {ws} no longer exists"):
            mem.sync()
        os.rename(moved, ws)
        report = mem.sync()
        assert (report.indexed, report.removed, report.unchanged) == (0, 0, 2)
