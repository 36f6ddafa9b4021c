"""Pre-compaction memory flush as a small library contract (R§11, R§18.8).

Before a session is compacted, the agent gets one extra turn asking it to write durable notes to
``memory/YYYY-MM-DD.md``.  This module decides *whether* that turn should run
(``should_flush``), builds its prompts (``build_flush_plan``), recognises the silent reply
(``is_silent_reply``), writes notes safely (``append_daily_note``) and records that the flush
happened (``claim_flush`` before the turn, so two agents on one session never both run it;
``release_flush`` if it failed before writing; ``mark_flushed`` after).  Running the turn itself
is the caller's job (see ``memdir.agent``).

Differences from OpenClaw, on purpose: "not yet flushed" is ``memoryFlushCompactionCount`` unset
or below ``compactionCount`` — so a session that was never compacted and never flushed does
flush once (#47143) — and a stored count with no ``memoryFlushAt`` (written by something other
than a flush) is not mistaken for a flush.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from memdir.config import DEFAULT_CONTEXT_TOKENS, parse_byte_size
from memdir.daily import coerce_date, daily_rel_path, local_time, resolve_timezone, today
from memdir.memfiles import append_memory_file
from memdir.sessions.store import SessionEntry, SessionStore, now_ms

SILENT_REPLY_TOKEN = "NO_REPLY"
HEARTBEAT_TOKEN = "HEARTBEAT_OK"
DEFAULT_FORCE_FLUSH_TRANSCRIPT_BYTES = 2 * 1024 * 1024
NO_REPLY_SUFFIX = "\n\nIf no user-visible reply is needed, start with NO_REPLY."
DATE_PLACEHOLDER = "YYYY-MM-DD"

# R§11 [v4.12] hints; each is appended (after a blank line) to a prompt that lacks it.
HINT_TARGET = "Store durable memories only in memory/YYYY-MM-DD.md (create memory/ if needed)."
HINT_APPEND = (
    "If memory/YYYY-MM-DD.md already exists, APPEND new content only and do not overwrite existing entries."
)
HINT_READ_ONLY = (
    "Treat workspace bootstrap/reference files such as MEMORY.md, DREAMS.md, SOUL.md, TOOLS.md, and "
    "AGENTS.md as read-only during this flush; never overwrite, replace, or edit them."
)
REQUIRED_HINTS = (HINT_TARGET, HINT_APPEND, HINT_READ_ONLY)

DEFAULT_FLUSH_PROMPT = " ".join([
    "Pre-compaction memory flush.",
    HINT_TARGET,
    HINT_READ_ONLY,
    HINT_APPEND,
    "Do NOT create timestamped variant files (e.g., YYYY-MM-DD-HHMM.md); always use the canonical "
    "YYYY-MM-DD.md filename.",
    "If nothing to store, reply with NO_REPLY.",
])
DEFAULT_FLUSH_SYSTEM_PROMPT = " ".join([
    "Pre-compaction memory flush turn.",
    "The session is near auto-compaction; capture durable memories to disk.",
    HINT_TARGET,
    HINT_READ_ONLY,
    HINT_APPEND,
    "You may reply, but usually NO_REPLY is correct.",
])


# --- settings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlushSettings:
    """The resolved ``compaction`` settings the flush needs (R§11.1)."""

    enabled: bool = True
    soft_threshold_tokens: int = 4000
    reserve_tokens_floor: int = 20_000
    force_flush_transcript_bytes: int = DEFAULT_FORCE_FLUSH_TRANSCRIPT_BYTES
    prompt: str | None = None
    system_prompt: str | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> FlushSettings:
        comp = settings.compaction
        mf = comp.memory_flush
        return cls(
            enabled=mf.enabled,
            soft_threshold_tokens=max(0, int(mf.soft_threshold_tokens)),
            reserve_tokens_floor=max(0, int(comp.reserve_tokens_floor)),
            force_flush_transcript_bytes=resolve_force_flush_bytes(mf.force_flush_transcript_bytes),
            prompt=mf.prompt,
            system_prompt=mf.system_prompt,
        )


def resolve_force_flush_bytes(value: int | float | str | None) -> int:
    """R§11.3: unset or unparsable → 2 MiB; ``"512kb"`` → 524288; 0 disables (vector 62)."""
    return parse_byte_size(value, DEFAULT_FORCE_FLUSH_TRANSCRIPT_BYTES)


def resolve_context_window(value: float | None, entry: SessionEntry | None = None) -> int:
    """``max(1, floor(model context ?? agent contextTokens ?? 200000))`` (R§11.2)."""
    for candidate in (value, entry.context_tokens if entry else None):
        if candidate is not None and math.isfinite(candidate):
            return max(1, math.floor(candidate))
    return DEFAULT_CONTEXT_TOKENS


def flush_threshold(context_window: int, reserve_tokens_floor: int, soft_threshold_tokens: int) -> int:
    """Token count at which the flush runs; 0 means "never" (vector 59)."""
    return max(0, context_window - reserve_tokens_floor - soft_threshold_tokens)


# --- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FlushDecision:
    """Whether to run the flush turn now, and why (truthy when it should run)."""

    run: bool
    reason: str
    total_tokens: int | None = None
    threshold: int = 0

    def __bool__(self) -> bool:
        return self.run


def already_flushed(entry: SessionEntry | None) -> bool:
    """True if a flush already ran in the current compaction cycle (R§18.8 fixed)."""
    if entry is None or entry.memory_flush_compaction_count is None:
        return False
    if entry.memory_flush_at is None:  # a count nobody's flush wrote (e.g. initialised to 0)
        return False
    return entry.memory_flush_compaction_count >= (entry.compaction_count or 0)


def fresh_total_tokens(entry: SessionEntry | None) -> int | None:
    """The persisted token total if it can be trusted (finite, ≥ 0, not marked stale)."""
    if entry is None or entry.total_tokens is None or entry.total_tokens_fresh is False:
        return None
    total = entry.total_tokens
    return total if isinstance(total, int) and total >= 0 else None


def should_flush(
    entry: SessionEntry | None,
    *,
    settings: FlushSettings | None = None,
    context_window: float | None = None,
    transcript_bytes: int | None = None,
    pending_prompt_tokens: int = 0,
    is_heartbeat: bool = False,
    workspace_writable: bool = True,
    cli_provider: bool = False,
    context_overflow: bool = False,
) -> FlushDecision:
    """Decide whether the pre-compaction flush turn runs before the next reply.

    ``entry``: the session's entry (its ``totalTokens``, its last flush; ``None``: no count, so only
    the other triggers); ``settings``: ``FlushSettings.from_settings(memdir_settings)`` (``None``:
    the defaults); ``context_window``: the model's context in tokens (``None``: the entry's
    ``contextTokens``, else 200,000).  No flush for an ``is_heartbeat`` turn, a workspace that is
    not ``workspace_writable``, or with a ``cli_provider`` (a CLI-backed model: R§11.2).
    ``pending_prompt_tokens`` is an estimate of the user message about to be sent (v4.12 adds
    it to the persisted total).  ``transcript_bytes`` enables the transcript-size trigger.
    ``context_overflow``: the model's API refused the conversation as longer than its context,
    and it is about to be compacted: past every threshold, whatever the counts say (a model whose
    context is smaller than ``contextTokens`` never reached them, and compacting without the flush
    lost what the older turns said: OpenClaw #114081).
    """
    cfg = settings or FlushSettings()
    if not cfg.enabled:
        return FlushDecision(False, "disabled")
    if is_heartbeat:
        return FlushDecision(False, "heartbeat")
    if not workspace_writable:
        return FlushDecision(False, "read-only-workspace")
    if cli_provider:
        return FlushDecision(False, "cli-provider")
    window = resolve_context_window(context_window, entry)
    threshold = flush_threshold(window, cfg.reserve_tokens_floor, cfg.soft_threshold_tokens)
    total = fresh_total_tokens(entry)
    projected = None if total is None else total + max(0, pending_prompt_tokens)
    limit = cfg.force_flush_transcript_bytes
    if context_overflow:
        trigger = "context-overflow"
    elif threshold > 0 and projected is not None and projected > 0 and projected >= threshold:
        trigger = "tokens"
    elif limit > 0 and transcript_bytes is not None and transcript_bytes >= limit:
        trigger = "transcript-size"
    elif threshold == 0:
        return FlushDecision(False, "threshold-zero", projected, threshold)
    else:
        return FlushDecision(False, "below-threshold" if projected else "no-token-count", projected, threshold)
    if already_flushed(entry):
        return FlushDecision(False, "already-flushed-this-cycle", projected, threshold)
    return FlushDecision(True, trigger, projected, threshold)


def mark_flushed(store: SessionStore, key: str, *, compaction_count: int | None = None,
                 context_hash: str | None = None, at_ms: int | None = None) -> SessionEntry:
    """Persist ``memoryFlushAt`` and ``memoryFlushCompactionCount`` after a flush turn.

    Pass the compaction count *after* the flush turn (if a compaction finished during it, the
    caller has already incremented it); by default the entry's current count is used.
    """

    def apply(entries: dict[str, SessionEntry]) -> SessionEntry:
        entry = entries[key]
        data = entry.model_dump()
        data["memory_flush_at"] = at_ms if at_ms is not None else now_ms()
        data["memory_flush_compaction_count"] = (
            compaction_count if compaction_count is not None else (entry.compaction_count or 0)
        )
        if context_hash is not None:
            data["memory_flush_context_hash"] = context_hash
        data["updated_at"] = now_ms()
        entries[key] = SessionEntry.model_validate(data)
        return entries[key]

    return store.mutate(apply)


def claim_flush(store: SessionStore, key: str, *, at_ms: int | None = None) -> SessionEntry | None:
    """Mark the current cycle flushed *before* the flush turn, atomically, unless it already is.

    Returns the entry as it was (for :func:`release_flush`), or None when this cycle was already
    flushed (or the session is unknown): then the caller must not run the turn.  Deciding on a
    cached entry and marking afterwards let two agents on one session both run the flush of a cycle
    and append the same notes twice.
    """

    def apply(entries: dict[str, SessionEntry]) -> SessionEntry | None:
        entry = entries.get(key)
        if entry is None or already_flushed(entry):
            return None
        data = entry.model_dump()
        data["memory_flush_at"] = at_ms if at_ms is not None else now_ms()
        data["memory_flush_compaction_count"] = entry.compaction_count or 0
        data["updated_at"] = now_ms()
        entries[key] = SessionEntry.model_validate(data)
        return entry

    return store.mutate(apply)


def release_flush(store: SessionStore, key: str, previous: SessionEntry) -> SessionEntry | None:
    """Undo :func:`claim_flush` for a flush turn that failed before writing anything, so the next turn
    runs it again; the flush fields go back to ``previous``'s (other fields stay as they are now)."""

    def apply(entries: dict[str, SessionEntry]) -> SessionEntry | None:
        entry = entries.get(key)
        if entry is None:
            return None
        data = entry.model_dump()
        data["memory_flush_at"] = previous.memory_flush_at
        data["memory_flush_compaction_count"] = previous.memory_flush_compaction_count
        data["updated_at"] = now_ms()
        entries[key] = SessionEntry.model_validate(data)
        return entries[key]

    return store.mutate(apply)


# --- prompts --------------------------------------------------------------------------------


def flush_target_path(day: date | datetime | str) -> str:
    """The one file a flush may write: ``memory/YYYY-MM-DD.md`` (relative to the workspace)."""
    if isinstance(day, datetime):
        day = day.date()
    return daily_rel_path(coerce_date(day))


def current_time_line(now: datetime | None = None, timezone: str | None = None) -> str:
    """``Current time: <local time> (<IANA tz>) / <YYYY-MM-DD HH:MM> UTC``."""
    tz, name = resolve_timezone(timezone)
    local = local_time(now, tz)
    utc = local.astimezone(UTC)
    hour = local.hour % 12 or 12
    pretty = f"{local:%A}, {local:%B} {local.day}, {local.year}, {hour}:{local:%M} {'AM' if local.hour < 12 else 'PM'}"
    return f"Current time: {pretty} ({name}) / {utc:%Y-%m-%d %H:%M} UTC"


def ensure_no_reply(text: str) -> str:
    """A prompt that never mentions NO_REPLY gets the R§11.1 suffix."""
    return text if SILENT_REPLY_TOKEN in text else text + NO_REPLY_SUFFIX


def ensure_hints(text: str) -> str:
    """Append each of the three v4.12 safety hints the text lacks, after a blank line."""
    for hint in REQUIRED_HINTS:
        if hint not in text:
            text = text + "\n\n" + hint
    return text


def render_flush_text(
    template: str, *, now: datetime | None = None, timezone: str | None = None, time_line: bool = True
) -> str:
    """Replace every ``YYYY-MM-DD`` with the local date, right-trim, add the time line once."""
    day = today(timezone, now=now, strict=False).isoformat()
    text = template.replace(DATE_PLACEHOLDER, day).rstrip()
    if time_line and "Current time:" not in text:
        text += "\n" + current_time_line(now, timezone)
    return text


@dataclass(frozen=True)
class FlushPlan:
    """What the flush turn sends, and the only file it may write."""

    prompt: str
    system_prompt: str
    relative_path: str
    day: date


def build_flush_plan(
    settings: FlushSettings | None = None, *, now: datetime | None = None, timezone: str | None = None
) -> FlushPlan:
    """Prompts as R§11 [v4.12]: configured (trimmed) or default text, hints, NO_REPLY, date, time.

    ``settings``: as :func:`should_flush`'s; ``now`` and ``timezone`` (an IANA name; ``None``: the
    machine's zone) give the date the prompt names and the one file it may write."""
    cfg = settings or FlushSettings()
    prompt = (cfg.prompt or "").strip() or DEFAULT_FLUSH_PROMPT
    system = (cfg.system_prompt or "").strip() or DEFAULT_FLUSH_SYSTEM_PROMPT
    prompt = ensure_no_reply(ensure_hints(prompt))
    system = ensure_no_reply(ensure_hints(system))
    day = today(timezone, now=now, strict=False)
    return FlushPlan(
        prompt=render_flush_text(prompt, now=now, timezone=timezone),
        system_prompt=render_flush_text(system, now=now, timezone=timezone, time_line=False),
        relative_path=flush_target_path(day),
        day=day,
    )


def is_silent_reply(text: str | None, token: str = SILENT_REPLY_TOKEN) -> bool:
    """True for a reply that starts (or ends) with the silent token: nothing to show the user."""
    if not text:
        return False
    tok = re.escape(token)
    return bool(re.search(r"^\s*" + tok + r"(?![A-Za-z0-9_])", text)
                or re.search(r"(?<![A-Za-z0-9_])" + tok + r"\W*$", text))


# --- writing --------------------------------------------------------------------------------


def append_daily_note(
    workspace: str | os.PathLike[str],
    text: str,
    *,
    day: date | datetime | str | None = None,
    timezone: str | None = None,
) -> Path:
    """Append ``text`` to ``<ws>/memory/<day>.md`` (today in the user's timezone by default).

    Confined to exactly that file through :mod:`memdir.memfiles`: append-only, never
    overwrites, creates ``memory/`` if needed, locks against concurrent appenders and refuses
    symlinks.  Notes are separated by a blank line.  A ``datetime`` ``day`` is an instant: its
    day in ``timezone``, as for :func:`memdir.daily.append_daily` (not its own zone's date).
    """
    if day is None or isinstance(day, datetime):
        day = today(timezone, now=day, strict=False)
    rel = flush_target_path(day)
    return append_memory_file(workspace, rel.split("/", 1)[1], text, blank_line=True)
