"""The warm keyword ranking (in-process postings) returns exactly what FTS5 ranks, and never
serves an index generation it was not built for."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from memdir.query import fts5_phrases, keyword_terms, match_phrases
from memdir.stores.base import ChunkRow
from memdir.stores.kw_postings import doc_lengths
from memdir.stores.sqlite import SqliteStore, bm25_to_score

WORDS = ("deploy deployed deploying painting painted paint fence fences gateway budget review quasar heron "
         "routine checkup checkups frustrating pagination cursor api latency upgrade incident").split()
EXTRA = ["QX-1773", "qx 1773", "9f3c2a", "INC-4242", "Café", "cafe", "résumé", "Zoë", "讨论", "方案", "東京",
         "에러를", "에러", "로그", "naïve", "Pässe", "straße", "under_score", "v2.1", "p95", "—", "🙂"]
QUERIES = ["deploy the gateway", "painting fences", "QX-1773 deploy", "cafe resume", "讨论 方案", "에러 로그",
           "routine checkup", "frustrating checkups latency", "9f3c2a", "INC-4242 incident", "budget review quasar",
           "東京 deploy", "naive Zoë", "Pässe straße", "under_score v2.1", "p95 latency upgrade", "zzzz nothing",
           "heron", "api cursor pagination deploy budget"]


def _corpus(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        if i and rng.random() < 0.15:
            texts.append(texts[rng.randrange(len(texts))])  # identical texts: exact ties to order
            continue
        words = [rng.choice(WORDS) if rng.random() < 0.8 else rng.choice(EXTRA) for _ in range(rng.randint(1, 30))]
        texts.append(" ".join(words) + ".")
    return texts


def _put(store: SqliteStore, i: int, text: str) -> None:
    row = ChunkRow(f"c{i}", f"f{i}.md", "memory", 1, 1, text, "m", text)
    store.replace_file(f"f{i}.md", "memory", text, 1, 1, [row])


def _fts5(store: SqliteStore, terms: list[str], limit: int) -> list[tuple[str, float]]:
    """What FTS5 ranks for the same MATCH the store runs (its pruned phrases)."""
    match = match_phrases(store._useful_phrases(fts5_phrases(terms)))
    rows = store.conn.execute(
        "SELECT c.id, f.rank FROM (SELECT rowid, bm25(chunks_fts) AS rank FROM chunks_fts WHERE chunks_fts MATCH ? "
        "ORDER BY rank LIMIT ?) f JOIN chunks c ON c.rowid = f.rowid ORDER BY f.rank", (match, limit)).fetchall()
    return [(cid, bm25_to_score(rank)) for cid, rank in rows]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_warm_ranking_is_fts5_ranking_exactly(tmp_path: Path, monkeypatch, seed: int):
    monkeypatch.setattr(SqliteStore, "PRUNE_MIN_ROWS", 50)  # prune as a large index does
    store = SqliteStore(tmp_path / "idx.sqlite")
    texts = _corpus(seed, 300)
    with store.transaction():
        for i, text in enumerate(texts):
            _put(store, i, text)
    with store.transaction():  # edits and deletions leave tombstones in FTS5's index
        for i in range(0, 300, 7):
            _put(store, i, texts[(i * 13) % 300])
        for i in range(3, 300, 31):
            store.delete_file(f"f{i}.md", "memory")
    compared = 0
    for q in QUERIES:
        terms = keyword_terms(q)
        for limit in (1, 3, 10, 400):
            expected = _fts5(store, terms, limit)
            store.keyword_search(terms, limit)
            got = [(h.id, h.score) for h in store.keyword_search(terms, limit)]
            assert got == expected, (q, limit)  # same ids, same order, the same scores to the bit
            compared += len(expected)
    assert store._postings.rowids is not None and store._postings.describe()["phrases"] > 20  # really warm
    assert compared > 500
    store.close()


def test_first_query_at_a_generation_is_left_to_fts5(tmp_path: Path):
    store = SqliteStore(tmp_path / "idx.sqlite")
    with store.transaction():
        for i, text in enumerate(_corpus(4, 50)):
            _put(store, i, text)
    terms = keyword_terms("deploy the gateway")
    first = store.keyword_search(terms, 5)
    assert store._postings.rowids is None  # a one-shot process loads nothing
    assert store.keyword_search(terms, 5) == first
    assert store._postings.rowids is not None
    store.close()


def test_another_writer_never_gets_old_postings(tmp_path: Path):
    """A write committed by another process moves the index generation: the warm store drops its
    postings and ranks the new rows exactly as FTS5 does."""
    path = tmp_path / "idx.sqlite"
    store = SqliteStore(path)
    with store.transaction():
        for i, text in enumerate(_corpus(5, 80)):
            _put(store, i, text)
    terms = keyword_terms("heron quasar budget")
    store.keyword_search(terms, 5)
    before = store.keyword_search(terms, 5)
    assert store._postings.rowids is not None
    writer = (
        "import sys\n"
        "from memdir.stores.base import ChunkRow\n"
        "from memdir.stores.sqlite import SqliteStore\n"
        "s = SqliteStore(sys.argv[1])\n"
        "with s.transaction():\n"
        "    for i in range(3):\n"
        "        t = 'heron heron quasar heron budget' if i else 'heron'\n"
        "        row = ChunkRow(f'n{i}', f'new{i}.md', 'memory', 1, 1, t, 'm', t)\n"
        "        s.replace_file(f'new{i}.md', 'memory', t, 1, 1, [row])\n"
        "    s.delete_file('f0.md', 'memory')\n"
        "s.close()\n")
    subprocess.run([sys.executable, "-c", writer, str(path)], check=True)
    for _ in range(3):  # the first query after the change (FTS5) and the warm ones that follow
        got = [(h.id, h.score) for h in store.keyword_search(terms, 5)]
        assert got == _fts5(store, terms, 5)
        assert got[0][0] in ("n1", "n2") and got != [(h.id, h.score) for h in before]
    store.close()


def test_doc_lengths_decode_docsize_records():
    from memdir.stores.fts_scores import read_varints

    records = [bytes([3, 4]), bytes([0x81, 0x00, 0x05]), bytes([0xFF, 0x7F, 0x82, 0x80, 0x01]), b""]
    hexes = "".join(r.hex() for r in records)
    import numpy as np

    got = doc_lengths(hexes, np.array([len(r) for r in records]))
    assert got.tolist() == [float(sum(read_varints(r))) for r in records] == [7.0, 133.0, 16383.0 + 32769.0, 0.0]


def test_warm_scores_for_chosen_chunks_are_fts5s(tmp_path: Path, monkeypatch):
    """The hybrid merge's scores for chosen chunks (every phrase, none pruned) come from the warm
    postings too, and equal FTS5's ``bm25()`` to the bit."""
    from memdir.query import fts5_match
    from memdir.stores.fts_scores import FtsScorer

    store = SqliteStore(tmp_path / "idx.sqlite")  # 200 rows: no phrase pruned from searches
    with store.transaction():
        for i, text in enumerate(_corpus(7, 200)):
            _put(store, i, text)
    ids = [f"c{i}" for i in range(0, 200, 3)] + ["missing"]
    cold = {}
    for q in QUERIES:
        cold[q] = store.keyword_scores(keyword_terms(q), ids)  # not warm yet: FtsScorer
    store.keyword_search(keyword_terms("deploy"), 3)
    store.keyword_search(keyword_terms("deploy"), 3)  # the second query at this generation warms up

    def no_scratch(*_a, **_k):
        raise AssertionError("FtsScorer used although the postings are warm")

    real_scores = FtsScorer.scores
    monkeypatch.setattr(FtsScorer, "scores", no_scratch)
    # phrases no search has loaded (as the common ones pruned from searches): counted in the
    # chosen rows, never loaded, and the figures are still FTS5's to the bit
    for q in ("heron", "budget review quasar heron", "deploy the gateway heron"):
        terms = keyword_terms(q)
        fts = {cid: bm25_to_score(rank) for cid, rank in store.conn.execute(
            "SELECT c.id, bm25(chunks_fts) FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid "
            "WHERE chunks_fts MATCH ?", (fts5_match(terms),))}
        before = store._postings.describe()["phrases"]
        assert store.keyword_scores(terms, ids) == {cid: fts.get(cid, 0.0) for cid in ids}, q
        assert store._postings.describe()["phrases"] == before
    matched = 0
    for q in QUERIES:
        terms = keyword_terms(q)
        store.keyword_search(terms, 3)  # holds every phrase's postings now
        fts = {cid: bm25_to_score(rank) for cid, rank in store.conn.execute(
            "SELECT c.id, bm25(chunks_fts) FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid "
            "WHERE chunks_fts MATCH ?", (fts5_match(terms),))}
        got = store.keyword_scores(terms, ids)
        assert got == {cid: fts.get(cid, 0.0) for cid in ids}, q
        assert got == pytest.approx(cold[q], abs=1e-12)
        matched += sum(1 for v in got.values() if v)
    assert matched > 100
    monkeypatch.setattr(FtsScorer, "scores", real_scores)
    store.close()


def _warm_equals_fts5(store: SqliteStore, queries: list[str], limits: tuple[int, ...] = (1, 5, 400)) -> int:
    compared = 0
    for q in queries:
        terms = keyword_terms(q)
        for limit in limits:
            got = [(h.id, h.score) for h in store.keyword_search(terms, limit)]
            assert got == _fts5(store, terms, limit), (q, limit)  # the same ids, order and scores to the bit
            compared += len(got)
    return compared


@pytest.mark.parametrize("seed", [11, 12])
def test_postings_patched_after_writes_rank_as_fts5_does(tmp_path: Path, monkeypatch, seed: int):
    """Writes move the generation: the rows they name are patched into the postings held (not all
    dropped), and every ranking and score after each write is still FTS5's exactly."""
    from memdir.query import fts5_match
    from memdir.stores.fts_scores import FtsScorer

    def no_scratch(*_a, **_k):
        raise AssertionError("FtsScorer scored chosen rows although the postings are held")

    monkeypatch.setattr(FtsScorer, "scores", no_scratch)  # scores below come from the patched postings
    rng = random.Random(seed)
    store = SqliteStore(tmp_path / "idx.sqlite")
    texts = _corpus(seed, 250)
    with store.transaction():
        for i, text in enumerate(texts):
            _put(store, i, text)
    _warm_equals_fts5(store, QUERIES)  # warm: every query's phrases held
    held = store._postings.describe()["phrases"]
    compared, next_id = 0, 250
    for _round in range(6):
        with store.transaction():  # an edit, a new note, a deletion: what an agent's session does
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(next_id)
                _put(store, i, " ".join(rng.choice(WORDS + EXTRA) for _ in range(rng.randint(1, 25))))
            _put(store, next_id, rng.choice(texts) + " heron quasar")
            next_id += 1
            store.delete_file(f"f{rng.randrange(next_id)}.md", "memory")
        compared += _warm_equals_fts5(store, QUERIES)
        ids = [f"c{i}" for i in range(0, next_id, 5)]
        for q in QUERIES:  # the merge's scores for chosen chunks, from the patched postings
            fts = {cid: bm25_to_score(rank) for cid, rank in store.conn.execute(
                "SELECT c.id, bm25(chunks_fts) FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid "
                "WHERE chunks_fts MATCH ?", (fts5_match(keyword_terms(q)),))}
            assert store.keyword_scores(keyword_terms(q), ids) == {cid: fts.get(cid, 0.0) for cid in ids}, q
    described = store._postings.describe()
    assert described["patched"] == 6 and described["phrases"] >= held  # patched in place, never dropped
    assert compared > 1000
    store.close()


def test_postings_are_read_again_when_the_log_cannot_say_what_changed(tmp_path: Path, monkeypatch):
    """A rebuild (new epoch), a log trimmed past the rows held, or a write touching many rows: the
    postings are dropped and read again, and the ranking stays FTS5's."""
    from memdir.stores import kw_postings

    store = SqliteStore(tmp_path / "idx.sqlite")
    texts = _corpus(21, 120)
    with store.transaction():
        for i, text in enumerate(texts):
            _put(store, i, text)
    _warm_equals_fts5(store, QUERIES[:6])
    with store.transaction():
        _put(store, 1, "heron heron")
        store.conn.execute("DELETE FROM vec_log")  # as trim_log does for a reader far behind
    _warm_equals_fts5(store, QUERIES[:6])
    assert store._postings.describe()["patched"] == 0
    _warm_equals_fts5(store, QUERIES[:6])
    monkeypatch.setattr(kw_postings, "PATCH_MIN_ROWS", 2)
    monkeypatch.setattr(kw_postings, "PATCH_MAX_SHARE", 0.0)
    with store.transaction():
        _put(store, 2, "quasar")  # one row: patched
    _warm_equals_fts5(store, QUERIES[:6])
    assert store._postings.describe()["patched"] == 1
    with store.transaction():
        for i in range(3, 9):  # six rows: more than this store patches
            _put(store, i, "heron budget")
    _warm_equals_fts5(store, QUERIES[:6])
    assert store._postings.describe()["patched"] == 0
    store.close()


@pytest.mark.parametrize("pending", [2, 32])
def test_phrases_unused_for_many_writes_catch_up_or_are_read_again(tmp_path: Path, monkeypatch, pending: int):
    """A phrase is brought through the writes since its last use when a query needs it again, or
    read afresh when more writes than are remembered went by: FTS5's ranking either way."""
    from memdir.stores import kw_postings

    monkeypatch.setattr(kw_postings, "MAX_PENDING", pending)
    store = SqliteStore(tmp_path / "idx.sqlite")
    with store.transaction():
        for i, text in enumerate(_corpus(31, 150)):
            _put(store, i, text)
    _warm_equals_fts5(store, QUERIES)
    rng = random.Random(31)
    for w in range(5):
        with store.transaction():
            _put(store, rng.randrange(150), "heron deploy gateway " * (w + 1))
            _put(store, 150 + w, "painting fences quasar budget review")
            store.delete_file(f"f{rng.randrange(150)}.md", "memory")
        _warm_equals_fts5(store, QUERIES[:2])  # only a few phrases are used between the writes
    described = store._postings.describe()
    assert described["patched"] == 5 and described["pending"] == min(5, pending)
    assert _warm_equals_fts5(store, QUERIES) > 100  # the others: caught up, or read again
    store.close()


def test_a_warm_memory_finds_each_appended_note_as_a_fresh_process_ranks_it(make_workspace, tmp_path: Path):
    """Read-your-writes in a long-lived process: notes appended between searches are found by the
    next search, ranked exactly as a process that never held postings ranks them (FTS5)."""
    from memdir.api import Memory

    texts = _corpus(41, 120)
    ws = make_workspace({f"memory/2024-01-{1 + i // 5:02d}.md": "" for i in range(0, 120, 5)})
    for i, text in enumerate(texts):
        with (ws / f"memory/2024-01-{1 + i // 5:02d}.md").open("a", encoding="utf-8") as fh:
            fh.write(f"- {text}\n\n")
    config = {"memorySearch": {"provider": "none"}}
    with Memory(ws, state_dir=tmp_path / "s", config=config) as warm:
        warm.sync(reason="test")
        for q in QUERIES:
            warm.search(q, sync=False)
            warm.search(q, sync=False)
        for n in range(3):
            warm.append_daily(f"The quasar heron budget review number {n} happened, and the gateway zzzz{n} too.",
                              date="2024-02-01")
            warm.sync(reason="test")
            got = [(r.path, r.start_line, r.end_line, r.score) for r in warm.search(f"zzzz{n} quasar heron",
                                                                                      sync=False).results]
            assert got and got[0][0] == "memory/2024-02-01.md"
            for q in ("budget review quasar", "heron", "deploy the gateway", "painting fences"):
                mine = [(r.path, r.start_line, r.end_line, r.score) for r in warm.search(q, sync=False).results]
                with Memory(ws, state_dir=tmp_path / "s", config=config) as fresh:  # first query: FTS5 ranks
                    theirs = [(r.path, r.start_line, r.end_line, r.score) for r in fresh.search(q, sync=False).results]
                assert mine == theirs, q
        assert warm.store._postings.describe()["patched"] >= 3


def test_a_closed_memory_lets_go_of_its_warm_postings_at_once(make_workspace, tmp_path: Path):
    """The store's parts refer to one another (callbacks), so what it held warm was freed only
    when the cyclic GC ran: a process opening one Memory after another held several indexes'
    postings and vectors at once.  Closing lets go of them there and then."""
    import gc
    import weakref

    from memdir.api import Memory

    ws = make_workspace({"memory/2024-01-01.md": "".join(f"- {t}\n\n" for t in _corpus(7, 60))})
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with Memory(ws, state_dir=tmp_path / "s", config={"memorySearch": {"provider": "none"}}) as mem:
            mem.sync(reason="test")
            for q in QUERIES[:4]:
                mem.search(q, sync=False)
                mem.search(q, sync=False)
            postings = weakref.ref(mem.store._postings)
            assert postings() is not None and postings().describe()["phrases"] > 0
        del mem
        assert postings() is None
    finally:
        if was_enabled:
            gc.enable()
