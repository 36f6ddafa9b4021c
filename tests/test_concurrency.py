"""One ``Memory`` used from several threads, closed under them, interrupted, and carried across fork.

Each test reproduces one bug deterministically (a gate, an injected interrupt at a known point,
or a child process with a timeout) rather than hoping a race shows up.
"""

from __future__ import annotations

import _thread
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from helpers import SRC
from memdir import Memory
from memdir.errors import MemdirError, MemoryClosed
from memdir.lock import FileWriterLock

FILES = {
    "MEMORY.md": "# Decisions\n- Billing uses Kafka, not RabbitMQ.\n",
    "memory/2026-01-10.md": "- Dana's cat Miso had surgery.\n",
}


def test_close_lets_a_search_in_another_thread_finish_then_refuses_calls(make_workspace, keyword_config):
    # Before: close() closed the index under a search still running in another thread, which
    # failed with SQLite's "Cannot operate on a closed database"; and a call after close()
    # silently opened the index again (never closed, its warm-up thread left running).
    mem = Memory(make_workspace(FILES), config=keyword_config)
    mem.sync()
    store = mem.store
    real = store.keyword_search
    inside, go = threading.Event(), threading.Event()

    def gated(terms, limit):
        inside.set()
        go.wait(10)
        return real(terms, limit)

    store.keyword_search = gated  # type: ignore[method-assign]
    out: dict[str, object] = {}

    def search() -> None:
        try:
            out["response"] = mem.search("kafka billing", mode="keyword", sync=False)
        except Exception as exc:
            out["error"] = exc

    searcher = threading.Thread(target=search)
    searcher.start()
    assert inside.wait(10)
    closer = threading.Thread(target=mem.close)
    closer.start()
    closer.join(0.5)  # (before: done by now, the index closed under the search)
    go.set()
    searcher.join(10)
    closer.join(10)
    assert not closer.is_alive() and not searcher.is_alive()
    assert "error" not in out, out.get("error")
    assert out["response"].results[0].path == "MEMORY.md"

    for call in (lambda: mem.search("kafka"), mem.sync, mem.status, lambda: mem.get("MEMORY.md"), mem.watch,
                 lambda: mem.long_term):
        with pytest.raises(MemdirError, match="closed"):
            call()
    assert mem._store is None  # nothing was opened again
    mem.close()  # twice: nothing more to do


def test_a_long_term_memory_kept_from_a_closed_memory_refuses_calls(make_workspace):
    # Before: ``lt = mem.long_term`` kept across ``mem.close()`` went on working: it opened the
    # table again and embedded with the provider the close had closed (a local model loaded again,
    # which nothing closed), where ``mem.long_term`` itself raised MemoryClosed.
    pytest.importorskip("lancedb")
    from ltm_fakes import AxisProvider

    provider = AxisProvider()
    mem = Memory(make_workspace(FILES), provider=provider)
    long_term = mem.long_term
    long_term.store("Billing uses Kafka, not RabbitMQ.")
    mem.close()
    calls = len(provider.calls)
    for call in (lambda: long_term.search("which queue for billing"), lambda: long_term.store("Dana's cat is Miso."),
                 long_term.list):
        with pytest.raises(MemoryClosed):
            call()
    assert len(provider.calls) == calls and not provider.closed  # (the caller's provider: it closes it)


def test_a_search_that_syncs_first_works_up_to_close_and_an_append_after_it_writes_nothing(
        make_workspace, keyword_config):
    ws = make_workspace(FILES)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        (ws / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\n")
        # a call inside a call (the search's sync) is no call made after close
        assert mem.search("ramen", mode="keyword").results[0].path == "memory/2026-01-11.md"
    with pytest.raises(MemoryClosed, match="closed") as closed:
        mem.append_daily("too late")
    assert f"(workspace {mem.workspace}, agent main)" in str(closed.value)  # which of a host's many Memory objects
    assert not any("too late" in p.read_text() for p in ws.rglob("*.md"))


def test_close_stops_a_sync_running_in_another_thread_before_its_next_file(make_workspace, keyword_config):
    # Before: close() closed the index under the sync (which failed with SQLite's "Cannot operate
    # on a closed database" wherever it was); waiting for it instead could take minutes (a first
    # index with embeddings), so the sync now stops before its next file.
    notes = {f"memory/2026-01-{i % 28 + 1:02d}-{i}.md": f"- note {i} about topic{i}\n" for i in range(300)}
    ws = make_workspace(notes)
    mem = Memory(ws, config=keyword_config)
    assert mem.search("topic1", mode="keyword", sync=False).results == []  # opens the index, builds nothing
    started = threading.Event()

    def progress(done: int, total: int, label: str) -> None:
        started.set()
        while not mem._closed:  # the sync has started: hold it here until close() starts
            threading.Event().wait(0.01)

    out: dict[str, object] = {}

    def sync() -> None:
        try:
            out["report"] = mem.sync(progress=progress)
        except Exception as exc:
            out["error"] = exc

    syncer = threading.Thread(target=sync)
    syncer.start()
    assert started.wait(10)
    mem.close()
    syncer.join(10)
    assert isinstance(out.get("error"), MemoryClosed), out
    with Memory(ws, config=keyword_config) as again:  # the index as it was: no half-built rebuild swapped in
        assert again.status()["files"] == 0
        assert again.sync().indexed == 300
        assert again.search("topic299", mode="keyword").results[0].path.endswith("-299.md")


def test_an_interrupt_at_the_end_of_a_sync_leaves_the_writer_lock_free(make_workspace, keyword_config,
                                                                         monkeypatch):
    # Before: a Ctrl-C while the sync cleared its progress file (in its ``finally``) skipped the
    # lock's release: every later sync of the process waited forever ("waiting for another
    # memdir process (pid <its own>)").
    from memdir.progress import ProgressFile

    ws = make_workspace(FILES)
    mem = Memory(ws, config=keyword_config)
    mem.sync()
    real_clear = ProgressFile.clear
    calls = []

    def interrupted_clear(self):
        calls.append(1)
        real_clear(self)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(ProgressFile, "clear", interrupted_clear)
    (ws / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\n")
    with pytest.raises(KeyboardInterrupt):
        mem.sync()
    (ws / "memory" / "2026-01-12.md").write_text("- The espresso machine is broken again.\n")
    report = mem.sync(lock_timeout=2)  # before: LockTimeout
    assert report.indexed >= 1
    assert mem.search("espresso", mode="keyword").results[0].path == "memory/2026-01-12.md"
    mem.close()


def test_an_interrupt_while_waiting_for_the_writer_lock_gives_everything_back(tmp_path):
    # Before: a Ctrl-C while waiting for another process's lock (the wait between flock tries)
    # kept this process's thread lock held and the file open: no thread could ever take it again.
    index = tmp_path / "index.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(SRC)!r})
            from pathlib import Path
            from memdir.lock import FileWriterLock
            lock = FileWriterLock(Path({str(index)!r}))
            assert lock.acquire(0)
            print("held", flush=True)
            sys.stdin.readline()
            lock.release()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = FileWriterLock(index)
        timer = threading.Timer(0.3, _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                lock.acquire(timeout=20)
        finally:
            timer.cancel()
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(10) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    again = FileWriterLock(index)
    assert again.acquire(timeout=2)  # before: False, the thread lock still held
    again.release()


def test_a_transaction_left_open_by_an_interrupted_call_is_rolled_back(make_workspace, keyword_config):
    # Before: a Ctrl-C between a read's SAVEPOINT and its end left the transaction open: the
    # Memory kept reading that old snapshot (never saw another process's writes) and every later
    # write failed with "cannot start a transaction within a transaction".
    ws = make_workspace(FILES)
    mem = Memory(ws, config=keyword_config)
    mem.sync()
    assert mem.search("kafka", mode="keyword", sync=False).results
    mem.store.conn.execute("SAVEPOINT memdir_vectors")  # what the interrupted read left behind
    (ws / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\n")
    with Memory(ws, config=keyword_config) as other:  # another writer (another process, as well)
        other.sync()
    assert [h.path for h in mem.search("ramen", mode="keyword", sync=False).results] == ["memory/2026-01-11.md"]
    (ws / "memory" / "2026-01-12.md").write_text("- The espresso machine is broken again.\n")
    mem.store.conn.execute("SAVEPOINT memdir_kw_search")
    assert mem.sync().indexed == 1
    mem.close()


def _run_script(script: str, ws: Path, state_dir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` (formatted with ``src`` and ``ws``) in a fresh interpreter with its own state folder."""
    env = {**os.environ, "MEMDIR_STATE_DIR": str(state_dir)}
    return subprocess.run([sys.executable, "-c", script.format(src=str(SRC), ws=str(ws))],
                          capture_output=True, text=True, timeout=timeout, env=env)


_FORK_CHILD = """
import os, signal, sys, threading, time
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir import Memory

ws = Path({ws!r})
mem = Memory(ws, config={{"memorySearch": {{"provider": "none"}}}})
mem.sync()
mem.search("kafka", mode="keyword")
parent_conn = mem.store.conn
held, syncing, done = threading.Event(), threading.Event(), threading.Event()

def busy():  # another thread of the parent is inside the index at the fork
    with mem.store.lock:
        held.set()
        done.wait()

def progress(*_):  # and another inside a sync (holding the writer lock) at the fork
    syncing.set()
    done.wait()

threads = [threading.Thread(target=busy), threading.Thread(target=lambda: mem.sync(force=True, progress=progress))]
threads[1].start()
syncing.wait()
threads[0].start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a child that hangs must not outlive the test
    code = 1
    try:
        (ws / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\\n")
        hits = mem.search("kafka", mode="keyword", sync=False).results
        assert hits and mem.store.conn is not parent_conn, "the parent's connection used in the child"
        assert mem.sync(lock_timeout=20).indexed == 1  # waits for the parent's writer, then writes
        started = time.monotonic()
        mem.close()  # the parent's sync is no call of the child's: nothing to wait for
        assert time.monotonic() - started < 3, "close() waited for the parent's call"
        code = 0
    finally:
        os._exit(code)
time.sleep(0.5)
done.set()
for thread in threads:
    thread.join()
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "child failed"
assert mem.search("ramen", mode="keyword", sync=False).results, "the child's write is not seen"
mem.close()
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_opens_its_own_connection_and_locks(make_workspace, state_dir):
    # Before: the child used the parent's SQLite connection (which SQLite forbids across fork),
    # and a lock another parent thread held at the fork stayed held in the child forever: its
    # first search hung.
    proc = _run_script(_FORK_CHILD, make_workspace(FILES), state_dir, timeout=40)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


_FORK_EMBEDDING = """
import hashlib, os, signal, sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir import Memory


class HashProvider:  # a remote-like provider: the query is embedded on the search's thread pool
    id, model, provider_key, max_input_bytes, dims = "hash", "hash-64", "hash-key", 8000, 64

    def _vec(self, text):
        return [(b - 127.5) / 128 for b in hashlib.sha512(text.encode()).digest()]

    def embed_query(self, text):
        return self._vec(text)

    def embed_batch(self, texts):
        return [self._vec(t) for t in texts]

    def close(self):
        pass


mem = Memory(Path({ws!r}), provider=HashProvider())
mem.sync()
assert mem.search("kafka billing").mode == "hybrid"  # the pool exists now, its threads the parent's
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    response = Memory(Path({ws!r}), provider=HashProvider()).search("cat surgery")
    print(response.mode, response.fallback, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_embeds_its_queries(make_workspace, state_dir):
    # Before: the query-embedding pool was the parent's, whose threads a child does not have:
    # every hybrid search in the child waited out its 3 s budget, then fell back to keywords.
    proc = _run_script(_FORK_EMBEDDING, make_workspace(FILES), state_dir, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "hybrid None"


_EXIT_DURING_FIRST_INDEX = """
import sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir import Memory

mem = Memory(Path({ws!r}))  # the local embedding model
mem.selection.provider.embed_query("warm up")
mem.first_index_wait = 0.01  # as a long-running host: the first index is built in the background
response = mem.search("topic7")
assert response.stale, response.warnings
time.sleep(0.5)
print("exiting", flush=True)  # without close(): the index is still being built
"""


def test_exiting_while_a_first_index_is_built_in_the_background(make_workspace, state_dir):
    # Before: the interpreter finished while the background build was inside the model, and the
    # process aborted ("terminate called without an active exception", exit status 134).
    notes = {f"memory/2026-01-{i % 28 + 1:02d}-{i}.md": "\n".join(f"- note {i}.{j} about topic{j}" for j in range(40))
             for i in range(150)}
    ws = make_workspace(notes)
    proc = _run_script(_EXIT_DURING_FIRST_INDEX, ws, state_dir, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "exiting", proc.stderr[-2000:]
    assert "terminate" not in proc.stderr
    with Memory(ws) as mem:  # what was built is consistent, and the rest is built on the next sync
        assert mem.sync().indexed >= 1
        assert mem.search("topic7", mode="keyword").results


_EXIT_DURING_A_SLOW_BATCH = """
import sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
import memdir.api
from memdir import Memory

memdir.api.BOOTSTRAP_WAIT_SECONDS = memdir.api.CLOSE_WAIT_SECONDS = 0.2  # a close gives up at once

class Slow:  # a batch taking longer than a close waits (the local model on a machine loaded 7x over)
    id, model, provider_key, max_input_bytes, dims = "slow", "slow-4", "slow", 1 << 20, 4
    def embed_query(self, text):
        return [1.0, 0.0, 0.0, 0.0]
    def embed_batch(self, texts):
        print("batch started", flush=True)
        time.sleep(1.5)
        print("batch done", flush=True)
        return [[1.0, float(len(t) % 7), 0.0, 0.0] for t in texts]

mem = Memory(Path({ws!r}), provider=Slow())
mem.first_index_wait = 0.01
assert mem.search("topic7", mode="keyword").stale
time.sleep(0.3)
print("exiting", flush=True)
"""


def test_exit_waits_for_a_batch_longer_than_a_close_waits(make_workspace, state_dir):
    # At exit, a close that gave up after its 15 s (a batch embedded on a heavily loaded machine)
    # let the interpreter finish with the build inside the local model: the process aborted
    # ("terminate called without an active exception"), in CI once; exit now waits much longer.
    ws = make_workspace({f"memory/2026-01-0{i}.md": f"- note about topic{i}\n" for i in range(1, 4)})
    proc = _run_script(_EXIT_DURING_A_SLOW_BATCH, ws, state_dir, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    # the exit waited for the batch to end (which on a loaded machine may only start after "exiting")
    assert lines[-1] == "batch done" and "exiting" in lines[:-1], proc.stdout


def test_waiting_for_another_thread_of_this_process_is_no_notice(make_workspace, keyword_config):
    # Before: every sync that waited for another thread's sync (8 threads sharing one Memory, a
    # watcher) logged "waiting for another memdir process (pid <this process>)".
    ws = make_workspace(FILES)
    notices: list[str] = []
    with Memory(ws, config=keyword_config, notice=notices.append) as mem:
        mem.sync()
        taken, release = threading.Event(), threading.Event()

        def writer() -> None:  # another thread's sync, holding the writer lock for a moment
            lock = mem.indexer.lock
            assert lock.acquire(0)
            taken.set()
            release.wait(10)
            lock.release()

        thread = threading.Thread(target=writer)
        thread.start()
        assert taken.wait(10)
        threading.Timer(0.3, release.set).start()
        (ws / "memory" / "2026-01-11.md").write_text("- Picked ramen for lunch.\n")
        assert mem.sync().indexed == 1  # waited for it
        thread.join(10)
    assert not [n for n in notices if "waiting" in n], notices


_FORK_REMOTE = """
import os, signal, sys
sys.path.insert(0, {src!r})
from memdir.embeddings.registry import select_provider
from memdir.testing.provider_server import make_cfg

provider = select_provider(make_cfg("openai", {url!r} + "/v1", model="text-embedding-3-small")).provider
provider.embed_batch(["parent before"])  # its connection stays open for the next request
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    provider.embed_batch(["child"])
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "child failed"
provider.embed_batch(["parent after"])
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_sends_embedding_requests_on_connections_of_its_own(state_dir):
    # Before: the child sent its request on the connection the parent kept alive, so the two
    # processes' requests and answers crossed on one socket (one read the other's vector, or half
    # of it: "malformed JSON in 200 response", or waited for an answer the other had read).
    from memdir.testing.provider_server import ProviderServer

    with ProviderServer(keep_alive=True) as server:
        script = _FORK_REMOTE.format(src=str(SRC), url=server.url)
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "MEMDIR_STATE_DIR": str(state_dir)})
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
        peers = {r.json["input"][0]: r.peer for r in server.requests}
    assert peers["parent after"] == peers["parent before"], "the parent's connection was not kept"
    assert peers["child"] != peers["parent before"], "the child used the parent's connection"


_FORK_MODEL_RUN = """
import os, signal, sys, threading
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir import Memory

mem = Memory(Path({ws!r}))  # the local embedding model
mem.sync()
provider = mem.selection.provider
held, done = threading.Event(), threading.Event()

def run():  # another thread of the parent inside a model run at the fork (a watcher's sync)
    with provider._turns.turn():
        held.set()
        done.wait()

def load():  # and one loading or closing the model
    with provider._lock:
        held.wait()
        done.wait()

threads = [threading.Thread(target=run), threading.Thread(target=load)]
for thread in threads:
    thread.start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(15)  # a child that hangs must not outlive the test
    response = mem.search("cat surgery")
    print(response.mode, [hit.path for hit in response.results][:1], flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
done.set()
for thread in threads:
    thread.join()
mem.close()
print("child", os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_runs_the_model_while_the_parent_was_running_it(make_workspace, state_dir):
    # Before: the turn (and the load lock) another thread of the parent held at the fork was held
    # for ever in the child: its first search waited on it and never returned (killed by its alarm, status -14).
    proc = _run_script(_FORK_MODEL_RUN, make_workspace(FILES), state_dir, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["hybrid ['memory/2026-01-10.md']", "child 0"], proc.stdout


_FORK_LTM_CACHE = """
import os, signal, sys, threading
sys.path.insert(0, {src!r})
from pathlib import Path
import numpy as np
from memdir.ltm.embedder import EmbeddingCache

cache = EmbeddingCache(Path({ws!r}) / "embedding-cache.sqlite")
key = ("fake", "axis-1", "key")
cache.put(key, {{"before": np.ones(4, dtype=np.float32)}})
parent_conn = cache._conn
held, done = threading.Event(), threading.Event()

def writing():  # another thread of the parent inside a cache write at the fork
    with cache._lock:
        held.set()
        done.wait()

thread = threading.Thread(target=writing)
thread.start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(15)  # a child that hangs must not outlive the test
    cache.put(key, {{"child": np.full(4, 2, dtype=np.float32)}})
    found = cache.get(key, ["before", "child"])
    ok = sorted(found) == ["before", "child"] and cache._conn is not parent_conn
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
done.set()
thread.join()
print("child", os.waitstatus_to_exitcode(status), sorted(cache.get(key, ["before", "child"])))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_opens_its_own_long_term_embedding_cache(tmp_path, state_dir):
    # Before: the child used the parent's SQLite connection to the long-term memory's embedding
    # cache (SQLite forbids it across fork), and a write of another parent thread under way at the
    # fork held the cache's lock for ever: the child's first store or search never returned.
    proc = _run_script(_FORK_LTM_CACHE, tmp_path, state_dir, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "child 0 ['before', 'child']", proc.stdout


_FORK_DURING_FIRST_INDEX = """
import hashlib, os, signal, sys, threading
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir import Memory

embedding, release = threading.Event(), threading.Event()


class HeldProvider:  # the first index's embedding goes on until the test lets it finish
    id, model, provider_key, max_input_bytes, dims = "hash", "hash-64", "hash-key", 8000, 64

    def embed_query(self, text):
        return [(b - 127.5) / 128 for b in hashlib.sha512(text.encode()).digest()]

    def embed_batch(self, texts):
        embedding.set()
        release.wait(20)
        return [self.embed_query(t) for t in texts]

    def close(self):
        pass


mem = Memory(Path({ws!r}), provider=HeldProvider())
mem.first_index_wait = 0.01  # a long-running host: the first index is built in the background
assert mem.search("cat surgery").stale
assert embedding.wait(20)
pid = os.fork()
if pid == 0:
    signal.alarm(15)
    response = mem.search("cat surgery")
    building = [w for w in response.warnings if "being built" in w]
    print(len(response.results), response.stale, len(building), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
release.set()
mem.first_index_wait = 20
print(mem.search("cat surgery").results[0].path, flush=True)
mem.close()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_says_the_first_index_is_being_built(make_workspace, state_dir):
    # Before: the child took its parent's background build for one that had ended (its thread is
    # not in the child) and searched the empty index at once: no results, not stale, not a word of
    # the build, which an agent reads as "nothing about it in memory".
    proc = _run_script(_FORK_DURING_FIRST_INDEX, make_workspace(FILES), state_dir, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["0 True 1", "memory/2026-01-10.md"], proc.stdout


_FORK_LOCKS = """
import os, sys
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir import Memory

mem = Memory(Path({ws!r}), config={{"memorySearch": {{"provider": "none"}}}})
mem.sync()
assert mem.search("kafka", mode="keyword", sync=False).results
index = mem.store.path
inode = os.stat(index).st_ino


def held(pid):  # POSIX locks this process holds on the index file itself
    return [line for line in open("/proc/locks")
            if line.split()[4] == str(pid) and line.split()[5].rsplit(":", 1)[-1] == str(inode)]


pid = os.fork()
if pid == 0:
    assert mem.search("cat surgery", mode="keyword", sync=False).results
    print("child", len(held(os.getpid())), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", len(held(os.getpid())), flush=True)
mem.close()
"""


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.exists("/proc/locks"), reason="needs fork() and /proc/locks")
def test_a_forked_child_holds_its_own_sqlite_locks(make_workspace, state_dir):
    """SQLite keeps its lock counts per process, per file: a child forked from a process with the
    index open inherited the parent's counts with the connection, so its own connection took no
    shared lock on the index at all (the kernel's locks are not inherited), and with the parent
    gone another process could checkpoint and delete the WAL under it.  A connection no thread
    was using at the fork is closed in the child, whose own then locks as any process's does."""
    proc = _run_script(_FORK_LOCKS, make_workspace(FILES), state_dir, timeout=40)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = dict(line.split() for line in proc.stdout.split("\n") if line)
    assert int(counts["parent"]) >= 1, proc.stdout  # (an open WAL connection holds a shared lock)
    assert int(counts["child"]) >= 1, proc.stdout


def test_a_writer_of_this_process_is_not_called_another_process(make_workspace, keyword_config):
    """A host with two Memory objects open on one index (a server opening one a request) whose
    sync gave up on the writer lock was told 'another process is writing …', and looked for one:
    the writer is a sync of its own process, and the error says so."""
    from memdir.lock import LockTimeout

    ws = make_workspace({"MEMORY.md": "- kiwi\n", "memory/2026-01-02.md": "- plum\n"})
    holding, release = threading.Event(), threading.Event()

    def hold(done: int, total: int, label: str) -> None:  # called while the sync holds the lock
        holding.set()
        release.wait(30)

    with Memory(ws, config=keyword_config) as first, Memory(ws, config=keyword_config) as second:
        writer = threading.Thread(target=lambda: first.sync(progress=hold))
        writer.start()
        try:
            assert holding.wait(30)
            for wait in (0, 0.1):
                with pytest.raises(LockTimeout, match="another sync in this process is writing") as refused:
                    second.sync(lock_timeout=wait)
                assert "another process" not in str(refused.value)
        finally:
            release.set()
            writer.join(30)
        # a writer in another process is still called that
        holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from memdir.lock import FileWriterLock
            lock = FileWriterLock({str(second.index_path)!r})
            assert lock.acquire(0)
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            with pytest.raises(LockTimeout, match="another process is writing"):
                second.sync(lock_timeout=0.1)
        finally:
            holder.kill()
            holder.wait()
