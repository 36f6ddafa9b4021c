"""The long-term memory tools: ``memory_recall``, ``memory_store``, ``memory_forget`` (R§14).

Parameters, result texts, thresholds and ``details`` payloads are OpenClaw's; the schemas use
:class:`memdir.tools.ToolSpec`, so ``memdir.tools.openai_tools(LTM_TOOL_NAMES)`` and
``anthropic_tools(...)`` give both hosts' shapes, and ``memdir.tools.call_tool`` dispatches
here.  Results are ``{content: [{type: "text", text}], details}`` where, as in OpenClaw, the
text is written for the model ("Found 2 memories: …") and ``details`` is the structured payload.

Like every memdir tool these never raise: a missing extra, a bad id or a provider outage comes
back as a text that says so and ``details.error``.

memdir's differences: ``memory_store`` without a category uses ``detect_category`` (OpenClaw:
"other"), so a stated preference can supersede an older one; ``memory_forget`` accepts the
8-character id prefix its own candidate list shows (OpenClaw shows 8 characters but needs the
full UUID) and says when an id matches nothing (OpenClaw reports success); ``memory_store``
masks secrets as transcripts mask them (:func:`memdir.redact.redact_text`), and ones stated in
prose ("the wifi password is …", :func:`memdir.ltm.capture.mask_stated_secrets`): a model asked to
remember a key must not put it in every later prompt and in the indexed mirror.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from memdir.errors import without_source_location
from memdir.ltm.capture import CATEGORIES, mask_stated_secrets, one_line
from memdir.redact import redact_text
from memdir.tools import ToolInputError, ToolResult, ToolSpec, _raw, parse_args, read_number, read_string, tool_name

RECALL_DESCRIPTION = (
    "Search long-term memory: preferences, facts, decisions and people the user shared in earlier "
    "conversations. Use it when an answer may depend on what the user told you before. Returns the closest "
    "memories with their category and similarity."
)
STORE_DESCRIPTION = (
    "Save something to long-term memory so it is known in future conversations: a preference, a fact about "
    "the user or their work, a decision, a person or contact detail. One short, self-contained statement per "
    "call; no secrets. A near-identical memory is not stored twice, and a newer statement replaces a close older "
    "one of the same category."
)
FORGET_DESCRIPTION = (
    "Delete a long-term memory, by memoryId or by query. With a query, a single strong match is deleted; "
    "otherwise the candidates are listed with their ids so you can choose. Use it when the user asks you to "
    "forget something or a memory is wrong."
)

RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for."},
        "limit": {"type": "number", "description": "Maximum memories to return (default 5)."},
    },
    "required": ["query"],
}
STORE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The memory, e.g. 'The user prefers dark mode.'"},
        "importance": {"type": "number", "description": "0-1 (default 0.7)."},
        "category": {"type": "string", "enum": list(CATEGORIES),
                     "description": "Kind of memory; detected from the text when omitted."},
    },
    "required": ["text"],
}
FORGET_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Find the memory to forget by meaning."},
        "memoryId": {"type": "string", "description": "The id of the memory to forget (or its first 8 characters)."},
    },
}

LTM_TOOL_SPECS: dict[str, ToolSpec] = {
    "memory_recall": ToolSpec("memory_recall", RECALL_DESCRIPTION, RECALL_PARAMETERS),
    "memory_store": ToolSpec("memory_store", STORE_DESCRIPTION, STORE_PARAMETERS, read_only=False),
    "memory_forget": ToolSpec("memory_forget", FORGET_DESCRIPTION, FORGET_PARAMETERS, read_only=False),
}
LTM_TOOL_NAMES: tuple[str, ...] = tuple(LTM_TOOL_SPECS)
MAX_LIMIT = 50


def _result(text: str, details: dict[str, Any]) -> ToolResult:
    return ToolResult(content=[{"type": "text", "text": text}], details=details)


def _percent(score: float) -> int:
    return math.floor(score * 100 + 0.5)  # JavaScript's Math.round


def _failure(exc: BaseException) -> ToolResult:
    message = without_source_location(str(exc).strip()) or type(exc).__name__
    return _result(f"Long-term memory error: {message}", {"error": message})


def _reports_recovery(tool: Callable[..., ToolResult]) -> Callable[..., ToolResult]:
    """Add to ``details.warnings`` what recovering a damaged table during the call did (once)."""

    @functools.wraps(tool)
    def run(target: Any, args: Any = None, **kwargs: Any) -> ToolResult:
        try:
            ltm = _long_term(target)
        except Exception:  # the tool itself reports it
            return tool(target, args, **kwargs)
        before = len(getattr(ltm, "recoveries", None) or [])
        result = tool(target, args, **kwargs)
        done = list(getattr(ltm, "recoveries", None) or [])[before:]
        if done:
            result["details"].setdefault("warnings", []).extend(str(info.get("message")) for info in done)
        return result

    return run


def _long_term(target: Any) -> Any:
    """A LongTermMemory from itself or from a :class:`memdir.Memory` (its ``long_term``)."""
    if target is None:
        raise RuntimeError("long-term memory unavailable")
    return getattr(target, "long_term", target)


@_reports_recovery
def memory_recall(target: Any, args: Any = None) -> ToolResult:
    """Search (limit 5, min score 0.1); "Found N memories:" with ``i. [category] text (NN%)`` lines."""
    try:
        params = parse_args(args)
        query = read_string(params, "query", required=True)
        limit = read_number(params, "limit", integer=True, aliases=("maxResults", "max_results"))
        limit = 5 if limit is None else max(1, min(MAX_LIMIT, int(limit)))
        from memdir.ltm.memory import RECALL_MIN_SCORE

        hits = _long_term(target).search(str(query), limit=limit, min_score=RECALL_MIN_SCORE)
    except ToolInputError as exc:
        return _result(str(exc), {"error": str(exc)})
    except Exception as exc:
        return _failure(exc)
    if not hits:
        return _result("No relevant memories found.", {"count": 0})
    lines = [f"{i}. [{h.category}] {one_line(h.text)} ({_percent(h.score or 0.0)}%)" for i, h in enumerate(hits, 1)]
    memories = [{"id": h.id, "text": h.text, "category": h.category, "importance": round(h.importance, 4),
                 "score": round(float(h.score or 0.0), 4)} for h in hits]
    return _result(f"Found {len(hits)} memories:\n\n" + "\n".join(lines), {"count": len(hits), "memories": memories})


@_reports_recovery
def memory_store(target: Any, args: Any = None, *, source: str = "tool") -> ToolResult:
    """Store unless a memory scores ≥ 0.95 ("Similar memory already exists"); report supersessions."""
    try:
        params = parse_args(args)
        raw = _raw(params, "text", ("content", "memory"))
        if not isinstance(raw, str) or not raw.strip():
            raise ToolInputError("text required")
        importance = read_number(params, "importance")
        importance = 0.7 if importance is None else min(1.0, max(0.0, float(importance)))
        category = read_string(params, "category")
        if category is not None and category.lower() not in CATEGORIES:
            raise ToolInputError(f"unknown category {category!r} (expected one of {', '.join(CATEGORIES)})")
        result = _long_term(target).store(mask_stated_secrets(redact_text(raw.strip())), importance=importance,
                                          category=category.lower() if category else None, source=source)
    except ToolInputError as exc:
        return _result(str(exc), {"error": str(exc)})
    except Exception as exc:
        return _failure(exc)
    details = result.as_dict()
    if result.action == "duplicate":
        return _result(f'Similar memory already exists: "{result.record.text}"', details)
    text = f'Stored: "{result.record.text[:100]}..."'
    if result.superseded:
        olds = "; ".join(f'"{r.text[:60]}"' for r in result.superseded)
        text += f" It supersedes {len(result.superseded)} older memory(ies): {olds}"
    return _result(text, details)


@_reports_recovery
def memory_forget(target: Any, args: Any = None) -> ToolResult:
    """Forget by ``memoryId``, or by ``query``: one match > 0.9 is deleted, else candidates are listed."""
    try:
        params = parse_args(args)
        memory_id = read_string(params, "memoryId", label="memoryId")
        if memory_id is None:
            memory_id = read_string(params, "id")
        query = read_string(params, "query")
        if memory_id is None and query is None:
            return _result("Provide query or memoryId.", {"error": "missing_param"})
        ltm = _long_term(target)
        result = ltm.forget(memory_id) if memory_id is not None else ltm.forget(query=query)
    except ToolInputError as exc:
        return _result(str(exc), {"error": str(exc)})
    except Exception as exc:
        message = str(exc)
        if message.startswith("Invalid memory ID format"):
            return _result(message, {"error": "invalid_id"})
        return _failure(exc)
    if result.action == "deleted" and result.record is not None:
        details: dict[str, Any] = {"action": "deleted", "id": result.record.id}
        if result.warnings:  # the mirror moved aside or left alone: memory_store says so, forget did not
            details["warnings"] = list(result.warnings)
        if memory_id is not None:
            return _result(f"Memory {result.record.id} forgotten.", details)
        return _result(f'Forgotten: "{result.record.text}"', details)
    if result.action == "not_found":
        return _result(f"No memory with id {memory_id}.", {"action": "not_found", "id": memory_id})
    if result.action == "none_matched":
        return _result("No matching memories found.", {"found": 0})
    lines = [f"- [{c.id[:8]}] {one_line(c.text)[:60]}..." for c in result.candidates]
    candidates = [{"id": c.id, "text": c.text, "category": c.category, "score": round(float(c.score or 0.0), 4)}
                  for c in result.candidates]
    return _result(f"Found {len(candidates)} candidates. Specify memoryId:\n" + "\n".join(lines),
                   {"action": "candidates", "candidates": candidates})


def call_ltm_tool(target: Any, name: str, args: Any = None) -> ToolResult:
    """Run one of the three tools on a LongTermMemory (or a Memory's ``long_term``); never raises."""
    tool = tool_name(name)
    if tool == "memory_recall":
        return memory_recall(target, args)
    if tool == "memory_store":
        return memory_store(target, args)
    if tool == "memory_forget":
        return memory_forget(target, args)
    return _result(f"unknown tool: {name!r}", {"error": f"unknown tool: {name!r} (long-term memory provides "
                                                        f"{', '.join(LTM_TOOL_NAMES)})"})


__all__ = ["LTM_TOOL_NAMES", "LTM_TOOL_SPECS", "call_ltm_tool", "memory_forget", "memory_recall", "memory_store"]
