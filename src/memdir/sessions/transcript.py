"""Session transcript → indexable text, line maps and delta accounting (R§6, R§8).

The ``sessions`` source indexes a transcript as ``User: …`` / ``Assistant: …`` lines.  The
chunker works on that text; ``remap_lines`` turns a chunk's line range back into JSONL line
numbers so a hit can point into the real file.  ``SessionDeltaTracker`` decides when a growing
transcript has changed enough (100 KB or 50 messages by default) to be worth re-indexing.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memdir.redact import redact_text
from memdir.sessions.flush import HEARTBEAT_TOKEN, SILENT_REPLY_TOKEN
from memdir.sessions.store import clean_text, iter_records
from memdir.textutil import elide_data_uris

_ROLE_LABEL = {"user": "User", "assistant": "Assistant"}
# Numbers below this are epoch seconds (ms values this small would be before 1973).
_SECONDS_CEILING = 1e11
# 9999-12-31T23:59:59.999Z: a later "time" is junk, and no date can hold it.
_MAX_MS = 253_402_300_799_999
# 1980-01-02T00:00Z: an earlier number is no date (see timestamp_ms; as memdir.ranking.NO_MTIME_BEFORE_MS).
_FIRST_MS = 315_619_200_000
#: A leap second's seconds field, with any fraction: ``23:59:60`` or ``23:59:60.5``.
_LEAP_SECOND = re.compile(r"([T ]\d{2}:\d{2}:)60(?:\.\d+)?(?!\d)")




def normalize_message_text(content: Any) -> str | None:
    """String content, or all ``{"type":"text"}`` blocks joined by a space, whitespace collapsed."""
    if isinstance(content, str):
        text = " ".join(content.split())
        return text or None
    if not isinstance(content, list):
        return None
    parts = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            piece = " ".join(block["text"].split())
            if piece:
                parts.append(piece)
    return " ".join(parts) or None


def timestamp_ms(value: Any) -> int:
    """Epoch ms from a number (seconds are scaled up, micro- and nanoseconds down), a numeric
    string or an ISO string; else 0.

    A time before 1970 or after 9999 is 0 (unknown): a transcript is untrusted input, and such a
    value has no calendar day for the index to record.  So is a number before 1980: a time since
    the session began, or a message's sequence number, not a date (taken for one, it dated its
    messages 1970-01-01, and with temporal decay on their chunk scored 0).
    """
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text)
        except ValueError:
            # RFC 3339 allows a lower-case "z" (and "t"); fromisoformat takes neither.  A leap
            # second (23:59:60, as RFC 3339 allows) is no time Python holds: its message was
            # undated; it is the second before's last millisecond.
            text = _LEAP_SECOND.sub(r"\g<1>59.999", text.upper().replace("Z", "+00:00"), count=1)
            try:
                ms = int(datetime.fromisoformat(text).timestamp() * 1000)
            except (ValueError, OverflowError, OSError):
                return 0
            return ms if 0 < ms <= _MAX_MS else 0
    if not isinstance(value, (int, float)):
        return 0
    try:
        value = float(value)  # a JSON integer may have hundreds of digits
    except OverflowError:
        return 0
    if not math.isfinite(value) or value <= 0:
        return 0
    ms = int(value * 1000) if value < _SECONDS_CEILING else int(value)
    # past year 9999 in ms: micro- then nanoseconds (Go's UnixNano, Python's time_ns(),
    # OpenTelemetry), which read as ms left every message of such a transcript undated
    for scale in (1, 1000, 1_000_000):
        if ms // scale <= _MAX_MS:
            return ms // scale if ms // scale >= _FIRST_MS else 0
    return 0


def session_hash(content: str, line_map: Iterable[int], timestamps_ms: Iterable[int] | None = None) -> str:
    """R§8 content hash.

    Without timestamps this is the v2.27 hash ``sha256(content + "\\n" + lineMap.join(","))``
    (vector 18); with them it is the v4.12 form, which appends ``"\\n" + timestamps.join(",")``.
    """
    text = content + "\n" + ",".join(str(n) for n in line_map)
    if timestamps_ms is not None:
        text += "\n" + ",".join(str(t) for t in timestamps_ms)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SessionDocument:
    """The indexable form of one transcript.

    ``line_map[i]`` is the JSONL line (1-based) of text line ``i+1``; ``timestamps_ms[i]`` its
    message time (0 if unknown).  ``hash`` is the v4.12 hash (timestamps included, so an edit
    that only changes times still re-indexes); ``hash_v2`` the v2.27 one.
    """

    path: Path
    text: str
    line_map: list[int]
    timestamps_ms: list[int]
    hash: str
    hash_v2: str
    size: int = 0
    mtime_ms: int = 0

    @property
    def rel_path(self) -> str:
        return session_rel_path(self.path)

    @property
    def last_timestamp_ms(self) -> int:
        """Newest message time, falling back to the file's mtime (for temporal decay)."""
        return max(self.timestamps_ms, default=0) or self.mtime_ms


def session_rel_path(path: str | os.PathLike[str]) -> str:
    """The stored path of a transcript in the index: ``sessions/<basename>`` (vector 18)."""
    return "sessions/" + Path(path).name


#: What may stand around a silent reply's token (``HEARTBEAT_OK.``, ``**NO_REPLY**``).
_TOKEN_PUNCTUATION = " \t\n.!*_`'\"()[]"


def silent_token(text: str) -> str | None:
    """``HEARTBEAT_OK`` or ``NO_REPLY`` for a reply that is only that token (the agent had nothing
    to say), else ``None``.

    A heartbeat poll (every 30 minutes, the same prompt each time) answered ``HEARTBEAT_OK`` was
    indexed as its two messages: a day of them was 48 copies of one text, which matched every
    question with a word of the prompt ("tasks", "attention", "chats") and made those words so common
    that keyword search scored a note holding them near 0.  Such a reply and the poll it answers
    (:func:`is_heartbeat_poll`) are left out; a ``NO_REPLY`` answers a real message (a group chat
    not addressed to the agent), which is kept (the session hook leaves them out of its capture
    the same way)."""
    token = text.strip(_TOKEN_PUNCTUATION)
    return token if token in (HEARTBEAT_TOKEN, SILENT_REPLY_TOKEN) else None


def is_heartbeat_poll(text: str, prefix: str = "") -> bool:
    """Whether a user message (``prefix`` and its text) answered ``HEARTBEAT_OK`` is a heartbeat
    poll: it names the heartbeat (``HEARTBEAT.md``, ``HEARTBEAT_OK``, as a poll must to be answered
    so).  A real message a model answered with the token by mistake is kept."""
    return text.startswith(prefix) and "HEARTBEAT" in text


def build_session_text(
    records: Iterable[tuple[int, dict[str, Any]]], *, redact: bool = True
) -> tuple[str, list[int], list[int]]:
    """``(content, line_map, timestamps_ms)`` from ``(line number, record)`` pairs."""
    lines: list[str] = []
    line_map: list[int] = []
    stamps: list[int] = []
    for lineno, record in records:
        if record.get("type") != "message":
            continue
        message = record.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in _ROLE_LABEL:  # a list or dict role is not hashable
            continue
        text = normalize_message_text(message.get("content"))
        if not text:
            continue
        if role == "assistant" and (token := silent_token(text)):
            if token == HEARTBEAT_TOKEN and lines and is_heartbeat_poll(lines[-1], "User: "):
                del lines[-1], line_map[-1], stamps[-1]  # the heartbeat poll this reply answers
            continue
        text = elide_data_uris(clean_text(text))
        if redact:
            text = redact_text(text)
        lines.append(f"{_ROLE_LABEL[role]}: {text}")
        line_map.append(lineno)
        stamp = timestamp_ms(message.get("timestamp"))
        stamps.append(stamp or timestamp_ms(record.get("timestamp")))
    return "\n".join(lines), line_map, stamps


def session_document(path: str | os.PathLike[str], *, redact: bool = True) -> SessionDocument:
    """Read a transcript (skipping blank, torn and invalid lines) into a ``SessionDocument``."""
    p = Path(path)
    st = p.stat()
    text, line_map, stamps = build_session_text(iter_records(p), redact=redact)
    return SessionDocument(
        path=p,
        text=text,
        line_map=line_map,
        timestamps_ms=stamps,
        hash=session_hash(text, line_map, stamps),
        hash_v2=session_hash(text, line_map),
        size=st.st_size,
        mtime_ms=int(st.st_mtime * 1000),
    )


def remap_lines(start: int, end: int, line_map: list[int]) -> tuple[int, int]:
    """Map a chunk's 1-based content line range to JSONL line numbers (no-op without a map).

    Out-of-range lines (a chunk ending on a trailing empty line) clamp to the nearest entry.
    """
    if not line_map:
        return start, end

    def one(line: int) -> int:
        return line_map[min(max(line, 1), len(line_map)) - 1]

    return one(start), one(end)


# --- delta accounting (R§6) -----------------------------------------------------------------

_READ_BLOCK = 64 * 1024


def _size(path: Path) -> int | None:
    """The file's size, or ``None`` if it is gone."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def count_newlines(path: Path, start: int, end: int) -> int:
    count = 0
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            remaining = end - start
            while remaining > 0:
                block = fh.read(min(_READ_BLOCK, remaining))
                if not block:
                    break
                count += block.count(b"\n")
                remaining -= len(block)
    except OSError:
        return 0
    return count


@dataclass
class DeltaState:
    last_size: int = 0
    pending_bytes: int = 0
    pending_messages: int = 0


@dataclass
class SessionDeltaTracker:
    """Per-transcript pending bytes/messages since the last index (R§6 session delta accounting).

    Call ``observe(path)`` when a transcript was appended to; it returns True when the file
    crossed a threshold and is now in ``dirty``.  After indexing a file call ``mark_indexed``.
    A threshold ≤ 0 means "any change counts".
    """

    delta_bytes: int = 100_000
    delta_messages: int = 50
    states: dict[Path, DeltaState] = field(default_factory=dict)
    dirty: set[Path] = field(default_factory=set)

    @classmethod
    def from_settings(cls, settings: Any) -> SessionDeltaTracker:
        cfg = settings.memory_search.sync.sessions
        return cls(delta_bytes=cfg.delta_bytes, delta_messages=cfg.delta_messages)

    def state(self, path: str | os.PathLike[str]) -> DeltaState:
        return self.states.setdefault(Path(path), DeltaState())

    def _should_count(self, state: DeltaState) -> bool:
        return self.delta_messages > 0 and (self.delta_bytes <= 0 or state.pending_bytes < self.delta_bytes)

    def observe(self, path: str | os.PathLike[str], size: int | None = None) -> bool:
        p = Path(path)
        size = _size(p) if size is None else size
        if size is None:
            return False
        state = self.state(p)
        if size < state.last_size:  # truncated or rewritten: count the whole file again
            state.last_size = size
            state.pending_bytes += size
            if self._should_count(state):
                state.pending_messages += count_newlines(p, 0, size)
        elif size > state.last_size:
            state.pending_bytes += size - state.last_size
            if self._should_count(state):
                state.pending_messages += count_newlines(p, state.last_size, size)
            state.last_size = size
        bytes_hit = state.pending_bytes > 0 if self.delta_bytes <= 0 else state.pending_bytes >= self.delta_bytes
        messages_hit = (
            state.pending_messages > 0 if self.delta_messages <= 0 else state.pending_messages >= self.delta_messages
        )
        if not (bytes_hit or messages_hit):
            return False
        self.dirty.add(p)
        state.pending_bytes = 0 if self.delta_bytes <= 0 else max(0, state.pending_bytes - self.delta_bytes)
        state.pending_messages = (
            0 if self.delta_messages <= 0 else max(0, state.pending_messages - self.delta_messages)
        )
        return True

    def take_dirty(self) -> set[Path]:
        """The files that crossed a threshold since the last call (and forget them)."""
        out, self.dirty = self.dirty, set()
        return out

    def mark_indexed(self, path: str | os.PathLike[str], size: int | None = None) -> None:
        """After indexing (or skipping an unchanged hash): ``{lastSize: size, 0, 0}``."""
        p = Path(path)
        size = _size(p) if size is None else size
        if size is None:
            self.forget(p)
            return
        self.states[p] = DeltaState(last_size=size)
        self.dirty.discard(p)

    def forget(self, path: str | os.PathLike[str]) -> None:
        """A transcript vanished: drop its state."""
        self.states.pop(Path(path), None)
        self.dirty.discard(Path(path))
