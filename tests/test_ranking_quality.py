"""The retrieval-quality pipeline of issue 10 on real components: complete scores from the store,
stemmed and exact keyword matching, window embeddings, structure-aware chunks, fusion weights per
model, honest floors, and the bench's own honesty (one search per k, ``--config``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.chunking import chunk_sections, embedding_windows
from memdir.config import load_config
from memdir.ranking import DEFAULT_WEIGHTS, MODEL_WEIGHTS, model_weights
from memdir.search import hybrid_weights
from memdir.stores.base import ChunkRow
from memdir.stores.sqlite import SqliteStore
from memdir.testing.provider_server import ProviderServer


def _store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "idx.sqlite")
    rows = [
        ChunkRow("a", "memory/2025-01-01.md", "memory", 1, 2, "ha", "m", "The heater broke down again.",
                 [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], date_start="2025-01-01", date_end="2025-01-01", windows=2),
        ChunkRow("b", "memory/2025-01-02.md", "memory", 1, 1, "hb", "m", "Broken heaters are a winter classic.",
                 [0.0, 1.0, 0.0, 0.0], date_start="2025-01-02", date_end="2025-01-02"),
        ChunkRow("c", "MEMORY.md", "memory", 1, 1, "hc", "m", "Ticket QX-1773 is Kenji's.", [0.0, 0.0, 1.0, 0.0]),
    ]
    with store.transaction():
        for r in rows:
            store.replace_file(r.path, r.source, r.hash, 1, 1, [r])
    return store


def test_complete_scores_match_what_the_searches_return(tmp_path: Path) -> None:
    store = _store(tmp_path)
    hits = {h.id: h.score for h in store.keyword_search(["heater"], 10)}
    assert set(hits) == {"a", "b"}  # "heaters" matches "heater" by its stem
    assert store.keyword_scores(["heater"], ["a", "b", "c"]) == pytest.approx({**hits, "c": 0.0})
    assert hits["a"] > hits["b"]  # the exact word ranks above the stem-only match
    # a chunk with two windows scores by its best one, by search and by lookup alike
    q = [0.0, 1.0, 0.0, 0.0]  # chunk a's second window
    searched = {h.id: h.score for h in store.vector_search(q, 3)}
    assert searched["a"] == pytest.approx(1.0) and searched["b"] == pytest.approx(1.0)
    assert store.vector_scores(q, ["a", "b", "c"]) == pytest.approx(searched)
    assert [h.id for h in store.chunks_in_period("2025-01-02", "2025-01-05", 10)] == ["b"]
    assert store.keyword_scores(["heater"], []) == {} and store.vector_scores(q, []) == {}


def test_deleting_a_file_removes_every_window_vector(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction():
        store.delete_file("memory/2025-01-01.md", "memory")
    assert store.conn.execute("SELECT COUNT(*) FROM chunks WHERE id LIKE 'a%'").fetchone()[0] == 0
    assert {h.id for h in store.vector_search([0.0, 1.0, 0.0, 0.0], 5)} == {"b", "c"}


def test_identifier_phrase_matches_only_that_identifier(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert {h.id for h in store.keyword_search(["qx 1773"], 5)} == {"c"}
    assert store.keyword_search(["qx 1737"], 5) == []


def test_memory_md_is_chunked_by_headings_and_bullet_groups() -> None:
    text = ("# Memory\n\n## Health\n- peanuts\n  - carries an EpiPen\n- oat milk\n\n- second group\n\n"
            "## Home\nWifi is Lighthouse.\nRouter in the closet.")
    chunks = chunk_sections(text)
    spans = [(c.start_line, c.end_line) for c in chunks]
    assert spans == [(1, 2), (3, 7), (8, 9), (10, 12)]  # blank lines stay with the block above
    lines = text.split("\n")
    for c in chunks:  # line maps intact: a chunk is exactly its lines
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
    big = "## Big\n" + "\n".join(f"- item {i} " + "x" * 90 for i in range(40))
    parts = chunk_sections(big, tokens=100)
    assert all(len(p.text) <= 400 + 100 for p in parts) and parts[0].start_line == 1
    assert all(not p.text.startswith("  ") for p in parts)  # never cut inside a bullet group


def test_windows_cover_the_whole_chunk_evenly() -> None:
    count = lambda lines: [len(x.split()) for x in lines]  # noqa: E731
    text = "\n".join(["w " * 20] * 14)
    wins = embedding_windows(text, 254, count)
    assert len(wins) == 2 and sum(count(wins)) == 280 and abs(count(wins)[0] - count(wins)[1]) <= 20
    assert embedding_windows("short", 254, count) == ["short"]
    long_line = "w " * 600
    assert all(count([w])[0] <= 254 for w in embedding_windows(long_line, 254, count))


def test_fusion_weights_are_chosen_per_model_and_configurable() -> None:
    assert model_weights("all-MiniLM-L6-v2-int8") == MODEL_WEIGHTS["all-MiniLM-L6-v2-int8"]
    assert model_weights("text-embedding-3-small") == DEFAULT_WEIGHTS == (0.7, 0.3)
    hybrid = load_config(env={}).settings.memory_search.query.hybrid
    assert hybrid.vector_weight is None and hybrid_weights(hybrid, "all-MiniLM-L6-v2-int8") == (0.7, 0.3)
    openclaw = load_config(overrides={"memorySearch": {"query": {"hybrid": {"vectorWeight": 0.7, "textWeight": 0.3}}}},
                           env={}).settings.memory_search.query.hybrid
    assert hybrid_weights(openclaw, "all-MiniLM-L6-v2-int8") == pytest.approx((0.7, 0.3))
    one = load_config(overrides={"memorySearch": {"query": {"hybrid": {"vectorWeight": 0.6}}}},
                      env={}).settings.memory_search.query.hybrid
    assert (one.vector_weight, one.text_weight) == pytest.approx((0.6, 0.4))


def test_provider_server_can_serve_real_vectors_over_loopback() -> None:
    import httpx

    seen: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        seen.append(texts)
        return [[float(len(t)), 1.0] for t in texts]

    with ProviderServer(api_key="k", embedder=embed, record_bodies=False) as srv:
        r = httpx.post(srv.url + "/v1/embeddings", json={"model": "m", "input": "abc"},
                       headers={"Authorization": "Bearer k"})
        assert r.status_code == 200 and r.json()["data"][0]["embedding"] == [3.0, 1.0]
        assert seen == [["abc"]] and srv.requests == []


def test_bench_quality_runs_each_k_as_its_own_search_and_honours_config(tmp_path: Path, run_cli) -> None:
    gate = Path(__file__).parent / "data" / "gate"
    missing = run_cli("--config", str(tmp_path / "nope.toml"), "bench", "quality", str(gate), "--mode", "keyword")
    assert missing.returncode == 1 and "config file not found" in missing.stderr
    cfg = tmp_path / "strict.json"
    cfg.write_text(json.dumps({"memorySearch": {"query": {"minScore": 0.99}}}))
    proc = run_cli("bench", "quality", str(gate), "--mode", "keyword", "--k", "1,6", "--json", "--config", str(cfg),
                   check=True)
    report = json.loads(proc.stdout)
    (name, run), = report["runs"].items()
    assert name == "memdir:keyword [strict.json]" and report["configFile"] == str(cfg)
    assert run["config"]["query"]["minScore"] == 0.99 and run["config"]["provider"] == "none"
    assert report["versions"]["PyStemmer"] and report["versions"]["python"]
    # one search per k: with a floor nothing passes, k=1 and k=6 both return only rescued hits
    assert run["overall"]["lines"]["1"] <= run["overall"]["lines"]["6"]


def test_explicit_min_score_is_respected_in_hybrid_too(make_workspace) -> None:
    from memdir.embeddings.local import create_local_provider

    ws = make_workspace({"memory/health.md": "- The user is allergic to peanuts and shellfish.\n",
                         "memory/other.md": "- Lunch was ramen near the office.\n"})
    settings = load_config(workspace=ws, env={}).settings
    # a configured floor above the paraphrase's fused score (≈0.43 at 0.7/0.3): it is rescued
    with Memory(ws, provider=create_local_provider(settings.memory_search),
                config={"memorySearch": {"query": {"minScore": 0.5}}}) as mem:
        mem.sync()
        default = mem.search("seafood allergy", explain=True).results
        assert default and default[0].explain["rescued"] and "cosine" in default[0].explain["rescuedBecause"]
        floor = default[0].score + 0.01
        assert all(r.score >= floor for r in mem.search("seafood allergy", min_score=floor).results)
        assert not math.isnan(default[0].score)


def test_leave_one_out_never_scores_a_setting_on_the_data_that_chose_it() -> None:
    from memdir.bench.cv import leave_one_out

    def rows(sample_scores: dict[str, float]) -> list[dict[str, object]]:
        return [{"sample": s, "id": s, "category": "1", "recall": r, "hit": r, "mrr": r, "lines": 1, "ms": 1.0}
                for s, r in sample_scores.items()]

    # "a" is best on s1 only, "b" on s2 and s3: held out, each sample gets the other samples' choice
    results = {"a": rows({"s1": 1.0, "s2": 0.0, "s3": 0.0}), "b": rows({"s1": 0.5, "s2": 0.6, "s3": 0.6})}
    out = leave_one_out(results, ["a", "b"])
    assert out["chosen"] == {"s1": "b", "s2": "b", "s3": "b"}
    assert out["overall"]["recall"] == pytest.approx((0.5 + 0.6 + 0.6) / 3, abs=1e-4)


def test_cv_variants_run_the_real_search_with_their_switches(tmp_path: Path) -> None:
    from memdir import query, ranking
    from memdir.bench.cv import Variant, load, run_variant

    gate = load(Path(__file__).parent / "data" / "gate")
    on = run_variant(Variant("kw", "keyword"), gate, tmp_path, None, k=3)
    off = run_variant(Variant("kw-nostem", "keyword", tuning={"stemming": False, "dates": False}), gate, tmp_path,
                      None, k=3)
    by_id = lambda rows: {r["id"]: r for r in rows}  # noqa: E731
    assert by_id(on)["gate/w1"]["hit"] == 1.0 and by_id(off)["gate/w1"]["hit"] == 0.0
    assert by_id(on)["gate/d1"]["mrr"] == 1.0 and by_id(off)["gate/d1"]["mrr"] < 1.0
    assert query.STEMMING and ranking.TUNING.dates  # switches restored
