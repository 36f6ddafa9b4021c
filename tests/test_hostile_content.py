"""Hostile note contents: NUL bytes, invalid UTF-8, BOMs, CRLF, one enormous line.

Every case goes through the real CLI in a subprocess and real SQLite; each note carries a
unique word, so a search proves the note was indexed and nothing else was lost.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import unicodedata
from pathlib import Path

from conftest import parse_json
from helpers import cli_env, python_child
from memdir import Memory, db
from memdir.textutil import nfc
from memdir.tools import clamp_results_by_chars


def _index_counts(index: Path) -> tuple[int, int]:
    # memdir's own SQLite: the keyword table's secure-delete option needs 3.42+ to be read
    conn = db.binding().connect(str(index))
    try:
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        fts = conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    finally:
        conn.close()
    return chunks, fts


def test_a_long_line_of_one_repeated_character_indexes_with_vectors(make_workspace, run_cli):
    """Regression: slices of a long line of one character are identical chunks with one id, and
    the second insert broke sqlite-vec's primary key: the whole index failed to build (exit 1,
    every search "sync before search failed")."""
    ws = make_workspace({"memory/rule.md": "=" * 8000 + "\nThe quokka note sits under a long rule.\n",
                         "MEMORY.md": "Penguins are kept in MEMORY.md.\n"})
    built = run_cli("index", "--json", "-w", str(ws))
    report = parse_json(built)
    assert report["mode"] == "hybrid" and report["indexed"] == 2
    for word, path in (("quokka", "memory/rule.md"), ("penguins", "MEMORY.md")):
        found = parse_json(run_cli("search", word, "--json", "--no-sync", "-w", str(ws)))
        assert [r["path"] for r in found["results"]][:1] == [path], found


def test_repeated_chunks_leave_no_orphan_keyword_rows(make_workspace, run_cli, keyword_config, tmp_path: Path):
    """Keyword-only, the duplicate ids replaced each other in ``chunks`` but each left a row in
    ``chunks_fts`` (6 keyword rows for 2 chunks), skewing BM25 and never deleted."""
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps(keyword_config))
    ws = make_workspace({"memory/rule.md": "x" * 8000 + "\nunique marker okapi\n"})
    report = parse_json(run_cli("index", "--json", "-c", str(cfg), "-w", str(ws)))
    chunks, fts = _index_counts(Path(report["indexPath"]))
    assert chunks == fts == report["chunks"]
    (ws / "memory" / "rule.md").write_text("rewritten: only the okapi is left\n")
    parse_json(run_cli("index", "--json", "-c", str(cfg), "-w", str(ws)))
    assert _index_counts(Path(report["indexPath"])) == (1, 1)


def test_nul_bytes_bad_utf8_bom_and_crlf_are_indexed_and_never_changed(make_workspace, run_cli, tmp_path: Path):
    ws = make_workspace()
    files = {
        "memory/nul.md": b"line one\x00with a NUL\nzebra lives here\n",
        "memory/latin1.md": b"caf\xe9 au lait \xff\xfe\ngiraffe note\n",
        "memory/bom.md": b"\xef\xbb\xbf# Title after a BOM\nokapi note\n",
        "memory/crlf.md": b"first line\r\nlemur note\r\nthird line\r\n",
        "MEMORY.md": b"\xef\xbb\xbfpenguin facts\r\n",
    }
    for rel, data in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    report = parse_json(run_cli("index", "--json", "-c", str(cfg), "-w", str(ws)))
    assert report["indexed"] == len(files) and report["skipped"] == []
    for word, rel in (("zebra", "memory/nul.md"), ("giraffe", "memory/latin1.md"), ("okapi", "memory/bom.md"),
                      ("lemur", "memory/crlf.md"), ("penguin", "MEMORY.md")):
        found = parse_json(run_cli("search", word, "--json", "--no-sync", "-c", str(cfg), "-w", str(ws)))
        assert [r["path"] for r in found["results"]] == [rel], (word, found)
    got = parse_json(run_cli("get", "memory/crlf.md", "--from", "2", "--lines", "1", "--json", "-c", str(cfg),
                             "-w", str(ws)))
    assert got["text"].rstrip("\r") == "lemur note"
    assert {rel: (ws / rel).read_bytes() for rel in files} == files  # the indexer never writes a note


def test_a_note_with_classic_mac_line_ends_has_lines(make_workspace, run_cli, tmp_path: Path):
    # lone \r line ends made the whole note one line: search cited line 1 and get could not page it
    ws = make_workspace()
    raw = b"# Pets\r\rfirst line\rthe okapi sleeps at noon\rthird line\r"
    (ws / "memory").mkdir(exist_ok=True)
    (ws / "memory" / "mac.md").write_bytes(raw)
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    parse_json(run_cli("index", "--json", "-c", str(cfg), "-w", str(ws)))
    found = parse_json(run_cli("search", "okapi", "--json", "--no-sync", "-c", str(cfg), "-w", str(ws)))
    assert [(r["path"], r["startLine"] <= 4 <= r["endLine"]) for r in found["results"]] == [("memory/mac.md", True)]
    assert "first line\nthe okapi sleeps at noon\nthird line" in found["results"][0]["snippet"]
    got = parse_json(run_cli("get", "memory/mac.md", "--from", "4", "--lines", "1", "--json", "-c", str(cfg),
                             "-w", str(ws)))
    assert got["text"] == "the okapi sleeps at noon"
    assert (ws / "memory" / "mac.md").read_bytes() == raw  # read as lines, never rewritten


def test_a_bom_before_a_dated_heading_still_dates_its_lines(make_workspace, keyword_config):
    """A UTF-8 byte order mark (Windows editors write one) was read as text: line 1's heading
    ``\\ufeff## 2024-03-02`` was no heading, so the day's notes were undated and a question
    naming the day did not prefer them; the snippet began with the invisible mark."""
    ws = make_workspace()
    raw = b"\xef\xbb\xbf## 2024-03-02\nthe okapi vet visit\n\n## 2024-04-09\nthe okapi ate hay\n"
    note = ws / "memory" / "pets.md"
    note.parent.mkdir()
    note.write_bytes(raw)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        found = mem.search("okapi on 2024-03-02", explain=True).results
        assert [(r.start_line, r.end_line) for r in found][:1] == [(1, 3)], found
        assert found[0].explain["inPeriod"] is True and found[0].snippet.startswith("## 2024-03-02"), found[0]
        assert mem.get("memory/pets.md", from_line=1, lines=1).text == "## 2024-03-02"
    assert note.read_bytes() == raw


def test_a_utf16_note_is_found_cited_and_appended_to_in_utf16(make_workspace, keyword_config):
    """Windows PowerShell's ``>`` and Notepad's "Unicode" save write UTF-16 with a byte order
    mark.  Read as UTF-8 its words were letters between NULs that no search found; an append
    wrote UTF-8 into it, which the user's editor then showed as garbage."""
    ws = make_workspace()
    log = ws / "memory" / "2026-03-04.md"
    log.parent.mkdir()
    raw = "\ufeff# Standup\r\nthe wombat deploy moved to Friday\r\n".encode("utf-16-le")
    log.write_bytes(raw)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        found = mem.search("wombat deploy").results
        assert [(r.path, r.start_line, r.end_line) for r in found] == [("memory/2026-03-04.md", 1, 3)]
        assert "the wombat deploy moved to Friday" in found[0].snippet
        assert mem.get("memory/2026-03-04.md", from_line=2, lines=1).text == "the wombat deploy moved to Friday\r"
        assert mem.append_daily("caf\u00e9 numbat \U0001f993", date="2026-03-04") == "memory/2026-03-04.md"
        assert log.read_bytes().startswith(raw)  # appended, never rewritten
        assert log.read_bytes().decode("utf-16") == ("# Standup\r\nthe wombat deploy moved to Friday\r\n"
                                                     "caf\u00e9 numbat \U0001f993\r\n")  # the note's line ends
        assert [r.path for r in mem.search("numbat").results] == ["memory/2026-03-04.md"]


def test_a_cut_snippet_never_splits_what_a_reader_sees_as_one_character(make_workspace, keyword_config):
    """A snippet was cut at 700 code points wherever they fell: inside a family emoji (its
    snippet ended in a zero-width joiner), between a skin tone and its hand, or between a
    letter and its accent."""
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    # the word searched for leads the line: the snippet is its head, cut at 700
    notes = {"memory/family.md": "kiwi " + "x" * 692 + family + " end\n",
             "memory/wave.md": "quokka " + "y" * 692 + "\U0001f44b\U0001f3fd end\n",
             "memory/accent.md": "numbat " + "z" * 692 + "e\u0301 end\n"}
    ws = make_workspace(notes)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        snippets = {word: mem.search(word).results[0].snippet for word in ("kiwi", "quokka", "numbat")}
    assert snippets == {"kiwi": "kiwi " + "x" * 692, "quokka": "quokka " + "y" * 692, "numbat": "numbat " + "z" * 692}
    assert clamp_results_by_chars([{"snippet": "x" * 697 + family}], 699) == [{"snippet": "x" * 697}]


def test_korean_in_nfd_is_never_cut_inside_a_syllable(make_workspace, keyword_config):
    """Korean in NFD (macOS, some PDFs) writes a syllable as two or three conjoining jamo, which
    chunks and snippets were cut between: a long line's chunks began with a lone vowel jamo (한
    split into ᄒ and ᅡᆫ), shown broken and indexed as no syllable."""
    import sqlite3
    import unicodedata

    word = unicodedata.normalize("NFD", "한국어")
    ws = make_workspace({"memory/ko.md": "korean " + word * 1500 + " end\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        snippet = mem.search("korean").results[0].snippet
        index = mem.status()["indexPath"]
    with sqlite3.connect(index) as conn:
        texts = [t for (t,) in conn.execute("SELECT text FROM chunks ORDER BY start_line, id")]
    assert len(texts) > 2
    for text in [*texts, snippet]:
        assert not "\u1160" <= text[0] <= "\u11ff", ascii(text[:4])  # begins with a syllable's first jamo
        assert not "\u1100" <= text.rstrip("\n")[-1] <= "\u115f" or text.endswith(" end\n"), ascii(text[-4:])


def test_a_latin1_note_keeps_its_accented_words(make_workspace, keyword_config):
    """Bytes that are not UTF-8 were read as U+FFFD: a note saved by an old Windows editor (or a
    line pasted from one into a UTF-8 note) had "caf\\ufffd" where it said café, which no
    search found.  They are read as Windows-1252; the file is never rewritten."""
    ws = make_workspace()
    raw = "# Réunion\r\nJosé brings the café crème\r\n".encode("cp1252") + "and the “menu” in UTF-8: thé\n".encode()
    note = ws / "memory" / "paris.md"
    note.parent.mkdir()
    note.write_bytes(raw)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for word in ("café", "José", "thé"):
            assert [r.path for r in mem.search(word).results] == ["memory/paris.md"], word
        assert mem.get("memory/paris.md", from_line=2, lines=2).text == ("José brings the café crème\r\n"
                                                                          "and the “menu” in UTF-8: thé")
    assert note.read_bytes() == raw


def test_an_index_built_before_notes_were_decoded_by_their_mark_is_rebuilt(make_workspace, keyword_config):
    """An index of a UTF-16 note made before it was decoded as UTF-16 held its NUL-strewn text;
    the note unchanged since, an incremental sync never read it again and its words stayed
    unfindable.  The chunker's version names how notes are read, so such an index is rebuilt."""
    ws = make_workspace()
    (ws / "memory").mkdir()
    (ws / "memory" / "win.md").write_bytes("\ufeffthe wombat plan\n".encode("utf-16-le"))
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        with sqlite3.connect(mem.index_path) as conn:  # as an older memdir left it
            conn.execute("UPDATE meta SET value = json_set(value, '$.chunker', 9) WHERE key = 'memory_index_meta_v1'")
    with Memory(ws, config=keyword_config) as mem:
        assert "chunker changed" in mem.sync().reason
        assert [r.path for r in mem.search("wombat").results] == ["memory/win.md"]


def test_a_note_piped_with_a_byte_order_mark_is_appended_without_it(make_workspace, state_dir: Path):
    """``memdir append -`` fed by a Windows tool kept its UTF-8 byte order mark: an invisible
    U+FEFF landed in the middle of the daily log, glued to the entry's first word."""
    ws = make_workspace({"memory/2026-03-04.md": "- first\n"})
    proc = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "append", "-", "--date", "2026-03-04"],
                          input="\ufeff- the okapi note\r\n".encode(), capture_output=True, timeout=60,
                          env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none"})
    assert proc.returncode == 0, proc.stderr
    assert (ws / "memory" / "2026-03-04.md").read_bytes() == b"- first\n- the okapi note\n"


def test_a_run_of_combining_marks_is_put_in_nfc_in_linear_time(tmp_path: Path) -> None:
    """Python orders a run of combining marks by insertion, in the square of its length when two
    classes alternate (U+0301, U+0316: a hostile "Zalgo" text): a question of 80,000 such marks
    took 4.4 s and an MCP request's 4 MB hours, and a note's heading of them held every sync.  In a
    subprocess, so the old behaviour fails on the timeout instead of holding the suite."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "z.md").write_text("# 2024-03-05 " + "\u0301\u0316" * 200_000 + "\n- the heron came back\n")
    code = ("import sys\nfrom memdir.api import Memory\n"
            "with Memory(sys.argv[1], config={'memorySearch': {'provider': 'none'}}) as mem:\n"
            "    mem.sync()\n"
            "    print([r.path for r in mem.search('heron').results])\n"
            "    print(mem.search('heron ' + '\\u0301\\u0316' * 200_000).results[0].path)\n")
    done = python_child(code, str(ws), state_dir=tmp_path / "state", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["['memory/z.md']", "memory/z.md"]
    # pieces are cut where a character starts: the same NFC as in one piece for any real text
    text = unicodedata.normalize("NFD", "Ça m'a coûté trop cher, dit Zoë à Málaga. 한국어 회의록. ") * 60
    assert len(text) > 3000 and nfc(text) == unicodedata.normalize("NFC", text)
