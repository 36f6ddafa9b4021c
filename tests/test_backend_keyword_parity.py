"""The same workspace and question rank the same notes with the same BM25 on SQLite and PostgreSQL.

PostgreSQL computes FTS5's BM25 itself, from document lengths it stores per chunk.  Its parser
splits ``user_id`` in two, as FTS5 does, but the stored length counted such a word once: every
note with snake_case names seemed shorter than on SQLite, scored higher, and outranked notes that
SQLite put first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import Backend
from memdir.api import Memory

NOTES = {
    "memory/2026-04-01.md": "- Deploy the api with retry_count and max_delay set from the config.\n",
    "memory/2026-04-02.md": "- Deploy the api with retry count and max delay set from the config.\n",
    "memory/2026-04-03.md": "- Lunch with the design team on Friday.\n",
    "memory/2026-04-04.md": "- The quarterly report is due next month.\n",
    "memory/2026-04-05.md": "- Booked the venue for the offsite.\n",
    "memory/2026-04-06.md": "- Renewed the domain for two more years.\n",
}


def _ranked(ws: Path, config: dict[str, object], question: str) -> list[tuple[str, float]]:
    with Memory(ws, config=config) as mem:
        mem.sync()
        return [(r.path, round(r.score, 6)) for r in mem.search(question, max_results=5).results]


@pytest.mark.parametrize("question", ["deploy api", "config"])
def test_both_backends_rank_alike(pg: Backend, make_workspace: Callable[..., Path], tmp_path: Path,
                                  question: str) -> None:
    ws = make_workspace(NOTES)
    keyword = {"memorySearch": {"provider": "none"}}
    on_sqlite = _ranked(ws, keyword, question)
    on_postgres = _ranked(ws, pg.config(keyword), question)
    assert on_sqlite and on_postgres == on_sqlite


# PostgreSQL's own ``english`` configuration stemmed every token (identifiers and numbers too),
# dropped stop words and stemmed a German note by English rules, where SQLite stems Latin words
# only, each note in its own language.
STEM_NOTES = {
    "memory/2026-02-01.md": "- Fixed the user_id column in the accounts table.\n",
    "memory/2026-02-02.md": "- Das Meeting mit den Kunden war gut und wir haben viel gelernt.\n",
    "memory/2026-02-03.md": "- We were doing reviews all day; doing fine.\n",
    "memory/2026-02-04.md": "- Lunch at noon with the design team.\n",
}


def test_status_says_the_default_stems_are_sqlites(pg: Backend, make_workspace: Callable[..., Path]) -> None:
    """It said 'tsvector english', PostgreSQL's configuration, whose stems the index no longer holds."""
    with Memory(make_workspace(STEM_NOTES), config=pg.config({"memorySearch": {"provider": "none"}})) as mem:
        mem.sync()
        assert "stems as SQLite's" in mem.status()["fts"]["tokenizer"]


@pytest.mark.parametrize("question", ["users", "kunde", "doing", "user"])
def test_both_backends_stem_alike(pg: Backend, make_workspace: Callable[..., Path], question: str) -> None:
    ws = make_workspace(STEM_NOTES)
    keyword = {"memorySearch": {"provider": "none"}}
    assert _ranked(ws, pg.config(keyword), question) == _ranked(ws, keyword, question)


def test_a_trigram_tokenizer_on_postgresql_is_said_not_ignored(pg: Backend,
                                                               make_workspace: Callable[..., Path]) -> None:
    """``store.fts.tokenizer = "trigram"`` shapes a SQLite index alone: on PostgreSQL "ebra" found
    no note saying zebra (SQLite's trigram index finds it), and index, search and status said nothing."""
    ws = make_workspace({"memory/2026-01-01.md": "- the getUserAccountById helper and the zebra\n"})
    trigram = {"memorySearch": {"provider": "none", "store": {"fts": {"tokenizer": "trigram"}}}}
    with Memory(ws, config=trigram) as lite:
        assert not lite.sync().warnings and lite.search("ebra").results and not lite.status()["issues"]
    with Memory(ws, config=pg.config(trigram)) as post:
        said = 'store.fts.tokenizer = "trigram" applies to SQLite indexes only'
        assert any(said in w for w in post.sync().warnings)
        response = post.search("ebra")
        assert not response.results and any(said in w for w in response.warnings)
        assert any(said in i for i in post.status()["issues"])


def test_equal_scores_come_in_reading_order_on_both_backends(pg: Backend, make_workspace: Callable[..., Path]) -> None:
    """Every chunk of a long log says "database sharding" (more than half the chunks: BM25's IDF
    floor, every score equal): SQLite returned the log's first chunks, PostgreSQL others, in the
    order of their ids (hashes)."""
    log = "- the migration plan covers database sharding and the rollout.\n" * 600
    ws = make_workspace({"memory/2026-01-10.md": log, "MEMORY.md": "- Alice likes tea.\n"})
    keyword = {"memorySearch": {"provider": "none"}}
    found = []
    for config in (keyword, pg.config(keyword)):
        with Memory(ws, config=config) as mem:
            mem.sync()
            found.append([(r.path, r.start_line) for r in mem.search("database sharding", max_results=3).results])
    assert found[0][0] == ("memory/2026-01-10.md", 1) and found[1] == found[0]


def test_a_question_whose_other_words_no_note_holds_finds_the_frequent_one(pg: Backend, tmp_path: Path) -> None:
    """From 2,000 chunks on, a phrase in half of them or more is left out of the match (BM25 floors its
    IDF).  SQLite leaves out the phrases found nowhere as well, and ranks the rarest frequent one if
    nothing is left; PostgreSQL kept "bananas" (no note says it; its stem "banana" is in every note)
    or "zzzqqq" and matched nothing: SQLite answered with a banana note, PostgreSQL 'No matches.'."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("".join(f"## Note {i}\n\n- banana note {i}\n\n" for i in range(2100)))  # 2,100 chunks
    keyword = {"memorySearch": {"provider": "none"}}
    answers = []
    for config in (keyword, pg.config(keyword)):
        with Memory(ws, config=config) as mem:
            mem.sync()
            answers.append([[(r.path, r.start_line) for r in mem.search(q).results]
                            for q in ("bananas", "banana zzzqqq")])
    assert all(answers[0]) and answers[1] == answers[0]
