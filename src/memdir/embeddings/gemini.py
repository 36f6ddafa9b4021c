"""Google Gemini embeddings (Generative Language API).

Queries use ``models/<m>:embedContent`` with ``taskType: RETRIEVAL_QUERY``; documents use
``:batchEmbedContents`` (≤ 100 per request) with ``RETRIEVAL_DOCUMENT``, so the two sides of
retrieval get the embeddings Gemini tunes for them.  The key travels in ``x-goog-api-key``
(never in the URL, where proxies would log it).  With ``remote.batch.enabled`` documents go
through ``:asyncBatchEmbedContent`` (inline requests) and the returned operation is polled.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from memdir.embeddings.batch import (
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
    clean_base_url,
    parse_json,
    shape_error,
)

GEMINI_DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
#: Inline requests per async batch job (the API caps the request at 20 MB; 8000-byte inputs fit).
GEMINI_BATCH_MAX_REQUESTS = 1000
_OPENAI_SUFFIX = re.compile(r"/openai(?:/.*)?$", re.IGNORECASE)
_TERMINAL_SUFFIXES = ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED")


class GeminiProvider(RemoteEmbeddingProvider):
    id: ClassVar[str] = "gemini"
    default_model: ClassVar[str] = "gemini-embedding-001"
    default_base_url: ClassVar[str] = GEMINI_DEFAULT_BASE_URL
    model_prefixes: ClassVar[tuple[str, ...]] = ("gemini/", "google/", "models/")
    api_key_env: ClassVar[tuple[str, ...]] = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    max_batch_items: ClassVar[int] = 100
    supports_batch_api: ClassVar[bool] = True
    key_includes_endpoint: ClassVar[bool] = True

    @classmethod
    def resolve_base_url(cls, configured: str | None, env: Mapping[str, str]) -> str:
        """A base URL copied from the OpenAI-compatible docs (``…/v1beta/openai/``) loses that suffix."""
        url = super().resolve_base_url(configured, env)
        return clean_base_url(_OPENAI_SUFFIX.sub("", url) or url, cls.id)

    def auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key} if self._api_key else {}

    @property
    def model_path(self) -> str:
        return f"models/{self.model}"

    def _content(self, text: str, task: str) -> dict[str, Any]:
        return {"model": self.model_path, "content": {"parts": [{"text": text}]}, "taskType": task}

    def _request_query(self, text: str, *, timeout: float, deadline: float | None) -> list[Any]:
        body = {"content": {"parts": [{"text": text}]}, "taskType": "RETRIEVAL_QUERY"}
        data = self.post(
            f"{self.base_url}/{self.model_path}:embedContent",
            body,
            timeout=timeout,
            deadline=deadline,
            timeout_label="query",
            inputs=1,
        )
        try:
            return [data["embedding"]["values"]]
        except (KeyError, TypeError):
            raise shape_error(self.id, "no 'embedding.values'" + error_detail(data)) from None

    def _request_documents(self, texts: list[str], *, timeout: float, deadline: float | None = None) -> list[Any]:
        body = {"requests": [self._content(t, "RETRIEVAL_DOCUMENT") for t in texts]}
        data = self.post(
            f"{self.base_url}/{self.model_path}:batchEmbedContents",
            body,
            timeout=timeout,
            deadline=deadline,
            inputs=len(texts),
        )
        try:
            return [item["values"] for item in data["embeddings"]]
        except (KeyError, TypeError):
            raise shape_error(self.id, "no 'embeddings[].values'" + error_detail(data)) from None

    # -- async batch ---------------------------------------------------------------------------
    def _run_batch_job(
        self, texts: list[str], ids: list[str], progress: ProgressCallback | None
    ) -> list[Any]:
        out: list[Any] = []
        for start in range(0, len(texts), GEMINI_BATCH_MAX_REQUESTS):
            stop = min(len(texts), start + GEMINI_BATCH_MAX_REQUESTS)
            out.extend(self._one_job(texts[start:stop], ids[start:stop], progress))
        return out

    def _one_job(self, texts: list[str], ids: list[str], progress: ProgressCallback | None) -> list[Any]:
        display = "memdir-" + hashlib.sha256("".join(ids).encode()).hexdigest()[:16]
        body = {
            "batch": {
                "displayName": display,
                "inputConfig": {
                    "requests": {
                        "requests": [
                            {"request": self._content(t, "RETRIEVAL_DOCUMENT"), "metadata": {"key": cid}}
                            for cid, t in zip(ids, texts, strict=True)
                        ]
                    }
                },
            }
        }
        url = f"{self.base_url}/{self.model_path}:asyncBatchEmbedContent"
        with batch_endpoint_required(self.id, "gemini asyncBatchEmbedContent not available"):
            response = self.batch_request("POST", url, body)
        operation = parse_json(response, self.id, "batch")
        name = operation.get("name") if isinstance(operation, dict) else None
        if not name:
            raise shape_error(self.id, "asyncBatchEmbedContent returned no operation name", "batch")
        label = f"gemini batch {name}"
        if not _gemini_status(operation).terminal:
            operation = poll_job(
                label=label,
                provider=self.id,
                fetch=lambda: parse_json(self.batch_request("GET", f"{self.base_url}/{name}"), self.id, "batch"),
                status_of=_gemini_status,
                settings=self.settings.batch,
                sleep=self.settings.timing.sleep,
                clock=self.settings.timing.clock,
                progress=progress,
                on_timeout=lambda: self.batch_request("POST", f"{self.base_url}/{name}:cancel", {}, retry=False),
            )
        state = _gemini_status(operation).state
        if operation.get("error") or not state.endswith("SUCCEEDED"):
            detail = (operation.get("error") or {}).get("message") or state
            raise RemoteEmbeddingError(f"{label} failed: {detail}", provider=self.id)
        return self._collect(operation, ids, label)

    def _collect(self, operation: dict[str, Any], ids: list[str], label: str) -> list[Any]:
        output = _find_output(operation)
        if output is None:
            raise shape_error(self.id, f"{label} finished without output", "batch")
        if output.get("responsesFile"):
            rows = self._download(str(output["responsesFile"]))
        else:
            inlined = output.get("inlinedResponses")
            rows = inlined.get("inlinedResponses") if isinstance(inlined, dict) else inlined
            if not isinstance(rows, list):
                raise shape_error(self.id, f"{label} output has no responses", "batch")
        by_key: dict[str, Any] = {}
        for position, row in enumerate(rows):
            if not isinstance(row, dict):
                raise shape_error(self.id, f"{label} response {position} is not an object", "batch")
            key = (row.get("metadata") or {}).get("key") or row.get("key")
            if key is None and position < len(ids):
                key = ids[position]  # responses come back in request order
            if row.get("error"):
                message = row["error"].get("message") if isinstance(row["error"], dict) else row["error"]
                raise RemoteEmbeddingError(f"{label} request {key} failed: {message}", provider=self.id)
            response = row.get("response", row)
            try:
                by_key[str(key)] = response["embedding"]["values"]
            except (KeyError, TypeError):
                raise shape_error(self.id, f"{label} response {key} has no embedding", "batch") from None
        return in_request_order(by_key, ids, label, self.id)

    def _download(self, file_name: str) -> list[Any]:
        """``files/<id>`` → ``<root>/download/<version>/files/<id>:download?alt=media`` (JSONL)."""
        import json

        head, _, version = self.base_url.rpartition("/")
        response = self.batch_request(
            "GET", f"{head}/download/{version}/{file_name}:download", params={"alt": "media"}
        )
        rows: list[Any] = []
        for n, line in enumerate(response.text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except (ValueError, RecursionError):
                    raise shape_error(self.id, f"responses file line {n} is not JSON", "batch") from None
        return rows


def _gemini_status(operation: Any) -> JobStatus:
    if not isinstance(operation, dict):
        raise shape_error("gemini", "batch operation is not an object", "batch")
    meta = operation.get("metadata") if isinstance(operation.get("metadata"), dict) else {}
    state = str(meta.get("state") or ("DONE" if operation.get("done") else "PENDING"))
    stats = meta.get("batchStats") or {}
    total = to_int(stats.get("requestCount"))
    done = to_int(stats.get("successfulRequestCount")) + to_int(stats.get("failedRequestCount"))
    terminal = bool(operation.get("done")) or state.endswith(_TERMINAL_SUFFIXES)
    if operation.get("done") and state == "DONE" and not operation.get("error"):
        state = "BATCH_STATE_SUCCEEDED"
    return JobStatus(state=state, terminal=terminal, done=done, total=total)


def _find_output(operation: dict[str, Any]) -> dict[str, Any] | None:
    response = operation.get("response") if isinstance(operation.get("response"), dict) else {}
    meta = operation.get("metadata") if isinstance(operation.get("metadata"), dict) else {}
    for candidate in (response, response.get("output"), meta.get("output")):
        if isinstance(candidate, dict) and ("inlinedResponses" in candidate or "responsesFile" in candidate):
            return candidate
    return None


#: The factory ``registry.REMOTE_PROVIDERS`` names: (cfg, env, *, model, use_remote_endpoint, timing).
create_gemini_provider = GeminiProvider.from_config
