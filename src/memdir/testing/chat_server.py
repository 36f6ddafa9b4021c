"""A scripted OpenAI-compatible chat server on loopback, for tests and benchmarks.

``ScriptedChatServer(responder)`` serves ``POST /v1/chat/completions`` on ``127.0.0.1``; each
request body goes to ``responder(body)``, which returns ``{"content": ..., "tool_calls":
[{"name", "arguments"}], "usage": {...}}`` (usage defaults to characters/4 of the request and
reply) or ``{"status": 500, "error": "..."}``, or ``{"raw": body}`` to send ``body`` (JSON, or
bytes) exactly as given, with ``"rawStatus"`` (default 200) and ``"rawHeaders"``: a model API
misbehaving.  Every
request is recorded in ``.requests``.  With ``sse=True`` every reply is sent as server-sent
events (``text/event-stream``, the content and tool calls in pieces, ``data: [DONE]`` last), as a
proxy that forces streaming does, whatever the request's ``"stream"`` says.

``FactKeeperModel`` is a deterministic stand-in for an LLM that follows memdir's protocols: it
answers the pre-compaction flush by reading today's log and appending the facts the user asked
it to remember ("Remember that …"), keeps those facts in compaction summaries, answers
questions by calling ``memory_search``, and names sessions for the hook's slug.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], dict[str, Any]]


def _chars(messages: Iterable[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        content = m.get("content")
        total += len(content) if isinstance(content, str) else len(json.dumps(content or ""))
        if m.get("tool_calls"):
            total += len(json.dumps(m["tool_calls"]))
    return total


class ScriptedChatServer:
    """Threaded loopback HTTP server speaking the chat-completions protocol."""

    def __init__(self, responder: Responder, *, api_key: str | None = None, sse: bool = False):
        self.responder = responder
        self.api_key = api_key
        self.sse = sse
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._extra_headers: dict[int, dict[str, str]] = {}  # by handler thread, for the reply being sent
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload = server._handle(self.path, dict(self.headers), body)
                if server.sse and status == 200 and isinstance(payload, dict):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.end_headers()  # no length: the body ends as the connection closes (HTTP/1.0)
                    for event in sse_events(payload):
                        self.wfile.write(event)
                        self.wfile.flush()
                    return
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for name, value in (server._extra_headers.pop(threading.get_ident(), None) or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, target: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        path, _, query = target.partition("?")
        with self._lock:
            self.requests.append({"path": path, "query": query, "headers": headers, "body": body})
        if path.rstrip("/") != "/v1/chat/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        if self.api_key and headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "bad api key"}}
        try:
            step = self.responder(body)
        except Exception as exc:
            return 500, {"error": {"message": f"responder failed: {exc!r}"}}
        if "raw" in step:
            if step.get("rawHeaders"):
                self._extra_headers[threading.get_ident()] = step["rawHeaders"]
            return int(step.get("rawStatus", 200)), step["raw"]
        if "status" in step:
            return int(step["status"]), {"error": {"message": step.get("error", "scripted error")}}
        content = step.get("content")
        calls = [
            {"id": f"call_{next(self._ids)}", "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
            for c in step.get("tool_calls", [])
        ]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        prompt = math.ceil(_chars(body.get("messages", [])) / 4)
        completion = math.ceil((len(content or "") + len(json.dumps(calls) if calls else "")) / 4)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        usage.update(step.get("usage", {}))
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage,
        }


def sse_events(reply: dict[str, Any], piece: int = 7) -> list[bytes]:
    """A chat completion as the server-sent events a streaming server sends: a role chunk, the
    content and each tool call's arguments in ``piece``-character deltas, the finish reason, the
    usage (as ``stream_options.include_usage`` asks), then ``data: [DONE]``."""
    head = {k: reply.get(k) for k in ("id", "model")} | {"object": "chat.completion.chunk"}
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    chunks += [chunk({"content": content[i:i + piece]}) for i in range(0, len(content), piece)]
    for n, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        chunks.append(chunk({"tool_calls": [{"index": n, "id": call["id"], "type": "function",
                                             "function": {"name": fn["name"], "arguments": ""}}]}))
        args = fn["arguments"]
        chunks += [chunk({"tool_calls": [{"index": n, "function": {"arguments": args[i:i + piece]}}]})
                   for i in range(0, len(args), piece)]
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if reply.get("usage"):
        chunks.append({**head, "choices": [], "usage": reply["usage"]})
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


class ScriptQueue:
    """A responder that plays a fixed list of steps (dicts, or callables taking the body)."""

    def __init__(self, steps: Iterable[dict[str, Any] | Responder]):
        self.steps = list(steps)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.steps:
            raise RuntimeError("script exhausted")
        step = self.steps.pop(0)
        return step(body) if callable(step) else step


# --- a deterministic model ------------------------------------------------------------------

FACT = re.compile(r"Remember that ([^.?!\n]+[.?!]?)")
DATE_FILE = re.compile(r"memory/\d{4}-\d{2}-\d{2}\.md")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    " ".join([
        "a an the is are was were do does did what which who where when how my me i you your",
        "of in on to for and or with at by from that this it its be",
    ]).split(" ")
)


def facts_in(text: str) -> list[str]:
    """The planted facts in ``text``, each as ``"Remember that …"`` without duplicates."""
    out: list[str] = []
    for m in FACT.finditer(text or ""):
        fact = m.group(1).strip().rstrip(".?!") + "."
        if fact not in out:
            out.append(fact)
    return out


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


class FactKeeperModel:
    """Rule-based responder; see the module docstring. Counts what it was asked to do."""

    def __init__(self, slug_reply: str = "  Project Notes!\n", chatter: str = "Okay, noted."):
        self.slug_reply = slug_reply
        self.chatter = chatter
        self.calls: dict[str, int] = {"chat": 0, "flush": 0, "compaction": 0, "slug": 0, "question": 0}

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body.get("messages", [])
        system = msgs[0]["content"] if msgs and msgs[0].get("role") == "system" else ""
        if system.startswith("You compact conversations"):
            self.calls["compaction"] += 1
            return {"content": self._summary(msgs[-1]["content"])}
        users = [i for i, m in enumerate(msgs) if m.get("role") == "user"]
        if not users:
            return {"content": self.chatter}
        last_user = msgs[users[-1]]["content"]
        after = msgs[users[-1] + 1:]
        if "1-2 word slug" in last_user:
            self.calls["slug"] += 1
            return {"content": self.slug_reply}
        if "Pre-compaction memory flush" in last_user:
            return self._flush(system, msgs[: users[-1]], last_user, after)
        if last_user.rstrip().endswith("?"):
            return self._answer(last_user, after)
        self.calls["chat"] += 1
        return {"content": f"{self.chatter} ({len(last_user.split())} words received)"}

    @staticmethod
    def _tool_result(after: list[dict[str, Any]]) -> tuple[str | None, Any]:
        """Name and parsed payload of the latest tool result in this turn."""
        if not after or after[-1].get("role") != "tool":
            return None, None
        names = {c["id"]: c["function"]["name"] for m in after for c in m.get("tool_calls") or []}
        try:
            payload = json.loads(after[-1].get("content") or "null")
        except ValueError:
            payload = None
        return names.get(after[-1].get("tool_call_id")), payload

    def _summary(self, text: str) -> str:
        kept = [ln for ln in text.splitlines() if ln.startswith(("User:", "Earlier summary:"))]
        facts = facts_in("\n".join(kept))
        lines = text.count("\n") + 1
        return f"Summary of {lines} earlier lines. " + " ".join(f"Remember that {f}" for f in facts)

    def _flush(self, system: str, before: list[dict[str, Any]], prompt: str,
               after: list[dict[str, Any]]) -> dict[str, Any]:
        target = DATE_FILE.search(prompt)
        tool, payload = self._tool_result(after)
        if tool is None:
            self.calls["flush"] += 1
            return {"tool_calls": [{"name": "memory_get", "arguments": {"path": target.group(0) if target else ""}}]}
        if tool == "memory_get":
            summary = system.split("## Summary of the earlier conversation", 1)[1] if (
                "## Summary of the earlier conversation" in system) else ""
            seen = facts_in(summary)
            for m in before:
                if m.get("role") == "user" and isinstance(m.get("content"), str):
                    seen += [f for f in facts_in(m["content"]) if f not in seen]
            existing = (payload or {}).get("text", "") if isinstance(payload, dict) else ""
            new = [f for f in seen if f not in existing]
            if new:
                return {"tool_calls": [{"name": "memory_append",
                                        "arguments": {"text": "\n".join(f"- {f}" for f in new)}}]}
        return {"content": "NO_REPLY"}

    def _answer(self, question: str, after: list[dict[str, Any]]) -> dict[str, Any]:
        tool, payload = self._tool_result(after)
        if tool is None:
            self.calls["question"] += 1
            return {"tool_calls": [{"name": "memory_search", "arguments": {"query": question}}]}
        results = payload.get("results", []) if isinstance(payload, dict) else []
        want = _words(question)
        best, best_score = "", 0
        for hit in results:
            for line in str(hit.get("snippet", "")).splitlines():
                score = len(want & _words(line))
                if score > best_score:
                    best, best_score = line.strip(), score
        if not best:
            return {"content": "I checked memory but found nothing about that."}
        return {"content": f"From memory: {best}"}
