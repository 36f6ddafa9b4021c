"""Ollama embeddings through its native API: ``POST <base>/api/embed`` ``{model, input}``, or
``/api/embeddings`` ``{model, prompt}`` one text at a time on an Ollama older than 0.3.0.

No key is needed (one is sent as Bearer if configured, for Ollama behind an authenticating
proxy).  Ollama is never chosen by ``auto`` (R§5.1); when its endpoint is on this machine it
is allowed even with ``offline = true``, since nothing leaves the machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from memdir.embeddings.errors import RemoteEmbeddingError
from memdir.embeddings.http_client import error_detail
from memdir.embeddings.remote import RemoteEmbeddingProvider, clean_base_url, shape_error

OLLAMA_DEFAULT_BASE_URL = "http://127.0.0.1:11434"
_API_SUFFIX = re.compile(r"/(?:v1|api)$", re.IGNORECASE)


class OllamaProvider(RemoteEmbeddingProvider):
    id: ClassVar[str] = "ollama"
    default_model: ClassVar[str] = "nomic-embed-text"
    default_base_url: ClassVar[str] = OLLAMA_DEFAULT_BASE_URL
    model_prefixes: ClassVar[tuple[str, ...]] = ("ollama/",)
    api_key_env: ClassVar[tuple[str, ...]] = ("OLLAMA_API_KEY",)
    base_url_env: ClassVar[tuple[str, ...]] = ("OLLAMA_HOST",)
    requires_api_key: ClassVar[bool] = False
    max_batch_items: ClassVar[int] = 512

    @classmethod
    def resolve_base_url(cls, configured: str | None, env: Mapping[str, str]) -> str:
        """Accept ``OLLAMA_HOST`` forms (``host:port``, ``0.0.0.0``) and drop ``/v1`` or ``/api``."""
        raw = (configured or "").strip() or (env.get("OLLAMA_HOST") or "").strip() or cls.default_base_url
        schemeless = "://" not in raw
        if schemeless:
            raw = f"http://{raw}"
        raw = raw.rstrip("/")
        raw = re.sub(r"^(https?://)0\.0\.0\.0(?=[:/]|$)", r"\g<1>127.0.0.1", raw)
        if re.match(r"^https?://[^/:]+$", raw) and not configured and schemeless:
            # OLLAMA_HOST "host" means Ollama's port, as Ollama reads it; "https://host" means 443
            # (a proxy in front of it), "http://host" 80: they were sent to port 11434
            raw += ":11434"
        return clean_base_url(_API_SUFFIX.sub("", raw), cls.id)

    #: The server has no ``/api/embed`` (Ollama before 0.3.0): texts go one at a time to ``/api/embeddings``.
    legacy_api = False

    def _embed(self, texts: list[str], *, timeout: float, deadline: float | None, label: str) -> list[Any]:
        if not self.legacy_api:
            try:
                data = self.post(f"{self.base_url}/api/embed", {"model": self.model, "input": texts},
                                 timeout=timeout, deadline=deadline, timeout_label=label, inputs=len(texts))
            except RemoteEmbeddingError as exc:
                # Go's "404 page not found" (no such route), not Ollama's 404 for a model not pulled
                if exc.status != 404 or "page not found" not in str(exc):
                    raise
                self.legacy_api = True
            else:
                vectors = data.get("embeddings") if isinstance(data, dict) else None
                if not isinstance(vectors, list):
                    raise shape_error(self.id, "no 'embeddings' list" + error_detail(data))
                return vectors
        out = []
        for text in texts:
            data = self.post(f"{self.base_url}/api/embeddings", {"model": self.model, "prompt": text},
                             timeout=timeout, deadline=deadline, timeout_label=label, inputs=1)
            vector = data.get("embedding") if isinstance(data, dict) else None
            if not isinstance(vector, list):
                raise shape_error(self.id, "no 'embedding' list" + error_detail(data))
            out.append(vector)
        return out

    def _request_query(self, text: str, *, timeout: float, deadline: float | None) -> list[Any]:
        return self._embed([text], timeout=timeout, deadline=deadline, label="query")

    def _request_documents(self, texts: list[str], *, timeout: float, deadline: float | None = None) -> list[Any]:
        return self._embed(texts, timeout=timeout, deadline=deadline, label="batch")


#: The factory ``registry.REMOTE_PROVIDERS`` names: (cfg, env, *, model, use_remote_endpoint, timing).
create_ollama_provider = OllamaProvider.from_config
