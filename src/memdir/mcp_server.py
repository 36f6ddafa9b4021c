"""``memdir mcp``: the memory tools over the Model Context Protocol (official SDK, FastMCP 1.x).

Tools: ``memory_search``, ``memory_get``, ``memory_append`` — the same schemas, descriptions and
payloads as :mod:`memdir.tools` (each result is the payload as JSON text, plus the payload as
structured content) — and, when ``longTermMemory.enabled`` is set, ``memory_recall``,
``memory_store`` and ``memory_forget`` (:mod:`memdir.ltm.tools`: R§14's text, plus ``details``
as structured content).  Transports:

* ``stdio`` (default): what Claude Desktop, Claude Code, Cursor and most MCP hosts launch;
* streamable HTTP (``--transport http``): bound to a loopback address only, with Host and
  Origin checking (the SDK's ``TransportSecuritySettings``) so a web page cannot reach the
  server through DNS rebinding: a request whose Origin is not loopback is refused (403), one
  whose Host is not loopback is refused (421); requests without an Origin (non-browser clients)
  pass.  Plain JSON answers, no SSE; once a session is under way its tool calls skip the SDK's
  internal hops (:class:`ToolCallFastPath`) and get the very bytes the SDK would send.

One long-lived :class:`memdir.Memory` serves every call.  Each call runs in its own worker
thread with a deadline (:data:`DEFAULT_CALL_TIMEOUT`), so one call that stalls can never hold up
the next: the stalled one answers with an error when its time is up and the server keeps
serving (``Memory`` serialises its own index access).  Read-your-writes holds: every search
first indexes files whose size or mtime changed (an append always changes the size), and says
``stale: true`` when it could not.  With ``sync.watch`` on, a watcher keeps the index in step
with edits made by hand too; while the first index is being built, searches answer at once
with what is built so far and say how far along it is.

This module imports ``mcp``; nothing else in memdir does, so ``memdir search`` stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import ipaddress
import json
import logging
import math
import os
import queue
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import anyio
from mcp.server.fastmcp import FastMCP
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import McpError
from mcp.shared.version import SUPPORTED_PROTOCOL_VERSIONS
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    ServerResult,
    TextContent,
    Tool,
    ToolAnnotations,
)
from pydantic_core import to_json
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from memdir.errors import MemdirError, say
from memdir.mcp_stdio import NOT_A_MESSAGE, without_lone_surrogates
from memdir.mcp_stdio import refusal as message_refusal
from memdir.prompt import memory_recall_section
from memdir.tools import (
    LTM_TOOL_NAMES,
    TOOL_NAMES,
    ToolResult,
    call_tool,
    chosen_tools,
    is_error_payload,
    search_unavailable_payload,
    tool_result,
    tool_spec,
)

DEFAULT_HTTP_PORT = 8765
#: The MCP spec's error code for resources/read of a resource the server does not have.
RESOURCE_NOT_FOUND = -32002
#: Seconds a tool call may take before it is answered with an error (its thread is abandoned).
DEFAULT_CALL_TIMEOUT = 120.0
#: Seconds a search waits for a first index it started before answering "being built".
FIRST_INDEX_WAIT = 2.0
#: Seconds tool calls in flight get to finish once the HTTP server is asked to stop (SIGTERM,
#: Ctrl-C) before they are answered as not finished: a call that is only slow still reports what
#: it did (an append the client is told failed may be sent again), a stalled one cannot hold it up.
CALL_GRACE = 2.0
#: Seconds the HTTP server gives any other request in flight once asked to stop before it cancels
#: it: a client that never finishes sending its request must not hold it up either.
SHUTDOWN_GRACE = 5.0
_TITLES = {"memory_search": "Search memory", "memory_get": "Read memory lines", "memory_append": "Remember a note",
           "memory_recall": "Recall long-term memories", "memory_store": "Store a long-term memory",
           "memory_forget": "Forget a long-term memory"}


#: Seconds between the HTTP server's looks at its clock (the Date header it sends) and at a stop
#: asked for by other means than a signal (a signal wakes it at once).
SERVER_TICK = 1.0


def _quiet_server(config: Any) -> Any:
    """A uvicorn server whose main loop sleeps :data:`SERVER_TICK` at a time, woken by a stop.

    Why: uvicorn's main loop wakes every 0.1 s to look at ``should_exit`` (and every tenth time
    to refresh the Date header): 10 wake-ups a second for as long as ``memdir mcp --transport
    http`` ran, with no client.  The Date header is still refreshed every second."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        _woken: asyncio.Event | None = None

        async def main_loop(self) -> None:
            self._woken = woken = asyncio.Event()
            loop, counter = asyncio.get_running_loop(), 0
            while not await self.on_tick(counter):
                counter = (counter + 10) % 864000  # (a multiple of 10: the Date header refreshed each tick)
                timer = loop.call_later(SERVER_TICK, woken.set)
                await woken.wait()
                timer.cancel()
                woken.clear()

        def wake(self) -> None:
            """Look at ``should_exit`` now (in the event loop's thread)."""
            if self._woken is not None:
                self._woken.set()

    return QuietServer(config)


def default_tools(memory: Any) -> tuple[str, ...]:
    """The core tools, plus the long-term memory ones when ``longTermMemory.enabled`` opts in."""
    ltm = getattr(getattr(memory, "settings", None), "long_term_memory", None)
    return (*TOOL_NAMES, *LTM_TOOL_NAMES) if ltm is not None and ltm.enabled else TOOL_NAMES


class HostNotAllowed(ValueError):
    """``--host`` is not a loopback address: memdir never serves memory to the network."""


class PortUnavailable(MemdirError):
    """The HTTP server cannot listen on its port (another server has it, or it is not allowed)."""


def check_loopback_host(host: str) -> str:
    """``host`` if it is loopback (``127.0.0.1``, ``::1``, ``localhost``, any 127/8), else raise."""
    name = (host or "").strip()
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if bare.lower() == "localhost":
        return "localhost"
    try:
        if ipaddress.ip_address(bare).is_loopback:
            return bare
    except ValueError:
        pass
    raise HostNotAllowed(
        f"refusing to listen on {host!r}: memdir's HTTP transport binds to loopback only "
        "(127.0.0.1, ::1 or localhost), because memory files are private; use stdio, or put an "
        "authenticating proxy in front if you need remote access"
    )


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, bound before anything else starts.

    Why: uvicorn binds only once the server runs, after the banner and the start-up index, and
    reports a port in use as a log line and exit code 3; here it is one clear error.  The socket
    says it is TCP (``IPPROTO_TCP``, as asyncio's own): asyncio turns Nagle's algorithm off only
    on connections of such sockets, and with it on an answer written in two parts waited for the
    client's delayed ACK (40 ms a call).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        return sock
    except OSError as exc:
        sock.close()
        shown = f"[{host}]" if ":" in host else host
        why = ("the port is already in use (another memdir mcp?); stop that server or choose another --port"
               if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc))
        raise PortUnavailable(f"cannot listen on http://{shown}:{port}: {why}") from None


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """The sockets ``host:port`` is served on: both loopback addresses for ``localhost``.

    Why: ``localhost`` resolves to ``::1`` first on macOS and many Linux systems, and clients that
    do not fall back to IPv4 (Node before 20, whose ``fetch`` many MCP clients use) could not reach
    a server bound to ``127.0.0.1`` alone.  ``::1`` is skipped where this machine has no IPv6; a
    ``::1`` port another program holds is an error, as it would answer those clients.
    """
    if host.lower() != "localhost":
        return [listen(host, port)]
    sockets = [listen("127.0.0.1", port)]
    try:
        sockets.append(listen("::1", port))
    except (PortUnavailable, OSError) as exc:  # (OSError: no IPv6 socket can be made at all)
        if not _no_ipv6():
            sockets[0].close()
            raise PortUnavailable(str(exc).replace("http://[::1]", "http://localhost (::1)")) from None
    return sockets


def _no_ipv6() -> bool:
    """Whether this machine cannot bind the IPv6 loopback address at all (no IPv6 stack)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return True
    return False


def transport_security(host: str) -> TransportSecuritySettings:
    """Host/Origin allow-lists: loopback names on any port (and no port), http and https."""
    names = {"127.0.0.1", "localhost", "[::1]"}
    bare = check_loopback_host(host)
    names.add(f"[{bare}]" if ":" in bare else bare)
    hosts = sorted({*names, *(f"{n}:*" for n in names)})
    origins = sorted({f"{scheme}://{n}{suffix}" for scheme in ("http", "https") for n in names
                      for suffix in ("", ":*")})
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


class CallThreads:
    """Worker threads for tool calls that never keep the process alive (daemon threads, reused).

    Why not anyio's: its worker threads are joined when the interpreter exits, so a call stuck
    for good (say on a lock another process never releases) kept ``memdir mcp`` from exiting
    after Ctrl-C or the end of its stdio input, however long ago the call had been abandoned.
    """

    #: Seconds an idle thread waits for another call before it ends.
    IDLE_SECONDS = 10.0

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[Any]] = []
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread; cancelling the caller abandons the thread's work."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), name="memdir-mcp-call", daemon=True).start()
        inbox.put((loop, future, contextvars.copy_context(), fn, args))
        return await future

    def _work(self, inbox: queue.SimpleQueue[Any]) -> None:
        while True:
            try:
                loop, future, context, fn, args = inbox.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # else a call was handed to this thread just now
                        self._idle.remove(inbox)
                        return
                continue
            if not future.cancelled():  # (a call cancelled before it started is not run, as anyio's)
                try:
                    outcome: tuple[Any, BaseException | None] = (context.run(fn, *args), None)
                except BaseException as exc:
                    outcome = (None, exc)
                with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits for it
                    loop.call_soon_threadsafe(_settle, future, *outcome)
                del outcome
            del loop, future, context, fn, args  # an idle thread holds no call's arguments or answer
            with self._lock:
                self._idle.append(inbox)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled: the call was abandoned
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class MemdirMCP(FastMCP):  # type: ignore[type-arg]
    """FastMCP whose tools are memdir's, with memdir's own JSON schemas and payloads.

    ``list_tools``/``call_tool`` are overridden (rather than registering Python functions)
    so the advertised schemas are exactly those in :mod:`memdir.tools` — including the
    ``from`` parameter, which no Python function can take — and so arguments in camelCase
    or snake_case reach the same lenient parsing the other surfaces use.
    """

    def __init__(self, memory: Any, *, session_key: str | None = None,
                 tools: Iterable[str] | str | None = None, call_timeout: float = DEFAULT_CALL_TIMEOUT, **kwargs: Any):
        self.memory = memory
        self.session_key = session_key
        known = (*TOOL_NAMES, *LTM_TOOL_NAMES)
        self.tool_names = [t for t in (default_tools(memory) if tools is None else chosen_tools(tools)) if t in known]
        self.call_timeout = call_timeout
        # Core tool calls run concurrently (Memory serialises its own index access); the long-term
        # memory tools (LanceDB) one at a time, and after its warm-up load.
        self._ltm_lock = threading.Lock()
        # Stalled calls keep their (abandoned) thread: give calls their own threads so they can never
        # starve the SDK's, and keep at most 64 running that are not abandoned.
        self._limiter = anyio.CapacityLimiter(64)
        self._threads = CallThreads()
        self._stoppable: set[anyio.CancelScope] = set()
        # Set when the session has ended: the Memory is closed under the start-up sync, which is
        # then cut short on purpose (the next start indexes again), not a failure to report.
        self.stopping = threading.Event()
        #: The ``tools/call`` fast path in front of the streamable-HTTP app, once that app is built.
        self.fast_path: ToolCallFastPath | None = None
        #: The sockets :func:`serve` bound for the HTTP transport (empty: uvicorn binds its own).
        self.http_sockets: list[socket.socket] = []
        settings = getattr(memory, "settings", None)
        citations = getattr(getattr(settings, "memory", None), "citations", "auto")
        sources = getattr(getattr(settings, "memory_search", None), "sources", ())
        kwargs.setdefault("instructions", memory_recall_section(self.tool_names, citations,
                                                                sessions="sessions" in sources).strip())
        kwargs.setdefault("log_level", "WARNING")
        super().__init__("memdir", **kwargs)
        from memdir import __version__

        if hasattr(self._mcp_server, "version"):
            self._mcp_server.version = __version__  # serverInfo.version: memdir's, not the SDK's

    async def list_tools(self) -> list[Tool]:
        out = []
        for name in self.tool_names:
            spec = tool_spec(name)
            out.append(Tool(
                name=spec.name,
                title=_TITLES.get(name),
                description=spec.description,
                inputSchema=spec.parameters,
                annotations=ToolAnnotations(
                    title=_TITLES.get(name), readOnlyHint=spec.read_only, destructiveHint=False,
                    idempotentHint=spec.read_only, openWorldHint=False,
                ),
            ))
        return out

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """memdir serves no prompts: ``-32602``, the spec's code for an unknown prompt (the SDK
        answered code 0 and logged a traceback on stderr)."""
        raise McpError(ErrorData(code=INVALID_PARAMS, message=f"Unknown prompt: {name} (memdir serves no prompts)"))

    async def read_resource(self, uri: Any) -> Any:
        """memdir serves no resources: ``-32002``, the spec's "Resource not found" (was code 0)."""
        raise McpError(ErrorData(code=RESOURCE_NOT_FOUND, message=f"Resource not found: {uri} (memdir serves no "
                                                                  "resources)", data={"uri": str(uri)}))

    def start_warmup(self) -> threading.Thread | None:
        """Index in the background at startup (``sync.onSessionStart``), so the first search is fast.

        Tool calls do not wait for it: a search during a first build answers with what is built
        so far and says how far along it is.  A failure is reported on stderr and the first
        search simply tries again.
        """
        settings = getattr(self.memory, "settings", None)
        if settings is None or not settings.memory_search.sync.on_session_start:
            return None

        def warm() -> None:
            try:
                self.memory.sync(reason="session-start")
            except Exception as exc:
                if self.stopping.is_set():
                    return
                say(f"memdir: background index at startup failed: {exc}")
            try:  # a server searches again and again: read the common words' postings ahead
                start = getattr(self.memory.store, "start_warmup", None)
                if start is not None and not self.stopping.is_set():
                    start()
            except Exception:
                pass  # only ever a help: searches read what they need
            if any(t in LTM_TOOL_NAMES for t in self.tool_names) and not self.stopping.is_set():
                with self._ltm_lock:
                    try:
                        _ = self.memory.long_term  # loads LanceDB (seconds) before the first call needs it
                    except Exception as exc:
                        # a client gone before the index was warm: the Memory closed under this
                        # thread, and every such short session ended 'long-term memory unavailable:
                        # this Memory is closed' on stderr, which nothing was
                        if not self.stopping.is_set():
                            say(f"memdir: long-term memory unavailable: {exc}")

        thread = threading.Thread(target=warm, name="memdir-warmup", daemon=True)
        thread.start()
        return thread

    def start_watching(self) -> Any:
        """With ``sync.watch`` on, sync edits made outside the tools (by hand, by other agents);
        with ``sync.intervalMinutes``, sync on that schedule too."""
        if not hasattr(self.memory, "start_live_sync"):
            return None

        def report(event: dict[str, Any]) -> None:
            if event.get("event") == "error":
                say(f"memdir: watch: {event.get('error')}")

        try:
            return self.memory.start_live_sync(on_event=report)
        except Exception as exc:  # e.g. watchfiles missing: searches still sync what changed
            say(f"memdir: not watching files ({exc}); searches still index changed files first")
            return None

    def _call_sync(self, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        if name in LTM_TOOL_NAMES:
            with self._ltm_lock:
                return call_tool(self.memory, name, arguments or {}, session_key=self.session_key)
        return call_tool(self.memory, name, arguments or {}, session_key=self.session_key)

    async def run_stdio_async(self) -> None:
        """Over stdio with :mod:`memdir.mcp_stdio`, which answers every line it cannot take."""
        from memdir.mcp_stdio import stdio_transport

        try:
            async with stdio_transport(drain_seconds=self.call_timeout + 30) as (read_stream, write_stream):
                await self._mcp_server.run(read_stream, write_stream, self._mcp_server.create_initialization_options())
        except BaseExceptionGroup as group:
            # The client stopped reading (it closed our stdout): memdir exits quietly with 141 as
            # every command does when its reader goes; it said "memdir: unhandled errors in a
            # TaskGroup (1 sub-exception)" and exited 1.
            if _only_broken_pipes(group):
                raise BrokenPipeError("the MCP client stopped reading") from None
            failed = _stdout_failure(group)
            if failed is not None:  # (> /dev/full) said as every command says it, not "unhandled errors in a TaskGroup"
                raise failed from None
            raise

    async def run_streamable_http_async(self) -> None:
        """As the SDK's, on :attr:`http_sockets`, and stopping promptly when asked.

        Why: uvicorn otherwise waits for every request to finish before it stops, so SIGTERM
        with a call stalled in flight took until the call's deadline, and a client that sent
        half a request held it forever.  Now calls still in flight after :data:`CALL_GRACE` are
        answered as not finished (:meth:`stop_calls`), and any other request is cut off after
        :data:`SHUTDOWN_GRACE`.
        """
        import uvicorn

        # log_config=None: uvicorn's lines go through the process's logging (memdir's format, its
        # masking, -q) instead of handlers of its own ('WARNING:  Invalid HTTP request received.'
        # printed under -q, a line a hostile request).
        config = uvicorn.Config(self.streamable_http_app(), host=self.settings.host, port=self.settings.port,
                                log_level=self.settings.log_level.lower(), log_config=None,
                                timeout_graceful_shutdown=SHUTDOWN_GRACE)
        server = _quiet_server(config)
        loop, stop_serving = asyncio.get_running_loop(), server.handle_exit

        def handle_exit(sig: int, frame: Any) -> None:  # SIGINT/SIGTERM (a signal handler: hand over to the loop)
            stop_serving(sig, frame)
            loop.call_soon_threadsafe(server.wake)
            loop.call_soon_threadsafe(loop.call_later, CALL_GRACE, self.stop_calls)

        server.handle_exit = handle_exit  # type: ignore[method-assign]
        await server.serve(sockets=self.http_sockets or None)

    def streamable_http_app(self) -> Any:
        """The SDK's app behind :class:`RequestGuard`, and :class:`ToolCallFastPath` (unless
        ``MEMDIR_MCP_FAST_PATH=0``)."""
        app = RequestGuard(super().streamable_http_app(), self)
        if (os.environ.get("MEMDIR_MCP_FAST_PATH", "1") == "0" or self.settings.stateless_http
                or not self.settings.json_response or self.settings.auth is not None):
            return app
        self.fast_path = ToolCallFastPath(app, self)
        return self.fast_path

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if self.fast_path is not None:
            self.fast_path.mark_warm(self)
        if name not in self.tool_names:
            # The SDK turns this into an isError result naming the problem.
            raise ValueError(f"unknown tool: {name!r} (memdir provides {', '.join(self.tool_names)})")
        result = await self.run_tool(name, arguments)
        # The text is the payload as JSON for the core tools, and R§14's text for the long-term ones.
        content = [TextContent(type="text", text=result.text)]
        payload = result.payload
        if is_error_payload(payload):
            # OpenClaw's payload text, flagged as a failure so a host can tell it from a result
            return CallToolResult(content=content, structuredContent=payload, isError=True)
        return content, payload

    async def run_tool(self, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        """One of memdir's tools in a worker thread, within the call deadline (a timeout is a payload,
        and so is a call cut short because the server is stopping: :meth:`stop_calls`)."""
        try:
            with anyio.fail_after(self.call_timeout), anyio.CancelScope() as stop:
                self._stoppable.add(stop)
                try:
                    async with self._limiter:
                        return await self._threads.run(self._call_sync, name, arguments)  # type: ignore[no-any-return]
                finally:
                    self._stoppable.discard(stop)
        except TimeoutError:
            return tool_result(timeout_payload(name, arguments, self.call_timeout))
        return tool_result(failure_payload(name, arguments, f"{name} was not finished: the memdir MCP server is "
                                                            "stopping"))

    def stop_calls(self) -> None:
        """Answer every tool call in flight now (as not finished): the server has been asked to stop."""
        for scope in list(self._stoppable):
            scope.cancel()


#: What :class:`ToolCallFastPath` needs of the SDK's per-session transport; without any of it
#: (another SDK version) every request simply goes through the SDK.
_TRANSPORT_ATTRS = ("mcp_session_id", "is_terminated", "idle_scope", "_idle_timeout", "_requests_in_flight")
_JSON = "application/json"


class ToolCallFastPath:
    """ASGI front of the SDK's streamable-HTTP app that answers ``tools/call`` on a warm session itself.

    Why: through the SDK a tool call hops across four tasks over anyio memory streams (HTTP
    handler, session reader, server loop, per-request handler, message router and back) and is
    validated as pydantic models on the way in; with the thread hop for the tool that was ~2.5 ms
    per call over loopback against ~1 ms for a bare Starlette endpoint.  Here a call goes straight
    from the HTTP request to :meth:`MemdirMCP.call_tool` (same worker thread and deadline), and
    its answer is built and dumped with the SDK's own models and calls, so the bytes are the ones
    the SDK would send.

    Only the hot case takes this path: a POST to the MCP endpoint on a session the SDK has already
    served a ``tools/call`` on (so it is initialized and its transport is what this relies on),
    whose Host/Origin pass the same :class:`TransportSecurityMiddleware` and whose Accept,
    Content-Type and protocol-version headers pass the SDK's checks, carrying one plain request
    ``{"jsonrpc", "id", "method": "tools/call", "params": {"name", "arguments"}}`` for one of
    memdir's tools.  Anything else (other methods, batches, unknown tools, ``_meta``, bad headers,
    an unknown or ended session) goes on with its body replayed, to :class:`RequestGuard` and the
    SDK, which answer as always.  A lone surrogate in a call is replaced by U+FFFD, as there.
    A ``notifications/cancelled`` for a call in flight here cancels it with the SDK's answer
    ("Request cancelled").  ``MEMDIR_MCP_FAST_PATH=0`` turns the fast path off.
    """

    def __init__(self, app: Any, server: MemdirMCP):
        self.app, self.server = app, server
        self.path = server.settings.streamable_http_path
        self.security = TransportSecurityMiddleware(server.settings.transport_security)
        self.max_body = int(getattr(server.settings, "max_request_body_size", 4 * 1024 * 1024))
        self.warm: weakref.WeakSet[Any] = weakref.WeakSet()
        self.in_flight: dict[tuple[int, Any], anyio.CancelScope] = {}
        #: Calls answered here (tests read it to know the fast path was taken).
        self.calls = 0

    def mark_warm(self, server: MemdirMCP) -> None:
        """Called from a ``tools/call`` the SDK is serving: its session may take the fast path."""
        try:
            request = server._mcp_server.request_context.request
        except LookupError:
            return
        if not isinstance(request, Request):
            return
        manager = server._session_manager
        transport = getattr(manager, "_server_instances", {}).get(request.headers.get("mcp-session-id"))
        if transport is not None and all(hasattr(transport, a) for a in _TRANSPORT_ATTRS):
            self.warm.add(transport)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        transport = getattr(self.server._session_manager, "_server_instances", {}).get(headers.get("mcp-session-id"))
        if transport is None or transport not in self.warm:
            return await self.app(scope, receive, send)
        received, body = await _read_body(receive, self.max_body)
        message = _json(body)
        if body is not None and _maybe_lone_surrogates(body):
            message = without_lone_surrogates(message)
        call = self._plain_call(message)
        passed = (message is not None and await _headers_pass(scope, headers, self.security)
                  and _session_open(transport))
        if call is None or not passed:
            if passed:
                self._cancel_if_asked(transport, message)
            return await self.app(scope, _replay(received, receive), send)
        with _holding_session(transport):
            answer = await self._answer(transport, *call)
        response = Response(answer, status_code=200,
                            headers={"Content-Type": _JSON, "mcp-session-id": transport.mcp_session_id})
        await response(scope, receive, send)

    def _plain_call(self, message: Any) -> tuple[Any, str, dict[str, Any]] | None:
        if not (isinstance(message, dict) and message.keys() <= {"jsonrpc", "id", "method", "params"}
                and message.get("jsonrpc") == "2.0" and message.get("method") == "tools/call"
                and type(message.get("id")) in (int, str)):
            return None
        params = message.get("params")
        if not isinstance(params, dict) or not params.keys() <= {"name", "arguments"}:
            return None
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or name not in self.server.tool_names:
            return None
        if arguments is not None and not isinstance(arguments, dict):
            return None
        return message["id"], name, arguments or {}

    def _cancel_if_asked(self, transport: Any, message: Any) -> None:
        """A ``notifications/cancelled`` for a call answered here: cancel it, as the SDK would.

        The notification itself still goes to the SDK, which answers it (202) as always."""
        if not (isinstance(message, dict) and message.get("jsonrpc") == "2.0"
                and message.get("method") == "notifications/cancelled" and isinstance(message.get("params"), dict)):
            return
        request_id = message["params"].get("requestId")
        if type(request_id) in (int, str):
            scope = self.in_flight.get((id(transport), request_id))
            if scope is not None:
                scope.cancel()

    async def _answer(self, transport: Any, request_id: Any, name: str, arguments: dict[str, Any]) -> bytes:
        """The JSON-RPC answer, as the SDK's handler, session and transport would write it."""
        key = (id(transport), request_id)
        quick: bytes | None = None
        result: ServerResult | None = None
        with anyio.CancelScope() as cancel:
            self.in_flight[key] = cancel
            try:
                tool = await self.server.run_tool(name, arguments)
                payload = tool.payload
                failed = is_error_payload(payload)  # as MemdirMCP.call_tool: a failure is flagged isError
                quick = None if failed else result_json(request_id, tool.text, payload)
                if quick is None:
                    result = ServerResult(CallToolResult(content=[TextContent(type="text", text=tool.text)],
                                                         structuredContent=payload, isError=failed))
            except Exception as exc:  # as the SDK's call_tool handler: the error as an isError result
                result = ServerResult(CallToolResult(content=[TextContent(type="text", text=str(exc))],
                                                     isError=True))
            finally:
                if self.in_flight.get(key) is cancel:
                    del self.in_flight[key]
        self.calls += 1
        reply: JSONRPCResponse | JSONRPCError
        if cancel.cancelled_caught:
            reply = JSONRPCError(jsonrpc="2.0", id=request_id,
                                 error=ErrorData(code=0, message="Request cancelled", data=None))
        elif quick is not None:
            return quick
        else:
            assert result is not None
            reply = JSONRPCResponse(jsonrpc="2.0", id=request_id,
                                    result=result.model_dump(by_alias=True, mode="json", exclude_none=True))
        return JSONRPCMessage(reply).model_dump_json(by_alias=True, exclude_none=True).encode()


def result_json(request_id: Any, text: str, payload: dict[str, Any]) -> bytes | None:
    """A successful call's JSON-RPC answer written in one step: the very bytes of the SDK's models.

    Why: building ``CallToolResult``/``JSONRPCResponse`` and dumping them twice took longer than
    the rest of the answer; the bytes are those of pydantic-core's own serializer, the one the
    models use, with their field order and ``exclude_none`` (only the models' own ``None`` fields
    are left out: none here).  ``None`` when it cannot be written so (the models' path decides).
    """
    try:
        return to_json({"jsonrpc": "2.0", "id": request_id,
                        "result": {"content": [{"type": "text", "text": text}], "structuredContent": payload,
                                   "isError": False}}, inf_nan_mode="null")  # the models' ser_json_inf_nan
    except Exception:
        return None


async def _headers_pass(scope: Any, headers: Headers, security: TransportSecurityMiddleware) -> bool:
    """The checks the SDK makes before it would take the request (any refusal is left to it)."""
    content_type = [p.strip() for p in headers.get("content-type", "").split(";")[0].split(",")]
    version = headers.get("mcp-protocol-version")
    return (_accepts_json(headers.get("accept")) and _JSON in content_type
            and (version is None or version in SUPPORTED_PROTOCOL_VERSIONS)
            and await security.validate_request(Request(scope), is_post=True) is None)


def _names_json(accept: str) -> bool:
    """Whether an Accept header names JSON, as the SDK looks for it."""
    return any(t.strip().startswith(_JSON) for t in accept.split(","))


def _accepts_json(accept: str | None) -> bool:
    """Whether an Accept header takes a JSON answer: it names it, or a wildcard covering it
    (``*/*``, ``application/*``), or there is none (RFC 9110: any type then)."""
    if accept is None:
        return True
    return _names_json(accept) or any(t.split(";")[0].strip() in ("*/*", "application/*") for t in accept.split(","))


def _without_header(scope: Any, name: bytes) -> Any:
    """``scope`` without the header ``name`` (lower case), itself when it has none."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != name]
    return scope if len(headers) == len(scope["headers"]) else {**scope, "headers": headers}


def _json_accepted(scope: Any) -> Any:
    """``scope`` with ``application/json`` named in its Accept header when the header takes JSON
    without naming it (see :func:`_accepts_json`), as the SDK wants it named."""
    accept = Headers(scope=scope).get("accept")
    if not _accepts_json(accept) or (accept is not None and _names_json(accept)):
        return scope
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"accept"]
    named = (accept + ", " if accept else "") + _JSON
    return {**scope, "headers": [*headers, (b"accept", named.encode("latin-1"))]}


class RequestGuard:
    """ASGI front of the SDK's streamable-HTTP app: answers the bodies the SDK leaves unanswered.

    Why: the SDK takes a request whose ``id`` is neither a string nor an integer (an object, a
    float, ``null``, ``true``) for a notification (202, no answer: the client waits forever), and
    JSON nested deeper than Python's parser goes made it fail with a 500 and a traceback.  Those
    are answered with a JSON-RPC error (400, ``id: null``) as over stdio (:mod:`memdir.mcp_stdio`),
    as are a body that is not UTF-8 and a number too long for Python to read (500s through the SDK),
    and so is a batch, with a plainer message than the SDK's validation dump.  Only a request
    whose headers the SDK would take is refused here; everything else goes to the SDK, with any
    lone surrogate in its strings replaced by U+FFFD, as over stdio (the SDK answered a 500 when
    it had to write one back: an ``id``, or the path in ``memory_get``'s error).
    """

    def __init__(self, app: Any, server: MemdirMCP):
        self.app, self.server = app, server
        self.path = server.settings.streamable_http_path
        self.security = TransportSecurityMiddleware(server.settings.transport_security)
        self.max_body = int(getattr(server.settings, "max_request_body_size", 4 * 1024 * 1024))
        self.replays = getattr(server, "_event_store", None)  # the SDK's event store (memdir's: none)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == self.path:
            # Without an event store there is nothing to replay: the SDK answered a GET that asked to
            # resume (Last-Event-ID, as a client reconnecting its stream sends) with nothing, so uvicorn
            # sent a 500 and logged "ASGI callable returned without starting response"; a new stream
            scope = _without_header(scope, b"last-event-id") if self.replays is None else scope
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        # curl, requests and fetch send 'Accept: */*' (urllib none): the SDK answered 406 "Client
        # must accept application/json", which */* does
        scope = _json_accepted(scope)
        received, body = await _read_body(receive, self.max_body)
        refused = None if body is None else refusal(body)
        if refused is None and body is not None and await self._answered_in_session(scope, body, receive, send):
            return None
        if refused is None or not await _headers_pass(scope, Headers(scope=scope), self.security):
            cleaned = None if body is None else _without_lone_surrogates(body)
            if cleaned is not None:
                received = [{"type": "http.request", "body": cleaned, "more_body": False}]
            return await self.app(scope, _replay(received, receive), send)
        code, message = refused
        answer = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
        response = Response(json.dumps(answer, separators=(",", ":")), status_code=400, media_type=_JSON)
        await response(scope, receive, send)

    async def _answered_in_session(self, scope: Any, body: bytes, receive: Any, send: Any) -> bool:
        """Answer a request for a method the server does not have, or with params it cannot take,
        as the SDK answers within a session (200, the request's id) but saying what is wrong; take
        such a notification, or a response (202), without the SDK's forty-line dump on stderr.
        Only on a session the SDK would serve (or an ``initialize`` opening one): anything else
        is the SDK's to refuse."""
        message = _json(body)
        if not isinstance(message, dict):
            return False
        try:
            parsed = JSONRPCMessage.model_validate(without_lone_surrogates(message)).root
        except Exception:
            return False
        # memdir's server asks a client nothing, so a response answers nothing: the SDK took one for
        # an internal error, sending the client's event stream a log message "Internal Server Error"
        stray = isinstance(parsed, JSONRPCResponse | JSONRPCError)
        refused = message_refusal(parsed) if isinstance(parsed, JSONRPCRequest | JSONRPCNotification) else None
        if refused is None and not stray:
            return False
        headers = Headers(scope=scope)
        session = headers.get("mcp-session-id")
        transport = getattr(self.server._session_manager, "_server_instances", {}).get(session)
        opening = session is None and getattr(parsed, "method", None) == "initialize"
        if not ((opening or (transport is not None and not transport.is_terminated))
                and await _headers_pass(scope, headers, self.security)):
            return False
        extra = {} if session is None else {"mcp-session-id": session}
        if stray or isinstance(parsed, JSONRPCNotification):  # never answered in JSON-RPC: taken, as the SDK does
            response = Response(status_code=202, headers={"Content-Type": _JSON, **extra})
        else:
            assert refused is not None and isinstance(parsed, JSONRPCRequest)
            code, why = refused
            answer = JSONRPCError(jsonrpc="2.0", id=parsed.id, error=ErrorData(code=code, message=why))
            response = Response(JSONRPCMessage(answer).model_dump_json(by_alias=True, exclude_none=True),
                                status_code=200, headers={"Content-Type": _JSON, **extra})
        await response(scope, receive, send)
        return True


def refusal(body: bytes) -> tuple[int, str] | None:
    """The JSON-RPC error ``(code, message)`` for a body :class:`RequestGuard` answers itself."""
    try:
        message = json.loads(body)
    except RecursionError:
        return PARSE_ERROR, "Parse error: the JSON is nested too deeply"
    except UnicodeDecodeError as exc:  # the SDK catches only JSONDecodeError: these were 500s
        return PARSE_ERROR, f"Parse error: the body is not UTF-8 ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError:
        return None  # not JSON: the SDK answers that (-32700)
    except ValueError:  # Python's limit on the digits of an integer (4300)
        return PARSE_ERROR, "Parse error: a number has too many digits"
    if isinstance(message, list):
        return INVALID_REQUEST, "Invalid Request: batches are not supported: send one message per request"
    if isinstance(message, dict) and "method" in message and "id" in message and type(message["id"]) not in (int, str):
        return INVALID_REQUEST, "Invalid Request: an id must be a string or an integer"
    try:  # the SDK answered JSON that is no message (42, {"id": 1}) with pydantic's whole dump as the error
        JSONRPCMessage.model_validate(message)
    except Exception:
        return INVALID_REQUEST, f"Invalid Request: {NOT_A_MESSAGE}"
    return None


def _maybe_lone_surrogates(body: bytes) -> bool:
    """Whether ``body`` may hold a lone surrogate: escaped (``\\udXXX``) or raw (UTF-8 lead byte 0xED).

    A quick test on the bytes, so the common body is never walked; false positives (other
    ``\\ud`` escapes, Hangul) only cost the walk."""
    return b"\\ud" in body or b"\\uD" in body or b"\xed" in body


def _without_lone_surrogates(body: bytes) -> bytes | None:
    """``body`` rewritten with each lone surrogate replaced by U+FFFD; ``None`` when there is none."""
    if not _maybe_lone_surrogates(body):
        return None
    message = _json(body)
    cleaned = without_lone_surrogates(message)
    return None if cleaned == message else json.dumps(cleaned, ensure_ascii=False).encode()


def _json(body: bytes | None) -> Any:
    """The request's JSON, or None when there is no whole body or it is not JSON (or too deep)."""
    if body is None:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


async def _read_body(receive: Any, limit: int) -> tuple[list[Any], bytes | None]:
    """The ASGI messages read, and the whole body (None if it did not come whole within ``limit``)."""
    received: list[Any] = []
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        received.append(message)
        if message["type"] != "http.request":
            return received, None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > limit:
            return received, None
        if not message.get("more_body", False):
            return received, b"".join(chunks)


def _replay(received: list[Any], receive: Any) -> Any:
    """An ASGI ``receive`` that hands out what was already read, then reads on."""
    pending = list(received)

    async def again() -> Any:
        return pending.pop(0) if pending else await receive()

    return again


def _session_open(transport: Any) -> bool:
    idle = transport.idle_scope
    return not transport.is_terminated and not (idle is not None and idle.cancel_called)


@contextlib.contextmanager
def _holding_session(transport: Any) -> Iterator[None]:
    """As the SDK's transport does for each request: no idle expiry while a call is in flight."""
    idle, timeout = transport.idle_scope, transport._idle_timeout
    if idle is None or timeout is None:
        yield
        return
    transport._requests_in_flight += 1
    idle.deadline = math.inf
    try:
        yield
    finally:
        transport._requests_in_flight -= 1
        if not transport._requests_in_flight:
            idle.deadline = anyio.current_time() + timeout


#: Exceptions that only mean "the HTTP client went away" (a closed or broken stream, or a
#: request body cut off when the client vanished before sending all of it), or never finished
#: its request: uvicorn cancels such a request when the server stops (:data:`SHUTDOWN_GRACE`).
_CLIENT_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError,
                ClientDisconnect, asyncio.CancelledError)
#: The SDK forwards a cut-off request body to the session as an exception and logs it without a
#: traceback; a client disconnect has an empty description, so the line ends right after the colon.
_STREAM_EXCEPTION_NO_TEXT = "Received exception from stream: "
#: What uvicorn says (at ERROR) of a client's open SSE stream that the server ended: when it stops.
_STREAM_ENDED_BY_SERVER = "ASGI callable returned without completing response."
#: Loggers through which the SDK and uvicorn report such a disconnect with a full traceback.
_DISCONNECT_LOGGERS = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager",
                       "mcp.server.lowlevel.server", "uvicorn.error")


def _only_broken_pipes(exc: BaseException) -> bool:
    """Whether ``exc`` (a group, nested or not) holds nothing but writes to a closed pipe."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_broken_pipes(e) for e in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _stdout_failure(exc: BaseException) -> BaseException | None:
    """The failed write to stdout in ``exc`` (a group, nested or not) when that is all it holds."""
    from memdir.errors import StdoutFailed

    if isinstance(exc, BaseExceptionGroup):
        found = [_stdout_failure(e) for e in exc.exceptions]
        return found[0] if found and all(found) else None
    return exc if isinstance(exc, StdoutFailed) else None


def _only_client_gone(exc: BaseException | None) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_client_gone(e) for e in exc.exceptions)
    return isinstance(exc, _CLIENT_GONE)


class ClientGoneFilter(logging.Filter):
    """Drops the traceback the SDK logs when an HTTP client disconnects mid-stream.

    A client closing its connection (or its SSE stream) is normal, not a server error, and so
    is the server ending a client's open stream when it stops (Ctrl-C with a client connected);
    the record is kept only when memdir logs at DEBUG (``memdir -vv mcp``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        gone = exc is not None and _only_client_gone(exc)
        if not gone and exc is None:
            gone = record.getMessage() in (_STREAM_EXCEPTION_NO_TEXT, _STREAM_ENDED_BY_SERVER)
        if gone:
            return logging.getLogger("memdir").isEnabledFor(logging.DEBUG)
        return True


class AcceptStormFilter(logging.Filter):
    """One line a minute, not a traceback a try, for connections the server cannot take.

    Why: out of file descriptors, asyncio (3.11) tries ``accept`` up to the listen backlog (2048)
    times per wake-up, logs each failure with its traceback and schedules as many retries; 100
    connections held open to ``memdir mcp --transport http`` with ``ulimit -n 48`` wrote 340,000
    lines to stderr in ten seconds (and the retries left over when it stopped, 2,500 more
    "Invalid file descriptor: -1" tracebacks).  The server recovers once descriptors are free.
    """

    INTERVAL = 60.0

    def __init__(self) -> None:
        super().__init__()
        self._last = -self.INTERVAL
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if "BaseSelectorEventLoop._start_serving" in message and isinstance(exc, ValueError):
            return False  # a retry left over from the storm, run after the server closed its socket
        if not message.startswith("socket.accept() out of system resource"):
            return True
        now = time.monotonic()
        if now - self._last < self.INTERVAL:
            self._dropped += 1
            return False
        more = f"; {self._dropped} more refusals since the last report" if self._dropped else ""
        self._last, self._dropped = now, 0
        record.msg, record.args = (f"cannot accept connections: {getattr(exc, 'strerror', None) or exc} (the process's "
                                   f"limit, ulimit -n, is reached?); they wait and are taken once descriptors are "
                                   f"free{more}"), ()
        record.exc_info = record.exc_text = None
        return True


class UnlistedToolFilter(logging.Filter):
    """Drops the MCP SDK's 'Tool 'x' not listed, no validation will be performed', logged for every
    call of a tool the server does not have.  Why: memdir answers such a call with an error naming
    its tools (nothing runs unvalidated), so the line is untrue, and a client calling unknown
    tools in a loop filled the host's log with one a call."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Tool '%s' not listed")


def quiet_unlisted_tools() -> None:
    """Install :class:`UnlistedToolFilter` on the SDK's server logger (idempotent)."""
    logger = logging.getLogger("mcp.server.lowlevel.server")
    if not any(isinstance(f, UnlistedToolFilter) for f in logger.filters):
        logger.addFilter(UnlistedToolFilter())


def quiet_client_disconnects() -> None:
    """Install :class:`ClientGoneFilter` on the loggers that report disconnects, and
    :class:`AcceptStormFilter` on asyncio's (idempotent)."""
    for name in _DISCONNECT_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ClientGoneFilter) for f in logger.filters):
            logger.addFilter(ClientGoneFilter())
    loop_logger = logging.getLogger("asyncio")
    if not any(isinstance(f, AcceptStormFilter) for f in loop_logger.filters):
        loop_logger.addFilter(AcceptStormFilter())


def timeout_payload(name: str, arguments: dict[str, Any] | None, seconds: float) -> dict[str, Any]:
    """The tool's own error shape for a call that did not finish in time."""
    return failure_payload(name, arguments,
                           f"{name} did not finish within {seconds:g} s; the server is still serving other calls")


def failure_payload(name: str, arguments: dict[str, Any] | None, error: str) -> dict[str, Any]:
    """The tool's own error shape for a call the server gave up on (``error`` says why)."""
    if name == "memory_search":
        return search_unavailable_payload(error)
    if name == "memory_get":
        path = (arguments or {}).get("path")
        return {"path": path if isinstance(path, str) else "", "text": "", "disabled": True, "error": error}
    if name == "memory_append":
        return {"path": "", "appended": False, "error": error}
    return {"error": error}


def build_server(memory: Any, *, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT,
                 session_key: str | None = None, tools: Iterable[str] | str | None = None,
                 call_timeout: float = DEFAULT_CALL_TIMEOUT) -> MemdirMCP:
    """A ready-to-run server over ``memory``; ``host`` must be loopback even for stdio."""
    bound = check_loopback_host(host)
    # Plain JSON responses, not an SSE stream per call: memdir's tools answer once and never stream,
    # and the event-stream framing was most of the per-call transport time.
    return MemdirMCP(memory, session_key=session_key, tools=tools, host=bound, port=int(port),
                     transport_security=transport_security(bound), call_timeout=call_timeout,
                     json_response=True)


def serve(memory: Any, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT,
          session_key: str | None = None, banner: bool = True) -> None:
    """Run until the client disconnects (stdio) or the process is interrupted (HTTP); ``banner``:
    say on stderr where the HTTP server listens (``memdir -q mcp`` does not: it is no error)."""
    kind = {"stdio": "stdio", "http": "streamable-http", "streamable-http": "streamable-http"}.get(transport)
    if kind is None:
        raise ValueError(f"unknown transport {transport!r} (expected stdio or http)")
    server = build_server(memory, host=host, port=port, session_key=session_key)
    if kind == "streamable-http":
        server.http_sockets = listen_sockets(server.settings.host, int(port))
        shown = f"[{server.settings.host}]" if ":" in server.settings.host else server.settings.host
        if banner:
            print(f"memdir MCP server: http://{shown}:{port}{server.settings.streamable_http_path} "
                  f"(workspace {getattr(memory, 'workspace', '?')}; Ctrl-C stops it)", file=sys.stderr, flush=True)
    if hasattr(memory, "first_index_wait"):
        memory.first_index_wait = FIRST_INDEX_WAIT  # a search never waits minutes for a first build
    if kind == "streamable-http":
        quiet_client_disconnects()
    quiet_unlisted_tools()
    server.start_warmup()
    server.start_watching()
    try:
        server.run(kind)  # type: ignore[arg-type]
    finally:
        server.stopping.set()


__all__ = [
    "DEFAULT_HTTP_PORT",
    "ClientGoneFilter",
    "HostNotAllowed",
    "MemdirMCP",
    "PortUnavailable",
    "build_server",
    "check_loopback_host",
    "listen",
    "quiet_client_disconnects",
    "serve",
    "transport_security",
]
