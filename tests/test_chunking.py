"""Chunking: R§17 vectors 1-16, and memdir's carry cap (documented deviation from R§3)."""

from __future__ import annotations

import hashlib

import pytest

from memdir import Memory
from memdir.chunking import _segments, chunk_id, chunk_markdown, chunk_sections, remap_lines, sha256_text
from memdir.dates import line_dates
from memdir.note_lines import heading_lines
from memdir.textutil import weighted_len


def shape(chunks):
    return [(c.start_line, c.end_line, len(c.text)) for c in chunks]


TWENTY = "\n".join(f"{i:02d}" + "x" * 18 for i in range(1, 11))


def test_v1_lines_fill_chunks_without_overlap():
    assert shape(chunk_markdown(TWENTY, 10, 0)) == [(i, i, 20) for i in range(1, 11)]


def test_v2_overlap_carries_previous_line():
    assert shape(chunk_markdown(TWENTY, 10, 5)) == [(1, 1, 20)] + [(i - 1, i, 41) for i in range(2, 11)]


def test_v3_long_line_is_split_into_segments():
    assert shape(chunk_markdown("a" * 100, 10, 0)) == [(1, 1, 40), (1, 1, 40), (1, 1, 20)]


def test_v4_every_piece_within_max_chars():
    chunks = chunk_markdown("a" * 4825, 400, 0)
    assert shape(chunks) == [(1, 1, 1600)] * 3 + [(1, 1, 25)]


def test_v5_carry_cap_never_doubles_a_chunk():
    # OpenClaw: (1600, 3201, 2401) because a whole 1600-char segment is carried as overlap.
    # memdir never carries a line longer than the overlap budget, so chunks stay <= maxChars.
    chunks = chunk_markdown("a" * 4000, 400, 80)
    assert shape(chunks) == [(1, 1, 1600), (1, 1, 1600), (1, 1, 800)]
    assert max(len(c.text) for c in chunks) <= 1600


def test_v6_short_line_carry_but_no_giant_carry():
    chunks = chunk_markdown("short\n" + "b" * 2000 + "\nend", 400, 80)
    assert all(len(c.text) <= 1600 + 321 for c in chunks)
    assert chunks[0].text == "short"
    # every line is covered, in order
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 3
    assert "end" in chunks[-1].text


def test_v7_empty_content_gives_one_empty_chunk():
    chunks = chunk_markdown("", 400, 80)
    assert shape(chunks) == [(1, 1, 0)]
    assert chunks[0].hash.startswith("e3b0c442") and chunks[0].hash.endswith("b855")


def test_v8_v9_blank_lines_and_trailing_newline():
    assert [(c.start_line, c.end_line, c.text) for c in chunk_markdown("a\n\nb")] == [(1, 3, "a\n\nb")]
    assert [(c.start_line, c.end_line, c.text) for c in chunk_markdown("x\n")] == [(1, 2, "x\n")]


def test_v10_max_chars_floor_is_32():
    assert shape(chunk_markdown("\n".join(["y" * 15] * 4), 5, 0)) == [(1, 2, 31), (3, 4, 31)]


def test_v11_fifty_char_lines_with_and_without_overlap():
    content = "\n".join(f"L{i:03d}" + "x" * 46 for i in range(1, 101))
    assert shape(chunk_markdown(content, 400, 80)) == [(1, 31, 1580), (25, 55, 1580), (49, 79, 1580), (73, 100, 1427)]
    assert [(c.start_line, c.end_line) for c in chunk_markdown(content, 400, 0)] == [(1, 31), (32, 62), (63, 93),
                                                                                      (94, 100)]
    assert len(chunk_markdown(content, 400, 0)[-1].text) == 356


def test_v12_overlap_of_three_tokens():
    content = "\n".join(ch * 10 for ch in "abcdef")
    chunks = chunk_markdown(content, 10, 3)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 3), (2, 4), (3, 5), (4, 6)]
    assert {len(c.text) for c in chunks} == {32}


def test_v13_remap_lines_through_a_line_map():
    content = "\n".join(f"User: Message {i}" if i % 2 else f"Assistant: Reply {i}" for i in range(1, 11))
    chunks = chunk_markdown(content, 10, 0)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
    line_map = [2 + 3 * i for i in range(10)]
    remapped = remap_lines(chunks, line_map)
    assert [(c.start_line, c.end_line) for c in remapped] == [(2, 5), (8, 11), (14, 17), (20, 23), (26, 29)]


def test_v14_cjk_text_is_weighted_four_per_character():
    chunks = chunk_markdown("中" * 1000, 400, 0)
    assert [len(c.text) for c in chunks] == [400, 400, 200]


def test_mixed_cjk_line_is_not_cut_into_tiny_ascii_pieces():
    line = "a" * 1200 + "中" * 200  # weighs 2000 > 1600
    chunks = chunk_markdown(line, 400, 0)
    assert len(chunks) == 2
    assert chunks[0].text == "a" * 1200 + "中" * 100


def test_v15_v16_hashes_and_ids():
    assert sha256_text("hello") == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    h = sha256_text("alpha\nbeta\ngamma")
    assert chunk_id("memory", "memory/2026-01-12.md", 1, 3, h, "text-embedding-3-small") == (
        "9e9c75926482b2d1a237a959fc953f721c90d96de3b69473867b899c14232dc8"
    )
    assert h == hashlib.sha256(b"alpha\nbeta\ngamma").hexdigest()


@pytest.mark.parametrize("tokens,overlap", [(400, 80), (50, 10), (10, 5), (8, 0)])
def test_chunks_cover_every_line_and_respect_the_cap(tokens, overlap):
    lines = [("word " * (i % 37)).strip() + "漢字" * (i % 5) for i in range(300)]
    chunks = chunk_markdown("\n".join(lines), tokens, overlap)
    max_chars = max(32, tokens * 4)
    covered = set()
    for c in chunks:
        covered.update(range(c.start_line, c.end_line + 1))
        # never more than maxChars plus one carried line (which is itself at most the overlap)
        assert len(c.text) <= max_chars + overlap * 4 + 1
    assert covered == set(range(1, 301))
    assert [c.start_line for c in chunks] == sorted(c.start_line for c in chunks)


def test_weighted_len_counts_cjk_four_times_without_compiling_the_class_for_other_text() -> None:
    """Accents, dashes and quotes are not CJK: their length is plain, and the CJK class (5 ms to
    compile, paid by a cold search that widens a note with an em dash) stays uncompiled."""
    from memdir import textutil

    fresh = textutil.LazyPattern(textutil._CJK_WEIGHT._source)
    real = textutil._CJK_WEIGHT
    textutil._CJK_WEIGHT = fresh
    try:
        for text in ("naïve café — “quoted” ‘text’ … 10 €", "Ünïcödé ñ ß ø å ł"):
            assert textutil.weighted_len(text) == len(text)
        assert not textutil.has_hangul("café — ok") and not textutil.has_han_or_kana("café — ok")
        assert fresh._compiled is None
        assert textutil.weighted_len("x" * 300 + "é") == 301
        assert textutil.weighted_len("会议 — 讨论") == 7 + 3 * 4
        assert textutil.weighted_len("é" * 300 + "讨") == 301 + 3  # long text: the class decides
        assert textutil.is_cjk("讨") and not textutil.is_cjk("—") and not textutil.is_cjk("a")
    finally:
        textutil._CJK_WEIGHT = real
    assert textutil.has_hangul("회의 — 노트") and textutil.has_han_or_kana("かな — ok")


DEPLOY = ("# Projects\n\n## Deploy\nTo deploy the okapi app run:\n```bash\n# build the image\ndocker build -t app .\n\n"
          "# 2024-05-05 push it\ndocker push app\n```\nThen tell the team.\n\n## Other\nunrelated words here\n")


def test_a_code_block_is_one_block_and_its_comments_no_headings(make_workspace, keyword_config):
    """A ``# comment`` line in a fenced shell snippet was taken for a heading: a small section
    was cut into scraps (a search for "docker push" gave the second half of the snippet and the
    first as another result, "deploy okapi" the heading with "```bash" and no command), and a
    dated comment dated the lines below it."""
    sections = chunk_sections(DEPLOY)
    assert [(c.start_line, c.end_line) for c in sections] == [(1, 2), (3, 13), (14, 16)]
    assert list(heading_lines(DEPLOY)) == [1, 3, 14]
    assert set(line_dates("MEMORY.md", DEPLOY)) == {None}
    unclosed = "## A\n```\n# not a heading\n\n## nor this\n"
    assert [(c.start_line, c.end_line) for c in chunk_sections(unclosed)] == [(1, 6)]
    ws = make_workspace({"MEMORY.md": DEPLOY})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for question in ("docker push", "deploy okapi"):
            found = [(r.start_line, r.end_line) for r in mem.search(question).results]
            assert found == [(3, 13)], question


def test_a_long_line_mixing_cjk_and_latin_is_cut_only_where_it_must_be() -> None:
    """Each 800-character slice of a CJK-heavy line was cut by weight on its own: its short
    remainder, carried as overlap, shared a chunk with the line's next slice, so the chunk (the
    snippet an agent cites) had a line break in the middle of the note's line."""
    line = ("你" * 50 + "a" * 750) * 3  # a slice weighs 950: 650 characters fit, 150 were left over
    text = f"# Notes\n{line}\nlast line\n"
    lines = text.split("\n")
    chunks = chunk_markdown(text, 200, 40)
    for c in chunks:
        assert c.text in "\n".join(lines[c.start_line - 1:c.end_line]), (c.start_line, c.end_line)
        assert weighted_len(c.text) <= 800 + 161  # the size cap holds (one carried line at most)
    pieces = _segments(line, 800, 200)
    assert "".join(pieces) == line and all(weighted_len(p) > 800 - 4 for p in pieces[:-1])
