"""Semantic and hybrid search on the real embedded model (issue 3): the behaviours a user relies on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from helpers import pg_query
from memdir.api import Memory
from memdir.embeddings.local import create_local_provider

NOTES = {
    "MEMORY.md": "# Accounts\n- Invoice code ZX-4471-Q is the Acme retainer.\n",
    "memory/health.md": "- The user is allergic to peanuts and shellfish.\n",
    "memory/2026-01-10.md": "- Picked Kafka for the billing event stream because replay matters.\n",
    "memory/2026-01-11.md": "- Dana's cat Miso had surgery; she is working from home this week.\n",
    "memory/2026-01-12.md": "- Lunch was ramen near the office; the new espresso machine is broken again.\n",
}


class CountingProvider:
    """The real local model, counting how many texts it is asked to embed."""

    def __init__(self, inner):
        self.inner = inner
        self.id, self.model, self.provider_key = inner.id, inner.model, inner.provider_key
        self.max_input_bytes = inner.max_input_bytes
        self.embedded = 0
        self.queries = 0

    @property
    def dims(self):
        return self.inner.dims

    def embed_query(self, text):
        self.queries += 1
        return self.inner.embed_query(text)

    def embed_batch(self, texts):
        self.embedded += len(texts)
        return self.inner.embed_batch(texts)

    def close(self):
        pass


class BrokenQueryProvider(CountingProvider):
    def __init__(self, inner, *, delay: float = 0.0, error: str | None = None):
        super().__init__(inner)
        self.delay, self.error = delay, error

    def embed_query(self, text):
        if self.delay:
            time.sleep(self.delay)
        if self.error:
            raise RuntimeError(self.error)
        return super().embed_query(text)


@pytest.fixture(scope="module")
def model():
    from memdir.config import MemorySearchConfig

    provider = create_local_provider(MemorySearchConfig())
    provider.embed_query("warm up")
    yield provider
    provider.close()


@pytest.fixture
def ws(make_workspace) -> Path:
    return make_workspace(NOTES)


def test_paraphrase_found_by_hybrid_not_by_keywords(ws: Path, model):
    query = "seafood allergy"  # shares no word with "allergic to peanuts and shellfish"
    with Memory(ws, config={"memorySearch": {"provider": "none"}}, agent_id="kw") as kw:
        assert not any(r.path == "memory/health.md" for r in kw.search(query).results)
    with Memory(ws, provider=CountingProvider(model)) as mem:
        resp = mem.search(query, explain=True)
        assert resp.mode == "hybrid" and resp.provider == "local"
        assert resp.results and resp.results[0].path == "memory/health.md"
        assert resp.results[0].explain["matched"] == ["vector"]
        top = resp.results[0]
        # above the floor on its own merit, or returned by the cosine rescue, which says so
        assert top.score >= 0.35 or top.explain["rescuedBecause"].startswith("cosine")


def test_exact_identifier_survives_the_floor(ws: Path, model):
    with Memory(ws, provider=CountingProvider(model)) as mem:
        resp = mem.search("ZX-4471-Q", explain=True)
        assert resp.results and resp.results[0].path == "MEMORY.md"
        assert "keyword" in resp.results[0].explain["matched"]


def test_forced_reindex_makes_zero_new_embedding_calls(ws: Path, model, backend):
    counting = CountingProvider(model)
    with Memory(ws, provider=counting, config=backend.config()) as mem:
        first = mem.sync()
        assert first.embedded == 5 and counting.embedded == 5
        again = mem.sync(force=True)
        assert again.full and again.embedded == 0 and again.cache_hits == 5
        assert counting.embedded == 5
        assert mem.status()["vector"]["vectors"] == 5


def test_changed_file_embeds_only_its_new_chunks(ws: Path, model, backend):
    counting = CountingProvider(model)
    with Memory(ws, provider=counting, config=backend.config()) as mem:
        mem.sync()
        (ws / "memory/2026-01-12.md").write_text("- The espresso machine was replaced.\n")
        report = mem.sync()
        assert (report.indexed, report.embedded) == (1, 1)


def test_cache_is_pruned_to_max_entries_least_recent_first(ws: Path, model, backend):
    cfg = backend.config({"memorySearch": {"cache": {"maxEntries": 3}}})
    with Memory(ws, provider=CountingProvider(model), config=cfg) as mem:
        mem.sync()
        assert mem.store.cache_count() == 3
        (ws / "memory/2026-01-13.md").write_text("- A brand new note about sailing.\n")
        mem.sync()
        assert mem.store.cache_count() == 3
        hashes = {entry[3] for entry in mem.store.export_cache()}
        newest = next(chunks[0].hash for path, *_, chunks in mem.store.export_files()
                      if path == "memory/2026-01-13.md")
        assert newest in hashes


def test_cache_entries_stamped_by_a_clock_that_ran_ahead_do_not_push_out_those_in_use(ws: Path, model, backend):
    """Entries written while the machine's clock ran ahead (a VM resumed with a wrong date, a clock
    set right since) were stamped later than any use after it: pruned least recently used first,
    the vectors of the notes in use went and those stayed, and every rebuild embedded the notes again."""
    cfg = backend.config({"memorySearch": {"cache": {"maxEntries": 5}}})
    ahead = "UPDATE {}embedding_cache SET updated_at = 4102444800000"  # 2100-01-01
    with Memory(ws, provider=CountingProvider(model), config=cfg) as mem:
        assert mem.sync().embedded == 5
        if backend.postgres:
            pg_query(backend.url, ahead.format(f'"{backend.schema}".'))
        else:
            with mem.store.transaction():
                mem.store.conn.execute(ahead.format(""))
        for i, name in enumerate(NOTES):
            (ws / name).write_text(f"- Rewritten note {i}: the harbour ferry leaves at {i + 7} o'clock.\n")
        assert mem.sync().embedded == 5  # pruned to 5 of the 10 entries
        again = mem.sync(force=True)
        assert (again.embedded, again.cache_hits) == (0, 5)


def test_failing_query_embedding_falls_back_to_keywords(ws: Path, model):
    with Memory(ws, provider=BrokenQueryProvider(model, error="connection reset")) as mem:
        resp = mem.search("Kafka billing")
        assert resp.mode == "fts-only" and "connection reset" in resp.fallback["reason"]
        assert resp.results[0].path == "memory/2026-01-10.md"


def test_slow_query_embedding_falls_back_within_the_budget(ws: Path, model):
    cfg = {"memorySearch": {"query": {"embedTimeoutMs": 200}}}
    with Memory(ws, provider=BrokenQueryProvider(model, delay=2.0), config=cfg) as mem:
        mem.sync()
        t0 = time.perf_counter()
        resp = mem.search("Kafka billing", sync=False)
        assert time.perf_counter() - t0 < 1.5
        assert resp.mode == "fts-only" and "200 ms" in resp.fallback["reason"]
        assert resp.results[0].path == "memory/2026-01-10.md"


class GatedQueryProvider(CountingProvider):
    """Signals when the query embedding starts, and finishes only once the keyword search ran."""

    def __init__(self, inner):
        super().__init__(inner)
        self.started, self.keywords_done = threading.Event(), threading.Event()

    def embed_query(self, text):
        self.started.set()
        self.keywords_done.wait(5.0)
        return super().embed_query(text)


def test_query_embedding_runs_while_the_keyword_search_does(ws: Path, model):
    provider = GatedQueryProvider(model)
    with Memory(ws, provider=provider) as mem:
        mem.sync()
        store = mem.store
        real = store.keyword_search
        seen: list[bool] = []

        def keyword_search(terms, limit):
            seen.append(provider.started.wait(5.0))  # the embedding is already under way
            try:
                return real(terms, limit)
            finally:
                provider.keywords_done.set()

        store.keyword_search = keyword_search  # type: ignore[method-assign]
        resp = mem.search("Kafka billing", sync=False, explain=True)
        assert seen == [True]
        assert resp.mode == "hybrid" and resp.fallback is None
        assert resp.results[0].path == "memory/2026-01-10.md"
        assert set(resp.results[0].explain["matched"]) == {"vector", "keyword"}
        assert resp.timings_ms["embed"] < 5000  # what the search waited, after its keyword search


def test_losing_the_provider_never_wipes_a_good_index(ws: Path, model, monkeypatch, backend):
    with Memory(ws, provider=CountingProvider(model), config=backend.config()) as mem:
        mem.sync()
        assert mem.status()["vector"]["vectors"] == 5
    # the provider is now unavailable (e.g. a missing key or model): auto selection finds nothing
    from memdir.embeddings import registry

    def unavailable(cfg, env=None):
        return registry.ProviderSelection(None, "auto", unavailable_reason="gone")

    (ws / "memory/2026-01-13.md").write_text("- Meeting about the quarterly roadmap.\n")
    with monkeypatch.context() as mp:
        mp.setattr("memdir.api.select_provider", unavailable)
        with Memory(ws, config=backend.config()) as mem:
            report = mem.sync()
            assert not report.full  # no rebuild into a keyword-only index
            assert mem.status()["vector"]["vectors"] == 5  # old vectors kept
            assert mem.search("quarterly roadmap").results[0].path == "memory/2026-01-13.md"
    # the provider is back: only the new chunk is embedded
    counting = CountingProvider(model)
    with Memory(ws, provider=counting, config=backend.config()) as mem:
        report = mem.sync()
        assert not report.full and counting.embedded == 1
        assert mem.status()["vector"]["vectors"] == 6


def test_model_change_rebuilds_in_the_background_of_readers(ws: Path, model):
    """An identity change (here: chunking) rebuilds while another reader keeps answering."""
    with Memory(ws, provider=CountingProvider(model)) as mem:
        mem.sync()
    answers: list[int] = []
    stop = threading.Event()

    def reader():
        with Memory(ws, provider=CountingProvider(model)) as r:
            while not stop.is_set():
                answers.append(len(r.search("Kafka", sync=False).results))

    t = threading.Thread(target=reader)
    t.start()
    try:
        with Memory(ws, provider=CountingProvider(model), config={"memorySearch": {"chunking": {"tokens": 100}}}) as m:
            assert m.sync().full
    finally:
        stop.set()
        t.join(30)
    assert answers and all(n > 0 for n in answers)


def test_status_deep_names_the_vector_path(ws: Path, model):
    with Memory(ws, provider=CountingProvider(model)) as mem:
        mem.sync()
        st = mem.status(deep=True)
        assert st["vector"]["path"] == "matrix" and "matrix" in st["vector"]["why"]
        mem.search("anything")  # the first vector search loads the matrix: status says it is warm
        warm = mem.status()["vector"]["warm"]
        assert warm["rows"] == st["vector"]["vectors"] > 0 and warm["dims"] == 384 and warm["loads"] == 1
        assert "phraseCounts" in mem.status()["fts"]["warm"]
        assert st["embeddingProbe"]["ok"] and st["embeddingProbe"]["dims"] == 384


def test_a_vector_search_whose_query_cannot_be_embedded_answers_from_keywords(ws: Path, model):
    with Memory(ws, provider=BrokenQueryProvider(model, error="model went away")) as mem:
        mem.sync()
        resp = mem.search("Kafka billing", sync=False, mode="vector")
        assert resp.mode == "fts-only"
        assert resp.fallback == {"from": "vector", "reason": "query embedding failed: model went away"}
        assert [r.path for r in resp.results][:1] == ["memory/2026-01-10.md"]
        hybrid = mem.search("Kafka billing", sync=False)
        assert hybrid.fallback["from"] == "hybrid"
        assert [r.path for r in hybrid.results] == [r.path for r in resp.results]
