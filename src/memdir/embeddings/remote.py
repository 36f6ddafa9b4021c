"""The base every HTTP embedding provider shares: from configuration to checked vectors.

A subclass (``openai.py``, ``gemini.py``, ``ollama.py``, ...) implements only its wire format;
:class:`RemoteEmbeddingProvider` does the rest, following R§5.1 (building a client from
``remote.*``, environment and defaults), R§5.3 (greedy 8000-byte request groups, provider batch
APIs with fallback to direct calls) and R§5.5 (provider key).  Deliberate differences (R§18):

* Every provider's vectors are L2-normalised (OpenClaw normalised only local ones) so cosine
  scores mean the same whichever provider produced them; count, type and width are checked.
* ``offline = true`` refuses any provider whose endpoint is not on this machine (loopback).
* With ``remote.redactSecrets`` texts are redacted before they leave the machine
  (:meth:`RemoteEmbeddingProvider.outgoing`), and the redactions are counted.

Its parts live next to it (``remote_config``: endpoint, limits, settings; ``retry``; ``http_client``)
and their public names are re-exported here, where they lived before the split.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import urlsplit

from memdir.embeddings.base import (
    BATCH_MAX_BYTES,
    HARD_INPUT_LIMIT_BYTES,
    EmbeddingError,
    MissingApiKeyError,
    QueryVectors,
    group_by_bytes,
    normalize,
    provider_key,
    simple_provider_key,
)
from memdir.embeddings.batch import BatchSettings, BatchState, ProgressCallback, check_custom_ids, default_custom_ids
from memdir.embeddings.errors import BatchUnavailableError, EmbeddingTimeoutError, OfflineError, RemoteEmbeddingError
from memdir.embeddings.http_client import (
    BODY_EXCERPT_CHARS,
    USER_AGENT,
    HttpClient,
    RemoteStats,
    body_excerpt,
    parse_json,
    shape_error,
)
from memdir.embeddings.remote_config import (
    DEFAULT_INPUT_LIMIT,
    MODEL_INPUT_LIMITS,
    PROVIDER_INPUT_LIMITS,
    SECRET_HEADERS,
    Endpoint,
    RemoteSettings,
    check_sendable,
    clean_base_url,
    credential_values,
    expand_env_refs,
    first_nonblank,
    is_loopback_url,
    max_input_bytes_for,
    merge_headers,
    strip_model_prefixes,
)
from memdir.embeddings.retry import RetryPolicy, Timing, gemini_retry_delay, is_quota_exhausted, parse_retry_after
from memdir.redact import shown_url

if TYPE_CHECKING:
    import httpx

    from memdir.config import MemorySearchConfig

#: ``RemoteEmbeddingProvider`` is defined here; the rest lived or was importable here before
#: the split into remote_config, retry and http_client, so it still is.
__all__ = [
    "BATCH_MAX_BYTES", "BODY_EXCERPT_CHARS", "DEFAULT_INPUT_LIMIT", "HARD_INPUT_LIMIT_BYTES",
    "MODEL_INPUT_LIMITS", "PROVIDER_INPUT_LIMITS", "SECRET_HEADERS", "USER_AGENT", "BatchSettings",
    "BatchState", "BatchUnavailableError", "EmbeddingError", "EmbeddingTimeoutError", "Endpoint",
    "HttpClient", "MissingApiKeyError", "OfflineError", "ProgressCallback", "RemoteEmbeddingError",
    "RemoteEmbeddingProvider", "RemoteSettings", "RemoteStats", "RetryPolicy", "Timing",
    "body_excerpt", "check_custom_ids", "clean_base_url", "default_custom_ids", "first_nonblank",
    "gemini_retry_delay", "group_by_bytes", "is_loopback_url", "is_quota_exhausted",
    "max_input_bytes_for", "merge_headers", "normalize", "parse_json", "parse_retry_after",
    "shape_error", "strip_model_prefixes",
]

log = logging.getLogger("memdir.embeddings")


#: The largest response accepted for ``n`` embeddings: :data:`RESPONSE_BASE_BYTES` plus
#: :data:`RESPONSE_BYTES_PER_VECTOR` each (8192 dimensions as pretty-printed JSON fit with room).
RESPONSE_BASE_BYTES = 1 << 20
RESPONSE_BYTES_PER_VECTOR = 512 << 10


def response_cap(inputs: int) -> int:
    """Bytes an answer for ``inputs`` embeddings may take before it is refused as junk."""
    return RESPONSE_BASE_BYTES + max(1, inputs) * RESPONSE_BYTES_PER_VECTOR


def _utf8_safe(text: str) -> str:
    """``text``, or a copy with what UTF-8 cannot encode (lone surrogates) replaced by ``?``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def all_finite(vector: Sequence[float]) -> bool:
    """Whether every value is a finite float (an integer too large for a float is not)."""
    try:
        return all(math.isfinite(x) for x in vector)
    except OverflowError:
        return False


class RemoteEmbeddingProvider:
    """Base for HTTP providers; subclasses implement the wire format only.

    ``embed_batch`` is the indexer's entry point: it uses the provider's batch API when
    ``remote.batch.enabled`` (falling back to direct calls on failure), otherwise it sends
    greedy 8000-byte groups to the direct endpoint, one request per group.
    """

    #: Provider id (``openai``, ``gemini``, ...).
    id: ClassVar[str] = ""
    default_model: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    model_prefixes: ClassVar[tuple[str, ...]] = ()
    api_key_env: ClassVar[tuple[str, ...]] = ()
    base_url_env: ClassVar[tuple[str, ...]] = ()
    requires_api_key: ClassVar[bool] = True
    #: Most inputs the direct endpoint takes in one request.
    max_batch_items: ClassVar[int] = 2048
    supports_batch_api: ClassVar[bool] = False
    #: R§5.5: OpenAI and Gemini fingerprint the endpoint too (base URL, non-secret headers).
    key_includes_endpoint: ClassVar[bool] = False

    def __init__(self, *, model: str, endpoint: Endpoint, settings: RemoteSettings | None = None) -> None:
        self.settings = settings or RemoteSettings()
        self.model = model
        self.base_url = endpoint.base_url
        self._api_key = endpoint.api_key
        self._headers = dict(endpoint.headers)
        self.max_input_bytes = max_input_bytes_for(self.id, model)
        self.provider_key = self.compute_provider_key()
        self._dims: int | None = None
        self._lock = threading.Lock()
        self._stats = RemoteStats()
        self.query_vectors = QueryVectors()
        self._http = HttpClient(
            self.id,
            self.base_url,
            settings=self.settings,
            stats=self._stats,
            secrets=[endpoint.api_key or "", *credential_values(endpoint.headers)],
        )
        self.batch_state = BatchState(enabled=self.settings.batch.enabled, supported=self.supports_batch_api)

    # -- construction from configuration ---------------------------------------------------
    @classmethod
    def resolve_model(cls, model: str | None) -> str:
        stripped = strip_model_prefixes(model or "", cls.model_prefixes)
        return stripped or cls.default_model

    @classmethod
    def resolve_base_url(cls, configured: str | None, env: Mapping[str, str]) -> str:
        raw = (
            first_nonblank(configured, *(env.get(name) for name in cls.base_url_env)) or cls.default_base_url
        )
        return clean_base_url(raw, cls.id)

    @classmethod
    def from_config(
        cls,
        cfg: MemorySearchConfig,
        env: Mapping[str, str] | None = None,
        *,
        model: str | None = None,
        use_remote_endpoint: bool = True,
        timing: Timing | None = None,
    ) -> Self:
        """Build from ``memorySearch``: ``remote.*`` > environment > defaults; blank values skipped.

        ``use_remote_endpoint=False`` (a fallback provider) ignores ``remote.baseUrl/apiKey/
        headers``, which describe the primary provider's endpoint; timeouts, retries, batch and
        redaction settings still apply.
        """
        env = os.environ if env is None else env
        remote = cfg.remote
        base_url = cls.resolve_base_url(remote.base_url if use_remote_endpoint else None, env)
        settings = RemoteSettings.from_config(cfg, timing)
        if settings.offline and not is_loopback_url(base_url):
            raise OfflineError(
                f"{cls.id} embeddings refused: memorySearch.offline = true forbids network providers "
                f"({urlsplit(base_url).hostname}); use the local provider or set offline = false"
            )
        api_key = first_nonblank(
            expand_env_refs(remote.api_key, "remote.apiKey", env) if use_remote_endpoint else None,
            *(env.get(name) for name in cls.api_key_env),
        )
        if api_key is None and cls.requires_api_key:
            hint = " or ".join(["memorySearch.remote.apiKey", *cls.api_key_env])
            raise MissingApiKeyError(f'No API key found for provider "{cls.id}" (set {hint}).')
        configured = {name: expand_env_refs(value, f"remote.headers.{name}", env) or ""
                      for name, value in (remote.headers or {}).items()} if use_remote_endpoint else None
        headers = merge_headers({"Content-Type": "application/json"}, cls.provider_headers(), configured)
        check_sendable(cls.id, api_key, headers)
        return cls(
            model=cls.resolve_model(model if model is not None else cfg.model),
            endpoint=Endpoint(base_url=base_url, api_key=api_key, headers=headers),
            settings=settings,
        )

    @classmethod
    def provider_headers(cls) -> dict[str, str]:
        return {}

    # -- identity ---------------------------------------------------------------------------
    def compute_provider_key(self) -> str:
        """R§5.5: SHA-256 of ``{"provider":id,"model":model}``; with :attr:`key_includes_endpoint`
        of ``{"provider","baseUrl","model","headers"}`` (non-secret headers, sorted)."""
        if not self.key_includes_endpoint:
            return simple_provider_key(self.id, self.model)
        return provider_key(
            {"provider": self.id, "baseUrl": self.base_url, "model": self.model, "headers": self.fingerprint_headers()}
        )

    def fingerprint_headers(self) -> list[list[str]]:
        """Sent headers minus credentials, sorted by name (part of the OpenAI/Gemini key)."""
        return [[k, v] for k, v in sorted(self._headers.items()) if k.lower() not in SECRET_HEADERS]

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def request_headers(self, *, json_body: bool = True) -> dict[str, str]:
        headers = merge_headers(self.auth_headers(), self._headers)
        if not json_body:
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        return headers

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={shown_url(self.base_url)!r})"

    # -- EmbeddingProvider ----------------------------------------------------------------------
    @property
    def dims(self) -> int | None:
        return self._dims

    @property
    def stats(self) -> dict[str, int]:
        """Counters since creation: ``requests``, ``bytes_sent``, ``bytes_received``, ``retries``,
        ``failures``, ``texts``, ``redactions``."""
        return self._stats.as_dict()

    def batch_status(self) -> dict[str, Any]:
        """``enabled``, ``supported``, ``active``, ``failures``, ``limit``, ``jobs``, ``last_error``, ..."""
        return self.batch_state.as_dict()

    def info(self) -> dict[str, Any]:
        """Everything ``memdir status`` may show about this provider (no credentials)."""
        return {
            "provider": self.id,
            "model": self.model,
            "baseUrl": shown_url(self.base_url),
            "providerKey": self.provider_key,
            "maxInputBytes": self.max_input_bytes,
            "dims": self._dims,
            "redactSecrets": self.settings.redact,
            "stats": self.stats,
            "batch": self.batch_status(),
        }

    def embed_query(self, text: str, *, timeout: float | None = None) -> list[float]:
        """Embed a search query.  ``timeout`` (seconds) bounds the whole call, retries included.
        A query asked recently is answered from :class:`QueryVectors` without a request."""
        return self.query_vectors.get_or_embed(self.provider_key, text,
                                               lambda t: self._embed_query(t, timeout=timeout))

    def _embed_query(self, text: str, *, timeout: float | None = None) -> list[float]:
        timing = self.settings.timing
        attempt_timeout = self.settings.query_timeout
        deadline = None
        if timeout is not None:
            attempt_timeout = min(attempt_timeout, timeout)
            deadline = timing.clock() + timeout
        [payload] = self.outgoing([text])
        if len(payload) > self.max_input_bytes // 4:  # (no code point takes more than 4 bytes)
            # as a chunk is, the query is held to the model's input limit: a question of 10,000
            # words (a pasted document, an agent recalling on a long prompt) was refused by
            # OpenAI with a 400, and the search lost its vectors for it
            payload = payload.encode("utf-8")[:self.max_input_bytes].decode("utf-8", "ignore")
        vectors = self._request_query(payload, timeout=attempt_timeout, deadline=deadline)
        return self.finish(vectors, 1)[0]

    def embed_batch(
        self,
        texts: Sequence[str],
        *,
        custom_ids: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        timeout: float | None = None,
    ) -> list[list[float]]:
        """Embed documents in order; via the batch API when enabled, else direct 8000-byte groups.

        ``timeout`` (seconds) bounds the whole call, retries included (a sync run before a search
        has a budget of its own); such a call goes to the direct endpoint, never to a batch job."""
        texts = list(texts)
        if not texts:
            return []
        payload = self.outgoing(texts)
        if timeout is not None:
            return self._direct(payload, progress, deadline=self.settings.timing.clock() + timeout)
        if self.batch_state.active:
            ids = (
                default_custom_ids(texts) if custom_ids is None else check_custom_ids(custom_ids, len(texts))
            )
            try:
                if not self.settings.batch.wait:
                    raise BatchUnavailableError(
                        f"{self.id} batch: remote.batch.wait = false is not supported (memdir needs the "
                        "vectors to build the index); set it to true or disable remote.batch",
                        provider=self.id,
                    )
                vectors = self._run_batch_job(payload, ids, progress)
                result = self.finish(vectors, len(texts))
            except EmbeddingError as exc:
                self.batch_state.record_failure(exc)
                log.warning("%s batch embedding failed, using direct requests: %s", self.id, exc)
            else:
                self.batch_state.record_success()
                return result
        return self._direct(payload, progress)

    def embed_direct(
        self, texts: Sequence[str], *, progress: ProgressCallback | None = None
    ) -> list[list[float]]:
        """Direct endpoint only: greedy groups of ≤ 8000 bytes (R§5.3), one request per group."""
        return self._direct(self.outgoing(list(texts)), progress)

    def _direct(
        self, payload: list[str], progress: ProgressCallback | None, deadline: float | None = None
    ) -> list[list[float]]:
        out: list[list[float]] = []
        groups = self.groups(payload)
        for group in groups:
            timeout = self.settings.batch_timeout
            if deadline is not None:
                timeout = min(timeout, max(0.001, deadline - self.settings.timing.clock()))
            vectors = self._request_documents(
                [payload[i] for i in group], timeout=timeout, deadline=deadline
            )
            out.extend(self.finish(vectors, len(group)))
            if progress is not None:
                progress(f"{self.id} embeddings", len(out), len(payload))
        return out

    def groups(self, texts: Sequence[str]) -> list[list[int]]:
        """Byte-bounded groups, further split so no request exceeds ``max_batch_items``."""
        out: list[list[int]] = []
        for group in group_by_bytes(texts, BATCH_MAX_BYTES):
            for start in range(0, len(group), self.max_batch_items):
                out.append(group[start : start + self.max_batch_items])
        return out

    def close(self) -> None:
        self._http.close()
        self.query_vectors.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers for subclasses -------------------------------------------------------------
    def outgoing(self, texts: Sequence[str]) -> list[str]:
        """The texts as they will leave the machine (redacted when ``remote.redactSecrets``), lone
        surrogates (a JSON ``"\\ud800"`` in a query or a transcript) replaced by ``?``: the request
        body is UTF-8, and their UnicodeEncodeError failed the query's vector or the whole batch."""
        self._stats.add(texts=len(texts))
        texts = [_utf8_safe(t) for t in texts]
        if not self.settings.redact:
            return texts
        from memdir.redact import redact_text

        out = [redact_text(t) for t in texts]
        self._stats.add(redactions=sum(1 for a, b in zip(texts, out, strict=True) if a != b))
        return out

    def finish(self, vectors: Sequence[Any], expected: int) -> list[list[float]]:
        """Check count, type and width of returned vectors; L2-normalise them."""
        if len(vectors) != expected:
            raise shape_error(self.id, f"{len(vectors)} embeddings for {expected} inputs")
        out: list[list[float]] = []
        for vector in vectors:
            if (
                not isinstance(vector, list)
                or not vector
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector)
            ):
                if isinstance(vector, list) and vector and all(isinstance(x, list) for x in vector):
                    raise shape_error(self.id, "an embedding is a list of lists: the server returns a vector per "
                                               "token; have it pool them (llama.cpp server: --pooling mean)")
                raise shape_error(self.id, "an embedding is not a non-empty list of numbers")
            if not all_finite(vector):
                # a broken server (JSON NaN/Infinity, 1e400): zeroing those values, as for the local
                # model, would keep a corrupted vector in the index and the cache for good
                raise shape_error(self.id, "an embedding holds a non-finite number (NaN or infinity)")
            with self._lock:
                if self._dims is None:
                    self._dims = len(vector)
                elif len(vector) != self._dims:
                    raise shape_error(self.id, f"got a {len(vector)}-dim vector, expected {self._dims}")
            out.append(normalize(vector))
        return out

    def post(
        self,
        url: str,
        body: Any,
        *,
        timeout: float,
        deadline: float | None = None,
        timeout_label: str = "batch",
        what: str = "embeddings",
        inputs: int | None = None,
    ) -> Any:
        """POST JSON, return the JSON answer; ``inputs``: how many vectors it should hold, which
        bounds its size (:func:`response_cap`)."""
        response = self._http.request(
            "POST",
            url,
            headers=self.request_headers(),
            json_body=body,
            timeout=timeout,
            deadline=deadline,
            timeout_label=timeout_label,
            what=what,
            max_bytes=None if inputs is None else response_cap(inputs),
        )
        return parse_json(response, self.id, what)

    def batch_request(self, method: str, url: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        """One call to a provider batch API (upload, create, poll, download, cancel): batch
        timeout, errors labelled ``batch``; ``kwargs`` go to :meth:`HttpClient.request`."""
        return self._http.request(
            method,
            url,
            headers=self.request_headers(json_body=body is not None),
            json_body=body,
            timeout=self.settings.batch_timeout,
            what="batch",
            timeout_label="request",
            **kwargs,
        )

    # -- wire format (subclasses) -------------------------------------------------------------
    def _request_query(self, text: str, *, timeout: float, deadline: float | None) -> list[Any]:
        """The vectors the server returned for one query (normally exactly one)."""
        raise NotImplementedError

    def _request_documents(self, texts: list[str], *, timeout: float, deadline: float | None = None) -> list[Any]:
        """The vectors the server returned for ``texts``; ``deadline`` (``timing.clock``) ends retries."""
        raise NotImplementedError

    def _run_batch_job(
        self, texts: list[str], ids: list[str], progress: ProgressCallback | None
    ) -> list[Any]:
        raise BatchUnavailableError(f"{self.id} has no batch API", provider=self.id)
