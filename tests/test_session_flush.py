"""Pre-compaction flush contract (R§11, R§18.8) with R§17 vectors 58-62."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from memdir.config import Settings
from memdir.daily import append_daily, today
from memdir.memfiles import UnsafeMemoryPath
from memdir.sessions.flush import (
    DEFAULT_FLUSH_PROMPT,
    DEFAULT_FLUSH_SYSTEM_PROMPT,
    HINT_APPEND,
    HINT_READ_ONLY,
    HINT_TARGET,
    NO_REPLY_SUFFIX,
    FlushSettings,
    already_flushed,
    append_daily_note,
    build_flush_plan,
    current_time_line,
    flush_target_path,
    flush_threshold,
    is_silent_reply,
    mark_flushed,
    resolve_force_flush_bytes,
    should_flush,
)
from memdir.sessions.store import SessionEntry, SessionStore


def entry(**kw: object) -> SessionEntry:
    return SessionEntry(session_id="s", **kw)


DEFAULTS = FlushSettings()  # reserve 20000, soft 4000


# --- vector 58 ------------------------------------------------------------------------------


def test_vector_58_threshold_boundary() -> None:
    assert flush_threshold(200_000, 20_000, 4000) == 176_000
    assert not should_flush(entry(total_tokens=175_999), settings=DEFAULTS, context_window=200_000)
    d = should_flush(entry(total_tokens=176_000), settings=DEFAULTS, context_window=200_000)
    assert d and d.reason == "tokens" and d.threshold == 176_000


def test_vector_58_stale_totals_do_not_trigger() -> None:
    assert not should_flush(entry(total_tokens=190_000, total_tokens_fresh=False), settings=DEFAULTS,
                            context_window=200_000)
    assert should_flush(entry(total_tokens=190_000, total_tokens_fresh=True), settings=DEFAULTS,
                        context_window=200_000)


@pytest.mark.parametrize(
    ("compaction_count", "flushed_count", "expected"),
    [(2, 2, False), (3, 2, True), (None, None, True), (0, None, True), (0, 0, False), (5, 7, False)],
)
def test_vector_58_once_per_compaction_cycle(compaction_count: int | None, flushed_count: int | None,
                                             expected: bool) -> None:
    e = entry(total_tokens=180_000, compaction_count=compaction_count,
              memory_flush_compaction_count=flushed_count, memory_flush_at=1 if flushed_count is not None else None)
    assert bool(should_flush(e, settings=DEFAULTS, context_window=200_000)) is expected


def test_never_compacted_session_flushes_exactly_once(tmp_path: Path) -> None:
    """R§18.8 / #47143: counters 0/unset must not block the first flush, but a second is blocked."""
    store = SessionStore(tmp_path)
    key = "agent:main:main"
    store.open_session(key)
    store.update(key, total_tokens=180_000, total_tokens_fresh=True)
    assert store.get(key).compaction_count == 0
    assert should_flush(store.get(key), settings=DEFAULTS, context_window=200_000)
    mark_flushed(store, key, at_ms=123)
    after = store.get(key)
    assert (after.memory_flush_compaction_count, after.memory_flush_at) == (0, 123)
    assert already_flushed(after)
    d = should_flush(after, settings=DEFAULTS, context_window=200_000)
    assert not d and d.reason == "already-flushed-this-cycle"
    # After a compaction the next cycle may flush again.
    store.update(key, compaction_count=1)
    assert should_flush(store.get(key), settings=DEFAULTS, context_window=200_000)


def test_count_written_without_a_flush_does_not_block() -> None:
    """A foreign tool that initialised memoryFlushCompactionCount to 0 (no memoryFlushAt)."""
    e = entry(total_tokens=180_000, compaction_count=0, memory_flush_compaction_count=0)
    assert should_flush(e, settings=DEFAULTS, context_window=200_000)


def test_zero_or_missing_tokens_never_trigger_on_tokens() -> None:
    assert not should_flush(entry(total_tokens=0), settings=DEFAULTS, context_window=1)
    assert should_flush(entry(), settings=DEFAULTS).reason == "no-token-count"


def test_pending_prompt_tokens_are_added() -> None:
    e = entry(total_tokens=175_000)
    assert not should_flush(e, settings=DEFAULTS, context_window=200_000, pending_prompt_tokens=999)
    assert should_flush(e, settings=DEFAULTS, context_window=200_000, pending_prompt_tokens=1000)


def test_context_window_falls_back_to_entry_then_default() -> None:
    assert should_flush(entry(total_tokens=176_000), settings=DEFAULTS)  # default 200000
    assert should_flush(entry(total_tokens=6_000, context_tokens=30_000), settings=DEFAULTS)
    assert not should_flush(entry(total_tokens=5_999, context_tokens=30_000), settings=DEFAULTS)


# --- vectors 59, 60 -------------------------------------------------------------------------


def test_vector_59_small_window_never_flushes() -> None:
    d = should_flush(entry(total_tokens=15_999), settings=DEFAULTS, context_window=16_000)
    assert not d and d.reason == "threshold-zero" and d.threshold == 0


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"is_heartbeat": True}, "heartbeat"),
        ({"cli_provider": True}, "cli-provider"),
        ({"workspace_writable": False}, "read-only-workspace"),
    ],
)
def test_vector_60_guards(kwargs: dict[str, bool], reason: str) -> None:
    d = should_flush(entry(total_tokens=199_000), settings=DEFAULTS, context_window=200_000,
                     transcript_bytes=10**9, **kwargs)
    assert not d and d.reason == reason


def test_disabled_setting() -> None:
    d = should_flush(entry(total_tokens=199_000), settings=FlushSettings(enabled=False), context_window=200_000)
    assert not d and d.reason == "disabled"


# --- vector 62 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 2_097_152), ("2mb", 2_097_152), ("512kb", 524_288), ("1.5m", 1_572_864), (0, 0), ("abc", 2_097_152),
     (1000, 1000), ("1g", 1024**3)],
)
def test_vector_62_force_flush_bytes_parsing(value: object, expected: int) -> None:
    assert resolve_force_flush_bytes(value) == expected


def test_vector_62_transcript_size_triggers_below_token_threshold() -> None:
    e = entry(total_tokens=1000)
    d = should_flush(e, settings=DEFAULTS, context_window=200_000, transcript_bytes=2_097_152)
    assert d and d.reason == "transcript-size"
    assert not should_flush(e, settings=DEFAULTS, context_window=200_000, transcript_bytes=2_097_151)
    flushed = entry(total_tokens=1000, compaction_count=0, memory_flush_compaction_count=0, memory_flush_at=1)
    assert not should_flush(flushed, settings=DEFAULTS, context_window=200_000, transcript_bytes=3_000_000)
    off = FlushSettings(force_flush_transcript_bytes=0)
    assert not should_flush(e, settings=off, context_window=200_000, transcript_bytes=10**9)


def test_flush_settings_from_config() -> None:
    s = Settings.model_validate({"compaction": {"reserveTokensFloor": 1000, "memoryFlush": {
        "softThresholdTokens": 500, "forceFlushTranscriptBytes": "512kb", "prompt": "  Save it.  "}}})
    fs = FlushSettings.from_settings(s)
    assert (fs.reserve_tokens_floor, fs.soft_threshold_tokens, fs.force_flush_transcript_bytes) == (1000, 500, 524_288)
    assert fs.prompt == "  Save it.  "


# --- vector 61: prompts ---------------------------------------------------------------------


def test_vector_61_prompt_date_and_time_in_user_timezone() -> None:
    plan = build_flush_plan(now=datetime(2026, 2, 16, 15, 0, tzinfo=UTC), timezone="America/New_York")
    assert "memory/2026-02-16.md" in plan.prompt
    assert "YYYY-MM-DD" not in plan.prompt and "YYYY-MM-DD" not in plan.system_prompt
    time_lines = [line for line in plan.prompt.splitlines() if line.startswith("Current time:")]
    assert len(time_lines) == 1
    assert "(America/New_York)" in time_lines[0]
    assert time_lines[0].endswith("/ 2026-02-16 15:00 UTC")
    assert "10:00 AM" in time_lines[0]
    assert plan.relative_path == "memory/2026-02-16.md" and plan.day == date(2026, 2, 16)
    late = build_flush_plan(now=datetime(2026, 2, 17, 3, 0, tzinfo=UTC), timezone="America/New_York")
    assert "memory/2026-02-16.md" in late.prompt and "memory/2026-02-17.md" not in late.prompt
    assert late.relative_path == "memory/2026-02-16.md"


def test_vector_61_custom_prompt_time_line_and_no_reply_suffix() -> None:
    now = datetime(2026, 2, 16, 15, 0, tzinfo=UTC)
    custom = FlushSettings(prompt="Write notes to memory/YYYY-MM-DD.md.\nCurrent time: already here")
    plan = build_flush_plan(custom, now=now, timezone="UTC")
    assert plan.prompt.count("Current time:") == 1
    assert "If no user-visible reply is needed, start with NO_REPLY." in plan.prompt
    assert plan.prompt.startswith("Write notes to memory/2026-02-16.md.")
    # Custom prompts still get the three safety hints.
    for hint in (HINT_TARGET, HINT_APPEND, HINT_READ_ONLY):
        assert hint.replace("YYYY-MM-DD", "2026-02-16") in plan.prompt
    with_token = build_flush_plan(FlushSettings(prompt="Save. Reply NO_REPLY if nothing."), now=now, timezone="UTC")
    assert NO_REPLY_SUFFIX.strip() not in with_token.prompt


def test_default_prompts_are_the_v4_12_texts() -> None:
    assert DEFAULT_FLUSH_PROMPT.startswith("Pre-compaction memory flush. Store durable memories only in "
                                           "memory/YYYY-MM-DD.md (create memory/ if needed). Treat workspace")
    assert DEFAULT_FLUSH_PROMPT.endswith("always use the canonical YYYY-MM-DD.md filename. "
                                         "If nothing to store, reply with NO_REPLY.")
    assert DEFAULT_FLUSH_SYSTEM_PROMPT.startswith("Pre-compaction memory flush turn. The session is near "
                                                  "auto-compaction; capture durable memories to disk.")
    assert DEFAULT_FLUSH_SYSTEM_PROMPT.endswith("You may reply, but usually NO_REPLY is correct.")
    plan = build_flush_plan(now=datetime(2026, 1, 2, tzinfo=UTC), timezone="UTC")
    # Defaults already hold every hint and NO_REPLY: nothing appended except the time line.
    assert plan.prompt.split("\nCurrent time:")[0] == DEFAULT_FLUSH_PROMPT.replace("YYYY-MM-DD", "2026-01-02")
    assert plan.system_prompt == DEFAULT_FLUSH_SYSTEM_PROMPT.replace("YYYY-MM-DD", "2026-01-02")


def test_bad_timezone_falls_back_without_crashing() -> None:
    line = current_time_line(datetime(2026, 2, 16, 15, 0, tzinfo=UTC), "Not/AZone")
    assert line.startswith("Current time:") and "2026-02-16 15:00 UTC" in line


@pytest.mark.parametrize(
    ("text", "silent"),
    [("NO_REPLY", True), ("  NO_REPLY\n", True), ("NO_REPLY - nothing to store", True),
     ("Stored two notes. NO_REPLY", True), ("NO_REPLYING", False), ("Here is the answer.", False),
     ("", False), (None, False), ("I said NO_REPLY earlier but here is more text", False)],
)
def test_is_silent_reply(text: str | None, silent: bool) -> None:
    assert is_silent_reply(text) is silent


def test_flush_target_path() -> None:
    assert flush_target_path(date(2026, 3, 4)) == "memory/2026-03-04.md"
    assert flush_target_path(datetime(2026, 3, 4, 23, 59)) == "memory/2026-03-04.md"
    assert flush_target_path("2026-03-04") == "memory/2026-03-04.md"
    with pytest.raises(ValueError):
        flush_target_path("../../etc/passwd")


# --- safe append ----------------------------------------------------------------------------


def test_append_daily_note_files_an_instant_under_the_users_day(tmp_path: Path) -> None:
    """A ``datetime`` day went to its own zone's date (a UTC time of 03:30 on the 28th: the 28th)
    while append_daily, given the same, used the user's (the 27th in Los Angeles)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    at = datetime(2026, 11, 28, 3, 30, tzinfo=UTC)
    p = append_daily_note(ws, "- late note", day=at, timezone="America/Los_Angeles")
    assert p.name == "2026-11-27.md" == Path(append_daily(ws, "- same", date=at, timezone="America/Los_Angeles")).name
    assert append_daily_note(ws, "- tokyo", day=at, timezone="Asia/Tokyo").name == "2026-11-28.md"


def test_append_daily_note_creates_dir_and_only_appends(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    p = append_daily_note(ws, "- first", day="2026-03-04")
    assert p == ws / "memory" / "2026-03-04.md"
    (ws / "memory" / "2026-03-04.md").write_text("# existing\nkeep me")  # no trailing newline
    append_daily_note(ws, "- second\n\n", day="2026-03-04")
    append_daily_note(ws, "- third", day="2026-03-04")
    assert p.read_text() == "# existing\nkeep me\n\n- second\n\n- third\n"
    with pytest.raises(ValueError):
        append_daily_note(ws, "   \n", day="2026-03-04")


def test_append_daily_note_uses_user_timezone(tmp_path: Path) -> None:
    p = append_daily_note(tmp_path, "x", timezone="Pacific/Kiritimati")  # UTC+14: often "tomorrow"
    assert p.name == f"{today('Pacific/Kiritimati', strict=False).isoformat()}.md"
    assert today("Pacific/Kiritimati", now=datetime(2026, 2, 16, 11, 0, tzinfo=UTC), strict=False) == date(2026, 2, 17)


def test_append_refuses_symlinked_memory_dir_and_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "memory").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafeMemoryPath):
        append_daily_note(ws, "x", day="2026-03-04")
    assert list(outside.iterdir()) == []
    (ws / "memory").unlink()
    (ws / "memory").mkdir()
    victim = tmp_path / "victim.md"
    victim.write_text("secret")
    (ws / "memory" / "2026-03-04.md").symlink_to(victim)
    with pytest.raises(UnsafeMemoryPath):
        append_daily_note(ws, "x", day="2026-03-04")
    assert victim.read_text() == "secret"


def test_concurrent_appends_are_whole_entries(tmp_path: Path) -> None:
    def worker(n: int) -> None:
        for i in range(25):
            append_daily_note(tmp_path, f"- worker {n} note {i} " + "z" * 5000, day="2026-03-04")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = (tmp_path / "memory" / "2026-03-04.md").read_text().split("\n\n")
    assert len(entries) == 100
    assert all(e.strip().startswith("- worker ") and e.strip().endswith("z" * 10) for e in entries)


def test_mark_flushed_persists_fields(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.open_session("agent:main:main")
    store.update("agent:main:main", compaction_count=4)
    e = mark_flushed(store, "agent:main:main", context_hash="abc")
    assert e.memory_flush_compaction_count == 4 and e.memory_flush_at and e.memory_flush_context_hash == "abc"
    raw = (tmp_path / "sessions.json").read_text()
    assert '"memoryFlushCompactionCount": 4' in raw and '"memoryFlushAt"' in raw


def test_a_context_overflow_flushes_below_every_threshold_once_a_cycle() -> None:
    # the API refused the conversation as too long: the counts (if any) say nothing of the model's context
    assert should_flush(entry(), settings=DEFAULTS, context_overflow=True).reason == "context-overflow"
    assert should_flush(entry(total_tokens=10), settings=DEFAULTS, context_window=200_000, context_overflow=True)
    flushed = entry(compaction_count=1, memory_flush_compaction_count=1, memory_flush_at=1)
    assert not should_flush(flushed, settings=DEFAULTS, context_overflow=True)
    assert not should_flush(entry(), settings=DEFAULTS, context_overflow=True, is_heartbeat=True)
