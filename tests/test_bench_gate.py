"""Quality gate: behaviour on a tiny fixed dataset (tests/data/gate), not speed.

The dataset has two kinds of question (see its queries.jsonl):

* ``paraphrase`` — shares no content word with the note that answers it: keyword search cannot
  find it, hybrid search must;
* ``exact`` — an identifier or a rare name: keyword search must find it at rank 1, and hybrid
  must keep it there even where a vector model alone does not rank it (``QX-1773`` among eight
  look-alike tickets, the key fingerprint ``9f3c2a``).

Keyword assertions always run.  The hybrid ones need the embedded model
(``memdir.embeddings.local``); until it is on this branch they are skipped with that reason.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from memdir.bench.adapters import Answer, MemdirAdapter
from memdir.bench.quality import load_samples, score_query
from memdir.query import extract_keywords
from memdir.textutil import stem, stem_text

GATE = Path(__file__).parent / "data" / "gate"
HAS_LOCAL_MODEL = importlib.util.find_spec("memdir.embeddings.local") is not None
needs_model = pytest.mark.skipif(
    not HAS_LOCAL_MODEL,
    reason="memdir.embeddings.local (the embedded model) is not on this branch yet: hybrid gate not run",
)
#: Questions a vector model alone leaves out of its top 3 (measured with all-MiniLM-L6-v2).
VECTOR_MISSES = ("gate/e3", "gate/e5")


def _queries() -> list[dict[str, Any]]:
    (_name, _ws, queries), = load_samples(GATE)
    return queries


def _workspace() -> Path:
    (_name, ws, _queries), = load_samples(GATE)
    return ws


def _answers(mode: str, tmp_path: Path, min_score: float | None = None) -> dict[str, tuple[dict[str, Any], Answer]]:
    session = MemdirAdapter(mode, min_score=min_score).index(_workspace(), tmp_path / f"state-{mode}")
    try:
        return {q["id"]: (q, session.search(q["query"], 3)) for q in _queries()}
    finally:
        session.close()


def _rank(q: dict[str, Any], ans: Answer) -> int | None:
    for i in range(1, len(ans.ranked) + 1):
        if score_query(q["relevant"], ans.ranked[:i], [i]).hit[i]:
            return i
    return None


def _of(kind: str) -> list[str]:
    return [q["id"] for q in _queries() if q["category"] == kind]


def test_gate_dataset_is_well_formed() -> None:
    queries = _queries()
    assert len(queries) >= 10
    assert {q["category"] for q in queries} == {"paraphrase", "exact", "wordform", "date", "structure", "window"}
    ws = _workspace()
    for q in queries:
        for rel in q["relevant"]:
            lines = (ws / rel["path"]).read_text(encoding="utf-8").splitlines()
            assert 1 <= rel["line"] <= len(lines) and lines[rel["line"] - 1].startswith("- "), q["id"]


def test_paraphrases_share_no_content_word_with_their_note() -> None:
    """What makes them paraphrases: no keyword of the question occurs anywhere in its file."""
    ws = _workspace()
    for q in _queries():
        if q["category"] != "paraphrase":
            continue
        text = (ws / q["relevant"][0]["path"]).read_text(encoding="utf-8").lower()
        words = set(re.findall(r"\w+", text))
        stems = set(stem_text(text).split())
        shared = [k for k in extract_keywords(q["query"]) if k in words or (stem(k) or k) in stems]
        assert not shared, f"{q['id']} shares {shared} with its note"


def test_keyword_finds_every_exact_identifier_first(tmp_path: Path) -> None:
    answers = _answers("keyword", tmp_path)
    for qid in _of("exact"):
        q, ans = answers[qid]
        assert ans.mode == "keyword"
        assert _rank(q, ans) == 1, f"{qid} ({q['query']}): {[(h.path, h.start_line) for h in ans.ranked]}"


def test_keyword_misses_every_paraphrase(tmp_path: Path) -> None:
    answers = _answers("keyword", tmp_path, min_score=0.0)
    for qid in _of("paraphrase"):
        q, ans = answers[qid]
        assert _rank(q, ans) is None, f"{qid} found by keywords: the gate question is not a paraphrase"


def test_bench_reports_a_mode_that_ran_keyword_only(tmp_path: Path) -> None:
    """Without a model, a hybrid run must say it ran keyword-only, never pass as hybrid."""
    if HAS_LOCAL_MODEL:
        pytest.skip("an embedding model is available: hybrid really runs")
    answers = _answers("hybrid", tmp_path)
    assert {a.mode for _, a in answers.values()} == {"keyword"}
    assert all(a.note for _, a in answers.values())


@needs_model
def test_hybrid_ranks_every_paraphrase_in_top_3(tmp_path: Path) -> None:
    answers = _answers("hybrid", tmp_path, min_score=0.0)
    for qid in _of("paraphrase"):
        q, ans = answers[qid]
        assert ans.mode == "hybrid", ans.note
        assert _rank(q, ans) is not None, f"{qid} ({q['query']}): {[(h.path, round(h.score, 3)) for h in ans.ranked]}"


@needs_model
def test_hybrid_returns_every_paraphrase_with_default_settings(tmp_path: Path) -> None:
    """At the default floor (0.35, vector weight 0.7) a vector-only hit would need cosine >= 0.5;
    MiniLM scores these paraphrases 0.31-0.48, so they are found through the vector rescue."""
    answers = _answers("hybrid", tmp_path)
    missed = [qid for qid in _of("paraphrase") if _rank(*answers[qid]) is None]
    assert not missed


@needs_model
def test_hybrid_keeps_exact_identifiers_that_vectors_miss(tmp_path: Path) -> None:
    vector = _answers("vector", tmp_path)
    hybrid = _answers("hybrid", tmp_path)
    for qid in VECTOR_MISSES:
        q, ans = vector[qid]
        assert ans.mode == "vector", ans.note
        assert _rank(q, ans) is None, f"{qid}: the vector model now finds it; pick a harder identifier"
    for qid in _of("exact"):
        q, ans = hybrid[qid]
        assert ans.mode == "hybrid", ans.note
        assert _rank(q, ans) == 1, f"{qid} ({q['query']}): {[(h.path, round(h.score, 3)) for h in ans.ranked]}"


# One question per cause of a miss found on LoCoMo and hand-written notes (issue 10); each one
# failed on the search of b23f595 (noted per test) and must pass now.

def test_keyword_forgives_word_forms(tmp_path: Path) -> None:
    """"passport renewal" vs "Renewed the passports": no exact word in common (was: not found)."""
    answers = _answers("keyword", tmp_path)
    for qid in _of("wordform"):
        assert _rank(*answers[qid]) == 1, qid


def test_a_date_in_the_question_finds_that_days_file(tmp_path: Path) -> None:
    """"... logged on 12 February 2025?" among eight look-alike daily files: the answer is in the
    one *named* 2025-02-12 (was: not found by keywords)."""
    answers = _answers("keyword", tmp_path)
    for qid in _of("date"):
        q, ans = answers[qid]
        assert _rank(q, ans) == 1, [(h.path, round(h.score, 3)) for h in ans.ranked]


def test_an_identifier_inside_a_sentence_is_matched_exactly(tmp_path: Path) -> None:
    """"Who owns ticket QX-1773?": the ID's parts are short/numeric words that keyword extraction
    used to drop (was: not found by keywords or hybrid)."""
    answers = _answers("keyword", tmp_path)
    assert _rank(*answers["gate/x1"]) == 1


def test_memory_md_sections_are_their_own_chunks(tmp_path: Path) -> None:
    """A 19-line MEMORY.md with headings used to be one chunk: every answer from it was 19 lines."""
    answers = _answers("keyword", tmp_path)
    for qid in _of("structure"):
        q, ans = answers[qid]
        top = ans.ranked[0]
        assert _rank(q, ans) == 1 and top.end_line - top.start_line + 1 <= 4, (top.start_line, top.end_line)


@needs_model
def test_vectors_see_text_past_the_model_window(tmp_path: Path) -> None:
    """The answer is the last line of a 1,400-character chunk, past MiniLM's 256 tokens: the
    vector side only finds it if every window of the chunk is embedded (was: not found)."""
    answers = _answers("vector", tmp_path, min_score=0.0)  # visibility, not the floor
    for qid in _of("window"):
        q, ans = answers[qid]
        assert ans.mode == "vector" and _rank(q, ans) is not None, [(h.path, h.start_line) for h in ans.ranked]


@needs_model
def test_hybrid_finds_every_cause_question(tmp_path: Path) -> None:
    answers = _answers("hybrid", tmp_path)
    for qid in _of("wordform") + _of("date") + _of("structure") + _of("window") + ["gate/x1"]:
        assert _rank(*answers[qid]) is not None, qid


def test_gate_queries_file_is_jsonl() -> None:
    for line in (GATE / "notes" / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert set(row) >= {"id", "query", "category", "relevant"}


LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo-dev"


@pytest.mark.skipif(not (LOCOMO / "README.md").is_file(), reason=f"LoCoMo dev split not found at {LOCOMO}")
def test_keyword_quality_on_locomo_dev_does_not_regress() -> None:
    """Floors a little under today's keyword figures (R@10 0.826, MRR@10 0.715, hit@10 0.874)."""
    from memdir.bench.adapters import OpenClawV2KeywordAdapter
    from memdir.bench.quality import run_quality

    report = run_quality(LOCOMO, ks=[1, 10], adapters=[MemdirAdapter("keyword"), OpenClawV2KeywordAdapter()])
    ours = report["runs"]["memdir:keyword"]
    assert ours["queries"] == 760
    assert ours["overall"]["recall"]["10"] >= 0.80
    assert ours["overall"]["hit"]["10"] >= 0.85
    assert ours["overall"]["mrr"]["10"] >= 0.68
    theirs = report["runs"]["openclaw-v2.27-keyword"]["overall"]
    assert ours["overall"]["recall"]["1"] > 5 * theirs["recall"]["1"]
