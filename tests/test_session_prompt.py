"""Memory Recall section (R§10.3) and the session-start context."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from memdir.sessions.prompt import memory_recall_section, session_start_context, truncate_for_context


def test_recall_section_both_tools() -> None:
    lines = memory_recall_section()
    assert lines[0] == "## Memory Recall"
    assert "run memory_search on MEMORY.md + memory/*.md; then use memory_get" in lines[1]
    assert "If low confidence after search, say I checked." in lines[1]
    assert lines[2] == "Citations: include Source: <path#line> when it helps the user verify memory snippets."
    assert lines[-1] == ""


def test_recall_section_variants() -> None:
    assert memory_recall_section(has_search=False, has_get=False) == []
    off = memory_recall_section(citations="off")
    assert off[2].startswith("Citations are disabled: do not mention file paths or line numbers")
    assert "indexed session transcripts" in memory_recall_section(include_sessions=True)[1]
    assert "answer from the matching results" in memory_recall_section(has_get=False)[1]
    get_only = memory_recall_section(has_search=False)[1]
    assert "memory_get" in get_only and "memory_search" not in get_only


def make_ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Long-term\nUser's dog is called Rex.\n")
    (ws / "memory" / "2026-03-04.md").write_text("- today note\n")
    (ws / "memory" / "2026-03-03.md").write_text("- yesterday note\n")
    (ws / "memory" / "2026-03-03-api-design.md").write_text("# Session: hook capture\n")
    (ws / "memory" / "2026-03-01.md").write_text("- older note\n")
    return ws


def test_direct_session_gets_memory_md_and_two_days(tmp_path: Path) -> None:
    ctx = session_start_context(make_ws(tmp_path), chat_type="direct", today=date(2026, 3, 4))
    assert "### MEMORY.md" in ctx and "Rex" in ctx
    assert "- today note" in ctx and "- yesterday note" in ctx and "hook capture" in ctx
    assert "older note" not in ctx
    assert ctx.index("today note") < ctx.index("yesterday note")


def test_group_and_channel_never_see_memory_md(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    for chat_type in ("group", "channel"):
        ctx = session_start_context(ws, chat_type=chat_type, today=date(2026, 3, 4))
        assert "Rex" not in ctx and "MEMORY.md" not in ctx
        assert "- today note" in ctx


def test_budget_truncates_with_visible_marker(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    big = "".join(f"line {i:05d}\n" for i in range(3000))
    (ws / "memory" / "2026-03-04.md").write_text(big)
    (ws / "memory" / "2026-03-03.md").write_text("- yesterday\n")
    ctx = session_start_context(ws, chat_type="direct", today=date(2026, 3, 4), budget_chars=2000)
    assert "line 00000" in ctx and "line 02999" in ctx  # head and tail kept
    assert "omitted; use memory_get on memory/2026-03-04.md" in ctx
    assert "memory/2026-03-03.md not shown: context budget used up" in ctx
    assert len(ctx) < 2600


def test_symlinks_and_missing_files_are_skipped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "secret.md"
    secret.write_text("TOP SECRET")
    (ws / "MEMORY.md").symlink_to(secret)
    assert session_start_context(ws, chat_type="direct", today=date(2026, 3, 4)) == ""


def test_truncate_small_text_untouched() -> None:
    assert truncate_for_context("abc", 10, "x") == "abc"
