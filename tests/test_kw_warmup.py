"""The keyword warm-up of long-lived processes: it holds exactly what searches would read, never
hides a write, keeps to its budget, and a one-shot CLI search never starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from tests.test_kw_postings import QUERIES, _corpus, _fts5, _put

from helpers import settled_warmup
from memdir.query import keyword_terms
from memdir.stores import kw_postings as kp
from memdir.stores import kw_warmup
from memdir.stores.sqlite import SqliteStore


def _store(tmp_path: Path, seed: int = 7, n: int = 300) -> tuple[SqliteStore, list[str]]:
    store = SqliteStore(tmp_path / "idx.sqlite")
    texts = _corpus(seed, n)
    with store.transaction():
        for i, text in enumerate(texts):
            _put(store, i, text)
    with store.transaction():  # edits and deletions: tombstones in FTS5's index
        for i in range(0, n, 7):
            _put(store, i, texts[(i * 13) % n])
        for i in range(3, n, 31):
            store.delete_file(f"f{i}.md", "memory")
    return store, texts


def _finish(store: SqliteStore) -> dict:
    warmup = store._warmup
    assert warmup is not None
    warmup._thread.join(30)
    assert not warmup.running
    return warmup.describe()


@pytest.fixture
def small_words(monkeypatch):
    """Warm up words in 5+ rows (the test corpora are small), prune as a large index does."""
    monkeypatch.setattr(kw_warmup, "MIN_ROWS", 5)
    monkeypatch.setattr(SqliteStore, "PRUNE_MIN_ROWS", 50)


def test_warmup_holds_what_a_search_would_read_and_ranks_as_fts5(tmp_path: Path, small_words):
    store, _ = _store(tmp_path)
    assert store.start_warmup()
    state = _finish(store)
    assert state["state"] == "done" and state["phrases"] > 10, state
    postings = store._postings
    held = [k for k in postings._phrases if len(k[1]) == 1 and not k[2]]
    assert len(held) == state["phrases"]
    for key in held:  # each phrase exactly as a search reads it cold (the rows, the frequencies)
        rows, counts, _ = postings._phrases[key]
        cold_rows, cold_counts = postings._load_phrase(key[0], key[1], key[2])
        assert np.array_equal(rows, cold_rows) and np.array_equal(counts.astype(float), cold_counts.astype(float))
    compared = 0
    for q in QUERIES:
        terms = keyword_terms(q)
        for limit in (1, 3, 10, 400):
            expected = _fts5(store, terms, limit)
            got = [(h.id, h.score) for h in store.keyword_search(terms, limit)]
            assert got == expected, (q, limit)  # ids, order and scores to the bit
            compared += len(expected)
    assert compared > 500
    store.close()


def test_words_are_read_in_one_pass_for_both_columns_exactly(tmp_path: Path):
    store, _ = _store(tmp_path)
    c = store.conn
    c.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, chunks_fts, instance)")
    both = [t for (t,) in c.execute("SELECT term FROM temp.v WHERE col = 'stems' INTERSECT "
                                    "SELECT term FROM temp.v WHERE col = 'text'")]
    text_only = [t for (t,) in c.execute("SELECT term FROM temp.v WHERE col = 'text' EXCEPT "
                                         "SELECT term FROM temp.v WHERE col = 'stems'")]
    assert len(both) > 5 and len(text_only) > 5
    for term in both + text_only:
        one_by_one = {col: kp._ints(c.execute("SELECT group_concat(doc) FROM temp.v WHERE term = ? AND col = ?",
                                              (term, col)).fetchone()[0]) for col in ("text", "stems")}
        together = kp.read_docs(c, "v", term, ["text", "stems"])
        for col in ("text", "stems"):
            assert np.array_equal(together[col], one_by_one[col]), (term, col)
        if term in text_only:
            alone = kp.read_docs(c, "v", term, ["text"], alone=True)["text"]
            assert np.array_equal(alone, one_by_one["text"]) and alone.size
    store.close()


@pytest.mark.parametrize("search_between", [False, True])
def test_a_write_by_another_process_during_the_warmup_is_seen(tmp_path: Path, small_words, monkeypatch,
                                                               search_between: bool):
    store, _ = _store(tmp_path)
    store.keyword_search(keyword_terms("budget review"), 5)  # the store holds a generation already
    entered, release = threading.Event(), threading.Event()
    real = kp.read_docs

    def slow_read(*args, **kwargs):
        if threading.current_thread().name == "memdir-keyword-warmup" and not entered.is_set():
            entered.set()
            release.wait(30)  # inside the warm-up's read transaction, at the old generation
        return real(*args, **kwargs)

    monkeypatch.setattr(kp, "read_docs", slow_read)
    assert store.start_warmup()
    assert entered.wait(30)
    writer = (
        "import sys; from memdir.stores.sqlite import SqliteStore; from tests.test_kw_postings import _put\n"
        "s = SqliteStore(sys.argv[1])\n"
        "from tests.test_kw_postings import WORDS\n"
        "with s.transaction():\n"  # every word the warm-up may be reading gains and loses rows
        "    _put(s, 5000, 'budget budget review zebraword budget ' + ' '.join(WORDS))\n"
        "    _put(s, 1, 'zebraword deploy ' + ' '.join(WORDS * 2))\n"
        "    s.delete_file('f2.md', 'memory')\n"
        "    s.delete_file('f4.md', 'memory')\n"
        "s.close()\n")
    subprocess.run([sys.executable, "-c", writer, str(store.path)], check=True, cwd=Path(__file__).parents[1])
    if search_between:  # the store moves to the new generation before the warm-up hands in its read
        store.keyword_search(keyword_terms("budget review"), 5)
    release.set()
    state = _finish(store)
    assert state["state"] == "done" and state["rounds"] >= 2, state  # started over at the new generation
    for q in [*QUERIES, "zebraword budget", "budget review deploy"]:
        terms = keyword_terms(q)
        expected = _fts5(store, terms, 20)
        assert [(h.id, h.score) for h in store.keyword_search(terms, 20)] == expected, q
    assert "c5000" in [h.id for h in store.keyword_search(keyword_terms("zebraword"), 5)]
    postings = store._postings
    keys = [k for k in postings._phrases if len(k[1]) == 1 and not k[2]]
    assert len(keys) > 10
    for key, (rows, counts) in zip(keys, postings._postings([(c, list(t), p) for c, t, p in keys]), strict=True):
        cold_rows, cold_counts = postings._load_phrase(*key)  # every phrase held is the index's now
        assert np.array_equal(rows, cold_rows) and np.array_equal(counts.astype(float), cold_counts.astype(float)), key
    store.close()


def test_the_warmup_keeps_to_its_budget(tmp_path: Path, small_words, monkeypatch):
    monkeypatch.setattr(kw_warmup, "BUDGET", 400)
    store, _ = _store(tmp_path)
    assert store.start_warmup()
    state = _finish(store)
    assert state["state"] == "done" and 0 < state["entries"] <= 400, state
    assert store._postings.describe()["entries"] <= 400
    unbounded, _ = _store(tmp_path / "more")
    unbounded._warmup = None
    monkeypatch.setattr(kw_warmup, "BUDGET", 10**9)
    assert unbounded.start_warmup()
    assert _finish(unbounded)["entries"] > 400  # the bound is what stopped it
    store.close()
    unbounded.close()


def test_closing_the_store_stops_the_warmup(tmp_path: Path, small_words, monkeypatch):
    store, _ = _store(tmp_path)
    gate = threading.Event()
    real = kp.read_docs
    monkeypatch.setattr(kp, "read_docs", lambda *a, **k: (gate.wait(30), real(*a, **k))[1])
    assert store.start_warmup()
    warmup = store._warmup
    store.close()  # stops it; the read under way is let through here
    gate.set()
    warmup._thread.join(10)
    assert not warmup.running and warmup.describe()["state"] in ("stopped", "done")


def test_a_memory_warms_up_from_its_second_search_and_says_so(make_workspace, tmp_path: Path):
    from memdir.api import Memory

    ws = make_workspace({"memory/2024-01-01.md": "# Notes\n\nBudget review for Quasar went well.\n"})
    with Memory(ws, state_dir=tmp_path / "state", config={"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
        mem.search("budget review", sync=False)
        assert mem.status()["fts"]["warm"]["warmup"] is None  # one search: maybe a one-shot process
        mem.search("quasar", sync=False)
        warm = mem.status()["fts"]["warm"]["warmup"]
        assert warm is not None and warm["state"] in ("starting", "running", "done"), warm


def test_a_cli_search_never_starts_a_warmup(make_workspace, tmp_path: Path):
    ws = make_workspace({"memory/2024-01-01.md": "# Notes\n\nBudget review for Quasar went well.\n"})
    code = (
        "import json, sys\n"
        "from memdir.stores import kw_warmup\n"
        "started = []\n"
        "real = kw_warmup.Warmup.start\n"
        "kw_warmup.Warmup.start = lambda self: (started.append(1), real(self))[1]\n"
        "from memdir.cli import main\n"
        "for q in sys.argv[2:]:\n"
        "    try:\n"
        "        main(['search', q, '--json', '--workspace', sys.argv[1]])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "cli = len(started)\n"
        "from memdir.api import Memory\n"  # a long-lived process: the same Memory searched twice
        "with Memory(sys.argv[1], config={'memorySearch': {'provider': 'none'}}) as mem:\n"
        "    mem.search(sys.argv[2], sync=False)\n"
        "    mem.search(sys.argv[2], sync=False)\n"
        "print(json.dumps({'cli': cli, 'reused': len(started)}))\n")
    env = {**os.environ, "MEMDIR_STATE_DIR": str(tmp_path / "state"), "MEMDIR_PROVIDER": "none"}
    env.pop("MEMDIR_CONFIG", None)
    out = subprocess.run([sys.executable, "-c", code, str(ws), "budget review", "quasar"], env=env,
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"cli": 0, "reused": 1}, out.stderr


class _CountingConn:
    """The store's connection, recording each statement a scorer runs through it."""

    def __init__(self, conn):
        self.conn, self.sql = conn, []

    def execute(self, sql, *args):
        self.sql.append(sql)
        return self.conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def test_the_warmup_hands_over_the_common_terms_counts_for_its_generation(tmp_path: Path, small_words):
    store, _ = _store(tmp_path)
    assert store.start_warmup()
    state = _finish(store)
    scorer = store._keyword_scorer()
    assert state["terms"] > 10 and scorer.held_counts() == state["terms"], state
    assert store.describe()["fts"]["warm"]["termCounts"] == state["terms"]
    vocab = "CREATE VIRTUAL TABLE IF NOT EXISTS temp.t_col USING fts5vocab(main, chunks_fts, col)"
    store.conn.execute(vocab)
    for term, per_col in scorer._known.items():  # FTS5's own figures at this generation, every column
        assert per_col == dict(store.conn.execute("SELECT col, doc FROM temp.t_col WHERE term = ?", (term,))), term
        assert max(per_col.values()) >= kw_warmup.MIN_ROWS
    words = sorted(scorer._known)[:8]
    phrases = [(col, f'"{w}"') for w in words for col in ("text", "stems")]
    spy = _CountingConn(store.conn)
    scorer.conn = spy
    try:
        got = scorer.doc_counts(phrases)
    finally:
        scorer.conn = spy.conn
    assert not any("fts5vocab" in s or "memdir_kw_vocab" in s for s in spy.sql), spy.sql  # nothing walked again
    assert got == [scorer._known[w].get(col, 0) for w in words for col in ("text", "stems")]
    for q in QUERIES:  # searches rank as FTS5 does with them
        terms = keyword_terms(q)
        assert [(h.id, h.score) for h in store.keyword_search(terms, 10)] == _fts5(store, terms, 10), q
    # a write moves the index on: the handed-over counts go, counts are read afresh
    word = words[0]
    before = scorer._known[word].get("text", 0)
    with store.transaction():
        _put(store, 9000, f"{word} {word} appended")
    assert scorer.doc_counts([("text", f'"{word}"')]) == [before + 1]
    assert scorer.held_counts() == 0
    store.close()


def test_a_memory_warmup_measures_its_notes_for_widening(make_workspace, tmp_path: Path):
    from memdir.api import Memory
    from memdir.note_lines import NOTE_LINES, line_widths

    trees = ["alder", "birch", "cedar", "dogwood", "elm", "fir", "ginkgo", "hazel"]
    notes = {f"memory/2024-01-{d:02d}.md": "# Day\n\n" + "\n".join(
        f"Budget review of the {tree} grove, line {i} — café." for i in range(40)) + "\n"
        for d, tree in enumerate(trees, 1)}
    notes["MEMORY.md"] = "# Long-term\n\nQuasar budget owner: Rosa.\n"
    ws = make_workspace(notes)
    cfg = {"memorySearch": {"provider": "none"}}

    def fresh(query: str) -> list:  # a new process's answer: nothing held
        NOTE_LINES.clear()
        with Memory(ws, state_dir=tmp_path / "fresh", config=cfg) as other:
            return [(r.path, r.start_line, r.end_line, r.score) for r in other.search(query).results]

    with Memory(ws, state_dir=tmp_path / "state", config=cfg) as mem:
        mem.sync()
        NOTE_LINES.clear()
        state = settled_warmup(mem, "budget review", "quasar")
        assert state["state"] == "done" and state["notes"] == len(notes), state
        for rel in notes:  # every note held, widths as a search would measure them now
            held = NOTE_LINES._files[str(ws / rel)][1]
            assert list(held) == list(line_widths((ws / rel).read_text(encoding="utf-8"))), rel
        warm = [(r.path, r.start_line, r.end_line, r.score) for r in mem.search("hazel grove", sync=False).results]
        assert warm and warm[0][0] == "memory/2024-01-08.md" and warm[0][2] - warm[0][1] > 10, warm
        assert warm == fresh("hazel grove")
        (ws / "memory/2024-01-08.md").write_text("# Day\n\nThe hazel grove, rewritten.\n", encoding="utf-8")
        edited = [(r.path, r.start_line, r.end_line, r.score) for r in mem.search("hazel grove").results]
        assert edited[0][:3] == ("memory/2024-01-08.md", 1, 4), edited  # the edited note measured again
        assert edited == fresh("hazel grove")
