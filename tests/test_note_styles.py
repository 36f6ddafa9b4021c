"""bench/note_styles.py: a conversation's evidence lines land on the same turns in every style."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from memdir.dates import file_date
from memdir.sessions.transcript import session_document

ROOT = Path(__file__).resolve().parent.parent

DAYS = {
    "memory/2023-05-08.md": ("2023-05-08", "## Session 1, 1:56 pm", [
        ("Ana", "Hi Ben! I adopted a greyhound called Comet."),
        ("Ben", "Lovely! [shares a photo: a grey dog on a sofa]"),
        ("Ana", "He sleeps all day."),
    ]),
    "memory/2023-05-25.md": ("2023-05-25", "## Session 2, 10:04 am", [
        ("Ben", "I started pottery classes on Tuesday."),
        ("Ana", "Show me your first bowl: is it blue?"),
    ]),
}


@pytest.fixture(scope="module")
def styles():
    spec = importlib.util.spec_from_file_location("note_styles", ROOT / "bench" / "note_styles.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["note_styles"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("note_styles", None)


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    sample = tmp_path / "data" / "7"
    queries = []
    for rel, (date, heading, turns) in DAYS.items():
        f = sample / "workspace" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        body = [f"# {date}", "", heading, ""] + [f"- {s}: {t}" for s, t in turns]
        f.write_text("\n".join(body) + "\n", encoding="utf-8")
        for i in range(len(turns)):
            queries.append({"id": f"7/q{len(queries)}", "query": turns[i][1], "category": 4,
                            "relevant": [{"path": rel, "line": 5 + i}]})
    queries.append({"id": "7/adv", "query": "x", "category": 5, "relevant": []})
    (sample / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    return tmp_path / "data"


def turn_of(original: Path, rel: str, line: int) -> str:
    return (original / rel).read_text(encoding="utf-8").split("\n")[line - 1][2:]  # "- Ana: ..." -> "Ana: ..."


@pytest.mark.parametrize("style", ["daily", "undated", "memory-md"])
def test_markdown_styles_map_every_turn_to_its_line(styles, dataset: Path, tmp_path: Path, style: str) -> None:
    root = styles.build_dataset(dataset, style, tmp_path / "out")
    ws = root / "7" / "workspace"
    queries = [json.loads(x) for x in (root / "7" / "queries.jsonl").read_text().splitlines()]
    original = dataset / "7" / "workspace"
    old = [json.loads(x) for x in (dataset / "7" / "queries.jsonl").read_text().splitlines()]
    assert len(queries) == len(old)
    files = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*.md"))
    for q, o in zip(queries, old, strict=True):
        for r, ro in zip(q["relevant"], o["relevant"], strict=True):
            line = (ws / r["path"]).read_text(encoding="utf-8").split("\n")[r["line"] - 1]
            assert line == "- " + turn_of(original, ro["path"], ro["line"])
    if style == "daily":
        assert files == sorted(DAYS)
    else:
        assert files == (["MEMORY.md"] if style == "memory-md" else
                         ["memory/conv-notes-01.md", "memory/conv-notes-02.md"])
        for f in files:
            text = (ws / f).read_text(encoding="utf-8")
            assert file_date(f) is None and "2023" not in text  # chunked as undated notes, no date left
            assert "## Session 1, 1:56 pm" in text or "## Session 2, 10:04 am" in text


def test_transcript_maps_turns_to_the_jsonl_lines_memdir_cites(styles, dataset: Path, tmp_path: Path) -> None:
    root = styles.build_dataset(dataset, "transcript", tmp_path / "out")
    sessions = root / "7" / "sessions"
    queries = [json.loads(x) for x in (root / "7" / "queries.jsonl").read_text().splitlines()]
    original = dataset / "7" / "workspace"
    old = [json.loads(x) for x in (dataset / "7" / "queries.jsonl").read_text().splitlines()]
    for q, o in zip(queries, old, strict=True):
        for r, ro in zip(q["relevant"], o["relevant"], strict=True):
            assert r["path"].startswith("sessions/session-0")
            doc = session_document(root / "7" / r["path"])
            # the indexed text line that memdir maps back to this JSONL line holds the turn
            text_line = doc.text.split("\n")[doc.line_map.index(r["line"])]
            assert text_line.split(": ", 1)[1] == turn_of(original, ro["path"], ro["line"])
    first = session_document(sessions / "session-01.jsonl")
    assert first.text.startswith("User: Ana: Hi Ben!") and "Assistant: Ben: Lovely!" in first.text
    assert first.line_map == [2, 3, 4]  # line 1 is the session header
    assert min(first.timestamps_ms) > 0


def test_transcript_results_are_scored_against_mapped_lines(styles, dataset: Path, tmp_path: Path) -> None:
    """A real keyword index with the sessions source: the pottery turn is found where the map says."""
    root = styles.build_dataset(dataset, "transcript", tmp_path / "out")
    stats = styles.Stats()
    adapter = styles.StyleAdapter("keyword", "transcript", stats)
    session = adapter.index(root / "7" / "workspace", tmp_path / "state")
    try:
        ans = session.search("pottery classes", 6)
    finally:
        session.close()
    assert ans.mode == "keyword"
    queries = [json.loads(x) for x in (root / "7" / "queries.jsonl").read_text().splitlines()]
    pottery = next(q for q in queries if "pottery" in q["query"])["relevant"][0]
    assert pottery == {"path": "sessions/session-02.jsonl", "line": 2}
    assert any(r.path == pottery["path"] and r.start_line <= pottery["line"] <= r.end_line for r in ans.ranked)
    assert stats.results == len(ans.ranked) and stats.bad == []


def test_unmapped_evidence_is_an_error(styles) -> None:
    with pytest.raises(ValueError, match="not a turn line"):
        styles.map_queries([{"id": "q", "relevant": [{"path": "memory/2023-05-08.md", "line": 1}]}], {})


def test_a_curated_result_grows_within_its_section(styles, dataset: Path, tmp_path: Path) -> None:
    """memdir widens a MEMORY.md result over its own section (heading included) but not into the
    next; with ``widen_sections`` off it is its section alone; the bench's "all" candidate
    (daily-log widening) crosses the heading, and its patch is undone."""
    from memdir import search
    from memdir.indexing_switches import INDEXING

    root = styles.build_dataset(dataset, "memory-md", tmp_path / "out")
    ws = root / "7" / "workspace"
    lines = (ws / "MEMORY.md").read_text(encoding="utf-8").split("\n")
    second = lines.index("## Session 2, 10:04 am") + 1
    by_sections = search._by_sections

    def pottery(how: str, state: str, widen: bool = True) -> tuple[int, int]:
        INDEXING["widen_sections"] = widen
        try:
            with styles.curated_widening(how):
                session = styles.StyleAdapter("keyword", "memory-md", styles.Stats()).index(ws, tmp_path / state)
                try:
                    top = session.search("pottery classes", 6).ranked[0]
                finally:
                    session.close()
        finally:
            INDEXING["widen_sections"] = True
        assert top.path == "MEMORY.md"
        return top.start_line, top.end_line

    assert pottery("", "a", widen=False)[0] == second  # the section's first chunk
    widened = pottery("", "b")
    nxt = next((n for n, line in enumerate(lines, start=1) if n > second and line.startswith("#")), len(lines) + 1)
    assert widened[0] == second and second + 3 <= widened[1] < nxt  # over the section's turns, not past it
    assert pottery("all", "c")[0] < second  # daily-log widening crosses the heading
    assert search._by_sections is by_sections


def test_transcript_candidates_cite_message_lines_and_restore_the_switches(styles, dataset: Path,
                                                                           tmp_path: Path) -> None:
    """Every transcript candidate (chunk sizes, widening over messages) runs on a real index, its
    returned ranges all on message lines; CV picks one of them and the switches are put back."""
    import shutil

    from memdir.indexing_switches import INDEXING

    before = dict(INDEXING)
    shutil.copytree(dataset / "7", dataset / "8")  # leave-one-out needs a second conversation to choose on
    root = styles.build_dataset(dataset, "transcript", tmp_path / "out")
    table = styles.transcript_cv(root, tmp_path / "cv", None, limit=3)
    names = [v[0] for v in styles.TRANSCRIPT_VARIANTS]
    assert list(table) == [*names, "chosen by CV"]
    assert any(v[2].get("widen_sessions") for v in styles.TRANSCRIPT_VARIANTS)
    for name in names:
        assert table[name]["overall"]["queries"] == 6 and table[name]["badRanges"] == 0
    assert set(table["chosen by CV"]["chosen"]) == {"7", "8"}
    assert set(table["chosen by CV"]["chosen"].values()) <= set(names)
    assert before == INDEXING


@pytest.mark.parametrize("style", ["daily", "undated", "memory-md", "transcript"])
def test_two_sessions_on_one_day_are_converted(styles, tmp_path: Path, style: str) -> None:
    """scripts/locomo_to_dataset.py writes two sessions of one day into that day's log; such a log
    was refused ("a second session heading"), so those conversations could not be measured."""
    sample = tmp_path / "data" / "9"
    day = sample / "workspace" / "memory" / "2023-05-08.md"
    day.parent.mkdir(parents=True)
    day.write_text("# 2023-05-08\n\n## Session 1, 1:56 pm\n\n- Ana: Comet is a greyhound.\n\n"
                   "## Session 2, 7:10 pm\n\n- Ben: I start pottery on Tuesday.\n- Ana: Lovely.\n")
    queries = [{"id": f"9/q{i}", "query": "x", "category": 4, "relevant": [{"path": "memory/2023-05-08.md",
                                                                           "line": line}]}
               for i, line in enumerate((5, 9, 10))]
    (sample / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    root = styles.build_dataset(tmp_path / "data", style, tmp_path / "out")
    mapped = [json.loads(x)["relevant"][0] for x in (root / "9" / "queries.jsonl").read_text().splitlines()]
    texts = ["Ana: Comet is a greyhound.", "Ben: I start pottery on Tuesday.", "Ana: Lovely."]
    for rel, text in zip(mapped, texts, strict=True):
        if style == "transcript":
            doc = session_document(root / "9" / rel["path"])
            assert doc.text.split("\n")[doc.line_map.index(rel["line"])].split(": ", 1)[1] == text
        else:
            line = (root / "9" / "workspace" / rel["path"]).read_text().split("\n")[rel["line"] - 1]
            assert line == f"- {text}"
    if style == "undated":
        note = (root / "9" / "workspace" / "memory" / "conv-notes-01.md").read_text()
        assert note == ("## Session 1, 1:56 pm\n\n- Ana: Comet is a greyhound.\n\n"
                        "## Session 2, 7:10 pm\n\n- Ben: I start pottery on Tuesday.\n- Ana: Lovely.\n")
    if style == "transcript":
        assert [rel["path"] for rel in mapped] == ["sessions/session-01.jsonl", "sessions/session-02.jsonl",
                                                   "sessions/session-02.jsonl"]
