"""The scripts under bench/ as someone else runs them: a typo or a small dataset is named at once.

`run_all.py --only` with a misspelt step ran nothing and exited 0; `cv_locomo.py --part` likewise
printed an empty table; with one conversation, "chosen by CV" was the family's first variant
(each fold chose on no data); `note_styles.py` failed half-way with a traceback on an unknown
style, mode or sample.  All of these now stop before any work, with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import cli_env
from memdir.bench.cv import leave_one_out

ROOT = Path(__file__).resolve().parents[1]
DAY = "memory/2025-01-01.md"


def _dataset(root: Path, names: tuple[str, ...] = ("7",)) -> Path:
    for name in names:
        day = root / name / "workspace" / DAY
        day.parent.mkdir(parents=True)
        day.write_text("# 2025-01-01\n\n## Session 1, 1:56 pm\n\n- Ana: Zanzibar trip booked.\n")
        (root / name / "queries.jsonl").write_text(json.dumps(
            {"id": f"{name}/q0", "query": "Zanzibar", "category": 4, "relevant": [{"path": DAY, "line": 5}]}) + "\n")
    return root


def _script(name: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=cli_env(tmp_path / "state"))


def test_run_all_refuses_an_unknown_step_and_takes_any_dataset(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds", ("41",))  # another LoCoMo dataset: no conversation 26
    results = ROOT / "docs" / "results" / "run-partial.json"
    before = results.read_bytes() if results.exists() else None
    proc = _script("run_all.py", "--dataset", str(ds), "--only", "quality-mode", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert "run_all: unknown step quality-mode in --only (steps: quality-modes, quality-gate," in proc.stderr
    assert (results.read_bytes() if results.exists() else None) == before  # nothing ran, nothing written
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _script("run_all.py", "--dataset", str(empty), "--only", "quality-modes", tmp_path=tmp_path)
    assert proc.returncode == 2 and "no LoCoMo dataset at" in proc.stderr


@pytest.fixture()
def run_all() -> Iterator[Any]:
    """bench/run_all.py as a module (its dataclass looks its module up in sys.modules)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("run_all", None)


def test_run_all_picks_a_sample_of_the_dataset_for_one_sample_steps(tmp_path: Path, run_all: Any) -> None:
    ds = _dataset(tmp_path / "ds", ("43", "41"))
    steps = {s.name: s for s in run_all.steps(ds, tmp_path / "gate", tmp_path / "work", None, True)}
    assert str(ds / "41" / "workspace") in steps["watch-latency"].argv  # was ds/26, which is not there
    assert run_all.first_sample(_dataset(tmp_path / "dev", ("30", "26"))) == tmp_path / "dev" / "26"


def test_cv_script_refuses_a_misspelt_part_and_a_single_conversation(tmp_path: Path) -> None:
    one = _dataset(tmp_path / "one")
    proc = _script("cv_locomo.py", str(one), "--part", "familes", tmp_path=tmp_path)
    assert proc.returncode == 2 and "--part: expected a comma list of ablations, families" in proc.stderr
    proc = _script("cv_locomo.py", str(one), "--part", "families", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert "it needs at least two samples" in proc.stderr and "Traceback" not in proc.stderr
    proc = _script("cv_locomo.py", str(tmp_path / "nothing"), tmp_path=tmp_path)
    assert proc.returncode == 2 and "cv_locomo: dataset folder not found" in proc.stderr


def test_leave_one_out_needs_two_samples() -> None:
    rows = {"a": [{"sample": "7", "recall": 0.0, "mrr": 0.0, "hit": 0.0, "lines": 1, "ms": 1.0, "category": "4"}],
            "b": [{"sample": "7", "recall": 1.0, "mrr": 1.0, "hit": 1.0, "lines": 1, "ms": 1.0, "category": "4"}]}
    with pytest.raises(ValueError, match="needs at least two samples"):
        leave_one_out(rows, ["a", "b"])  # it "chose" a (no other sample to choose on) and reported 0.0
    rows["a"].append({**rows["a"][0], "sample": "8"})
    rows["b"].append({**rows["b"][0], "sample": "8"})
    assert leave_one_out(rows, ["a", "b"])["chosen"] == {"7": "b", "8": "b"}


@pytest.mark.parametrize(("args", "said"), [
    (["--styles", "daily,undate"], "--styles: expected a comma list of daily, undated, memory-md, transcript"),
    (["--modes", "semantic"], "--modes: expected a comma list of hybrid, keyword, vector"),
    (["--samples", "99"], "--samples: no sample 99 in"),
    (["--cv"], "--cv chooses each candidate on the other conversations: it needs at least two samples"),
    (["--limit", "0"], "--limit: expected at least 1"),
], ids=["style", "mode", "sample", "cv-one-sample", "limit"])
def test_note_styles_names_a_bad_argument_before_any_work(tmp_path: Path, args: list[str], said: str) -> None:
    ds = _dataset(tmp_path / "ds")
    work = tmp_path / "work"
    proc = _script("note_styles.py", str(ds), "--work-dir", str(work), *args, tmp_path=tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not work.exists()


def test_note_styles_names_a_daily_log_not_in_locomos_layout(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    (ds / "7" / "workspace" / DAY).write_text("# 2025-01-01\n\nSome prose, not a turn.\n")
    (ds / "7" / "queries.jsonl").write_text("")
    proc = _script("note_styles.py", str(ds), "--work-dir", str(tmp_path / "work"), "--styles", "undated",
                   "--modes", "keyword", tmp_path=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"note_styles: {ds / '7' / 'workspace' / DAY}:3: not a heading or a turn" in proc.stderr


def test_a_misspelt_indexing_switch_is_an_error_not_the_defaults() -> None:
    from memdir.bench.cv import indexing_switches
    from memdir.indexing_switches import INDEXING

    before = dict(INDEXING)
    with pytest.raises(ValueError, match="unknown indexing switch widen_section"), \
            indexing_switches({"widen_section": False}):
        pass
    with indexing_switches({"widen_sections": False}):
        assert INDEXING["widen_sections"] is False
    assert before == INDEXING


def test_a_partial_run_never_writes_into_the_docs_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          run_all: Any) -> None:
    # a partial run's table landed in docs/results, and render_docs.py put it under the full
    # run's header (its commit, machine and times): one doc quoting two runs
    docs, partial = tmp_path / "docs-results", tmp_path / "partial"
    docs.mkdir()
    for name, value in (("RESULTS", docs), ("IMG", tmp_path / "docs-img"), ("LOGS", tmp_path / "logs"),
                        ("PARTIAL", partial)):
        monkeypatch.setattr(run_all, name, value)

    def one_step(dev: Path, gate: Path, work: Path, dsn: str | None, fast: bool, results: Path = docs,
                 img: Path = docs) -> list:
        return [run_all.Step("quality-gate", [sys.executable, "-c", "print('| R@6 | 0.9 |')"], "quality-gate.md")]

    monkeypatch.setattr(run_all, "steps", one_step)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--dataset", str(_dataset(tmp_path / "ds")), "--only",
                                      "quality-gate", "--work-dir", str(tmp_path / "work")])
    monkeypatch.setattr(run_all, "postgres", lambda dsn: pytest.fail("a partial run without backends started one"))
    assert run_all.main() == 0
    assert list(docs.iterdir()) == []
    assert (partial / "quality-gate.md").read_text() == "| R@6 | 0.9 |\n"
    assert json.loads((partial / "run-partial.json").read_text())["steps"][0]["status"] == "ok"


def test_run_all_steps_do_not_inherit_the_shells_memdir_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  run_all: Any) -> None:
    monkeypatch.setattr(run_all, "LOGS", tmp_path / "logs")
    monkeypatch.setenv("MEMDIR_CONFIG", str(tmp_path / "mine.toml"))
    monkeypatch.setenv("MEMDIR_PROVIDER", "openai")
    code = "import os; print(os.environ.get('MEMDIR_CONFIG'), os.environ.get('MEMDIR_PROVIDER'), " \
           "os.environ.get('MEMDIR_QUERY_CACHE_SIZE'), os.environ.get('MEMDIR_DATABASE_URL'))"
    step = run_all.Step("search-latency", [sys.executable, "-c", code], "out.txt",
                        env={"MEMDIR_DATABASE_URL": "postgresql://bench"})
    record = run_all.run_step(step, tmp_path)
    assert record["status"] == "ok"
    assert (tmp_path / "out.txt").read_text().split() == ["None", "None", "0", "postgresql://bench"]
