"""The ``session-memory`` hook: on ``/new`` and ``/reset``, save the session's tail (R§13).

It writes ``memory/YYYY-MM-DD-<slug>.md`` with the last N user/assistant messages so the next
session can find them.  Fixes over OpenClaw (R§18.11): the transcript that ``/new`` already
renamed to ``<file>.reset.<ts>`` is still found (#17563), an existing file is never
overwritten — a same-minute collision gets ``-2``, ``-3``… (PR #144146) — and there is no
"newest .jsonl in the folder" fallback that saved an unrelated old session (#143328).
Beyond R§13: the file is dated by the user's day, not the UTC one, and secrets in the saved
messages are masked as the index masks transcripts (R§8), since the file is indexed as memory.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memdir.memfiles import create_memory_file
from memdir.redact import redact_text
from memdir.sessions.flush import HEARTBEAT_TOKEN
from memdir.sessions.store import RESET_MARKER, SessionEntry, clean_text, iter_records, records_from_end
from memdir.sessions.transcript import elide_data_uris, is_heartbeat_poll, silent_token
from memdir.timezones import local_time, resolve_timezone

log = logging.getLogger(__name__)

HOOK_ACTIONS = frozenset({"new", "reset"})
DEFAULT_MESSAGES = 15
SLUG_TIMEOUT_SECONDS = 15.0
SLUG_INPUT_CHARS = 2000
SLUG_MAX_CHARS = 30

#: A host's slug model: the prompt in, its answer out; ``None`` (what a chat API's reply content may be)
#: falls back to the time, as a failure does.
SlugLLM = Callable[[str], str | None]


# --- finding the transcript -----------------------------------------------------------------


def _strip_reset(name: str) -> str:
    return name.split(RESET_MARKER, 1)[0]


def _reset_siblings(path: Path) -> list[Path]:
    """``<basename>.reset.*`` files next to ``path``, oldest first (names sort by time).

    Regular files only, never a symlink (as for every other candidate): a link named like a
    rotated transcript would otherwise have the hook copy whatever it points at into memory."""
    base = _strip_reset(path.name)
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    return sorted(path.parent / e.name for e in entries
                  if e.name.startswith(base + RESET_MARKER) and e.is_file(follow_symlinks=False))


def find_transcript(
    session_file: str | os.PathLike[str] | None,
    session_id: str | None,
    search_dirs: list[Path],
) -> Path | None:
    """Locate the transcript of the session that just ended (R§13 step 3, minus the 'any .jsonl').

    Order: the recorded file; for a ``.reset.`` name its live original, else the reset file
    itself; ``<sessionId>.jsonl``; the newest ``<sessionId>-topic-*.jsonl``; finally the newest
    ``.reset.*`` sibling of the recorded file (the live one was already rotated away).
    """
    candidates: list[Path] = []
    recorded = Path(session_file) if session_file else None
    if recorded is not None:
        if RESET_MARKER in recorded.name:
            candidates += [recorded.with_name(_strip_reset(recorded.name)), recorded]
        else:
            candidates.append(recorded)
    if session_id and any(c in session_id for c in "/\\\x00"):
        session_id = None  # "../other-agent/sessions/x" named a transcript outside these folders
    for folder in search_dirs:
        if session_id:
            candidates.append(folder / f"{session_id}.jsonl")
            try:
                topics = sorted(
                    n for n in os.listdir(folder)
                    if n.startswith(f"{session_id}-topic-") and n.endswith(".jsonl") and RESET_MARKER not in n
                )
            except OSError:
                topics = []
            if topics:
                candidates.append(folder / topics[-1])
    for candidate in candidates:
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    if recorded is not None:
        siblings = _reset_siblings(recorded)
        if siblings:
            return siblings[-1]
    return None


# --- reading the messages -------------------------------------------------------------------


def _first_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                return block["text"]
    return None


def _is_inter_session(record: Mapping[str, Any], message: Mapping[str, Any]) -> bool:
    for holder in (message, record):
        prov = holder.get("provenance")
        if isinstance(prov, dict) and prov.get("kind") == "inter_session":
            return True
    return False


def recent_messages(path: str | os.PathLike[str], limit: int = DEFAULT_MESSAGES, *, redact: bool = True) -> list[str]:
    """The last ``limit`` ``"<role>: <text>"`` lines, filtering *before* slicing (R§13 step 5).

    Kept: user/assistant message records with text; dropped: tool records, slash commands,
    user messages relayed from another session, empty text, and as the index drops them, replies
    that are only ``HEARTBEAT_OK`` or ``NO_REPLY`` and the heartbeat polls answered ``HEARTBEAT_OK``
    (an agent polled every 30 minutes saved 7 polls and their replies of its last 15 messages).
    Raw text, newlines kept, but secrets masked as the index masks them (R§8): the file is a
    memory file, indexed and shown to the agent unredacted.  Lines are read as the index reads
    them (:func:`iter_records`): split on ``\\n`` only, so a message holding U+2028 or U+0085
    (which ``str.splitlines`` splits) is kept, and a record nested too deep for the JSON parser is
    skipped rather than failing the hook.
    """
    out: list[tuple[str, str]] = []
    backwards = limit > 0
    poll_answered = False  # (backwards) the message before is a heartbeat poll answered HEARTBEAT_OK
    try:
        # the last ones first, read from the file's end, when only some are wanted
        records = records_from_end(path) if backwards else (record for _, record in iter_records(path))
        for record in records:
            if record.get("type") != "message":
                continue
            message = record.get("message")
            if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
                continue
            if not message.get("content"):
                continue
            if message["role"] == "user" and _is_inter_session(record, message):
                continue
            text = _first_text(message["content"])
            if not text or not text.strip() or text.lstrip().startswith("/"):
                continue
            token = silent_token(" ".join(text.split())) if message["role"] == "assistant" else None
            if token is not None:
                if token != HEARTBEAT_TOKEN:
                    continue
                if backwards:
                    poll_answered = True
                elif out and out[-1][0] == "user" and is_heartbeat_poll(out[-1][1]):
                    out.pop()
                continue
            if poll_answered:
                poll_answered = False
                if message["role"] == "user" and is_heartbeat_poll(text):
                    continue
            out.append((message["role"], text))
            if len(out) == limit:
                break
    except OSError:  # unreadable: the capture keeps its header, as for an empty transcript
        return []
    if limit > 0:
        out.reverse()
    cleaned = ((role, elide_data_uris(clean_text(text))) for role, text in out)
    return [f"{role}: {redact_text(text) if redact else text}" for role, text in cleaned]


# --- slug -----------------------------------------------------------------------------------


def slug_prompt(content: str) -> str:
    return (
        "Name this conversation for a file name. Reply with a 1-2 word slug only: lowercase, "
        "words joined by a hyphen, no file extension, no punctuation, nothing else "
        '(for example "api-design" or "trip-planning").\n\nConversation:\n'
        + content[:SLUG_INPUT_CHARS]
    )


def clean_slug(raw: str | None) -> str | None:
    """Vector 65: trim, lowercase, non ``[a-z0-9-]`` → ``-``, collapse, strip dashes, ≤30 chars."""
    if not raw:
        return None
    text = re.sub(r"[^a-z0-9-]", "-", raw.strip().lower())
    text = re.sub(r"-{2,}", "-", text).strip("-")
    text = text[:SLUG_MAX_CHARS].strip("-")
    return text or None


def llm_slug(content: str, llm: SlugLLM | None, timeout: float = SLUG_TIMEOUT_SECONDS) -> str | None:
    """Ask ``llm`` for a slug within ``timeout`` seconds; any failure or overrun → None.

    The model is asked in a daemon thread: a pool's worker is joined when the interpreter exits,
    so a host's slug model that never answered (an SDK's 10-minute default timeout, a stalled
    local model) kept its process from exiting long after the hook had used the time instead."""
    if llm is None or not content:
        return None
    prompt = slug_prompt(content)
    future: concurrent.futures.Future[str | None] = concurrent.futures.Future()

    def ask() -> None:
        try:
            future.set_result(llm(prompt))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=ask, name="memdir-slug", daemon=True).start()
    try:
        return clean_slug(future.result(timeout=timeout))
    except concurrent.futures.TimeoutError:
        log.warning("session-memory: slug model did not answer within %.0fs; using the time", timeout)
        return None
    except Exception as exc:  # the slug is cosmetic; never let it cost the capture
        log.warning("session-memory: slug generation failed: %s", exc)
        return None


# --- the hook -------------------------------------------------------------------------------


def format_session_memory(
    *, now: datetime, session_key: str, session_id: str | None, source: str | None, content: str
) -> str:
    """R§13 step 7 file body (vector 64)."""
    utc = now.astimezone(UTC)
    lines = [
        f"# Session: {utc:%Y-%m-%d} {utc:%H:%M:%S} UTC",
        "",
        f"- **Session Key**: {session_key}",
        f"- **Session ID**: {session_id or 'unknown'}",
        f"- **Source**: {source or 'unknown'}",
        "",
    ]
    if content:
        lines += ["## Conversation Summary", "", content, ""]
    return "\n".join(lines)


@dataclass
class HookResult:
    path: Path | None
    transcript: Path | None
    messages: int
    slug: str
    error: str | None = None


def run_session_memory_hook(
    *,
    action: str,
    session_key: str,
    workspace: str | os.PathLike[str],
    previous_entry: SessionEntry | Mapping[str, Any] | None,
    sessions_dir: str | os.PathLike[str] | None = None,
    now: datetime | None = None,
    messages: int = DEFAULT_MESSAGES,
    slug_llm: SlugLLM | None = None,
    slug_timeout: float = SLUG_TIMEOUT_SECONDS,
    command_source: str | None = None,
    enabled: bool = True,
    timezone: str | None = None,
) -> HookResult | None:
    """Handle a ``command:new`` / ``command:reset`` event; other actions return None.

    ``action``: ``"new"`` or ``"reset"`` (else nothing is done: None, as with ``enabled`` False);
    ``session_key``: the session's key, written in the file's header with ``command_source`` (the
    channel the command came from; ``None``: "unknown"); ``workspace``: where
    ``memory/<date>-<slug>.md`` is created (never over a file); ``previous_entry``: the session
    that ended, a :class:`SessionEntry` or its ``sessions.json`` dict, whose transcript is read
    (looked for in its file's folder, ``sessions_dir`` and ``<workspace>/sessions``; ``None``:
    a file without a conversation); ``messages``: how many of its last messages are kept (0 or
    less: 15); ``slug_llm``: a host's model naming the file from them, given ``slug_timeout``
    seconds (``None``, no answer or a failure: the time, ``HHMM``).

    The file's date and the fallback slug's ``HHMM`` are the user's (``timezone``, an IANA name;
    unset → the machine's zone), like the daily log's: OpenClaw names the file by the UTC day, so
    a session that ended in the user's evening west of Greenwich was filed under tomorrow, and the
    next session's start-up context (today's and yesterday's logs and captures, in the user's
    zone) missed the capture it had just written.  The header keeps UTC (R§13, vector 64).  A naive
    ``now`` is the machine's local time, as everywhere in memdir (it was taken for UTC here alone).

    Never raises: a failure is logged and returned in ``HookResult.error`` so the caller can
    tell the user (OpenClaw only logged it, #45819).
    """
    if not enabled or action not in HOOK_ACTIONS:
        return None
    fallback_slug = ""
    try:
        # a time at the calendar's ends has no day in the user's zone: one more failure reported
        now = local_time(now, UTC)  # a naive time is the machine's, as for the flush and the start-up context
        local = local_time(now, resolve_timezone(timezone)[0])
        fallback_slug = f"{local:%H%M}"
        if isinstance(previous_entry, Mapping):
            previous_entry = SessionEntry.model_validate(previous_entry)
        session_id = previous_entry.session_id if previous_entry else None
        session_file = previous_entry.session_file if previous_entry else None
        dirs = [Path(p) for p in (Path(session_file).parent if session_file else None, sessions_dir,
                                  Path(workspace) / "sessions") if p]
        transcript = find_transcript(session_file, session_id, list(dict.fromkeys(dirs)))
        count = messages if messages > 0 else DEFAULT_MESSAGES
        lines = recent_messages(transcript, count) if transcript else []
        if not lines and transcript is not None:
            siblings = _reset_siblings(transcript)
            if siblings:
                transcript = siblings[-1]
                lines = recent_messages(transcript, count)
        content = "\n".join(lines)
        slug = llm_slug(content, slug_llm, slug_timeout) or fallback_slug
        body = format_session_memory(now=now, session_key=session_key, session_id=session_id,
                                     source=command_source, content=content)
        path = create_memory_file(workspace, f"{local:%Y-%m-%d}-{slug}", body)
        return HookResult(path=path, transcript=transcript, messages=len(lines), slug=slug)
    except Exception as exc:
        log.error("session-memory hook failed: %s", exc)
        return HookResult(path=None, transcript=None, messages=0, slug=fallback_slug, error=str(exc))
