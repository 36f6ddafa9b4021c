"""Agent tools: ``memory_search``, ``memory_get`` (OpenClaw's, R§10) and ``memory_append``.

Hand the schemas to a model, run what it calls with :func:`call_tool`, return the text::

    from memdir import Memory
    from memdir.tools import call_tool, openai_tools

    mem = Memory("~/agent")
    tools = openai_tools()                      # or anthropic_tools()
    result = call_tool(mem, "memory_search", {"query": "billing queue"}, session_key=key)
    result.text       # JSON text for the model (what goes into the tool message)
    result.payload    # the same payload as a dict

Rules every tool here keeps, because a model cannot handle a Python exception:

* a tool **never raises**; every failure becomes a payload that says what went wrong
  (``memory_search``: ``disabled``/``unavailable``/``error``/``warning``/``action``;
  ``memory_get``: ``{path, text: "", disabled: true, error}`` with memdir's named errors);
* parameters are accepted in camelCase or snake_case (``maxResults``/``max_results``), numbers
  may arrive as numeric strings, ``from``/``lines`` are truncated to integers, and arguments
  may be a dict or the JSON string OpenAI sends;
* results are ``{content: [{type: "text", text: <payload as indented JSON>}], details: payload}``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic_core import to_json as _to_json_native

CitationsMode = Literal["auto", "on", "off"]
ChatType = Literal["direct", "group", "channel"]

SEARCH_DESCRIPTION = (
    "Mandatory recall step: semantically search MEMORY.md + memory/*.md (and optional session transcripts) "
    "before answering questions about prior work, decisions, dates, people, preferences, or todos; returns "
    "top snippets with path + lines. If response has disabled=true, memory retrieval is unavailable and "
    "should be surfaced to the user. "
    "(memdir: keyword search works even without an embedding model; stale=true means the newest edits may "
    "not be searchable yet.)"
)
GET_DESCRIPTION = (
    "Safe snippet read from MEMORY.md or memory/*.md with optional from/lines; use after memory_search to "
    "pull only the needed lines and keep context small. "
    "(memdir: configured extra memory paths are readable too, and so is a session transcript result's "
    "sessions/<name>.jsonl when session transcripts are searched: from/lines are its JSONL lines, read as "
    "its User:/Assistant: messages; a refused or unreadable path comes back with an error that says why.)"
)
APPEND_DESCRIPTION = (
    "Remember something for future sessions: append a note to today's daily memory log "
    "(memory/YYYY-MM-DD.md). Use it when something should outlive this conversation: a durable fact, a "
    "decision and its reason, a user preference, a commitment or todo, a lesson learned. Write one short, "
    "self-contained entry in Markdown (it is appended as written, keys and passwords masked, and never "
    "overwrites anything); do not store secrets or small talk. The note is searchable with memory_search right away."
)

# OpenClaw's types (R§10): counts are "number", truncated to integers when read, so a host that
# checks arguments against the schema passes on what OpenClaw takes (``from: 2.9`` reads line 2).
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for, in natural language or keywords."},
        "maxResults": {"type": "number", "description": "How many snippets to return (default: the configured "
                                                        "maxResults, 6 unless set; at most 50)."},
        "minScore": {"type": "number", "description": "Drop snippets scoring below this, 0-1; a value given is "
                                                      "strict. Omitted: the configured minScore (0.35 unless set), "
                                                      "below which a strong match may still fill a spare slot."},
    },
    "required": ["query"],
}
GET_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Workspace-relative path from a search result, e.g. MEMORY.md "
                                                  "or memory/2026-01-12.md (or sessions/<name>.jsonl)."},
        "from": {"type": "number", "description": "First line to read (1-based). Omit to read from the start."},
        "lines": {"type": "number", "description": "Number of lines to read. Omit (with from) for the whole file."},
    },
    "required": ["path"],
}
APPEND_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The note to remember, e.g. '- Decided: billing uses Kafka "
                                                  "(ordering guarantees).'"},
    },
    "required": ["text"],
}


@dataclass(frozen=True)
class ToolSpec:
    """One tool's name, description and JSON-schema parameters, in any host's format."""

    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool = True

    def openai(self) -> dict[str, Any]:
        """Chat Completions ``tools`` entry."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def anthropic(self) -> dict[str, Any]:
        """Anthropic Messages ``tools`` entry."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


TOOL_SPECS: dict[str, ToolSpec] = {
    "memory_search": ToolSpec("memory_search", SEARCH_DESCRIPTION, SEARCH_PARAMETERS),
    "memory_get": ToolSpec("memory_get", GET_DESCRIPTION, GET_PARAMETERS),
    "memory_append": ToolSpec("memory_append", APPEND_DESCRIPTION, APPEND_PARAMETERS, read_only=False),
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOL_SPECS)
#: Long-term memory tools (``memdir.ltm``, the ``lancedb`` extra): opt in by naming them.
LTM_TOOL_NAMES: tuple[str, ...] = ("memory_recall", "memory_store", "memory_forget")


def tool_spec(name: str) -> ToolSpec:
    """The spec of any memdir tool, the long-term memory ones included."""
    if name in TOOL_SPECS:
        return TOOL_SPECS[name]
    if name in LTM_TOOL_NAMES:
        from memdir.ltm.tools import LTM_TOOL_SPECS  # schemas only: no lancedb import

        return LTM_TOOL_SPECS[name]
    known = ", ".join((*TOOL_NAMES, *LTM_TOOL_NAMES))
    raise ValueError(f"unknown memdir tool(s): {name} (known: {known})")


def chosen_tools(names: Iterable[str] | str | None) -> list[str]:
    """Tool names as given: ``None`` is the core tools, and one name is that tool
    (``openai_tools("memory_search")`` was refused letter by letter: "m, e, m, o, ...")."""
    if names is None:
        return list(TOOL_NAMES)
    return [names] if isinstance(names, str) else list(names)


def _specs(names: Iterable[str] | str | None) -> list[ToolSpec]:
    chosen = chosen_tools(names)
    unknown = [n for n in chosen if n not in TOOL_SPECS and n not in LTM_TOOL_NAMES]
    if unknown:
        known = ", ".join((*TOOL_NAMES, *LTM_TOOL_NAMES))
        raise ValueError(f"unknown memdir tool(s): {', '.join(map(str, unknown))} (known: {known})")
    return [tool_spec(n) for n in chosen]


#: What :func:`openai_tools` and :func:`anthropic_tools` are annotated to return: plain dicts, typed
#: ``Any`` so they pass as the SDKs' TypedDicts.  Why: as ``list[dict[str, Any]]``, the README's
#: ``create(..., tools=openai_tools())`` failed mypy in a host's typed code ('incompatible type
#: "list[dict[str, Any]]"; expected "Iterable[ChatCompletionFunctionToolParam | …]"'), and anthropic's alike.
ToolSchemas = list[Any]


def openai_tools(names: Iterable[str] | str | None = None) -> ToolSchemas:
    """Schemas for OpenAI-style tool calling (``{"type": "function", "function": {...}}``).

    ``names``: the tools offered, one name or several, the long-term memory ones included
    (``None``: memory_search, memory_get and memory_append); an unknown name is a ValueError."""
    return [json.loads(json.dumps(s.openai())) for s in _specs(names)]


def anthropic_tools(names: Iterable[str] | str | None = None) -> ToolSchemas:
    """Schemas for Anthropic tool use (``{name, description, input_schema}``); ``names`` as
    :func:`openai_tools`'s."""
    return [json.loads(json.dumps(s.anthropic())) for s in _specs(names)]


# --- results ------------------------------------------------------------------------------------


class ToolResult(dict[str, Any]):
    """``{"content": [{"type": "text", "text": ...}], "details": payload}``, plus shortcuts.

    A ``dict[str, Any]``: as a bare ``dict`` each key and value was unknown to a host's pyright in
    strict mode (``details = result["details"]``: 'Type of "details" is unknown'), and mypy took
    any key (``result[0]["text"]``, the content's first block meant, failed only when run)."""

    @property
    def text(self) -> str:
        return str(self["content"][0]["text"])

    @property
    def payload(self) -> dict[str, Any]:
        return dict(self["details"])

    @property
    def is_error(self) -> bool:
        """The call failed (see :func:`is_error_payload`): MCP sends this as ``isError``."""
        return is_error_payload(self["details"])


def is_error_payload(payload: Mapping[str, Any]) -> bool:
    """Whether a tool payload reports a failure rather than a result.

    The payload text stays OpenClaw's (R§10); this only tells hosts which is which: an
    ``error`` (empty query, refused path, unknown tool), ``disabled: true`` (search or reads
    unavailable) or ``appended: false``.  A search that worked but carries ``warnings`` or
    ``stale`` is a result.
    """
    return bool(payload.get("error")) or payload.get("disabled") is True or payload.get("appended") is False


def to_json(payload: Mapping[str, Any]) -> str:
    """The payload as the model sees it: indented JSON, non-ASCII kept readable.

    Python's ``json`` indents in pure Python (~10x slower than its compact C encoder), the most
    of a tool call's own time after a search; pydantic-core writes the same text natively, so it
    writes every payload made only of the values on which the two agree (:func:`_agreed`), and
    ``json`` the rest.
    """
    if _agreed(payload):
        try:
            return _to_json_native(payload, indent=2).decode()
        except Exception:  # e.g. a lone surrogate, which json writes and pydantic-core refuses
            pass
    return json.dumps(payload, indent=2, ensure_ascii=False, default=str)


def _agreed(value: Any, depth: int = 0) -> bool:
    """Only dicts with str keys, lists, str, int, bool, None and floats that both write alike
    (zero, or 1e-4 <= |x| < 1e16: Python switches to exponents outside it, and writes them
    otherwise; NaN and infinities neither)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return value == 0.0 or 1e-4 <= abs(value) < 1e16
    if depth > 50:
        return False
    if kind is dict:
        return all(type(k) is str and _agreed(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(_agreed(v, depth + 1) for v in value)
    return False


def tool_result(payload: dict[str, Any]) -> ToolResult:
    return ToolResult(content=[{"type": "text", "text": to_json(payload)}], details=payload)


# --- parameters ----------------------------------------------------------------------------------


class ToolInputError(ValueError):
    """A required parameter is missing or unusable (reported in the payload, never raised out)."""


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


def parse_args(args: Any) -> dict[str, Any]:
    """Tool arguments as a dict: ``None`` → ``{}``, JSON text (OpenAI) → its object."""
    if args is None:
        return {}
    if isinstance(args, str):
        text = args.strip()
        if not text:
            return {}
        try:
            args = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ToolInputError(f"arguments are not valid JSON: {exc.msg}") from exc
    if not isinstance(args, Mapping):
        raise ToolInputError(f"arguments must be an object, got {type(args).__name__}")
    return dict(args)


def _raw(args: Mapping[str, Any], key: str, aliases: Iterable[str] = ()) -> Any:
    for k in (key, _snake(key), *aliases):
        if k in args and args[k] is not None:
            return args[k]
    return None


@overload
def read_string(args: Mapping[str, Any], key: str, *, required: Literal[True], label: str | None = None) -> str: ...
@overload
def read_string(args: Mapping[str, Any], key: str, *, required: bool = False,
                label: str | None = None) -> str | None: ...
def read_string(args: Mapping[str, Any], key: str, *, required: bool = False, label: str | None = None) -> str | None:
    """A trimmed string parameter; missing or blank and ``required`` → ``"<key> required"``.

    (Overloaded: with ``required=True`` the value is a ``str`` to a type checker, as it is when
    run; as ``str | None`` a host's ``query: str = read_string(args, "query", required=True)``
    failed mypy.)"""
    raw = _raw(args, key)
    value = raw.strip() if isinstance(raw, str) else None
    if not value:
        if required:
            raise ToolInputError(f"{label or key} required")
        return None
    return value


_LEADING_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


@overload
def read_number(args: Mapping[str, Any], key: str, *, integer: Literal[True],
                aliases: Iterable[str] = ()) -> int | None: ...
@overload
def read_number(args: Mapping[str, Any], key: str, *, integer: bool = False,
                aliases: Iterable[str] = ()) -> float | int | None: ...
def read_number(args: Mapping[str, Any], key: str, *, integer: bool = False,
                aliases: Iterable[str] = ()) -> float | int | None:
    """A number parameter: finite numbers, or strings that start with one (``"5"``, ``" 2.9 "``).

    Anything else counts as absent, as in OpenClaw.  ``integer`` truncates toward zero (an
    ``int | None`` to a type checker too).
    """
    raw = _raw(args, key, aliases)
    value: float | None = None
    if isinstance(raw, bool):
        value = None
    elif isinstance(raw, int | float):
        try:
            value = float(raw)
        except OverflowError:  # an integer of hundreds of digits: JavaScript's Infinity, so absent
            value = None
    elif isinstance(raw, str):
        match = _LEADING_NUMBER.match(raw.strip())
        value = float(match.group(0)) if match else None
    if value is None or not math.isfinite(value):
        return None
    return math.trunc(value) if integer else value


# --- citations -----------------------------------------------------------------------------------


def resolve_citations_mode(value: Any) -> CitationsMode:
    """``memory.citations`` as one of auto/on/off; anything else is ``auto`` (R§10.1)."""
    mode = str(value).strip().lower() if value is not None else ""
    return mode if mode in ("auto", "on", "off") else "auto"  # type: ignore[return-value]


def parse_session_key(session_key: str | None) -> tuple[str, str] | None:
    """``agent:<id>:<rest>`` → ``(id, rest)`` (lowercased); anything else → ``None``."""
    raw = session_key.strip().lower() if isinstance(session_key, str) else ""  # 5 read as "'int' has no strip"
    parts = [p for p in raw.split(":") if p]
    if len(parts) < 3 or parts[0] != "agent":
        return None
    agent_id, rest = parts[1].strip(), ":".join(parts[2:])
    return (agent_id, rest) if agent_id and rest else None


def chat_type_from_session_key(session_key: str | None) -> ChatType:
    """``channel`` or ``group`` if the key says so, else ``direct`` (also for no/odd keys)."""
    parsed = parse_session_key(session_key)
    if parsed is None:
        return "direct"
    tokens = {t for t in parsed[1].split(":") if t}
    if "channel" in tokens:
        return "channel"
    if "group" in tokens:
        return "group"
    return "direct"


def should_include_citations(mode: Any, session_key: str | None) -> bool:
    resolved = resolve_citations_mode(mode)
    if resolved == "on":
        return True
    if resolved == "off":
        return False
    return chat_type_from_session_key(session_key) == "direct"


def format_citation(path: str, start_line: int, end_line: int) -> str:
    """``path#L5`` for one line, ``path#L5-L7`` for a range."""
    return f"{path}#L{start_line}" if start_line == end_line else f"{path}#L{start_line}-L{end_line}"


def decorate_citations(results: list[dict[str, Any]], include: bool) -> list[dict[str, Any]]:
    """Add ``citation`` and a ``Source:`` line to each snippet, or drop ``citation`` entirely."""
    from memdir.textutil import spelled_out

    out = []
    for entry in results:
        item = {k: v for k, v in entry.items() if k != "citation"}
        if include:  # the path spelt out: a line break in a name forged a "Source:" line of its own
            citation = format_citation(spelled_out(str(item["path"])), item["startLine"], item["endLine"])
            item["citation"] = citation
            item["snippet"] = f"{str(item.get('snippet', '')).strip()}\n\nSource: {citation}"
        out.append(item)
    return out


def clamp_results_by_chars(results: list[dict[str, Any]], budget: int | None, *,
                           query: str = "") -> list[dict[str, Any]]:
    """Keep whole snippets while they fit ``budget`` characters, cut the first that does not, stop.

    OpenClaw applies this to its QMD backend (``maxInjectedChars``); memdir offers it to any
    caller that must bound how much memory text reaches the model.  The snippet cut keeps the
    lines that hold the most of ``query``'s words, as a snippet cut to 700 characters does: cut
    from its start, a section's first lines were kept and the line that answered was dropped.
    """
    if not budget or budget <= 0:
        return results
    from memdir.query import keyword_terms
    from memdir.search import truncate_snippet

    terms = keyword_terms(query) if query else []
    remaining = budget
    out: list[dict[str, Any]] = []
    for entry in results:
        if remaining <= 0:
            break
        snippet = str(entry.get("snippet") or "")
        if len(snippet) <= remaining:
            out.append(entry)
            remaining -= len(snippet)
        else:
            out.append({**entry, "snippet": truncate_snippet(snippet, remaining, terms)})
            break
    return out


# --- failures ------------------------------------------------------------------------------------

#: Quota or HTTP 429 named as such: not inside a path or a name (a temporary folder ``pytest-429/``
#: gave an index conflict the quota advice).
_QUOTA = re.compile(r"insufficient_quota|(?<![\w/.-])(?:quota|429)(?![\w/-])")


def search_unavailable_payload(error: Any = None) -> dict[str, Any]:
    """The ``memory_search`` failure payload (R§10.1): quota errors get their own advice."""
    reason = str(error).strip() if error is not None else ""
    reason = reason or "memory search unavailable"
    quota = bool(_QUOTA.search(reason.lower()))
    return {
        "results": [],
        "disabled": True,
        "unavailable": True,
        "error": reason,
        "warning": ("Memory search is unavailable because the embedding provider quota is exhausted." if quota
                    else "Memory search is unavailable due to an embedding/provider error."),
        "action": ("Top up or switch embedding provider, then retry memory_search." if quota
                   else "Check embedding provider configuration and retry memory_search."),
    }


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        from memdir.errors import OUT_OF_MEMORY

        return OUT_OF_MEMORY
    text = str(exc).strip()
    return text or type(exc).__name__


SEARCH_DISABLED = "memory search is disabled in the configuration (memorySearch.enabled = false)"


def _enabled(memory: Any) -> bool:
    try:
        return bool(memory.settings.memory_search.enabled)
    except AttributeError:
        return True


# --- the tools -----------------------------------------------------------------------------------

MAX_RESULTS_CAP = 50


def search_params(args: Mapping[str, Any]) -> tuple[str, int | None, float | None]:
    """``memory_search``'s ``(query, maxResults, minScore)`` from its arguments, as every surface
    reads them (``limit``/``k`` are ``maxResults`` too, clamped to 1..50); a missing or blank
    query raises :class:`ToolInputError` "query required".  ``memdir chat``'s loop read only
    ``maxResults``: ``{"limit": 2}`` returned 2 results over MCP and 6 there."""
    query = read_string(args, "query", required=True)
    max_results = read_number(args, "maxResults", integer=True, aliases=("limit", "k"))
    if max_results is not None:
        max_results = max(1, min(MAX_RESULTS_CAP, int(max_results)))
    return query, max_results, read_number(args, "minScore")


def memory_search_payload(memory: Any, args: Any = None, *, session_key: str | None = None,
                          citations: str | None = None, max_injected_chars: int | None = None) -> dict[str, Any]:
    """Run ``memory_search``; the payload of R§10.1 (plus memdir's ``stale``/``warnings``).

    ``citations`` overrides ``memory.citations``; ``max_injected_chars`` bounds the total
    snippet text (see :func:`clamp_results_by_chars`).
    """
    try:
        query, max_results, min_score = search_params(parse_args(args))
    except ToolInputError as exc:
        return {"results": [], "error": str(exc)}
    if memory is None:
        return search_unavailable_payload(None)
    if not _enabled(memory):
        payload = search_unavailable_payload(SEARCH_DISABLED)
        payload["warning"] = "Memory search is disabled in the memdir configuration."
        payload["action"] = "Set memorySearch.enabled = true, then retry memory_search."
        return payload
    try:
        mode = resolve_citations_mode(citations if citations is not None else memory.settings.memory.citations)
        include = should_include_citations(mode, session_key)
        response = memory.search(query, max_results=max_results, min_score=min_score)
        raw = response.as_dict()
        payload: dict[str, Any] = {
            "results": clamp_results_by_chars(decorate_citations(raw["results"], include), max_injected_chars,
                                              query=query),
            "provider": raw.get("provider"),
            "model": raw.get("model"),
        }
        if raw.get("fallback"):
            payload["fallback"] = raw["fallback"]
        payload["citations"] = mode
        payload["mode"] = raw.get("mode")
        if raw.get("stale"):
            payload["stale"] = True
        if raw.get("warnings"):
            payload["warnings"] = list(raw["warnings"])
        return payload
    except Exception as exc:  # a tool never raises into the agent
        return search_unavailable_payload(_error_text(exc))


def memory_get_payload(memory: Any, args: Any = None) -> dict[str, Any]:
    """Run ``memory_get``; ``{text, path}``, or ``{path, text: "", disabled: true, error}``."""
    requested = ""
    try:
        params = parse_args(args)
        raw_path = _raw(params, "path", ("file", "relPath", "rel_path"))
        requested = raw_path.strip() if isinstance(raw_path, str) else ""
        if not requested:
            raise ToolInputError("path required")
        start = read_number(params, "from", integer=True, aliases=("from_", "fromLine", "from_line", "startLine",
                                                                   "start_line"))
        count = read_number(params, "lines", integer=True, aliases=("numLines", "num_lines"))
        if memory is None:
            raise RuntimeError("memory unavailable")
        if not _enabled(memory):
            raise RuntimeError(SEARCH_DISABLED)
        got = memory.get(requested, from_line=start, lines=count)
        return {"text": got.text, "path": got.path}
    except Exception as exc:
        return {"path": requested, "text": "", "disabled": True, "error": _error_text(exc)}


#: The longest note ``memory_append`` takes from a model: "one short, self-contained entry".  A
#: runaway model appended megabytes to the user's daily log, past 64 MB no longer indexable.
MAX_APPEND_CHARS = 20_000


def append_too_long(text: str) -> str | None:
    """Why a model's note is refused for its length, or ``None``."""
    if len(text) <= MAX_APPEND_CHARS:
        return None
    return f"note too long ({len(text)} characters, at most {MAX_APPEND_CHARS}): append one short note"


def append_refusal(text: str) -> str | None:
    """Why a model's note is refused (too long; only the silent or heartbeat token), or ``None``.
    Why the tokens: a model told "if nothing to store, reply with NO_REPLY" that called
    ``memory_append("NO_REPLY")`` (small local models do, in the flush) wrote a note 'NO_REPLY' to
    the daily log, indexed and quoted into every later session (the agent loop and MCP alike)."""
    if (too_long := append_too_long(text)) is not None:
        return too_long
    from memdir.sessions.flush import HEARTBEAT_TOKEN, SILENT_REPLY_TOKEN

    if text.strip() in (SILENT_REPLY_TOKEN, HEARTBEAT_TOKEN):
        return (f"{text.strip()} is a reply, not a note: nothing written (reply with it instead when there is "
                "nothing to store)")
    return None


def model_note(text: str) -> str:
    """A model's note with its secrets masked as ``memory_store`` masks them (a key, a password,
    one stated in prose).  Why: a model told a key put it in today's log as said, and the log is
    quoted into every session started today and tomorrow, and indexed (and embedded remotely);
    ``memdir append``, the user's own note, is kept as written."""
    from memdir.ltm.capture import mask_stated_secrets
    from memdir.redact import redact_text

    return mask_stated_secrets(redact_text(text))


def memory_append_payload(memory: Any, args: Any = None) -> dict[str, Any]:
    """Run ``memory_append``; ``{path, appended: true}`` or ``{path, appended: false, error}``."""
    try:
        params = parse_args(args)
        raw_text = _raw(params, "text", ("content", "note"))
        if not isinstance(raw_text, str) or not raw_text.strip():
            raise ToolInputError("text required")
        if (refused := append_refusal(raw_text)) is not None:
            raise ToolInputError(refused)
        if memory is None:
            raise RuntimeError("memory unavailable")
        rel = memory.append_daily(model_note(raw_text))
        return {"path": rel, "appended": True}
    except Exception as exc:
        return {"path": "", "appended": False, "error": _error_text(exc)}


def tool_name(name: Any) -> str:
    """The tool a model named, trimmed; ``""`` for a name that is not a string (a model's ``123``
    raised AttributeError out of :func:`call_tool`, which must never raise)."""
    return name.strip() if isinstance(name, str) else ""


def sync_memory(memory: Any) -> Any:
    """``memory``, or the ``Memory`` of a :class:`memdir.aio.AsyncMemory` given in its place.  Why:
    an AsyncMemory's methods return coroutines, which were taken for their results: memory_append
    answered ``appended: true`` with a coroutine for its path and wrote nothing (a RuntimeWarning
    said it was never awaited), memory_get "'coroutine' object has no attribute 'text'"."""
    aio = sys.modules.get("memdir.aio")  # (there is no AsyncMemory unless its module was imported)
    return memory.memory if aio is not None and isinstance(memory, aio.AsyncMemory) else memory


def call_tool_payload(memory: Any, name: str, args: Any = None, *, session_key: str | None = None) -> dict[str, Any]:
    """Run the named tool and return its plain payload dict (never raises).  ``memory``: a
    ``Memory`` (or an ``AsyncMemory``, whose Memory is called here, in this thread); ``name``,
    ``args`` and ``session_key`` as :func:`call_tool`'s."""
    memory = sync_memory(memory)
    tool = tool_name(name)
    if tool == "memory_search":
        return memory_search_payload(memory, args, session_key=session_key)
    if tool == "memory_get":
        return memory_get_payload(memory, args)
    if tool == "memory_append":
        return memory_append_payload(memory, args)
    if tool in LTM_TOOL_NAMES:
        return call_tool(memory, tool, args, session_key=session_key).payload
    return {"error": f"unknown tool: {name!r} (memdir provides {', '.join(TOOL_NAMES)})"}


def call_tool(memory: Any, name: str, args: Any = None, *, session_key: str | None = None) -> ToolResult:
    """Run the named tool: ``{content: [{type: "text", text}], details: payload}`` (never raises).

    ``memory``: a ``Memory`` (or an ``AsyncMemory``); ``name``: the tool the model called (an
    unknown one is an error payload); ``args``: its arguments, a dict or the JSON text OpenAI
    sends (``None``: none); ``session_key``: the chat's (``agent:main:slack:channel:c1``), so
    citations follow the chat type (with ``memory.citations = "auto"`` only direct chats get
    ``Source:`` lines).

    The long-term memory tools (:data:`LTM_TOOL_NAMES`) run on ``memory.long_term`` (or on a
    :class:`memdir.ltm.LongTermMemory` passed as ``memory``); their text is written for the model.
    """
    if (tool := tool_name(name)) in LTM_TOOL_NAMES:
        from memdir.ltm.tools import call_ltm_tool

        return call_ltm_tool(sync_memory(memory), tool, args)
    return tool_result(call_tool_payload(memory, name, args, session_key=session_key))


__all__ = [
    "APPEND_DESCRIPTION",
    "GET_DESCRIPTION",
    "LTM_TOOL_NAMES",
    "MAX_APPEND_CHARS",
    "SEARCH_DESCRIPTION",
    "TOOL_NAMES",
    "TOOL_SPECS",
    "ToolInputError",
    "ToolResult",
    "ToolSpec",
    "anthropic_tools",
    "append_refusal",
    "append_too_long",
    "call_tool",
    "call_tool_payload",
    "chat_type_from_session_key",
    "chosen_tools",
    "clamp_results_by_chars",
    "decorate_citations",
    "format_citation",
    "is_error_payload",
    "memory_append_payload",
    "memory_get_payload",
    "memory_search_payload",
    "openai_tools",
    "parse_args",
    "parse_session_key",
    "read_number",
    "read_string",
    "resolve_citations_mode",
    "search_params",
    "search_unavailable_payload",
    "should_include_citations",
    "sync_memory",
    "tool_name",
    "tool_result",
    "tool_spec",
]
