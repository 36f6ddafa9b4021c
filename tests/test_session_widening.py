"""A session transcript's result is widened over whole neighbouring messages of its own transcript
(like a daily log's over lines), and still cites the JSONL lines of real messages."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import settled_warmup
from memdir.api import Memory
from memdir.config import load_config
from memdir.indexing_switches import INDEXING
from memdir.note_lines import TranscriptLines
from memdir.sessions.transcript import session_document

FILLER = "we talked about the weather and the garden for a while, nothing new at all"
SESSIONS = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                             "experimental": {"sessionMemory": True}}}


def _transcript(marks: dict[int, str], messages: int = 60) -> str:
    """A session header, then ``messages`` messages (a tool record after every fifth one, so
    JSONL lines and message numbers differ); message ``i`` says ``marks[i]`` if given."""
    out = [json.dumps({"type": "session", "id": "s", "timestamp": "2024-05-01T10:00:00Z"})]
    for i in range(1, messages + 1):
        role = "user" if i % 2 else "assistant"
        text = marks.get(i, f"{FILLER} ({i})")
        out.append(json.dumps({"type": "message", "timestamp": 1_714_557_600_000 + i * 1000,
                               "message": {"role": role, "content": [{"type": "text", "text": text}]}}))
        if i % 5 == 0:
            out.append(json.dumps({"type": "toolResult", "output": "x" * 300}))
    return "\n".join(out) + "\n"


@pytest.fixture
def widen_sessions() -> Iterator[Callable[[bool], None]]:
    """Set ``INDEXING["widen_sessions"]`` for a test; restored afterwards."""
    old = INDEXING["widen_sessions"]
    yield lambda on: INDEXING.__setitem__("widen_sessions", on)
    INDEXING["widen_sessions"] = old


def _sessions_dir(ws: Path, state: Path) -> Path:
    d = load_config(workspace=ws, state_dir=state).settings.sessions_dir
    d.mkdir(parents=True, exist_ok=True)
    return d


def _search(ws: Path, state: Path, query: str, config: dict[str, Any] = SESSIONS) -> list[Any]:
    with Memory(ws, state_dir=state, config=config) as mem:
        mem.sync(reason="test")
        return mem.search(query, max_results=6, min_score=0).results


def _messages(path: Path, first: int, last: int) -> list[str]:
    """The JSONL lines ``first..last`` that are message records, as the index renders them."""
    raw = path.read_text(encoding="utf-8").split("\n")
    doc = session_document(path)
    text = doc.text.split("\n")
    assert first in doc.line_map and last in doc.line_map  # both ends are message lines
    return [text[doc.line_map.index(n)] for n in range(first, last + 1) if n in doc.line_map
            and json.loads(raw[n - 1])["type"] == "message"]


def test_a_session_result_grows_over_neighbouring_messages(make_workspace: Callable[..., Path], tmp_path: Path,
                                                           widen_sessions: Callable[[bool], None]) -> None:
    ws = make_workspace({"memory/2024-05-01.md": "# 2024-05-01\n- lunch\n"})
    state = tmp_path / "state"
    t = _sessions_dir(ws, state) / "s1.jsonl"
    t.write_text(_transcript({30: "the zeppelin tour was booked for June"}), encoding="utf-8")
    doc = session_document(t)
    hit_line = doc.line_map[29]  # message 30's JSONL line
    widen_sessions(False)
    narrow = next(r for r in _search(ws, state, "zeppelin") if r.source == "sessions")
    widen_sessions(True)
    wide = next(r for r in _search(ws, state, "zeppelin") if r.source == "sessions")
    assert wide.path == narrow.path == "sessions/s1.jsonl"
    assert wide.snippet == narrow.snippet  # the snippet is the chunk that matched
    shown = _messages(t, wide.start_line, wide.end_line)
    chunk = _messages(t, narrow.start_line, narrow.end_line)
    size = sum(len(m) + 1 for m in shown)
    assert sum(len(m) + 1 for m in chunk) <= 800 < 1400 < size <= 1600  # a 400-token chunk's worth
    assert wide.start_line < narrow.start_line <= hit_line <= narrow.end_line < wide.end_line
    # every message between the ends is shown, in order: the indexed text's own run of lines
    text = doc.text.split("\n")
    at = doc.line_map.index(wide.start_line)
    assert shown == text[at:at + len(shown)] and doc.line_map[at + len(shown) - 1] == wide.end_line
    with Memory(ws, state_dir=state, config=SESSIONS) as mem:  # memory_get opens the widened range
        got = mem.get(wide.path, from_line=wide.start_line, lines=wide.end_line - wide.start_line + 1)
    assert got.text.split("\n") == shown


def test_a_session_result_never_leaves_its_transcript(make_workspace: Callable[..., Path], tmp_path: Path) -> None:
    """Matched in a transcript's last message, a result grows upwards only, to the same size; the
    other transcript (a message that would fit) is another result, never part of this one."""
    ws = make_workspace()
    d = _sessions_dir(ws, tmp_path / "state")
    (d / "a.jsonl").write_text(_transcript({40: "the zeppelin landed at last"}, messages=40), encoding="utf-8")
    (d / "b.jsonl").write_text(_transcript({1: "another zeppelin story"}, messages=3), encoding="utf-8")
    results = _search(ws, tmp_path / "state", "zeppelin")
    by_path = {r.path: r for r in results}
    a = session_document(d / "a.jsonl")
    r = by_path["sessions/a.jsonl"]
    assert r.end_line == a.line_map[-1]
    assert 1400 < sum(len(m) + 1 for m in _messages(d / "a.jsonl", r.start_line, r.end_line)) <= 1600
    b = session_document(d / "b.jsonl")
    assert (by_path["sessions/b.jsonl"].start_line, by_path["sessions/b.jsonl"].end_line) == (b.line_map[0],
                                                                                              b.line_map[-1])


def test_widened_session_results_never_show_a_message_twice(make_workspace: Callable[..., Path],
                                                            tmp_path: Path) -> None:
    ws = make_workspace()
    t = _sessions_dir(ws, tmp_path / "state") / "s1.jsonl"
    marks = {12: "the zeppelin was red", 20: "a zeppelin flew over the lake", 45: "zeppelin rides again"}
    t.write_text(_transcript(marks), encoding="utf-8")
    doc = session_document(t)
    results = _search(ws, tmp_path / "state", "zeppelin")
    spans = sorted((r.start_line, r.end_line) for r in results)
    assert len(spans) >= 2
    for (_, b), (c, _) in itertools.pairwise(spans):
        assert b < c  # disjoint
    for lo, hi in spans:
        assert lo in doc.line_map and hi in doc.line_map
    for n in (12, 20, 45):  # every mention is shown by some result
        assert any(lo <= doc.line_map[n - 1] <= hi for lo, hi in spans)


def test_memory_file_results_are_unchanged_by_the_sessions_source(make_workspace: Callable[..., Path],
                                                                  tmp_path: Path,
                                                                  keyword_config: dict[str, Any]) -> None:
    filler = [f"- Melanie: {FILLER} ({i})" for i in range(2, 61)]
    filler[16] = "- Caroline: the zeppelin tour was booked for June."
    ws = make_workspace({"memory/2024-05-01.md": "\n".join(["# 2024-05-01", *filler]) + "\n"})
    (_sessions_dir(ws, tmp_path / "a") / "s1.jsonl").write_text(
        _transcript({30: "the zeppelin tour was booked for June"}), encoding="utf-8")
    with_sessions = [(r.path, r.start_line, r.end_line) for r in _search(ws, tmp_path / "a", "zeppelin")
                     if r.source == "memory"]
    alone = [(r.path, r.start_line, r.end_line) for r in _search(ws, tmp_path / "b", "zeppelin", keyword_config)]
    assert with_sessions == alone and alone[0][2] - alone[0][1] > 10  # widened as ever


def test_transcript_lines_follow_the_file(tmp_path: Path) -> None:
    """One width per indexed message (its ``User: …`` line and newline), each with its JSONL line,
    a redacted one's included; an appended message is seen, a file gone has none."""
    t = tmp_path / "s.jsonl"
    t.write_text(_transcript({2: "my key is sk-abcdefghijklmnop1234"}, messages=6), encoding="utf-8")
    cache = TranscriptLines()
    widths, lines = cache.messages(t)
    doc = session_document(t)
    assert "sk-abcdefghijklmnop1234" not in doc.text  # the index holds it redacted
    assert list(lines) == doc.line_map and len(widths) == 6
    indexed = [len(x) + 1 for x in doc.text.split("\n")]
    assert [w for i, w in enumerate(widths) if i != 1] == [w for i, w in enumerate(indexed) if i != 1]
    assert widths[1] == len("Assistant: my key is sk-abcdefghijklmnop1234") + 1
    with t.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "message", "message": {"role": "user", "content": "one more"}}) + "\n")
    widths, lines = cache.messages(t)
    assert lines[-1] == len(t.read_text(encoding="utf-8").split("\n")) - 1 and widths[-1] == len("User: one more") + 1
    t.unlink()
    assert cache.messages(t) == ((), ())


def test_a_warmup_measures_the_indexed_transcripts(make_workspace: Callable[..., Path], tmp_path: Path) -> None:
    """A long-lived process reads its transcripts' messages ahead (as it does its notes), so the
    first search showing a session result does not read a whole transcript; what a search then
    shows is what a fresh process shows."""
    from memdir.note_lines import TRANSCRIPT_LINES

    ws = make_workspace({"MEMORY.md": "# Notes\n\nThe zeppelin hangar is in Friedrichshafen.\n"})
    state = tmp_path / "state"
    d = _sessions_dir(ws, state)
    for name, word in (("s1", "zeppelin"), ("s2", "dirigible")):
        (d / f"{name}.jsonl").write_text(_transcript({30: f"the {word} leaves at noon"}), encoding="utf-8")
    with Memory(ws, state_dir=state, config=SESSIONS) as mem:
        mem.sync(reason="test")
        TRANSCRIPT_LINES.clear()
        state_now = settled_warmup(mem, "garden", "weather")
        assert state_now["state"] == "done" and state_now["transcripts"] == 2, state_now
        for name in ("s1", "s2"):  # held as a search would read them now
            held = TRANSCRIPT_LINES._files[str(d / f"{name}.jsonl")]
            fresh = TranscriptLines()
            assert (list(held[1]), list(held[2])) == tuple(map(list, fresh.messages(d / f"{name}.jsonl")))
        warm = [(r.path, r.start_line, r.end_line) for r in mem.search("dirigible", sync=False).results]
    TRANSCRIPT_LINES.clear()
    assert warm and warm == [(r.path, r.start_line, r.end_line) for r in _search(ws, state, "dirigible")][:len(warm)]
