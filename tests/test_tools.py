"""Agent tools against R§10 and vectors 47-51: parameters, payload shapes, citations, failures."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from memdir import Memory
from memdir.lock import FileWriterLock
from memdir.tools import (
    APPEND_DESCRIPTION,
    TOOL_NAMES,
    anthropic_tools,
    call_tool,
    call_tool_payload,
    chat_type_from_session_key,
    clamp_results_by_chars,
    decorate_citations,
    memory_get_payload,
    memory_search_payload,
    openai_tools,
    read_number,
    resolve_citations_mode,
    search_unavailable_payload,
)

SEARCH_DESC = (
    "Mandatory recall step: semantically search MEMORY.md + memory/*.md (and optional session transcripts) "
    "before answering questions about prior work, decisions, dates, people, preferences, or todos; returns "
    "top snippets with path + lines. If response has disabled=true, memory retrieval is unavailable and "
    "should be surfaced to the user."
)
GET_DESC = (
    "Safe snippet read from MEMORY.md or memory/*.md with optional from/lines; use after memory_search to "
    "pull only the needed lines and keep context small."
)


@pytest.fixture
def mem(make_workspace, keyword_config):
    ws = make_workspace({
        "MEMORY.md": "# Long-term\n\nBilling uses Kafka because ordering matters.\n",
        "memory/a.md": "line 1\nline 2\nline 3",
        "memory/notes.txt": "not markdown",
        "memory/2026-01-10.md": "Met Priya about the pagination API; cursor-based pagination chosen.\n",
    })
    os.symlink(ws / "memory" / "a.md", ws / "memory" / "link.md")
    with Memory(ws, config=keyword_config) as m:
        yield m


# --- schemas -------------------------------------------------------------------------------------


def test_openai_and_anthropic_schemas_carry_openclaw_descriptions_and_parameters():
    oa = openai_tools()
    an = anthropic_tools()
    assert [t["function"]["name"] for t in oa] == list(TOOL_NAMES) == ["memory_search", "memory_get", "memory_append"]
    assert all(t["type"] == "function" for t in oa)
    by_name = {t["name"]: t for t in an}
    assert set(by_name) == set(TOOL_NAMES)
    assert by_name["memory_search"]["description"].startswith(SEARCH_DESC)
    assert by_name["memory_get"]["description"].startswith(GET_DESC)
    search = by_name["memory_search"]["input_schema"]
    assert search["type"] == "object" and search["required"] == ["query"]
    assert set(search["properties"]) == {"query", "maxResults", "minScore"}
    get = oa[1]["function"]["parameters"]
    assert set(get["properties"]) == {"path", "from", "lines"} and get["required"] == ["path"]
    assert by_name["memory_append"]["input_schema"]["required"] == ["text"]
    for word in ("durable fact", "decision", "preference", "todo"):
        assert word in APPEND_DESCRIPTION
    json.dumps(oa), json.dumps(an)  # plain JSON, ready to send
    assert [t["function"]["name"] for t in openai_tools(["memory_get"])] == ["memory_get"]
    with pytest.raises(ValueError, match="unknown memdir tool"):
        anthropic_tools(["memory_delete"])


def test_schemas_take_every_number_openclaw_takes():
    """OpenClaw declares maxResults/minScore/from/lines as "number" and truncates: a host that checks
    arguments against memdir's schema ("integer") refused ``from: 2.9``, which vector 48 reads as line 2."""
    jsonschema = pytest.importorskip("jsonschema")
    get = openai_tools(["memory_get"])[0]["function"]["parameters"]
    search = openai_tools(["memory_search"])[0]["function"]["parameters"]
    assert {k: v["type"] for k, v in get["properties"].items()} == {"path": "string", "from": "number",
                                                                    "lines": "number"}
    assert {k: v["type"] for k, v in search["properties"].items()} == {"query": "string", "maxResults": "number",
                                                                       "minScore": "number"}
    for args in ({"path": "memory/a.md", "from": 2.9, "lines": 1}, {"path": "memory/a.md", "from": 1, "lines": 1.5}):
        jsonschema.validate(args, get)
    jsonschema.validate({"query": "x", "maxResults": 2.5, "minScore": 0.2}, search)
    recall = openai_tools(["memory_recall"])[0]["function"]["parameters"]  # R§14: limit is a number too
    jsonschema.validate({"query": "x", "limit": 2.5}, recall)


# --- memory_get: vectors 47 and 48 -----------------------------------------------------------------


def test_vector_47_memory_get_paths(mem):
    ws = mem.workspace
    refused = memory_get_payload(mem, {"path": "NOTES.md"})
    assert refused == {"path": "NOTES.md", "text": "", "disabled": True, "error": refused["error"]}
    assert refused["error"].startswith("path not allowed: NOTES.md")
    assert memory_get_payload(mem, {"path": "../x.md"})["error"].startswith("path not allowed: ../x.md")
    assert memory_get_payload(mem, {"path": "memory/notes.txt"})["error"].startswith("not a Markdown file")
    assert memory_get_payload(mem, {"path": "memory/../MEMORY.md"}) == {
        "text": (ws / "MEMORY.md").read_text(), "path": "MEMORY.md"}
    assert memory_get_payload(mem, {"path": str(ws / "memory" / "a.md")}) == {
        "text": "line 1\nline 2\nline 3", "path": "memory/a.md"}
    assert memory_get_payload(mem, {"path": "memory/missing.md"}) == {"text": "", "path": "memory/missing.md"}
    link = memory_get_payload(mem, {"path": "memory/link.md"})
    assert link["disabled"] is True and link["text"] == "" and "symlinks are not followed" in link["error"]
    for blank in ({"path": "   "}, {}, None, {"path": 7}):
        assert memory_get_payload(mem, blank) == {"path": "", "text": "", "disabled": True, "error": "path required"}


@pytest.mark.parametrize(("args", "expected"), [
    ({"from": 2, "lines": 1}, "line 2"),
    ({"from": 10, "lines": 5}, ""),
    ({"from": 0, "lines": 0}, "line 1\nline 2\nline 3"),
    ({"from": -5, "lines": 2}, "line 1\nline 2"),
    ({"from": 3}, "line 3"),
    ({"from": 2, "lines": 0}, "line 2"),  # `lines ?? total`: an explicit 0 is one line, not the rest
    ({"lines": 0}, "line 1\nline 2\nline 3"),
    ({"from": 2.9, "lines": 1}, "line 2"),
    ({"from": "2.9", "lines": "1"}, "line 2"),
    ({"from_line": "2", "lines": 2}, "line 2\nline 3"),
    ({"from": "two", "lines": 1}, "line 1"),  # not a number: treated as absent, like OpenClaw
])
def test_vector_48_memory_get_slices(mem, args, expected):
    assert memory_get_payload(mem, {"path": "memory/a.md", **args}) == {"text": expected, "path": "memory/a.md"}


def test_a_long_single_line_is_read_whole(mem):
    """R§18.14 (PR #124662): a long single line came back cut, with no way to read the rest."""
    line = "decision log: " + "kafka ordering " * 20_000
    (mem.workspace / "memory" / "long.md").write_text(f"head\n{line}\ntail\n")
    assert memory_get_payload(mem, {"path": "memory/long.md", "from": 2, "lines": 1}) == {
        "text": line, "path": "memory/long.md"}


def test_read_number_accepts_numbers_and_numeric_strings_only():
    assert read_number({"maxResults": "5"}, "maxResults") == 5.0
    assert read_number({"max_results": 3}, "maxResults", integer=True) == 3
    assert read_number({"maxResults": "2.7abc"}, "maxResults", integer=True) == 2
    assert read_number({"from": -2.5}, "from", integer=True) == -2
    for junk in (True, "abc", "", float("nan"), float("inf"), [1], None):
        assert read_number({"minScore": junk}, "minScore") is None


# --- memory_search -------------------------------------------------------------------------------


def test_search_success_payload_shape_and_camel_or_snake_params(mem):
    payload = memory_search_payload(mem, {"query": "kafka ordering", "max_results": "2", "minScore": "0"})
    assert list(payload)[:5] == ["results", "provider", "model", "citations", "mode"]
    assert payload["provider"] == "none" and payload["model"] == "fts-only" and payload["mode"] == "fts-only"
    assert payload["citations"] == "auto" and "disabled" not in payload
    assert 1 <= len(payload["results"]) <= 2
    hit = payload["results"][0]
    assert set(hit) == {"path", "startLine", "endLine", "score", "snippet", "source", "citation"}
    assert hit["path"] == "MEMORY.md"
    assert hit["citation"] == f"MEMORY.md#L{hit['startLine']}-L{hit['endLine']}"
    # OpenAI hands over arguments as a JSON string
    as_text = memory_search_payload(mem, json.dumps({"query": "pagination cursor", "maxResults": 1}))
    assert [r["path"] for r in as_text["results"]] == ["memory/2026-01-10.md"]


def test_search_input_errors_are_payloads_not_exceptions(mem):
    assert memory_search_payload(mem, {}) == {"results": [], "error": "query required"}
    assert memory_search_payload(mem, {"query": "   "}) == {"results": [], "error": "query required"}
    bad = memory_search_payload(mem, "{not json")
    assert bad["results"] == [] and bad["error"].startswith("arguments are not valid JSON")
    assert memory_search_payload(mem, ["query"])["error"] == "arguments must be an object, got list"


@pytest.mark.parametrize(("key", "expected"), [
    ("agent:main:discord:dm:u123", "direct"),
    ("agent:main:discord:group:c123", "group"),
    ("agent:main:slack:channel:c1", "channel"),
    ("AGENT:Main:Slack:Channel:C1", "channel"),
    ("agent:main:main", "direct"),
    ("agent:main", "direct"),
    ("session:x:group:y", "direct"),
    (None, "direct"),
    ("", "direct"),
])
def test_chat_type_from_session_key(key, expected):
    assert chat_type_from_session_key(key) == expected


def test_vector_49_citations_decoration():
    result = {"path": "MEMORY.md", "startLine": 5, "endLine": 7, "score": 0.9,
              "snippet": "@@ -5,3 @@\nAssistant: noted", "source": "memory"}
    on = decorate_citations([result], True)[0]
    assert on["citation"] == "MEMORY.md#L5-L7"
    assert on["snippet"] == "@@ -5,3 @@\nAssistant: noted\n\nSource: MEMORY.md#L5-L7"
    assert decorate_citations([{**result, "startLine": 4, "endLine": 4}], True)[0]["citation"] == "MEMORY.md#L4"
    off = decorate_citations([{**result, "citation": "stale"}], False)[0]
    assert "citation" not in off and off["snippet"] == result["snippet"]
    assert resolve_citations_mode("bogus") == "auto" and resolve_citations_mode(None) == "auto"


@pytest.mark.parametrize(("mode", "key", "included"), [
    ("on", "agent:main:slack:channel:c1", True),
    ("auto", "agent:main:discord:dm:u123", True),
    ("auto", "agent:main:discord:group:c123", False),
    ("auto", "agent:main:slack:channel:c1", False),
    ("auto", "agent:main:main", True),
    ("auto", None, True),
    ("off", "agent:main:discord:dm:u123", False),
])
def test_vector_49_citation_modes_end_to_end(make_workspace, keyword_config, mode, key, included):
    ws = make_workspace({"MEMORY.md": "Kafka was chosen for billing.\n"})
    with Memory(ws, config={**keyword_config, "memory": {"citations": mode}}) as m:
        payload = call_tool(m, "memory_search", {"query": "kafka billing"}, session_key=key).payload
    assert payload["citations"] == mode
    hit = payload["results"][0]
    if included:
        # R§17 vector 49: structure-aware chunks keep trailing blank lines, so the range is OpenClaw's
        assert hit["citation"] == "MEMORY.md#L1-L2"
        assert hit["snippet"].endswith("\n\nSource: MEMORY.md#L1-L2")
    else:
        assert "citation" not in hit and "Source:" not in hit["snippet"]


def test_vector_50_clamp_by_injected_chars():
    results = [{"path": f"p{i}", "snippet": "s" * n} for i, n in enumerate([12, 30, 5])]
    clamped = clamp_results_by_chars(results, 20)
    assert [len(r["snippet"]) for r in clamped] == [12, 8]
    assert clamp_results_by_chars(results, 0) == results


def test_the_injected_chars_budget_keeps_the_line_that_matched(make_workspace, keyword_config) -> None:
    """The budget cut a result's snippet from its start: asked where the garage key is, with 200
    characters to spend, the tool showed the section's heading and two unrelated items, and the
    line about the key (the snippet's last, 693 characters in) was lost."""
    items = [f"- Item {i}: the shelf in the hallway holds box number {i} of old papers." for i in range(9)]
    key = "- The spare key to the garage is under the blue flowerpot."
    ws = make_workspace({"MEMORY.md": "\n".join(["# Household", "", *items, key]) + "\n"})
    with Memory(ws, config=keyword_config) as mem:
        for citations in ("off", "on"):
            args = {"query": "where is the spare garage key"}
            full = memory_search_payload(mem, args, citations=citations)["results"]
            assert key in full[0]["snippet"] and len(full[0]["snippet"]) > 200
            (hit,) = memory_search_payload(mem, args, citations=citations, max_injected_chars=200)["results"]
            assert key in hit["snippet"] and len(hit["snippet"]) <= 200, citations
            assert (hit["startLine"], hit["endLine"]) == (full[0]["startLine"], full[0]["endLine"])
    # with no query to focus on, the snippet's head as before
    assert clamp_results_by_chars([{"snippet": "a\nb\nkey"}], 3, query="") == [{"snippet": "a\nb"}]


def test_vector_51_failure_payloads():
    quota = search_unavailable_payload("openai embeddings failed: 429 insufficient_quota")
    assert quota == {
        "results": [], "disabled": True, "unavailable": True,
        "error": "openai embeddings failed: 429 insufficient_quota",
        "warning": "Memory search is unavailable because the embedding provider quota is exhausted.",
        "action": "Top up or switch embedding provider, then retry memory_search.",
    }
    generic = search_unavailable_payload("embedding provider timeout")
    assert generic["warning"] == "Memory search is unavailable due to an embedding/provider error."
    assert generic["action"] == "Check embedding provider configuration and retry memory_search."
    assert search_unavailable_payload(None)["error"] == "memory search unavailable"
    assert search_unavailable_payload("   ")["error"] == "memory search unavailable"
    assert memory_search_payload(None, {"query": "x"})["error"] == "memory search unavailable"


class RaisingProvider:
    """An embedding provider whose every call fails the way a real remote one does."""

    id = "openai"
    model = "text-embedding-3-small"
    provider_key = "test-raising"
    max_input_bytes = 8000
    dims = None

    def __init__(self, message: str):
        self.message = message

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError(self.message)

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError(self.message)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("message", "quota"), [
    ("openai embeddings failed: 429 insufficient_quota", True),
    ("embedding provider timeout", False),
])
def test_failing_provider_falls_back_to_keyword_results(make_workspace, keyword_config, message, quota):
    """A provider that fails (quota or otherwise) degrades the search to keywords and says why,
    instead of leaving the agent without memory (OpenClaw returns a disabled payload here)."""
    ws = make_workspace({"MEMORY.md": "Kafka was chosen for billing.\n"})
    with Memory(ws, config=keyword_config, provider=RaisingProvider(message)) as m:
        result = call_tool(m, "memory_search", {"query": "kafka"})
    payload = result.payload
    assert "disabled" not in payload
    assert payload["mode"] == "fts-only" and payload["results"][0]["path"] == "MEMORY.md"
    assert message in payload["fallback"]["reason"]
    assert ("429" in payload["fallback"]["reason"]) is quota
    assert json.loads(result.text) == payload


def test_real_index_conflict_is_a_generic_failure_payload(make_workspace, keyword_config, tmp_path):
    shared = {**keyword_config, "memorySearch": {"provider": "none", "store": {"path": str(tmp_path / "one.sqlite")}}}
    a = make_workspace({"MEMORY.md": "alpha\n"}, name="a")
    b = make_workspace({"MEMORY.md": "beta\n"}, name="b")
    with Memory(a, config=shared) as ma:
        ma.sync()
    with Memory(b, config=shared) as mb:
        payload = memory_search_payload(mb, {"query": "beta"})
        got = memory_get_payload(mb, {"path": "MEMORY.md"})
    assert payload["disabled"] is True and "belongs to workspace" in payload["error"]
    assert payload["warning"] == "Memory search is unavailable due to an embedding/provider error."
    assert got == {"text": "beta\n", "path": "MEMORY.md"}  # reading files needs no index


class BrokenMemory(Memory):
    """A real Memory whose operations fail with unexpected exceptions."""

    def search(self, *args, **kwargs):
        raise KeyError("chunks")

    def get(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    def append_daily(self, *args, **kwargs):
        raise OSError(28, "No space left on device")


def test_tools_never_raise(make_workspace, keyword_config):
    ws = make_workspace({"MEMORY.md": "x\n"})
    with BrokenMemory(ws, config=keyword_config) as m:
        search = call_tool_payload(m, "memory_search", {"query": "x"})
        get = call_tool_payload(m, "memory_get", {"path": "MEMORY.md"})
        append = call_tool_payload(m, "memory_append", {"text": "x"})
        unknown = call_tool_payload(m, "memory_delete", {})
    assert search["disabled"] is True and search["error"] == "'chunks'"
    assert get == {"path": "MEMORY.md", "text": "", "disabled": True, "error": "[Errno 13] Permission denied"}
    assert append == {"path": "", "appended": False, "error": "[Errno 28] No space left on device"}
    assert unknown["error"].startswith("unknown tool: 'memory_delete'")


def test_disabled_memory_search_says_so(make_workspace):
    ws = make_workspace({"MEMORY.md": "x\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none", "enabled": False}}) as m:
        payload = memory_search_payload(m, {"query": "x"})
    assert payload["disabled"] is True and "memorySearch.enabled" in payload["error"]


def test_stale_flag_passes_through_when_another_writer_holds_the_index(mem):
    mem.sync()
    (mem.workspace / "memory" / "2026-01-10.md").write_text("Changed: offset pagination after all.\n")
    lock = FileWriterLock(mem.index_path)
    assert lock.acquire(0)
    try:
        payload = memory_search_payload(mem, {"query": "pagination"})
    finally:
        lock.release()
    assert payload["stale"] is True
    fresh = memory_search_payload(mem, {"query": "offset pagination"})
    assert "stale" not in fresh
    assert "offset pagination" in fresh["results"][0]["snippet"]


# --- memory_append and the result envelope -------------------------------------------------------


def test_append_tool_then_search_reads_the_write(mem):
    mem.sync()
    before = dt.date.today()
    result = call_tool(mem, "memory_append", {"text": "- Decided: the quokka service owns invoices."})
    payload = result.payload
    assert payload["appended"] is True
    assert payload["path"] in {f"memory/{d.isoformat()}.md" for d in (before, dt.date.today())}
    written = (Path(mem.workspace) / payload["path"]).read_text()
    assert written.endswith("- Decided: the quokka service owns invoices.\n")
    found = call_tool(mem, "memory_search", {"query": "quokka invoices"}).payload
    assert found["results"][0]["path"] == payload["path"]
    assert call_tool_payload(mem, "memory_append", {"text": "  "}) == {
        "path": "", "appended": False, "error": "text required"}


def test_result_envelope_is_openclaw_shaped(mem):
    result = call_tool(mem, "memory_get", {"path": "memory/a.md", "lines": 1})
    assert list(result) == ["content", "details"]
    assert result["content"] == [{"type": "text", "text": json.dumps(result["details"], indent=2)}]
    assert result["details"] == {"text": "line 1", "path": "memory/a.md"}
    assert result.text == result["content"][0]["text"] and result.payload == result["details"]
    json.dumps(result)  # a plain dict for any JSON transport


def test_to_json_is_pythons_indented_json_byte_for_byte(tmp_path):
    """to_json writes most payloads natively (pydantic-core): always the text json.dumps writes."""
    import random
    import struct

    from memdir.tools import to_json as _to_json

    def python(value: object) -> str:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)

    rng = random.Random(7)
    floats = [0.0, -0.0, 1e-4, 9.999999999999999e-05, 1e-05, 2.5e-07, 1e16, 9999999999999998.0, 1e22, 0.511612,
              float("nan"), float("inf"), -float("inf"), 123.0, 1e15]
    floats += [rng.choice((1, -1)) * 10 ** rng.uniform(-8, 20) for _ in range(3000)]
    floats += [struct.unpack("d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(3000)]
    every_char = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    values: list[object] = [
        {"results": [{"path": "memory/a.md", "startLine": 1, "endLine": 2, "score": 0.5, "snippet": "x\n\tÿ 😀"}],
         "provider": None, "model": "m", "citations": "auto", "mode": "hybrid", "stale": True, "warnings": []},
        {"chars": every_char, every_char[:5000]: [every_char[-300:], {}], "": [[], [{}], ""]},
        {"lone surrogate": "a\ud800b"}, {"ints": [0, -1, 2**64, -(2**70), True, False]},
        {1: "int key"}, {"tuple": (1, 2)}, {"path": tmp_path, "when": dt.datetime(2026, 1, 2, 3, 4)},
    ]
    deep: object = "x"
    for _ in range(60):  # nested past the native writer's depth check
        deep = [deep]
    values += [{"deep": deep}, *({"score": x} for x in floats)]
    for value in values:
        assert _to_json(value) == python(value)


def test_only_a_quota_error_gets_the_quota_advice():
    """A path holding "429" (pytest's numbered temporary folders, ``pytest-429/``) gave an index
    conflict the quota advice, and the conflict test failed now and then."""
    from memdir.tools import search_unavailable_payload

    quota = "Memory search is unavailable because the embedding provider quota is exhausted."
    for reason in ("HTTP 429 Too Many Requests", "You exceeded your current quota.", "error: insufficient_quota",
                   "rate limited (429)"):
        assert search_unavailable_payload(RuntimeError(reason))["warning"] == quota, reason
    for reason in ("index /tmp/pytest-of-root/pytest-429/one.sqlite belongs to workspace /tmp/a, not /tmp/b",
                   "cannot open /home/quota-team/x.sqlite", "index /srv/4291/x.sqlite is damaged"):
        assert search_unavailable_payload(RuntimeError(reason))["warning"] == \
            "Memory search is unavailable due to an embedding/provider error.", reason


def test_a_model_note_has_its_secrets_masked_as_memory_store_masks_them(mem):
    """A model told a key (or "the wifi password is …") put it in today's log as said, where every
    session started today and tomorrow quotes it and the index holds it; ``memory_store`` masked
    the same text.  ``memdir append`` (the user's own note) keeps what it is given."""
    key = "sk-proj-Zq9xT4mW8vB2nK7pL3sD6fG1hJ5k"
    note = f"- Staging uses OPENAI_API_KEY={key} and the wifi password is tangerine-42."
    payload = call_tool(mem, "memory_append", {"text": note}).payload
    assert payload["appended"] is True
    written = (Path(mem.workspace) / payload["path"]).read_text()
    assert key not in written and "tangerine-42" not in written
    assert "- Staging uses OPENAI_API_KEY=sk-pro…hJ5k and the wifi password is ***" in written
    rel = mem.append_daily(note)  # the API (and the CLI) write the user's words as they are
    assert key in (Path(mem.workspace) / rel).read_text()


def test_the_tool_schemas_are_typed_to_pass_as_the_sdks_typed_dicts():
    """A host type-checking its code (py.typed is shipped) passes the schemas to OpenAI's and
    Anthropic's SDKs, whose ``tools`` are TypedDicts: annotated ``list[dict[str, Any]]``, the
    README's ``create(..., tools=openai_tools())`` failed mypy ('incompatible type "list[dict[str,
    Any]]"; expected "Iterable[ChatCompletionFunctionToolParam | …]"'); they are lists of Any."""
    import typing
    from typing import Any

    from memdir.tools import anthropic_tools, openai_tools

    for schemas in (openai_tools, anthropic_tools):
        assert typing.get_type_hints(schemas)["return"] == list[Any], schemas.__name__
        assert all(isinstance(s, dict) for s in schemas())  # what they hold is unchanged
