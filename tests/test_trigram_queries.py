"""Chinese and Japanese questions find their notes in an index built with ``store.fts.tokenizer =
"trigram"`` (the option OpenClaw added for CJK search, R§7 [v4.12]).

The keyword index spaces every Han and Kana character (two spaces between neighbours); a trigram
index matches that text literally, so the one-space phrase ``"讨 论"`` memdir searched for was in
no note, and a one-character term is too short for any trigram: every CJK question found nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memdir.api import Memory

NOTES = {
    "memory/2026-01-10.md": "- 之前讨论的那个方案已经通过了。\n",
    "memory/2026-01-11.md": "- デプロイ戦略を決めた。\n",
    "memory/2026-01-12.md": "- 我买了一本书。\n",
    "memory/2026-01-13.md": "- The team shipped the API gateway.\n",
    "memory/2026-01-14.md": "- Ticket QX-1773 is the login loop; the AI team owns it.\n",
}
CONFIG = {"memorySearch": {"provider": "none", "store": {"fts": {"tokenizer": "trigram"}}}}


@pytest.mark.parametrize(("query", "path"), [
    ("讨论", "memory/2026-01-10.md"),
    ("之前讨论的方案", "memory/2026-01-10.md"),
    ("デプロイ", "memory/2026-01-11.md"),
    ("戦略", "memory/2026-01-11.md"),
    ("书", "memory/2026-01-12.md"),
])
def test_cjk_questions_find_their_notes_in_a_trigram_index(make_workspace: Callable[..., Path], query: str,
                                                           path: str) -> None:
    with Memory(make_workspace(NOTES), config=CONFIG) as mem:
        mem.sync()
        first = mem.search(query).results
        again = mem.search(query).results  # a second search in the process ranks alike
        scores = mem.store.keyword_scores(["讨论"], [mem.store.keyword_search(["讨论"], 1)[0].id])
    assert first and first[0].path == path, [(r.path, r.snippet) for r in first]
    assert [(r.path, r.score) for r in again] == [(r.path, r.score) for r in first]
    assert min(scores.values()) > 0  # the hybrid merge's score lookup counts the phrase too


def test_an_identifier_is_found_in_a_trigram_index(make_workspace: Callable[..., Path]) -> None:
    """``QX-1773`` was searched as the phrase ``qx 1773``, text the trigram index never holds (the
    note says ``QX-1773``): the identifier found nothing."""
    with Memory(make_workspace(NOTES), config=CONFIG) as mem:
        mem.sync()
        results = mem.search("QX-1773").results
    assert results and results[0].path == "memory/2026-01-14.md"


def test_a_word_too_short_for_trigrams_is_named_not_silently_missed(make_workspace: Callable[..., Path]) -> None:
    with Memory(make_workspace(NOTES), config=CONFIG) as mem:
        mem.sync()
        response = mem.search("AI")
    assert not response.results  # a trigram index cannot match two characters ...
    assert any("shorter than 3 characters (ai)" in w for w in response.warnings)  # ... and the answer says so
