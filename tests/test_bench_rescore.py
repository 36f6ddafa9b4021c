"""`--out` files and `memdir bench rescore`: an outside scorer must get the report's figures back.

Each k is its own search (a bigger k widens memdir's candidate pool), so the top 1 of the k = 10
search is not the k = 1 search; ``--out`` kept only the largest k's list, and rescoring it gave
other R@1/MRR@1 than the report it came with.  A ``--limit`` run's questions that were never
asked were rescored as misses.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from memdir.bench.adapters import Adapter, Answer, Ranked, Session
from memdir.bench.quality import rescore, run_quality

DAY = "memory/2025-01-01.md"


class _ByK(Session):
    def search(self, query: str, k: int) -> Answer:
        evidence, decoy = Ranked(DAY, 3, 3, 0.9), Ranked(DAY, 1, 1, 0.95)
        # asked for one result, the evidence; asked for more, a wider pool puts a decoy first
        return Answer([evidence] if k == 1 else [decoy, evidence][:k], "keyword", 0.1)


class KDependent(Adapter):
    """A system whose top results depend on how many are asked for, as memdir's do."""

    name = "k-dependent"

    def index(self, workspace: Path, state_dir: Path) -> Session:
        return _ByK()


def _dataset(root: Path, n: int = 2) -> Path:
    day = root / "s1" / "workspace" / DAY
    day.parent.mkdir(parents=True)
    day.write_text("# 2025-01-01\n\n- Zanzibar trip booked.\n")
    (root / "s1" / "queries.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "query": "Zanzibar", "category": 4, "relevant": [{"path": DAY, "line": 3}]}) + "\n"
        for i in range(n)))
    return root


def test_rescoring_the_out_files_gives_the_reports_figures_at_every_k(tmp_path: Path) -> None:
    ds, out = _dataset(tmp_path / "ds"), tmp_path / "out"
    report = run_quality(ds, ks=[1, 3], adapters=[KDependent()], out_dir=out)
    run = report["runs"]["k-dependent"]
    assert run["overall"]["recall"] == {"1": 1.0, "3": 1.0} and run["overall"]["mrr"] == {"1": 1.0, "3": 0.5}
    again = rescore(ds, out / "k-dependent", [1, 3])
    assert again["overall"] == run["overall"]  # R@1 was 0.0: the k = 3 list's first result
    by_default = rescore(ds, out / "k-dependent")  # the run's ks, from its report.json
    assert by_default["ks"] == [1, 3] and by_default["overall"] == run["overall"]
    with pytest.raises(ValueError, match="the run searched for at most 3 results"):
        rescore(ds, out / "k-dependent", [1, 3, 10])  # R@10 was R@3 under another name
    row = json.loads((out / "k-dependent" / "s1.jsonl").read_text().splitlines()[0])
    assert [r["startLine"] for r in row["results"]] == [1, 3]  # the file format is unchanged...
    assert [r["startLine"] for r in row["resultsAtK"]["1"]] == [3]  # ...and says what the k = 1 search gave


def test_rescoring_a_limited_run_scores_the_questions_it_asked(tmp_path: Path,
                                                               run_cli: Callable[..., subprocess.CompletedProcess[str]]
                                                               ) -> None:
    ds, out = _dataset(tmp_path / "ds", n=3), tmp_path / "out"
    report = run_quality(ds, ks=[1], adapters=[KDependent()], out_dir=out, limit=1)
    again = rescore(ds, out / "k-dependent", [1])
    assert (again["queries"], again["missing"], again["limitPerSample"]) == (1, 0, 1)  # was 3 questions, 2 "missed"
    assert again["overall"] == report["runs"]["k-dependent"]["overall"]
    every = rescore(ds, out / "k-dependent", [1], limit=3)  # asked for: the unasked ones count as misses
    assert (every["queries"], every["missing"]) == (3, 2)
    proc = run_cli("bench", "rescore", str(ds), str(out / "k-dependent"), "--k", "1")
    assert proc.returncode == 0 and proc.stdout.startswith("1 questions (0 without results)")


def test_results_that_cannot_be_rescored_are_named(tmp_path: Path,
                                                   run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    ds = _dataset(tmp_path / "ds")
    # a mistyped folder scored every question as a miss, exit 0
    with pytest.raises(ValueError, match="results folder not found"):
        rescore(ds, tmp_path / "nope")
    proc = run_cli("bench", "rescore", str(ds), str(tmp_path / "nope"))
    assert proc.returncode == 1 and "results folder not found" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"no <sample>\.jsonl in"):
        rescore(ds, empty)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "s1.jsonl").write_text('{"id": "q0", "results": []}\n{"id": "q1", "results": [{"path": "a"}]}\n')
    with pytest.raises(ValueError, match=r"s1.jsonl:2: each result needs \"path\", \"startLine\" and \"endLine\""):
        rescore(ds, bad)
    proc = run_cli("bench", "rescore", str(ds), str(bad))
    assert proc.returncode == 1 and "s1.jsonl:2:" in proc.stderr and "Traceback" not in proc.stderr
    (bad / "s1.jsonl").write_text('{"id": "q0", "results": []}\n{"id": "q0", "results": []}\n')
    with pytest.raises(ValueError, match=r"s1.jsonl:2: question 'q0' has results twice"):
        rescore(ds, bad)
    (bad / "s1.jsonl").write_text('{"id": "q0", "results": []}\n{"id": "other/q9", "results": []}\n')
    result = rescore(ds, bad, [1])
    assert result["unknownIds"] == 1 and result["unknownIdExamples"] == ["s1:other/q9"] and result["missing"] == 1
