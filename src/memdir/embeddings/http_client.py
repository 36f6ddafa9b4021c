"""The one guarded HTTP client each remote provider owns: retries, redirect refusal, accounting.

Follows R§5.1 (an HTTP guard that only talks to the configured host; ``<prefix> failed:
<status> <body>`` errors) and R§5.3 (retries and timeouts), with these deliberate differences
(R§18):

* Retries are decided from the HTTP status or the exception type (429, 408, 5xx, timeouts,
  connection errors), never by matching the message; the waits come from
  :mod:`memdir.embeddings.retry`, including ``Retry-After`` and Gemini's ``retryDelay``.  A
  server asking for longer than ``remote.retryAfterMaxSeconds`` fails at once, saying so.
* An exhausted quota is reported at once, not retried.
* Redirects are never followed to another origin (the API key must only reach the configured
  host); same-origin 307/308, and same-origin redirects of GETs, are followed.
* Error messages carry a one-line body excerpt with the API key and anything secret-looking
  redacted (servers sometimes echo the key they rejected).
* A caller's overall deadline bounds all attempts together (query embedding's ``timeout``).
* An attempt's timeout bounds the whole response, not only each read: httpx's read timeout
  restarts with every byte, so a server trickling its answer held a call for ever (the body is
  checked here as it is read, the status line and headers by
  :mod:`memdir.embeddings.http_deadline`).  A body
  larger than the caller's ``max_bytes`` (a gateway streaming junk) is refused while it is read,
  before it fills the memory.

httpx is imported when a client is built, never at module import: the CLI's keyword path
must not pay for it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from memdir.embeddings.base import EmbeddingError
from memdir.embeddings.errors import EmbeddingTimeoutError, RemoteEmbeddingError
from memdir.embeddings.remote_config import RemoteSettings, is_loopback_url
from memdir.embeddings.retry import gemini_retry_delay, is_quota_exhausted, retry_after
from memdir.redact import proxy_credentials, shown_url, url_credentials

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("memdir.embeddings")

#: Forks this process descends from (moved in a forked child: see :attr:`HttpClient._client`).
_FORKS = [0]
#: Clients a forked child inherited: never used there (their kept-alive connections are the
#: parent's sockets) nor closed (a TLS goodbye would go out on the parent's connection).
_INHERITED: list[Any] = []
_FORK_GUARD = threading.Lock()


def _after_fork_in_child() -> None:
    global _FORK_GUARD
    _FORKS[0] += 1
    _FORK_GUARD = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

USER_AGENT = "memdir/0.1"
#: Seconds a connection may take to open (within an attempt's timeout).  Why: a host that drops
#: packets (a firewall, a VPN down, a wrong address) held each attempt for the whole batch timeout
#: just to connect: four attempts, eight minutes, before a first index fell back to keywords.
CONNECT_TIMEOUT = 5.0
BODY_EXCERPT_CHARS = 300


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


def body_excerpt(text: str, limit: int = BODY_EXCERPT_CHARS, secrets: Sequence[str] = ()) -> str:
    """A one-line, secret-free excerpt of a response body for error messages."""
    from memdir.redact import redact_text

    flat = " ".join(text.split())
    for secret in secrets:
        if secret:
            flat = flat.replace(secret, "***")
    flat = redact_text(flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


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
        self.secrets = tuple(s for s in (*secrets, *url_credentials(base_url), *proxy_credentials()) if s)
        self.provider = provider
        self.settings = settings
        self.stats = stats
        parts = urlsplit(shown_url(base_url))
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._loopback = is_loopback_url(base_url)
        self._client_obj: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._closed = False
        self._forks = _FORKS[0]

    def _forget_parents(self) -> None:
        """In a forked child: the client's kept-alive connections are the parent's sockets, and a
        request sent on one crossed with the parent's (one process read the other's answer: the
        vector of another text, or half of it, "malformed JSON in 200 response"), so the child
        makes a client of its own; a lock a parent thread held at the fork is not held here."""
        with _FORK_GUARD:
            if self._forks != _FORKS[0]:
                if self._client_obj is not None:
                    _INHERITED.append(self._client_obj)
                self._client_obj = None
                self._client_lock = threading.Lock()
                self._forks = _FORKS[0]

    @property
    def _client(self) -> httpx.Client:
        """Created on first use: building a provider (e.g. for ``status``) costs no TLS setup."""
        if self._forks != _FORKS[0]:
            self._forget_parents()
        with self._client_lock:
            if self._closed:
                raise EmbeddingError(f"{self.provider} embeddings: provider is closed")
            if self._client_obj is None:
                # Proxies from the environment are for the internet, not for this machine.
                from memdir.embeddings.http_deadline import bound_transports, ca_certificates_error, tls_context

                try:
                    self._client_obj = self._httpx.Client(
                        verify=tls_context(),
                        follow_redirects=False,
                        trust_env=not self._loopback,
                        headers={"User-Agent": USER_AGENT},
                    )
                except OSError as exc:
                    raise EmbeddingError(f"{self.provider} embeddings: {ca_certificates_error(exc)}") from exc
                if not bound_transports(self._client_obj):
                    log.debug("%s: httpx transports not bounded; only response bodies are", self.provider)
            return self._client_obj

    def close(self) -> None:
        if self._forks != _FORKS[0]:
            self._forget_parents()
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
        max_bytes: int | None = None,
    ) -> httpx.Response:
        """Send with retries; return a 2xx response or raise :class:`RemoteEmbeddingError`.

        ``timeout`` bounds each attempt from sending to the last byte; ``max_bytes`` caps the
        (decoded) body of a response."""
        from memdir.embeddings.http_deadline import attempt_deadline, certificate_problem, proxy_for

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
                with attempt_deadline(time.monotonic() + attempt_timeout):  # real time, as httpx's
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
                        max_bytes=max_bytes,
                    )
            except httpx.ConnectTimeout:
                via = proxy_for(self._client, url)
                error = EmbeddingTimeoutError(
                    f"{prefix} failed: could not connect to {f'the proxy {via}' if via else self.origin} within "
                    f"{_fmt_seconds(min(attempt_timeout, CONNECT_TIMEOUT))}s (is the host down, or a firewall "
                    "dropping the connection?)",
                    provider=self.provider,
                    retryable=True,
                )
            except httpx.TimeoutException:
                error = EmbeddingTimeoutError(
                    f"{prefix} {timeout_label} timed out after {_fmt_seconds(attempt_timeout)}s",
                    provider=self.provider,
                    retryable=True,
                )
            except httpx.TransportError as exc:  # refused, reset, protocol errors
                untrusted = certificate_problem(exc)
                if untrusted:  # retrying cannot help
                    self.stats.add(failures=1)
                    raise RemoteEmbeddingError(f"{prefix} failed: {untrusted}", provider=self.provider) from None
                via = proxy_for(self._client, url)
                if via:
                    through = f" through the proxy {via} (set by the *_PROXY environment variables)"
                elif isinstance(exc, httpx.ConnectError):  # which host: "Name or service not known" named none
                    through = f" to {self.origin}"
                else:
                    through = ""
                error = RemoteEmbeddingError(
                    f"{prefix} failed: connection error{through} ({type(exc).__name__}: {exc})",
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
        max_bytes: int | None = None,
    ) -> httpx.Response:
        """One attempt; follows same-origin redirects only."""
        ends = time.monotonic() + timeout  # real time, as httpx's own timeouts
        for _hop in range(4):
            request = self._client.build_request(
                method,
                url,
                headers=dict(headers),
                content=content,
                files=files,
                data=data,
                params=params,
                timeout=self._httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
            )
            sent = request.read()
            self.stats.add(requests=1, bytes_sent=len(sent))
            streamed = self._client.send(request, stream=True)
            try:
                received = self._read_body(streamed, ends, timeout, max_bytes, prefix)
            finally:
                streamed.close()
            # the body as read, in a response of its own (its encoding already undone); the headers
            # as bytes: decoded, one that is not ASCII ('X-Served-By: café', a UTF-8 Location) could
            # not be encoded again and every request failed with a bare UnicodeEncodeError
            response = self._httpx.Response(
                streamed.status_code,
                headers=[(k, v) for k, v in streamed.headers.raw
                         if k.lower() not in (b"content-encoding", b"content-length", b"transfer-encoding")],
                content=received,
                request=request,
            )
            self.stats.add(bytes_received=len(received))
            # a 3xx without a Location (300, 304, a broken gateway) is an answer, not a redirect: it
            # was "followed" to the same URL, the request sent four times, then "too many redirects"
            if not response.has_redirect_location:
                return response
            target = request.url.join(response.headers.get("location", ""))
            same_origin = (target.scheme, target.host, target.port) == (
                request.url.scheme,
                request.url.host,
                request.url.port,
            )
            # where it points, with its port: "redirect to http://127.0.0.1 refused (memdir only sends
            # requests to http://127.0.0.1:8080)" read as a contradiction
            where = f"{target.scheme}://{target.netloc.decode('ascii').rpartition('@')[2]}"
            if not same_origin:
                why = (f"memdir only sends requests to {self.origin}; if the API has moved there, "
                       "point the base URL at it")
            elif method != "GET" and response.status_code not in (307, 308):
                where += target.path
                why = f"a {response.status_code} would send the {method} again without its body"
            else:
                why = ""
            if why:
                raise RemoteEmbeddingError(
                    f"{prefix} failed: {response.status_code} redirect to {where} refused ({why})",
                    provider=self.provider,
                    status=response.status_code,
                )
            url, params = str(target), None
        raise RemoteEmbeddingError(f"{prefix} failed: too many redirects", provider=self.provider)

    def _read_body(
        self, response: httpx.Response, ends: float, timeout: float, max_bytes: int | None, prefix: str
    ) -> bytes:
        """The decoded body, given up at ``ends`` (monotonic) or past ``max_bytes`` (an error
        status keeps what came until then: its status decides, its text is only quoted)."""
        parts: list[bytes] = []
        size = 0
        for part in self._decoded(response, prefix):
            size += len(part)
            if max_bytes is not None and size > max_bytes:
                if response.status_code >= 300:
                    parts.append(part)
                    break
                raise RemoteEmbeddingError(
                    f"{prefix} failed: {response.status_code} response larger than {max_bytes:,} bytes; "
                    "refused (is baseUrl an embeddings endpoint?)",
                    provider=self.provider,
                    status=response.status_code,
                )
            parts.append(part)
            if time.monotonic() > ends:
                raise self._httpx.ReadTimeout(f"response not complete after {_fmt_seconds(timeout)}s")
        return b"".join(parts)

    def _decoded(self, response: httpx.Response, prefix: str) -> Iterator[bytes]:
        """The body's parts with its ``Content-Encoding`` undone.  Why: a body that is not what its
        encoding says (a proxy's gzip header on a plain page, a cut deflate stream) raised httpx's
        DecodingError, which searches and warnings showed bare ("Error -3 while decompressing data:
        incorrect header check"), naming neither the provider nor the response."""
        try:
            yield from response.iter_bytes()
        except self._httpx.DecodingError as exc:
            if response.status_code >= 300:  # its status decides; its text is only quoted
                return
            encoding = response.headers.get("content-encoding", "")
            raise RemoteEmbeddingError(
                f"{prefix} failed: the {response.status_code} response's body is not valid {encoding} as its "
                f"Content-Encoding says ({exc}); is a proxy altering it?",
                provider=self.provider,
                status=response.status_code,
            ) from None

    def _http_error(self, response: httpx.Response, prefix: str) -> RemoteEmbeddingError:
        status = response.status_code
        text = response.text
        wait = retry_after(response.headers)
        if wait is None and status in (429, 503):
            wait = gemini_retry_delay(text)
        quota = status == 429 and is_quota_exhausted(text, has_retry_hint=wait is not None)
        retryable = (status == 429 and not quota) or status == 408 or 500 <= status <= 599
        message = f"{prefix} failed: {status} {body_excerpt(text, secrets=self.secrets)}".rstrip()
        if quota:
            message += " (quota exhausted; not retried - check the provider account's plan and billing)"
        if status in (404, 405):  # the path asked for, as a base URL given with one ("…/v1/embeddings") doubles it
            url = response.request.url
            message += f" ({response.request.method} {url.scheme}://{url.netloc.decode('ascii').rpartition('@')[2]}{url.path})"
        return RemoteEmbeddingError(
            message,
            provider=self.provider,
            status=status,
            retryable=retryable,
            quota_exhausted=quota,
            retry_after=wait,
        )


def parse_json(response: httpx.Response, provider: str, what: str = "embeddings") -> Any:
    """The response body as JSON, or a clear error naming the provider (not retried)."""
    try:
        return json.loads(response.content)
    except RecursionError:  # "[[[[…" a few hundred thousand deep: Python's recursion limit, bare
        raise RemoteEmbeddingError(
            f"{provider} {what} failed: malformed JSON in {response.status_code} response: nested too deeply "
            f"({len(response.content):,} bytes)",
            provider=provider,
            status=response.status_code,
        ) from None
    except ValueError:
        raise RemoteEmbeddingError(
            f"{provider} {what} failed: malformed JSON in {response.status_code} response: "
            f"{body_excerpt(response.text, 120)!r}",
            provider=provider,
            status=response.status_code,
        ) from None


def error_detail(data: Any) -> str:
    """`` (the response carries an error: <message>)`` when a response, even a 200, holds an
    ``error`` (an object with a ``message``, or a string as Ollama sends) instead of vectors."""
    error = data.get("error") if isinstance(data, dict) else None
    if not error:
        return ""
    message = error.get("message") if isinstance(error, dict) else error
    return f" (the response carries an error: {body_excerpt(str(message or error), 160)})"


def shape_error(provider: str, detail: str, what: str = "embeddings") -> RemoteEmbeddingError:
    return RemoteEmbeddingError(
        f"{provider} {what} failed: unexpected response shape: {detail}", provider=provider
    )

