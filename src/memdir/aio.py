"""``AsyncMemory``: :class:`memdir.Memory` for asyncio code.

    from memdir.aio import AsyncMemory

    async with AsyncMemory("~/agent") as mem:
        await mem.append_daily("Decided: billing uses Kafka, not RabbitMQ.")
        hits = (await mem.search("which queue for billing?")).results

Every call runs the blocking ``Memory`` method in a worker thread (``asyncio.to_thread``), so
the event loop never stalls on SQLite, file I/O or a local embedding model.  Calls on one
``AsyncMemory`` run one at a time: searches are milliseconds, and
one-at-a-time keeps a long-lived object's index connection and writer lock simple.  A call
waits for its turn in the event loop, not in a worker thread: the loop's default executor
(a handful of threads) stays free for the rest of the program.  For real parallelism open one
``AsyncMemory`` per task; different processes are always safe.  A call cancelled while it
waits for the one before it never runs (but a cancelled ``aclose`` still closes); one already
running completes (a sync stops before its next file once ``aclose`` is called).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from memdir.api import GetResult, Memory, SearchMode
from memdir.search import SearchResponse
from memdir.sync import Progress, SyncReport

if TYPE_CHECKING:  # imported by call_tool when first used
    from memdir.config import LoadedConfig, Settings
    from memdir.tools import ToolResult

T = TypeVar("T")

#: Every AsyncMemory of this process, so a forked child can free what its parent's calls held.
_ASYNC_MEMORIES: weakref.WeakSet[AsyncMemory] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child the calls the parent had running (in its worker threads) never end: their
    thread lock was held for ever, and every call of the child waited on it."""
    for mem in list(_ASYNC_MEMORIES):
        mem._lock = threading.Lock()
        mem._turns = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class AsyncMemory:
    """Async wrapper over one :class:`Memory` (pass one in, or the same arguments as ``Memory``).

    The methods take :class:`Memory`'s parameters by name, spelled out (not ``**kwargs``): a type
    checker then catches ``await amem.search(q, max_result=3)``, which otherwise failed only when run.
    """

    def __init__(self, workspace: str | os.PathLike[str] | None = None, *, memory: Memory | None = None,
                 agent_id: str | None = None,
                 config: str | os.PathLike[str] | Mapping[str, Any] | Settings | LoadedConfig | None = None,
                 state_dir: str | os.PathLike[str] | None = None, provider: Any = None,
                 notice: Callable[[str], None] | None = None):
        given = (workspace, agent_id, config, state_dir, provider, notice)
        if memory is not None and any(arg is not None for arg in given):  # they were dropped without a word
            raise TypeError("AsyncMemory takes a Memory (memory=) or Memory's arguments, not both")
        self.memory = memory if memory is not None else Memory(
            workspace, agent_id=agent_id, config=config, state_dir=state_dir, provider=provider, notice=notice)
        self._lock = threading.Lock()  # a thread lock: the work itself happens in worker threads
        #: The queue of calls of the loop that used this object last (an ``asyncio.Lock`` belongs to
        #: one loop: a second asyncio.run gets its own; loops used at once still exclude each other
        #: by the thread lock).
        self._turns: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        _ASYNC_MEMORIES.add(self)

    def _turn(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        turns = self._turns
        if turns is None or turns[0] is not loop:
            turns = self._turns = (loop, asyncio.Lock())
        return turns[1]

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # Calls queue here, in the loop: queued on the thread lock, each held one of the default
        # executor's few threads (6 on two CPUs), so ten searches behind a long sync held up every
        # other asyncio.to_thread (and DNS lookups) of the program until the sync ended.  The thread
        # lock is still taken: a call cancelled while running goes on in its thread.
        async with self._turn():
            return await self._in_thread(fn, *args, **kwargs)

    async def _in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        cancelled = threading.Event()

        def locked() -> T:
            with self._lock:
                # Cancelled (``wait_for`` timed out) while waiting for the call before it: it must
                # not run later behind the caller's back (a retried append was written twice).
                if cancelled.is_set():
                    raise asyncio.CancelledError
                return fn(*args, **kwargs)

        try:
            return await asyncio.to_thread(locked)
        except asyncio.CancelledError:
            cancelled.set()  # a call already running goes on to its end: the thread cannot be stopped
            raise

    async def sync(self, *, force: bool = False, progress: Progress | None = None, reason: str = "api",
                   deadline: float | None = None, lock_timeout: float | None = None) -> SyncReport:
        """See :meth:`Memory.sync` (``progress`` is called in the worker thread)."""
        return await self._run(self.memory.sync, force=force, progress=progress, reason=reason, deadline=deadline,
                               lock_timeout=lock_timeout)

    async def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
                     explain: bool = False, sync: bool | None = None, mode: SearchMode = "hybrid") -> SearchResponse:
        """See :meth:`Memory.search` (read-your-writes: dirty files are indexed first)."""
        return await self._run(self.memory.search, query, max_results=max_results, min_score=min_score,
                               explain=explain, sync=sync, mode=mode)

    async def get(self, path: str | os.PathLike[str], *, from_line: int | None = None,
                  lines: int | None = None) -> GetResult:
        """See :meth:`Memory.get`."""
        return await self._run(self.memory.get, path, from_line=from_line, lines=lines)

    async def status(self, *, deep: bool = False) -> dict[str, Any]:
        """See :meth:`Memory.status`."""
        return await self._run(self.memory.status, deep=deep)

    async def append_daily(self, text: str, *, date: dt.date | dt.datetime | str | None = None) -> str:
        """See :meth:`Memory.append_daily`."""
        return await self._run(self.memory.append_daily, text, date=date)

    async def call_tool(self, name: str, args: Any = None, *, session_key: str | None = None) -> ToolResult:
        """Run an agent tool (``memory_search``/``memory_get``/``memory_append``); never raises; ``name``,
        ``args`` and ``session_key`` as :func:`memdir.tools.call_tool`'s.  The
        :class:`~memdir.tools.ToolResult` of :func:`memdir.tools.call_tool`, ``.text`` and ``.payload``
        included (annotated a plain dict, so ``(await amem.call_tool(...)).text`` failed mypy)."""
        from memdir.tools import call_tool

        return await self._run(call_tool, self.memory, name, args, session_key=session_key)

    async def aclose(self) -> None:
        """Close the ``Memory`` as :meth:`Memory.close` does: a call in progress finishes (a sync
        stops before its next file), calls after it raise :class:`~memdir.errors.MemoryClosed`.
        Unlike the other calls, one cancelled while it waits still closes: a timed-out ``aclose``
        left the index open and the watcher running.  It does not wait for its turn: behind a sync
        a caller had given up on (``wait_for`` timed out) it waited for the whole sync, a first
        index of 400 notes 55 s, where that sync stops before its next file."""
        await asyncio.to_thread(self.memory.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["AsyncMemory"]
