"""Notes as people write them (front matter, Setext headings, long bullet groups, code, callouts):
every fact is found, shown in its snippet and cited at its lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir.api import Memory
from memdir.search import truncate_snippet

#: Thirteen bullets of about 60 characters: one bullet group, one chunk of ~780 characters.
GROUP = [f"- supplier {i:02d} ships the walnut veneer panels on weekday {i}" for i in range(12)]


def test_a_snippet_shows_the_matching_line_at_the_end_of_a_long_chunk(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """A snippet was the chunk's first 700 characters: in a bullet group of ~780 characters, a
    search for the group's last bullet cited its lines but its snippet stopped two bullets short
    of it."""
    last = "- the spare boathouse key hangs behind the barometer"
    ws = make_workspace({"MEMORY.md": "# Suppliers\n\n" + "\n".join([*GROUP, last]) + "\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        hit = mem.search("boathouse key").results[0]
        assert len(hit.snippet) <= 700 and hit.snippet.rstrip().endswith(last), hit.snippet
        assert hit.snippet.count("\n- supplier") >= 9  # the lines above it fill the snippet
        assert hit.start_line <= 15 <= hit.end_line
        first = mem.search("supplier 00 walnut veneer").results[0]  # the head holds it: the snippet is the head
        assert first.snippet.startswith("# Suppliers\n\n- supplier 00 ")


def test_a_snippet_keeps_its_head_when_no_later_line_holds_more_of_the_question() -> None:
    text = "\n".join([*GROUP, "- the boathouse key"])
    assert truncate_snippet(text, 700) == text[:700]  # no terms: the head, as before
    assert truncate_snippet(text, 700, ["walnut"]) == text[:700]  # every line has it: the head
    focused = truncate_snippet(text, 700, ["boathouse", "supplier"])
    assert focused.endswith("- the boathouse key") and focused.startswith("- supplier 01 ") and len(focused) <= 700
    assert truncate_snippet("x" * 800, 700, ["x"]) == "x" * 700  # one line: cut at the limit
