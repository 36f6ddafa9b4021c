"""``memdir mcp`` over stdio: one JSON-RPC message per line, and an answer for every bad one.

Why not the SDK's own stdio transport: it hands a line it cannot validate to the server as an
exception, which sends no response, so a client that sent a request it got slightly wrong waits
for an answer forever.  Lines that broke it that way: a lone surrogate escape in a string
(``"\\ud800"``, valid JSON that pydantic refuses), an ``id`` that is an object, a batch, text
that is not JSON at all.  Here every line is validated as the SDK would (``JSONRPCMessage``),
and one that fails is answered as JSON-RPC 2.0 says:

* not JSON: ``-32700`` Parse error, ``id: null``;
* JSON, but not a message the server takes: ``-32600`` Invalid Request, with the request's own
  ``id`` when it has a usable one (so the client waiting on it gets its answer), else ``null``;
* a request for a method the server does not have: ``-32601`` Method not found, naming it; one
  whose params the method cannot take: ``-32602`` naming the field (:func:`refusal`); any
  request but ``initialize`` and ``ping`` before ``initialize``: ``-32600`` saying so (the SDK
  answered all three "Invalid request parameters", and such a notification is dropped);
* a lone surrogate in a string is replaced by U+FFFD and the message goes on: the surrogate
  cannot be part of any note, and the rest of the question can still be answered.

A response from the client to nothing the server asked is dropped, and so is the SDK's error
answer to a request the client cancelled (JSON-RPC and the spec answer neither).  Blank lines
are skipped.  Every write to stdout (the server's answers and these) is one whole
line under one lock, so they never interleave.
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from io import TextIOWrapper
from typing import Any, get_args

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ClientNotification,
    ClientRequest,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from memdir.textutil import has_lone_surrogate


def without_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (and keys) replaced by U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if has_lone_surrogate(value) else value
    if isinstance(value, list):
        return [without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in value.items()}
    return value


#: Why a line (or an HTTP body) that is JSON is refused as no message.
NOT_A_MESSAGE = "not a JSON-RPC 2.0 request, notification or response (jsonrpc, id, method, params)"


def _usable_id(message: Any) -> int | str | None:
    """The ``id`` of a request that can be answered by it: an integer (not a bool) or a string."""
    if isinstance(message, dict):
        rid = message.get("id")
        if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
            return rid
    return None


def _error_line(rid: int | str | None, code: int, message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}},
                      ensure_ascii=False)


#: What :func:`read_message` and :func:`_checked` give for a message that is never answered and not
#: handed on: a notification the server cannot take, a response that is not one.
_DROPPED = JSONRPCMessage(JSONRPCNotification(jsonrpc="2.0", method="(dropped)"))


def read_message(line: str) -> JSONRPCMessage | str:
    """The message on ``line``, or the error line to answer it with."""
    try:
        message = JSONRPCMessage.model_validate_json(line)
    except Exception:
        try:
            raw = json.loads(line)
        except RecursionError:  # valid JSON, deeper than Python reads: "not JSON" sent the client looking elsewhere
            return _error_line(None, PARSE_ERROR, "Parse error: the JSON is nested too deeply")
        except ValueError:
            return _error_line(None, PARSE_ERROR, "Parse error: the line is not JSON")
        try:
            message = JSONRPCMessage.model_validate(without_lone_surrogates(raw))
        except Exception:
            if isinstance(raw, dict) and "method" not in raw and ("result" in raw or "error" in raw):
                return _DROPPED  # a response is never answered: a client answering errors would loop
            why = "batches are not supported: send one message per line" if isinstance(raw, list) else NOT_A_MESSAGE
            return _error_line(_usable_id(raw), INVALID_REQUEST, f"Invalid Request: {why}")
    if "id" in (getattr(message.root, "model_extra", None) or {}):
        # a request whose id is neither a string nor an integer validates as a notification, which
        # is never answered: the client waiting on it would wait forever
        return _error_line(None, INVALID_REQUEST, "Invalid Request: an id must be a string or an integer")
    return message


@functools.cache
def _client_methods() -> tuple[dict[str, Any], dict[str, Any]]:
    """The SDK's model of each request and of each notification a client may send, by method."""
    def by_method(union: Any) -> dict[str, Any]:
        members = get_args(union.model_fields["root"].annotation)
        return {get_args(m.model_fields["method"].annotation)[0]: m for m in members}
    return by_method(ClientRequest), by_method(ClientNotification)


def _readable(exc: Exception) -> str:
    """A validation error in a line or two: where each problem is (``params.arguments``) and what it is."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    found = [f"{'.'.join(str(p) for p in e['loc']) or 'the message'}: {e['msg']}"
             for e in errors(include_url=False, include_input=False)]
    return "; ".join(found[:3]) + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")


def refusal(message: JSONRPCRequest | JSONRPCNotification) -> tuple[int, str] | None:
    """The JSON-RPC error ``(code, message)`` for a request or notification the SDK cannot take.

    Why: the SDK answers every such request ``-32602 "Invalid request parameters"`` with empty
    ``data`` (an unknown method too, which is ``-32601``) and logs pydantic's whole dump against
    each of its 17 request kinds, forty lines on stderr; a client (or the person writing one)
    never learnt which method or field was wrong."""
    requests, notifications = _client_methods()
    model = (requests if isinstance(message, JSONRPCRequest) else notifications).get(message.method)
    if model is None:
        return METHOD_NOT_FOUND, f"Method not found: {message.method}"
    try:
        model.model_validate(message.model_dump(by_alias=True, mode="json", exclude_none=True))
    except Exception as exc:
        return INVALID_PARAMS, f"Invalid params for {message.method}: {_readable(exc)}"
    return None


#: Longest line taken from stdin (characters): 4 times the HTTP transport's body limit.  Longer
#: lines are skipped to their end and answered with an error: ``memdir mcp < /dev/zero`` (or a
#: client that never sends a newline) took every byte of memory.
MAX_LINE_CHARS = 16 * 1024 * 1024
#: Put in place of a skipped line, for the reader to answer (no JSON text can start with a NUL).
TOO_LONG = "\x00too long\n"


async def _lines_read_aside(fd: int) -> AsyncIterator[str]:
    """The lines of file descriptor ``fd`` (UTF-8), read by a daemon thread of their own with
    ``os.read``.

    Why: read in anyio's worker thread, a read waiting on a terminal or a pipe could be neither
    cancelled nor left behind, so Ctrl-C (SIGINT) did not end ``memdir mcp`` until the next line
    or the end of input came.  A daemon thread's read is abandoned at exit; it holds no lock of
    ``sys.stdin``'s (which would abort the interpreter's shutdown).
    """
    send, receive = anyio.create_memory_object_stream[str](1)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        # utf-8-sig: a byte order mark before the first line (a .NET host whose stdin encoding is
        # Encoding.UTF8, PowerShell with $OutputEncoding set to it) made initialize "not JSON"
        decode = codecs.getincrementaldecoder("utf-8-sig")("replace").decode
        parts: list[str] = []
        held = 0  # characters in parts
        skipping = False  # in a line over MAX_LINE_CHARS: dropped up to its newline
        try:
            while chunk := os.read(fd, 65536):
                *lines, rest = decode(chunk).split("\n")
                for line in lines:
                    parts.append(line)
                    whole = TOO_LONG if skipping or held + len(line) > MAX_LINE_CHARS else "".join(parts) + "\n"
                    anyio.from_thread.run(send.send, whole, token=token)
                    parts, held, skipping = [], 0, False
                held += len(rest)
                if held > MAX_LINE_CHARS:
                    parts, held, skipping = [], 0, True
                else:
                    parts.append(rest)
            tail = "".join(parts) + decode(b"", True)
            if skipping or len(tail) > MAX_LINE_CHARS:
                tail = TOO_LONG
            if tail:
                anyio.from_thread.run(send.send, tail, token=token)
        except Exception:  # the loop is gone (the server stopped), or stdin failed: input is over
            pass
        finally:
            try:
                anyio.from_thread.run_sync(send.close, token=token)
            except Exception:
                pass

    threading.Thread(target=pump, name="memdir-mcp-stdin", daemon=True).start()
    async with receive:
        async for line in receive:
            yield line


def _checked(message: JSONRPCRequest | JSONRPCNotification, initialized: bool) -> str | JSONRPCMessage | None:
    """The error line for a request the server cannot take, :data:`_DROPPED` for such a
    notification (JSON-RPC answers none), else ``None``."""
    refused = refusal(message)
    if isinstance(message, JSONRPCNotification):
        return None if refused is None else _DROPPED
    if refused is None and not initialized and message.method not in ("initialize", "ping"):
        # the SDK's own answer was "Invalid request parameters"
        refused = INVALID_REQUEST, "Invalid Request: the session is not initialized: send initialize first"
    return None if refused is None else _error_line(message.id, *refused)


#: Seconds the requests still being answered when stdin ends get before the server stops
#: (a tool call is answered within its own deadline, 120 s unless set, well before).
DRAIN_SECONDS = 300.0


@asynccontextmanager
async def stdio_transport(stdin: Any = None, stdout: Any = None, drain_seconds: float = DRAIN_SECONDS) -> AsyncIterator[
        tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]]:
    """``(read_stream, write_stream)`` over this process's stdin and stdout (UTF-8 whatever the
    locale, as the SDK's), for ``Server.run``; ends when stdin does, once every request read has
    been answered (at most ``drain_seconds`` later).

    Why wait: the SDK cancels the calls in flight when its input ends, so requests piped in
    (``printf '…' | memdir mcp``, a script that writes its calls and closes stdin) got no answer
    but the first, and a ``memory_append`` among them was not made, without a word."""
    if stdin is None:
        stdin = _lines_read_aside(sys.stdin.fileno())
    if stdout is None:
        stdout = anyio.wrap_file(TextIOWrapper(sys.stdout.buffer, encoding="utf-8"))
    to_server, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    lock = anyio.Lock()
    unanswered: dict[Any, int] = {}  # ids of the requests handed to the server, not yet answered
    initialized = False  # initialize (answered before the server reads on) or initialized was handed on
    asked: set[Any] = set()  # ids of the requests the server sent the client, not yet answered
    cancelled: set[Any] = set()  # ids of requests in flight the client cancelled (notifications/cancelled)
    answer_sent = [anyio.Event()]  # set at each answer (a new one once seen: answers may come before requests end)

    async def write(line: str) -> None:
        async with lock:
            await stdout.write(line + "\n")
            await stdout.flush()

    async def reader() -> None:
        nonlocal initialized
        try:
            async with to_server:
                async for line in stdin:
                    if not line.strip():
                        continue
                    got = read_message(line) if line != TOO_LONG else _error_line(
                        None, INVALID_REQUEST, f"Invalid Request: a line over {MAX_LINE_CHARS:,} characters "
                                               "was skipped")
                    if got is _DROPPED:
                        continue
                    if not isinstance(got, str) and isinstance(got.root, JSONRPCRequest | JSONRPCNotification):
                        got = _checked(got.root, initialized) or got
                    if isinstance(got, str):
                        await write(got)
                    elif isinstance(got.root, JSONRPCResponse | JSONRPCError) and got.root.id not in asked:
                        # an answer to nothing the server asked: the SDK took it for an internal error
                        # and sent the client a log message "Internal Server Error"
                        continue
                    elif got is not _DROPPED:
                        if isinstance(got.root, JSONRPCResponse | JSONRPCError):
                            asked.discard(got.root.id)
                        if isinstance(got.root, JSONRPCRequest | JSONRPCNotification):  # (as the SDK counts it)
                            initialized = initialized or got.root.method in ("initialize", "notifications/initialized")
                        if isinstance(got.root, JSONRPCRequest):
                            unanswered[got.root.id] = unanswered.get(got.root.id, 0) + 1
                        elif isinstance(got.root, JSONRPCNotification) and got.root.method == "notifications/cancelled":
                            target = (got.root.params or {}).get("requestId")
                            if target in unanswered:
                                cancelled.add(target)
                        await to_server.send(SessionMessage(got))
                with anyio.move_on_after(drain_seconds):  # the end of input: what was asked is answered first
                    while unanswered:
                        await answer_sent[0].wait()
                        answer_sent[0] = anyio.Event()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):  # the server stopped first
            await anyio.lowlevel.checkpoint()

    def answered(message: JSONRPCMessage) -> None:
        if isinstance(message.root, JSONRPCResponse | JSONRPCError) and message.root.id in unanswered:
            unanswered[message.root.id] -= 1
            if not unanswered[message.root.id]:
                del unanswered[message.root.id]
            answer_sent[0].set()

    async def writer() -> None:
        try:
            async with from_server:
                async for message in from_server:
                    root = message.message.root
                    if isinstance(root, JSONRPCRequest):
                        asked.add(root.id)
                    if isinstance(root, JSONRPCResponse | JSONRPCError) and root.id in cancelled:
                        cancelled.discard(root.id)
                        if isinstance(root, JSONRPCError):
                            # the SDK answers a request the client cancelled ("Request cancelled", code 0),
                            # which the spec says not to: the client, which no longer waits for it, logs
                            # "a response for an unknown message ID" (each Esc in Claude Code)
                            answered(message.message)
                            continue
                    await write(message.message.model_dump_json(by_alias=True, exclude_none=True))
                    answered(message.message)
        except anyio.ClosedResourceError:
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        yield read_stream, write_stream
