"""The bench: metric functions, adapters, the generated corpus, and the ``memdir bench`` CLI."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from memdir.bench.adapters import (
    Bm25Adapter,
    MemdirAdapter,
    OpenClawCliAdapter,
    OpenClawInstall,
    OpenClawV2KeywordAdapter,
    find_openclaw,
    make_adapters,
    openclaw_v2_text_score,
    or_query,
    parse_json_tail,
)
from memdir.bench.corpus import generate
from memdir.bench.quality import Ranked, format_table, rescore, run_quality, score_query
from memdir.bench.speed import format_speed, pct, run_speed, synthetic_vector
from memdir.chunking import chunk_markdown

GATE = Path(__file__).parent / "data" / "gate"
REL = [{"path": "memory/a.md", "line": 5}, {"path": "memory/b.md", "line": 2}]


# -- score_query -----------------------------------------------------------------------------

def test_score_query_counts_a_line_inside_a_returned_range() -> None:
    ranked = [Ranked("memory/x.md", 1, 9), Ranked("memory/a.md", 3, 7), Ranked("memory/b.md", 1, 1)]
    s = score_query(REL, ranked, [1, 2, 3])
    assert s.recall == {1: 0.0, 2: 0.5, 3: 0.5}
    assert s.hit == {1: 0.0, 2: 1.0, 3: 1.0}
    assert s.rr == {1: 0.0, 2: 0.5, 3: 0.5}
    assert s.lines == {1: 9, 2: 14, 3: 15}


def test_score_query_needs_the_same_path_and_inclusive_bounds() -> None:
    exact = score_query(REL, [Ranked("memory/a.md", 5, 5), Ranked("memory/b.md", 2, 4)], [2])
    assert exact.recall[2] == 1.0 and exact.rr[2] == 1.0
    other_path = score_query(REL, [Ranked("memory/c.md", 1, 100)], [1])
    assert other_path.recall[1] == 0.0 and other_path.hit[1] == 0.0
    just_outside = score_query(REL, [Ranked("memory/a.md", 6, 10), Ranked("memory/b.md", 3, 9)], [2])
    assert just_outside.recall[2] == 0.0


def test_score_query_empty_results_and_duplicate_labels() -> None:
    s = score_query(REL, [], [1, 5])
    assert s.recall == {1: 0.0, 5: 0.0} and s.lines == {1: 0, 5: 0}
    dup = [*REL, {"path": "memory/a.md", "line": 5}]
    assert score_query(dup, [Ranked("memory/a.md", 1, 9)], [1]).recall[1] == 0.5


def test_score_query_reciprocal_rank_is_the_first_relevant_result() -> None:
    ranked = [Ranked("memory/x.md", 1, 2), Ranked("memory/y.md", 1, 2), Ranked("memory/b.md", 2, 2),
              Ranked("memory/a.md", 5, 5)]
    s = score_query(REL, ranked, [2, 4])
    assert s.rr == {2: 0.0, 4: pytest.approx(1 / 3)}
    assert s.recall[4] == 1.0


# -- adapters --------------------------------------------------------------------------------

def test_or_query_quotes_every_word_so_user_text_is_never_syntax() -> None:
    assert or_query('What did "Bob" say? NEAR(a b) OR -x*') == \
        '"what" OR "did" OR "bob" OR "say" OR "near" OR "a" OR "b" OR "or" OR "x"'
    assert or_query("?!") is None


def test_openclaw_v2_score_is_one_for_every_fts_hit() -> None:
    assert openclaw_v2_text_score(-7.3) == 1.0
    assert openclaw_v2_text_score(-0.001) == 1.0
    assert openclaw_v2_text_score(1.0) == 0.5


@pytest.fixture
def small_ws(make_workspace: Callable[..., Path]) -> Path:
    return make_workspace({
        "MEMORY.md": "# Memory\n\n- Alice owns the billing service.\n",
        "memory/2025-01-02.md": "# 2025-01-02\n\n- Decided to move billing to PostgreSQL because of locks.\n"
                                "- Bob will write the migration runbook.\n",
        "memory/2025-01-03.md": "# 2025-01-03\n\n- Lunch with Carol; she likes the new office.\n",
    })


def test_bm25_and_openclaw_emulation_rank_the_same_chunks(small_ws: Path, tmp_path: Path) -> None:
    bm25 = Bm25Adapter().run(small_ws, tmp_path / "a", ["who writes the migration runbook?"], 3)[0]
    assert bm25.mode == "keyword" and bm25.ranked[0].path == "memory/2025-01-02.md"
    assert bm25.ranked[0].start_line == 1 and bm25.ranked[0].end_line >= 4
    oc = OpenClawV2KeywordAdapter().run(small_ws, tmp_path / "b", ["migration runbook", "who writes the runbook?"], 3)
    assert [(r.path, r.score) for r in oc[0].ranked] == [("memory/2025-01-02.md", 1.0)]
    assert oc[1].ranked == []  # AND of every word: "who" and "writes" are not in the note


def test_memdir_adapter_reports_the_mode_it_really_ran(small_ws: Path, tmp_path: Path) -> None:
    kw = MemdirAdapter("keyword").run(small_ws, tmp_path / "kw", ["billing PostgreSQL"], 5)[0]
    assert kw.mode == "keyword" and kw.note is None
    assert kw.ranked[0].path == "memory/2025-01-02.md"

    class Fixed:
        id, model, provider_key, max_input_bytes = "fixed", "fixed-3", "k", 8000
        dims = 3

        def embed_query(self, text: str) -> list[float]:
            return [1.0, 0.0, 0.0]

        def embed_batch(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0, 0.0] for _ in texts]

        def close(self) -> None:
            pass

    hy = MemdirAdapter("hybrid", provider=Fixed()).run(small_ws, tmp_path / "hy", ["billing"], 5)[0]
    assert hy.mode == "hybrid" and hy.note is None
    vec = MemdirAdapter("vector", provider=Fixed()).run(small_ws, tmp_path / "vec", ["billing"], 5)[0]
    assert vec.mode == "vector"


def test_make_adapters_names_and_errors() -> None:
    names = [a.name for a in make_adapters(["memdir", "memdir:keyword", "bm25", "openclaw-v2.27-keyword"])]
    assert names == ["memdir:hybrid", "memdir:keyword", "bm25", "openclaw-v2.27-keyword"]
    with pytest.raises(ValueError, match="unknown adapter"):
        make_adapters(["lucene"])
    with pytest.raises(ValueError, match="unknown mode"):
        make_adapters(["memdir:semantic"])


def test_openclaw_cli_is_skipped_with_a_reason_when_missing(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("MEMDIR_BENCH_OPENCLAW", raising=False)
    monkeypatch.delenv("MEMDIR_BENCH_OPENCLAW_PREFIX", raising=False)
    monkeypatch.setattr("memdir.bench.adapters.LOCAL_PREFIX", Path("no-such-prefix"))
    found = find_openclaw([tmp_path])
    assert isinstance(found, str) and "openclaw not found" in found
    adapter = OpenClawCliAdapter()
    assert adapter.unavailable_reason() == find_openclaw()
    report = run_quality(GATE, ks=[1], adapters=[adapter, Bm25Adapter()])
    assert report["runs"]["openclaw-cli"]["skipped"].startswith("openclaw not found")
    assert report["runs"]["bm25"]["queries"] == 16
    assert "openclaw-cli: skipped (openclaw not found" in format_table(report)


def test_openclaw_found_under_a_local_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pkg = tmp_path / "node_modules" / "openclaw"
    pkg.mkdir(parents=True)
    (pkg / "openclaw.mjs").write_text("// stub\n")
    (pkg / "package.json").write_text('{"version": "2026.4.12"}')
    monkeypatch.delenv("MEMDIR_BENCH_OPENCLAW", raising=False)
    monkeypatch.setenv("MEMDIR_BENCH_OPENCLAW_PREFIX", str(tmp_path))
    found = find_openclaw()
    assert isinstance(found, OpenClawInstall)
    assert found.version == "2026.4.12" and found.command[-1] == str(pkg / "openclaw.mjs")
    assert OpenClawCliAdapter(install=found).package_root() == pkg.resolve()


def test_parse_json_tail_skips_banners() -> None:
    assert parse_json_tail('[plugins] loaded 3\n{"results": [{"path": "a"}]}\n') == {"results": [{"path": "a"}]}
    assert parse_json_tail("no json") == {}


# -- quality runs ----------------------------------------------------------------------------

def test_run_quality_writes_ranked_results_that_rescore_to_the_same_numbers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = run_quality(GATE, ks=[1, 3], adapters=[MemdirAdapter("keyword"), Bm25Adapter()], out_dir=out)
    run = report["runs"]["memdir:keyword"]
    assert run["queries"] == 16 and run["ranAs"] == {"keyword": 16} and run["fallback"] is None
    assert set(run["byCategory"]) == {"exact", "paraphrase", "wordform", "date", "structure", "window"}
    assert run["byCategory"]["exact"]["recall"]["1"] == 1.0
    rows = [json.loads(line) for line in (out / "memdir-keyword" / "notes.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and set(rows[0]) == {"id", "results"}
    for row in rows:
        for r in row["results"]:
            assert set(r) == {"path", "startLine", "endLine", "score"}
    for name in ("memdir-keyword", "bm25"):
        again = rescore(GATE, out / name, [1, 3])
        assert again["overall"] == report["runs"][name.replace("memdir-", "memdir:")]["overall"]
        assert again["missing"] == 0
    assert json.loads((out / "report.json").read_text())["runs"].keys() == report["runs"].keys()


def test_category_5_and_questions_without_evidence_are_left_out(tmp_path: Path) -> None:
    sample = tmp_path / "ds" / "s1"
    (sample / "workspace" / "memory").mkdir(parents=True)
    (sample / "workspace" / "memory" / "2025-01-01.md").write_text("# day\n\n- Zanzibar trip booked.\n")
    rows = [
        {"id": "a", "query": "Zanzibar", "category": 4, "relevant": [{"path": "memory/2025-01-01.md", "line": 3}]},
        {"id": "b", "query": "Zanzibar", "category": 5, "relevant": [{"path": "memory/2025-01-01.md", "line": 3}]},
        {"id": "c", "query": "Zanzibar", "category": 1, "relevant": []},
    ]
    (sample / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = run_quality(tmp_path / "ds", ks=[1], modes=["keyword"])
    run = report["runs"]["memdir:keyword"]
    assert run["queries"] == 1 and list(run["byCategory"]) == ["4"]
    assert "4 single-hop" in format_table(report)


def test_hybrid_without_a_model_is_flagged_not_reported_as_hybrid() -> None:
    pytest.importorskip("memdir.embeddings.registry")
    from memdir.config import load_config
    from memdir.embeddings.registry import select_provider

    if select_provider(load_config(overrides={}).settings.memory_search).provider is not None:
        pytest.skip("an embedding provider is available here")
    report = run_quality(GATE, ks=[1], modes=["hybrid"])
    run = report["runs"]["memdir:hybrid"]
    assert run["ranAs"] == {"keyword": 16}
    assert run["fallback"] and "did not run as hybrid" in run["fallback"]
    assert "keyword (16) !" in format_table(report)


# -- the generated corpus and the speed bench ------------------------------------------------

def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / "workspace").rglob("*.md")):
        h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_corpus_is_deterministic_and_sized_in_chunks(tmp_path: Path) -> None:
    a = generate(tmp_path / "a", 300, seed=7)
    b = generate(tmp_path / "b", 300, seed=7)
    generate(tmp_path / "c", 300, seed=8)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b") != _digest(tmp_path / "c")
    assert a.queries == b.queries and len(a.queries) == 200
    counted = sum(sum(1 for ch in chunk_markdown(p.read_text(), 200, 40) if ch.text.strip())  # the defaults
                  for p in a.workspace.rglob("*.md"))
    assert counted == a.chunks and 300 <= a.chunks < 330
    names = sorted(p.name for p in (a.workspace / "memory").iterdir())
    assert all(len(n) == len("1990-01-01.md") for n in names)
    again = generate(tmp_path / "a", 300, seed=7)  # reused from the manifest
    assert again.chunks == a.chunks and _digest(tmp_path / "a") == _digest(tmp_path / "b")


def test_synthetic_vectors_are_fixed_unit_vectors() -> None:
    v, w = synthetic_vector("hello"), synthetic_vector("hello")
    assert v.shape == (384,) and abs(float((v * v).sum()) - 1.0) < 1e-5
    assert (v == w).all() and not (v == synthetic_vector("hello!")).all()


def test_pct_nearest_rank() -> None:
    assert pct([], 50) is None
    assert pct([5.0], 95) == 5.0
    assert pct(list(map(float, range(1, 101))), 50) == 50.0
    assert pct(list(map(float, range(1, 101))), 95) == 95.0


def test_speed_bench_measures_memdir_beside_the_baselines(tmp_path: Path) -> None:
    report = run_speed([150], embed_subset=0, n_queries=25, budget_s=0.05, work_dir=tmp_path / "w")
    (entry,) = report["sizes"]
    assert entry["corpus"]["chunks"] >= 150
    assert entry["memdirIndex"]["chunks"] == entry["baseline"]["index"]["chunks"] == entry["corpus"]["chunks"]
    assert entry["memdirIndexVectors"]["vectors"] == entry["corpus"]["chunks"]
    assert entry["memdirSearch"]["noopSync"]["indexed"] == 0
    for mode in ("keyword", "vector", "hybrid"):
        assert entry["memdirSearch"][mode]["n"] >= 20 and entry["baseline"][mode]["n"] >= 20
    assert entry["memdirSearch"]["hybrid"]["modes"] == ["hybrid"]
    assert entry["memdirSearch"]["vector"]["modes"] == ["hybrid"]  # vector-only still reports its provider mode
    assert entry["coldStart"]["memdir"]["maxRssKb"] > 0 and len(entry["coldStart"]["memdir"]["runsMs"]) == 5
    assert report["machine"]["cores"] and report["machine"]["python"]
    table = format_speed(report)
    assert "keyword search p50" in table and "CLI cold start" in table and "×" in table
    md = format_speed(report, markdown=True)
    assert md.startswith("| metric |")


# -- the CLI ---------------------------------------------------------------------------------

def test_cli_bench_quality_json_on_the_gate(run_cli: Callable[..., subprocess.CompletedProcess[str]],
                                            tmp_path: Path) -> None:
    proc = run_cli("bench", "quality", str(GATE), "--mode", "keyword", "--k", "1,3", "--json",
                   "--out", str(tmp_path / "out"), check=True)
    report = json.loads(proc.stdout)
    run = report["runs"]["memdir:keyword"]
    assert report["ks"] == [1, 3] and run["queries"] == 16
    assert run["byCategory"]["exact"]["hit"]["1"] == 1.0
    assert run["byCategory"]["paraphrase"]["hit"]["3"] == 0.0
    assert "[memdir:keyword] sample notes" in proc.stderr  # progress goes to stderr
    assert (tmp_path / "out" / "memdir-keyword" / "notes.jsonl").is_file()


def test_cli_bench_compare_table_and_strict(run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    proc = run_cli("bench", "compare", str(GATE), "--adapters", "memdir:keyword,bm25,openclaw-v2.27-keyword",
                   "--k", "1", "--quiet", check=True)
    assert proc.stderr == ""
    head, sep, *rows = proc.stdout.splitlines()
    assert head.split()[:3] == ["system", "ran", "as"] and set(sep) <= {"-", " "}
    assert [r.split()[0] for r in rows[:3]] == ["memdir:keyword", "bm25", "openclaw-v2.27-keyword"]
    strict = run_cli("bench", "quality", str(GATE), "--mode", "keyword", "--k", "1", "--strict", "--quiet")
    assert strict.returncode == 0


def test_cli_bench_takes_the_global_quiet_and_verbose_before_or_after_it(
        run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    # ``memdir -q bench quality ...`` still printed progress (the bench's own --quiet default won),
    # and ``-v``/``-q`` after the bench were unknown options, though the README says global options
    # go before or after the command
    for args in (["-q", "bench", "quality"], ["bench", "quality", "-q"], ["bench", "quality", "--quiet"]):
        quiet = run_cli(*args, str(GATE), "--mode", "keyword", "--k", "1", check=True)
        assert quiet.stderr == "" and "memdir:keyword" in quiet.stdout, args
    for args in (["-v", "bench", "quality"], ["bench", "quality", "-v"]):
        loud = run_cli(*args, str(GATE), "--mode", "keyword", "--k", "1", check=True)
        assert "INFO" in loud.stderr and "[memdir:keyword] sample notes" in loud.stderr, args


def test_cli_bench_usage_errors(run_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    bad_mode = run_cli("bench", "quality", str(GATE), "--mode", "semantic")
    assert bad_mode.returncode == 2 and "unknown mode" in bad_mode.stderr
    no_data = run_cli("bench", "quality", str(tmp_path / "nope"), "--mode", "keyword")
    assert no_data.returncode == 1 and "dataset folder not found" in no_data.stderr
    bad_k = run_cli("bench", "quality", str(GATE), "--k", "0")
    assert bad_k.returncode == 2


def test_cli_plot_without_matplotlib_says_how_to_install(
        run_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    blocker = tmp_path / "blocker" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    from helpers import SRC

    env = {"PYTHONPATH": f"{SRC}:{blocker.parent}"}
    proc = run_cli("bench", "quality", str(GATE), "--mode", "keyword", "--plot", str(tmp_path / "q.png"), env=env)
    assert proc.returncode == 1
    assert "pip install 'memdir[bench]'" in proc.stderr
    assert "[memdir:keyword]" not in proc.stderr  # refused before measuring anything
    assert not (tmp_path / "q.png").exists()


def test_cli_plot_writes_a_png(run_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "img" / "quality.png"
    run_cli("bench", "compare", str(GATE), "--adapters", "memdir:keyword,bm25", "--plot", str(png), "--quiet",
            check=True)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_installed_memdir_looks_for_bench_tools_only_where_they_can_be(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Regression: installed from a wheel, the tools were looked for (and the message said to put them)
    under ``<venv>/lib/python3.11/.bench-tools``: the checkout's layout taken for granted."""
    import memdir.bench
    import memdir.bench.adapters
    import memdir.bench.external
    from memdir.bench.external import find_memsearch_python

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "memdir" / "bench"
    for module in (memdir.bench, memdir.bench.adapters, memdir.bench.external):
        monkeypatch.setattr(module, "__file__", str(site / Path(module.__file__).name))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for name in ("MEMDIR_BENCH_OPENCLAW", "MEMDIR_BENCH_OPENCLAW_PREFIX", "MEMDIR_BENCH_MEMSEARCH_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    said = find_openclaw()
    assert isinstance(said, str) and "lib/python3.11" not in said and str(tmp_path / ".bench-tools") in said
    assert isinstance(find_memsearch_python(), str)
    monkeypatch.undo()
    from memdir.bench import checkout_root

    assert checkout_root() == Path(__file__).resolve().parents[1]  # run from this checkout
