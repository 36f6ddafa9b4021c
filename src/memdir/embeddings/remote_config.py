"""What configuration makes of a remote provider: its endpoint, its model's input limit and
the settings that shape every request.

* Endpoint (R§5.1 "Clients"): base URL, API key and headers come from ``remote.*`` >
  environment > provider default, blank values skipped; model prefixes such as ``openai/``
  are stripped; later header layers win case-insensitively.  Deviation: a base URL that is not
  an absolute http(s) URL is refused here, with the provider's name, rather than failing on the
  first request.
* Input limits (R§5.2): the per-model table, else the provider's fallback, capped at 8000
  UTF-8 bytes.
* Credential headers (R§5.5) are listed once, in :data:`SECRET_HEADERS`: they are sent but
  never enter the provider key or a log line.
* ``offline = true`` needs to know which endpoints stay on this machine: :func:`is_loopback_url`.
* :class:`RemoteSettings` gathers the endpoint-independent ``remote.*`` values (timeouts,
  retries, redaction, batch) that the HTTP client and the provider base share.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from memdir.embeddings.base import HARD_INPUT_LIMIT_BYTES, EmbeddingError, MissingApiKeyError
from memdir.embeddings.batch import BatchSettings
from memdir.embeddings.retry import RetryPolicy, Timing
from memdir.redact import shown_url

if TYPE_CHECKING:
    from memdir.config import MemorySearchConfig

#: Header names that carry credentials: sent, but never part of the provider key or of logs.
SECRET_HEADERS = frozenset({"authorization", "x-goog-api-key", "api-key", "x-api-key"})
#: Header names whose values are scrubbed from error messages as the key is (as ``config show``
#: masks them): ``Cookie``, ``Proxy-Authorization``, ``X-Auth-Token``, ...
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|cookie|password", re.IGNORECASE)


def credential_values(headers: Mapping[str, str]) -> list[str]:
    """The values of ``headers`` that are credentials, and a ``Bearer``/``Basic`` value's token."""
    out: list[str] = []
    for name, value in headers.items():
        if _CREDENTIAL_HEADER.search(name) and value.strip():
            out.append(value.strip())
            scheme, _, token = value.strip().partition(" ")
            if token.strip() and scheme.lower() in ("bearer", "basic", "token"):
                out.append(token.strip())
    return out


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


# --- settings -------------------------------------------------------------------------------


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


# --- endpoint resolution ---------------------------------------------------------------------


def is_loopback_url(url: str) -> bool:
    """True when ``url`` points at this machine (so ``offline`` and proxies can ignore it)."""
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    # 0.0.0.0 and [::] reach this machine too: a local server's own log says "running on
    # http://0.0.0.0:8000" (vLLM, LM Studio), and a base URL copied from it was refused by
    # offline = true and sent through HTTP_PROXY
    return address.is_loopback or address.is_unspecified


def clean_base_url(url: str, provider: str) -> str:
    """Trim and drop trailing slashes; refuse anything that is not an absolute http(s) URL to which
    a path can be appended.  Why: a bad port or bracket (``localhost:abc``, ``[::1``) raised a bare
    ValueError or httpx.InvalidURL on every request, a host with a space was retried as a DNS
    failure, and a query or fragment swallowed the ``/embeddings`` appended after it."""
    url = url.strip().rstrip("/")
    problem = None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
    except ValueError as exc:
        problem = f"is not a valid URL ({exc})"
    else:
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problem = "is not an absolute http(s) URL"
        elif any(c.isspace() for c in parts.netloc):
            problem = "has a space in its host"
        elif parts.query or parts.fragment or url.endswith(("?", "#")):
            problem = "has a query or fragment (memdir appends the endpoint's path to it)"
    if problem:
        raise EmbeddingError(f"{provider} embeddings: base URL {shown_url(url)!r} {problem}")
    return url


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def unsendable(value: str) -> bool:
    """A header value HTTP cannot carry as is: a line break, another control character, non-ASCII."""
    return not value.isascii() or any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value)


def check_sendable(provider: str, api_key: str | None, headers: Mapping[str, str]) -> None:
    """Refuse an API key or ``remote.headers`` entry that cannot go into an HTTP header, naming it
    but never showing a value.  Why: a key pasted with a line break (or NUL) failed every request
    as a "connection error", retried four times, the key itself in the message; a non-ASCII one
    (a "…" copied from a web page) raised a bare UnicodeEncodeError."""
    if api_key is not None and unsendable(api_key):
        raise EmbeddingError(f"{provider} embeddings: the API key holds a line break, control or non-ASCII "
                             "character (pasted with it?), which an HTTP header cannot carry")
    for name, value in headers.items():
        if not _HEADER_NAME.match(name):
            raise EmbeddingError(f"{provider} embeddings: remote.headers: {name!r} is not an HTTP header name")
        if unsendable(value):
            raise EmbeddingError(f"{provider} embeddings: remote.headers: the value of {name!r} holds a line "
                                 "break, control or non-ASCII character, which an HTTP header cannot carry")


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env_refs(value: str | None, key: str, env: Mapping[str, str]) -> str | None:
    """``value`` with every ``${NAME}`` replaced by that environment variable, as for
    ``longTermMemory.embedding.apiKey``; one that is unset or empty is a :class:`MissingApiKeyError`
    naming it and ``key`` (a missing key: ``auto`` passes the provider over, searches use keywords).

    Why: ``remote.apiKey = "${OPENAI_API_KEY}"`` was sent as it is, the literal text as the bearer
    token, and every request failed "invalid API key" while ``config show`` printed the reference
    as one it understood."""
    if not value or "${" not in value:
        return value

    def sub(match: re.Match[str]) -> str:
        found = env.get(match.group(1))
        if not found or not found.strip():
            raise MissingApiKeyError(f"memorySearch.{key} = {value!r}: environment variable {match.group(1)} "
                                     "is not set")
        return found.strip()

    return _ENV_REF.sub(sub, value)


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
