"""Search behaviour: hostile queries, CJK, rescue, merge/decay/MMR (R§17 vectors 33-39)."""

from __future__ import annotations

import math

import pytest

from memdir.api import Memory
from memdir.ranking import Candidate, decay_multiplier, merge_hybrid, mmr_rerank
from memdir.stores.base import Hit

HOSTILE = [
    '"', '""', '"unbalanced', "NEAR(a b)", "a NEAR b", "*", "foo*", "-", "-foo", "a - b", "((", "))(", "(a OR b",
    "AND", "OR NOT", "NOT", "^start", "col:value", "text:alpha", "{a b}", "a + b", "😀🔥", "🙂 deploy 🚀",
    "\x00", "'; DROP TABLE chunks; --", "%_%", "\\", "a" * 10_000, "alpha " * 2_000, "ß" * 5000, "ﷺ" * 100,
    "\u200b\u200d", "中" * 3000, "에러를 " * 500,
]


@pytest.fixture
def mem(make_workspace, keyword_config):
    ws = make_workspace({
        "MEMORY.md": "# Preferences\nThe user prefers dark mode and terse answers.\nProject codename: BLUEFIN-42.",
        "memory/2026-01-12.md": "Deployed the API gateway. Decided to use PostgreSQL for the ledger.",
        "memory/2026-01-13.md": (
            "之前讨论的那个方案已经通过了。\n서버에서 발생한 에러를 확인했다.\nデプロイ戦略を決めた。"
        ),
        "memory/2026-01-14.md": "Alpha release notes. " * 200,
    })
    with Memory(ws, config=keyword_config) as m:
        m.sync()
        yield m


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_raise(mem: Memory, query: str):
    resp = mem.search(query)
    assert isinstance(resp.results, list)
    assert not any("keyword search failed" in w for w in resp.warnings)


def test_operators_are_words_not_syntax(mem: Memory):
    assert mem.search("postgresql OR NOT").results[0].path == "memory/2026-01-12.md"


@pytest.mark.parametrize("query,path", [
    ("讨论", "memory/2026-01-13.md"),
    ("方案", "memory/2026-01-13.md"),
    ("에러", "memory/2026-01-13.md"),
    ("서버", "memory/2026-01-13.md"),
    ("デプロイ", "memory/2026-01-13.md"),
    ("戦略", "memory/2026-01-13.md"),
])
def test_cjk_queries_find_their_notes(mem: Memory, query: str, path: str):
    results = mem.search(query).results
    assert results and results[0].path == path


def test_cjk_questions_are_not_one_phrase_nor_all_terms_at_once(make_workspace, keyword_config):
    """R§18.4: OpenClaw ANDed the CJK terms of a question (#83384: terms from two notes → no hit)
    and matched a long CJK question as one exact phrase (#110500: a reworded note → text score 0)."""
    ws = make_workspace({"memory/2026-01-13.md": "部署策略已经确定。\n", "memory/2026-01-14.md": "预算方案需要修改。\n",
                         "memory/2026-01-15.md": "我们之前讨论过这个迁移方案。\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        found = {r.path for r in mem.search("部署 预算", max_results=6).results}
        assert {"memory/2026-01-13.md", "memory/2026-01-14.md"} <= found
        top = mem.search("之前讨论的那个迁移方案", explain=True).results[0]
        assert top.path == "memory/2026-01-15.md" and top.explain["textScore"] > 0


def test_a_search_of_an_index_never_built_says_so(make_workspace):
    """R§18.5: a search before the first sync answered "no results" as if memory held nothing; with
    ``sync.onSearch = false`` (or ``sync=False``) memdir does not build it, and now says so."""
    ws = make_workspace({"memory/2026-01-12.md": "kafka ordering decision\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none", "sync": {"onSearch": False}}}) as mem:
        resp = mem.search("kafka")
        assert resp.results == [] and resp.stale
        assert any("has not been built yet" in w for w in resp.warnings)
        mem.sync()
        resp = mem.search("kafka")
        assert resp.results and not resp.stale and not any("built yet" in w for w in resp.warnings)


def test_result_shape_and_snippet_limit(mem: Memory):
    r = mem.search("alpha release").results[0]
    d = r.as_dict()
    assert set(d) == {"path", "startLine", "endLine", "score", "snippet", "source"}
    assert d["source"] == "memory" and len(d["snippet"]) <= 700
    assert r.start_line <= r.end_line


def test_max_results_and_min_score(mem: Memory):
    assert len(mem.search("alpha release", max_results=1).results) == 1
    assert mem.search("alpha", max_results=0).results == []
    # an explicit floor is the user's: nothing below it comes back, not even a "rescued" hit
    assert mem.search("dark mode", min_score=0.99).results == []
    # an impossible *configured* floor: keyword-only falls back to its best match (OpenClaw v4.12)
    strict = Memory(mem.workspace, state_dir=mem.settings.state_dir,
                    config={"memorySearch": {"provider": "none", "query": {"minScore": 0.99}}})
    with strict:
        (hit,) = strict.search("dark mode", explain=True).results
        assert hit.explain["rescued"] and hit.explain["rescuedBecause"] and hit.score < 0.99


def test_explain_reports_signals(mem: Memory):
    r = mem.search("BLUEFIN-42 codename", explain=True).results[0]
    assert r.path == "MEMORY.md"
    assert r.explain["matched"] == ["keyword"] and r.explain["textWeight"] == 1.0
    assert r.explain["textScore"] == pytest.approx(r.score)


def _hit(i, score, text="x", path=None):
    return Hit(i, path or f"memory/{i}.md", "memory", 1, 1, text, score)


def test_v33_merge_and_floor():
    merged = {c.id: c.score for c in merge_hybrid([_hit("a", 0.9)], [_hit("b", 1.0)], 0.7, 0.3)}
    assert merged == pytest.approx({"a": 0.63, "b": 0.3})


def test_v34_same_id_keyword_snippet_wins():
    (c,) = merge_hybrid([_hit("a", 0.2, "vec-a")], [_hit("a", 1.0, "kw-a")], 0.5, 0.5)
    assert c.score == pytest.approx(0.6) and c.snippet == "kw-a"


@pytest.mark.parametrize("age,hl,mult", [(0, 30, 1.0), (7, 30, 0.850667), (10, 30, 0.793701), (30, 30, 0.5),
                                         (90, 30, 0.125), (148, 30, 0.032728), (180, 30, 0.015625), (14, 14, 0.5),
                                         (-5, 30, 1.0)])
def test_v35_decay_multipliers(age, hl, mult):
    assert decay_multiplier(age, hl) == pytest.approx(mult, abs=1e-6)


def _cands(spec):
    return [Candidate(str(i), f"{i}.md", "memory", 1, 1, text, score=s) for i, s, text in spec]


@pytest.mark.parametrize("lam,order", [(0.7, "123"), (0.5, "123"), (0.4, "132"), (0.0, "132"), (1.0, "123"),
                                       (1.5, "123")])
def test_v37_mmr(lam, order):
    c = _cands([(1, 1.0, "apple banana cherry"), (2, 0.9, "apple banana date"), (3, 0.8, "elderberry fig grape")])
    assert "".join(x.id for x in mmr_rerank(c, lam)) == order


@pytest.mark.parametrize("lam,order", [(0.5, "1324"), (0.7, "1234")])
def test_v38_mmr(lam, order):
    c = _cands([(1, 1.0, "machine learning neural networks"), (2, 0.95, "machine learning deep learning"),
                (3, 0.9, "database systems sql queries"), (4, 0.85, "machine learning algorithms")])
    assert "".join(x.id for x in mmr_rerank(c, lam)) == order


def test_mmr_tells_cjk_snippets_apart():
    c = _cands([(1, 1.0, "部署策略讨论"), (2, 0.99, "部署策略讨论了"), (3, 0.98, "数据库迁移计划")])
    assert [x.id for x in mmr_rerank(c, 0.5)] == ["1", "3", "2"]


def test_mmr_compares_each_candidate_with_each_chosen_one_once(monkeypatch: pytest.MonkeyPatch):
    """MMR over a full pool (maxResults 50 × the multiplier, both signals: ~400 candidates) took
    ~10 s a search: every step compared every remaining candidate with every chosen one again.
    The order is the greedy one of R§7.2 (checked against it here), at n²/2 comparisons."""
    import random

    from memdir import ranking

    rng = random.Random(7)
    words = [f"w{i}" for i in range(40)]
    spec = [(i, round(rng.random(), 2), " ".join(rng.choice(words) for _ in range(6))) for i in range(120)]
    toks = {str(i): ranking.mmr_tokens(text) for i, _, text in spec}

    def greedy(cands: list[Candidate], lam: float) -> list[str]:
        lo, hi = min(c.score for c in cands), max(c.score for c in cands)
        rel = {c.id: (c.score - lo) / (hi - lo) for c in cands}
        left, chosen = list(cands), []
        while left:
            best, val = left[0], -math.inf
            for c in left:
                v = lam * rel[c.id] - (1 - lam) * max((ranking.jaccard(toks[c.id], toks[j]) for j in chosen),
                                                      default=0.0)
                if v > val or (v == val and c.score > best.score):
                    best, val = c, v
            chosen.append(best.id)
            left.remove(best)
        return chosen

    want = greedy(_cands(spec), 0.6)
    calls = 0
    real = ranking.jaccard

    def counted(a: frozenset[str], b: frozenset[str]) -> float:
        nonlocal calls
        calls += 1
        return real(a, b)

    monkeypatch.setattr(ranking, "jaccard", counted)
    assert [c.id for c in mmr_rerank(_cands(spec), 0.6)] == want
    assert calls <= len(spec) ** 2 // 2, calls  # not ~n³/6 (288k here)


def test_v36_decay_ranks_recent_dated_notes_first(make_workspace):
    import os
    import time as _t

    ws = make_workspace({"memory/2025-01-01.md": "ledger decision", "memory/2026-02-10.md": "ledger decision again",
                         "memory/2099-01-01.md": "ledger future", "MEMORY.md": "ledger evergreen",
                         "memory/projects.md": "ledger projects", "memory/2026-02-30.md": "ledger invalid date"})
    old = _t.time() - 3 * 365 * 86400
    os.utime(ws / "memory/2026-02-30.md", (old, old))
    cfg = {"memorySearch": {"provider": "none", "query": {"hybrid": {"temporalDecay": {"enabled": True}}}}}
    from memdir.search import run_search

    with Memory(ws, config=cfg) as mem:
        mem.sync()
        now = 1770681600000  # 2026-02-10T00:00Z
        resp = run_search(mem.store, mem.settings.memory_search, "ledger", provider=None, workspace=ws, now_ms=now,
                          explain=True, max_results=10, min_score=0)
        decay = {r.path: r.explain["decay"] for r in resp.results}
    assert decay["memory/2026-02-10.md"] == 1.0
    assert decay["memory/2025-01-01.md"] == pytest.approx(2 ** (-405 / 30), abs=1e-6)
    assert decay["memory/2099-01-01.md"] == 1.0
    assert decay["MEMORY.md"] == 1.0 and decay["memory/projects.md"] == 1.0
    assert decay["memory/2026-02-30.md"] < 0.01  # invalid date: mtime (3 years ago) is used
    order = [r.path for r in resp.results]
    assert order.index("memory/2026-02-10.md") < order.index("memory/2025-01-01.md")
    assert math.isfinite(resp.results[0].score)


def test_a_curated_result_grows_within_its_section_only(make_workspace, keyword_config):
    """A MEMORY.md hit is one bullet group (the sections chunker); its result grows over the rest
    of its section like a daily log's result grows, heading included, but never into the next
    section (another topic).  With ``widen_sections`` off it is the bullet group alone."""
    from memdir.indexing_switches import INDEXING

    groups = "\n\n".join(f"- Garden item {i}: the tomatoes need stakes {i}.\n- Note {i}." for i in range(6))
    text = (f"# Memory\n\n## Billing\n\n- Invoices go out on the 3rd.\n- Ledger is the source.\n\n"
            f"## Garden\n\n{groups}\n- Kohlrabi was planted in March.\n\n"
            f"## Travel\n\n- Prefers window seats.\n- Lisbon in May.\n")
    lines = text.split("\n")
    garden, travel = lines.index("## Garden") + 1, lines.index("## Travel") + 1
    kohlrabi = next(n for n, line in enumerate(lines, start=1) if "Kohlrabi" in line)
    ws = make_workspace({"MEMORY.md": text, **{f"memory/2025-12-{d:02d}.md": f"- standup {d}\n" for d in range(1, 6)}})

    def top(widen: bool) -> tuple[int, int]:
        INDEXING["widen_sections"] = widen
        try:
            with Memory(ws, config=keyword_config) as m:
                r = m.search("kohlrabi", sync=True).results[0]
        finally:
            INDEXING["widen_sections"] = True
        assert r.path == "MEMORY.md" and r.start_line <= kohlrabi <= r.end_line
        return r.start_line, r.end_line

    alone, grown = top(False), top(True)
    assert alone[1] - alone[0] <= 3  # its bullet group
    assert garden <= grown[0] < alone[0] and grown[1] >= alone[1]  # grew over its section
    assert grown[1] < travel  # and not into the next one


def test_equal_scores_come_in_path_order_whatever_the_index_row_order(make_workspace, backend):
    """The same line in three notes scores the same: they came in the index's row order, so a
    note edited (its rows written again, last) moved behind the others, and a rebuild moved it
    back: one question, two orders.  Ties are in path order, as OpenClaw sorts, on either store."""
    note = "# Notes\n- call the plumber about the leaking sink\n"
    ws = make_workspace({f"memory/{n}.md": note for n in "abc"})

    def order(mem: Memory) -> list[str]:
        results = mem.search("plumber leaking sink", min_score=0).results
        assert len({r.score for r in results}) == 1  # a real tie
        return [r.path for r in results]

    want = ["memory/a.md", "memory/b.md", "memory/c.md"]
    with Memory(ws, config=backend.config({"memorySearch": {"provider": "none"}})) as mem:
        mem.sync()
        assert order(mem) == want
        (ws / "memory/a.md").write_text("other", encoding="utf-8")
        mem.sync()
        (ws / "memory/a.md").write_text(note, encoding="utf-8")
        mem.sync()
        assert order(mem) == want
        mem.sync(force=True)
        assert order(mem) == want
