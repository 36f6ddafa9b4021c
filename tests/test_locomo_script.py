"""scripts/locomo_to_dataset.py on a small hand-made file in LoCoMo's JSON schema, then a real bench run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "locomo_to_dataset.py"
SHARED_DEV = ROOT.parent / "shared" / "data" / "locomo-dev"

# The schema of locomo10.json (snap-research/locomo): a list of samples, each with a
# conversation of numbered sessions (+ their date/time strings) and a qa list whose evidence
# names dialogue ids.  The text here is invented.
LOCOMO = [
    {
        "sample_id": "conv-7",
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben! I adopted a greyhound called Comet."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely!\nShow me?"},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "Here he is.", "img_url": ["https://example.invalid/x.jpg"],
                 "blip_caption": "a photo of a grey dog on a sofa", "query": "greyhound"},
            ],
            "session_2_date_time": "7:10 pm on 8 May, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "I start pottery classes on Tuesday."},
            ],
            "session_3_date_time": "10:02 am on 27 Sept, 2023",
            "session_3": [],
            "session_4_date_time": "9:15 am on 2 June, 2023",
            "session_4": [
                {"speaker": "Ana", "dia_id": "D4:1", "text": "Comet won a race at the park!"},
                {"speaker": "Ben", "dia_id": "D4:2", "text": "How fast is he now?"},
            ],
        },
        "qa": [
            {"question": "What is the name of Ana's dog?", "answer": "Comet", "evidence": ["D1:1"], "category": 4},
            {"question": "What did Ben start on Tuesday?", "answer": "pottery classes", "evidence": ["D2:1"],
             "category": 1},
            {"question": "What did Comet win?", "answer": "a race", "evidence": ["D4:1; D1:3"], "category": 2},
            {"question": "What did Ana's cat win?", "adversarial_answer": "a race", "evidence": ["D4:1"],
             "category": 5},
            {"question": "Unanswerable: no evidence", "answer": "?", "evidence": ["D9:9"], "category": 3},
        ],
        "event_summary": {}, "observation": {}, "session_summary": {},
    },
    {"sample_id": "conv-8", "conversation": {"speaker_a": "C", "speaker_b": "D",
                                             "session_1_date_time": "8:00 am on 1 January, 2024",
                                             "session_1": [{"speaker": "C", "dia_id": "D1:1", "text": "Hello."}]},
     "qa": []},
]


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_conversion_layout_and_evidence_lines(tmp_path: Path):
    src = tmp_path / "locomo10.json"
    src.write_text(json.dumps(LOCOMO))
    out = tmp_path / "dataset"
    proc = run_script(str(src), str(out), "--samples", "conv-7")
    assert proc.returncode == 0, proc.stderr
    assert "conv-7: 2 daily logs, 4 questions (1 without usable evidence left out)" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["7"]  # conv-8 was not asked for

    may = (out / "7" / "workspace" / "memory" / "2023-05-08.md").read_text().splitlines()
    assert may == [
        "# 2023-05-08", "",
        "## Session 1, 1:56 pm", "",
        "- Ana: Hi Ben! I adopted a greyhound called Comet.",
        "- Ben: Lovely! Show me?",
        "- Ana: Here he is. [shares a photo: a photo of a grey dog on a sofa]",
        "",
        "## Session 2, 7:10 pm", "",
        "- Ben: I start pottery classes on Tuesday.",
    ]
    assert (out / "7" / "workspace" / "memory" / "2023-06-02.md").read_text().startswith(
        "# 2023-06-02\n\n## Session 4, 9:15 am\n\n- Ana: Comet won a race at the park!\n")
    assert not (out / "7" / "workspace" / "memory" / "2023-09-27.md").exists()  # an empty session writes nothing

    queries = [json.loads(line) for line in (out / "7" / "queries.jsonl").read_text().splitlines()]
    assert queries == [
        {"id": "7/q0", "query": "What is the name of Ana's dog?", "category": 4, "answer": "Comet",
         "relevant": [{"path": "memory/2023-05-08.md", "line": 5}]},
        {"id": "7/q1", "query": "What did Ben start on Tuesday?", "category": 1, "answer": "pottery classes",
         "relevant": [{"path": "memory/2023-05-08.md", "line": 11}]},
        {"id": "7/q2", "query": "What did Comet win?", "category": 2, "answer": "a race",
         "relevant": [{"path": "memory/2023-06-02.md", "line": 5}, {"path": "memory/2023-05-08.md", "line": 7}]},
        {"id": "7/q3", "query": "What did Ana's cat win?", "category": 5, "answer": "a race",
         "relevant": [{"path": "memory/2023-06-02.md", "line": 5}]},
    ]
    # every evidence line points at the turn it names
    for q in queries:
        for rel in q["relevant"]:
            line = (out / "7" / "workspace" / rel["path"]).read_text().splitlines()[rel["line"] - 1]
            assert line.startswith("- ")

    # and memdir's own bench runs on it
    bench = subprocess.run([sys.executable, "-m", "memdir", "bench", "quality", str(out), "--mode", "keyword",
                            "--json", "--quiet"], capture_output=True, text=True, timeout=300,
                           env=cli_env(tmp_path / "state"))
    assert bench.returncode == 0, bench.stderr
    run = json.loads(bench.stdout)["runs"]["memdir:keyword"]
    assert run["queries"] == 3  # category 5 (adversarial) is left out of recall figures
    assert run["overall"]["hit"]["10"] == 1.0


def test_bad_input_is_reported(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"sample_id": "conv-1", "conversation": {
        "session_1_date_time": "sometime", "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "x"}]}}]))
    proc = run_script(str(bad), str(tmp_path / "out"))
    assert proc.returncode == 1 and "conv-1 session 1: cannot read the session date 'sometime'" in proc.stderr
    not_list = tmp_path / "obj.json"
    not_list.write_text("{}")
    assert "expected a list of samples" in run_script(str(not_list), str(tmp_path / "o2")).stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(LOCOMO))
    assert "is not empty" in run_script(str(good), str(tmp_path / "full")).stderr


def test_same_layout_as_the_development_split():
    """Where the project's LoCoMo split is at hand, its files have exactly the shape the script writes."""
    if not SHARED_DEV.is_dir():
        import pytest

        pytest.skip("../shared/data/locomo-dev is not beside this checkout")
    first = sorted((SHARED_DEV / "26" / "workspace" / "memory").glob("*.md"))[0].read_text().splitlines()
    assert re.fullmatch(r"# \d{4}-\d{2}-\d{2}", first[0]) and first[1] == ""
    assert re.fullmatch(r"## Session \d+, \d{1,2}:\d{2} [ap]m", first[2]) and first[3] == ""
    assert all(line.startswith("- ") for line in first[4:] if line and not line.startswith("## ")) and first[4]
    query = json.loads((SHARED_DEV / "26" / "queries.jsonl").read_text().splitlines()[0])
    assert set(query) == {"id", "query", "category", "answer", "relevant"}


def _one(sample_id: str, qa: list[dict], turns: list[dict] | None = None) -> dict:
    return {"sample_id": sample_id, "conversation": {
        "speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": turns or [{"speaker": "Ana", "dia_id": "D1:1", "text": "Ich habe einen Windhund, Komet."},
                               {"speaker": "Ben", "dia_id": "D1:2", "text": "東京 in June!"}]}, "qa": qa}


def test_other_converters_evidence_ids_name_the_same_turns(tmp_path: Path):
    # "D1:02", "d1:2", "D1: 2", a bare string instead of a list: each named turn 2 and was dropped
    qa = [{"question": "Wohin?", "answer": 2023, "evidence": ["D1:02"], "category": 4},
          {"question": "Where in June?", "answer": ["Tokyo", "Kyoto"], "evidence": "d1:2", "category": 1},
          {"question": "Both", "answer": "x", "evidence": ["D1: 2; D1:1"], "category": 2},
          {"question": "Half", "answer": "x", "evidence": ["D1:1", "D7:3"], "category": 3}]
    src = tmp_path / "locomo.json"
    src.write_text(json.dumps([_one("conv-9", qa)], ensure_ascii=False))
    proc = run_script(str(src), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "conv-9: 1 daily logs, 4 questions"
    # a question that keeps part of its evidence is said, not silently scored on the rest
    assert "note: 1 question(s) kept with only the evidence that names a turn of the conversation" in proc.stdout
    queries = [json.loads(line) for line in (tmp_path / "out" / "9" / "queries.jsonl").read_text().splitlines()]
    assert [[r["line"] for r in q["relevant"]] for q in queries] == [[6], [6], [6, 5], [5]]


def test_samples_that_are_not_there_or_would_collide_are_refused(tmp_path: Path):
    src = tmp_path / "locomo.json"
    src.write_text(json.dumps([_one("conv-9", []), _one("conv-10", [])]))
    # a sample asked for that the file does not hold: nothing was written, exit 0
    proc = run_script(str(src), str(tmp_path / "a"), "--samples", "conv-9,conv-11")
    assert proc.returncode == 1 and "no sample conv-11 in" in proc.stderr and "(it has conv-9, conv-10)" in proc.stderr
    assert not (tmp_path / "a").exists()
    proc = run_script(str(src), str(tmp_path / "b"), "--samples", "10")  # the folder's name is accepted too
    assert proc.returncode == 0 and proc.stdout.startswith("conv-10:")
    # "conv-9" and "9" are one folder: the second's questions replaced the first's, the logs merged
    src.write_text(json.dumps([_one("conv-9", []), _one("9", [])]))
    proc = run_script(str(src), str(tmp_path / "c"))
    assert proc.returncode == 1 and "two samples would be written to one folder: 9" in proc.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(("sample", "said"), [
    ("not an object", "sample #1: expected 'sample_id' and a 'conversation' object"),
    ({"sample_id": "../up", "conversation": {}}, "sample '../up': not usable as a folder name"),
    ({"sample_id": "conv-1", "conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023",
                                              "session_1": ["a turn as text"]}},
     "conv-1 session 1: expected a list of turns"),
    ({**_one("conv-1", []), "qa": [["a", "list"]]}, "conv-1: 'qa' must be a list of question objects"),
], ids=["not-an-object", "path-in-id", "turn-not-an-object", "qa-not-objects"])
def test_malformed_samples_are_named_not_a_traceback(tmp_path: Path, sample, said):
    src = tmp_path / "locomo.json"
    src.write_text(json.dumps([sample]))
    proc = run_script(str(src), str(tmp_path / "out"))
    assert proc.returncode == 1 and said in proc.stderr and "Traceback" not in proc.stderr


def test_a_month_written_sept_is_read_and_an_impossible_day_is_named(tmp_path: Path):
    sample = _one("conv-9", [{"question": "?", "answer": "x", "evidence": ["D1:1"], "category": 4}])
    sample["conversation"]["session_1_date_time"] = "10:02 am on 27 Sept, 2023"  # "unknown month"
    src = tmp_path / "locomo.json"
    src.write_text(json.dumps([sample]))
    proc = run_script(str(src), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "9" / "workspace" / "memory" / "2023-09-27.md").is_file()
    sample["conversation"]["session_1_date_time"] = "10:02 am on 31 February, 2023"  # was "unknown month" too
    src.write_text(json.dumps([sample]))
    proc = run_script(str(src), str(tmp_path / "out2"))
    assert proc.returncode == 1 and "conv-9 session 1: there is no such day as" in proc.stderr
