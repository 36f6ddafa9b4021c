"""A corrected fact is stored, not dropped as a duplicate of the fact it corrects.

The vectors stand in for the default local model's scores (measured with MiniLM-L6): a changed
phone number 0.99, Monday → Tuesday 0.97, a negation 0.96, all over the 0.95 duplicate line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ltm_fakes import AxisProvider, axis, near
from memdir.config import load_config
from memdir.ltm import LongTermMemory
from memdir.ltm.facts import says_something_else
from memdir.ltm.tools import call_ltm_tool

pytest.importorskip("lancedb")


def make(tmp_path: Path, provider: AxisProvider) -> LongTermMemory:
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = load_config(workspace=ws, state_dir=tmp_path / "state", agent_id="main").settings
    return LongTermMemory(settings, provider=provider)


@pytest.mark.parametrize(("old", "new", "cos"), [
    ("My phone number is +420 777 123 456", "My phone number is +420 777 123 465", 0.992),
    ("My flight is on Monday at 9am", "My flight is on Tuesday at 9am", 0.967),
    ("I prefer dark mode", "I do not prefer dark mode", 0.956),
])
def test_a_correction_supersedes_the_fact_it_corrects(tmp_path: Path, old: str, new: str, cos: float) -> None:
    """Why: "Similar memory already exists" answered each correction, and recall kept the stale fact."""
    provider = AxisProvider({old: axis(0), new: near(cos), "query": near(cos)})
    with make(tmp_path, provider) as ltm:
        first = call_ltm_tool(ltm, "memory_store", {"text": old, "category": "fact"})
        second = call_ltm_tool(ltm, "memory_store", {"text": new, "category": "fact"})
        assert second["details"]["action"] == "created", second["content"][0]["text"]
        assert second["details"]["superseded"][0]["id"] == first["details"]["id"]
        assert [r.text for r in ltm.list()] == [new]
        assert [h.text for h in ltm.search("query")] == [new]


def test_auto_capture_keeps_a_correction_but_still_skips_a_repeat(tmp_path: Path) -> None:
    old, new = "I always take the 7:15 train", "I always take the 7:45 train"
    provider = AxisProvider({old: axis(0), new: near(0.98), "i always take the 7:15 train!": near(0.999)})
    with make(tmp_path, provider) as ltm:
        assert [r.action for r in ltm.auto_capture([{"role": "user", "content": old}])] == ["created"]
        repeat = ltm.auto_capture([{"role": "user", "content": "i always take the 7:15 train!"}])
        assert [r.action for r in repeat] == ["duplicate"]
        assert [r.action for r in ltm.auto_capture([{"role": "user", "content": new}])] == ["created"]
        assert [r.text for r in ltm.list()] == [new]


def test_what_counts_as_saying_something_else() -> None:
    assert says_something_else("Call me at 10", "Call me at 11")
    assert says_something_else("I don't like tea", "I like tea")
    assert says_something_else("Standup is on Friday", "Standup is on Thursday")
    assert not says_something_else("I prefer dark mode!", "i prefer the dark mode")
    assert not says_something_else("I do not like tea", "I don't like tea")
    assert not says_something_else("Room 4B on Monday", "room 4b, monday")
