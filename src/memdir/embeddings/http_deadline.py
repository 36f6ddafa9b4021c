"""A whole-attempt deadline under httpx, down to the socket reads.

httpx's read timeout restarts with every byte, and it is read once for the whole header phase:
a server trickling its status line and headers a byte at a time held an attempt for as long as it
liked (the body is bounded by :mod:`memdir.embeddings.http_client` as it is read).  The network
streams of each connection pool are wrapped so that every read and write waits at most until the
calling thread's current deadline, set around one attempt with :func:`attempt_deadline`.

It reaches into httpx's transports for their httpcore pools; when a future httpx hides them the
wrapping is skipped (the body bound still holds).  Imported only when a remote client is built.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore

_local = threading.local()


@contextmanager
def attempt_deadline(ends: float) -> Iterator[None]:
    """Bound every socket read and write of this thread by ``ends`` (``time.monotonic``)."""
    outer = getattr(_local, "ends", None)
    _local.ends = ends
    try:
        yield
    finally:
        _local.ends = outer


def _bounded(timeout: float | None, late: type[Exception] = httpcore.ReadTimeout) -> float | None:
    """``timeout`` cut to what is left of this thread's deadline; ``late`` once it has passed."""
    ends = getattr(_local, "ends", None)
    if ends is None:
        return timeout
    left = ends - time.monotonic()
    if left <= 0:
        raise late("attempt deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    """A network stream whose waits end at the attempt's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """Hands out :class:`_Stream`; connecting is bounded by the deadline too."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(host, port, bounded, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bound_transports(client: Any) -> bool:
    """Wrap the network backend of every pool ``client`` may use; False if one could not be."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    wrapped = True
    for transport in transports:
        if transport is None:  # a mount that sends nowhere (e.g. excluded from a proxy)
            continue
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            wrapped = False
        elif not isinstance(backend, _Backend):
            pool._network_backend = _Backend(backend)
    return wrapped


def tls_context() -> Any:
    """The TLS context every remote client verifies servers with: ``SSL_CERT_FILE``, else
    ``SSL_CERT_DIR``, else certifi's bundle.  Why: a server on this machine is reached with
    ``trust_env=False`` (no proxy for it), which made httpx drop those variables too, so a local
    gateway whose certificate a corporate or private CA signed failed "certificate verify failed"
    whatever ``SSL_CERT_FILE`` said (a remote host with the same certificate worked)."""
    import httpx

    return httpx.create_ssl_context(verify=True, trust_env=True)


def proxy_for(client: Any, url: Any) -> str | None:
    """The proxy ``client`` sends a request for ``url`` through (``HTTPS_PROXY``, ``ALL_PROXY``, …,
    as httpx applies them with ``NO_PROXY``), without credentials; ``None`` when it goes direct.
    Why: a proxy that refused or could not be reached failed every call as "connection error
    (ConnectError: [Errno 111] Connection refused)", read as the API being down."""
    import httpx

    try:
        pool = getattr(client._transport_for_url(httpx.URL(str(url))), "_pool", None)
    except Exception:  # a future httpx without it: the error is said without the proxy
        return None
    proxy = getattr(pool, "_proxy_url", None)
    if proxy is None:
        return None
    try:
        host = proxy.host.decode("ascii")
        host = f"[{host}]" if ":" in host else host
        return f"{proxy.scheme.decode('ascii')}://{host}" + (f":{proxy.port}" if proxy.port else "")
    except (AttributeError, UnicodeDecodeError):
        return None


def certificate_problem(exc: BaseException) -> str | None:
    """What to do when ``exc`` (or what caused it) is a failed verification of a server's TLS
    certificate, else ``None``.  Why: the error read as one more connection error ("ConnectError:
    [SSL: CERTIFICATE_VERIFY_FAILED] …"), was retried as if the network might heal it, and nothing
    said how a private or corporate CA is trusted."""
    import ssl

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = cause.verify_message or cause.reason or "certificate verify failed"
            return (f"the server's TLS certificate could not be verified ({reason}); to trust a private or "
                    "corporate CA, set SSL_CERT_FILE to a PEM bundle that holds it")
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def ca_certificates_error(exc: OSError) -> str:
    """Why an HTTPS client could not be built, naming what it read.  Why: a stale ``SSL_CERT_FILE``
    or ``SSL_CERT_DIR`` (which httpx reads) failed every remote call with a bare "[Errno 2] No such
    file or directory" or "[Errno 21] Is a directory", naming neither the file nor the variable."""
    named = " or ".join(f"{k}={os.environ[k]}" for k in ("SSL_CERT_FILE", "SSL_CERT_DIR") if os.environ.get(k))
    return f"cannot load the CA certificates for HTTPS from {named or 'the certifi bundle'}: {exc.strerror or exc}"
