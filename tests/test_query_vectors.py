"""A provider remembers its recent query vectors: a repeated query costs no model run and no request.

Real components: the embedded ONNX model for the local provider, and the OpenAI wire format over
loopback HTTP (:class:`ProviderServer`) for the remote one, whose requests are counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from memdir.embeddings.base import QUERY_CACHE_MAX_CHARS, QueryVectors
from memdir.embeddings.local import LocalEmbeddingProvider
from memdir.embeddings.openai import create_openai_provider
from memdir.testing.provider_server import FakeTiming, ProviderServer, Reply, fake_vector, make_cfg, unit


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as srv:
        yield srv


def _openai(server: ProviderServer):  # type: ignore[no-untyped-def]
    return create_openai_provider(make_cfg("openai", f"{server.url}/v1"), {}, timing=FakeTiming().timing())


def test_remote_query_asked_twice_sends_one_request(server: ProviderServer) -> None:
    p = _openai(server)
    first = p.embed_query("what did we decide about kafka")
    second = p.embed_query("what did we decide about kafka")
    assert len(server.requests) == 1
    assert second == first == pytest.approx(unit(fake_vector("what did we decide about kafka")))
    p.embed_query("what did we decide about redis")  # another text is another request
    assert len(server.requests) == 2
    p.close()


def test_remote_failure_is_not_remembered(server: ProviderServer) -> None:
    p = _openai(server)
    server.script("/embeddings", Reply(400, {"error": {"message": "bad request"}}))
    with pytest.raises(Exception, match="bad request"):
        p.embed_query("flaky question")
    vec = p.embed_query("flaky question")  # asked again: the server is asked again, and answers
    assert len(server.requests) == 2
    assert vec == pytest.approx(unit(fake_vector("flaky question")))
    p.close()


def test_local_repeat_skips_the_model_and_returns_a_private_copy() -> None:
    p = LocalEmbeddingProvider()
    runs: list[list[str]] = []
    encode = p._backend.encode

    def counting(texts: list[str], *args: Any) -> np.ndarray:
        runs.append(list(texts))
        return encode(texts, *args)

    p._backend.encode = counting  # type: ignore[method-assign]
    first = p.embed_query("where did we park the car")
    first[0] = 123.0  # the caller's list is its own
    second = p.embed_query("where did we park the car")
    assert len(runs) == 1
    assert second[0] != 123.0
    assert np.allclose(second, p.embed_batch(["where did we park the car"])[0], atol=1e-6)
    assert len(runs) == 2  # documents are never answered from the query memory
    p.close()  # a closed provider forgets: the next query runs the (reloaded) model
    p._backend.encode = counting  # type: ignore[method-assign]
    p.embed_query("where did we park the car")
    assert len(runs) == 3
    p.close()


def test_lru_keeps_the_most_recent_and_skips_long_texts() -> None:
    cache = QueryVectors(size=2)
    calls: list[str] = []

    def embed(text: str) -> list[float]:
        calls.append(text)
        return [float(len(text)), 1.0]

    cache.get_or_embed("k", "a", embed)
    cache.get_or_embed("k", "bb", embed)
    cache.get_or_embed("k", "a", embed)  # "a" is now the most recent
    cache.get_or_embed("k", "ccc", embed)  # evicts "bb"
    cache.get_or_embed("k", "a", embed)
    cache.get_or_embed("k", "bb", embed)
    assert calls == ["a", "bb", "ccc", "bb"]
    cache.get_or_embed("other-provider", "a", embed)  # another provider key is another vector
    assert calls[-1] == "a" and len(calls) == 5
    long_text = "x" * (QUERY_CACHE_MAX_CHARS + 1)
    cache.get_or_embed("k", long_text, embed)
    cache.get_or_embed("k", long_text, embed)
    assert calls.count(long_text) == 2 and len(cache) == 2


def test_environment_switches_it_off(server: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMDIR_QUERY_CACHE_SIZE", "0")
    p = _openai(server)
    p.embed_query("same words")
    p.embed_query("same words")
    assert len(server.requests) == 2
    p.close()
    monkeypatch.setenv("MEMDIR_QUERY_CACHE_SIZE", "not a number")  # ignored: the default applies
    assert QueryVectors().size > 0
