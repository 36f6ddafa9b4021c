"""A faster full build writes the same index (issue 13): the stems column, the days of lines, and
everything a rebuild's bulk load writes equal what the plain per-file path writes."""

from __future__ import annotations

import datetime as dt
import random
import re
from pathlib import Path

import pytest

from memdir import db, stemming
from memdir.api import Memory
from memdir.dates import file_date, line_dates, text_date

# -- reference implementations: the straightforward reading of each rule -------------------------

_WORD_ANY = re.compile(r"(?<!\w)[^\W\d_]{3,}(?!\w)")


def stems_reference(text: str) -> str:
    """The word pattern over the whole lower-cased text, every word stemmed by Snowball (the Turkish
    İ lowered to i, as a question is, not to i and a combining dot, which split the word)."""
    language = stemming.detect_language(text)
    words: list[str] = []
    for token in text.split():  # (a CamelCase word's parts follow its own words: stemming.camel_words)
        low = token.lower().replace("i\u0307", "i")
        if language == stemming.DEFAULT_LANGUAGE:  # accented words without their accents ("café" → cafe)
            words += [e for w in _WORD_ANY.findall(low)
                      if stemming.is_latin_word(w) and (e := stemming.english_word(w))]
        else:
            words += [w for w in _WORD_ANY.findall(low) if stemming.is_latin_word(w)]
        words += stemming.camel_words(token)
    return " ".join(str(s) for s in stemming.stemmer(language).stemWords(words))


def line_dates_reference(path: str, content: str) -> list[dt.date | None]:
    """Line by line: a heading sets its level's day, the nearest dated heading above counts."""
    heading = re.compile(r"^(#{1,6})\s+(.*)$")
    stack: list[tuple[int, dt.date | None]] = []
    out: list[dt.date | None] = []
    for line in content.split("\n"):
        m = heading.match(line)
        if m:
            level = len(m.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text_date(m.group(2))))
        out.append(next((d for _, d in reversed(stack) if d is not None), file_date(path)))
    return out


_PIECES = [
    "the", "and", "Deployed", "billing-service", "snake_case", "v2.3.1", "INC-40213", "café", "naïve", "über",
    "İstanbul", "ΟΔΟΣ", "straße", "—", "–", "…", "(notes)", "[link](http://x.io/a_b)", "$400", "3x", "x3y",
    "ab", "abc", "ABCDEF", "日本語の", "之前讨论", "한국어", "\u00a0", "\u2028", "\x0b", "\x1c", "\r", "\t",
    "und", "die", "der", "nicht", "les", "et", "est", "Pässe", "erneuert", "payé", "voiture", "é", "o'clock",
    "don't", "e-mail", "🙂", "#", "##", "-", "*", "1.", "2023-05-07", "May 7, 2023", "7 May 2023",
]


def _random_text(rng: random.Random) -> str:
    words = [rng.choice(_PIECES) for _ in range(rng.randint(0, 60))]
    seps = [" ", " ", " ", "\n", "", ",", "\n\n", "  "]
    return "".join(w + rng.choice(seps) for w in words)


def test_stems_equal_the_word_pattern_over_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(13)
    texts = [_random_text(rng) for _ in range(3000)]
    texts += ["Wir haben die Pässe erneuert und das ist nicht teuer, der Termin war gut.",
              "Nous avons payé la voiture et les passeports, mais pas le reste.", "", " ", "\n"]
    for text in texts:
        assert stemming.text_stems(text) == stems_reference(text), repr(text)
    # a full token cache is emptied and refilled: same stems
    monkeypatch.setattr(stemming, "TOKEN_CACHE_MAX", 5)
    for text in texts[:300]:
        assert stemming.text_stems(text) == stems_reference(text), repr(text)


def test_the_days_of_lines_equal_a_line_by_line_reading() -> None:
    rng = random.Random(7)
    headings = ["# 2023-05-07", "## May 8, 2023 standup", "### Notes", "#no space", "####### seven",
                "## \t9 June 2023", "#\n", "# ", "##\u00a0July 4, 2022", "   # indented 2023-01-01", "#\x0b2021-02-03"]
    for _ in range(500):
        lines = [rng.choice(headings) if rng.random() < 0.3 else rng.choice(_PIECES) for _ in range(rng.randint(0, 30))]
        content = rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])
        path = rng.choice(["memory/2023-04-01.md", "MEMORY.md", "memory/notes.md"])
        assert line_dates(path, content) == line_dates_reference(path, content), repr(content)


# -- the bulk load of a rebuild against the per-file path of an incremental sync ------------------

_NOTES = {
    "MEMORY.md": "# Preferences\n\n- Alice prefers tea over coffee\n- The billing service runs on PostgreSQL\n",
    "memory/2023-05-07.md": "## Standup\n\n" + "\n".join(
        f"- Deployed the billing-service v2.{i} to staging; INC-{4000 + i} closed by Bob" for i in range(120)),
    "memory/2023-05-08.md": "# 2023-05-09 retro\n\nWir haben die Pässe erneuert und das Auto ist nicht teuer.\n"
                            "## Notes\n之前讨论的那个方案 was approved.\n",
    "memory/ideas.md": "\n".join(f"Idea {i}: cache the {w} layer" for i, w in enumerate(["auth", "search"] * 80)),
}


def _contents(index: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = db.binding().connect(str(index))
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, chunks_fts, instance)")
        return {
            "chunks": conn.execute("SELECT rowid, id, path, source, start_line, end_line, hash, model, text, "
                                   "embedding, ts, date_start, date_end FROM chunks ORDER BY rowid").fetchall(),
            "files": conn.execute("SELECT path, source, hash, size FROM files ORDER BY path").fetchall(),
            "fts": conn.execute("SELECT term, doc, col, offset FROM temp.v").fetchall(),
            "docsize": conn.execute("SELECT id, sz FROM chunks_fts_docsize ORDER BY id").fetchall(),
            "config": conn.execute("SELECT k, v FROM chunks_fts_config ORDER BY k").fetchall(),
        }
    finally:
        conn.close()


def test_a_rebuild_writes_what_syncing_file_by_file_writes(make_workspace, tmp_path: Path,
                                                            keyword_config) -> None:
    full_ws = make_workspace(_NOTES, name="full")
    with Memory(full_ws, state_dir=tmp_path / "state-full", config=keyword_config) as mem:
        assert mem.sync().full
        full = _contents(mem.index_path)
    # the same notes arriving after an empty first build: written by the incremental path
    inc_ws = make_workspace({}, name="inc")
    with Memory(inc_ws, state_dir=tmp_path / "state-inc", config=keyword_config) as mem:
        assert mem.sync().full
        for rel, text in _NOTES.items():
            (inc_ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (inc_ws / rel).write_text(text, encoding="utf-8")
        rep = mem.sync()
        assert not rep.full and rep.indexed == len(_NOTES)
        inc = _contents(mem.index_path)
    assert len(full["chunks"]) > 10 and len(full["fts"]) > 1000
    for key in full:
        assert full[key] == inc[key], key
    assert "hashsize" not in {k for k, _ in full["config"]}  # the bulk load's setting is gone


def _shadow_meta(location: str) -> list[tuple[str]]:
    conn = db.binding().connect(location)
    try:
        return conn.execute("SELECT value FROM meta WHERE key = 'memory_index_meta_v1'").fetchall()
    finally:
        conn.close()


def test_a_rebuilds_writes_show_in_its_shadow_when_published_and_in_the_index_when_swapped(
        make_workspace, tmp_path: Path, keyword_config) -> None:
    ws = make_workspace(_NOTES)
    with Memory(ws, state_dir=tmp_path / "state", config=keyword_config) as mem:
        mem.sync()
        live = mem.store.read_meta()
        with mem.store.rebuild() as fresh:
            with fresh.transaction():
                fresh.write_meta({"schema": -1})
            assert _shadow_meta(fresh.location) == []  # the bulk load's transaction is still open
            fresh.publish()  # what a search during a first build reads
            assert _shadow_meta(fresh.location) == [('{"schema": -1}',)]
            assert mem.store.read_meta() == live
        assert mem.store.read_meta() == {"schema": -1}


def _page_size(path: Path) -> int:
    conn = db.connect(path, readonly=True)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def test_a_new_index_uses_8k_pages_and_an_old_4k_index_keeps_working(make_workspace, tmp_path: Path,
                                                                     keyword_config) -> None:
    """Three ~2.6 KB chunk rows (text + 384-d vector) fit an 8 KiB page, one fits 4 KiB."""
    ws = make_workspace(_NOTES)
    with Memory(ws, state_dir=tmp_path / "new", config=keyword_config) as mem:
        mem.sync(reason="test")
        path, found = mem.index_path, mem.search("billing staging", min_score=0).results
    assert _page_size(path) == db.PAGE_SIZE == 8192 and found
    # an index written before (SQLite's default 4 KiB pages) is opened, synced, rebuilt as it is
    old_state = tmp_path / "old"
    with Memory(ws, state_dir=old_state, config=keyword_config) as mem:
        old_path = mem.index_path
    old_path.parent.mkdir(parents=True, exist_ok=True)
    old_path.unlink(missing_ok=True)
    conn = db.binding().connect(str(old_path))
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("CREATE TABLE t(x)")
    conn.execute("DROP TABLE t")
    conn.commit()
    conn.close()
    with Memory(ws, state_dir=old_state, config=keyword_config) as mem:
        mem.sync(reason="test")
        assert mem.search("billing staging", min_score=0).results == found
        mem.sync(reason="test", force=True)
        assert mem.search("billing staging", min_score=0).results == found
    assert _page_size(old_path) == 4096


def test_a_keyword_only_rebuild_is_copied_in_by_pages_and_an_open_reader_reads_the_new_index(
        make_workspace, tmp_path: Path, keyword_config, monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap copies the shadow's pages (SQLite's backup API) unless the index holds an embedding
    cache (copied row by row, to the front of the file, where a salvage finds it); either way a
    connection open across the swap reads the new rows, keyword index and vector epoch."""
    from memdir.stores import sqlite as sqlite_store
    from memdir.stores import vectors as vecs

    by_rows: list[Path] = []
    real_copy = sqlite_store.SqliteStore._copy_rows_from
    monkeypatch.setattr(sqlite_store.SqliteStore, "_copy_rows_from",
                        lambda self, path: (by_rows.append(path), real_copy(self, path)))
    ws = make_workspace(_NOTES)
    with Memory(ws, state_dir=tmp_path / "state", config=keyword_config) as mem:
        mem.sync()
        index = mem.index_path
        reader = db.connect(index, readonly=True)
        reader.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, chunks_fts, row)")
        epoch = vecs.state(reader)[0]
        old_rows = reader.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert reader.execute("SELECT count(*) FROM temp.v WHERE term = 'quokka'").fetchone()[0] == 0
        (ws / "memory" / "zoo.md").write_text("# Zoo\n\nA quokka was seen near the billing office.\n")
        assert mem.sync(force=True).full
        assert by_rows == []  # no embedding cache: page by page
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == old_rows + 1
        assert reader.execute("SELECT count(*) FROM temp.v WHERE term = 'quokka'").fetchone()[0] == 1
        assert vecs.state(reader)[0] != epoch
        assert [h.path for h in mem.search("quokka", min_score=0).results] == ["memory/zoo.md"]
        # an embedding cache kept from an earlier model: row by row, and kept
        with mem.store.transaction():
            mem.store.cache_put("p", "m", "k", {"h": [1.0, 0.0]})
        mem.sync(force=True)
        assert len(by_rows) == 1 and mem.store.cache_count() == 1
        reader.close()
    full = _contents(index)
    assert len(full["chunks"]) == old_rows + 1


# -- a large full build: files chunked and stemmed in a worker process ----------------------------

def _session_setup(ws: Path, state: Path) -> dict[str, object]:
    """A transcript beside the notes (planned in process: its times need the timezone)."""
    import json

    from memdir.config import load_config

    sessions = load_config(workspace=ws, state_dir=state).settings.sessions_dir
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "s1.jsonl").write_text(
        json.dumps({"type": "message", "timestamp": 1_700_000_000_000,
                    "message": {"role": "user", "content": "The flamingo migration runs on Friday"}}) + "\n")
    return {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                             "experimental": {"sessionMemory": True}}}


def _worker_notes() -> dict[str, str]:
    notes = dict(_NOTES)
    for i in range(12):  # enough files for several batches and replies
        notes[f"memory/2023-06-{i + 1:02d}.md"] = "\n".join(
            f"- Reviewed ticket INC-{i * 100 + k} about the {['auth', 'search', 'billing'][k % 3]} layer"
            for k in range(40))
    return notes


@pytest.fixture
def worker_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every full build uses a worker (in small batches); records each worker started and each reply."""
    from memdir import build_worker, sync

    monkeypatch.setattr(sync, "WORKER_MIN_BYTES", 0)
    monkeypatch.setattr(sync, "WORKER_BATCH_BYTES", 500)
    monkeypatch.setattr(sync, "free_core", lambda: True)  # however busy the machine running the tests
    calls: list[str] = []
    real_init, real_reply = build_worker.ChunkWorker.__init__, build_worker.ChunkWorker.reply

    def init(self, *args):
        calls.append("start")
        real_init(self, *args)

    def reply(self):
        answer = real_reply(self)
        calls.append("reply")
        return answer

    monkeypatch.setattr(build_worker.ChunkWorker, "__init__", init)
    monkeypatch.setattr(build_worker.ChunkWorker, "reply", reply)
    return calls


def _build(ws: Path, state: Path, config: dict[str, object]) -> dict[str, list[tuple[object, ...]]]:
    with Memory(ws, state_dir=state, config=config) as mem:
        rep = mem.sync()
        assert rep.full and not rep.skipped
        return _contents(mem.index_path)


def test_a_large_rebuild_planned_in_a_worker_writes_what_one_process_writes(
        make_workspace, tmp_path: Path, worker_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from memdir import sync

    ws = make_workspace(_worker_notes())
    config = _session_setup(ws, tmp_path / "state-worker")
    _session_setup(ws, tmp_path / "state-alone")
    parallel = _build(ws, tmp_path / "state-worker", config)
    assert worker_calls.count("start") == 1 and worker_calls.count("reply") >= 5
    monkeypatch.setattr(sync, "WORKER_MIN_BYTES", 10**12)
    alone = _build(ws, tmp_path / "state-alone", config)
    assert worker_calls.count("start") == 1  # the threshold keeps a build in process
    assert {p for _, _, p, *_ in parallel["chunks"]} >= {"MEMORY.md", "memory/2023-05-08.md", "sessions/s1.jsonl"}
    for key in alone:
        assert parallel[key] == alone[key], key


def test_a_worker_that_dies_or_cannot_start_leaves_the_files_to_the_indexer(
        make_workspace, tmp_path: Path, worker_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from memdir import build_worker, sync

    ws = make_workspace(_worker_notes())
    expected = _build(ws, tmp_path / "reference", {"memorySearch": {"provider": "none"}})
    # killed after its second answer: the files it did not answer are planned in process
    real_reply = build_worker.ChunkWorker.reply
    answers: list[int] = []

    def dying_reply(self):
        if len(answers) == 2:  # (closing our end too: an answer already in the pipe is lost with it)
            self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
        answer = real_reply(self)
        answers.append(len(answer))
        return answer

    monkeypatch.setattr(build_worker.ChunkWorker, "reply", dying_reply)
    assert _build(ws, tmp_path / "killed", {"memorySearch": {"provider": "none"}}) == expected
    assert len(answers) == 2
    # a "Python" that is no Python (exits at once), one that does not exist, none known (embedded)
    for exe in ("/bin/true", str(tmp_path / "no-such-python"), ""):
        monkeypatch.setattr(build_worker.sys, "executable", exe)
        assert _build(ws, tmp_path / f"exe-{len(exe)}", {"memorySearch": {"provider": "none"}}) == expected
    assert sync.WORKER_MIN_BYTES == 0


def test_a_worker_stopped_mid_build_leaves_the_files_to_the_indexer(
        make_workspace, tmp_path: Path, worker_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a chunking worker stopped with SIGSTOP (a debugger, a hostile tester) held the build in
    # a read of its next reply for ever, without a word: `memdir index` never finished.
    import os
    import signal
    import threading

    from memdir import build_worker

    ws = make_workspace(_worker_notes())
    expected = _build(ws, tmp_path / "reference", {"memorySearch": {"provider": "none"}})
    monkeypatch.setattr(build_worker, "STOPPED_WORKER_WAIT", 0.5)
    real_reply = build_worker.ChunkWorker.reply
    stopped: list[int] = []
    answered: list[int] = []

    def stopping_reply(self):
        if len(answered) == 2 and not stopped:
            os.kill(self.proc.pid, signal.SIGSTOP)
            stopped.append(self.proc.pid)
        answer = real_reply(self)
        answered.append(len(answer))
        return answer

    monkeypatch.setattr(build_worker.ChunkWorker, "reply", stopping_reply)
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(_build(ws, tmp_path / "stopped",
                                                                {"memorySearch": {"provider": "none"}})), daemon=True)
    thread.start()
    thread.join(60)
    try:
        assert not thread.is_alive(), "the build waited for ever for the stopped worker"
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # (killed by the indexer, as it should be)
    assert stopped and out == [expected]


def test_a_file_the_worker_cannot_read_is_reported_as_skipped(make_workspace, tmp_path: Path,
                                                               worker_calls: list[str]) -> None:
    import os

    ws = make_workspace(_worker_notes())
    os.mkfifo(ws / "memory" / "pipe.md")  # refused before it is opened for reading, by both processes
    with Memory(ws, state_dir=tmp_path / "state", config={"memorySearch": {"provider": "none"}}) as mem:
        rep = mem.sync()
        assert "reply" in worker_calls
        assert [s["path"] for s in rep.skipped] == ["memory/pipe.md"]
        assert mem.search("INC-1105 billing", min_score=0).results[0].path == "memory/2023-06-12.md"


def test_a_rebuilt_index_has_no_free_pages_and_an_older_layout_keeps_working(
        make_workspace, tmp_path: Path, keyword_config, monkeypatch: pytest.MonkeyPatch) -> None:
    """FTS5's merges free pages while a rebuild's shadow fills: the shadow gives them back before it
    is copied in.  An index of the older layout (no page tracking, a second index on ``source``)
    is searched and synced as it is, and a rebuild brings it the new layout with the same rows."""
    from memdir.bench.corpus import generate
    from memdir.stores import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "BULK_FTS_HASH_BYTES", 2048)  # many small segments, merged
    corpus = generate(tmp_path / "corpus", 300, seed=1)  # (leaves free pages behind with this setting)
    ws, query = corpus.workspace, corpus.queries[0]
    with Memory(ws, state_dir=tmp_path / "state", config=keyword_config) as mem:
        mem.sync()
        index = mem.index_path
        found = mem.search(query, min_score=0).results
        assert found
        counts = mem.store.counts_by_source()
    fresh = _contents(index)
    conn = db.binding().connect(str(index))
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental: pages can be given back
    # the older layout: no auto-vacuum, indexes on (path, source) and (source)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.execute("DROP INDEX idx_chunks_path")
    conn.execute("CREATE INDEX idx_chunks_path ON chunks(path, source)")
    conn.execute("CREATE INDEX idx_chunks_source ON chunks(source)")
    conn.execute("PRAGMA journal_mode = WAL")
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    conn.close()
    with Memory(ws, state_dir=tmp_path / "state", config=keyword_config) as mem:
        assert mem.search(query, min_score=0).results == found
        assert mem.store.counts_by_source() == counts
        (ws / "memory" / "zoo.md").write_text("# Zoo\n\nA quokka was seen near the billing office.\n")
        assert mem.sync().indexed == 1
        assert [h.path for h in mem.search("quokka", min_score=0).results] == ["memory/zoo.md"]
        (ws / "memory" / "zoo.md").unlink()
        assert mem.sync(force=True).full
        assert mem.search(query, min_score=0).results == found
    assert _contents(index) == fresh
    conn = db.binding().connect(str(index))
    try:
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "idx_chunks_source" not in names and "idx_chunks_path" in names
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    finally:
        conn.close()


class _WindowedProvider:
    """Deterministic 16-dim vectors, and a 24-token window: long chunks are embedded in pieces."""

    id, model, provider_key, max_input_bytes, dims, max_tokens = "win", "win-16", "win-key", 8000, 16, 24

    def count_tokens(self, lines: list[str]) -> list[int]:
        return [len(line.split()) + 1 for line in lines]

    def _vec(self, text: str) -> list[float]:
        import hashlib

        return [(b - 127.5) / 128 for b in hashlib.sha512(text.encode()).digest()[:16]]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)

    def embed_batch(self, texts):
        return [self._vec(t) for t in texts]

    def close(self) -> None:
        pass


def test_a_rebuild_with_vectors_planned_in_a_worker_writes_what_one_process_writes(
        make_workspace, tmp_path: Path, worker_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker plans the chunks; their embedding windows (the provider's tokenizer) are cut here."""
    from memdir import sync

    ws = make_workspace(_worker_notes())

    def build(state: Path) -> tuple[dict[str, list[tuple[object, ...]]], list[tuple[object, ...]]]:
        with Memory(ws, state_dir=state, config={}, provider=_WindowedProvider()) as mem:
            rep = mem.sync()
            assert rep.full and rep.embedded > 0
            index = mem.index_path
        conn = db.binding().connect(str(index))
        try:
            cache = conn.execute("SELECT hash, embedding, dims FROM embedding_cache ORDER BY hash").fetchall()
        finally:
            conn.close()
        return _contents(index), cache

    parallel = build(tmp_path / "worker")
    assert worker_calls.count("reply") >= 5
    monkeypatch.setattr(sync, "WORKER_MIN_BYTES", 10**12)
    alone = build(tmp_path / "alone")
    assert any(len(r[9] or b"") > 16 * 4 for r in alone[0]["chunks"])  # some chunks have several windows
    assert parallel == alone


def test_a_worker_is_started_only_with_a_core_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from memdir import sync

    if os.path.exists("/proc/loadavg"):
        assert sync.running_tasks() >= 1  # this very process is running while it reads the count
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not sync.free_core()  # one core: the build stays in process
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(sync, "running_tasks", lambda: 2)  # this process and one other, now
    monkeypatch.setattr(os, "getloadavg", lambda: (1.9, 1.0, 1.0))
    assert not sync.free_core()  # two cores, both busy
    monkeypatch.setattr(os, "getloadavg", lambda: (0.6, 1.0, 1.0))
    assert sync.free_core()  # the last minute left one idle
    # the minute's average holds this process's own recent work: alone now, a core is free
    monkeypatch.setattr(os, "getloadavg", lambda: (1.6, 1.0, 1.0))
    monkeypatch.setattr(sync, "running_tasks", lambda: 1)
    assert sync.free_core()
    monkeypatch.setattr(sync, "running_tasks", lambda: None)  # no /proc: the average decides
    assert not sync.free_core()
    # a task passing at one instant does not hide an idle core; one busy at every read does
    counts = iter([2, 2, 1])
    monkeypatch.setattr(sync, "running_tasks", lambda: next(counts))
    assert sync.free_core()
    reads: list[int] = []
    monkeypatch.setattr(sync, "running_tasks", lambda: reads.append(2) or 2)
    assert not sync.free_core()
    assert len(reads) == sync.FREE_CORE_SAMPLES


def test_a_host_program_at_sys_executable_is_not_waited_for(
        make_workspace, tmp_path: Path, worker_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where memdir runs inside a host program (uWSGI, an application that bundles its Python),
    sys.executable names that program: started as the chunking worker it ran on without answering,
    and a large build waited for its first reply for ever; a frozen application (PyInstaller) was
    started again itself.  What is not the worker is given up on, a frozen one never started."""
    import threading

    from memdir import build_worker

    ws = make_workspace(_worker_notes())
    expected = _build(ws, tmp_path / "reference", {"memorySearch": {"provider": "none"}})
    started = tmp_path / "started"
    host = tmp_path / "host-program"
    host.write_text(f"#!/bin/sh\necho \"$@\" >> {started}\nexec sleep 300\n")
    host.chmod(0o755)
    monkeypatch.setattr(build_worker.sys, "executable", str(host))
    monkeypatch.setattr(build_worker, "HELLO_WAIT", 2.0, raising=False)
    for name, frozen in (("running", False), ("frozen", True)):
        monkeypatch.setattr(build_worker.sys, "frozen", frozen, raising=False)
        built: list[object] = []
        build = threading.Thread(target=lambda out=built, state=tmp_path / name: out.append(_build(ws, state, {
            "memorySearch": {"provider": "none"}})), daemon=True)
        build.start()
        build.join(60)  # (a failure guard: it waited for ever)
        assert not build.is_alive() and built == [expected], name
    assert started.read_text().split() == ["-m", "memdir.build_worker"]  # once: the frozen one never started
