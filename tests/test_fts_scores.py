"""Complete keyword scores: the store's own BM25 for chosen chunks equals FTS5's bm25()."""

from __future__ import annotations

from pathlib import Path

import pytest

from memdir.query import fts5_match, keyword_terms, match_phrases
from memdir.stores.base import ChunkRow
from memdir.stores.fts_scores import read_varints
from memdir.stores.sqlite import SqliteStore, bm25_to_score

TEXTS = [
    "We painted the fence and the painting dried overnight. Painting is fun.",
    "Ticket QX-1773 was closed; QX 1773 reopened after the deploy to eu-west.",
    "Café meeting with Zoë about the résumé; the cafe was crowded.",
    # an English note's accented words are stemmed without their accents (cafés → cafe)
    "Three cafés, two résumés and one naïvely cached Müller's token; l’été was warm.",
    "之前讨论的那个方案 需要 再 讨论 一下, deploy 讨论",
    "에러를 고쳤다. 에러 로그를 확인했다 error logs",
    "Routine standup. Nothing new, routine routine.",
    "The API uses cursor pagination; pagination keeps the cursor stable.",
    "Frustrating checkups: the checkup frustrated everyone, frustration everywhere.",
    "fingerprint 9f3c2a matches 9f3c2a-backup and not 9f3c2b",
    "under_score tokens and mixed-case Tokens TOKENS",
    # stemmed by German and French rules (memdir.stemming), ASCII or not: the counts must follow
    "Wir haben die Lampe aus Messing repariert und die Lampen sind wieder hell, wir sind froh.",
    "Wir haben gestern die Pässe erneuert und das Auto bezahlt; die Pässe sind neu.",
    "Nous avons renouvele les passeports et paye la voiture pour les vacances, et nous partons.",
    # CamelCase words: their parts are stemmed too (memdir.stemming.camel_words)
    "psycopg2.OperationalError: too many connections; the OOMKilled pods, an operational error log",
]
QUERIES = ["painting the fence", "QX-1773 deploy", "cafe resume", "讨论 方案", "에러 로그", "routine",
           "cursor pagination API", "frustrating checkup", "9f3c2a fingerprint", "tokens under score",
           "nothing matches zzzz", "deploy", "Lampen aus Messing", "wann habe ich die Pässe erneuert",
           "passeport vacances", "quand avons-nous paye la voiture", "cafes resumes", "résumés naive muller",
           "operational errors", "oom killed", "OperationalError"]


@pytest.mark.parametrize("tokenizer", ["unicode61", "trigram"])
def test_scores_for_chosen_chunks_equal_fts5_bm25(tmp_path: Path, tokenizer: str):
    store = SqliteStore(tmp_path / "idx.sqlite", fts_tokenizer=tokenizer)
    filler = [f"filler note {i} about lunch and weather {i % 7}" for i in range(40)]
    with store.transaction():
        for f, text in enumerate(TEXTS + filler):
            store.replace_file(f"f{f}.md", "memory", f"h{f}", 1, 1,
                               [ChunkRow(f"c{f}", f"f{f}.md", "memory", 1, 1, f"h{f}", "m", text)])
    ids = [f"c{i}" for i in range(len(TEXTS) + 5)]
    checked = 0
    for q in QUERIES:
        terms = keyword_terms(q)
        match = match_phrases(store._phrases(terms))  # as the store spells them for its tokenizer
        fts = {cid: bm25_to_score(rank) for cid, rank in store.conn.execute(
            "SELECT c.id, bm25(chunks_fts) FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid "
            "WHERE chunks_fts MATCH ?", (match,))} if match else {}
        got = store.keyword_scores(terms, ids)
        assert set(got) == set(ids)
        for cid in ids:
            assert got[cid] == pytest.approx(fts.get(cid, 0.0), abs=1e-9), (q, cid)
        checked += sum(1 for cid in ids if fts.get(cid))
        # and keyword_search reports the same figures for what it returns
        for hit in store.keyword_search(terms, 5):
            assert got.get(hit.id, fts.get(hit.id)) == pytest.approx(hit.score, abs=1e-9)
    assert checked >= 12  # the queries really matched something
    store.close()


def test_varints_decode_like_sqlite():
    assert read_varints(bytes([0x05])) == [5]
    assert read_varints(bytes([0x81, 0x00, 0x7F])) == [128, 127]
    assert read_varints(bytes([0xFF] * 8 + [0x01])) == [(1 << 64) - 255]


def test_stem_text_words_are_the_latin_word_runs():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from memdir.textutil import _LATIN_WORD, word_runs

    alphabet = st.sampled_from(list("abcXYZ_9 -é.İi\u0307K\u212a日本에ß\n'"))

    @settings(max_examples=400, deadline=None)
    @given(st.text(alphabet=alphabet, max_size=40))
    def check(text: str) -> None:
        low = text.lower()
        assert _LATIN_WORD.findall(low) == [w for w in word_runs(low) if len(w) >= 3 and w.isascii() and w.isalpha()]

    check()


def test_phrases_in_half_the_chunks_are_pruned_without_changing_the_ranking(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(SqliteStore, "PRUNE_MIN_ROWS", 10)
    store = SqliteStore(tmp_path / "idx.sqlite")
    texts = [f"meeting notes {i}: budget review" + (" with quasar" if i % 9 == 0 else "")
             + (" and heron budget" if i % 4 == 0 else "") for i in range(120)]
    with store.transaction():
        for i, text in enumerate(texts):
            store.replace_file(f"f{i}.md", "memory", f"h{i}", 1, 1,
                               [ChunkRow(f"c{i}", f"f{i}.md", "memory", 1, 1, f"h{i}", "m", text)])
    for q in ("quasar budget meeting", "heron budget", "meeting notes review"):
        terms = keyword_terms(q)
        full = store.conn.execute(
            "SELECT c.id, bm25(chunks_fts) r FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid "
            "WHERE chunks_fts MATCH ? ORDER BY r LIMIT 10", (fts5_match(terms),)).fetchall()
        got = store.keyword_search(terms, 10)
        assert [h.score for h in got] == pytest.approx([bm25_to_score(r) for _, r in full], abs=1e-5)
        best = {cid for cid, r in full if r < full[0][1] + 1e-5}  # ties may come in another order
        assert got[0].id in best
    pruned = store._useful_phrases([("text", '"budget"'), ("text", '"quasar"')])
    assert pruned == [("text", '"quasar"')]  # "budget" is in every chunk: IDF floored, left out
    assert store._useful_phrases([("text", '"budget"'), ("text", '"meeting"')]) == [("text", '"budget"')]
    assert store.describe()["fts"]["warm"]["phraseCounts"] >= 3  # kept for the next query (status shows it)
    store.close()


def test_edits_keep_the_keyword_statistics_of_a_clean_build(tmp_path: Path):
    """Deleted rows leave FTS5's row and token totals (BM25's N and average length): an edited
    index must rank exactly as one built from scratch."""
    edited, clean = SqliteStore(tmp_path / "a.sqlite"), SqliteStore(tmp_path / "b.sqlite")

    def put(store: SqliteStore, i: int, text: str) -> None:
        store.replace_file(f"f{i}.md", "memory", text, 1, 1,
                           [ChunkRow(f"c{i}", f"f{i}.md", "memory", 1, 1, text, "m", text)])

    with edited.transaction():
        for i in range(30):
            put(edited, i, f"first draft {i} of the painting notes")
    for round_ in range(3):
        with edited.transaction():
            for i in range(0, 30, 2):
                put(edited, i, f"round {round_} rewrite {i}: painted fences, QX-1773")
            edited.delete_file("f29.md", "memory")
    with clean.transaction():
        for i in range(29):
            put(clean, i, f"round 2 rewrite {i}: painted fences, QX-1773" if i % 2 == 0 else
                f"first draft {i} of the painting notes")

    def totals(store: SqliteStore) -> list[int]:
        return read_varints(store.conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()[0])

    assert totals(edited) == totals(clean) and totals(edited)[0] == edited.chunk_count() == 29
    for q in ("painting fences", "QX-1773 draft", "rewrite"):
        terms = keyword_terms(q)
        assert [(h.id, round(h.score, 9)) for h in edited.keyword_search(terms, 10)] == \
            [(h.id, round(h.score, 9)) for h in clean.keyword_search(terms, 10)]
    edited.close()
    clean.close()


def test_stem_counts_agree_with_the_stems_column():
    from collections import Counter

    from memdir.textutil import stem_counts, stem_text

    for text in TEXTS:
        column = Counter(stem_text(text).split())
        wanted = set(list(column)[::2]) | {"zzz", "paint"}
        assert stem_counts(text, wanted) == {s: n for s, n in column.items() if s in wanted}


def test_phrase_counts_from_the_vocabulary_equal_match_counts_after_edits(tmp_path: Path):
    """One-token phrases are counted through ``fts5vocab``: the figure must be FTS5's own nHit,
    also once deleted rows have left tombstones in the index."""
    store = SqliteStore(tmp_path / "idx.sqlite")
    for round_ in range(3):
        with store.transaction():
            for i in range(round_, 40, 3):
                text = f"round {round_} note {i}: deploy the Café gateway, deploy again" + (" QX-1773" if i % 4 else "")
                store.replace_file(f"f{i}.md", "memory", text, 1, 1,
                                   [ChunkRow(f"c{i}", f"f{i}.md", "memory", 1, 1, text, "m", text)])
            store.delete_file(f"f{round_ * 5}.md", "memory")
    phrases = [("text", '"deploy"'), ("stems", '"deploy"'), ("text", '"round"'), ("text", '"0"'),
               ("text", '"qx 1773"'), ("text", '"cafe"'), ("text", '"café"'), ("text", '"gate"*'),
               ("stems", '"gatewai"'), ("text", '"absent"'), ("text", '"note"')]
    expected = [store.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                                   (f"{col} : {q}",)).fetchone()[0] for col, q in phrases]
    scorer = store._keyword_scorer()
    assert scorer.doc_counts(phrases) == expected
    assert expected[0] > 0 and expected[2] > expected[0] // 2 and expected[-2] == 0
    assert scorer.doc_counts(list(reversed(phrases))) == list(reversed(expected))  # and from the cache
    store.close()
