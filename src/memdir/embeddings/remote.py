"""What every HTTP embedding provider shares: endpoint resolution, one guarded httpx client,
retries, accounting, redaction and vector checks.

Design decisions (and the OpenClaw defects they fix, R§18):

* Retries are decided from the HTTP status or the exception type (429, 408, 5xx, timeouts,
  connection errors) - never by a regex over the message, which in OpenClaw retried any error
  whose text happened to contain a 5xx-looking number.
* ``Retry-After`` (seconds or HTTP date) and Gemini's ``RetryInfo.retryDelay`` are honoured; a
  server asking for longer than ``remote.retryAfterMaxSeconds`` fails at once, saying so.
* An exhausted quota (``insufficient_quota``, billing) is reported at once, not retried
  (OpenClaw retried it forever, PR #128945).
* Redirects are never followed to another origin (the API key must only reach the configured
  host); same-origin 307/308, and same-origin redirects of GETs, are followed.
* Every provider's vectors are L2-normalised (OpenClaw normalised only local ones) so cosine
  scores mean the same whichever provider produced them.
* ``offline = true`` refuses any provider whose endpoint is not on this machine (loopback).
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import urlsplit

from memdir.embeddings.base import (
    BATCH_MAX_BYTES,
    HARD_INPUT_LIMIT_BYTES,
    EmbeddingError,
    MissingApiKeyError,
    group_by_bytes,
    normalize,
)
from memdir.embeddings.batch import (
    BatchSettings,
    BatchState,
    ProgressCallback,
    check_custom_ids,
    default_custom_ids,
)
from memdir.embeddings.errors import (
    BatchUnavailableError,
    EmbeddingTimeoutError,
    OfflineError,
    RemoteEmbeddingError,
)

if TYPE_CHECKING:
    import httpx

    from memdir.config import MemorySearchConfig

log = logging.getLogger("memdir.embeddings")

USER_AGENT = "memdir/0.1"
#: Header names that carry credentials: sent, but never part of the provider key or of logs.
SECRET_HEADERS = frozenset({"authorization", "x-goog-api-key", "api-key", "x-api-key"})
BODY_EXCERPT_CHARS = 300


# --- limits ---------------------------------------------------------------------------------

#: Per-model input limits (R§5.2), in "tokens" that we measure as UTF-8 bytes.
MODEL_INPUT_LIMITS: dict[str, int] = {
    "text-embedding-3-small": 8192,
    "text-embedding-3-large": 8192,
    "text-embedding-ada-002": 8191,
    "text-embedding-004": 2048,
    "gemini-embedding-001": 2048,
    "gemini-embedding-2-preview": 8192,
    "voyage-3": 32000,
    "voyage-3-lite": 16000,
    "voyage-code-3": 32000,
}
#: Fallback when the model is not in the table.
PROVIDER_INPUT_LIMITS: dict[str, int] = {"gemini": 2048, "local": 2048}
DEFAULT_INPUT_LIMIT = 8192


def max_input_bytes_for(provider: str, model: str) -> int:
    """Largest chunk (UTF-8 bytes) sent to ``provider``/``model``: table, else default, capped at 8000."""
    limit = MODEL_INPUT_LIMITS.get(model) or PROVIDER_INPUT_LIMITS.get(provider) or DEFAULT_INPUT_LIMIT
    return min(limit, HARD_INPUT_LIMIT_BYTES)


# --- timing, retry policy, settings ----------------------------------------------------------


@dataclass
class Timing:
    """Clock, sleep and randomness, injectable so tests run fast yet see the computed waits."""

    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    random: Callable[[], float] = random.random


@dataclass(frozen=True)
class RetryPolicy:
    """R§5.3 backoff: 500 ms doubling, capped at 8 s, up to +20% jitter, 3 retries."""

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.2
    retry_after_cap: float = 60.0

    def backoff(self, retry: int, rand: float) -> float:
        """Seconds to wait before retry number ``retry`` (0-based); ``rand`` is in [0, 1)."""
        delay = self.base_delay * (2**retry)
        return min(self.max_delay, round(delay * (1 + self.jitter * rand), 3))


@dataclass
class RemoteSettings:
    """Behaviour shared by every remote provider (endpoint-independent parts of ``remote.*``)."""

    query_timeout: float = 60.0
    batch_timeout: float = 120.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    redact: bool = False
    offline: bool = False
    batch: BatchSettings = field(default_factory=BatchSettings)
    timing: Timing = field(default_factory=Timing)

    @classmethod
    def from_config(cls, cfg: MemorySearchConfig, timing: Timing | None = None) -> RemoteSettings:
        remote = cfg.remote
        return cls(
            query_timeout=remote.query_timeout,
            batch_timeout=remote.batch_timeout,
            retry=RetryPolicy(max_retries=remote.max_retries, retry_after_cap=remote.retry_after_max_seconds),
            redact=remote.redact_secrets,
            offline=cfg.offline,
            batch=BatchSettings.from_config(remote.batch),
            timing=timing or Timing(),
        )


# --- accounting -------------------------------------------------------------------------------


class RemoteStats:
    """Requests and bytes a provider sent, so indexing can report its network cost."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.retries = 0
        self.failures = 0
        self.texts = 0
        self.redactions = 0

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self.requests,
                "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received,
                "retries": self.retries,
                "failures": self.failures,
                "texts": self.texts,
                "redactions": self.redactions,
            }


# --- endpoint resolution ---------------------------------------------------------------------


def is_loopback_url(url: str) -> bool:
    """True when ``url`` points at this machine (so ``offline`` and proxies can ignore it)."""
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def clean_base_url(url: str, provider: str) -> str:
    """Trim and drop trailing slashes; refuse anything that is not an absolute http(s) URL."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EmbeddingError(f"{provider} embeddings: base URL {url!r} is not an absolute http(s) URL")
    return url


def first_nonblank(*values: str | None) -> str | None:
    for value in values:
        if value is not None and value.strip():
            return value.strip()
    return None


def strip_model_prefixes(model: str, prefixes: Sequence[str]) -> str:
    """``openai/text-embedding-3-small`` → ``text-embedding-3-small`` (repeatedly, any order)."""
    model = model.strip()
    changed = True
    while changed:
        changed = False
        for prefix in prefixes:
            if model.lower().startswith(prefix):
                model = model[len(prefix) :]
                changed = True
    return model


def merge_headers(*layers: Mapping[str, str] | None) -> dict[str, str]:
    """Later layers win, compared case-insensitively; the later spelling is kept."""
    out: dict[str, str] = {}
    for layer in layers:
        for name, value in (layer or {}).items():
            for existing in [k for k in out if k.lower() == name.lower()]:
                del out[existing]
            out[name] = str(value)
    return out


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    api_key: str | None = field(repr=False)
    #: Non-credential headers sent with every request (Content-Type + provider + ``remote.headers``).
    headers: dict[str, str] = field(default_factory=dict)


# --- HTTP -------------------------------------------------------------------------------------


def body_excerpt(text: str, limit: int = BODY_EXCERPT_CHARS, secrets: Sequence[str] = ()) -> str:
    """A one-line, secret-free excerpt of a response body for error messages."""
    from memdir.redact import redact_text

    flat = " ".join(text.split())
    for secret in secrets:
        if secret:
            flat = flat.replace(secret, "***")
    flat = redact_text(flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date relative to ``now`` (epoch seconds)."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.fromtimestamp(time.time() if now is None else now, UTC)
        seconds = (when - current).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None  # NaN → None


_RETRY_DELAY = re.compile(r'"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"')


def gemini_retry_delay(text: str) -> float | None:
    """Gemini puts its retry hint in ``error.details[].retryDelay`` ("27s") instead of a header."""
    match = _RETRY_DELAY.search(text)
    return float(match.group(1)) if match else None


#: Codes that always mean the account is out of money/quota, whatever else the response says.
_HARD_QUOTA = re.compile(r"insufficient_quota|billing_hard_limit_reached|billing_not_active", re.I)
#: Phrases that mean exhaustion unless the server also says when to come back.
_SOFT_QUOTA = re.compile(
    r"quota[ _]exceeded|exceeded your (?:current )?quota|quota has been exhausted|billing", re.I
)


def is_quota_exhausted(body: str, *, has_retry_hint: bool) -> bool:
    """A 429 that retrying will not fix.

    Gemini's per-minute limits say "You exceeded your current quota ... billing" too, but they
    carry a ``retryDelay``; so soft phrases only count when no retry hint came with them.
    """
    if _HARD_QUOTA.search(body):
        return True
    return not has_retry_hint and bool(_SOFT_QUOTA.search(body))


def _fmt_seconds(value: float) -> str:
    return f"{value:g}"


class HttpClient:
    """One ``httpx.Client`` per provider, with the redirect guard, retries and accounting."""

    def __init__(
        self,
        provider: str,
        base_url: str,
        *,
        settings: RemoteSettings,
        stats: RemoteStats,
        secrets: Sequence[str] = (),
    ) -> None:
        import httpx

        self._httpx = httpx
        #: Scrubbed from error messages (servers sometimes echo the key they rejected).
        self.secrets = tuple(s for s in secrets if s)
        self.provider = provider
        self.settings = settings
        self.stats = stats
        parts = urlsplit(base_url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._loopback = is_loopback_url(base_url)
        self._client_obj: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._closed = False

    @property
    def _client(self) -> httpx.Client:
        """Created on first use: building a provider (e.g. for ``status``) costs no TLS setup."""
        with self._client_lock:
            if self._closed:
                raise EmbeddingError(f"{self.provider} embeddings: provider is closed")
            if self._client_obj is None:
                # Proxies from the environment are for the internet, not for this machine.
                self._client_obj = self._httpx.Client(
                    follow_redirects=False,
                    trust_env=not self._loopback,
                    headers={"User-Agent": USER_AGENT},
                )
            return self._client_obj

    def close(self) -> None:
        with self._client_lock:
            self._closed = True
            if self._client_obj is not None:
                self._client_obj.close()
                self._client_obj = None

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        json_body: Any = None,
        files: Any = None,
        data: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float,
        deadline: float | None = None,
        what: str = "embeddings",
        timeout_label: str = "request",
        retry: bool = True,
    ) -> httpx.Response:
        """Send with retries; return a 2xx response or raise :class:`RemoteEmbeddingError`."""
        httpx = self._httpx
        timing = self.settings.timing
        policy = self.settings.retry
        prefix = f"{self.provider} {what}"
        content = None
        if json_body is not None:
            content = json.dumps(json_body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        attempt = 0
        while True:
            attempt_timeout = timeout
            if deadline is not None:
                remaining = deadline - timing.clock()
                if remaining <= 0:
                    self.stats.add(failures=1)
                    raise EmbeddingTimeoutError(
                        f"{prefix} {timeout_label} timed out after {_fmt_seconds(timeout)}s",
                        provider=self.provider,
                    )
                attempt_timeout = min(timeout, remaining)
            error: RemoteEmbeddingError
            try:
                response = self._send(
                    method,
                    url,
                    headers=headers,
                    content=content,
                    files=files,
                    data=data,
                    params=params,
                    timeout=attempt_timeout,
                    prefix=prefix,
                )
            except httpx.TimeoutException:
                error = EmbeddingTimeoutError(
                    f"{prefix} {timeout_label} timed out after {_fmt_seconds(attempt_timeout)}s",
                    provider=self.provider,
                    retryable=True,
                )
            except httpx.TransportError as exc:  # refused, reset, protocol errors
                error = RemoteEmbeddingError(
                    f"{prefix} failed: connection error ({type(exc).__name__}: {exc})",
                    provider=self.provider,
                    retryable=True,
                )
            except RemoteEmbeddingError as exc:  # a refused redirect
                error = exc
            else:
                if response.status_code < 300:
                    return response
                error = self._http_error(response, prefix)

            if not retry or not error.retryable or attempt >= policy.max_retries:
                self.stats.add(failures=1)
                if attempt:
                    error.args = (f"{error.args[0]} (gave up after {attempt + 1} attempts)",)
                raise error
            wait = policy.backoff(attempt, timing.random())
            if error.retry_after is not None:
                if error.retry_after > policy.retry_after_cap:
                    self.stats.add(failures=1)
                    error.args = (
                        f"{error.args[0]} (server asked to retry after {_fmt_seconds(error.retry_after)}s, "
                        f"longer than remote.retryAfterMaxSeconds={_fmt_seconds(policy.retry_after_cap)})",
                    )
                    raise error
                wait = max(wait, error.retry_after)
            if deadline is not None and timing.clock() + wait >= deadline:
                self.stats.add(failures=1)
                raise error
            log.info("%s: %s; retrying in %.2fs (attempt %d)", prefix, error, wait, attempt + 2)
            self.stats.add(retries=1)
            timing.sleep(wait)
            attempt += 1

    def _send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None,
        files: Any,
        data: Mapping[str, str] | None,
        params: Mapping[str, str] | None,
        timeout: float,
        prefix: str,
    ) -> httpx.Response:
        """One attempt; follows same-origin redirects only."""
        for _hop in range(4):
            request = self._client.build_request(
                method,
                url,
                headers=dict(headers),
                content=content,
                files=files,
                data=data,
                params=params,
                timeout=timeout,
            )
            sent = request.read()
            self.stats.add(requests=1, bytes_sent=len(sent))
            response = self._client.send(request)
            try:
                received = response.read()
            finally:
                response.close()
            self.stats.add(bytes_received=len(received))
            if not response.is_redirect:
                return response
            target = request.url.join(response.headers.get("location", ""))
            same_origin = (target.scheme, target.host, target.port) == (
                request.url.scheme,
                request.url.host,
                request.url.port,
            )
            if not same_origin or (method != "GET" and response.status_code not in (307, 308)):
                raise RemoteEmbeddingError(
                    f"{prefix} failed: {response.status_code} redirect to {target.scheme}://{target.host} "
                    f"refused (memdir only sends requests to {self.origin})",
                    provider=self.provider,
                    status=response.status_code,
                )
            url, params = str(target), None
        raise RemoteEmbeddingError(f"{prefix} failed: too many redirects", provider=self.provider)

    def _http_error(self, response: httpx.Response, prefix: str) -> RemoteEmbeddingError:
        status = response.status_code
        text = response.text
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is None and status in (429, 503):
            retry_after = gemini_retry_delay(text)
        quota = status == 429 and is_quota_exhausted(text, has_retry_hint=retry_after is not None)
        retryable = (status == 429 and not quota) or status == 408 or 500 <= status <= 599
        message = f"{prefix} failed: {status} {body_excerpt(text, secrets=self.secrets)}".rstrip()
        if quota:
            message += " (quota exhausted; not retried - check the provider account's plan and billing)"
        return RemoteEmbeddingError(
            message,
            provider=self.provider,
            status=status,
            retryable=retryable,
            quota_exhausted=quota,
            retry_after=retry_after,
        )


def parse_json(response: httpx.Response, provider: str, what: str = "embeddings") -> Any:
    """The response body as JSON, or a clear error naming the provider (not retried)."""
    try:
        return json.loads(response.content)
    except ValueError:
        raise RemoteEmbeddingError(
            f"{provider} {what} failed: malformed JSON in {response.status_code} response: "
            f"{body_excerpt(response.text, 120)!r}",
            provider=provider,
            status=response.status_code,
        ) from None


def shape_error(provider: str, detail: str, what: str = "embeddings") -> RemoteEmbeddingError:
    return RemoteEmbeddingError(
        f"{provider} {what} failed: unexpected response shape: {detail}", provider=provider
    )


# --- the provider base class ---------------------------------------------------------------


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
        self._http = HttpClient(
            self.id,
            self.base_url,
            settings=self.settings,
            stats=self._stats,
            secrets=[endpoint.api_key or ""],
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
            remote.api_key if use_remote_endpoint else None, *(env.get(name) for name in cls.api_key_env)
        )
        if api_key is None and cls.requires_api_key:
            hint = " or ".join(["memorySearch.remote.apiKey", *cls.api_key_env])
            raise MissingApiKeyError(f'No API key found for provider "{cls.id}" (set {hint}).')
        headers = merge_headers(
            {"Content-Type": "application/json"},
            cls.provider_headers(),
            remote.headers if use_remote_endpoint else None,
        )
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
        """R§5.5 default: SHA-256 of ``{"provider":id,"model":model}``."""
        from memdir.embeddings.base import simple_provider_key

        return simple_provider_key(self.id, self.model)

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
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

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
            "baseUrl": self.base_url,
            "providerKey": self.provider_key,
            "maxInputBytes": self.max_input_bytes,
            "dims": self._dims,
            "redactSecrets": self.settings.redact,
            "stats": self.stats,
            "batch": self.batch_status(),
        }

    def embed_query(self, text: str, *, timeout: float | None = None) -> list[float]:
        """Embed a search query.  ``timeout`` (seconds) bounds the whole call, retries included."""
        timing = self.settings.timing
        attempt_timeout = self.settings.query_timeout
        deadline = None
        if timeout is not None:
            attempt_timeout = min(attempt_timeout, timeout)
            deadline = timing.clock() + timeout
        [payload] = self.outgoing([text])
        vectors = self._request_query(payload, timeout=attempt_timeout, deadline=deadline)
        return self.finish(vectors, 1)[0]

    def embed_batch(
        self,
        texts: Sequence[str],
        *,
        custom_ids: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
    ) -> list[list[float]]:
        """Embed documents in order; via the batch API when enabled, else direct 8000-byte groups."""
        texts = list(texts)
        if not texts:
            return []
        payload = self.outgoing(texts)
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

    def _direct(self, payload: list[str], progress: ProgressCallback | None) -> list[list[float]]:
        out: list[list[float]] = []
        groups = self.groups(payload)
        for group in groups:
            vectors = self._request_documents(
                [payload[i] for i in group], timeout=self.settings.batch_timeout
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers for subclasses -------------------------------------------------------------
    def outgoing(self, texts: Sequence[str]) -> list[str]:
        """The texts as they will leave the machine (redacted when ``remote.redactSecrets``)."""
        self._stats.add(texts=len(texts))
        if not self.settings.redact:
            return list(texts)
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
                raise shape_error(self.id, "an embedding is not a non-empty list of numbers")
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
    ) -> Any:
        response = self._http.request(
            "POST",
            url,
            headers=self.request_headers(),
            json_body=body,
            timeout=timeout,
            deadline=deadline,
            timeout_label=timeout_label,
            what=what,
        )
        return parse_json(response, self.id, what)

    # -- wire format (subclasses) -------------------------------------------------------------
    def _request_query(self, text: str, *, timeout: float, deadline: float | None) -> list[Any]:
        """The vectors the server returned for one query (normally exactly one)."""
        raise NotImplementedError

    def _request_documents(self, texts: list[str], *, timeout: float) -> list[Any]:
        raise NotImplementedError

    def _run_batch_job(
        self, texts: list[str], ids: list[str], progress: ProgressCallback | None
    ) -> list[Any]:
        raise BatchUnavailableError(f"{self.id} has no batch API", provider=self.id)
