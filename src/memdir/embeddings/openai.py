"""OpenAI embeddings, and the OpenAI-compatible wire format Voyage and Mistral reuse.

``POST <baseUrl>/embeddings`` with ``{model, input: [...]}`` and Bearer auth; vectors are read
from ``data[].embedding`` ordered by ``index``.  ``baseUrl`` may point at any OpenAI-compatible
server (vLLM, LM Studio, llama.cpp, a gateway).  With ``remote.batch.enabled`` documents go
through the OpenAI Batch API (JSONL upload, ``/batches`` job, polling, output download).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from memdir.embeddings.batch import (
    OPENAI_BATCH_MAX_REQUESTS,
    JobStatus,
    ProgressCallback,
    batch_endpoint_required,
    in_request_order,
    poll_job,
    to_int,
)
from memdir.embeddings.errors import RemoteEmbeddingError
from memdir.embeddings.http_client import error_detail
from memdir.embeddings.remote import (
    RemoteEmbeddingProvider,
    body_excerpt,
    parse_json,
    shape_error,
)
from memdir.redact import shown_url

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
OPENAI_TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


class OpenAICompatibleProvider(RemoteEmbeddingProvider):
    """``/embeddings`` with ``data[].embedding``: shared by OpenAI, Voyage and Mistral."""

    def request_body(self, texts: list[str], kind: str) -> dict[str, Any]:
        """``kind`` is ``query`` or ``document`` (Voyage turns it into ``input_type``)."""
        return {"model": self.model, "input": texts}

    def _embeddings(
        self, texts: list[str], kind: str, *, timeout: float, deadline: float | None
    ) -> list[Any]:
        data = self.post(
            f"{self.base_url}/embeddings",
            self.request_body(texts, kind),
            timeout=timeout,
            deadline=deadline,
            timeout_label="query" if kind == "query" else "batch",
            inputs=len(texts),
        )
        return read_openai_data(data, self.id)

    def _request_query(self, text: str, *, timeout: float, deadline: float | None) -> list[Any]:
        return self._embeddings([text], "query", timeout=timeout, deadline=deadline)

    def _request_documents(self, texts: list[str], *, timeout: float, deadline: float | None = None) -> list[Any]:
        return self._embeddings(texts, "document", timeout=timeout, deadline=deadline)


def read_openai_data(data: Any, provider: str) -> list[Any]:
    """``data[].embedding`` in ``index`` order (servers may answer out of order).

    The indexes must be 0..n-1, each once (or absent everywhere: then the list order counts);
    a duplicated or missing index would silently give one text another text's vector.
    """
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise shape_error(provider, "no 'data' list" + error_detail(data))
    if not all(isinstance(item, dict) and "embedding" in item for item in items):
        raise shape_error(provider, "an item in 'data' has no 'embedding'")
    indexes = [item.get("index") for item in items]
    if all(i is None for i in indexes):
        return [_floats(item["embedding"], provider) for item in items]
    if sorted(i if isinstance(i, int) and not isinstance(i, bool) else -1 for i in indexes) != list(
        range(len(items))
    ):
        raise shape_error(provider, f"the 'index' fields of 'data' are not 0..{len(items) - 1}, each once")
    return [_floats(item["embedding"], provider) for item in sorted(items, key=lambda item: item["index"])]


def _floats(embedding: Any, provider: str) -> Any:
    """An embedding as sent, or decoded when a server sends ``encoding_format: "base64"`` (float32,
    little-endian) although floats were asked for, as some OpenAI-compatible gateways do."""
    if not isinstance(embedding, str):
        return embedding
    import base64
    import binascii

    import numpy as np

    try:
        raw = base64.b64decode(embedding, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if not raw or len(raw) % 4:
        raise shape_error(provider, "an embedding is a string but not base64-encoded float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(float).tolist()


class OpenAIProvider(OpenAICompatibleProvider):
    id: ClassVar[str] = "openai"
    default_model: ClassVar[str] = "text-embedding-3-small"
    default_base_url: ClassVar[str] = OPENAI_DEFAULT_BASE_URL
    model_prefixes: ClassVar[tuple[str, ...]] = ("openai/",)
    api_key_env: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    base_url_env: ClassVar[tuple[str, ...]] = ("OPENAI_BASE_URL",)
    max_batch_items: ClassVar[int] = 2048
    supports_batch_api: ClassVar[bool] = True
    key_includes_endpoint: ClassVar[bool] = True

    # -- OpenAI Batch API ----------------------------------------------------------------------
    def _run_batch_job(
        self, texts: list[str], ids: list[str], progress: ProgressCallback | None
    ) -> list[Any]:
        by_id: dict[str, Any] = {}
        for start in range(0, len(texts), OPENAI_BATCH_MAX_REQUESTS):
            stop = min(len(texts), start + OPENAI_BATCH_MAX_REQUESTS)
            by_id.update(self._one_job(texts[start:stop], ids[start:stop], progress))
        return in_request_order(by_id, ids, "openai batch", self.id)

    def _batch_call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.batch_request(method, f"{self.base_url}{path}", body, **kwargs)

    def _one_job(self, texts: list[str], ids: list[str], progress: ProgressCallback | None) -> dict[str, Any]:
        lines = [
            json.dumps(
                {
                    "custom_id": cid,
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": {"model": self.model, "input": t},
                },
                ensure_ascii=False,
                separators=(",", ":"),
            )
            for cid, t in zip(ids, texts, strict=True)
        ]
        jsonl = ("\n".join(lines) + "\n").encode("utf-8")
        with batch_endpoint_required(self.id, f"openai batch API not available at {shown_url(self.base_url)}"):
            upload = self._batch_call(
                "POST",
                "/files",
                files={"file": ("memdir-embeddings.jsonl", jsonl, "application/jsonl")},
                data={"purpose": "batch"},
            )
        file_id = _field(parse_json(upload, self.id, "batch"), "id")
        created = parse_json(
            self._batch_call(
                "POST",
                "/batches",
                {
                    "input_file_id": file_id,
                    "endpoint": "/v1/embeddings",
                    "completion_window": "24h",
                    "metadata": {"source": "memdir"},
                },
            ),
            self.id,
            "batch",
        )
        batch_id = _field(created, "id")
        label = f"openai batch {batch_id}"
        final = poll_job(
            label=label,
            provider=self.id,
            fetch=lambda: parse_json(self._batch_call("GET", f"/batches/{batch_id}"), self.id, "batch"),
            status_of=_openai_status,
            settings=self.settings.batch,
            sleep=self.settings.timing.sleep,
            clock=self.settings.timing.clock,
            progress=progress,
            on_timeout=lambda: self._batch_call("POST", f"/batches/{batch_id}/cancel", retry=False),
        )
        status = final.get("status")
        if status != "completed":
            raise RemoteEmbeddingError(f"{label} {status}: {_openai_batch_errors(final)}", provider=self.id)
        output_file_id = final.get("output_file_id")
        if not output_file_id:
            detail = _openai_batch_errors(final)
            if final.get("error_file_id"):
                content = self._batch_call("GET", f"/files/{final['error_file_id']}/content")
                detail = body_excerpt(content.text)
            raise RemoteEmbeddingError(f"{label} completed without output: {detail}", provider=self.id)
        content = self._batch_call("GET", f"/files/{output_file_id}/content")
        return _parse_openai_output(content.text, label, self.id)


def _field(data: Any, name: str) -> Any:
    if not isinstance(data, dict) or not data.get(name):
        raise shape_error("openai", f"no {name!r} in {body_excerpt(json.dumps(data), 120)}", "batch")
    return data[name]


def _openai_status(job: Any) -> JobStatus:
    if not isinstance(job, dict):
        raise shape_error("openai", "batch object is not an object", "batch")
    counts = job.get("request_counts") or {}
    state = str(job.get("status", "unknown"))
    return JobStatus(
        state=state,
        terminal=state in OPENAI_TERMINAL,
        done=to_int(counts.get("completed")) + to_int(counts.get("failed")),
        total=to_int(counts.get("total")),
    )


def _openai_batch_errors(job: Mapping[str, Any]) -> str:
    errors = (job.get("errors") or {}).get("data") if isinstance(job.get("errors"), dict) else None
    if errors:
        return (
            "; ".join(str(e.get("message", e)) for e in errors[:3] if isinstance(e, dict)) or "unknown error"
        )
    return "no details"


def _parse_openai_output(text: str, label: str, provider: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            cid = row["custom_id"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise shape_error(provider, f"{label} output line {n} is not a batch result", "batch") from None
        response = row.get("response") or {}
        if row.get("error") or to_int(response.get("status_code", 200)) >= 400:
            detail = (
                row.get("error") or (response.get("body") or {}).get("error") or response.get("status_code")
            )
            raise RemoteEmbeddingError(f"{label} request {cid} failed: {detail}", provider=provider)
        try:
            out[cid] = read_openai_data(response.get("body"), provider)[0]
        except IndexError:
            raise shape_error(provider, f"{label} result {cid} has no embedding", "batch") from None
    return out


#: The factory ``registry.REMOTE_PROVIDERS`` names: (cfg, env, *, model, use_remote_endpoint, timing).
create_openai_provider = OpenAIProvider.from_config
