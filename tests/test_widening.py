"""Small chunks, widened results (issue 10): a result holds ~1600 characters around the chunk
that matched, never repeats lines a better result shows, and BM25 is scaled by the pool's best."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memdir.api import Memory
from memdir.chunking import chunk_markdown
from memdir.config import load_config
from memdir.note_lines import NoteLines
from memdir.ranking import Candidate, Tuning
from memdir.search import _grow, _text_signal

FILLER = "- Melanie: we talked about the weather and the garden for a while, nothing new at all."


def _day(marks: dict[int, str], lines: int = 60) -> str:
    body = [marks.get(i, f"{FILLER} ({i})") for i in range(2, lines + 1)]
    return "\n".join(["# 2024-05-01", *body]) + "\n"


def _search(ws: Path, state: Path, config: dict[str, Any], query: str) -> list[Any]:
    with Memory(ws, state_dir=state, config=config) as mem:
        mem.sync(reason="test")
        return mem.search(query, max_results=6, min_score=0).results


def test_defaults_are_small_chunks_widened_to_a_400_token_chunk() -> None:
    chunking = load_config(env={}).settings.memory_search.chunking
    assert (chunking.tokens, chunking.overlap) == (200, 40)
    tune = Tuning()
    assert tune.expand_chars == 1600 == 400 * 4 and tune.expand_disjoint and tune.text_norm == "max"


def test_a_result_is_centred_on_the_line_that_matched(make_workspace: Callable[..., Path], tmp_path: Path,
                                                      keyword_config: dict[str, Any]) -> None:
    ws = make_workspace({"memory/2024-05-01.md": _day({18: "- Caroline: the zeppelin tour was booked for June."})})
    r = _search(ws, tmp_path / "s", keyword_config, "zeppelin")[0]
    text = (ws / "memory/2024-05-01.md").read_text(encoding="utf-8").split("\n")
    size = sum(len(line) + 1 for line in text[r.start_line - 1:r.end_line])
    assert 1400 < size <= 1600  # a 400-token chunk's worth, not the 800-character chunk alone
    # OpenClaw's 400/80 chunks (lines 1-18, 15-31, ...) put it 0 or 3 lines from an edge; widened
    # around its 200-token chunk it has context on both sides
    assert r.start_line <= 18 - 6 and r.end_line >= 18 + 6
    assert "zeppelin" in r.snippet


def test_widened_results_never_show_the_same_lines_twice(make_workspace: Callable[..., Path], tmp_path: Path,
                                                         keyword_config: dict[str, Any]) -> None:
    marks = {15: "- Caroline: the zeppelin was red.", 24: "- Melanie: a zeppelin flew over the lake.",
             40: "- Caroline: zeppelin rides again next week."}
    ws = make_workspace({"memory/2024-05-01.md": _day(marks)})
    results = _search(ws, tmp_path / "s", keyword_config, "zeppelin")
    spans = sorted((r.start_line, r.end_line) for r in results)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans
    assert all(any(a <= line <= b for a, b in spans) for line in marks)
    # two chunks hold line 15 (one carries it as overlap): it is shown once
    assert sum(1 for c in chunk_markdown(_day(marks), 200, 40) if 15 in range(c.start_line, c.end_line + 1)) == 2
    for r in results:  # a trimmed result's snippet is its own lines
        lines = (ws / r.path).read_text(encoding="utf-8").split("\n")[r.start_line - 1:r.end_line]
        assert all(any(line.startswith(part) for line in lines) for part in r.snippet.split("\n"))


def test_growth_stops_at_the_size_budget_the_file_edges_and_shown_lines(tmp_path: Path) -> None:
    def costs(lines: list[str]) -> list[int]:
        note = tmp_path / f"n{len(lines)}-{len(lines[0])}.md"
        note.write_text("\n".join(lines), encoding="utf-8")
        return list(NoteLines().widths(note))

    doc = costs(["x" * 99] * 30)  # 100 characters a line with its newline
    assert _grow(doc, 10, 12, 1600) == (4, 19)  # 16 lines, alternately below and above
    assert _grow(doc, 1, 2, 1600) == (1, 16)  # at the top edge it grows downwards only
    assert _grow(doc, 10, 12, 1600, [(14, 30)]) == (1, 13)  # blocked below by a shown range
    assert _grow(doc, 10, 12, 1600, [(2, 5), (16, 18)]) == (6, 15)  # shown on both sides
    assert _grow(doc, 10, 12, 1600, [(1, 11)]) == (10, 25)  # a shown range over its own first line
    assert _grow(costs(["字" * 100] * 10), 3, 3, 1600) == (2, 4)  # CJK weighs 4, as in chunking
    assert _grow([], 3, 4, 1600) == (3, 4)  # an unreadable note keeps the chunk's lines


def test_note_lines_are_reused_until_the_file_changes(tmp_path: Path) -> None:
    note = tmp_path / "2024-05-01.md"
    note.write_text("a\nbb\n", encoding="utf-8")
    held = NoteLines(max_lines=5)
    first = held.widths(note)
    assert list(first) == [2, 3, 1]  # "a", "bb", "" after the last newline
    assert held.widths(note) is first  # the same file: nothing read again
    note.write_text("a\nbbb\nc\n", encoding="utf-8")  # edited (another size): read again
    assert list(held.widths(note)) == [2, 4, 2, 1]
    note.write_bytes(b"xx\nyy\nz\n")  # the same size, another mtime: read again
    os.utime(note, ns=(1, 1))
    assert list(held.widths(note)) == [3, 3, 2, 1]
    other = tmp_path / "2024-05-02.md"
    other.write_text("q" * 15 + "\n字", encoding="utf-8")
    assert list(held.widths(other)) == [16, 5] and len(held) == 1  # CJK weighs 4; 4 + 2 lines > 5: the older one let go
    other.unlink()
    assert held.widths(other) == () and len(held) == 0  # a deleted note has no lines
    fifo = tmp_path / "2024-05-03.md"
    os.mkfifo(fifo)
    assert held.widths(fifo) == ()  # never opened, never blocks
    assert held.widths(tmp_path / "link.md") == ()  # symlinks are not followed, as in indexing


def test_bm25_is_scaled_by_the_best_keyword_match_of_the_pool() -> None:
    cands = [Candidate(str(i), "m.md", "memory", 1, 1, "", text_score=t) for i, t in enumerate((0.8, 0.5, 0.0))]
    scaled = _text_signal(cands, "max")
    assert scaled == pytest.approx({"0": 1.0, "1": 0.25, "2": 0.0})  # r = 4, 1, 0 over max r = 4
    assert _text_signal(cands, "ratio") == {"0": 0.8, "1": 0.5, "2": 0.0}


def test_a_reused_memory_widens_from_the_note_as_it_is_now(make_workspace: Callable[..., Path], tmp_path: Path,
                                                           keyword_config: dict[str, Any]) -> None:
    """Lines held between searches never outlive an edit: the widened range follows the file."""
    ws = make_workspace({"memory/2024-05-01.md": _day({18: "- Caroline: the zeppelin tour was booked for June."})})
    note = ws / "memory/2024-05-01.md"
    with Memory(ws, state_dir=tmp_path / "s", config=keyword_config) as mem:
        mem.sync(reason="test")
        before = mem.search("zeppelin", max_results=1, min_score=0).results[0]
        assert before.start_line <= 18 <= before.end_line
        # rewritten: the match moves to line 152, between 150 short lines on either side
        note.write_text("\n".join(["# 2024-05-01", *["- short"] * 150, "- Caroline: the zeppelin tour was booked.",
                                   *["- short"] * 150]) + "\n", encoding="utf-8")
        mem.sync(reason="test")
        after = mem.search("zeppelin", max_results=1, min_score=0).results[0]
    text = note.read_text(encoding="utf-8").split("\n")
    assert after.start_line <= 152 <= after.end_line and "zeppelin" in text[151]
    size = sum(len(line) + 1 for line in text[after.start_line - 1:after.end_line])
    assert 1400 < size <= 1600  # grown over the new short lines, from the file as it is now


def test_only_candidates_the_choice_reaches_are_widened(make_workspace: Callable[..., Path], tmp_path: Path,
                                                        keyword_config: dict[str, Any]) -> None:
    """Widening reads notes: candidates below the ones returned are never read."""
    from memdir.note_lines import NOTE_LINES

    files = {f"memory/2024-05-{d:02d}.md": _day({10: f"- Caroline: zeppelin note {'zeppelin ' * d}"})
             for d in range(1, 13)}
    ws = make_workspace(files)
    # nothing passes this floor: results are rescued (every keyword matched), in rank order
    config = {"memorySearch": {**keyword_config["memorySearch"], "query": {"minScore": 0.99}}}
    with Memory(ws, state_dir=tmp_path / "s", config=config) as mem:
        mem.sync(reason="test")
        NOTE_LINES.clear()
        two = mem.search("zeppelin", max_results=2).results
        read_for_two = len(NOTE_LINES)
        NOTE_LINES.clear()
        all_ = mem.search("zeppelin", max_results=12).results
    assert len(two) == 2 and read_for_two == len({r.path for r in two}) == 2  # 12 files match, 2 read
    assert len(all_) == 12 and len(NOTE_LINES) == len({r.path for r in all_}) > 2
    assert [(r.path, r.start_line, r.end_line) for r in all_[:2]] == [(r.path, r.start_line, r.end_line) for r in two]


def test_a_search_nothing_can_be_rescued_from_reads_no_note(make_workspace: Callable[..., Path],
                                                            tmp_path: Path) -> None:
    """Below the floor, with no candidate strong enough to be rescued, no candidate is widened."""
    from memdir.bench.speed import SyntheticProvider
    from memdir.note_lines import NOTE_LINES

    files = {f"memory/2024-05-{d:02d}.md": _day({10: f"- Caroline: zeppelin note {d}"}) for d in range(1, 13)}
    ws = make_workspace(files)
    vector_only = {"memorySearch": {"query": {"hybrid": {"enabled": False}}}}
    with Memory(ws, state_dir=tmp_path / "s", config=vector_only, provider=SyntheticProvider()) as mem:
        mem.sync(reason="test")
        NOTE_LINES.clear()
        # fixed random vectors: every cosine is near 0, under both the floor and the rescue bar
        unrelated = mem.search("zeppelin", max_results=6, explain=True)
        assert unrelated.mode == "hybrid" and unrelated.results == []
        assert len(NOTE_LINES) == 0
        # a query whose vector is a chunk's own is found, and that result is widened from its note
        text = mem.store.conn.execute("SELECT text FROM chunks WHERE path = 'memory/2024-05-03.md' "
                                      "ORDER BY start_line LIMIT 1").fetchone()[0]
        found = mem.search(text, max_results=1).results
    assert [r.path for r in found] == ["memory/2024-05-03.md"] and len(NOTE_LINES) == 1


def test_line_widths_weigh_each_line_as_the_chunker_does(tmp_path: Path) -> None:
    """The one-scan shortcut (no CJK anywhere: width = length) gives each line's weighted width."""
    from memdir.note_lines import line_widths
    from memdir.textutil import weighted_len

    texts = ["plain\nascii\n", "café — naïve “quotes” 🙂\nnext line\n", "mixed\n字字 and Hangul 한국\nplain\n",
             "astral \U00020000 ideograph\n", "", "\n\n", "ends without newline"]
    for text in texts:
        assert list(line_widths(text)) == [weighted_len(line) + 1 for line in text.split("\n")], text
    note = tmp_path / "n.md"
    note.write_text(texts[2], encoding="utf-8")
    assert list(NoteLines().widths(note)) == [6, 2 * 4 + 12 + 2 * 4 + 1, 6, 1]
