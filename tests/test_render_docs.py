"""bench/render_docs.py: docs/benchmarks.md quotes one run_all run, and only it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def render_docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "bench" / "render_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(module, "RESULTS", results)
    return module


def write_run(results: Path, steps: list[dict]) -> None:
    (results / "run.json").write_text(json.dumps({
        "commit": "0123456789abcdef", "dirty": False, "started": "2026-11-23T19:00:00+0000",
        "finished": "2026-11-23T20:00:00+0000", "machine": {"cpu": "Test CPU", "cores": 2, "python": "3.11.7",
                                                            "platform": "Linux", "stdlibSqlite": "3.40.1"},
        "steps": steps}))


def test_blocks_are_filled_from_the_run_and_a_skipped_step_says_why(render_docs):
    results = render_docs.RESULTS
    write_run(results, [
        {"name": "speed", "status": "ok", "seconds": 12.5, "loadBefore": 1.25},
        {"name": "remote-accounting", "status": "ok", "seconds": 2.0, "loadBefore": 0.5},
        {"name": "backends", "status": "skipped", "reason": "no PostgreSQL", "loadBefore": 0.5},
    ])
    (results / "speed.md").write_text("| metric | memdir |\n|---|---|\n| keyword p50 | 4.2 |\n")
    (results / "remote-accounting.json").write_text(json.dumps(
        [{"phase": "cold", "samples": 5, "chunks": 389, "embedded": 389, "requests": 76, "bytesSent": 534168}]))
    doc = ("intro\n<!-- results:run -->\nold\n<!-- /results -->\n"
           "<!-- results:speed -->\nstale 99.9\n<!-- /results -->\n"
           "<!-- results:remote-accounting -->\n<!-- /results -->\n"
           "<!-- results:backends -->\n<!-- /results -->\n")
    out = render_docs.render(doc)
    assert "stale 99.9" not in out and "| keyword p50 | 4.2 |" in out
    assert "`0123456789`" in out and "Test CPU, 2 cores" in out
    assert "| cold | 5 | 389 | 389 | 76 | 534,168 |" in out
    assert "_Not measured in this run: no PostgreSQL._" in out
    assert "_Step `speed`: 12.5 s, load average 1.2 before it._" in out
    assert render_docs.render(out) == out  # rendering is idempotent: --check passes right after a render


@pytest.mark.parametrize("steps", [[{"name": "speed", "status": "failed", "seconds": 1.0, "loadBefore": 1.0}], []],
                         ids=["failed", "missing"])
def test_a_block_whose_step_failed_or_never_ran_stops_the_render(render_docs, steps):
    write_run(render_docs.RESULTS, steps)
    with pytest.raises(SystemExit, match="speed"):
        render_docs.render("<!-- results:speed -->\n<!-- /results -->\n")


def test_the_committed_benchmarks_doc_matches_the_committed_results():
    """Every table in docs/benchmarks.md is what bench/render_docs.py makes of docs/results/."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "render_docs.py"), "--check"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("doc", "said"), [
    # the unclosed block ran on to the next block's end: both became one table, a marker was lost
    ("<!-- results:speed -->\nold\n<!-- results:backends -->\nx\n<!-- /results -->\n",
     "line 3: '<!-- results:backends -->' opens a block inside the one opened on line 1"),
    ("<!-- results:speed -->\nold\n", "line 1: a block is opened and never closed"),
    ("text\n<!-- /results -->\n", "line 2: '<!-- /results -->' closes no block"),
    # a trailing space: the block was passed over, and --check called the stale figures current
    ("<!-- results:speed --> \nstale 99.9\n<!-- /results -->\n", "line 1: '<!-- results:speed -->' is not a marker"),
], ids=["unclosed-then-another", "unclosed-at-end", "stray-close", "trailing-space"])
def test_a_malformed_marker_is_named_not_rendered_over(render_docs, doc, said):
    write_run(render_docs.RESULTS, [{"name": "speed", "status": "ok", "seconds": 1.0, "loadBefore": 1.0},
                                    {"name": "backends", "status": "ok", "seconds": 1.0, "loadBefore": 1.0}])
    (render_docs.RESULTS / "speed.md").write_text("| a |\n|---|\n| 1 |\n")
    (render_docs.RESULTS / "backends.md").write_text("| b |\n|---|\n| 2 |\n")
    with pytest.raises(SystemExit, match=r"render_docs: benchmarks\.md ") as err:
        render_docs.render(doc)
    assert said in str(err.value)


def test_a_step_whose_table_is_missing_is_named(render_docs):
    # the step says ok but printed nothing (run_all writes no empty table): a FileNotFoundError traceback
    write_run(render_docs.RESULTS, [{"name": "speed", "status": "ok", "seconds": 1.0, "loadBefore": 1.0}])
    with pytest.raises(SystemExit, match=r"render_docs: .*speed\.md is missing \(run bench/run_all\.py\)"):
        render_docs.render("<!-- results:speed -->\n<!-- /results -->\n")
