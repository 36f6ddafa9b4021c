"""An export of long-term memory restores every memory as it was (multi-line ones included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ltm_fakes import AxisProvider
from memdir.config import load_config
from memdir.ltm import LongTermMemory
from memdir.ltm.markdown import parse

pytest.importorskip("lancedb")


def make(tmp_path: Path, name: str) -> LongTermMemory:
    ws = tmp_path / name
    ws.mkdir()
    settings = load_config(workspace=ws, state_dir=tmp_path / f"state-{name}", agent_id="main").settings
    return LongTermMemory(settings, provider=AxisProvider())


def test_a_memory_line_that_opens_an_html_comment_does_not_swallow_the_rest_of_an_export() -> None:
    """Why: an indented "<!-- …" continuation was read as a comment, so every bullet after it
    vanished on import (and the first lost its id: it came back as a new memory)."""
    md = ("# Long-term memory\n\n"
          "- 2026-01-02 [fact] The page template starts with\n"
          "  <!-- build marker (id: 11111111-1111-4111-8111-111111111111)\n"
          "- 2026-01-03 [preference] I prefer tea (id: 22222222-2222-4222-8222-222222222222)\n"
          "<!-- a real comment -->\n"
          "- 2026-01-04 [fact] The office is in Brno (id: 33333333-3333-4333-8333-333333333333)\n")
    items, skipped = parse(md)
    assert [(i.id, i.text) for i in items] == [
        ("11111111-1111-4111-8111-111111111111", "The page template starts with\n<!-- build marker"),
        ("22222222-2222-4222-8222-222222222222", "I prefer tea"),
        ("33333333-3333-4333-8333-333333333333", "The office is in Brno"),
    ]
    assert skipped == []


def test_export_then_import_restores_multi_line_memories_unchanged(tmp_path: Path) -> None:
    """Why: a blank line inside a memory was dropped on import ("a\\n\\nb" came back as "a\\nb",
    reported as an update) and a line opening an HTML comment hid every later memory."""
    texts = ["Deploy checklist:\n<!-- keep this order -->\n1. build", "I prefer tea", "Address:\n\nBrno, Czechia"]
    with make(tmp_path, "a") as source:
        for text in texts:
            source.store(text, category="fact")
        exported = source.export()
        ids = {r.text: r.id for r in source.list()}
    with make(tmp_path, "b") as target:
        report = target.import_markdown(exported)
        assert sorted(report.created) == sorted(ids.values())
        assert {r.text: r.id for r in target.list()} == ids
        again = target.import_markdown(exported)
        assert again.updated == [] and sorted(again.unchanged) == sorted(ids.values())


def test_an_edited_importance_is_imported_and_an_impossible_one_refused(tmp_path: Path) -> None:
    """Why: only text and category were compared, so a bullet whose importance was edited came
    back "unchanged" and the edit was lost; "importance: 5" was stored as it was (the tools and
    ``ltm store`` refuse anything outside 0–1)."""
    with make(tmp_path, "a") as ltm:
        kept = ltm.store("The staging database lives in eu-west-1", category="fact", importance=0.9).record
        exported = ltm.export()
        assert f"(id: {kept.id}, importance: 0.9)" in exported
        edited = exported.replace("importance: 0.9", "importance: 0.3")
        report = ltm.import_markdown(edited)
        assert (report.updated, report.unchanged) == ([kept.id], [])
        assert round(ltm.get(kept.id).importance, 4) == 0.3
        assert ltm.import_markdown(edited).unchanged == [kept.id]
        with pytest.raises(Exception, match=r"line 3: importance must be between 0 and 1, got 5"):
            ltm.import_markdown(exported.replace("importance: 0.9", "importance: 5"))
        assert round(ltm.get(kept.id).importance, 4) == 0.3
