"""Sessions: transcripts, the session-memory hook and the pre-compaction flush (R§8, R§11, R§13)."""

from memdir.sessions.flush import (
    FlushDecision,
    FlushPlan,
    FlushSettings,
    append_daily_note,
    build_flush_plan,
    claim_flush,
    flush_target_path,
    is_silent_reply,
    mark_flushed,
    release_flush,
    should_flush,
)
from memdir.sessions.hook import HookResult, run_session_memory_hook
from memdir.sessions.store import (
    SessionEntry,
    SessionStore,
    append_record,
    chat_type_from_session_key,
    iter_records,
    list_transcripts,
    session_key,
)
from memdir.sessions.transcript import (
    SessionDeltaTracker,
    SessionDocument,
    remap_lines,
    session_document,
    session_hash,
    session_rel_path,
)

__all__ = [
    "FlushDecision",
    "FlushPlan",
    "FlushSettings",
    "HookResult",
    "SessionDeltaTracker",
    "SessionDocument",
    "SessionEntry",
    "SessionStore",
    "append_daily_note",
    "append_record",
    "build_flush_plan",
    "chat_type_from_session_key",
    "claim_flush",
    "flush_target_path",
    "is_silent_reply",
    "iter_records",
    "list_transcripts",
    "mark_flushed",
    "release_flush",
    "remap_lines",
    "run_session_memory_hook",
    "session_document",
    "session_hash",
    "session_key",
    "session_rel_path",
    "should_flush",
]
