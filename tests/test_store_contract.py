"""The Store contract (memdir.stores.base), checked the same way on every backend.

Each test runs on SQLite and on a real PostgreSQL + pgvector (the ``backend`` fixture): writes and
deletes, what a reader sees during a rebuild, scores and ordering, the embedding cache and its
LRU pruning, leftovers of a crashed rebuild, and the export that ``memdir migrate`` relies on.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from helpers import pg_query
from memdir.config import load_config
from memdir.query import keyword_terms
from memdir.stores import ChunkRow, Store, open_store


@pytest.fixture
def store(backend, tmp_path: Path) -> Iterator[Store]:
    settings = load_config(overrides=backend.config(), state_dir=tmp_path / "state", agent_id="contract").settings
    s = open_store(settings)
    yield s
    s.close()


def unit(seed: int, dims: int = 8) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(dims)
    return (v / np.linalg.norm(v)).tolist()


def rows(path: str, texts: list[str], *, vectors: bool = True, seed: int = 0, model: str = "m") -> list[ChunkRow]:
    return [ChunkRow(f"{path}:{i}", path, "memory", i + 1, i + 1, f"h-{path}-{i}", model, t,
                     unit(seed + i) if vectors else None) for i, t in enumerate(texts)]


def put(store: Store, path: str, texts: list[str], **kw) -> list[ChunkRow]:
    chunks = rows(path, texts, **kw)
    with store.transaction():
        store.replace_file(path, "memory", f"hash-{path}", 1000, 10, chunks)
    return chunks


def test_replace_touch_delete_and_counts(store: Store):
    put(store, "memory/a.md", ["alpha apples", "alpha bananas"])
    put(store, "memory/b.md", ["beta cherries"])
    assert store.file_rows() == {("memory/a.md", "memory"): ("hash-memory/a.md", 1000, 10),
                                 ("memory/b.md", "memory"): ("hash-memory/b.md", 1000, 10)}
    assert (store.chunk_count(), store.vector_count(), store.vec_dims()) == (3, 3, 8)
    # replacing a file replaces all of its rows: no stale chunk, keyword row or vector survives
    put(store, "memory/a.md", ["gamma grapes"], seed=50)
    assert (store.chunk_count(), store.vector_count()) == (2, 2)
    assert not store.keyword_search(["apples"], 10)
    assert [h.path for h in store.keyword_search(["grapes"], 10)] == ["memory/a.md"]
    with store.transaction():
        store.touch_file("memory/b.md", "memory", "hash-memory/b.md", 2000, 11)
        store.delete_file("memory/a.md", "memory")
    assert store.file_rows() == {("memory/b.md", "memory"): ("hash-memory/b.md", 2000, 11)}
    assert store.counts_by_source() == {"memory": (1, 1)}
    assert not store.keyword_search(["grapes"], 10)
    assert [h.path for h in store.vector_search(unit(50), 5)] == ["memory/b.md"]


def test_a_failed_transaction_leaves_the_previous_state(store: Store):
    put(store, "memory/a.md", ["kept text"])
    with pytest.raises(RuntimeError), store.transaction():
        store.replace_file("memory/a.md", "memory", "new", 1, 1, rows("memory/a.md", ["replacement text"]))
        store.delete_file("memory/a.md", "memory")
        raise RuntimeError("crash mid-write")
    assert [h.text for h in store.keyword_search(["kept"], 5)] == ["kept text"]
    assert store.file_rows()[("memory/a.md", "memory")][0] == "hash-memory/a.md"


def test_keyword_scores_are_bm25_like_in_0_1_best_first(store: Store):
    put(store, "memory/a.md", ["the kafka cluster", "kafka kafka kafka streams and kafka topics",
                               "unrelated lunch notes", "more lunch", "even more lunch", "lunch again"])
    hits = store.keyword_search(keyword_terms("kafka topics"), 10)
    assert [h.id for h in hits][:1] == ["memory/a.md:1"]  # both words, and kafka often
    assert all(0 < h.score < 1 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(store.keyword_search(keyword_terms("kafka"), 1)) == 1


def test_user_text_is_never_query_syntax(store: Store):
    put(store, "memory/a.md", ['He said "NEAR" AND (OR) -x* : ^ weird'])
    for q in ['"NEAR"', "AND (OR)", "-x*", ":", "^", "a:b OR", "' ; DROP TABLE chunks; --"]:
        store.keyword_search(keyword_terms(q) or ["x"], 5)  # never raises
    assert store.keyword_search(keyword_terms("weird"), 5)


def test_cjk_and_hangul_keywords(store: Store):
    put(store, "memory/a.md", ["之前讨论的那个方案最后定了", "에러를 고쳤다", "English only"])
    assert [h.id for h in store.keyword_search(keyword_terms("讨论"), 5)] == ["memory/a.md:0"]
    assert [h.id for h in store.keyword_search(keyword_terms("에러"), 5)] == ["memory/a.md:1"]


def test_vector_search_is_cosine_best_first(store: Store):
    put(store, "memory/a.md", [f"text {i}" for i in range(20)], seed=100)
    q = unit(107)
    hits = store.vector_search(q, 5)
    assert hits[0].id == "memory/a.md:7" and math.isclose(hits[0].score, 1.0, abs_tol=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert not store.vector_search([0.0] * 8, 5)


def test_paths_missing_vectors(store: Store):
    put(store, "memory/a.md", ["with vectors"])
    put(store, "memory/b.md", ["keywords only"], vectors=False)
    assert store.paths_missing_vectors() == {("memory/b.md", "memory")}
    assert [h.path for h in store.keyword_search(["keywords"], 5)] == ["memory/b.md"]


def test_cache_put_get_touch_and_lru_prune(store: Store):
    args = ("p", "m", "k")
    with store.transaction():
        store.cache_put(*args, {"h1": unit(1), "h2": unit(2)})
    with store.transaction():
        store.cache_put(*args, {"h3": unit(3)})
    got = store.cache_get(*args, ["h1", "h3", "nope"])
    assert set(got) == {"h1", "h3"} and np.allclose(got["h1"], unit(1), atol=1e-6)
    assert not store.cache_get("p", "other-model", "k", ["h1"])
    import time

    time.sleep(0.01)
    with store.transaction():
        store.cache_touch(*args, ["h1"])  # h1 is now the most recently used
    with store.transaction():
        assert store.cache_prune(2) == 1
    assert set(store.cache_get(*args, ["h1", "h2", "h3"])) == {"h1", "h3"}
    assert store.cache_prune(None) == 0 and store.cache_count() == 2
    # the agent's entries (PostgreSQL's cache is the team's: there, those of the agent's chunk texts)
    with store.transaction():
        store.replace_file("memory/c.md", "memory", "fh", 1, 1, [
            ChunkRow(f"c{h}", "memory/c.md", "memory", i, i, h, "m", h, None) for i, h in enumerate(["h1", "h3"], 1)])
    assert [e[3] for e in store.export_cache()] == ["h3", "h1"]  # least recently used first


def test_rebuild_swaps_atomically_and_readers_see_the_old_index_until_then(store: Store):
    put(store, "memory/old.md", ["old content here"])
    with store.transaction():
        store.cache_put("p", "m", "k", {"h-old": unit(9)})
    seen_during: list[list[str]] = []
    with store.rebuild() as fresh:
        assert fresh.cache_get("p", "m", "k", ["h-old"])  # seeded with the live cache
        put(fresh, "memory/new.md", ["new content here"])
        with fresh.transaction():
            fresh.write_meta({"model": "m2"})
        # a reader in another thread, during the build: still the old index
        t = threading.Thread(target=lambda: seen_during.append([h.path for h in store.keyword_search(["content"], 5)]))
        t.start()
        t.join()
        assert store.read_meta() is None
    assert seen_during == [["memory/old.md"]]
    assert [h.path for h in store.keyword_search(["content"], 5)] == ["memory/new.md"]
    assert store.read_meta() == {"model": "m2"}
    assert list(store.file_rows()) == [("memory/new.md", "memory")]


def test_a_failed_rebuild_leaves_the_live_index_untouched(store: Store):
    put(store, "memory/old.md", ["old content here"])
    with pytest.raises(RuntimeError), store.rebuild() as fresh:
        put(fresh, "memory/new.md", ["new content here"])
        with fresh.transaction():
            fresh.cache_put("p", "m", "k", {"paid-for": unit(4)})
        raise RuntimeError("provider died mid-rebuild")
    store.cleanup_leftovers()
    assert [h.path for h in store.keyword_search(["content"], 5)] == ["memory/old.md"]
    assert store.cache_get("p", "m", "k", ["paid-for"])  # embeddings already paid for are kept


def test_export_returns_every_file_chunk_and_vector(store: Store):
    a = put(store, "memory/a.md", ["one", "two"])
    put(store, "memory/b.md", ["three"], vectors=False)
    exported = {path: (fhash, chunks) for path, _s, fhash, _m, _z, chunks in store.export_files()}
    assert set(exported) == {"memory/a.md", "memory/b.md"}
    assert [c.id for c in exported["memory/a.md"][1]] == [c.id for c in a]
    assert np.allclose(exported["memory/a.md"][1][0].embedding, a[0].embedding, atol=1e-6)
    assert exported["memory/b.md"][1][0].embedding is None


def test_describe_names_the_backend(store: Store, backend):
    facts = store.describe()
    assert facts["backend"] == backend.driver
    assert {"fts", "vector"} <= set(facts)
    if backend.postgres:
        assert facts["server"].startswith("PostgreSQL ") and facts["pgvector"]


def test_keyword_and_vector_scores_for_chosen_chunks_equal_the_search_scores(store: Store):
    texts = ["kafka billing stream", "kafka kafka replay", "lunch ramen", "billing invoices due", "nothing here"]
    put(store, "memory/a.md", texts, seed=200)
    terms = keyword_terms("kafka billing replay")
    found = {h.id: h.score for h in store.keyword_search(terms, 10)}
    ids = [f"memory/a.md:{i}" for i in range(len(texts))]
    scores = store.keyword_scores(terms, ids)
    assert set(scores) == set(ids)
    for cid in ids:
        assert scores[cid] == pytest.approx(found.get(cid, 0.0), abs=1e-6)
    q = unit(203)
    near = {h.id: h.score for h in store.vector_search(q, 10)}
    assert store.vector_scores(q, ids[:3]) == pytest.approx({i: near[i] for i in ids[:3]}, abs=1e-5)


def test_exact_words_rank_above_stem_only_matches(store: Store):
    put(store, "memory/a.md", ["she was painting the fence", "he painted a portrait", "nothing related"])
    hits = store.keyword_search(keyword_terms("painting"), 5)
    assert [h.id for h in hits] == ["memory/a.md:0", "memory/a.md:1"]
    assert hits[0].score > hits[1].score


def test_a_chunk_scores_the_best_of_its_windows(store: Store):
    w0, w1, other = unit(300), unit(301), unit(302)
    chunk = ChunkRow("long", "memory/long.md", "memory", 1, 9, "h-long", "m", "a long note", [*w0, *w1], windows=2)
    with store.transaction():
        store.replace_file("memory/long.md", "memory", "fh", 1, 1, [chunk])
        store.replace_file("memory/o.md", "memory", "fo", 1, 1,
                           [ChunkRow("o", "memory/o.md", "memory", 1, 1, "h-o", "m", "other", other)])
    hits = store.vector_search(w1, 5)
    assert [h.id for h in hits] == ["long", "o"]  # one hit per chunk, however many windows matched
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert store.vector_scores(w0, ["long"])["long"] == pytest.approx(1.0, abs=1e-5)
    (exported,) = [c for *_, rows in store.export_files() for c in rows if c.id == "long"]
    assert exported.windows == 2 and np.allclose(exported.embedding, [*w0, *w1], atol=1e-6)


def test_chunks_in_period(store: Store):
    rows_ = [ChunkRow(f"d{i}", "memory/d.md", "memory", i, i, f"h{i}", "m", f"day {i}", None, None,
                      f"2023-08-{i:02d}", f"2023-08-{i:02d}") for i in range(1, 6)]
    with store.transaction():
        store.replace_file("memory/d.md", "memory", "fh", 1, 1, rows_)
    got = store.chunks_in_period("2023-08-02", "2023-08-03", 10)
    assert [h.id for h in got] == ["d2", "d3"] and all(h.score == 0 for h in got)
    assert (got[0].date_start, got[0].date_end) == ("2023-08-02", "2023-08-02")
    assert len(store.chunks_in_period("2023-01-01", "2023-12-31", 2)) == 2


def test_first_chunks(store: Store):
    """Each named note's first chunk (a note found by its name, see memdir.search)."""
    put(store, "pages/Meeting with Carol.md", ["discussed the budget", "then lunch"])
    put(store, "pages/Sourdough.md", ["feed the starter"])
    with store.transaction():
        store.replace_file("sessions/s.jsonl", "sessions", "hs", 1, 1,
                           [ChunkRow("s0", "sessions/s.jsonl", "sessions", 1, 1, "hs0", "m", "x", None)])
    got = store.first_chunks(["pages/Sourdough.md", "pages/Meeting with Carol.md", "pages/gone.md",
                              "sessions/s.jsonl"])
    assert [(h.path, h.start_line, h.text, h.score) for h in got] == [
        ("pages/Meeting with Carol.md", 1, "discussed the budget", 0.0),
        ("pages/Sourdough.md", 1, "feed the starter", 0.0)]
    assert store.first_chunks([]) == []


# -- state, health and read-only opens (the self-healing half of the contract) ----------------

def damage_meta(store: Store, backend) -> None:
    """Break the index metadata by hand, the way each backend can be broken: SQLite's is a text row
    (made invalid JSON), PostgreSQL's a ``jsonb`` column (made a JSON array)."""
    if backend.postgres:
        pg_query(backend.url, f"UPDATE \"{backend.schema}\".indexes SET meta = '[1, 2]' WHERE agent = %s "
                              "AND state = 'live'", (store.agent,))
    else:
        with sqlite3.connect(store.location) as conn:
            conn.execute("UPDATE meta SET value = '{\"provider\": ' WHERE key = 'memory_index_meta_v1'")


def test_state_is_json_kept_per_index_and_rebuilds_carry_their_own(store: Store):
    assert store.get_state("skipped") is None
    with store.transaction():
        store.set_state("skipped", [{"path": "memory/x.md", "error": "not UTF-8"}])
        store.set_state("owner", "/ws/a")
    assert store.get_state("skipped") == [{"path": "memory/x.md", "error": "not UTF-8"}]
    assert store.get_state("owner") == "/ws/a"
    with pytest.raises(RuntimeError), store.transaction():
        store.set_state("owner", "/ws/b")
        raise RuntimeError("crash mid-write")
    assert store.get_state("owner") == "/ws/a"  # rolled back with the rest
    with store.transaction():
        store.set_state("skipped", None)  # None deletes
    assert store.get_state("skipped") is None
    with pytest.raises(RuntimeError), store.rebuild() as fresh:
        with fresh.transaction():
            fresh.set_state("owner", "/ws/failed")
        raise RuntimeError("rebuild failed")
    assert store.get_state("owner") == "/ws/a"
    with store.rebuild() as fresh:
        assert fresh.get_state("owner") is None  # a rebuild starts with no state ...
        with fresh.transaction():
            fresh.set_state("recovered", {"problem": "x"})
            fresh.write_meta({"model": "m"})
        assert store.get_state("recovered") is None  # ... and readers see the old state until the swap
    assert store.get_state("recovered") == {"problem": "x"} and store.get_state("owner") is None


def test_a_sound_index_checks_clean_and_its_change_token_follows_writes(store: Store):
    put(store, "memory/a.md", ["alpha apples", "alpha bananas"])
    with store.transaction():
        store.write_meta({"model": "m"})
    assert store.check() is None and store.check(thorough=True) is None
    assert store.check(thorough=True, max_bytes=1) is None  # too big to read: skipped, not failed
    token = store.change_token()
    assert token is not None and store.change_token() == token
    put(store, "memory/b.md", ["beta"])
    assert store.change_token() != token


def test_is_damage_tells_a_damaged_index_from_other_errors(store: Store, backend):
    from memdir.errors import IndexDamaged, StoreError

    assert store.is_damage(IndexDamaged("index metadata is not valid JSON"))
    assert not store.is_damage(ValueError("bad input")) and not store.is_damage(StoreError("disk full"))
    if backend.postgres:
        import psycopg

        assert store.is_damage(psycopg.errors.DataCorrupted("invalid page in block 7 of relation base/5/16390"))
        assert store.is_damage(psycopg.errors.IndexCorrupted("index \"chunks_tsv\" contains unexpected zero page"))
        assert not store.is_damage(psycopg.errors.UniqueViolation("duplicate key"))
    else:
        assert store.is_damage(sqlite3.DatabaseError("database disk image is malformed"))
        assert not store.is_damage(sqlite3.OperationalError("database is locked"))


def test_recover_sets_a_damaged_index_aside_and_starts_empty(store: Store, backend):
    put(store, "memory/a.md", ["alpha apples"])
    with store.transaction():
        store.write_meta({"model": "m"})
        store.cache_put("p", "m", "k", {"paid-for": unit(4)})
    assert store.recover("nothing wrong", notice=pytest.fail) is None  # a sound index is never thrown away
    assert store.chunk_count() == 1
    damage_meta(store, backend)
    problem = store.check()
    assert problem and "not" in problem and "\n" not in problem
    with pytest.raises(Exception) as raised:
        store.read_meta()
    assert store.is_damage(raised.value)
    told: list[str] = []
    info = store.recover(problem, notice=told.append)
    assert info is not None and info["problem"] and info["at"] > 0
    assert len(told) == 1 and "was damaged" in told[0] and store.location in told[0]
    assert store.check(thorough=True) is None
    assert store.read_meta() is None and store.chunk_count() == 0 and store.file_rows() == {}
    assert store.get_state("recovered") == info  # status in any process can say what happened
    assert store.cache_get("p", "m", "k", ["paid-for"])  # embeddings already paid for are kept
    put(store, "memory/a.md", ["alpha apples again"])  # and the empty index takes writes
    assert [h.path for h in store.keyword_search(["apples"], 5)] == ["memory/a.md"]


def test_a_read_only_open_searches_and_refuses_writes(backend, tmp_path: Path):
    settings = load_config(overrides=backend.config(), state_dir=tmp_path / "state", agent_id="ro").settings
    writer = open_store(settings)
    try:
        put(writer, "memory/a.md", ["alpha apples"])
        with writer.transaction():
            writer.write_meta({"model": "m"})
    finally:
        writer.close()
    reader = open_store(settings, readonly=True)
    try:
        assert reader.readonly
        assert [h.path for h in reader.keyword_search(["apples"], 5)] == ["memory/a.md"]
        assert [h.path for h in reader.vector_search(unit(0), 5)] == ["memory/a.md"]
        assert reader.read_meta() == {"model": "m"} and reader.get_state("owner") is None
        with pytest.raises(Exception, match=r"(?i)read-?only"), reader.transaction():
            reader.replace_file("memory/b.md", "memory", "h", 1, 1, rows("memory/b.md", ["beta"]))
        assert reader.chunk_count() == 1 and list(reader.file_rows()) == [("memory/a.md", "memory")]
        with pytest.raises(Exception, match=r"damaged .*cannot be rebuilt"):
            reader.recover("pretend damage")
    finally:
        reader.close()
