"""Phrase frequencies counted in Python equal FTS5's own (the scratch-table path) on simple texts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memdir.stores import kw_text
from memdir.stores.fts_scores import FtsScorer
from memdir.stores.sqlite import SqliteStore
from memdir.textutil import fts_text, stem_counts, stem_text

WORDS = ("deploy deployed deploying deployment dying lying tying tie lie die hoping hope happily happy "
         "generator generating generation latency latencies p95 api API inc 54959 inc54959 v2 a an the "
         "fence fences painted painting sky skies news under score under_score x1 9f3c2a bill billing "
         "billed relational relation sensitivity possibly ugly early only gently").split()
SEPARATORS = (" ", "  ", ", ", ". ", " - ", "-", "_", "/", " — ", "–", "“", "” ", "’", "'", " € ", "✓", " 🚀 ",
              "\n", "\t", ":", "(", ")", "#", "…", " ° ", "¿")


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 40)):
            w = rng.choice(WORDS)
            parts.append(w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.2 else w)
            parts.append(rng.choice(SEPARATORS))
        out.append("".join(parts))
    return out


@pytest.fixture
def scorer(tmp_path: Path) -> FtsScorer:
    store = SqliteStore(tmp_path / "idx.sqlite")
    return FtsScorer(store.conn, "chunks_fts", "unicode61", fts_text, stem_text, stem_counts)


def test_simple_texts_are_recognised():
    assert kw_text.is_simple("plain ascii, with_underscore and 123")
    assert kw_text.is_simple("dash — quotes “x” euro € check ✓ rocket 🚀 ellipsis …")
    for text in ("café", "naïve", "讨论", "에러", "x\u0301", "soft\u00adhyphen", "x²", "\ue000private", "Ⅻ"):
        assert not kw_text.is_simple(text), text


def test_python_counts_equal_fts5_tokenizer(scorer: FtsScorer):
    rng = random.Random(7)
    texts = [*_texts(300, seed=3), "a a a a", "inc inc 54959 inc-54959 INC_54959", "dying, lying; tying!",
             "deploy deploy-deploy deployed", "__init__ x_1 x1"]
    docs = {i + 1: t for i, t in enumerate(texts)}
    assert all(kw_text.is_simple(t) for t in texts)
    checked = 0
    for _ in range(40):
        picked = rng.sample(WORDS, 3)
        phrases = [("text", f'"{w.lower().replace("_", " ")}"') for w in picked]
        phrases += [("text", '"inc 54959"'), ("text", '"a a"'), ("text", '"deploy deploy"')]
        phrases += [("stems", f'"{s}"') for s in dict.fromkeys(stem_text(" ".join(picked)).split())]
        phrases += [("stems", '"die"'), ("stems", '"lie"'), ("stems", '"hope"')]
        specs = scorer.phrase_specs(phrases)
        fast = scorer._fast_freqs(specs, docs)
        slow = scorer._scratch_freqs(specs, docs)
        assert set(fast) == set(docs)
        for r in docs:
            assert fast[r] == slow[r], (docs[r], phrases)
        checked += sum(1 for r in docs for f in fast[r] if f)
    assert checked > 1000  # the phrases really occur


def test_overlapping_and_exceptional_forms():
    assert kw_text.phrase_count("a a a", ["a", "a"]) == 2
    assert kw_text.phrase_count("inc-54959 inc 54959x inc54959", ["inc", "54959"]) == 1
    assert kw_text.phrase_count("xdeploy deployx deploy", ["deploy"]) == 1
    from memdir.textutil import stem_word

    counts = kw_text.stem_counts("dying and lying, tied ties tie", {"die", "lie", "tie"}, stem_word)
    assert counts == {"die": 1, "lie": 1, "tie": 3}


def test_non_simple_texts_go_through_fts5(scorer: FtsScorer):
    docs = {1: "Café meeting, the cafe was crowded", 2: "plain cafe text"}
    specs = scorer.phrase_specs([("text", '"cafe"')])
    assert set(scorer._fast_freqs(specs, docs)) == {2}
    assert scorer._scratch_freqs(specs, docs) == {1: [2], 2: [1]}
