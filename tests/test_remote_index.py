"""Remote providers in the index, over real loopback HTTP: outages, runtime fallback, request accounting."""

from __future__ import annotations

from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.testing.provider_server import ProviderServer, Reply

NOTES = {
    "MEMORY.md": "# Prefs\n- Prefers PostgreSQL for transactional work.\n",
    "memory/2026-01-10.md": "- Picked Kafka for billing events: replay matters.\n",
    "memory/2026-01-11.md": "- Dana's cat had surgery; she works from home.\n",
}


@pytest.fixture
def server():
    with ProviderServer(api_key="test-key") as s:
        yield s


def openai_cfg(server: ProviderServer, **extra) -> dict:
    return {"memorySearch": {"provider": "openai", "remote": {"baseUrl": f"{server.url}/v1", "apiKey": "test-key",
                                                              "maxRetries": 0}, **extra}}


def embed_posts(server: ProviderServer) -> int:
    return sum(1 for r in server.requests if r.method == "POST" and r.path.endswith("/embeddings"))


def test_index_and_search_through_an_openai_compatible_endpoint(make_workspace, server):
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        report = mem.sync()
        assert report.embedded == 3 and embed_posts(server) >= 1
        resp = mem.search("Kafka billing")
        assert resp.provider == "openai" and resp.mode == "hybrid"
        # the test server's vectors are hashes of the text (no semantics): the keyword signal finds it
        assert "memory/2026-01-10.md" in [r.path for r in resp.results]
        assert mem.status()["vector"]["dims"] == 8


def test_a_forced_reindex_with_a_warm_cache_sends_nothing(make_workspace, server):
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
        before = len(server.requests)
        report = mem.sync(force=True)
        assert report.full and report.embedded == 0
        assert len(server.requests) == before


def test_a_reindex_survives_an_outage_with_the_old_index_intact(make_workspace, server):
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
        vectors = mem.status()["vector"]["vectors"]
    # the endpoint goes down, and a config change demands a full rebuild
    server.script("/embeddings", *[Reply(503, {"error": {"message": "upstream unavailable"}})] * 50)
    cfg = openai_cfg(server, chunking={"tokens": 100})
    (ws / "memory/2026-01-12.md").write_text("- New note about the roadmap review.\n")
    with Memory(ws, config=cfg) as mem:
        with pytest.raises(Exception, match="503"):
            mem.sync()
        st = mem.status()
        assert st["vector"]["vectors"] == vectors and st["files"] == 3  # the old index, untouched
        assert mem.store.read_meta()["chunkTokens"] == 200  # the default
        assert "memory/2026-01-10.md" in [r.path for r in mem.search("Kafka", sync=False).results]
    assert not list(Path(mem.index_path).parent.glob("*.tmp-*"))
    # the endpoint is back: the rebuild goes through
    server._scripts.clear()
    with Memory(ws, config=cfg) as mem:
        report = mem.sync()
        assert report.full and mem.status()["files"] == 4
        assert mem.store.read_meta()["chunkTokens"] == 100


def test_an_outage_during_incremental_sync_keeps_new_text_searchable(make_workspace, server):
    ws = make_workspace(NOTES)
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
        server.script("/embeddings", *[Reply(500, {"error": {"message": "boom"}})] * 20)
        (ws / "memory/2026-01-12.md").write_text("- The zeppelin launch slipped to March.\n")
        report = mem.sync()
        assert report.indexed == 1 and report.warnings and "keywords only" in report.warnings[0]
        assert "memory/2026-01-12.md" in [r.path for r in mem.search("zeppelin", sync=False).results]
        server._scripts.clear()
        report = mem.sync()  # the provider is back: the missing vector is filled in
        assert report.indexed == 1 and report.embedded == 1
        assert mem.status()["vector"]["vectors"] == 4


def test_runtime_fallback_switches_once_and_rebuilds(make_workspace, server):
    ws = make_workspace(NOTES)
    server.script("/embeddings", *[Reply(500, {"error": {"message": "embeddings backend down"}})] * 50)
    cfg = openai_cfg(server, fallback="local")
    with Memory(ws, config=cfg) as mem:
        report = mem.sync()
        assert report.fallback and report.fallback["from"] == "openai" and report.fallback["to"] == "local"
        assert report.full and mem.status()["vector"]["dims"] == 384
        st = mem.status()
        assert st["provider"] == "local" and st["fallback"]["from"] == "openai"
        resp = mem.search("Kafka billing")
        assert resp.provider == "local" and resp.fallback["from"] == "openai"
        assert resp.results[0].path == "memory/2026-01-10.md"


def test_the_question_is_embedded_with_its_letters_as_typed(make_workspace, server):
    """Keywords fold a question's Greek accents, Russian ё and Arabic vowel points, as the notes'
    words are indexed; the embedding model reads it as typed, as it read the notes (NFC, without
    invisible characters: a question in NFD is sent composed)."""
    import unicodedata

    ws = make_workspace({"MEMORY.md": "- Η οδός Σταδίου είναι κλειστή\n"})
    with Memory(ws, config=openai_cfg(server)) as mem:
        mem.sync()
        question = unicodedata.normalize("NFD", "οδός Σταδίου, ёлка, مَرْحَبًا") + "\u200b"
        mem.search(question)
    sent = [r.json["input"] for r in server.requests if r.method == "POST" and r.path.endswith("/embeddings")][-1]
    assert sent in ("οδός Σταδίου, ёлка, مَرْحَبًا", ["οδός Σταδίου, ёлка, مَرْحَبًا"])
