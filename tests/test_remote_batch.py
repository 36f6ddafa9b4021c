"""Provider batch APIs (OpenAI Batch, Gemini async batch) over loopback HTTP, and the failure limit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest

from memdir.embeddings.batch import BatchState, batch_custom_id, default_custom_ids
from memdir.embeddings.errors import BatchTimeoutError, BatchUnavailableError, RemoteEmbeddingError
from memdir.embeddings.gemini import GeminiProvider, create_gemini_provider
from memdir.embeddings.openai import OpenAIProvider, create_openai_provider
from memdir.embeddings.voyage import create_voyage_provider
from memdir.testing.provider_server import FakeTiming, ProviderServer, Reply, fake_vector, make_cfg, unit

TEXTS = ["first chunk", "second chunk", "third chunk"]


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as srv:
        yield srv


@pytest.fixture
def clock() -> FakeTiming:
    return FakeTiming(rand=0.5)


def batch_cfg(**batch: object) -> dict[str, object]:
    return {"enabled": True, "pollIntervalMs": 1500, **batch}


def openai(server: ProviderServer, clock: FakeTiming, **batch: object) -> OpenAIProvider:
    cfg = make_cfg("openai", f"{server.url}/v1", batch=batch_cfg(**batch))
    return create_openai_provider(cfg, {}, timing=clock.timing())


def gemini(server: ProviderServer, clock: FakeTiming, **batch: object) -> GeminiProvider:
    cfg = make_cfg("gemini", f"{server.url}/v1beta", batch=batch_cfg(**batch))
    return create_gemini_provider(cfg, {}, timing=clock.timing())


def expected(texts: list[str]) -> list[list[float]]:
    return [unit(fake_vector(t)) for t in texts]


# --- custom ids -----------------------------------------------------------------------------------


def test_custom_id_is_sha256_of_chunk_coordinates() -> None:
    chunk_hash = hashlib.sha256(b"alpha\nbeta\ngamma").hexdigest()
    want = hashlib.sha256(f"memory:memory/2026-01-12.md:1:3:{chunk_hash}:0".encode()).hexdigest()
    assert batch_custom_id("memory", "memory/2026-01-12.md", 1, 3, chunk_hash, 0) == want


def test_default_ids_are_unique_even_for_equal_texts() -> None:
    ids = default_custom_ids(["same", "same", "other"])
    assert len(set(ids)) == 3 and all(len(i) == 64 for i in ids)


# --- OpenAI Batch ---------------------------------------------------------------------------------


def test_openai_batch_life_cycle(server: ProviderServer, clock: FakeTiming) -> None:
    p = openai(server, clock)
    ids = [f"id-{i}" for i in range(len(TEXTS))]
    seen: list[tuple[str, int, int]] = []
    vecs = p.embed_batch(TEXTS, custom_ids=ids, progress=lambda *a: seen.append(a))
    assert vecs == expected(TEXTS)  # output lines come back shuffled: mapped by custom_id
    assert [(r.method, r.path) for r in server.requests] == [
        ("POST", "/v1/files"),
        ("POST", "/v1/batches"),
        ("GET", "/v1/batches/batch_2"),
        ("GET", "/v1/batches/batch_2"),
        ("GET", "/v1/files/file-out-3/content"),
    ]
    upload, create = server.requests[0], server.requests[1]
    assert upload.headers["content-type"].startswith("multipart/form-data")
    assert upload.headers["authorization"] == "Bearer test-key"
    lines = [json.loads(line) for line in server.files["file-1"].decode().splitlines()]
    assert [row["custom_id"] for row in lines] == ids
    assert lines[0] == {
        "custom_id": "id-0",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": "text-embedding-3-small", "input": "first chunk"},
    }
    assert create.json["endpoint"] == "/v1/embeddings"
    assert create.json["completion_window"] == "24h"
    assert create.json["input_file_id"] == "file-1"
    assert clock.sleeps == [1.5]  # pollIntervalMs between the two polls
    assert seen == [("openai batch batch_2", 1, 3), ("openai batch batch_2", 3, 3)]
    status = p.batch_status()
    assert status["active"] and status["failures"] == 0 and status["jobs"] == 1
    assert not any(r.path.endswith("/embeddings") for r in server.requests)


def test_openai_batch_redacts_secrets_in_the_jsonl(server: ProviderServer, clock: FakeTiming) -> None:
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    server.forbidden.append(secret)
    cfg = make_cfg("openai", f"{server.url}/v1", batch=batch_cfg(), redactSecrets=True)
    p = create_openai_provider(cfg, {}, timing=clock.timing())
    p.embed_batch([f"token={secret}", "plain"])
    assert server.violations == []
    assert p.batch_status()["jobs"] == 1


def test_failed_batch_falls_back_then_limit_disables(server: ProviderServer, clock: FakeTiming) -> None:
    server.openai_final_status = "failed"
    p = openai(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)  # direct fallback for this call
    assert server.paths("POST")[-1] == "/v1/embeddings"
    status = p.batch_status()
    assert status["failures"] == 1 and status["active"] and "batch failed" in status["last_error"]

    assert p.embed_batch(TEXTS) == expected(TEXTS)
    status = p.batch_status()
    assert status["failures"] == 2 and status["limit"] == 2 and not status["active"]
    assert "disabled after 2 failures" in status["disabled_reason"]

    before = len(server.requests)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert server.paths()[before:] == ["/v1/embeddings"]  # straight to the direct endpoint


def test_success_resets_the_failure_counter(server: ProviderServer, clock: FakeTiming) -> None:
    server.openai_final_status = "expired"
    p = openai(server, clock)
    p.embed_batch(TEXTS)
    assert p.batch_status()["failures"] == 1
    server.openai_final_status = "completed"
    p.embed_batch(TEXTS)
    assert p.batch_status()["failures"] == 0 and p.batch_status()["active"]


def test_batch_timeout_cancels_and_disables(server: ProviderServer, clock: FakeTiming) -> None:
    server.batch_polls_before_done = 1000
    p = openai(server, clock, pollIntervalMs=1000, timeoutMinutes=0.05)  # 3 s of fake time
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert ("POST", "/v1/batches/batch_2/cancel") in [(r.method, r.path) for r in server.requests]
    assert clock.sleeps == [1.0, 1.0, 1.0]
    status = p.batch_status()
    assert not status["active"] and status["failures"] == 2  # a timeout counts twice (R§5.3)
    assert "timed out after 0.05 minutes" in status["last_error"]


def test_a_poll_interval_longer_than_the_timeout_waits_until_the_timeout(server: ProviderServer,
                                                                        clock: FakeTiming) -> None:
    """``pollIntervalMs`` past ``timeoutMinutes`` (poll every 2 hours, time out after 60 minutes)
    cancelled every job right after its first poll, "timed out after 60 minutes" with no time gone,
    and disabled the batch API; the last wait ends at the deadline and the job is polled then."""
    server.batch_polls_before_done = 2  # (done at the second poll)
    p = openai(server, clock, pollIntervalMs=2 * 3600 * 1000, timeoutMinutes=60)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert clock.sleeps == [3600.0]
    assert not [r for r in server.requests if r.path.endswith("/cancel")]
    assert p.batch_status()["failures"] == 0 and p.batch_status()["active"]


def test_wait_false_disables_without_submitting(server: ProviderServer, clock: FakeTiming) -> None:
    p = openai(server, clock, wait=False)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert server.paths() == ["/v1/embeddings"]
    status = p.batch_status()
    assert not status["active"] and "remote.batch.wait = false" in status["last_error"]


def test_server_without_batch_api_disables_immediately(server: ProviderServer, clock: FakeTiming) -> None:
    server.script("/v1/files", Reply(404, {"error": {"message": "Not Found"}}))
    p = openai(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    status = p.batch_status()
    assert not status["active"] and status["failures"] == 0
    assert "batch API not available" in status["disabled_reason"]


def test_failed_request_inside_a_batch_counts_as_failure(server: ProviderServer, clock: FakeTiming) -> None:
    def broken_output(rec: object) -> bool:
        return getattr(rec, "path", "").startswith("/v1/files/file-out")

    line = {"custom_id": "x", "response": {"status_code": 400, "body": {"error": {"message": "too long"}}}}
    server.script(broken_output, Reply(200, json.dumps(line) + "\n"))
    p = openai(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert "request x failed" in p.batch_status()["last_error"]


def test_a_batch_output_line_nested_too_deeply_is_a_failed_batch(server: ProviderServer, clock: FakeTiming) -> None:
    # a bare RecursionError came out of the batch (not an EmbeddingError): no fallback to direct requests
    def deep_output(rec: object) -> bool:
        return getattr(rec, "path", "").startswith("/v1/files/file-out")

    server.script(deep_output, Reply(200, "[" * 200_000 + "]" * 200_000 + "\n"))
    p = openai(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert "output line 1 is not a batch result" in p.batch_status()["last_error"]


def test_batch_disabled_by_default(server: ProviderServer, clock: FakeTiming) -> None:
    p = create_openai_provider(make_cfg("openai", f"{server.url}/v1"), {}, timing=clock.timing())
    p.embed_batch(TEXTS)
    assert server.paths() == ["/v1/embeddings"]
    assert p.batch_status()["enabled"] is False


def test_duplicate_custom_ids_are_rejected(server: ProviderServer, clock: FakeTiming) -> None:
    with pytest.raises(ValueError, match="unique"):
        openai(server, clock).embed_batch(["a", "b"], custom_ids=["same", "same"])


def test_providers_without_batch_api_report_it(server: ProviderServer, clock: FakeTiming) -> None:
    cfg = make_cfg("voyage", f"{server.url}/v1", batch=batch_cfg())
    p = create_voyage_provider(cfg, {}, timing=clock.timing())
    p.embed_batch(TEXTS)
    assert server.paths() == ["/v1/embeddings"]
    assert p.batch_status()["supported"] is False and p.batch_status()["active"] is False


# --- Gemini async batch ---------------------------------------------------------------------------


def test_gemini_async_batch_inline(server: ProviderServer, clock: FakeTiming) -> None:
    p = gemini(server, clock)
    ids = ["k0", "k1", "k2"]
    seen: list[tuple[str, int, int]] = []
    vecs = p.embed_batch(TEXTS, custom_ids=ids, progress=lambda *a: seen.append(a))
    assert vecs == expected(TEXTS)
    assert [(r.method, r.path) for r in server.requests] == [
        ("POST", "/v1beta/models/gemini-embedding-001:asyncBatchEmbedContent"),
        ("GET", "/v1beta/batches/gem1"),
        ("GET", "/v1beta/batches/gem1"),
    ]
    submit = server.requests[0]
    assert submit.headers["x-goog-api-key"] == "test-key"
    items = submit.json["batch"]["inputConfig"]["requests"]["requests"]
    assert [i["metadata"]["key"] for i in items] == ids
    assert {i["request"]["taskType"] for i in items} == {"RETRIEVAL_DOCUMENT"}
    assert items[0]["request"]["content"] == {"parts": [{"text": "first chunk"}]}
    assert submit.json["batch"]["displayName"].startswith("memdir-")
    assert clock.sleeps == [1.5]
    assert seen[-1] == ("gemini batch batches/gem1", 3, 3)
    assert p.batch_status()["jobs"] == 1


def test_gemini_async_batch_responses_file(server: ProviderServer, clock: FakeTiming) -> None:
    server.gemini_output = "file"
    p = gemini(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    download = server.requests[-1]
    assert download.path.startswith("/download/v1beta/files/gemout") and download.path.endswith(":download")
    assert download.query == {"alt": ["media"]}


def test_a_gemini_responses_file_line_nested_too_deeply_is_a_failed_batch(server: ProviderServer,
                                                                          clock: FakeTiming) -> None:
    # a bare RecursionError came out of the batch (not an EmbeddingError): no fallback to direct requests
    server.gemini_output = "file"
    server.script(":download", Reply(200, "[" * 200_000 + "]" * 200_000 + "\n"))
    p = gemini(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert "responses file line 1 is not JSON" in p.batch_status()["last_error"]


def test_gemini_async_batch_not_available_disables_at_once(server: ProviderServer, clock: FakeTiming) -> None:
    server.script(":asyncBatchEmbedContent", Reply(404, {"error": {"code": 404, "message": "not found"}}))
    p = gemini(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    assert server.paths()[-1] == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    status = p.batch_status()
    assert not status["active"] and "asyncBatchEmbedContent not available" in status["disabled_reason"]
    p.embed_batch(TEXTS)
    assert ":asyncBatchEmbedContent" not in server.paths()[-1]


def test_gemini_failed_batch_counts_and_falls_back(server: ProviderServer, clock: FakeTiming) -> None:
    server.gemini_final_state = "BATCH_STATE_FAILED"
    p = gemini(server, clock)
    assert p.embed_batch(TEXTS) == expected(TEXTS)
    status = p.batch_status()
    assert status["failures"] == 1 and status["active"]
    assert "BATCH_STATE_FAILED" in status["last_error"]


def test_gemini_timeout_cancels_the_operation(server: ProviderServer, clock: FakeTiming) -> None:
    server.batch_polls_before_done = 1000
    p = gemini(server, clock, pollIntervalMs=2000, timeoutMinutes=0.1)
    p.embed_batch(TEXTS)
    assert ("POST", "/v1beta/batches/gem1:cancel") in [(r.method, r.path) for r in server.requests]
    assert not p.batch_status()["active"]


# --- the state machine on its own -----------------------------------------------------------------


def test_batch_state_rules() -> None:
    state = BatchState(enabled=True, supported=True)
    state.record_failure(RemoteEmbeddingError("boom", provider="openai"))
    assert state.active and state.failures == 1
    state.record_success()
    assert state.failures == 0
    state.record_failure(BatchTimeoutError("slow", provider="openai"))
    assert not state.active and state.failures == 2
    fresh = BatchState(enabled=True, supported=True)
    fresh.record_failure(BatchUnavailableError("asyncBatchEmbedContent not available", provider="gemini"))
    assert not fresh.active and fresh.failures == 0
    assert BatchState(enabled=False, supported=True).as_dict()["active"] is False


def test_fallback_after_a_failed_job_redacts_and_counts_once(
    server: ProviderServer, clock: FakeTiming
) -> None:
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    server.forbidden.append(secret)
    server.openai_final_status = "failed"
    cfg = make_cfg("openai", f"{server.url}/v1", batch=batch_cfg(), redactSecrets=True)
    p = create_openai_provider(cfg, {}, timing=clock.timing())
    p.embed_batch([f"token={secret}", "plain"])
    assert server.violations == []
    assert server.paths("POST")[-1] == "/v1/embeddings"
    assert p.stats["texts"] == 2 and p.stats["redactions"] == 1
