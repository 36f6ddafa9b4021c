"""``AsyncMemory``: the same operations from asyncio, concurrent calls included."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest

from memdir.aio import AsyncMemory
from memdir.errors import MemoryClosed


def test_async_memory_appends_searches_and_reads(make_workspace, keyword_config):
    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n"})

    async def run() -> None:
        async with AsyncMemory(ws, config=keyword_config) as mem:
            paths = await asyncio.gather(*(mem.append_daily(f"note number {i} about otters") for i in range(20)),
                                         mem.search("kafka billing"))
            rel = paths[0]
            assert set(paths[:20]) == {rel}
            assert paths[20].results[0].path == "MEMORY.md"
            text = (await mem.get(rel)).text
            assert sorted(text.splitlines()) == sorted(f"note number {i} about otters" for i in range(20))
            hits = (await mem.search("otters")).results
            assert hits and hits[0].path == rel  # sees the appends made a moment earlier
            payload = (await mem.call_tool("memory_get", {"path": rel, "lines": 1})).payload
            assert payload["path"] == rel and payload["text"].startswith("note number")
            status = await mem.status()
            assert status["files"] == 2 and status["dirty"] is False

    asyncio.run(run())


def test_async_memory_wraps_an_existing_memory(make_workspace, keyword_config):
    from memdir import Memory

    ws = make_workspace({"MEMORY.md": "alpha\n"})
    sync_mem = Memory(ws, config=keyword_config)

    async def run() -> None:
        amem = AsyncMemory(memory=sync_mem)
        assert amem.memory is sync_mem
        report = await amem.sync()
        assert report.indexed == 1
        await amem.aclose()

    asyncio.run(run())


async def _get_held_in_its_thread(mem: AsyncMemory) -> tuple[asyncio.Task, threading.Event]:
    """A ``get`` running in the Memory's thread and held there until the returned event is set."""
    inside, go = threading.Event(), threading.Event()
    real_get = mem.memory.get

    def slow_get(path, **kwargs):
        with mem.memory._in_call():  # held inside the Memory's call, as its own slow work would be
            inside.set()
            go.wait(10)
            return real_get(path, **kwargs)

    mem.memory.get = slow_get  # type: ignore[method-assign]
    busy = asyncio.create_task(mem.get("MEMORY.md"))
    assert await asyncio.to_thread(inside.wait, 10)
    return busy, go


def test_a_call_cancelled_while_it_waits_for_the_one_before_never_runs(make_workspace, keyword_config):
    # Before: ``wait_for(amem.append_daily(...), 0.2)`` timed out while a slow call held the
    # AsyncMemory, yet the append was still made later: the caller's retry wrote it twice.
    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n"})

    async def run() -> None:
        async with AsyncMemory(ws, config=keyword_config) as mem:
            await mem.sync()
            busy, go = await _get_held_in_its_thread(mem)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(mem.append_daily("written once", date="2026-01-12"), 0.2)
            go.set()
            await busy
            await asyncio.sleep(0.5)  # (before: the cancelled append ran about now)
            await mem.append_daily("written once", date="2026-01-12")  # the caller's retry
            assert (ws / "memory" / "2026-01-12.md").read_text().count("written once") == 1

    asyncio.run(run())


def test_an_aclose_that_times_out_still_closes(make_workspace, keyword_config):
    # the cancelled close was skipped like any cancelled call: the Memory stayed open for ever
    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n"})

    async def run() -> AsyncMemory:
        mem = AsyncMemory(ws, config=keyword_config)
        busy, go = await _get_held_in_its_thread(mem)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(mem.aclose(), 0.2)
        go.set()
        assert (await busy).text == "Billing uses Kafka.\n"
        for _ in range(100):
            if mem.memory._closed:
                break
            await asyncio.sleep(0.05)
        return mem

    mem = asyncio.run(run())
    with pytest.raises(MemoryClosed):
        mem.memory.search("Kafka")


def test_calls_waiting_for_their_turn_leave_the_default_executor_free(make_workspace, keyword_config):
    # Before: each call waited for the one before it on a thread lock, inside a worker thread of the
    # loop's default executor: six searches queued behind a long call (a sync embedding its batches)
    # held every thread, and any other asyncio.to_thread (a DNS lookup) of the program waited for it.
    from concurrent.futures import ThreadPoolExecutor

    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n"})

    async def run() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=4))
        async with AsyncMemory(ws, config=keyword_config) as mem:
            await mem.sync()
            busy, go = await _get_held_in_its_thread(mem)
            queued = [asyncio.create_task(mem.search("kafka")) for _ in range(6)]
            await asyncio.sleep(0.1)
            try:
                assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 5) == "free"
            finally:
                go.set()
            await busy
            assert all(response.results for response in await asyncio.gather(*queued))

    asyncio.run(run())


def test_one_async_memory_used_by_two_event_loops_in_turn(make_workspace, keyword_config):
    # (calls queue on a lock of their loop's: a second asyncio.run must not find the first's)
    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n"})
    mem = AsyncMemory(ws, config=keyword_config)

    async def run() -> None:
        assert all(r.results for r in await asyncio.gather(*(mem.search("kafka") for _ in range(4))))

    asyncio.run(run())
    asyncio.run(run())
    asyncio.run(mem.aclose())


_FORK_DURING_A_CALL = """
import asyncio, os, signal, sys, threading
sys.path.insert(0, {src!r})
from pathlib import Path
from memdir.aio import AsyncMemory

mem = AsyncMemory(Path({ws!r}), config={{"memorySearch": {{"provider": "none"}}}})
inside, go = threading.Event(), threading.Event()
real_get = mem.memory.get

def slow_get(path, **kwargs):  # a call of the parent's still running in its worker thread at the fork
    inside.set()
    go.wait(20)
    return real_get(path, **kwargs)

mem.memory.get = slow_get

async def parent():
    busy = asyncio.create_task(mem.get("MEMORY.md"))
    assert await asyncio.to_thread(inside.wait, 20)
    pid = os.fork()
    if pid == 0:
        signal.alarm(15)  # a child that hangs must not outlive the test
        os._exit(0 if await_child() else 1)
    _, status = await asyncio.to_thread(os.waitpid, pid, 0)
    go.set()
    await busy
    await mem.aclose()
    return os.waitstatus_to_exitcode(status)

def await_child():
    async def child():
        return (await mem.search("kafka")).results[0].path == "MEMORY.md"
    return asyncio.run(child())

print("child", asyncio.run(parent()), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_is_not_held_up_by_its_parents_call(make_workspace, state_dir):
    # Before: the thread lock of the call the parent had running at the fork stayed held in the
    # child (its worker thread is not there): the child's first call waited for ever.
    from helpers import SRC

    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n"})
    proc = subprocess.run([sys.executable, "-c", _FORK_DURING_A_CALL.format(src=str(SRC), ws=str(ws))],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MEMDIR_STATE_DIR": str(state_dir)})
    assert proc.returncode == 0 and proc.stdout.strip() == "child 0", (proc.stdout, proc.stderr[-2000:])


def test_each_async_call_is_annotated_with_what_it_returns():
    """A host type-checking its code (py.typed is shipped) against these annotations: call_tool said
    dict[str, Any], so ``(await amem.call_tool(...)).text``, the README's shortcut, failed mypy."""
    import typing

    import memdir.api
    import memdir.sync
    import memdir.tools
    from memdir import Memory

    names = {**vars(memdir.sync), **vars(memdir.api), **vars(memdir.tools)}
    wrapped = {"call_tool": memdir.tools.call_tool,
               **{name: getattr(Memory, name) for name in ("sync", "search", "get", "status", "append_daily")}}
    for name, fn in wrapped.items():
        ours = typing.get_type_hints(getattr(AsyncMemory, name), globalns=names)["return"]
        assert ours == typing.get_type_hints(fn, globalns=names)["return"], name


def test_aclose_stops_a_sync_given_up_on_before_its_next_file(make_workspace, keyword_config):
    """A host that gave up on a sync (``wait_for`` timed out) and closed the AsyncMemory waited for
    the whole sync to end, every file of a first index (400 notes: 55 s), as aclose took its turn
    after it; it stops the sync before its next file, as Memory.close does."""
    import time

    ws = make_workspace({f"memory/2026-01-{i % 28 + 1:02d}-{i}.md": f"- note {i} about otters\n" for i in range(40)})
    seen: list[int] = []

    async def run() -> None:
        mem = AsyncMemory(ws, config=keyword_config)

        def slow_start(done: int, total: int, label: str) -> None:  # the sync, under way, takes its time
            seen.append(done)
            ends = time.monotonic() + 3
            while not mem.memory._closed and time.monotonic() < ends:
                time.sleep(0.01)

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(mem.sync(progress=slow_start), 0.3)
        await mem.aclose()

    asyncio.run(run())
    assert 40 not in seen  # stopped before its first file (before: went on to all 40, then closed)


def test_the_sync_tools_and_session_context_given_an_async_memory_use_its_memory(make_workspace, keyword_config):
    """An async host passing its AsyncMemory to memdir.tools.call_tool (or build_session_context,
    which has no async form) got its methods' coroutines taken for results: memory_append answered
    'appended: true' with a coroutine for its path and wrote nothing, memory_get "'coroutine' object
    has no attribute 'text'", build_session_context an AttributeError."""
    import warnings

    from memdir.prompt import build_session_context
    from memdir.tools import call_tool

    ws = make_workspace({"MEMORY.md": "Billing uses Kafka.\n"})
    amem = AsyncMemory(ws, config=keyword_config)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a coroutine never awaited)
            appended = call_tool(amem, "memory_append", {"text": "Deploys happen on Thursdays."}).payload
            assert appended["appended"] is True and isinstance(appended["path"], str)
            assert "Thursdays" in (ws / appended["path"]).read_text()
            assert call_tool(amem, "memory_get", {"path": "MEMORY.md"}).payload["text"] == "Billing uses Kafka.\n"
            assert call_tool(amem, "memory_search", {"query": "kafka"}).payload["results"][0]["path"] == "MEMORY.md"
            assert "Billing uses Kafka." in build_session_context(amem, session_key="agent:main:main").text
            from memdir.agent import MemoryIndexBackend

            assert MemoryIndexBackend(amem).search("kafka")[0]["path"] == "MEMORY.md"
    finally:
        asyncio.run(amem.aclose())
