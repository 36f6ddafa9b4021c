"""Search options and formulas checked on small workspaces whose right answers are worked out by hand
(SPEC §5, R§7): what ``explain`` reports adds up to the score, on every surface."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from memdir.api import Memory

DIMS = 8


class MarkerProvider:
    """Chunks and queries embed by the first marker word they contain (a fixed direction each);
    other text gets a stable pseudo-random vector away from the markers' axes."""

    id = "fake"
    max_input_bytes = 8000

    def __init__(self, markers: dict[str, Sequence[float]], model: str = "marker-1") -> None:
        self.markers = markers
        self.model = model
        self.provider_key = f"key-{model}"

    @property
    def dims(self) -> int:
        return DIMS

    def _vec(self, text: str) -> list[float]:
        for word, direction in self.markers.items():
            if word in text:
                v = np.zeros(DIMS)
                v[:len(direction)] = direction
                return (v / np.linalg.norm(v)).tolist()
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))
        v = rng.standard_normal(DIMS)
        v[:3] = 0.0
        return (v / np.linalg.norm(v)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def close(self) -> None:
        pass


FILLER = ["The quarterly report is due next month.", "Booked the venue for the offsite.",
          "Renewed the domain for two more years.", "Lunch with the design team on Friday.",
          "Fixed the flaky login test.", "Call with the bank about the loan."]
#: "billing" is in three of the nine notes, "ledger" in one; a marker word gives a note its vector.
NOTES = {
    "memory/projects.md": "# Billing\nThe billing ledger moved to kafka. mkA\n",
    "memory/2026-03-02.md": "- Billing review with Dana. mkB\n",
    "memory/2026-03-05.md": "- Billing alerts tuned. mkC\n",
    **{f"memory/2026-01-{10 + i:02d}.md": f"- {line}\n" for i, line in enumerate(FILLER)},
}
MARKERS = {"mkA": (1.0, 0.0, 0.0), "mkB": (0.6, 0.8, 0.0), "mkC": (0.3, 0.2, 0.93), "QQ": (1.0, 0.0, 0.0)}


def _explained_score(e: dict[str, object]) -> float:
    """The score ``explain`` describes: the weighted sum of the fused figures, times the decay."""
    text = e.get("textFused", e["textScore"])
    return (e["vectorWeight"] * e["vectorScore"] + e["textWeight"] * text) * e["decay"]  # type: ignore[operator]


@pytest.mark.parametrize("query", ["QQ billing", "QQ billing ledger", "billing"])
def test_explain_adds_up_to_the_score_in_hybrid_search(make_workspace: Callable[..., Path], query: str) -> None:
    """BM25 enters the fusion divided by the best match of the pool, but ``explain`` showed only
    the stored ``r/(1+r)``: the best note read "vector 1.000×0.50 + text 0.826×0.50" for a
    score of 1.0."""
    ws = make_workspace(NOTES)
    config = {"memorySearch": {"query": {"hybrid": {"vectorWeight": 0.5, "textWeight": 0.5}}}}
    with Memory(ws, config=config, provider=MarkerProvider(MARKERS)) as mem:
        mem.sync()
        results = mem.search(query, explain=True, min_score=0).results
    assert results and any(r.explain["textScore"] > 0 for r in results)
    for r in results:
        assert _explained_score(r.explain) == pytest.approx(r.score, abs=1e-5), (r.path, r.explain)
    if query == "QQ billing ledger":  # by hand: the only note with both words is the best match (1),
        top = results[0]               # and its vector is the query's (1): 0.5·1 + 0.5·1
        assert top.path == "memory/projects.md" and top.score == pytest.approx(1.0)
        assert top.explain["textScore"] < 1.0 and top.explain["textFused"] == pytest.approx(1.0)


_EXPLAIN_LINE = re.compile(r"\[vector ([\d.]+)×([\d.]+) \+ text ([\d.]+)×([\d.]+).*?, decay ([\d.]+)")


def test_cli_explain_line_adds_up_to_the_printed_score(make_workspace: Callable[..., Path], run_cli) -> None:
    """``memdir search --explain`` on the embedded model: each result's bracket reads
    ``vector v×vw + text t×tw`` and that sum is the score printed above it."""
    ws = make_workspace(NOTES)
    proc = run_cli("--workspace", str(ws), "search", "billing ledger kafka", "--explain", "--min-score", "0",
                   check=True)
    lines = proc.stdout.splitlines()
    checked = 0
    for i, line in enumerate(lines):
        m = _EXPLAIN_LINE.search(line)
        if not m:
            continue
        header = next(lines[j] for j in range(i - 1, -1, -1) if re.match(r"^\d\.\d{3} \S", lines[j]))
        score = float(header.split()[0])
        v, vw, t, tw, decay = (float(x) for x in m.groups())
        assert (v * vw + t * tw) * decay == pytest.approx(score, abs=0.003), line
        checked += vw > 0 and tw > 0  # hybrid: both figures count
    assert checked >= 2, proc.stdout + proc.stderr


def test_decay_dates_the_session_hooks_slugged_daily_files(make_workspace: Callable[..., Path]) -> None:
    """``memory/YYYY-MM-DD-<slug>.md`` (what the session hook writes) decays by its date like
    ``memory/YYYY-MM-DD.md``: R§7.1's pattern missed it, so with decay on a session summary of
    2025-01-01 kept the full score of an evergreen note while that day's log scored 8e-5 of its own."""
    from memdir.search import run_search

    ws = make_workspace({"memory/2025-01-01.md": "ledger decision", "memory/2025-01-01-ledger-talk.md": "ledger chat",
                         "memory/2026-02-10-1430.md": "ledger today", "memory/2026-02-30-x.md": "ledger invalid",
                         "memory/projects.md": "ledger projects", "MEMORY.md": "ledger evergreen"})
    now = 1770681600  # 2026-02-10T00:00Z
    os.utime(ws / "memory/2026-02-30-x.md", (now - 90 * 86400, now - 90 * 86400))
    cfg = {"memorySearch": {"provider": "none", "query": {"hybrid": {"temporalDecay": {"enabled": True}}}}}
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        resp = run_search(mem.store, mem.settings.memory_search, "ledger", provider=None, workspace=ws,
                          now_ms=now * 1000, explain=True, max_results=10, min_score=0)
    decay = {r.path: r.explain["decay"] for r in resp.results}
    old = pytest.approx(2 ** (-405 / 30), abs=1e-6)
    assert decay["memory/2025-01-01.md"] == old and decay["memory/2025-01-01-ledger-talk.md"] == old
    assert decay["memory/2026-02-10-1430.md"] == 1.0
    assert decay["MEMORY.md"] == 1.0 and decay["memory/projects.md"] == 1.0
    # no such day: the file's time, as for memory/2026-02-30.md
    assert decay["memory/2026-02-30-x.md"] == pytest.approx(0.125, abs=1e-6)


def test_vectors_alone_rank_when_the_keyword_index_cannot_answer(make_workspace: Callable[..., Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """R§7.8 [v4.12]: with no keyword index to ask, vector results are scored as such.  A failing
    keyword search left the fusion's text side 0 for every note: the note whose vector is the
    question's scored 0.7 (0.7·1 + 0.3·0), and a 0.6 cosine 0.42 fell under an explicit 0.5 floor."""
    import sqlite3

    ws = make_workspace(NOTES)
    with Memory(ws, provider=MarkerProvider(MARKERS)) as mem:
        mem.sync()

        def broken(*args: object, **kwargs: object) -> list[object]:
            raise sqlite3.DatabaseError("database disk image is malformed")

        monkeypatch.setattr(mem.store, "keyword_search", broken)
        resp = mem.search("QQ billing", min_score=0.5, explain=True)
    assert any("keyword search failed" in w for w in resp.warnings)
    assert [(r.path, round(r.score, 6)) for r in resp.results] == [("memory/projects.md", 1.0),
                                                                    ("memory/2026-03-02.md", 0.6)]
    assert resp.results[0].explain["vectorWeight"] == 1.0


def test_the_search_tools_schema_says_what_an_explicit_min_score_does(make_workspace: Callable[..., Path]) -> None:
    """The schema said "minScore ... (default 0.35)", but an agent passing 0.35 did not get what it
    got without it: an explicit floor is strict, the configured one lets strong matches fill spare
    slots ("rescued").  And "(default 6)" held whatever maxResults was configured."""
    from memdir.tools import call_tool_payload, tool_spec

    # "team" is in every note: BM25 gives it almost nothing, but each note holds every word asked for
    ws = make_workspace({f"memory/2026-01-{10 + i:02d}.md": f"- {line} The team met.\n"
                         for i, line in enumerate(FILLER)})
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
        omitted = call_tool_payload(mem, "memory_search", {"query": "team"})["results"]
        given = call_tool_payload(mem, "memory_search", {"query": "team", "minScore": 0.35})["results"]
    assert omitted and all(r["score"] < 0.35 for r in omitted) and given == []  # the two differ...
    props = tool_spec("memory_search").parameters["properties"]  # ...and the schema says so
    assert "strict" in props["minScore"]["description"] and "(default 0.35)" not in props["minScore"]["description"]
    assert "(default 6)" not in props["maxResults"]["description"]


def test_decay_does_not_age_the_period_the_question_names(make_workspace: Callable[..., Path]) -> None:
    """Decay prefers recent notes when a question names no time; one that asks about March 2025
    wants March 2025: its note scored 2 × 0.002 (270 days at a 30-day half-life) of its match and
    came under a week-old note sharing one word with the question."""
    from memdir.search import run_search

    ws = make_workspace({"memory/2025-03-10.md": "- Decided on Postgres for the billing database.\n",
                         "memory/2025-11-20.md": "- The database backup ran late again.\n",
                         **{f"memory/2025-10-{10 + i:02d}.md": f"- {line}\n" for i, line in enumerate(FILLER)}})
    cfg = {"memorySearch": {"provider": "none", "query": {"hybrid": {"temporalDecay": {"enabled": True}}}}}
    now = 1764547200000  # 2025-12-01T00:00Z
    with Memory(ws, config=cfg) as mem:
        mem.sync()

        def search(question: str) -> list[tuple[str, float]]:
            resp = run_search(mem.store, mem.settings.memory_search, question, provider=None, workspace=ws,
                              now_ms=now, explain=True, min_score=0)
            return [(r.path, r.explain["decay"]) for r in resp.results]

        asked = search("what did we decide about the database in March 2025?")
        plain = search("what did we decide about the database?")
    assert asked[0] == ("memory/2025-03-10.md", 1.0)
    assert dict(asked)["memory/2025-11-20.md"] < 1.0  # outside the period: aged as before
    assert plain[0][0] == "memory/2025-11-20.md" and dict(plain)["memory/2025-03-10.md"] < 0.01


@pytest.mark.parametrize("question", ["what did I do yesterday?", "what happened on 2025-11-30?"])
def test_a_question_about_a_day_finds_that_days_log(make_workspace: Callable[..., Path], question: str) -> None:
    """"What did I do yesterday?" shares no word with yesterday's log (and a small model puts it no
    closer than any other note): the day's chunks joined the candidates, but at a score of 0 (×2)
    under the floor, and nothing was returned at all.  They now fill the spare slots, rescued."""
    from memdir.search import run_search

    ws = make_workspace({"memory/2025-11-30.md": "- Dentist at nine, then fixed the flaky login test.\n",
                         "memory/2025-10-02.md": "- Renewed the domain for two more years.\n",
                         "MEMORY.md": "# Preferences\n- Dark mode everywhere.\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
        resp = run_search(mem.store, mem.settings.memory_search, question, provider=None, workspace=ws,
                          now_ms=1764547200000, timezone="UTC", explain=True)  # 2025-12-01T00:00Z
        strict = run_search(mem.store, mem.settings.memory_search, question, provider=None, workspace=ws,
                            now_ms=1764547200000, timezone="UTC", min_score=0.1)
    assert [r.path for r in resp.results] == ["memory/2025-11-30.md"]
    assert resp.results[0].explain["rescuedBecause"] == "written in the period the question names"
    assert strict.results == []  # an explicit floor stays strict


@pytest.mark.parametrize(("weights", "question", "found"), [
    ((0.0, 1.0), "QQ quarterly", ["memory/2026-01-10.md"]),  # keywords alone: the cosine-only notes stay out
    ((1.0, 0.0), "QQ quarterly", ["memory/projects.md", "memory/2026-03-02.md", "memory/2026-03-05.md"]),
])
def test_a_signal_weighted_zero_rescues_nothing(make_workspace: Callable[..., Path], weights: tuple[float, float],
                                                question: str, found: list[str]) -> None:
    """``vectorWeight = 0`` ranks by keywords alone, yet notes only the vectors found came back,
    "rescued" at a score of 0.000 (cosine 1.0, 0.6, 0.3 ≥ 0.3); ``textWeight = 0`` likewise
    brought back the one note sharing "quarterly", at 0.000."""
    ws = make_workspace(NOTES)
    config = {"memorySearch": {"query": {"hybrid": {"vectorWeight": weights[0], "textWeight": weights[1]}}}}
    with Memory(ws, config=config, provider=MarkerProvider(MARKERS)) as mem:
        mem.sync()
        results = mem.search(question).results
    assert [r.path for r in results] == found and all(r.score > 0 for r in results)


def _long_line(marker: str, words: str, width: int = 780) -> str:
    """One line of a daily log as long as a chunk (so each line is a chunk of its own)."""
    text = f"- {marker}"
    while len(text) < width:
        text += " " + words
    return text[:width]


def test_mmr_never_lets_a_result_under_the_floor_hide_a_returned_one(make_workspace: Callable[..., Path]) -> None:
    """MMR (λ 0.3) put a dissimilar chunk scoring 0.07 second; widened before the 0.63 one below
    it, its span took that one's lines, so the 0.63 result was dropped as "shown already" while
    the 0.07 one, under the floor, was never returned: one result where λ 1 gave two."""
    day = [_long_line("mkA", "kafka billing consumer lag fixed offsets replayed"),
           _long_line("pad", "weather grey frost water"), _long_line("pad", "museum tickets train station"),
           _long_line("mkB", "team lunch river holidays garden"),
           _long_line("mkD", "kafka billing consumer lag fixed offsets retained")]
    ws = make_workspace({"memory/2026-01-10.md": "\n".join(day) + "\n"})
    markers = {"mkA": (1.0, 0.0, 0.0), "mkD": (0.9, 0.4359, 0.0), "mkB": (0.1, 0.0, 0.995), "QQ": (1.0, 0.0, 0.0)}
    found = {}
    for lam in (1.0, 0.3):
        config = {"memorySearch": {"query": {"hybrid": {"mmr": {"enabled": True, "lambda": lam}}}}}
        with Memory(ws, config=config, provider=MarkerProvider(markers), agent_id=f"mmr{int(lam * 10)}") as mem:
            mem.sync()
            found[lam] = [(r.start_line, round(r.score, 2)) for r in mem.search("QQ").results]
    assert found[1.0] == [(1, 0.7), (4, 0.63)]  # the 0.63 chunk (line 5) widened over line 4 and the rest
    assert found[0.3] == found[1.0]


def test_a_candidate_that_is_not_returned_never_hides_a_rescued_one(make_workspace: Callable[..., Path]) -> None:
    """Below the floor, each candidate was widened in turn before its rescue was decided: a line
    scoring 0.196 (cosine 0.28, no reason to rescue it) took the next line of its note, and that
    line, holding every word of the question (BM25 0.91, rescued), was dropped as "shown already"
    though nothing showed it."""
    day = [_long_line("mkX", "weather grey frost water garden"),
           _long_line("mkY", "the kafka export and the billing ledger were slow after lunch with the design team")]
    ws = make_workspace({"memory/2026-01-10.md": "\n".join(day) + "\n",
                         "memory/2026-01-20.md": "- kafka billing ledger: kafka billing ledger reconciled. mkZ\n",
                         **{f"memory/2026-02-{10 + i:02d}.md": f"- {line}\n" for i, line in enumerate(FILLER)}})
    markers = {"mkX": (0.28, 0.96, 0.0), "mkY": (-0.5, 0.0, 0.866), "mkZ": (0.2, 0.0, 0.98), "QQ": (1.0, 0.0, 0.0)}
    with Memory(ws, provider=MarkerProvider(markers)) as mem:
        mem.sync()
        results = mem.search("QQ kafka billing ledger", explain=True).results
        everything = mem.search("QQ kafka billing ledger", explain=True, min_score=0).results
    assert [r.path for r in everything[:2]] == ["memory/2026-01-20.md", "memory/2026-01-10.md"]
    assert everything[1].explain["vectorScore"] == pytest.approx(0.28)  # line 1 outranks line 2 under the floor
    assert [r.path for r in results] == ["memory/2026-01-20.md", "memory/2026-01-10.md"]
    rescued = results[1]
    assert rescued.explain["rescued"] and rescued.explain["textScore"] > 0.6 and rescued.end_line >= 2
    assert "kafka export" in rescued.snippet


@pytest.mark.parametrize("question", ["zebra\x00", "\x07zebra\x1b"])
def test_a_control_character_glued_to_a_word_finds_what_the_word_finds(make_workspace: Callable[..., Path],
                                                                       keyword_config, question: str) -> None:
    """Three notes of five say zebra: each scores at BM25's IDF floor and is returned as holding every
    keyword of the question; with a NUL after the word (an MCP client's "zebra\\u0000") the keyword
    was "zebra\\x00", which no note holds, and two of the three were no longer returned."""
    ws = make_workspace({"memory/2026-01-01.md": "- a note about lunch and zebra\n",
                         "memory/2026-01-02.md": "- another zebra note\n", "memory/2026-01-03.md": "- third zebra\n",
                         "memory/2026-01-04.md": "- nothing here\n", "memory/2026-01-05.md": "- nothing here either\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        plain = [r.path for r in mem.search("zebra").results]
        assert len(plain) == 3 and [r.path for r in mem.search(question).results] == plain
