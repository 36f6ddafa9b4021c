"""Hostile remote embedding servers, over real loopback HTTP: broken vectors, answers that never
end, a model that changes width behind its name, inputs a model refuses, a provider that hangs
at query time.  Each test failed before the fix it guards."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import Trickler
from memdir.api import Memory
from memdir.embeddings.errors import EmbeddingTimeoutError, RemoteEmbeddingError
from memdir.embeddings.registry import create_provider
from memdir.testing.provider_server import FakeTiming, ProviderServer, Reply, fake_vector, make_cfg, unit

NOTES = {
    "MEMORY.md": "# Prefs\n- Prefers PostgreSQL for transactional work.\n",
    "memory/2026-01-10.md": "- Picked Kafka for billing events: replay matters.\n",
    "memory/2026-01-11.md": "- Dana's cat had surgery; she works from home.\n",
}
#: The path each wire format embeds documents at, and its base URL below the server's root.
WIRE = {"openai": ("/embeddings", "/v1"), "voyage": ("/embeddings", "/v1"), "mistral": ("/embeddings", "/v1"),
        "gemini": (":batchEmbedContents", "/v1beta"), "ollama": ("/api/embed", "")}


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer(api_key="test-key") as srv:
        yield srv


def provider(name: str, server: ProviderServer, **remote: Any) -> Any:
    cfg = make_cfg(name, f"{server.url}{WIRE[name][1]}", **remote)
    return create_provider(name, cfg, {}, timing=FakeTiming().timing())


def two_vectors(name: str, first: str) -> bytes:
    """A document answer for two inputs in ``name``'s format whose first vector starts with the
    raw JSON text ``first`` (``NaN``, ``Infinity``: what Python's json module writes and reads)."""
    a, b = f"[{first},1,2,3,4,5,6,7]", "[1,1,2,3,4,5,6,7]"
    if name == "gemini":
        return f'{{"embeddings":[{{"values":{a}}},{{"values":{b}}}]}}'.encode()
    if name == "ollama":
        return f'{{"embeddings":[{a},{b}]}}'.encode()
    return f'{{"data":[{{"index":0,"embedding":{a}}},{{"index":1,"embedding":{b}}}]}}'.encode()


# --- vectors that must not be taken -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WIRE))
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_values_are_refused_not_zeroed(server: ProviderServer, name: str, value: str) -> None:
    # zeroing them (as the local model's sanitising does) kept a corrupted vector in the cache for good
    server.script(WIRE[name][0], Reply(200, two_vectors(name, value)))
    with pytest.raises(RemoteEmbeddingError, match="non-finite"):
        provider(name, server, maxRetries=0).embed_batch(["alpha", "beta"])


@pytest.mark.parametrize(
    "indexes",
    [[0, 0], [0, 2], [5, 7], ["1", "0"], [1, None], [True, 0]],
    ids=["duplicated", "gap", "out-of-range", "strings", "one-missing", "bool"],
)
def test_openai_index_fields_must_be_each_position_once(server: ProviderServer, indexes: list[Any]) -> None:
    # a duplicated index gave one text the other's vector without a word
    data = [{"index": i, "embedding": fake_vector(t)} for i, t in zip(indexes, "ab", strict=True)]
    for item in data:
        if item["index"] is None:
            del item["index"]
    server.script("/embeddings", Reply(200, {"data": data}))
    with pytest.raises(RemoteEmbeddingError, match="'index' fields"):
        provider("openai", server, maxRetries=0).embed_batch(["a", "b"])


def test_openai_order_without_index_fields_is_the_list_order(server: ProviderServer) -> None:
    data = [{"embedding": fake_vector("a")}, {"embedding": fake_vector("b")}]
    server.script("/embeddings", Reply(200, {"data": data}))
    assert provider("openai", server).embed_batch(["a", "b"]) == [unit(fake_vector("a")), unit(fake_vector("b"))]


@pytest.mark.parametrize("name", ["openai", "ollama", "gemini"])
def test_a_200_carrying_an_error_names_it(server: ProviderServer, name: str) -> None:
    error = "model overloaded" if name == "ollama" else {"message": "model overloaded", "type": "server_error"}
    server.script(WIRE[name][0], Reply(200, {"error": error}))
    with pytest.raises(RemoteEmbeddingError, match="carries an error: model overloaded"):
        provider(name, server, maxRetries=0).embed_batch(["alpha"])


# --- answers that do not end ---------------------------------------------------------------------


def test_a_trickling_answer_is_bounded_by_the_timeout(server: ProviderServer) -> None:
    # httpx's read timeout restarts with every byte: 8 s of trickle took 8 s with a 0.5 s timeout
    body = json.dumps({"data": [{"index": 0, "embedding": [1.0] * 8}]}).encode()
    server.script("/embeddings", Reply(200, lambda: (bytes([b]) for b in body), {"Content-Length": str(len(body))},
                                       part_delay=0.1))
    p = provider("openai", server, batchTimeoutSeconds=0.5, maxRetries=0)
    started = time.monotonic()
    with pytest.raises(EmbeddingTimeoutError, match=r"batch timed out after 0\.5s"):
        p.embed_batch(["a"])
    assert time.monotonic() - started < 2.0


def test_trickling_headers_are_bounded_by_the_timeout() -> None:
    # a status line and headers trickled a line at a time held the attempt for as long as the
    # server liked (1,000 lines: 50 s against a 0.5 s timeout)
    trickler = Trickler(b"HTTP/1.1 200 OK\r\n", "X-Pad-{n}: x\r\n")
    try:
        cfg = make_cfg("openai", f"{trickler.url}/v1", batchTimeoutSeconds=0.5, maxRetries=0)
        p = create_provider("openai", cfg, {}, timing=FakeTiming().timing())
        started = time.monotonic()
        with pytest.raises(EmbeddingTimeoutError, match=r"batch timed out after 0\.5s"):
            p.embed_batch(["a"])
        assert time.monotonic() - started < 2.0
        time.sleep(0.2)
        assert trickler.lines_sent < 40  # the client hung up at the deadline
    finally:
        trickler.close()


def test_a_huge_answer_is_refused_while_it_is_read(server: ProviderServer) -> None:
    # a gateway streaming junk was read whole: 300 MB of spaces took 1.2 GB of memory
    size = 300 << 20
    sent = []

    def junk() -> Iterator[bytes]:
        for _ in range(size >> 20):
            sent.append(1)
            yield b" " * (1 << 20)

    server.script("/embeddings", Reply(200, junk, {"Content-Length": str(size)}))
    with pytest.raises(RemoteEmbeddingError, match="response larger than") as info:
        provider("openai", server, maxRetries=0).embed_batch(["a", "b"])
    assert not info.value.retryable
    time.sleep(0.2)
    assert len(sent) < 16  # the client hung up after a few MB (the cap for 2 inputs is 2 MB)


# --- the index ----------------------------------------------------------------------------------


def openai_cfg(server: ProviderServer, **extra: Any) -> dict[str, Any]:
    return {"memorySearch": {"provider": "openai", "remote": {"baseUrl": f"{server.url}/v1", "apiKey": "test-key",
                                                              "maxRetries": 0}, **extra}}


def stored_widths(mem: Memory) -> set[int]:
    rows = mem.store.conn.execute("SELECT length(embedding) FROM chunks WHERE embedding IS NOT NULL").fetchall()
    return {n // 4 for (n,) in rows}


def test_a_model_that_changes_width_rebuilds_the_index_instead_of_mixing(make_workspace, server) -> None:
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
        assert stored_widths(mem) == {8}
    server.dims = 16  # the same model name now answers 16 dimensions (a server swapped its model)
    (ws / "memory/2026-01-12.md").write_text("- The quarterly offsite moves to Lisbon.\n")
    with Memory(ws, config=openai_cfg(server)) as mem:
        report = mem.sync()
        assert report.full and "vector dims changed (8 → 16)" in report.reason
        assert stored_widths(mem) == {16}  # before: 8 and 16 side by side, the new notes unreachable
        assert mem.status()["vector"]["dims"] == 16 and mem.status()["vector"]["vectors"] == 4
        assert mem.search("Lisbon offsite").mode == "hybrid"


def test_a_forced_rebuild_never_takes_cached_vectors_of_another_width(make_workspace, server) -> None:
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
    server.dims = 16
    (ws / "memory/2026-01-12.md").write_text("- The quarterly offsite moves to Lisbon.\n")
    with Memory(ws, config=openai_cfg(server)) as mem:
        # a new process: the provider's width is unknown until it answers, and the cache holds 8
        report = mem.sync(force=True)
        assert report.full and stored_widths(mem) == {16}
        assert mem.store.read_meta()["vectorDims"] == 16


def test_a_forced_rebuild_from_a_fully_warm_cache_asks_the_provider_its_width(make_workspace, server) -> None:
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
    server.dims = 16  # nothing new to embed: every vector the rebuild needs is in the cache
    with Memory(ws, config=openai_cfg(server)) as mem:
        assert any("16 dimensions, the index's 8" in i for i in mem.status(deep=True)["issues"])
    with Memory(ws, config=openai_cfg(server)) as mem:  # a new process, as `memdir index --force`
        # before: the cache's 8-dimension vectors were written back, and searches stayed on keywords
        report = mem.sync(force=True)
        assert report.full and stored_widths(mem) == {16}
        assert mem.search("Kafka billing", sync=False).mode == "hybrid"
    with Memory(ws, config=openai_cfg(server)) as mem:
        requests = len(server.requests)
        assert mem.sync(force=True).full and len(server.requests) == requests + 1  # one probe, then the cache
        assert mem.sync(force=True).full and len(server.requests) == requests + 1  # the width is known now
        assert stored_widths(mem) == {16}


def test_an_input_the_model_refuses_costs_only_its_own_vector(make_workspace, server) -> None:
    ws = make_workspace({**NOTES, "memory/2026-01-12.md": "- LONGWORD and more words. " * 40 + "\n"})
    server.max_input_chars = 600  # a small model behind the URL: memdir sends up to 8000 bytes
    with Memory(ws, config=openai_cfg(server)) as mem:
        report = mem.sync()  # before: the three short notes lost their vectors with the long one
        assert any("refused some text" in w for w in report.warnings) and report.embedding_error is None
        assert len(server.requests) <= 10  # the batch, a probe, then halving (two long chunks)
        before = len(server.requests)
        report = mem.sync(force=True)  # before: the rebuild failed, at every attempt
        assert report.full and any("refused some text" in w for w in report.warnings)
        assert len(server.requests) - before <= 6  # the others come from the cache
        vectors = dict(mem.store.conn.execute(
            "SELECT path, min(embedding IS NOT NULL) FROM chunks GROUP BY path").fetchall())
        assert vectors == {"MEMORY.md": 1, "memory/2026-01-10.md": 1, "memory/2026-01-11.md": 1,
                           "memory/2026-01-12.md": 0}
        assert "memory/2026-01-12.md" in [r.path for r in mem.search("LONGWORD", sync=False).results]


def test_a_refusal_of_every_request_is_not_blamed_on_the_inputs(make_workspace, server) -> None:
    ws = make_workspace(NOTES)
    server.script("/embeddings", *[Reply(400, {"error": {"message": "The model `nope` does not exist"}})] * 50)
    with Memory(ws, config=openai_cfg(server)) as mem:
        report = mem.sync()  # a first build: text indexed for keywords, the error reported as before
        assert any("embedding failed" in w and "does not exist" in w for w in report.warnings)
        assert report.embedding_error is not None
    assert len(server.requests) == 2  # the batch, then one short probe: no halving


def test_search_does_not_wait_for_a_hanging_provider_after_answering(make_workspace, server, run_cli, tmp_path) -> None:
    ws = make_workspace(NOTES)
    config = tmp_path / "memdir.json"
    config.write_text(json.dumps(openai_cfg(server)))
    run_cli("--workspace", str(ws), "--config", str(config), "index", check=True)
    server.script("/embeddings", Reply(200, {"data": []}, delay=40))
    started = time.monotonic()
    try:
        proc = run_cli("--workspace", str(ws), "--config", str(config), "search", "Kafka billing", timeout=20)
    except subprocess.TimeoutExpired:  # before: the pool thread kept the process for the whole call
        pytest.fail("memdir search waited for the provider after its 3 s budget")
    assert proc.returncode == 0, proc.stderr
    assert "memory/2026-01-10.md" in proc.stdout and "query embedding" in proc.stderr
    assert time.monotonic() - started < 15
    assert Path(config).exists()


def test_a_query_vector_of_another_width_is_not_compared_with_the_index(make_workspace, server) -> None:
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
    server.dims = 16  # nothing new to embed: the index cannot know yet
    with Memory(ws, config=openai_cfg(server)) as mem:
        assert any("now have 16 dimensions, the index's 8" in i for i in mem.status(deep=True)["issues"])
    with Memory(ws, config=openai_cfg(server)) as mem:
        resp = mem.search("Kafka billing", sync=False)
        # before: "hybrid", with no vector able to match and keyword scores weighted down
        assert resp.mode == "fts-only" and "16 dimensions, the index's vectors 8" in resp.fallback["reason"]
        assert resp.results[0].path == "memory/2026-01-10.md"
        report = mem.sync()  # this process has seen the new width: its next sync rebuilds
        assert report.full and stored_widths(mem) == {16}
        assert mem.search("Kafka billing", sync=False).mode == "hybrid"


def test_an_index_built_by_a_fallback_says_so_in_the_next_process(make_workspace, server) -> None:
    ws = make_workspace(NOTES)
    server.script("/embeddings", *[Reply(500, {"error": {"message": "embeddings backend down"}})] * 50)
    cfg = openai_cfg(server, fallback="local")
    with Memory(ws, config=cfg) as mem:
        assert mem.sync().fallback["to"] == "local"
    server._scripts.clear()
    with Memory(ws, config=cfg) as mem:  # another process: the primary is chosen again (R§5.1: once per manager)
        st = mem.status()
        note = "the index holds local/"
        # before: "openai, hybrid", 384-dim vectors, no word on why searches fell back to keywords
        assert any(note in issue for issue in st["issues"])
        resp = mem.search("Kafka billing", sync=False)
        assert resp.mode == "fts-only" and any(note in w for w in resp.warnings)
        assert mem.sync().full and stored_widths(mem) == {8}  # the next index run rebuilds it
        assert not any(note in issue for issue in mem.status()["issues"])
        assert mem.search("Kafka billing", sync=False).mode == "hybrid"


def test_a_provider_that_fails_is_asked_once_per_sync_not_once_per_batch(make_workspace, server) -> None:
    # each 64-chunk batch paid the whole retry schedule again: 640 notes took 39 s with the endpoint down
    notes = {f"memory/2025-01-{1 + i % 28:02d}-n{i}.md": f"- note {i} about topic{i}.\n" for i in range(150)}
    ws = make_workspace(notes)
    server.script("/embeddings", *[Reply(503, {"error": {"message": "upstream unavailable"}})] * 100)
    with Memory(ws, config=openai_cfg(server)) as mem:
        report = mem.sync()
        assert report.indexed == 150 and len(server.requests) == 1
        assert report.warnings == [f"embedding failed, 150 chunks indexed for keywords only: {report.embedding_error}"]
        server._scripts.clear()
        report = mem.sync()  # the endpoint is back: every vector is filled in
        assert report.embedded == 150 and mem.status()["vector"]["vectors"] == 150


def test_a_sync_before_a_search_keeps_to_its_budget_with_a_hanging_provider(make_workspace, server) -> None:
    ws = make_workspace(NOTES)
    cfg = openai_cfg(server, fallback="local")
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        server.script("/embeddings", *[Reply(200, {"data": []}, delay=30)] * 5)
        (ws / "memory/2026-01-12.md").write_text("- The zeppelin launch slipped to March.\n")
        started = time.monotonic()
        resp = mem.search("zeppelin")  # before: the sync waited 120 s a try, four tries
        assert time.monotonic() - started < 8  # 2 s of sync budget, 3 s for the query's vector
        assert resp.results[0].path == "memory/2026-01-12.md"
        assert resp.provider == "openai" and resp.fallback["from"] == "hybrid"  # no switch to local for that
        server._scripts.clear()
        assert mem.sync().embedded == 1 and mem.status()["vector"]["vectors"] == 4


def test_a_huge_error_page_keeps_its_status(server: ProviderServer) -> None:
    size = 40 << 20

    def page() -> Iterator[bytes]:
        yield b"<html>upstream overloaded"
        for _ in range(size >> 20):
            yield b" " * (1 << 20)

    server.script("/embeddings", Reply(503, page, {"Content-Length": str(size + 25), "Content-Type": "text/html"}))
    p = provider("openai", server)  # retried: a 503 is worth another try, however long its page
    assert p.embed_batch(["a"]) == [unit(fake_vector("a"))]
    assert p.stats["retries"] == 1


def test_a_provider_error_crosses_a_process_pool(server: ProviderServer) -> None:
    """A host running memdir in a process pool gets the worker's exception pickled back: the default
    rebuild, ``cls(*args)``, lacked the required ``provider``, so the parent could not unpickle it
    (multiprocessing.Pool's result thread died and the call never returned; ProcessPoolExecutor
    said 'A process in the process pool was terminated abruptly')."""
    import pickle

    server.script(WIRE["openai"][0], Reply(400, {"error": {"message": "model overloaded", "type": "bad"}}))
    with pytest.raises(RemoteEmbeddingError) as raised:
        provider("openai", server, maxRetries=0).embed_batch(["alpha"])
    back = pickle.loads(pickle.dumps(raised.value))
    assert type(back) is RemoteEmbeddingError and str(back) == str(raised.value)
    assert (back.provider, back.status, back.retryable) == ("openai", 400, False)
    timeout = pickle.loads(pickle.dumps(EmbeddingTimeoutError("timed out", provider="gemini", retryable=True)))
    assert type(timeout) is EmbeddingTimeoutError and (timeout.provider, timeout.retryable) == ("gemini", True)


def test_a_provider_shared_by_several_memories_outlives_the_first_close(make_workspace, server) -> None:
    """A host holding many agents passes them one provider (one HTTP client, or one model): the
    first Memory closed closed it, and every other agent's searches and syncs went on keyword-only
    ('query embedding failed: openai embeddings: provider is closed', new notes without vectors).
    A provider passed in is the caller's to close."""
    shared = provider("openai", server)
    first = Memory(make_workspace({"MEMORY.md": "- agent one uses Kafka\n"}, name="one"), provider=shared)
    second = Memory(make_workspace({"MEMORY.md": "- agent two uses NATS\n"}, name="two"), provider=shared)
    for mem in (first, second):
        mem.sync()
    first.close()
    (second.workspace / "memory").mkdir()
    (second.workspace / "memory" / "2026-01-02.md").write_text("- the zebra enclosure gate\n")
    report = second.sync()
    assert report.indexed == 1 and not report.warnings and report.embedded == 1
    found = second.search("zebra gate")
    assert found.mode == "hybrid" and found.fallback is None
    second.close()
    shared.close()
