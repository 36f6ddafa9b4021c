"""A snake_case identifier, a dotted or a grouped number in a question is searched for as itself.

FTS5 (and PostgreSQL's parser) split ``user_id`` at the underscore, and R§9's keyword extraction
drops words shorter than three letters, so a search for ``user_id`` looked for ``user`` alone:
among notes that mention a user, the one naming the column ranked by chance, often below the
results shown.  Likewise "2.3.1" looked for the words 2, 3 and 1 (which "1.3.2" has too, so the
notes tied), "python 3.11" for "python" alone and "$1,200" for 1 and 200.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import Backend
from memdir.api import Memory
from memdir.query import id_terms


@pytest.mark.parametrize(("query", "ids"), [
    ("user_id", ["user_id"]),
    ("what type is MAX_RETRIES?", ["max_retries"]),
    ("rename snake_case_name", ["snake_case_name"]),
    ("x86_64 builds", ["x86_64"]),
    ("is 2.3.1 out?", ["2 3 1", "v2 3 1"]),  # a version with its "v" too, and without it
    ("the v2.3.1 leak", ["v2 3 1", "2 3 1"]),
    ("host 10.0.0.12", ["10 0 0 12"]),
    ("python 3.11", ["3 11", "v3 11"]),
    ("the $1,200 bill", ["1 200"]),
    ("on December 1,2023", []),  # a day and a year, not a grouped number
    # a leading or trailing underscore joins nothing
    ("__init__ and _private", []),
    ("plain words only", []),
])
def test_underscore_joined_words_are_one_identifier(query: str, ids: list[str]) -> None:
    assert id_terms(query) == ids


def _workspace(make_workspace: Callable[..., Path]) -> Path:
    files = {f"memory/2026-03-{d:02d}.md": f"- The user asked about item {d}.\n" for d in range(1, 9)}
    files["memory/2026-03-20.md"] = ("- Schema change: the column user_id in the accounts table is a bigint "
                                     "from now on, and MAX_RETRIES is 5 in production.\n")
    # the same words and numbers in both, and as many: only the identifiers tell them apart
    files["memory/2026-03-10.md"] = "- Moved to 1.3.2, host 10.0.12.0, python 3.12, 200 seats at $1 each year.\n"
    files["memory/2026-03-21.md"] = "- Moved to 2.3.1, host 10.0.0.12, python 3.11, seats for $1,200 a year.\n"
    return make_workspace(files)


@pytest.mark.parametrize("query", ["user_id", "which type is user_id now?", "2.3.1", "which host is 10.0.0.12?",
                                   "the python 3.11 move", "$1,200"])
def test_the_note_naming_the_identifier_comes_first(backend: Backend, make_workspace: Callable[..., Path],
                                                    query: str) -> None:
    config = backend.config({"memorySearch": {"provider": "none"}})
    with Memory(_workspace(make_workspace), config=config) as mem:
        mem.sync()
        results = mem.search(query, max_results=3).results
    want = "memory/2026-03-20.md" if "user_id" in query else "memory/2026-03-21.md"
    assert results and results[0].path == want, [(r.path, r.snippet) for r in results]
