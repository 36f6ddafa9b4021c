"""The one writer of memory files: confinement, never overwriting, entry format and errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memdir.daily import DailyLogError, append_daily
from memdir.memfiles import (
    MemoryFileError,
    UnsafeMemoryPath,
    append_memory_file,
    create_memory_file,
    normalise_entry,
)


@pytest.mark.parametrize("name", ["../escape.md", "a/b.md", ".hidden.md", "notes.txt", "x..md", ""])
def test_names_are_confined_to_plain_md_files(tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafeMemoryPath, match=r"not a plain \.md file name"):
        append_memory_file(tmp_path, name, "x")
    assert not (tmp_path.parent / "escape.md").exists()


def test_errors_are_one_family() -> None:
    assert DailyLogError is MemoryFileError and issubclass(MemoryFileError, ValueError)
    assert issubclass(UnsafeMemoryPath, MemoryFileError) and issubclass(UnsafeMemoryPath, OSError)
    assert str(UnsafeMemoryPath(40, "memory/x.md is a symlink")) == "memory/x.md is a symlink"


def test_memory_path_that_is_a_file_is_refused(make_workspace) -> None:
    ws = make_workspace({"memory": "not a folder\n"})
    with pytest.raises(UnsafeMemoryPath, match="not a folder"):
        append_daily(ws, "x", date="2026-03-04")


def test_missing_workspace_is_an_error_for_append_daily_but_created_for_the_hook(tmp_path: Path) -> None:
    with pytest.raises(DailyLogError, match="workspace does not exist"):
        append_daily(tmp_path / "typo", "x", date="2026-03-04")
    assert not (tmp_path / "typo").exists()
    path = create_memory_file(tmp_path / "new-ws", "2026-03-04-x", "body\n")
    assert path.read_text() == "body\n"


def test_create_never_overwrites_and_never_follows_a_symlink(tmp_path: Path) -> None:
    first = create_memory_file(tmp_path, "2026-03-04-api", "one\n")
    second = create_memory_file(tmp_path, "2026-03-04-api", "two\n")
    assert (first.name, second.name) == ("2026-03-04-api.md", "2026-03-04-api-2.md")
    assert first.read_text() == "one\n" and second.read_text() == "two\n"
    victim = tmp_path / "victim.md"
    victim.write_text("secret")
    os.symlink(victim, tmp_path / "memory" / "2026-03-05-x.md")
    third = create_memory_file(tmp_path, "2026-03-05-x", "three\n")
    assert third.name == "2026-03-05-x-2.md" and victim.read_text() == "secret"


def test_entry_normalisation() -> None:
    assert normalise_entry("\n\n  \n- note\r\n- more\r\n\n") == "- note\n- more\n"
    assert normalise_entry("  indented\n") == "  indented\n"
    with pytest.raises(MemoryFileError, match="NUL"):
        normalise_entry("a\x00b")
    with pytest.raises(MemoryFileError, match="text required"):
        normalise_entry(" \r\n ")


def test_consecutive_lines_or_blank_line_separated_entries(make_workspace) -> None:
    ws = make_workspace({"memory/2026-03-04.md": "# hand-edited"})
    append_daily(ws, "- a", date="2026-03-04")
    append_daily(ws, "- b", date="2026-03-04")
    append_daily(ws, "- c", date="2026-03-04", blank_line=True)
    append_daily(ws, "- d", date="2026-03-04", blank_line=True)
    assert (ws / "memory/2026-03-04.md").read_text() == "# hand-edited\n- a\n- b\n\n- c\n\n- d\n"
