"""Questions typed on the command line: one that starts with ``-`` (a flag the user wants notes about)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def ws(make_workspace: Callable[..., Path]) -> Path:
    return make_workspace({"memory/2026-01-05.md": "- Always pass --dry-run to deploy.sh first.\n",
                           "memory/2026-01-06.md": "- Lunch at noon.\n"})


def test_a_query_that_looks_like_an_option_says_how_to_search_for_it(ws: Path, run_cli) -> None:
    """``memdir search --dry-run`` said only "unrecognized arguments: --dry-run": nothing told the
    user that the text they wanted to find needs ``--`` (or ``--query=``) before it."""
    out = run_cli("-w", str(ws), "search", "--dry-run", "--mode", "keyword")
    assert out.returncode == 2 and out.stdout == ""
    assert "unrecognized arguments: --dry-run" in out.stderr
    assert "memdir search -- --dry-run" in out.stderr and "--query=--dry-run" in out.stderr
    for argv in (("--", "--dry-run"), ("--query=--dry-run",)):  # both ways the hint names do work
        found = run_cli("-w", str(ws), "search", "--mode", "keyword", "--files", *argv)
        assert found.returncode == 0 and found.stdout == "memory/2026-01-05.md\n", found.stderr

    other = run_cli("-w", str(ws), "search", "deploy", "--bogus")  # a query was given: no such hint
    assert other.returncode == 2 and other.stderr.rstrip().endswith("unrecognized arguments: --bogus")
