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


def test_a_note_that_looks_like_an_option_says_how_to_write_it(ws: Path, run_cli) -> None:
    """``memdir append -x`` (a note starting with ``-``) said only "unrecognized arguments: -x", and
    ``memdir ltm store --dry-run`` only that a text is required: the hint says to put it after ``--``,
    which works, and a note given as well gets no such hint."""
    out = run_cli("-w", str(ws), "append", "--dry-run")
    assert out.returncode == 2 and "unrecognized arguments: --dry-run" in out.stderr
    assert "put it after '--': memdir append -- --dry-run" in out.stderr
    assert not list((ws / "memory").glob("*dry*")) and len(list((ws / "memory").iterdir())) == 2  # nothing written
    done = run_cli("-w", str(ws), "append", "--", "--dry-run is on by default now")
    assert done.returncode == 0, done.stderr
    written = (ws / done.stdout.split()[-1]).read_text()
    assert written.rstrip("\n").endswith("--dry-run is on by default now")
    other = run_cli("-w", str(ws), "append", "a note", "--bogus")
    assert other.returncode == 2 and other.stderr.rstrip().endswith("unrecognized arguments: --bogus")

    stored = run_cli("-w", str(ws), "ltm", "store", "--dry-run")
    assert stored.returncode == 2
    assert "required: text (if it starts with '-', put it after '--': memdir ltm store -- TEXT)" in stored.stderr
