"""Notes as people write them (front matter, Setext headings, long bullet groups, code, callouts):
every fact is found, shown in its snippet and cited at its lines."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir.api import Memory
from memdir.search import truncate_snippet

#: Thirteen bullets of about 60 characters: one bullet group, one chunk of ~780 characters.
GROUP = [f"- supplier {i:02d} ships the walnut veneer panels on weekday {i}" for i in range(12)]


def test_a_snippet_shows_the_matching_line_at_the_end_of_a_long_chunk(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """A snippet was the chunk's first 700 characters: in a bullet group of ~780 characters, a
    search for the group's last bullet cited its lines but its snippet stopped two bullets short
    of it."""
    last = "- the spare boathouse key hangs behind the barometer"
    ws = make_workspace({"MEMORY.md": "# Suppliers\n\n" + "\n".join([*GROUP, last]) + "\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        hit = mem.search("boathouse key").results[0]
        assert len(hit.snippet) <= 700 and hit.snippet.rstrip().endswith(last), hit.snippet
        assert hit.snippet.count("\n- supplier") >= 9  # the lines above it fill the snippet
        assert hit.start_line <= 15 <= hit.end_line
        first = mem.search("supplier 00 walnut veneer").results[0]  # the head holds it: the snippet is the head
        assert first.snippet.startswith("# Suppliers\n\n- supplier 00 ")


def test_a_note_in_another_unicode_form_shows_and_returns_its_match_as_its_nfc_twin(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """The index matches a word whatever its form (NFD from macOS, a soft hyphen, full-width
    letters, accents the question left out), but a snippet's lines and a result under the floor
    that holds every word of the question were told by the note's raw text: an NFD note's snippet
    stopped short of its matching last bullet, and of four notes saying the same, in four forms,
    only the NFC and full-width ones were returned (the others were under the floor unrescued)."""
    import unicodedata

    forms = {"nfc": "résumé", "nfd": unicodedata.normalize("NFD", "résumé"), "shy": "re\u00adsumé",
             "plain": "resume"}
    ws = make_workspace({f"memory/{name}.md": "# Suppliers\n\n" + "\n".join(GROUP)
                         + f"\n- Ana sent her {word} to the boathouse recruiter\n" for name, word in forms.items()})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for question in ("résumé", unicodedata.normalize("NFD", "résumé boathouse"), "resume"):
            hits = mem.search(question, max_results=6).results
            assert sorted(h.path for h in hits) == sorted(f"memory/{name}.md" for name in forms), question
            for hit in hits:
                assert len(hit.snippet) <= 700 and hit.snippet.rstrip().endswith("boathouse recruiter"), hit


def test_a_snippet_keeps_its_head_when_no_later_line_holds_more_of_the_question() -> None:
    text = "\n".join([*GROUP, "- the boathouse key"])
    assert truncate_snippet(text, 700) == text[:700]  # no terms: the head, as before
    assert truncate_snippet(text, 700, ["walnut"]) == text[:700]  # every line has it: the head
    focused = truncate_snippet(text, 700, ["boathouse", "supplier"])
    assert focused.endswith("- the boathouse key") and focused.startswith("- supplier 01 ") and len(focused) <= 700
    assert truncate_snippet("x" * 800, 700, ["x"]) == "x" * 700  # one line: cut at the limit


SETEXT = """Preferences
===========

- favourite tea is genmaicha from Kyoto
- prefers window seats on trains

People
------

- Alice works at Zorblax as an engineer
- Bob's birthday is on the 14th; he likes kumquats
"""


def test_a_setext_heading_leads_its_section_as_a_hash_heading_does(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """A Setext heading (a line underlined by ``===`` or ``---``, as pandoc writes levels 1 and 2)
    was no heading: it was a chunk of its own ("People\\n------"), its bullets a chunk without it,
    and a result grew over the whole file instead of its section."""
    from memdir.chunking import chunk_sections

    assert [(c.start_line, c.end_line) for c in chunk_sections(SETEXT)] == [(1, 6), (7, 12)]
    ws = make_workspace({"MEMORY.md": SETEXT})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        hit = mem.search("people kumquats").results[0]
        assert (hit.start_line, hit.end_line) == (7, 12) and hit.snippet.startswith("People\n------\n")
        tea = mem.search("genmaicha").results[0]
        assert (tea.start_line, tea.end_line) == (1, 6)  # grown within its section, not into People


def test_a_setext_heading_dates_the_lines_below_it() -> None:
    from memdir.dates import line_dates

    text = "Log\n===\n\n2024-03-02\n----------\n- planted garlic\n\nMarch 9, 2024\n-------------\n- garlic up\n"
    days = [d and d.isoformat() for d in line_dates("notes/garden.md", text)]
    assert days[:3] == [None] * 3 and days[3:7] == ["2024-03-02"] * 4 and days[7:10] == ["2024-03-09"] * 3


def test_front_matter_is_no_heading_and_its_comment_dates_nothing() -> None:
    """A YAML comment in front matter (``# 2024-01-05 imported``) was a dated heading: every line
    of the note was dated that day, and the sections chunker cut the front matter at it.  Its
    closing ``---`` is no Setext underline of the key above it either.  (Its ``date:`` key dates
    the note: tests/test_note_dates.py.)"""
    from memdir.chunking import chunk_sections
    from memdir.dates import line_dates

    note = "---\n# 2024-01-05 imported\ntitle: Trip\n\ndate: 2023-11-02\n---\n\n- booked the ryokan in Hakone\n"
    assert line_dates("notes/trip.md", note) == [dt.date(2023, 11, 2)] * 9
    assert [(c.start_line, c.end_line) for c in chunk_sections(note)] == [(1, 9)]  # its first block with it
    toml = "+++\n# 2024-01-05\ntitle = 'Trip'\n+++\n- booked\n"
    assert line_dates("notes/trip.md", toml) == [None] * 6


def test_a_note_opening_with_a_rule_keeps_its_headings() -> None:
    """Only ``key: value`` lines between two ``---`` make front matter: a note opening with a
    rule, a dated heading, prose and another rule is Markdown, its heading dating its lines."""
    from memdir.dates import line_dates
    from memdir.textutil import front_matter_lines

    note = "---\n## 2024-03-02\nWent hiking with Bob\n\n---\n"
    assert [d and d.isoformat() for d in line_dates("notes/walks.md", note)] == [None] + ["2024-03-02"] * 5
    assert front_matter_lines("---\r\ntitle: Trip\r\n\r\ntags:\r\n  - travel\r\n---\r\nbody") == 6


def test_a_long_paragraph_line_is_cut_between_words(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """A line longer than a chunk (a paragraph saved on one line, as most editors do) was cut
    every 800 characters wherever they fell: the word there was split in two ("zanz" and
    "ibarite") and no search found it.  Slices end after a space; with none, never inside a
    character a reader sees as one."""
    from memdir.chunking import chunk_markdown

    line = ("lorem ipsum dolor sit amet " * 40)[:795] + " zanzibarite crystals " + "consectetur adipiscing " * 40
    ws = make_workspace({"memory/2024-03-02.md": "# Log\n" + line + "\n", "memory/2024-03-03.md": "# Other\n- tea\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        found = mem.search("zanzibarite").results
        assert [(r.path, r.start_line) for r in found][:1] == [("memory/2024-03-02.md", 2)]
        assert "zanzibarite crystals" in found[0].snippet
    parts = [c.text for c in chunk_markdown(line, 200, 40)]
    assert "".join(parts) == line and all(p.endswith(" ") for p in parts[:-1]) and max(map(len, parts)) <= 800
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    emoji = [c.text for c in chunk_markdown(family * 300, 200, 40)]  # no space at all: cut between families
    assert "".join(emoji) == family * 300 and all(len(p) % 5 == 0 and p.startswith(family) for p in emoji)


def test_a_rule_under_an_entry_is_no_heading() -> None:
    """One line under a dated heading then ``---`` (entries parted by rules, as agents write
    logs) is an entry and a rule: it neither ends the dated section nor splits it."""
    from memdir.chunking import chunk_sections
    from memdir.dates import line_dates

    log = "## 2024-03-02\nMet Sam for lunch, he moves to Berlin.\n---\n## 2024-03-03\nQuiet day.\n"
    assert [d and d.isoformat() for d in line_dates("notes/log.md", log)] == ["2024-03-02"] * 3 + ["2024-03-03"] * 3
    assert [(c.start_line, c.end_line) for c in chunk_sections(log)] == [(1, 3), (4, 6)]


def test_a_snippet_of_a_long_paragraph_line_shows_where_it_matched(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """A paragraph saved as one line of 780 characters is one chunk, and its snippet was the
    line's first 700 characters: a search for the sentence at its end showed everything else."""
    para = ("We walked the ridge path past the old quarry and the pines, then down to the village "
            "for lunch at the inn by the bridge. ") * 6 + "The spare boathouse key hangs behind the barometer."
    ws = make_workspace({"memory/2024-03-02.md": para + "\n", "memory/2024-03-03.md": "- tea\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        hit = mem.search("boathouse key").results[0]
    assert len(para) > 700 and (hit.start_line, hit.end_line) == (1, 2)
    assert hit.snippet.rstrip().endswith("The spare boathouse key hangs behind the barometer.")
    assert len(hit.snippet) <= 700 and para[para.index(hit.snippet.rstrip()) - 1] == " "  # it starts at a word
    assert truncate_snippet(para, 700, ["ridge"]) == para[:700]  # the head shows it: the head


def test_a_long_line_in_another_form_shows_where_it_matched() -> None:
    """A long line's snippet is placed where the question's words are, found as the index matches
    them; a line whose matching form has another length (an ß matched as ss, NFD accents, a soft
    hyphen) showed its head instead, wherever the words were."""
    import unicodedata

    tail = "Der Ersatzschlüssel für das Bootshaus hängt hinter dem Barometer."
    para = ("Wir gingen die Straße am alten Steinbruch entlang und dann hinunter ins Dorf zum "
            "Mittagessen im Gasthaus an der Brücke. ") * 6 + tail
    for line in (para, unicodedata.normalize("NFD", para), para.replace("Mittag", "Mit\u00adtag")):
        snippet = truncate_snippet(line, 700, ["Bootshaus", "Barometer"])
        assert len(snippet) <= 700 and unicodedata.normalize("NFC", snippet).endswith(tail), snippet[-80:]
        assert line[line.index(snippet) - 1] == " "  # it starts at a word
    nfd = unicodedata.normalize("NFD", para)
    assert truncate_snippet(nfd, 700, ["Brücke"]) == nfd[:700]  # the head shows it: the head


def test_a_query_word_longer_than_the_snippet_does_not_break_it() -> None:
    """A word of the question longer than the snippet's limit, twice in a long line, raised
    ValueError while choosing where the line's snippet starts (an 800-character token against the
    700-character snippet; under memory_search's character budget, a word longer than what was left
    of it)."""
    tok = "a" * 800
    text = f"x {tok} y {tok} z"
    assert truncate_snippet(text, 700, [tok]) == text[:700]
    line = "the spare key " * 20 + "garage garage"
    assert truncate_snippet(line, 4, ["garage"]) == line[:4]  # nor its stem (garag) fits: the head


def test_rules_and_empty_front_matter_are_no_setext_headings() -> None:
    """``---`` under ``---`` (an empty front matter) or under another rule underlines no heading."""
    from memdir.chunking import chunk_sections
    from memdir.textutil import front_matter_lines, literal_lines, setext_headings

    assert front_matter_lines("---\n---\n# Trip\n") == 2
    for text in ("---\n---\n# Trip\n", "intro\n\n***\n---\n", "intro\n\n- - -\n---\n"):
        assert setext_headings(text, literal_lines(text)) == {}, text
    assert [(c.start_line, c.end_line) for c in chunk_sections("---\n---\n# Trip\n- booked\n")] == [(1, 5)]


def test_a_date_written_with_unicode_hyphens_is_a_date() -> None:
    """Word processors and language models write ``2025‑03‑04`` with non-breaking hyphens
    (U+2011) or en dashes: a heading of it dated nothing, and a question naming it named only
    the year 2025."""
    import datetime as dt

    from memdir.dates import line_dates, query_periods

    note = "## 2025\u201103\u201104 standup\n- shipped the billing fix\n## 2025\u201303\u201305\n- retro\n"
    assert [d and d.isoformat() for d in line_dates("notes/log.md", note)] == (
        ["2025-03-04"] * 2 + ["2025-03-05"] * 3)
    periods = query_periods("what shipped on 2025\u201103\u201104?", dt.date(2025, 6, 1))
    assert [(p.start, p.end) for p in periods] == [(dt.date(2025, 3, 4), dt.date(2025, 3, 4))]


def test_an_image_pasted_as_a_data_uri_is_not_indexed_as_text(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """An image pasted into a note as a data URI (Typora, Obsidian plugins, an agent's
    screenshot) was indexed as its base64: 150 KB of it made 253 chunks (a minute of embedding
    with the local model) for a note of three lines.  Its payload is left out, as a transcript's
    is; the note's lines keep their numbers and ``memory_get`` shows the note as it is."""
    import base64

    payload = base64.b64encode(bytes(range(256)) * 450).decode()
    image = f"![ridge](data:image/png;base64,{payload})"
    note = f"# Trip\n\n- the view from the ridge\n\n{image}\n\n- we camped by the lake\n"
    ws = make_workspace({"memory/trip.md": note})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        rows = mem.store.conn.execute("SELECT start_line, end_line, text FROM chunks ORDER BY start_line").fetchall()
        assert len(rows) <= 3 and not any(payload[:64] in text for _, _, text in rows)
        assert any("![ridge](data:image/png;base64,…)" in text for _, _, text in rows)
        lake = mem.search("camped lake").results[0]
        assert lake.start_line <= 7 <= lake.end_line
        assert mem.get("memory/trip.md", from_line=5, lines=1).text == image


def test_a_heading_in_an_html_comment_is_no_heading() -> None:
    """A commented-out entry (``<!--`` ... ``-->``, hidden when the note is shown) was read as
    Markdown: its ``## 2024-01-05`` dated the lines below the comment, and in MEMORY.md it cut
    the section in two."""
    from memdir.chunking import chunk_sections
    from memdir.dates import line_dates

    note = ("## 2024-03-02\n- planted garlic\n<!--\n## 2024-01-05 old plan\n- dig the beds\n-->\n"
            "- watered the garlic\n")
    assert [d and d.isoformat() for d in line_dates("notes/garden.md", note)] == ["2024-03-02"] * 8
    assert [(c.start_line, c.end_line) for c in chunk_sections(note)] == [(1, 8)]
    indented = "## A\n    <!--\n## B\n"  # four spaces in: code, no comment
    assert [(c.start_line, c.end_line) for c in chunk_sections(indented)] == [(1, 2), (3, 4)]


def test_an_excalidraw_drawing_is_indexed_by_its_words_not_its_base64(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any], tmp_path: Path) -> None:
    """Obsidian's Excalidraw plugin saves a drawing as ``<name>.excalidraw.md``: its words under
    ``# Text Elements``, the drawing as LZ-compressed base64 in a ``compressed-json`` block, in
    lines of 256 characters.  A 6 KB drawing in a vault in extraPaths was 15 chunks of base64 (each
    embedded with the local model, searched by every question); they are left out, the words and
    every line's number kept.  A short hash in a fence of its own is still text."""
    import base64
    import random

    payload = base64.b64encode(random.Random(7).randbytes(6000)).decode()
    body = "\n\n".join(payload[i:i + 256] for i in range(0, len(payload), 256))
    drawing = ("---\n\nexcalidraw-plugin: parsed\ntags: [excalidraw]\n\n---\n"
               "==⚠  Switch to EXCALIDRAW VIEW in the MORE OPTIONS menu of this document. ⚠==\n\n\n"
               "# Text Elements\nLoad balancer in front of the hedgehog cluster ^aB3dE5fG\n\n"
               f"%%\n# Drawing\n```compressed-json\n{body}\n```\n%%\n")
    digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    vault = tmp_path / "vault"
    (vault / "Excalidraw").mkdir(parents=True)
    (vault / "Excalidraw" / "Drawing 2026-11-30 10.15.33.excalidraw.md").write_text(drawing)
    (vault / "release.md").write_text(f"# Release\n\nThe tarball's digest:\n\n```\n{digest}\n```\n")
    ws = make_workspace({"memory/trip.md": "The ferry leaves at nine.\n"})
    config = {"memorySearch": {**keyword_config["memorySearch"], "extraPaths": [str(vault)]}}
    with Memory(ws, config=config) as mem:
        mem.sync()
        rows = mem.store.conn.execute("SELECT text FROM chunks WHERE path LIKE '%excalidraw.md'").fetchall()
        assert len(rows) == 1 and not any(payload[:64] in text for (text,) in rows)
        hit = mem.search("hedgehog cluster").results[0]
        assert hit.path == "../vault/Excalidraw/Drawing 2026-11-30 10.15.33.excalidraw.md" and hit.start_line <= 10
        end = drawing.count("\n") - 1  # the closing fence's line
        assert mem.get(hit.path, from_line=end, lines=1).text == "```"
        assert [r.path for r in mem.search(digest).results] == ["../vault/release.md"]
    from memdir.textutil import elide_base64_blocks

    # blocks after blocks: each is found on its own lines (counted on from the one before)
    notes = (f"text\n```\n{digest}\n```\n" * 3) + drawing
    elided = elide_base64_blocks(notes)
    assert elided.count("\n") == notes.count("\n") and elided.count(digest) == 3 and payload[:64] not in elided
