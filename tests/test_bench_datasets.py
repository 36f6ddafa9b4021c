"""`memdir bench quality` on datasets made elsewhere: other converters, other mistakes.

People re-measure on LoCoMo-style data we never saw.  A mistake in it must be named (file,
line, question) before anything is indexed, and questions that are not scored must be counted
in the report, never dropped or scored without a word.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memdir.bench.quality import format_table, load_samples, run_quality

DAY = "memory/2025-01-01.md"
NOTE = "# 2025-01-01\n\n## Session 1, 1:56 pm\n\n- Ana: Zanzibar trip booked for May.\n- Ben: Lovely, Zanzibar!\n"


def dataset(root: Path, questions: list[dict[str, Any]], *, name: str = "s1", text: str = NOTE,
            raw: str | None = None) -> Path:
    """``root/<name>/workspace/memory/2025-01-01.md`` and its queries.jsonl; returns ``root``."""
    day = root / name / "workspace" / DAY
    day.parent.mkdir(parents=True, exist_ok=True)
    day.write_text(text, encoding="utf-8")
    (root / name / "queries.jsonl").write_text(
        raw if raw is not None else "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions),
        encoding="utf-8")
    return root


def q(qid: str, category: Any = 4, lines: tuple[int, ...] = (5,), path: str = DAY, **extra: Any) -> dict[str, Any]:
    return {"id": qid, "query": "Zanzibar trip", "category": category,
            "relevant": [{"path": path, "line": n} for n in lines], **extra}


def test_category_5_written_as_text_is_left_out_like_the_number(tmp_path: Path) -> None:
    # a converter that keeps LoCoMo's categories as strings ("5"), or floats (5.0, pandas):
    # the adversarial questions were scored as a category of their own and counted in the figures
    ds = dataset(tmp_path / "ds", [q("a"), q("b", "5"), q("c", 5.0), q("d", 5)])
    report = run_quality(ds, ks=[1], modes=["keyword"])
    run = report["runs"]["memdir:keyword"]
    assert run["queries"] == 1 and list(run["byCategory"]) == ["4"]
    assert report["questions"] == {"total": 4, "adversarial": 3, "noEvidence": 0}


def test_questions_left_out_are_counted_and_said(tmp_path: Path) -> None:
    rows = [q("a"), q("b", 5), {"id": "c", "query": "Zanzibar", "category": 1, "relevant": []},
            {"id": "d", "query": "Zanzibar", "category": 2}, {"id": "e", "query": "Zanzibar", "relevant": None}]
    ds = dataset(tmp_path / "ds", rows)
    report = run_quality(ds, ks=[1, 3], modes=["keyword"])
    assert report["runs"]["memdir:keyword"]["queries"] == 1
    assert report["questions"] == {"total": 5, "adversarial": 1, "noEvidence": 3}
    table = format_table(report)
    assert "5 questions in the dataset; left out: 1 of category 5 (adversarial), 3 without evidence" in table
    assert "- 5 questions in the dataset" in format_table(report, markdown=True)


def test_a_dataset_with_nothing_to_score_gives_a_table_not_a_key_error(
        tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    # every question adversarial: the run "failed" with `memdir: 'recall'` after indexing everything
    ds = dataset(tmp_path / "ds", [q("a", 5), q("b", 5)])
    png = tmp_path / "q.png"
    proc = run_cli("bench", "quality", str(ds), "--mode", "keyword", "--k", "1,3", "--quiet",
                   *(["--plot", str(png)] if importlib.util.find_spec("matplotlib") else []))
    assert proc.returncode == 0, proc.stderr
    assert png.is_file() or not importlib.util.find_spec("matplotlib")
    row = next(line for line in proc.stdout.splitlines() if line.startswith("memdir:keyword"))
    assert row.split() == ["memdir:keyword", "-", "0"] + ["-"] * 7
    assert "no question to score" in proc.stdout and "left out: 2 of category 5" in proc.stdout
    assert "'recall'" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(("path", "line", "said"), [
    ("memory/2025-01-02.md", 3, "is not a file of the sample"),      # a day the workspace does not have
    ("./memory/2025-01-01.md", 5, "is not a file of the sample"),    # never equal to a result's path
    ("/abs/memory/2025-01-01.md", 5, "is not a file of the sample"),
    ("workspace/memory/2025-01-01.md", 5, "is not a file of the sample"),  # relative to the sample folder
    (DAY, 99, "line 99 of 'memory/2025-01-01.md' does not exist (the file has 6 lines)"),
    (DAY, 0, "line 0 of"),
], ids=["missing-file", "dot-slash", "absolute", "sample-relative", "past-the-end", "line-0"])
def test_evidence_no_result_could_contain_is_named(tmp_path: Path, path: str, line: int, said: str) -> None:
    # such a question can never be found: it scored 0 for every system, silently
    ds = dataset(tmp_path / "ds", [q("ok"), q("bad", path=path, lines=(line,))])
    with pytest.raises(ValueError) as err:
        load_samples(ds)
    assert said in str(err.value)
    assert f"{ds / 's1' / 'queries.jsonl'}:2: question 'bad'" in str(err.value)


def test_bad_evidence_fails_the_cli_before_indexing(tmp_path: Path,
                                                    run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    ds = dataset(tmp_path / "ds", [q("a", lines=(7,))])
    proc = run_cli("bench", "quality", str(ds), "--mode", "keyword")
    assert proc.returncode == 1
    assert "queries.jsonl:1: question 'a': evidence line 7 of 'memory/2025-01-01.md' does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr and "[memdir:keyword]" not in proc.stderr


def test_two_questions_with_one_id_are_refused(tmp_path: Path) -> None:
    # --out and rescore key ranked lists by id: the second question's list replaced the first's
    ds = dataset(tmp_path / "ds", [q("q1"), q("q2"), q("q1", lines=(6,))])
    with pytest.raises(ValueError, match=r"queries.jsonl:3: question id 'q1' is used again \(first on line 1\)"):
        load_samples(ds)


def test_a_sample_without_its_questions_or_its_workspace_is_named(tmp_path: Path) -> None:
    ds = dataset(tmp_path / "ds", [q("a")])
    other = ds / "s2" / "workspace" / "memory"
    other.mkdir(parents=True)
    (ds / "s2" / "queries.json").write_text("{}")  # a typo: the sample was skipped without a word
    with pytest.raises(ValueError, match=r"s2: has a workspace/ but no queries.jsonl"):
        load_samples(ds)
    dataset(ds, [q("b")], name="s2")
    (ds / "s3").mkdir()
    (ds / "s3" / "queries.jsonl").write_text(json.dumps(q("c")) + "\n")
    with pytest.raises(ValueError, match=r"s3: has queries.jsonl but no workspace/ folder"):
        load_samples(ds)
    (ds / "s3" / "queries.jsonl").unlink()
    (ds / "out").mkdir()  # a folder of something else (an --out inside the dataset) is not a sample
    assert [name for name, _, _ in load_samples(ds)] == ["s1", "s2"]
    with pytest.raises(ValueError, match="this looks like one sample: give the folder that holds it"):
        load_samples(ds / "s1")


def test_a_queries_file_saved_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    ds = dataset(tmp_path / "ds", [], raw="\ufeff" + json.dumps(q("a")) + "\r\n" + json.dumps(q("b")) + "\r\n")
    ((_name, _ws, questions),) = load_samples(ds)
    assert [x["id"] for x in questions] == ["a", "b"]
    (ds / "s1" / "queries.jsonl").write_bytes(b'{"id": "a", "query": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"queries.jsonl: not UTF-8 text"):
        load_samples(ds)


def test_non_english_questions_and_one_session(tmp_path: Path) -> None:
    text = "# 2025-01-01\n\n## Session 1, 9:00 am\n\n- Ana: Wir fahren nach Zürich — 東京 später.\n"
    ds = dataset(tmp_path / "ds", [{"id": "de", "query": "Zürich", "category": "4",
                                    "relevant": [{"path": DAY, "line": 5}]}], text=text)
    run = run_quality(ds, ks=[1], modes=["keyword"])["runs"]["memdir:keyword"]
    assert run["queries"] == 1 and run["overall"]["hit"]["1"] == 1.0


def test_a_negative_limit_is_refused_not_a_slice(tmp_path: Path,
                                                 run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    # --limit -1 scored all but the last question of every sample
    ds = dataset(tmp_path / "ds", [q("a"), q("b")])
    with pytest.raises(ValueError, match="limit must be at least 1"):
        run_quality(ds, ks=[1], modes=["keyword"], limit=-1)
    for bad in ("-1", "0"):
        proc = run_cli("bench", "quality", str(ds), "--mode", "keyword", "--limit", bad)
        assert proc.returncode == 2 and "--limit" in proc.stderr and "expected at least 1" in proc.stderr
