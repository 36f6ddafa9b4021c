"""Index and sync: FTS-only indexing, incremental sync, atomic rebuilds, crashes, the writer lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import cli_env
from memdir.api import IndexOwnershipError, Memory
from memdir.lock import FileWriterLock, LockTimeout
from memdir.stores.sqlite import bm25_to_score


def test_fts_only_workspace_indexes_every_chunk(make_workspace, keyword_config, backend):
    ws = make_workspace({"MEMORY.md": "# Prefs\nUser prefers dark mode.", "memory/2026-01-12.md": "Deployed the API."})
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        report = mem.sync()
        assert report.full and report.indexed == 2 and report.chunks == 2
        st = mem.status()
        assert (st["files"], st["chunks"], st["mode"]) == (2, 2, "fts-only")
        assert st["store"]["backend"] == backend.driver
        assert mem.search("dark mode").results[0].path == "MEMORY.md"
        hits = mem.search("deployed api").results
        assert hits[0].path == "memory/2026-01-12.md"
        assert 0 < hits[0].score < 1


def test_a_full_rebuild_counts_the_files_it_dropped(make_workspace, keyword_config, backend):
    """A rebuild (index --force, a changed setting) after notes were deleted reported "0 removed",
    while status had counted them and the new index no longer held them."""
    ws = make_workspace({f"memory/2026-01-{i:02d}.md": f"- note {i}\n" for i in range(1, 6)})
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        assert mem.sync().removed == 0
        for i in (1, 2):
            (ws / "memory" / f"2026-01-{i:02d}.md").unlink()
        assert mem.status()["removedCount"] == 2
        report = mem.sync(force=True)
        assert report.full and (report.scanned, report.indexed, report.removed) == (3, 3, 2)
        assert mem.status()["files"] == 3
        assert mem.sync(force=True).removed == 0


def _chunk_stamps(mem: Memory) -> dict[str, int]:
    """``{chunk id: updated_at}``: when each chunk row was last written, read from either backend."""
    store = mem.store
    if hasattr(store, "conn"):
        return dict(store.conn.execute("SELECT id, updated_at FROM chunks").fetchall())
    with store.db.connection() as conn:
        return dict(conn.execute("SELECT c.id, c.updated_at FROM chunks c JOIN indexes i ON i.id = c.index_id "
                                 "WHERE i.agent = %s AND i.state = 'live'", (store.agent,)).fetchall())


def test_incremental_sync_touches_only_changed_files(make_workspace, keyword_config, backend):
    files = {f"memory/2026-01-{d:02d}.md": f"day {d} note about topic{d}" for d in range(1, 21)}
    ws = make_workspace(files)
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        mem.sync()
        before = _chunk_stamps(mem)
        time.sleep(0.01)
        (ws / "memory/2026-01-05.md").write_text("day 5 rewritten: zebra crossing")
        (ws / "memory/2026-01-06.md").unlink()
        os.utime(ws / "memory/2026-01-07.md")  # touched, same content: re-hashed, not re-chunked
        (ws / "memory/2026-01-21.md").write_text("new day")
        report = mem.sync()
        assert not report.full
        assert (report.indexed, report.removed, report.scanned) == (2, 1, 20)
        assert report.unchanged == 18
        after = _chunk_stamps(mem)
        same = {k: v for k, v in after.items() if k in before}
        assert all(before[k] == v for k, v in same.items()), "unchanged chunks were rewritten"
        assert mem.search("zebra").results[0].path == "memory/2026-01-05.md"
        assert not mem.search("topic6").results
        # nothing changed: everything is a stat fast-path hit
        report = mem.sync()
        assert (report.indexed, report.removed, report.unchanged) == (0, 0, 20)


def test_indexer_never_writes_to_the_workspace(make_workspace, keyword_config, backend):
    ws = make_workspace({"MEMORY.md": "a", "memory/x.md": "b"})
    def snap():
        return {p: (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None) for p in ws.rglob("*")}

    snapshot = snap()
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        mem.sync(force=True)
        mem.search("a")
    assert snap() == snapshot


def test_search_reads_its_own_writes(make_workspace, keyword_config, backend):
    ws = make_workspace({"memory/a.md": "alpha"})
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        assert mem.search("alpha").results
        (ws / "memory" / "b.md").write_text("the quokka ate lunch")
        resp = mem.search("quokka")
        assert resp.results and resp.results[0].path == "memory/b.md" and not resp.stale


def test_config_change_triggers_full_reindex(make_workspace, keyword_config, backend):
    ws = make_workspace({"memory/a.md": "\n".join(f"line {i} " + "w" * 60 for i in range(200))})
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        mem.sync()
        n = mem.status()["chunks"]
    cfg = backend.config({"memorySearch": {"provider": "none", "chunking": {"tokens": 100}}})
    with Memory(ws, config=cfg) as mem:
        report = mem.sync()
        assert report.full and "chunkTokens" in report.reason
        assert mem.status()["chunks"] > n
        assert mem.store.read_meta()["chunkTokens"] == 100


def test_two_workspaces_never_share_an_index(make_workspace, keyword_config, backend):
    a = make_workspace({"memory/a.md": "a"}, name="a")
    b = make_workspace({"memory/b.md": "b"}, name="b")
    cfg = backend.config(keyword_config)
    # Without an agent id each workspace gets its own index, named after it.
    with Memory(a, config=cfg) as mem_a, Memory(b, config=cfg) as mem_b:
        assert mem_a.sync().indexed == 1 and mem_b.sync().indexed == 1
        assert mem_a.store.location != mem_b.store.location
        if not backend.postgres:
            assert mem_a.index_path.name.startswith("a-") and mem_b.index_path.name.startswith("b-")
        assert [r.path for r in mem_b.search("b").results] == ["memory/b.md"]
    # With a chosen agent id (OpenClaw's per-agent index), a second workspace is refused.
    with Memory(a, agent_id="main", config=cfg) as mem:
        mem.sync()
        assert mem.store.location.endswith("/main" if backend.postgres else "main.sqlite")
    with Memory(b, agent_id="main", config=cfg) as mem, pytest.raises(IndexOwnershipError, match="--agent"):
        mem.sync()
    with Memory(b, agent_id="other", config=cfg) as mem:
        assert mem.sync().indexed == 1


def test_writer_lock_excludes_a_second_writer_and_recovers_from_death(tmp_path: Path):
    index = tmp_path / "x.sqlite"
    lock = FileWriterLock(index)
    assert lock.acquire(0)
    assert lock.holder()["pid"] == os.getpid()
    assert not FileWriterLock(index).acquire(0)
    lock.release()
    assert lock.holder() is None
    # a process that dies holding the lock does not leave it stale
    code = (f"from memdir.lock import FileWriterLock; import os; "
            f"l = FileWriterLock(__import__('pathlib').Path({str(index)!r})); l.acquire(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True, env=cli_env(tmp_path))
    assert FileWriterLock(index).acquire(0)


def test_a_stale_search_says_why(make_workspace, keyword_config, tmp_path):
    """A search whose sync ran out of its time, or waited its time for another writer, answered
    "stale": true and not a word of why (no warning in --json or the MCP payload)."""
    ws = make_workspace({"memory/a.md": "- apples\n", "memory/b.md": "- pears\n"})
    cfg = {"memorySearch": {**keyword_config["memorySearch"], "sync": {"searchBudgetMs": 0}}}
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        (ws / "memory" / "a.md").write_text("- apples and quinces\n")
        resp = mem.search("quinces")
        assert resp.stale and [w for w in resp.warnings if w.startswith(
            "the sync before this search ran out of its time (sync.searchBudgetMs = 0 ms) after indexing 0 of")]
        code = ("import sys, pathlib; from memdir.lock import FileWriterLock; "
                f"lock = FileWriterLock(pathlib.Path({str(mem.index_path)!r})); lock.acquire(); "
                "print('held', flush=True); sys.stdin.read()")
        holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=cli_env(tmp_path))
        try:
            assert holder.stdout.readline().strip() == "held"
            resp = mem.search("quinces")
        finally:
            holder.communicate("", timeout=30)
        assert resp.stale and [w for w in resp.warnings if w.startswith(
            f"1 changed file(s) not indexed: another memdir process (pid {holder.pid}) was writing the index")], \
            resp.warnings


def test_sync_reports_lock_timeout(make_workspace, keyword_config, backend):
    ws = make_workspace({"memory/a.md": "a"})
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        lock = mem.store.writer_lock()  # a second writer: another lock object (of this process: said so)
        assert lock.acquire(0)
        try:
            with pytest.raises(LockTimeout, match="another sync in this process is writing"):
                mem.sync(lock_timeout=0.1)
        finally:
            lock.release()


def _big_workspace(make_workspace, n_files: int) -> Path:
    words = "apple banana cherry delta echo foxtrot golf hotel india juliet kilo lima mike".split()
    files = {}
    for i in range(n_files):
        body = "\n".join(f"- note {i}.{j}: " + " ".join(words[(i + j + k) % len(words)] for k in range(12))
                         for j in range(30))
        files[f"memory/2025-{1 + i % 12:02d}-{1 + i % 28:02d}-{i}.md"] = f"# file {i}\n{body}\nmarker{i}\n"
    return make_workspace(files)


def test_rebuild_keeps_serving_concurrent_readers(make_workspace, state_dir, backend):
    ws = _big_workspace(make_workspace, 600)
    base = backend.config({"memorySearch": {"provider": "none"}})
    with Memory(ws, config=base) as mem:
        mem.sync()
    results: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        with Memory(ws, config=base) as rmem:
            while not stop.is_set():
                try:
                    results.append(len(rmem.search("banana cherry", sync=False).results))
                except BaseException as exc:
                    errors.append(exc)

    def searched(n: int) -> None:  # wait for the reader's n-th search (machines under load are slow)
        deadline = time.monotonic() + 60
        while len(results) + len(errors) < n and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.01)

    t = threading.Thread(target=reader)
    t.start()
    try:
        searched(1)  # the reader is searching before the rebuild starts...
        # a chunking change forces the full rebuild while the reader runs
        cfg = ws / "memdir.toml"
        cfg.write_text('[memorySearch]\nprovider = "none"\n[memorySearch.chunking]\ntokens = 100\n' + backend.toml())
        proc = subprocess.run([sys.executable, "-m", "memdir", "index", "--workspace", str(ws), "--json"],
                              env=cli_env(state_dir), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert '"full": true' in proc.stdout
        searched(len(results) + 2)  # ...and goes on searching the rebuilt index after the swap
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors[:3]
    assert len(results) >= 3 and all(n > 0 for n in results)


def test_killed_rebuild_leaves_old_index_searchable(make_workspace, state_dir):
    ws = _big_workspace(make_workspace, 1500)
    env = cli_env(state_dir, MEMDIR_PROVIDER="none", MEMDIR_AGENT="main")
    subprocess.run([sys.executable, "-m", "memdir", "index", "-w", str(ws)], env=env, check=True, timeout=300)
    index = state_dir / "memory" / "main.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "index", "--force", "-w", str(ws)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(index.parent.glob("main.sqlite.tmp-*")):
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(index.parent.glob("main.sqlite.tmp-*")), "the kill should land during the rebuild"
    out = subprocess.run([sys.executable, "-m", "memdir", "search", "marker42", "--no-sync", "--json", "-w", str(ws)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and '"memory/' in out.stdout, out.stderr
    again = subprocess.run([sys.executable, "-m", "memdir", "index", "-w", str(ws), "--json"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert not list(index.parent.glob("main.sqlite.tmp-*")), "leftover temp files are cleaned up"
    with Memory(ws, agent_id="main", config={"memorySearch": {"provider": "none"}}) as mem:
        assert mem.status()["files"] == 1500


@pytest.mark.parametrize("rank,score", [
    (0, 1.0), (1, 0.5), (10, 0.0909), (-1, 0.5), (-0.5, 0.3333), (-4.2, 0.80769), (-100, 0.990099),
    (float("nan"), 0.001), (float("inf"), 0.001), (float("-inf"), 0.001),
])
def test_v26_bm25_rank_to_score(rank, score):
    assert bm25_to_score(rank) == pytest.approx(score, abs=1e-4)


def test_vanished_file_between_listing_and_reading_is_not_an_error(make_workspace, keyword_config, monkeypatch,
                                                                  backend):
    ws = make_workspace({"memory/a.md": "a", "memory/b.md": "b"})
    from memdir import sync as sync_mod

    real = sync_mod.read_memory_file

    def vanish(entry):
        if entry.path == "memory/b.md":
            os.unlink(entry.abs_path)
        return real(entry)

    monkeypatch.setattr(sync_mod, "read_memory_file", vanish)
    with Memory(ws, config=backend.config(keyword_config)) as mem:
        report = mem.sync()
        assert report.indexed == 1


def test_two_threads_of_one_process_exclude_each_other(tmp_path: Path):
    index = tmp_path / "t.sqlite"
    inside = []
    overlaps = []

    def worker() -> None:
        lock = FileWriterLock(index)
        for _ in range(50):
            assert lock.acquire(5)
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            time.sleep(0.0005)
            inside.pop()
            lock.release()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps
    assert FileWriterLock(index).acquire(0)


def test_a_progress_callback_may_be_typed_to_read_the_chunk_counts(make_workspace, keyword_config):
    """The README's ``sync(progress=fn)`` label carries ``chunks_done``/``chunks_planned``, but the
    callback type said the label is a plain str: a host's ``def fn(done: int, total: int, label:
    ProgressLabel)`` reading them failed mypy where it was passed ('incompatible type
    "Callable[[int, int, ProgressLabel], None]"').  Every label is a ProgressLabel."""
    import typing

    import memdir.api
    import memdir.sync
    from memdir.sync import ProgressLabel

    hint = typing.get_type_hints(Memory.sync, globalns={**vars(memdir.sync), **vars(memdir.api)})["progress"]
    callback = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    assert typing.get_args(callback)[0][2] is ProgressLabel
    ws = make_workspace({"MEMORY.md": "- kiwi\n", "memory/2026-01-02.md": "- plum\n"})
    labels: list[object] = []
    with Memory(ws, config=keyword_config) as mem:
        mem.sync(progress=lambda done, total, label: labels.append(label))
    assert labels and all(isinstance(label, ProgressLabel) for label in labels)
