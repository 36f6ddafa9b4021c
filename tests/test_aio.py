"""``AsyncMemory``: the same operations from asyncio, concurrent calls included."""

from __future__ import annotations

import asyncio

from memdir.aio import AsyncMemory


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
