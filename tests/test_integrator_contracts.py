"""The library, tools and ``--json`` contracts as an integrator meets them: odd arguments and odd
states must give a clear answer (a payload, a named error, one JSON document), never a traceback."""

from __future__ import annotations

import json

import pytest

from memdir import Memory
from memdir.tools import call_tool, call_tool_payload, chat_type_from_session_key


def test_a_tool_name_or_session_key_that_is_not_a_string_is_a_payload(make_workspace, keyword_config):
    ws = make_workspace({"MEMORY.md": "billing uses Kafka\n"})
    with Memory(ws, config=keyword_config) as mem:
        for name in (123, ["memory_search"], {"name": "memory_get"}):
            result = call_tool(mem, name, {"query": "kafka"})  # type: ignore[arg-type]
            assert result.is_error and result.payload["error"].startswith(f"unknown tool: {name!r}")
        assert call_tool_payload(mem, 7, {})["error"].startswith("unknown tool: 7")  # type: ignore[arg-type]
        found = call_tool(mem, "memory_search", {"query": "kafka"}, session_key=5)  # type: ignore[arg-type]
    assert not found.is_error and found.payload["results"][0]["path"] == "MEMORY.md"
    assert chat_type_from_session_key(b"agent:main:group:g1") == "direct"  # type: ignore[arg-type]


def test_ltm_export_with_json_prints_one_json_document(make_workspace, run_cli):
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    done = run_cli("--workspace", str(ws), "ltm", "export", "--json", check=True)
    exported = json.loads(done.stdout)
    assert exported["path"] is None and exported["memories"] == 0
    assert exported["text"].startswith("# Long-term memory\n")
