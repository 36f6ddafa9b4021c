"""``AsyncMemory``: the same operations from asyncio, concurrent calls included."""

from __future__ import annotations

import asyncio
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
