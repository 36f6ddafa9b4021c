"""A stand-alone number in a question (an order, a ticket, a port) is searched for.

R§9's keyword extraction drops all-digit words, so "what happened to order 88123?" searched for
"order" alone: among notes about many orders the one naming 88123 was found only by chance, and
"zebra 12345" found nothing although a note says 12345.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import Backend
from memdir.api import Memory
from memdir.query import keyword_terms, number_terms

ORDERS = [88100 + i for i in range(40)]


@pytest.mark.parametrize(("query", "numbers"), [
    ("what happened to order 88123?", ["88123"]),
    ("port 8080 or 8080.", ["8080"]),
    ("room 237", ["237"]),
    ("issue 4521, again", ["4521"]),
    # years are date-aware retrieval's, short numbers are days and counts
    ("what did we do in 2023?", []),
    ("on 12 February 2025", []),
    ("4 years ago", []),
    # digits inside an identifier, a date, a time, a decimal or a grouped number are not stand-alone
    ("ticket QX-1773", []),
    ("the 2025-02-12 notes", []),
    ("at 10:30", []),
    ("12.500 each", []),
    ("1,234 dollars", []),
    ("v123 and 123abc", []),
])
def test_stand_alone_numbers_of_three_or_more_digits(query: str, numbers: list[str]) -> None:
    assert number_terms(query) == numbers


def test_a_number_is_a_keyword_term_beside_the_words() -> None:
    assert keyword_terms("what happened to order 88123?") == ["88123", "happened", "order"]
    assert keyword_terms("Who owns ticket QX-1773?") == ["qx 1773", "owns", "ticket"]  # unchanged
    assert keyword_terms("in 2023") == ["in", "2023"]  # nothing but stop words and a year: every word


def _orders_workspace(make_workspace: Callable[..., Path]) -> Path:
    files = {}
    for day, first in enumerate(range(0, len(ORDERS), 4), start=1):
        lines = [f"- Order {n} shipped to the warehouse in crate {n % 7}." for n in ORDERS[first:first + 4]]
        files[f"memory/2026-03-{day:02d}.md"] = f"# 2026-03-{day:02d}\n\n" + "\n".join(lines) + "\n"
    return make_workspace(files)


def _assert_numbers_found(ws: Path, state: Path, config: dict[str, Any]) -> None:
    with Memory(ws, state_dir=state, config=config) as mem:
        for n in (88123, 88101, 88139):
            results = mem.search(f"what happened to order {n}?", max_results=3).results
            assert results and f"Order {n} " in results[0].snippet, (n, [r.snippet for r in results])
        # a word no note has beside the number: the number alone still finds its note
        results = mem.search("zebra 88117", max_results=3).results
        assert results and "Order 88117 " in results[0].snippet, [r.snippet for r in results]


def test_hybrid_puts_the_note_naming_the_number_first(make_workspace: Callable[..., Path], tmp_path: Path) -> None:
    _assert_numbers_found(_orders_workspace(make_workspace), tmp_path / "state", {})


def test_keyword_search_finds_the_number_on_every_backend(backend: Backend, make_workspace: Callable[..., Path],
                                                          tmp_path: Path) -> None:
    config = backend.config({"memorySearch": {"provider": "none"}})
    _assert_numbers_found(_orders_workspace(make_workspace), tmp_path / "state", config)
