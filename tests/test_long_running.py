"""Derived state that must stay bounded while notes are edited for weeks in one process.

Each test counts rows, bytes, descriptors or threads after many real edits and syncs; none
measures time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memdir import Memory
from memdir.stores import vectors as vecs


def _rows(store_conn, table: str) -> int:
    return int(store_conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_change_log_stays_bounded_after_many_rewrites(make_workspace: Callable[..., Path], keyword_config,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the log was trimmed to ``max(rowid) + LOG_SLACK`` entries, and every rewrite of the
    # other files raises max(rowid): the log kept about one entry per chunk ever written (85k
    # entries, 1.1 MB of a 2.2 MB index, after 3000 edits of a 300-chunk workspace).
    monkeypatch.setattr(vecs, "LOG_SLACK", 40)
    ws = make_workspace({"MEMORY.md": "# Memory\n\nLong-term facts.\n"})
    (ws / "memory").mkdir()
    mem = Memory(ws, config=keyword_config)
    try:
        for i in range(80):  # two files in turn: each rewrite takes rowids above the other's
            text = "".join(f"## Part {j}\n\nEdit {i} of part {j}: the boiler and kafka.\n\n" for j in range(5))
            (ws / "memory" / f"notes{i % 2}.md").write_text(text)
            mem.sync()
        conn = mem.store.conn
        chunks = _rows(conn, "chunks")
        assert chunks >= 5
        # one sync's entries (a rewrite logs its old and new chunks) beyond what the trim keeps
        assert _rows(conn, "vec_log") <= chunks + vecs.LOG_SLACK + 2 * chunks
        churned = [(h.path, h.start_line, h.snippet) for h in mem.search("boiler kafka", mode="keyword").results]
    finally:
        mem.close()
    fresh = Memory(ws, config=keyword_config, state_dir=ws.parent / "fresh-state")
    try:
        assert churned == [(h.path, h.start_line, h.snippet)
                           for h in fresh.search("boiler kafka", mode="keyword").results]
        assert "Edit 79 of part 0" in "".join(text for _, _, text in churned)
    finally:
        fresh.close()


def test_long_term_memory_cleans_old_versions_when_fragments_stay_few(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: only 32 fragments started a compaction (and its cleanup).  A memory stored and then
    # forgotten, over and over, never makes a second fragment: every version's manifest,
    # transaction and data file stayed (200 rounds: 1,000 files, 3.9 MB for one live memory).
    pytest.importorskip("lancedb")
    from datetime import timedelta

    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory
    from memdir.ltm import store as ltm_store

    monkeypatch.setattr(ltm_store, "KEEP_OLD_VERSIONS", timedelta(milliseconds=1), raising=False)  # all old
    monkeypatch.setattr(ltm_store, "CLEAN_AT_OLD_VERSIONS", 8, raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = load_config(workspace=ws, state_dir=tmp_path / "state", agent_id="main").settings
    with LongTermMemory(settings, provider=AxisProvider()) as ltm:
        kept = ltm.store("The user lives in Porto", category="fact").record.id
        for i in range(30):
            ltm.forget(ltm.store(f"Passing fact number {i} about the zebra", category="fact").record.id)
        table_dir = ltm.table.path / f"{ltm_store.TABLE}.lance"
        manifests = [p for p in (table_dir / "_versions").iterdir() if p.name.endswith(".manifest")]
        assert len(manifests) <= 8 + 2
        assert sum(1 for p in table_dir.rglob("*") if p.is_file()) <= 4 * (8 + 2)
        assert [r.id for r in ltm.list()] == [kept]
        assert [r.id for r in ltm.search("The user lives in Porto")] == [kept]


def test_long_term_embedding_cache_is_pruned_by_short_lived_processes(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: only a process's 200th write checked the size, so one command per prompt (a hook
    # running ``memdir ltm search``, which caches each query's vector) grew the cache for ever.
    import numpy as np

    from memdir.ltm import embedder

    path = tmp_path / "embedding-cache.sqlite"
    key = ("fake", "m", "k")
    for process in range(12):  # one cache object per "process", two new vectors each
        cache = embedder.EmbeddingCache(path, max_entries=5)
        cache.put(key, {f"h{process}-{i}": np.ones(4, dtype=np.float32) for i in range(2)})
        cache.close()
    cache = embedder.EmbeddingCache(path, max_entries=5)
    try:
        assert cache.count() == 5
        assert set(cache.get(key, ["h11-0", "h11-1"])) == {"h11-0", "h11-1"}  # the newest are kept
    finally:
        cache.close()


def test_the_wal_shrinks_after_a_big_write_while_another_process_keeps_the_index_open(tmp_path: Path) -> None:
    # Before: SQLite reuses a write-ahead log at its largest.  A rebuild copies the whole index
    # in one transaction, and while a ``memdir mcp`` or ``watch`` kept the index open (so the
    # WAL was never deleted) a WAL as big as the index stayed beside it.
    import numpy as np

    from memdir.stores.base import ChunkRow
    from memdir.stores.sqlite import SqliteStore

    limit = 4 * 1024 * 1024  # memdir.db.WAL_SIZE_LIMIT
    path = tmp_path / "index.sqlite"
    wal = Path(f"{path}-wal")
    writer, server = SqliteStore(path), SqliteStore(path)  # the server only keeps its connection
    try:
        vec = np.ones(4096, dtype=np.float32)
        big = [ChunkRow(f"c{i}", "big.md", "memory", i + 1, i + 1, f"h{i}", "m", f"chunk {i}", vec) for i in range(400)]
        with writer.transaction():
            writer.replace_file("big.md", "memory", "b", 1, 1, big)
        assert wal.stat().st_size > 1.5 * limit
        writer.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        with writer.transaction():  # the next write starts the log over, and cuts it down
            writer.replace_file("small.md", "memory", "s", 1, 1,
                                [ChunkRow("s", "small.md", "memory", 1, 1, "hs", "m", "small note")])
        assert wal.stat().st_size <= limit
        assert server.chunk_count() == 401
    finally:
        writer.close()
        server.close()


def test_the_watcher_keeps_retrying_after_a_day_of_failed_syncs(make_workspace: Callable[..., Path], keyword_config,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the retry delay was 2 s × 2 ** (failures - 1), capped after computing it: past 1,024
    # failures in a row (17 hours of a full disk or a provider down, one a minute) the power
    # overflowed a float, the OverflowError ended the sync thread, and the watcher never synced again.
    import threading

    from memdir import watch

    monkeypatch.setattr(watch, "RETRY_MAX_SECONDS", 0.02)
    ws = make_workspace({"MEMORY.md": "# Memory\n"})
    mem = Memory(ws, config=keyword_config)
    calls: list[int] = []
    again = threading.Event()

    def failing_sync(**_: object) -> None:
        calls.append(1)
        if len(calls) >= 3:
            again.set()
        raise OSError("No space left on device")

    monkeypatch.setattr(mem, "sync", failing_sync)
    watcher = watch.Watcher(mem, files=False, sync_at_start=True)
    watcher.failures = 2000  # as after a day and a half of failures, one a minute
    watcher.start()
    try:
        assert again.wait(15), f"the sync thread stopped after {len(calls)} attempt(s)"
        assert watcher.failures >= 2002 and "No space left" in (watcher.last_error or "")
    finally:
        watcher.stop()
        mem.close()


def test_appends_timing_out_on_a_stopped_holder_keep_threads_and_descriptors_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: each append that gave up on the file's lock left its waiting thread (and a
    # duplicate descriptor) queued in the kernel until the holder let go: a holder stopped for
    # hours took a long-lived server, one ``memory_append`` at a time, to "Too many open files".
    import os
    import subprocess
    import sys
    import threading
    import time

    from memdir import lock, memfiles

    monkeypatch.setattr(memfiles, "APPEND_LOCK_WAIT", 0.02)
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    note = ws / "memory" / "2026-11-28.md"
    note.write_text("first\n")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(note)!r}, os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
        for i in range(30):
            with pytest.raises(memfiles.MemoryFileError, match="locked"):
                memfiles.append_memory_file(ws, note.name, f"entry {i}")
        assert threading.active_count() <= threads + 8  # lock.MAX_ABANDONED_WAITS
        assert len(os.listdir("/proc/self/fd")) <= fds + 8
    finally:
        holder.communicate("", timeout=10)  # the holder ends: its lock goes, and every waiter with it
    memfiles.APPEND_LOCK_WAIT = 5.0
    memfiles.append_memory_file(ws, note.name, "after the holder")
    deadline = time.monotonic() + 10
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= threads and getattr(lock, "_abandoned", 0) == 0
    assert note.read_text() == "first\n\nafter the holder\n"
