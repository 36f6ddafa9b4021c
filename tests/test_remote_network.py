"""Hostile networks between memdir and a remote model, over real loopback servers: TLS with a
private CA, proxies, broken content encodings, redirects and oversized answers from the chat API.
Each test failed before the fix it guards."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memdir.agent import ChatClient, ChatError
from memdir.chat_cli import describe_failure
from memdir.embeddings.errors import RemoteEmbeddingError
from memdir.embeddings.registry import create_provider
from memdir.testing.provider_server import FakeTiming, ProviderServer, Reply, make_cfg

FIXTURES = Path(__file__).parent / "fixtures"
#: A self-signed certificate for localhost, 127.0.0.1 and ::1 (valid until 2126), and its key.
TLS = (str(FIXTURES / "tls-localhost.pem"), str(FIXTURES / "tls-localhost.key"))


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer(api_key="test-key") as srv:
        yield srv


@pytest.fixture
def tls_server() -> Iterator[ProviderServer]:
    with ProviderServer(api_key="test-key", tls=TLS) as srv:
        yield srv


def openai(url: str, clock: FakeTiming | None = None, **remote: Any) -> Any:
    cfg = make_cfg("openai", url, **remote)
    return create_provider("openai", cfg, {}, timing=(clock or FakeTiming()).timing())


# --- TLS ---------------------------------------------------------------------------------------


def test_a_local_https_server_is_trusted_through_ssl_cert_file(tls_server: ProviderServer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # a server on this machine is reached without proxies (trust_env=False), which dropped
    # SSL_CERT_FILE too: a local gateway with a private CA's certificate failed whatever it said
    monkeypatch.setenv("SSL_CERT_FILE", TLS[0])
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with openai(f"{tls_server.url}/v1") as p:
        assert len(p.embed_batch(["a", "b"])) == 2
    client = ChatClient(f"{tls_server.url}/v1", "m", api_key="test-key", timeout=10)
    try:  # the chat client: its TLS is set up as the providers' (a 404 here: the server has no chat)
        with pytest.raises(Exception) as caught:
            client.complete([{"role": "user", "content": "hi"}])
        assert getattr(caught.value, "status", None) == 404, describe_failure(caught.value, client)
    finally:
        client.close()


def test_an_untrusted_certificate_says_how_to_trust_a_ca_and_is_not_retried(
        tls_server: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # it read as one more 'connection error (ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] …)',
    # retried three times, with no word of how a corporate CA is trusted
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    clock = FakeTiming()
    with openai(f"{tls_server.url}/v1", clock) as p, pytest.raises(RemoteEmbeddingError) as caught:
        p.embed_batch(["a"])
    message = str(caught.value)
    assert "TLS certificate could not be verified (self-signed certificate)" in message, message
    assert "SSL_CERT_FILE" in message and not caught.value.retryable
    assert clock.sleeps == []
    client = ChatClient(f"{tls_server.url}/v1", "m", api_key="test-key", timeout=10)
    try:
        with pytest.raises(Exception) as chat_error:
            client.complete([{"role": "user", "content": "hi"}])
        said = describe_failure(chat_error.value, client)
        assert "TLS certificate could not be verified" in said and "SSL_CERT_FILE" in said, said
    finally:
        client.close()


# --- bodies that are not what they say -----------------------------------------------------------


def test_a_body_that_is_not_its_content_encoding_names_the_provider(server: ProviderServer) -> None:
    # a proxy's 'Content-Encoding: gzip' on a plain body: searches and index warnings said only
    # 'Error -3 while decompressing data: incorrect header check' (httpx's DecodingError, bare)
    server.script("/embeddings", Reply(200, b"plain, not gzip", {"Content-Encoding": "gzip"}))
    with openai(f"{server.url}/v1", maxRetries=0) as p, pytest.raises(RemoteEmbeddingError) as caught:
        p.embed_batch(["a"])
    assert str(caught.value).startswith("openai embeddings failed: the 200 response's body is not valid gzip"), \
        caught.value
    # an error status whose body is broken keeps its status: a 503 is still retried
    server.script("/embeddings", Reply(503, b"busy", {"Content-Encoding": "gzip"}))
    clock = FakeTiming()
    with openai(f"{server.url}/v1", clock) as p:
        assert len(p.embed_batch(["a"])) == 1
    assert len(clock.sleeps) == 1


def test_a_header_that_is_not_ascii_is_read_not_fatal(server: ProviderServer) -> None:
    # the answer was rebuilt from its decoded headers, which httpx could not encode again: a proxy's
    # 'X-Served-By: café' (or a UTF-8 Location) failed every request with a bare UnicodeEncodeError
    body = {"data": [{"index": 0, "embedding": [1.0, 2.0, 2.0, 0, 0, 0, 0, 0]}]}
    server.script("/embeddings", Reply(200, body, {"X-Served-By": "café-proxy"}))
    with openai(f"{server.url}/v1", maxRetries=0) as p:
        assert p.embed_batch(["a"]) == [[1 / 3, 2 / 3, 2 / 3, 0, 0, 0, 0, 0]]
    server.script("/embeddings", Reply(429, {"error": {"message": "slow down"}},
                                       {"Retry-After": "2", "X-Served-By": "café-proxy"}))
    clock = FakeTiming()
    with openai(f"{server.url}/v1", clock) as p:
        assert len(p.embed_batch(["a"])) == 1
    assert clock.sleeps == [2.0]


# --- redirects -----------------------------------------------------------------------------------


def test_a_redirect_status_without_a_location_is_an_error_status(server: ProviderServer) -> None:
    # it was followed to the same URL: the request sent 4 times, then 'too many redirects'
    server.script("/embeddings", Reply(307, "gateway lost its way"), Reply(307, "gateway lost its way"))
    with openai(f"{server.url}/v1", maxRetries=0) as p, pytest.raises(RemoteEmbeddingError) as caught:
        p.embed_batch(["a"])
    assert str(caught.value) == "openai embeddings failed: 307 gateway lost its way"
    assert server.paths("POST") == ["/v1/embeddings"]


# --- the chat API --------------------------------------------------------------------------------

REPLY = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}


def chat(server: ProviderServer, timeout: float = 10) -> ChatClient:
    return ChatClient(f"{server.url}/v1", "m", api_key="test-key", timeout=timeout)


def test_the_chat_api_names_a_redirect_and_follows_one_on_its_origin(server: ProviderServer) -> None:
    # a redirect was read as the reply: 'chat API returned 301 with a body that is not JSON (no
    # content type): ', naming neither the redirect nor where it pointed
    client = chat(server)
    try:
        server.script("/chat/completions", Reply(301, "", {"Location": "https://api.example.com/v1/chat/completions"}))
        with pytest.raises(ChatError) as caught:
            client.complete([{"role": "user", "content": "hi"}])
        assert str(caught.value) == (
            "chat API answered 301: a redirect to https://api.example.com/v1/chat/completions, not followed (the API "
            f"key is only sent to {server.url}/v1; if the API is there now, make https://api.example.com/v1 the base "
            "URL)")
        # a gateway adding a slash: followed on the same origin, the key and the body sent again
        server.script("/v1/chat/completions", Reply(308, "", {"Location": "/v1/chat/completions/"}))
        server.script("/v1/chat/completions/", Reply(200, REPLY))
        assert client.complete([{"role": "user", "content": "hi"}]).content == "hello"
        again = server.requests[-1]
        assert again.path == "/v1/chat/completions/" and again.headers["authorization"] == "Bearer test-key"
        assert again.json["messages"] == [{"role": "user", "content": "hi"}]
    finally:
        client.close()


def test_a_huge_chat_reply_is_refused_while_it_is_read(server: ProviderServer) -> None:
    # the reply was read whole: a gateway (or a wrong base URL) streaming 300 MB held 940 MB of
    # memory before the turn failed as 'not JSON'
    size = 300 << 20
    sent = []

    def junk() -> Iterator[bytes]:
        for _ in range(size >> 20):
            sent.append(1)
            yield b" " * (1 << 20)

    server.script("/chat/completions", Reply(200, junk, {"Content-Length": str(size)}))
    client = chat(server)
    try:
        with pytest.raises(ChatError, match=r"chat API's 200 reply is larger than 33,554,432 bytes; refused"):
            client.complete([{"role": "user", "content": "hi"}])
    finally:
        client.close()
    time.sleep(0.2)
    assert len(sent) < 64  # the client hung up past the 32 MB cap


def test_a_chat_reply_that_is_not_its_content_encoding_is_named(server: ProviderServer) -> None:
    # the turn failed with zlib's bare 'Error -3 while decompressing data: incorrect header check'
    server.script("/chat/completions", Reply(200, b"plain", {"Content-Encoding": "gzip"}))
    client = chat(server)
    try:
        with pytest.raises(ChatError, match=r"chat API's 200 reply is not valid gzip as its Content-Encoding says"):
            client.complete([{"role": "user", "content": "hi"}])
    finally:
        client.close()


def test_a_chat_retry_after_too_long_to_wait_says_so(server: ProviderServer) -> None:
    # 'chat API returned 429: slow down', as if the server had not said when to come back
    server.script("/chat/completions", Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "3600"}))
    client = chat(server)
    try:
        with pytest.raises(ChatError) as caught:
            client.complete([{"role": "user", "content": "hi"}])
    finally:
        client.close()
    assert str(caught.value).endswith("slow down\"}} (it asked to be sent the request again in 3600 s; memdir "
                                      "waits 20 s at most)"), caught.value
    assert len(server.requests) == 1


# --- proxies -------------------------------------------------------------------------------------


def _only_proxy(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", url)


def test_a_proxy_that_cannot_be_reached_is_named(server: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # every call failed as 'connection error (ConnectError: [Errno 111] Connection refused)',
    # read as the API being down, with no word of the proxy it went to
    _only_proxy(monkeypatch, server.url)  # a working proxy: the request reaches the API through it
    with openai("http://embeddings.example.invalid/v1", maxRetries=0) as p:
        assert len(p.embed_batch(["a"])) == 1
    assert server.requests[-1].headers["host"] == "embeddings.example.invalid"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    _only_proxy(monkeypatch, f"http://user:proxy-pw@127.0.0.1:{closed}")
    with openai("http://embeddings.example.invalid/v1", maxRetries=0) as p, \
            pytest.raises(RemoteEmbeddingError) as caught:
        p.embed_batch(["a"])
    assert str(caught.value).startswith(f"openai embeddings failed: connection error through the proxy "
                                        f"http://127.0.0.1:{closed} (set by the *_PROXY environment variables) "
                                        "(ConnectError: "), caught.value
    assert "proxy-pw" not in str(caught.value)
    client = ChatClient("http://chat.example.invalid/v1", "m", api_key="test-key", timeout=10)
    try:
        with pytest.raises(Exception) as chat_error:
            client.complete([{"role": "user", "content": "hi"}])
        said = describe_failure(chat_error.value, client)
    finally:
        client.close()
    assert said.startswith("cannot reach the chat API at http://chat.example.invalid/v1 through the proxy "
                           f"http://127.0.0.1:{closed} (set by"), said


def test_azure_openai_is_sent_its_key_as_it_reads_it(server: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # Azure OpenAI reads the key from an api-key header: sent as 'Authorization: Bearer <key>' (a
    # token of Microsoft Entra ID there) the right key was refused with a 401, and the chat said to
    # check it
    _only_proxy(monkeypatch, server.url)  # the request reaches "Azure" through the proxy
    server.script("/chat/completions", Reply(200, REPLY))
    client = ChatClient("http://myres.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-06-01", "gpt-4o",
                        api_key="azure-key", timeout=10)
    try:
        assert client.complete([{"role": "user", "content": "hi"}]).content == "hello"
    finally:
        client.close()
    sent = server.requests[-1]
    assert sent.headers["host"] == "myres.openai.azure.com"
    assert sent.path == "/openai/deployments/gpt-4o/chat/completions"
    assert sent.query == {"api-version": ["2024-06-01"]}
    assert sent.headers.get("api-key") == "azure-key" and "authorization" not in sent.headers


# --- hosts that cannot be reached ----------------------------------------------------------------


def test_a_host_that_cannot_be_reached_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # 'connection error (ConnectError: [Errno -2] Name or service not known)' named no host: a typo
    # in the base URL (which status does not show) could not be told from the network being down
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with openai(f"http://user:url-pw@127.0.0.1:{closed}/v1", maxRetries=0) as p, \
            pytest.raises(RemoteEmbeddingError) as caught:
        p.embed_batch(["a"])
    assert str(caught.value).startswith(f"openai embeddings failed: connection error to http://user:***@127.0.0.1:"
                                        f"{closed} (ConnectError: "), caught.value


def test_json_nested_too_deeply_is_a_malformed_answer(server: ProviderServer) -> None:
    # '[[[[…' 200,000 deep: a bare RecursionError ('maximum recursion depth exceeded while decoding
    # a JSON array') was the index warning and the search note, naming no provider
    server.script("/embeddings", Reply(200, b"[" * 200_000 + b"]" * 200_000))
    with openai(f"{server.url}/v1", maxRetries=0) as p, pytest.raises(RemoteEmbeddingError) as caught:
        p.embed_batch(["a"])
    assert str(caught.value) == ("openai embeddings failed: malformed JSON in 200 response: nested too deeply "
                                 "(400,000 bytes)")


def test_a_base_url_at_the_any_address_stays_on_this_machine(server: ProviderServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # 'http://0.0.0.0:8000/v1', copied from a local server's 'running on http://0.0.0.0:8000', was
    # refused by offline = true as a network provider and sent through HTTP_PROXY
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    _only_proxy(monkeypatch, f"http://127.0.0.1:{closed}")
    with openai(f"http://0.0.0.0:{server.port}/v1", offline=True, maxRetries=0) as p:
        assert len(p.embed_batch(["a"])) == 1
    client = ChatClient(f"http://0.0.0.0:{server.port}/v1", "m", api_key="test-key", timeout=10)
    try:
        server.script("/chat/completions", Reply(200, REPLY))
        assert client.complete([{"role": "user", "content": "hi"}]).content == "hello"
    finally:
        client.close()


def test_a_host_that_drops_connections_costs_seconds_not_the_batch_timeout() -> None:
    # a host that never completes the connection (a firewall dropping packets, a wrong address):
    # each attempt waited the whole batch timeout (120 s) to connect, four attempts, eight minutes
    # before a first index (or the first search building it) fell back to keywords
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        held = socket.create_connection(("127.0.0.1", port))  # fills the backlog: later SYNs are dropped
        client = ChatClient(f"http://127.0.0.1:{port}/v1", "m", api_key="test-key", timeout=60)
        try:
            with openai(f"http://127.0.0.1:{port}/v1", maxRetries=0, batchTimeoutSeconds=60) as p, \
                    pytest.raises(RemoteEmbeddingError) as caught:
                p.embed_batch(["a"])
            with pytest.raises(Exception) as chat_error:  # the chat: 60 s a turn before
                client.complete([{"role": "user", "content": "hi"}])
            said = describe_failure(chat_error.value, client)
        finally:
            client.close()
            held.close()
    assert str(caught.value) == (f"openai embeddings failed: could not connect to http://127.0.0.1:{port} within "
                                 "5s (is the host down, or a firewall dropping the connection?)")
    assert said == (f"could not connect to the chat API at http://127.0.0.1:{port}/v1 within 5 s (is the host down, "
                    "or a firewall dropping the connection?)")


def test_status_deep_probes_a_provider_that_does_not_answer_within_the_query_timeout(
        server: ProviderServer, tmp_path: Path) -> None:
    # the probe took the batch route: each attempt waited the batch timeout (120 s) and was retried,
    # so 'memdir status --deep' against a server that accepted and never answered took 6 minutes
    from memdir.api import Memory

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- The heron nests by the weir.\n")
    cfg = {"memorySearch": {"provider": "openai", "sync": {"onSearch": False},
                            "remote": {"baseUrl": f"{server.url}/v1", "apiKey": "test-key",
                                       "queryTimeoutSeconds": 1, "batchTimeoutSeconds": 60}}}
    server.script("/embeddings", *[Reply(500, {"error": {"message": "stuck"}}, delay=3)] * 5)
    with Memory(ws, config=cfg) as mem:
        probe = mem.status(deep=True)["embeddingProbe"]
    assert not probe["ok"] and "openai embeddings batch timed out after" in probe["error"], probe
