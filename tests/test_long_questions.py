"""A question far longer than a model's input (a pasted document, an agent recalling on a long
prompt) still gets its vector from a remote provider, over real loopback HTTP.

Chunks are held to the model's input limit (R§5.2), the query was not: OpenAI answers a
10,000-word input with a 400 ("maximum context length is 8192 tokens"), and every such search
fell back to keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.testing.provider_server import ProviderServer

NOTES = {"memory/2026-01-10.md": "- Picked Kafka for billing events: replay matters.\n",
         "memory/2026-01-11.md": "- Dana's cat had surgery; she works from home.\n"}


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer(api_key="test-key") as srv:
        srv.max_input_chars = 8192  # OpenAI's context, counted in characters here
        yield srv


@pytest.mark.parametrize("mode", ["hybrid", "vector"])
def test_a_10000_word_question_keeps_its_vector(make_workspace: Callable[..., Path], server: ProviderServer,
                                                mode: str) -> None:
    config = {"memorySearch": {"provider": "openai", "remote": {"baseUrl": f"{server.url}/v1", "apiKey": "test-key",
                                                                "maxRetries": 0}}}
    question = "which queue did we pick for billing events " + "and why did we pick it " * 1700 + "é"
    with Memory(make_workspace(NOTES), config=config) as mem:
        mem.sync()
        response = mem.search(question, mode=mode, sync=False)
    assert response.fallback is None and response.mode == mode, response.fallback
    sent = server.requests[-1].json["input"]
    text = sent if isinstance(sent, str) else sent[0]
    assert text.startswith("which queue did we pick") and len(text.encode("utf-8")) <= 8000
