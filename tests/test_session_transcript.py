"""Transcript → indexable text (R§8) and session delta accounting (R§6), with R§17 vectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memdir.sessions.transcript import (
    SessionDeltaTracker,
    build_session_text,
    normalize_message_text,
    remap_lines,
    session_document,
    session_hash,
    session_rel_path,
    timestamp_ms,
)


def write_jsonl(path: Path, lines: list[object]) -> Path:
    out = []
    for line in lines:
        out.append(line if isinstance(line, str) else json.dumps(line))
    path.write_text("\n".join(out) + "\n")
    return path


def msg(role: str, content: object, **extra: object) -> dict[str, object]:
    return {"type": "message", "message": {"role": role, "content": content}, **extra}


def test_vector_18_content_line_map_and_v2_hash(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "abc.jsonl", [
        {"type": "custom", "x": 1},
        {"type": "custom", "x": 2},
        {"type": "session-meta", "id": "abc"},
        msg("user", "Hello world"),
        {"type": "custom", "x": 3},
        msg("assistant", "Hi there, how can I help?"),
        msg("user", "Tell me a joke"),
    ])
    doc = session_document(path)
    assert doc.text == "User: Hello world\nAssistant: Hi there, how can I help?\nUser: Tell me a joke"
    assert doc.line_map == [4, 6, 7]
    assert doc.hash_v2 == "9e7e83220860e40db5de9d4301acce7414bf5d6ee55a17e247028ade8d92be40"
    assert session_hash(doc.text, doc.line_map) == doc.hash_v2
    assert doc.rel_path == "sessions/abc.jsonl" == session_rel_path(path)
    assert doc.timestamps_ms == [0, 0, 0]
    # v4.12 hash = v2 input + "\n" + timestamps.
    assert doc.hash == session_hash(doc.text, doc.line_map, [0, 0, 0]) != doc.hash_v2


def test_vector_19_blank_and_invalid_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", ["", "not valid json", msg("user", "First"), "",
                                              msg("assistant", "Second")])
    doc = session_document(path)
    assert doc.line_map == [3, 5]
    assert doc.text == "User: First\nAssistant: Second"


def test_empty_transcript_gives_empty_map(tmp_path: Path) -> None:
    doc = session_document(write_jsonl(tmp_path / "e.jsonl", [{"type": "session"}]))
    assert (doc.text, doc.line_map) == ("", [])


def test_vector_20_text_blocks_joined_and_whitespace_collapsed() -> None:
    content = [{"type": "text", "text": "Hello\n\n  world"}, {"type": "image"}, {"type": "text", "text": "again"}]
    text, line_map, _ = build_session_text([(1, msg("user", content))])
    assert text == "User: Hello world again"
    assert line_map == [1]
    assert normalize_message_text("  a\t\tb \n c ") == "a b c"
    assert normalize_message_text("   ") is None
    assert normalize_message_text([{"type": "text", "text": "  "}]) is None
    assert normalize_message_text({"not": "a list"}) is None


def test_only_user_and_assistant_messages_are_kept() -> None:
    records = [
        (1, msg("tool", "tool output")),
        (2, msg("system", "sys")),
        (3, {"type": "message"}),
        (4, msg("assistant", "")),
        (5, msg("assistant", "ok")),
        (6, {"type": "custom", "message": {"role": "user", "content": "no"}}),
    ]
    text, line_map, _ = build_session_text(records)
    assert (text, line_map) == ("Assistant: ok", [5])


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("my key is sk-abcdefghijklmnop1234", "my key is sk-abc…1234"),  # vector 21
        ("OPENAI_API_KEY=abc123", "OPENAI_API_KEY=***"),
        ("short sk-12345678", "short ***"),
    ],
)
def test_vector_21_secrets_are_redacted(tmp_path: Path, said: str, stored: str) -> None:
    doc = session_document(write_jsonl(tmp_path / "r.jsonl", [msg("user", said)]))
    assert doc.text == f"User: {stored}"
    raw = session_document(tmp_path / "r.jsonl", redact=False)
    assert raw.text == f"User: {said}"


def test_timestamps_from_message_or_record_with_seconds_scaled(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        msg("user", "a", timestamp=1_700_000_000),  # seconds
        msg("assistant", "b", timestamp=1_700_000_000_123),  # ms
        {"type": "message", "timestamp": 5, "message": {"role": "user", "content": "c", "timestamp": 1_700_000_001}},
        msg("assistant", "d", timestamp="2026-01-16T14:30:05Z"),
        msg("user", "e"),
    ])
    doc = session_document(path)
    assert doc.timestamps_ms == [1_700_000_000_000, 1_700_000_000_123, 1_700_000_001_000, 1_768_573_805_000, 0]
    assert doc.last_timestamp_ms == 1_768_573_805_000
    assert timestamp_ms("nonsense") == 0 and timestamp_ms(float("nan")) == 0 and timestamp_ms(True) == 0
    assert timestamp_ms("1700000000") == 1_700_000_000_000


def test_vector_13_remap_chunk_lines_through_line_map() -> None:
    line_map = [2, 5, 8, 11, 14, 17, 20, 23, 26, 29]
    chunks = [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
    assert [remap_lines(s, e, line_map) for s, e in chunks] == [(2, 5), (8, 11), (14, 17), (20, 23), (26, 29)]
    assert remap_lines(3, 7, []) == (3, 7)  # no map: no-op
    assert remap_lines(10, 11, line_map) == (29, 29)  # a trailing empty line clamps to the last entry


def test_vector_13_with_the_core_chunker(tmp_path: Path) -> None:
    chunking = pytest.importorskip("memdir.chunking")
    records: list[object] = []
    for i in range(1, 6):  # metadata records between messages, as in real transcripts
        records += [{"type": "custom"}, msg("user", f"Message {i}"), msg("assistant", f"Reply {i}")]
    path = write_jsonl(tmp_path / "s.jsonl", records)
    doc = session_document(path)
    chunks = chunking.chunk_markdown(doc.text, tokens=10, overlap=0)
    got = [remap_lines(c.start_line, c.end_line, doc.line_map) for c in chunks]
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
    assert got == [(doc.line_map[i], doc.line_map[i + 1]) for i in range(0, 10, 2)]


# --- delta accounting -----------------------------------------------------------------------


def grow(path: Path, nbytes: int, newlines: int) -> None:
    """Append exactly ``nbytes`` bytes containing exactly ``newlines`` newline characters."""
    assert nbytes >= newlines
    with open(path, "ab") as fh:
        fh.write(b"\n" * newlines + b"x" * (nbytes - newlines))


def test_vector_55_messages_threshold(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    tracker = SessionDeltaTracker(delta_bytes=100_000, delta_messages=50)
    grow(path, 5000, 10)
    assert tracker.observe(path) is False
    st = tracker.state(path)
    assert (st.last_size, st.pending_bytes, st.pending_messages) == (5000, 5000, 10)
    grow(path, 4000, 45)
    assert tracker.observe(path) is True
    st = tracker.state(path)
    assert (st.pending_bytes, st.pending_messages) == (0, 5)
    assert tracker.take_dirty() == {path}
    assert tracker.take_dirty() == set()


def test_vector_56_bytes_threshold_skips_newline_count(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    tracker = SessionDeltaTracker()
    grow(path, 150_000, 1000)
    assert tracker.observe(path) is True
    st = tracker.state(path)
    assert (st.pending_bytes, st.pending_messages) == (50_000, 0)  # newlines were not counted
    assert path in tracker.dirty


def test_vector_57_truncation_recounts_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    tracker = SessionDeltaTracker()
    grow(path, 9000, 20)
    tracker.observe(path)
    tracker.mark_indexed(path)
    path.write_bytes(b"\n" * 8 + b"y" * 1992)  # rewritten smaller: 2000 bytes, 8 newlines
    assert tracker.observe(path) is False
    st = tracker.state(path)
    assert (st.last_size, st.pending_bytes, st.pending_messages) == (2000, 2000, 8)


def test_unchanged_size_reevaluates_and_mark_indexed_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    tracker = SessionDeltaTracker(delta_bytes=100, delta_messages=0)
    grow(path, 50, 1)
    assert tracker.observe(path) is False
    assert tracker.observe(path) is False  # same size: nothing new
    grow(path, 60, 0)
    assert tracker.observe(path) is True
    assert tracker.state(path).pending_bytes == 10
    tracker.mark_indexed(path)
    st = tracker.state(path)
    assert (st.last_size, st.pending_bytes, st.pending_messages) == (110, 0, 0)
    assert path not in tracker.dirty


def test_zero_thresholds_mean_any_change(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    tracker = SessionDeltaTracker(delta_bytes=0, delta_messages=0)
    grow(path, 3, 1)
    assert tracker.observe(path) is True
    st = tracker.state(path)
    assert (st.pending_bytes, st.pending_messages) == (0, 0)
    assert tracker.observe(tmp_path / "missing.jsonl") is False


def test_tracker_from_settings() -> None:
    from memdir.config import Settings

    s = Settings.model_validate({"memorySearch": {"sync": {"sessions": {"deltaBytes": 10, "deltaMessages": 2}}}})
    tracker = SessionDeltaTracker.from_settings(s)
    assert (tracker.delta_bytes, tracker.delta_messages) == (10, 2)
