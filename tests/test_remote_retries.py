"""Retries, timeouts, error reporting, redirects, redaction, grouping and accounting over loopback HTTP."""

from __future__ import annotations

import email.utils
import socket
import time
from collections.abc import Iterator

import pytest

from memdir.embeddings.base import EmbeddingError
from memdir.embeddings.errors import EmbeddingTimeoutError, RemoteEmbeddingError
from memdir.embeddings.gemini import create_gemini_provider
from memdir.embeddings.openai import OpenAIProvider, create_openai_provider
from memdir.embeddings.registry import RUNTIME_FALLBACK_PATTERN
from memdir.embeddings.remote import RetryPolicy, is_quota_exhausted, parse_retry_after
from memdir.testing.provider_server import FakeTiming, ProviderServer, Reply, fake_vector, make_cfg, unit


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as srv:
        yield srv


@pytest.fixture
def clock() -> FakeTiming:
    return FakeTiming(rand=0.5)  # jitter = 10% of the base delay


def openai(server: ProviderServer, clock: FakeTiming, **remote: object) -> OpenAIProvider:
    return create_openai_provider(make_cfg("openai", f"{server.url}/v1", **remote), {}, timing=clock.timing())


RATE_LIMITED = {
    "error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}
}


# --- retry policy -------------------------------------------------------------------------------


def test_backoff_schedule_doubles_with_jitter_and_caps_at_8s() -> None:
    policy = RetryPolicy()
    assert [policy.backoff(i, 0.0) for i in range(3)] == [0.5, 1.0, 2.0]
    assert [policy.backoff(i, 0.5) for i in range(3)] == [0.55, 1.1, 2.2]
    assert all(policy.backoff(i, 0.999) <= policy.backoff(i, 0.0) * 1.2 for i in range(3))
    assert [policy.backoff(i, 0.999) for i in (4, 5, 9)] == [8.0, 8.0, 8.0]


def test_retry_after_parsing() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    now = 1_700_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0


def test_quota_classification() -> None:
    assert is_quota_exhausted('{"error":{"code":"insufficient_quota"}}', has_retry_hint=True)
    assert is_quota_exhausted("Quota exceeded for this project", has_retry_hint=False)
    assert is_quota_exhausted("check your plan and billing details", has_retry_hint=False)
    # Gemini's per-minute limit uses the same words but says when to come back: a rate limit.
    assert not is_quota_exhausted("You exceeded your current quota ... billing", has_retry_hint=True)
    assert not is_quota_exhausted("Resource has been exhausted (e.g. check quota).", has_retry_hint=False)
    assert not is_quota_exhausted("Too Many Requests", has_retry_hint=False)


# --- retries over HTTP --------------------------------------------------------------------------


def test_429_honours_retry_after_seconds(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(429, RATE_LIMITED, {"Retry-After": "2"}))
    p = openai(server, clock)
    assert p.embed_query("x") == unit(fake_vector("x"))
    assert clock.sleeps == [2.0]
    assert len(server.requests) == 2
    assert p.stats["retries"] == 1 and p.stats["requests"] == 2


def test_429_honours_retry_after_http_date(server: ProviderServer, clock: FakeTiming) -> None:
    when = email.utils.formatdate(time.time() + 4, usegmt=True)
    server.script("/embeddings", Reply(429, RATE_LIMITED, {"Retry-After": when}))
    openai(server, clock).embed_query("x")
    [wait] = clock.sleeps
    assert 2.5 <= wait <= 4.0


@pytest.mark.parametrize("skew", [3600, -3600])
def test_a_retry_after_date_counts_from_the_servers_clock(server: ProviderServer, clock: FakeTiming, skew: int) -> None:
    """This machine's clock an hour behind the server's (a VM resumed with an old time), or ahead:
    a Retry-After date 4 s after the server's Date was counted from this clock, 3604 s (past what
    memdir waits: the call failed at once, 'server asked to retry after 3604s') or none at all."""
    sent = time.time() + skew
    dates = {"Date": email.utils.formatdate(sent, usegmt=True),
             "Retry-After": email.utils.formatdate(sent + 4, usegmt=True)}
    server.script("/embeddings", Reply(429, RATE_LIMITED, dates))
    assert openai(server, clock).embed_query("x") == unit(fake_vector("x"))
    assert clock.sleeps == [4.0]


def test_small_retry_after_never_shortens_our_backoff(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(429, RATE_LIMITED, {"Retry-After": "0"}))
    openai(server, clock).embed_query("x")
    assert clock.sleeps == [0.55]


def test_5xx_retried_with_exponential_backoff(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(500, "oops"), Reply(502, "Bad Gateway"), Reply(503, "unavailable"))
    p = openai(server, clock)
    assert p.embed_batch(["a"]) == [unit(fake_vector("a"))]
    assert clock.sleeps == [0.55, 1.1, 2.2]
    assert len(server.requests) == 4


def test_gives_up_after_four_attempts(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", *[Reply(500, {"error": {"message": "server exploded"}})] * 5)
    p = openai(server, clock)
    with pytest.raises(RemoteEmbeddingError) as info:
        p.embed_query("x")
    assert info.value.status == 500
    assert str(info.value).startswith("openai embeddings failed: 500 ")
    assert "server exploded" in str(info.value)
    assert "gave up after 4 attempts" in str(info.value)
    assert len(server.requests) == 4
    assert clock.sleeps == [0.55, 1.1, 2.2]
    assert RUNTIME_FALLBACK_PATTERN.search(str(info.value))


def test_max_retries_is_configurable(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", *[Reply(503, "busy")] * 10)
    with pytest.raises(RemoteEmbeddingError):
        openai(server, clock, maxRetries=6).embed_query("x")
    assert clock.sleeps == [0.55, 1.1, 2.2, 4.4, 8.0, 8.0]
    assert len(server.requests) == 7


def test_401_is_not_retried_and_the_key_is_not_echoed(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(401, {"error": {"message": "Incorrect API key provided: test-key"}}))
    with pytest.raises(RemoteEmbeddingError) as info:
        openai(server, clock).embed_query("x")
    assert info.value.status == 401 and not info.value.retryable
    assert str(info.value).startswith("openai embeddings failed: 401 ")
    assert "test-key" not in str(info.value)
    assert len(server.requests) == 1 and clock.sleeps == []


def test_exhausted_quota_fails_at_once(server: ProviderServer, clock: FakeTiming) -> None:
    body = {
        "error": {
            "message": "You exceeded your current quota",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    server.script("/embeddings", Reply(429, body))
    with pytest.raises(RemoteEmbeddingError) as info:
        openai(server, clock).embed_query("x")
    assert info.value.quota_exhausted
    assert "openai embeddings failed: 429" in str(info.value) and "insufficient_quota" in str(info.value)
    assert len(server.requests) == 1 and clock.sleeps == []


def test_gemini_rate_limit_with_retry_delay_is_retried(server: ProviderServer, clock: FakeTiming) -> None:
    body = {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}],
        }
    }
    server.script(":embedContent", Reply(429, body))
    p = create_gemini_provider(make_cfg("gemini", f"{server.url}/v1beta"), {}, timing=clock.timing())
    p.embed_query("x")
    assert clock.sleeps == [3.0]


def test_resource_exhausted_rate_limit_is_retried(server: ProviderServer, clock: FakeTiming) -> None:
    server.script(
        "/embeddings", Reply(429, {"error": {"message": "Resource has been exhausted (e.g. check quota)."}})
    )
    openai(server, clock).embed_query("x")
    assert len(server.requests) == 2


def test_5xx_looking_text_in_a_4xx_is_not_retried(server: ProviderServer, clock: FakeTiming) -> None:
    # R§18: OpenClaw retried any message containing a 5xx-looking number.
    server.script("/embeddings", Reply(400, {"error": {"message": "input 503 exceeds limit of 500 tokens"}}))
    with pytest.raises(RemoteEmbeddingError) as info:
        openai(server, clock).embed_query("x")
    assert info.value.status == 400
    assert len(server.requests) == 1


def test_retry_after_beyond_cap_fails_at_once(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(429, RATE_LIMITED, {"Retry-After": "3600"}))
    with pytest.raises(RemoteEmbeddingError, match="retryAfterMaxSeconds=60"):
        openai(server, clock).embed_query("x")
    assert len(server.requests) == 1 and clock.sleeps == []


# --- timeouts and transport errors --------------------------------------------------------------


def test_query_timeout_is_reported(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(200, {"data": []}, delay=1.0))
    p = openai(server, clock, queryTimeoutSeconds=0.2, maxRetries=0)
    started = time.monotonic()
    with pytest.raises(EmbeddingTimeoutError, match=r"^openai embeddings query timed out after 0\.2s$"):
        p.embed_query("x")
    assert time.monotonic() - started < 0.9


def test_slow_attempt_is_retried(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(200, {"data": []}, delay=1.0))
    p = openai(server, clock, batchTimeoutSeconds=0.2)
    assert p.embed_batch(["a"]) == [unit(fake_vector("a"))]
    assert clock.sleeps == [0.55]
    assert p.stats["retries"] == 1


def test_batch_timeout_message_after_all_attempts(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", *[Reply(200, {"data": []}, delay=0.6)] * 2)
    p = openai(server, clock, timeoutSeconds=0.15, maxRetries=1)
    with pytest.raises(
        EmbeddingTimeoutError, match=r"batch timed out after 0\.15s \(gave up after 2 attempts\)"
    ):
        p.embed_batch(["a"])


def test_caller_deadline_bounds_the_whole_query(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(200, {"data": []}, delay=1.0))
    p = openai(server, clock)
    with pytest.raises(EmbeddingTimeoutError):
        p.embed_query("x", timeout=0.2)
    assert len(server.requests) == 1  # no retry can fit in what is left of the budget
    assert clock.sleeps == []


def test_connection_refused_is_retried_then_reported(clock: FakeTiming) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens here
    p = create_openai_provider(make_cfg("openai", f"http://127.0.0.1:{port}/v1"), {}, timing=clock.timing())
    with pytest.raises(RemoteEmbeddingError, match="connection error") as info:
        p.embed_query("x")
    assert info.value.retryable
    assert clock.sleeps == [0.55, 1.1, 2.2]
    assert p.stats["requests"] == 4 and p.stats["failures"] == 1


# --- malformed answers --------------------------------------------------------------------------


def test_malformed_json_is_a_clear_error(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(200, "<html>gateway</html>", {"Content-Type": "text/html"}))
    with pytest.raises(
        RemoteEmbeddingError, match="openai embeddings failed: malformed JSON in 200 response"
    ):
        openai(server, clock).embed_query("x")
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"nothing": 1}, "no 'data' list"),
        ({"data": [{"index": 0}]}, "has no 'embedding'"),
        ({"data": []}, "0 embeddings for 1 inputs"),
        ({"data": [{"index": 0, "embedding": ["a", "b"]}]}, "not a non-empty list of numbers"),
    ],
)
def test_unexpected_shapes(server: ProviderServer, clock: FakeTiming, body: object, message: str) -> None:
    server.script("/embeddings", Reply(200, body))
    with pytest.raises(RemoteEmbeddingError, match=message):
        openai(server, clock).embed_query("x")


def test_changing_dimensions_is_an_error(server: ProviderServer, clock: FakeTiming) -> None:
    p = openai(server, clock)
    p.embed_query("x")
    server.script("/embeddings", Reply(200, {"data": [{"index": 0, "embedding": [1.0, 2.0, 3.0]}]}))
    with pytest.raises(RemoteEmbeddingError, match="3-dim vector, expected 8"):
        p.embed_query("y")


# --- redirects ----------------------------------------------------------------------------------


def test_cross_host_redirect_is_refused(server: ProviderServer, clock: FakeTiming) -> None:
    with ProviderServer() as elsewhere:
        target = f"http://localhost:{elsewhere.port}/v1/embeddings"
        server.script("/embeddings", Reply(307, "", {"Location": target}))
        with pytest.raises(RemoteEmbeddingError, match=f"307 redirect to http://localhost:{elsewhere.port} refused "
                           rf"\(memdir only sends requests to http://127\.0\.0\.1:{server.port}; ") as info:
            openai(server, clock).embed_query("x")
        assert not info.value.retryable
        assert elsewhere.requests == []


def test_same_origin_redirect_is_followed(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/v1/embeddings", Reply(308, "", {"Location": "/v2/embeddings"}))
    vec = openai(server, clock).embed_query("x")
    assert server.paths() == ["/v1/embeddings", "/v2/embeddings"]
    assert server.requests[1].json == server.requests[0].json
    assert server.requests[1].headers["authorization"] == "Bearer test-key"
    assert vec == unit(fake_vector("x"))


def test_post_redirect_that_would_drop_the_body_is_refused(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/v1/embeddings", Reply(302, "", {"Location": "/v2/embeddings"}))
    with pytest.raises(RemoteEmbeddingError, match=rf"302 redirect to http://127\.0\.0\.1:{server.port}/v2/embeddings "
                       r"refused \(a 302 would send the POST again without its body\)"):
        openai(server, clock).embed_query("x")
    assert server.paths() == ["/v1/embeddings"]


# --- redaction ----------------------------------------------------------------------------------

SECRET = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


def test_redaction_keeps_planted_secrets_on_this_machine(server: ProviderServer, clock: FakeTiming) -> None:
    server.forbidden.append(SECRET)
    p = openai(server, clock, redactSecrets=True)
    texts = [f"deploy notes: OPENAI_API_KEY={SECRET}", "harmless text", f"token {SECRET} again"]
    vecs = p.embed_batch(texts)
    p.embed_query(f"what was {SECRET}?")
    assert server.violations == []
    assert len(vecs) == 3
    sent = server.requests[0].json["input"]
    assert sent[1] == "harmless text"
    assert SECRET not in sent[0] and sent[0].startswith("deploy notes: OPENAI_API_KEY=sk-pro")
    assert p.stats["redactions"] == 3


def test_without_redaction_the_secret_would_leave(server: ProviderServer, clock: FakeTiming) -> None:
    server.forbidden.append(SECRET)
    with pytest.raises(RemoteEmbeddingError, match="400"):
        openai(server, clock).embed_query(f"OPENAI_API_KEY={SECRET}")
    assert server.violations == [SECRET]


# --- grouping and accounting --------------------------------------------------------------------


def test_groups_of_8000_bytes_vector_53(server: ProviderServer, clock: FakeTiming) -> None:
    texts = [c * n for c, n in zip("abcd", [3000, 3000, 3000, 7000], strict=True)]
    p = openai(server, clock)
    vecs = p.embed_batch(texts)
    assert [r.json["input"] for r in server.requests] == [texts[0:2], texts[2:3], texts[3:4]]
    assert vecs == [unit(fake_vector(t)) for t in texts]


def test_oversized_input_goes_alone(server: ProviderServer, clock: FakeTiming) -> None:
    texts = ["x" * 9000, "y" * 10, "z" * 10]
    openai(server, clock).embed_batch(texts)
    assert [len(r.json["input"]) for r in server.requests] == [1, 2]


def test_multibyte_text_is_grouped_by_utf8_bytes(server: ProviderServer, clock: FakeTiming) -> None:
    texts = ["é" * 2500, "é" * 2500]  # 5000 bytes each, 2500 characters
    openai(server, clock).embed_batch(texts)
    assert [len(r.json["input"]) for r in server.requests] == [1, 1]


def test_stats_count_requests_and_bytes(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/embeddings", Reply(503, "busy"))
    p = openai(server, clock)
    p.embed_batch(["a" * 5000, "b" * 5000])
    p.embed_query("q")
    stats = p.stats
    assert stats["requests"] == len(server.requests) == 4
    assert stats["bytes_sent"] == sum(len(r.body) for r in server.requests)
    assert stats["retries"] == 1
    assert stats["texts"] == 3
    assert stats["bytes_received"] > 0


def test_progress_is_reported_per_group(server: ProviderServer, clock: FakeTiming) -> None:
    seen: list[tuple[str, int, int]] = []
    openai(server, clock).embed_batch(["a" * 6000, "b" * 6000, "c"], progress=lambda *a: seen.append(a))
    assert seen == [("openai embeddings", 1, 3), ("openai embeddings", 3, 3)]


def test_empty_batch_sends_nothing(server: ProviderServer, clock: FakeTiming) -> None:
    assert openai(server, clock).embed_batch([]) == []
    assert server.requests == []


def test_closed_provider_refuses_work(server: ProviderServer, clock: FakeTiming) -> None:
    p = openai(server, clock)
    p.embed_query("x")
    p.close()
    with pytest.raises(EmbeddingError, match="closed"):
        p.embed_query("y")


def test_concurrent_callers_share_one_provider(server: ProviderServer, clock: FakeTiming) -> None:
    from concurrent.futures import ThreadPoolExecutor

    p = openai(server, clock)
    texts = [f"file {i} chunk" for i in range(16)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda t: p.embed_batch([t]), texts))
    assert [r[0] for r in results] == [unit(fake_vector(t)) for t in texts]
    assert p.stats["requests"] == len(server.requests) == 16
    assert p.stats["bytes_sent"] == sum(len(r.body) for r in server.requests)


def test_info_has_no_credentials(server: ProviderServer, clock: FakeTiming) -> None:
    p = openai(server, clock)
    p.embed_query("x")
    info = p.info()
    assert info["provider"] == "openai" and info["dims"] == 8 and info["stats"]["requests"] == 1
    assert info["providerKey"] == p.provider_key and info["batch"]["enabled"] is False
    assert "test-key" not in repr(info)
