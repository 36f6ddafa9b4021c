"""A loopback HTTP server speaking the remote embedding providers' wire formats, for tests.

It checks what a real API would reject (paths, auth headers, request bodies), answers with
deterministic vectors derived from the text it received, runs OpenAI Batch and Gemini async
batch life cycles, and can be scripted per request (429 + Retry-After, 5xx, slow replies,
malformed JSON, quota errors, redirects).  Every request is recorded for assertions, and
``forbidden`` substrings (planted secrets) are refused and logged if they ever arrive.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DIMS = 8


def fake_vector(text: str, dims: int = DIMS) -> list[float]:
    """Deterministic, deliberately un-normalised vector for ``text``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [(b - 127.5) / 16.0 for b in digest[:dims]]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    #: The client's address and port: requests on one kept-alive connection share it.
    peer: tuple[str, int] | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


@dataclass
class Reply:
    status: int = 200
    #: JSON-able, ``str`` or ``bytes``; or a callable giving the body in parts (then ``headers``
    #: must hold the Content-Length to announce), for trickling or endless answers.
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: Seconds between the parts of a callable ``body``.
    part_delay: float = 0.0


Matcher = Callable[[Recorded], bool]


def _status_line(h: BaseHTTPRequestHandler, reply: Reply) -> None:
    """The status line, and the ``Date`` and ``Server`` headers ``send_response`` adds, but not a
    ``Date`` the reply sets itself (a server whose clock differs from this machine's)."""
    h.send_response_only(reply.status)
    h.send_header("Server", h.version_string())
    if not any(k.lower() == "date" for k in reply.headers):
        h.send_header("Date", h.date_time_string())


class ProviderServer:
    """Threaded server on 127.0.0.1:<free port>; use as a context manager or call ``stop()``."""

    def __init__(self, *, api_key: str = "test-key", dims: int = DIMS,
                 embedder: Callable[[list[str]], list[list[float]]] | None = None,
                 record_bodies: bool = True, keep_alive: bool = False,
                 tls: tuple[str, str] | None = None) -> None:
        """``keep_alive``: answer in HTTP/1.1 and keep the connection open, as the real APIs do
        (by default each answer closes its connection); ``tls``: (certificate, key) PEM files to
        answer over HTTPS with."""
        self.api_key = api_key
        self.dims = dims
        #: Real vectors instead of fake ones: e.g. memdir's local model, so another system
        #: (OpenClaw's ``openai`` provider) can be benchmarked on the very same embeddings.
        self.embedder = embedder
        self.record_bodies = record_bodies
        #: Longer inputs are refused as a model with a short context refuses them (400), e.g. a
        #: small model behind an OpenAI-compatible URL; ``None``: any length.
        self.max_input_chars: int | None = None
        #: Answer as an Ollama older than 0.3.0: no ``/api/embed``, ``/api/embeddings`` with one ``prompt``.
        self.ollama_legacy = False
        self.requests: list[Recorded] = []
        self.violations: list[str] = []
        self.forbidden: list[str] = []
        self._scripts: list[tuple[Matcher, deque[Reply]]] = []
        self._lock = threading.Lock()
        # batch life cycles
        self.batch_polls_before_done = 2
        self.openai_final_status = "completed"
        self.gemini_final_state = "BATCH_STATE_SUCCEEDED"
        self.gemini_output = "inline"  # or "file"
        self.files: dict[str, bytes] = {}
        self.openai_batches: dict[str, dict[str, Any]] = {}
        self.gemini_ops: dict[str, dict[str, Any]] = {}
        self._counter = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner._handle(self)

            def do_POST(self) -> None:
                owner._handle(self)

            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    # -- control ------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ProviderServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, match: str | Matcher, *replies: Reply) -> None:
        """Answer the next requests whose path contains ``match`` (or that satisfy it) with ``replies``."""
        matcher = match if callable(match) else (lambda r, m=match: m in r.path)
        with self._lock:
            self._scripts.append((matcher, deque(replies)))

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}{self._counter}"

    # -- request handling -----------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        parts = urlsplit(h.path)
        rec = Recorded(
            method=h.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in h.headers.items()},
            body=body,
            peer=tuple(h.client_address[:2]),  # type: ignore[arg-type]
        )
        with self._lock:
            if self.record_bodies:
                self.requests.append(rec)
            reply = None
            for matcher, queue in self._scripts:
                if queue and matcher(rec):
                    reply = queue.popleft()
                    break
        seen = body.decode("utf-8", "replace") + h.path + json.dumps(rec.headers)
        hits = [s for s in self.forbidden if s in seen]
        if hits:
            self.violations.extend(hits)
            reply = Reply(400, {"error": {"message": "forbidden content received"}})
        if reply is None:
            try:
                reply = self._route(rec)
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                reply = Reply(400, {"error": {"message": f"bad request: {exc!r}"}})
        self._send(h, reply)

    def _send(self, h: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.delay:
            time.sleep(reply.delay)
        if callable(reply.body):
            self._send_parts(h, reply)
            return
        if isinstance(reply.body, bytes):
            payload = reply.body
        elif isinstance(reply.body, str):
            payload = reply.body.encode("utf-8")
        elif reply.body is None:
            payload = b""
        else:
            payload = json.dumps(reply.body).encode("utf-8")
        try:
            _status_line(h, reply)
            headers = {"Content-Type": "application/json", **reply.headers}
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)

    def _send_parts(self, h: BaseHTTPRequestHandler, reply: Reply) -> None:
        try:
            _status_line(h, reply)
            for k, v in {"Content-Type": "application/json", **reply.headers}.items():
                h.send_header(k, v)
            h.end_headers()
            for part in reply.body():
                h.wfile.write(part)
                h.wfile.flush()
                if reply.part_delay:
                    time.sleep(reply.part_delay)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should
        h.close_connection = True

    # -- default routes -------------------------------------------------------------------------
    def _bearer_ok(self, rec: Recorded) -> bool:
        return rec.headers.get("authorization") == f"Bearer {self.api_key}"

    def _unauthorized(self) -> Reply:
        return Reply(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})

    def _route(self, rec: Recorded) -> Reply:
        path = rec.path
        if self.ollama_legacy and rec.method == "POST" and path.endswith(("/api/embed", "/api/embeddings")):
            return self._ollama_legacy(rec)
        if rec.method == "POST" and path.endswith("/embeddings"):
            return self._openai_embeddings(rec)
        if rec.method == "POST" and path.endswith("/api/embed"):
            return self._ollama_embed(rec)
        gem = re.search(r"/models/([^/:]+):(embedContent|batchEmbedContents|asyncBatchEmbedContent)$", path)
        if gem and rec.method == "POST":
            if rec.headers.get("x-goog-api-key") != self.api_key:
                return Reply(
                    400,
                    {"error": {"code": 400, "message": "API key not valid", "status": "INVALID_ARGUMENT"}},
                )
            return getattr(self, "_gemini_" + gem.group(2))(rec, gem.group(1))
        if rec.method == "POST" and path.endswith("/files"):
            return self._openai_upload(rec)
        if rec.method == "POST" and path.endswith("/batches"):
            return self._openai_create_batch(rec)
        m = re.search(r"/batches/([^/:]+)(/cancel|:cancel)?$", path)
        if m:
            if m.group(1) in self.openai_batches:
                return self._openai_batch(rec, m.group(1), cancel=bool(m.group(2)))
            if m.group(1) in self.gemini_ops:
                return self._gemini_op(rec, m.group(1), cancel=bool(m.group(2)))
        m = re.search(r"/files/([^/]+)/content$", path)
        if m and rec.method == "GET":
            if not self._bearer_ok(rec):
                return self._unauthorized()
            return Reply(200, self.files[m.group(1)], {"Content-Type": "application/octet-stream"})
        m = re.search(r"/download/v1beta/files/([^/:]+):download$", path)
        if m and rec.method == "GET" and rec.query.get("alt") == ["media"]:
            return Reply(200, self.files[m.group(1)], {"Content-Type": "application/octet-stream"})
        return Reply(404, {"error": {"message": f"no route for {rec.method} {path}"}})

    def _too_long(self, texts: list[str]) -> Reply | None:
        """The 400 a model answers when one input exceeds its context (``max_input_chars``)."""
        limit = self.max_input_chars
        if limit is None or all(len(t) <= limit for t in texts):
            return None
        return Reply(400, {"error": {"message": f"This model's maximum context length is {limit} tokens, "
                                                "however you requested more", "type": "invalid_request_error"}})

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        if self.embedder is not None:
            return [list(map(float, v)) for v in self.embedder(texts)]
        return [fake_vector(t, self.dims) for t in texts]

    def _openai_embeddings(self, rec: Recorded) -> Reply:
        if not self._bearer_ok(rec):
            return self._unauthorized()
        body = rec.json
        if isinstance(body.get("input"), str):  # the API takes one string as well as a list
            body["input"] = [body["input"]]
        if not isinstance(body.get("model"), str) or not isinstance(body.get("input"), list):
            return Reply(400, {"error": {"message": "model and input[] are required"}})
        if not all(isinstance(t, str) and t for t in body["input"]):
            return Reply(400, {"error": {"message": "input must be non-empty strings"}})
        if refused := self._too_long(body["input"]):
            return refused
        items = [
            {"object": "embedding", "index": i, "embedding": v}
            for i, v in enumerate(self._vectors(body["input"]))
        ]
        # Answer out of order: clients must sort by ``index``.
        return Reply(200, {"object": "list", "data": items[::-1], "model": body["model"]})

    def _ollama_embed(self, rec: Recorded) -> Reply:
        body = rec.json
        if not isinstance(body.get("model"), str) or not isinstance(body.get("input"), list):
            return Reply(400, {"error": "model and input are required"})
        if refused := self._too_long(body["input"]):
            return refused
        return Reply(200, {"model": body["model"], "embeddings": self._vectors(body["input"])})

    def _ollama_legacy(self, rec: Recorded) -> Reply:
        if rec.path.endswith("/api/embed"):  # Go's answer for a route it does not have
            return Reply(404, "404 page not found", {"Content-Type": "text/plain"})
        body = rec.json
        if not isinstance(body.get("model"), str) or not isinstance(body.get("prompt"), str):
            return Reply(400, {"error": "model and prompt are required"})
        return Reply(200, {"embedding": self._vectors([body["prompt"]])[0]})

    def _gemini_embedContent(self, rec: Recorded, model: str) -> Reply:
        body = rec.json
        text = body["content"]["parts"][0]["text"]
        if body.get("taskType") not in ("RETRIEVAL_QUERY", "RETRIEVAL_DOCUMENT"):
            return Reply(400, {"error": {"message": "bad taskType"}})
        return Reply(200, {"embedding": {"values": fake_vector(text, self.dims)}})

    def _gemini_batchEmbedContents(self, rec: Recorded, model: str) -> Reply:
        requests = rec.json["requests"]
        if len(requests) > 100:
            return Reply(400, {"error": {"message": "at most 100 requests per batch"}})
        for r in requests:
            if r.get("model") != f"models/{model}":
                return Reply(400, {"error": {"message": "model mismatch"}})
        texts = [r["content"]["parts"][0]["text"] for r in requests]
        if refused := self._too_long(texts):
            return refused
        return Reply(200, {"embeddings": [{"values": v} for v in self._vectors(texts)]})

    def _gemini_asyncBatchEmbedContent(self, rec: Recorded, model: str) -> Reply:
        batch = rec.json["batch"]
        items = batch["inputConfig"]["requests"]["requests"]
        name = self._next_id("gem")
        self.gemini_ops[name] = {"model": model, "items": items, "polls": 0, "display": batch["displayName"]}
        return Reply(200, self._gemini_operation(name))

    def _gemini_operation(self, name: str) -> dict[str, Any]:
        op = self.gemini_ops[name]
        n = len(op["items"])
        done = op["polls"] >= self.batch_polls_before_done or op.get("cancelled")
        state = (
            "BATCH_STATE_CANCELLED"
            if op.get("cancelled")
            else (self.gemini_final_state if done else "BATCH_STATE_RUNNING")
        )
        stats = {
            "requestCount": str(n),
            "successfulRequestCount": str(n if done else 0),
            "pendingRequestCount": str(0 if done else n),
        }
        out: dict[str, Any] = {
            "name": f"batches/{name}",
            "metadata": {
                "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.EmbedContentBatch",
                "model": f"models/{op['model']}",
                "state": state,
                "batchStats": stats,
            },
            "done": bool(done),
        }
        if done and state == "BATCH_STATE_SUCCEEDED":
            rows = [
                {
                    "response": {
                        "embedding": {"values": fake_vector(i["request"]["content"]["parts"][0]["text"])}
                    },
                    "metadata": i.get("metadata", {}),
                }
                for i in op["items"]
            ]
            if self.gemini_output == "file":
                file_id = self._next_id("gemout")
                self.files[file_id] = "".join(
                    json.dumps({"key": r["metadata"].get("key"), "response": r["response"]}) + "\n"
                    for r in rows
                ).encode()
                out["response"] = {"@type": "EmbedContentBatchOutput", "responsesFile": f"files/{file_id}"}
            else:
                out["response"] = {
                    "@type": "EmbedContentBatchOutput",
                    "inlinedResponses": {"inlinedResponses": rows},
                }
        elif done and state != "BATCH_STATE_SUCCEEDED":
            out["error"] = {"code": 13, "message": f"batch ended in {state}"}
        return out

    def _gemini_op(self, rec: Recorded, name: str, *, cancel: bool) -> Reply:
        if rec.headers.get("x-goog-api-key") != self.api_key:
            return Reply(400, {"error": {"message": "API key not valid"}})
        op = self.gemini_ops[name]
        if cancel:
            op["cancelled"] = True
            return Reply(200, {})
        op["polls"] += 1
        return Reply(200, self._gemini_operation(name))

    def _openai_upload(self, rec: Recorded) -> Reply:
        if not self._bearer_ok(rec):
            return self._unauthorized()
        ctype = rec.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            return Reply(400, {"error": {"message": "expected multipart/form-data"}})
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {ctype}\r\n\r\n".encode() + rec.body
        )
        fields: dict[str, bytes] = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            fields[str(name)] = part.get_payload(decode=True) or b""
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return Reply(400, {"error": {"message": "purpose=batch and file are required"}})
        for line in fields["file"].decode().splitlines():
            row = json.loads(line)
            if row["method"] != "POST" or row["url"] != "/v1/embeddings" or not row["custom_id"]:
                return Reply(400, {"error": {"message": f"bad batch line {line[:80]}"}})
        file_id = self._next_id("file-")
        self.files[file_id] = fields["file"]
        return Reply(200, {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(fields["file"])})

    def _openai_create_batch(self, rec: Recorded) -> Reply:
        if not self._bearer_ok(rec):
            return self._unauthorized()
        body = rec.json
        if body.get("endpoint") != "/v1/embeddings" or body.get("completion_window") != "24h":
            return Reply(
                400, {"error": {"message": "endpoint /v1/embeddings and completion_window 24h required"}}
            )
        if body.get("input_file_id") not in self.files:
            return Reply(400, {"error": {"message": "unknown input_file_id"}})
        batch_id = self._next_id("batch_")
        lines = self.files[body["input_file_id"]].decode().splitlines()
        self.openai_batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": "/v1/embeddings",
            "status": "validating",
            "input_file_id": body["input_file_id"],
            "polls": 0,
            "lines": lines,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
        }
        return Reply(200, self._public_batch(batch_id))

    def _public_batch(self, batch_id: str) -> dict[str, Any]:
        return {k: v for k, v in self.openai_batches[batch_id].items() if k not in ("polls", "lines")}

    def _openai_batch(self, rec: Recorded, batch_id: str, *, cancel: bool) -> Reply:
        if not self._bearer_ok(rec):
            return self._unauthorized()
        batch = self.openai_batches[batch_id]
        if cancel:
            batch["status"] = "cancelled"
            return Reply(200, self._public_batch(batch_id))
        batch["polls"] += 1
        if batch["status"] in ("completed", "failed", "expired", "cancelled"):
            return Reply(200, self._public_batch(batch_id))
        if batch["polls"] < self.batch_polls_before_done:
            batch["status"] = "in_progress"
            batch["request_counts"]["completed"] = len(batch["lines"]) // 2
            return Reply(200, self._public_batch(batch_id))
        batch["status"] = self.openai_final_status
        if self.openai_final_status == "completed":
            out_lines = []
            for n, line in enumerate(batch["lines"]):
                row = json.loads(line)
                vec = fake_vector(row["body"]["input"], self.dims)
                out_lines.append(
                    json.dumps(
                        {
                            "id": f"resp_{n}",
                            "custom_id": row["custom_id"],
                            "error": None,
                            "response": {
                                "status_code": 200,
                                "request_id": f"req_{n}",
                                "body": {"object": "list", "data": [{"index": 0, "embedding": vec}]},
                            },
                        }
                    )
                )
            out_id = self._next_id("file-out-")
            self.files[out_id] = ("\n".join(out_lines[::-1]) + "\n").encode()
            batch["output_file_id"] = out_id
            batch["request_counts"]["completed"] = len(batch["lines"])
        else:
            batch["errors"] = {
                "data": [{"code": "batch_failed", "message": f"batch {self.openai_final_status}"}]
            }
        return Reply(200, self._public_batch(batch_id))


# --- helpers shared by the remote-provider tests ---------------------------------------------


class FakeTiming:
    """Records the waits instead of sleeping; a fake clock that only sleeps advance."""

    def __init__(self, rand: float = 0.5) -> None:
        self.sleeps: list[float] = []
        self.now = 1000.0
        self.rand = rand

    def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def timing(self) -> Any:
        from memdir.embeddings.remote import Timing

        return Timing(sleep=self._sleep, clock=lambda: self.now, random=lambda: self.rand)


def make_cfg(
    provider: str = "openai",
    base_url: str | None = None,
    api_key: str | None = "test-key",
    *,
    model: str = "",
    fallback: str = "none",
    offline: bool = False,
    **remote: Any,
) -> Any:
    """A ``MemorySearchConfig`` for ``provider`` pointed at ``base_url`` (camelCase ``remote`` extras)."""
    from memdir.config import MemorySearchConfig

    data: dict[str, Any] = {"provider": provider, "model": model, "fallback": fallback, "offline": offline}
    remote_cfg: dict[str, Any] = {k: v for k, v in remote.items()}
    if base_url is not None:
        remote_cfg["baseUrl"] = base_url
    if api_key is not None:
        remote_cfg["apiKey"] = api_key
    data["remote"] = remote_cfg
    return MemorySearchConfig.model_validate(data)


def unit(vector: list[float]) -> list[float]:
    norm = sum(x * x for x in vector) ** 0.5
    return [x / norm for x in vector]
