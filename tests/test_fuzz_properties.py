"""Property-based fuzzing of memdir's real components (hypothesis).

Every property runs against real files in a temp workspace and a real index; the examples are
derandomised (the same ones every run, so CI is deterministic) and few, so each property takes a
few seconds.  Each failing example hypothesis found is kept as an ``@example`` and so checked for
ever.  Properties that held when written are kept too, as guards.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memdir.api import Memory

#: Deterministic and quick: the same examples every run, no per-example deadline (a first search
#: loads the index), no complaint about the tmp_path fixture shared by the examples of one test.
FUZZ = settings(derandomize=True, deadline=None, max_examples=150, database=None,
                suppress_health_check=list(HealthCheck))

KEYWORDS = {"memorySearch": {"provider": "none", "query": {"minScore": 0}}}

#: Letters and digits of any script (combining marks alone are left out: a word does not start
#: with one, and NFC joins the common ones to their letter).
_LETTERS = st.characters(categories=["Lu", "Ll", "Lo", "Lt", "Lm", "Nd", "Nl", "No"])
#: What a user writes inside a word: C++, node.js, foo_bar, e-mail, O'Brien, a/b, C#, AT&T.
_JOINERS = st.sampled_from([*"+.-_'/#@&:", "++", "..", "\u2019"])
WORDS = st.one_of(
    st.text(_LETTERS, min_size=1, max_size=12),
    st.tuples(st.text(_LETTERS, min_size=1, max_size=8), _JOINERS, st.text(_LETTERS, max_size=8)).map("".join),
)


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- plain filler about lunch\n", encoding="utf-8")
    for i in range(4):
        (ws / "memory" / f"2026-01-1{i}.md").write_text(f"- filler note {i} about weather and lunch\n",
                                                        encoding="utf-8")
    return ws


def test_a_note_is_found_by_a_keyword_search_for_any_word_it_holds(tmp_path: Path):
    """A note saying ``word`` is among the results of a search for ``word``, as the user types it.

    Han characters outside the unified block (extension A: Cantonese 㗎; B and later: 𨋢, names)
    were no Han to the question: beside a letter they made a phrase of every character apart
    ("ŝ n 𣾳 ě") that the index, which spaces out only the Han, never holds, so "ŝN𣾳ě", "OK㗎" or
    "ÓWI7𠷄" found nothing."""
    ws = _workspace(tmp_path)
    numbers = itertools.count()
    with Memory(ws, config=KEYWORDS) as mem:
        mem.sync()

        @FUZZ
        @given(WORDS)
        @example("ŝN𣾳ě")
        @example("ÓWI7𠷄")
        @example("Ŭ𥮝oŉĞ")
        @example("㟖ņôŨĢÅťĺ++")
        @example("Ŀ캗𮧍닅ùOùÃ/")
        @example("와..와&ĆŃõ𠈘")
        @example("OK㗎")
        @example("abc㐀")
        @example("C++")
        @example("node.js")
        @example("foo_bar")
        @example("e-mail")
        @example("O'Brien")
        @example("résumé")
        @example("хорошо")
        @example("שלום")
        @example("ภาษาไทย")
        def found_by_its_word(word: str) -> None:
            _found_by_its_own_word(mem, ws / "memory" / f"w{next(numbers)}.md", word)

        found_by_its_word()


def _found_by_its_own_word(mem: Memory, note: Path, word: str) -> None:
    """``note``, written saying ``word``, is among the results of a search for ``word`` (then removed)."""
    note.write_text(f"- Remember that {word} matters here.\n", encoding="utf-8")
    try:
        paths = [hit.path for hit in mem.search(word, max_results=20).results]
        assert f"memory/{note.name}" in paths, (word, paths)
    finally:
        note.unlink()


def test_a_note_is_found_by_any_word_of_three_letters_or_more_in_a_trigram_index(tmp_path: Path):
    """The same with ``store.fts.tokenizer = "trigram"``, for words whose every part has three
    characters or more (shorter ones cannot be matched by trigrams, and a search says so).

    A word starting with the Turkish İ (İstanbul, İzmir) was found by no search at all there: the
    trigram index keeps the letter as it is, the question is lowered to ``istanbul``, and the
    stems column, where the question's stem is matched too, held "stanbul" (Python lowers İ to
    an i and a combining dot, which split the word).  A word holding İ and no Latin stem ("00İ",
    drawn on Python 3.12) was still found by nothing: the index keeps İ as İ, no stem helped."""
    import re

    ws = _workspace(tmp_path)
    numbers = itertools.count()
    config = {"memorySearch": {**KEYWORDS["memorySearch"], "store": {"fts": {"tokenizer": "trigram"}}}}
    with Memory(ws, config=config) as mem:
        mem.sync()

        @FUZZ
        @given(WORDS.filter(lambda w: all(len(part) >= 3 for part in re.split(r"[\W_]+", w) if part)))
        @example("İstanbul")
        @example("İzmir")
        @example("GİRİŞ")
        @example("00İ")
        @example("résumé")
        def found_by_its_word(word: str) -> None:
            _found_by_its_own_word(mem, ws / "memory" / f"w{next(numbers)}.md", word)

        found_by_its_word()


def test_a_question_mixing_han_with_other_letters_searches_for_both(tmp_path: Path):
    """"Python脚本" searched for 脚, 本 and 脚本 alone, so every note about any 脚本 ranked as the one
    about Python's; and 搭𨋢 (an extension B character) searched for 搭 alone."""
    from memdir.query import keyword_terms

    assert "python" in keyword_terms("Python脚本")
    assert "𨋢" in keyword_terms("搭𨋢")
    ws = _workspace(tmp_path)
    (ws / "memory" / "python.md").write_text("- 用Python写脚本\n", encoding="utf-8")
    (ws / "memory" / "shell.md").write_text("- 用shell写脚本\n", encoding="utf-8")
    with Memory(ws, config=KEYWORDS) as mem:
        assert mem.search("Python脚本").results[0].path == "memory/python.md"


_ARGUMENT = st.one_of(
    st.none(), st.integers(-10**30, 10**30), st.integers(-3, 25), st.floats(), st.text(max_size=6), st.booleans(),
    st.sampled_from(["5", " 2.9 ", "1e3", "-1", "0x10", "NaN", "inf", "9" * 5000, ""]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
_CITED = st.builds(lambda first, last: f"MEMORY.md#L{first}" + (f"-L{last}" if last is not None else ""),
                   st.one_of(st.integers(0, 30).map(str), st.just("9" * 5000)),
                   st.one_of(st.none(), st.integers(0, 30)))


def test_memory_get_answers_any_from_and_lines_with_the_lines_or_a_clear_error(tmp_path: Path):
    """``memory_get`` with any ``from``/``lines`` a model may send (JSON numbers, strings, floats,
    objects, a citation ``path#Lm-Ln``): the lines R§10.2 names, or an error, never a Python one.

    A citation of 4,301 digits or more ('MEMORY.md#L999…') failed "Exceeds the limit (4300 digits)
    for integer string conversion: …; use sys.set_int_max_str_digits() to increase the limit", in
    ``memdir get`` too; it is a line past the end (no text), as any other such line."""
    import json

    from memdir.tools import call_tool_payload

    ws = _workspace(tmp_path)
    lines = [f"line {i}" for i in range(1, 21)]
    (ws / "MEMORY.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    every = [*lines, ""]
    with Memory(ws, config=KEYWORDS) as mem:

        @FUZZ
        @given(st.one_of(st.just("MEMORY.md"), _CITED), _ARGUMENT, _ARGUMENT)
        @example("MEMORY.md#L" + "9" * 5000, None, None)
        @example("MEMORY.md#L3-L" + "9" * 5000, None, None)
        def read(path: str, first: object, count: object) -> None:
            args = {"path": path, **({"from": first} if first is not None else {}),
                    **({"lines": count} if count is not None else {})}
            finite = all(math.isfinite(v) for v in args.values() if isinstance(v, float))
            out = call_tool_payload(mem, "memory_get", json.dumps(args) if finite else args)
            assert not out.get("error"), (args, out)
            assert out["path"] == "MEMORY.md"
            if all(isinstance(v, int) and not isinstance(v, bool) for v in (first, count)) and "#" not in path:
                start = max(1, first)  # type: ignore[call-overload]
                want = every if not first and not count else every[start - 1 : start - 1 + max(1, count)]  # type: ignore[call-overload]
                assert out["text"] == "\n".join(want), args

        read()


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _run(alphabet: str, size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=size, max_size=size + 12)


#: One key of every format memdir masks, as its issuer writes them.
SECRETS = st.one_of(
    _run(_B64 + "_-", 20).map("sk-proj-".__add__), _run(_B64, 36).map("ghp_".__add__),
    _run(_B64 + "_", 40).map("github_pat_".__add__), _run(_B64 + "-", 20).map("xoxb-".__add__),
    st.text(alphabet=_B64 + "_-", min_size=35, max_size=35).map("AIza".__add__), _run(_B64, 20).map("gsk_".__add__),
    st.text(alphabet=_B64[:26] + _B64[52:], min_size=16, max_size=16).map("AKIA".__add__),
    _run(_B64 + "_-", 20).map("glpat-".__add__), _run(_B64, 34).map("hf_".__add__), _run(_B64, 36).map("npm_".__add__),
    _run(_B64, 24).map("sk_live_".__add__), _run(_B64, 24).map("whsec_".__add__),
    _run(_B64 + "-", 20).map("pplx-".__add__),
    _run(_B64 + "_-", 30).map("ya29.".__add__),
    st.tuples(_run(_B64, 10), _run(_B64, 10), _run(_B64, 10)).map(lambda p: f"eyJ{p[0]}.eyJ{p[1]}.{p[2]}"),
    st.tuples(st.text(alphabet="0123456789", min_size=9, max_size=9),
              st.text(alphabet=_B64 + "_-", min_size=35, max_size=35)).map(":".join),
)
#: What a key follows: a space, a quote, an assignment, a header, or a letter of a language written
#: without spaces (Chinese, Japanese, Korean).
_BEFORE = st.sampled_from(["", " ", "my key is ", "(", '"', "`", "token=", "OPENAI_API_KEY=", "Authorization: Bearer ",
                           "\n", "[", "<", "--token ", "é ", "密钥是", "キーは", "키는", "ключ:", "「", "：", "→"])
_AFTER = st.sampled_from(["", " ", ".", ",", ")", '"', "`", "\n", " and more", "]", ">", ";", "。", "」", "です",
                          "입니다", "…", "/"])


@FUZZ
@given(st.text(max_size=12).filter(lambda s: not s or not (s[-1].isascii() and (s[-1].isalnum() or s[-1] == "_"))),
       _BEFORE, SECRETS, _AFTER)
@example("", "我的OpenAI密钥是", "sk-proj-abcdefghijklmnopqrstuvwx", "")
@example("", "キーは", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "です")
@example("", "키는", "sk-abcdefghijklmnopqrstuvwx", "입니다")
@example("", "密钥", "AKIAABCDEFGHIJKLMNOP", "です")
@example("", "トークンは", "123456789:AAabcdefghijklmnopqrstuvwxyz0123456", "です")
@example("", "é", "000000000:00000000000000000000000000000000000", "…")
def test_no_key_of_a_supported_format_survives_masking(noise: str, before: str, secret: str, after: str):
    """A key of any format memdir masks never survives :func:`memdir.redact.redact_text`, whatever
    it is written between.  Keys were found at ``\\b``, for which a Chinese, Japanese or Korean
    letter is a word character: written straight after one, as those languages are (我的密钥是sk-…,
    キーはghp_…です), a key went unmasked into the index of transcripts and to a remote embedding
    provider."""
    from memdir.redact import redact_text

    masked = redact_text(noise + before + secret + after)
    assert secret not in masked, masked


#: Pieces of questions that mean something to FTS5, tsquery or memdir's own parsing.
_QUERY_PIECES = st.sampled_from([
    '"', "'", "(", ")", "NEAR", "NEAR(a b, 2)", "AND", "OR", "NOT", "*", "^", "path:", "text:", "stems:", "-", "+",
    ":", "{", "}", "[", "]", "&", "|", "!", "<->", ":*", "\\", "%", "_", "😀", "讨论", "에러를", "שלום", "مرحبا",
    "\u200f", "\x00", "\x01", "\u0301", "İ", "ς", "١٢٣", "½", "ｆｕｌｌ", "\ufeff", "0" * 30, "9" * 5000, "1,200",
    "2.3.1", " ", "\n", "\t", "yesterday", "last week", "2026-01-12", "99999999 days ago", "Kafka", "𨋢", "OK㗎"])
QUESTIONS = st.one_of(st.text(max_size=40), st.lists(_QUERY_PIECES, max_size=12).map(" ".join),
                      st.lists(st.one_of(_QUERY_PIECES, st.text(max_size=5)), max_size=12).map("".join))


def _answers_every_question(mem: Memory, examples: int) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(QUESTIONS)
    @example('text : "a" OR NEAR(')
    @example("9" * 5000)
    def answered(question: str) -> None:
        mem.search(question)  # raises on a question it cannot answer: none may

    answered()


def test_any_question_is_answered_by_a_keyword_search(tmp_path: Path):
    """No question a user can type (FTS5 syntax, quotes, column filters, control characters,
    scripts of every kind) fails a keyword search, with either SQLite tokenizer.  Held when written."""
    ws = _workspace(tmp_path)
    (ws / "MEMORY.md").write_text("- Kafka deploy C++ node.js foo_bar e-mail QX-1773 讨论 에러 path:x NEAR AND\n")
    for tokenizer in ("unicode61", "trigram"):
        config = {"memorySearch": {"provider": "none", "store": {"fts": {"tokenizer": tokenizer}}}}
        with Memory(ws, config=config, state_dir=tmp_path / tokenizer) as mem:
            mem.sync()
            _answers_every_question(mem, 100)


def test_any_question_is_answered_and_any_word_found_on_postgres(tmp_path: Path, pg):
    """The same on PostgreSQL (tsquery has syntax of its own: ``&``, ``|``, ``<->``, ``:*``), for a
    smaller sample, and a note is found there by any word it holds.

    A word of Hangul and an accented Latin letter ("À가") was searched there as the prefix "à가",
    which the column, holding Latin letters without their accents ("a가"), never has: found on
    SQLite, not on PostgreSQL."""
    ws = _workspace(tmp_path)
    numbers = itertools.count()
    with Memory(ws, config=pg.config(KEYWORDS)) as mem:
        mem.sync()
        _answers_every_question(mem, 40)

        @settings(FUZZ, max_examples=40)
        @given(WORDS)
        @example("ŝN𣾳ě")
        @example("OK㗎")
        @example("À가")
        @example("Café카페")
        def found(word: str) -> None:
            note = ws / "memory" / f"w{next(numbers)}.md"
            note.write_text(f"- Remember that {word} matters here.\n", encoding="utf-8")
            try:
                assert f"memory/{note.name}" in [hit.path for hit in mem.search(word, max_results=20).results], word
            finally:
                note.unlink()

        found()


#: Bytes of a note as an editor, a paste or a broken tool leaves them: every line end, headings,
#: fences left open, front matter, lists, Setext underlines, long lines, NUL, bytes that are not
#: UTF-8, a pasted image.
_NOTE_PIECES = st.sampled_from([
    "\n", "\r\n", "\r", "# H\n", "## Sub\n", "```\n", "~~~\n", "---\n", "title: x\n", "date: 2025-01-02\n", "- item\n",
    "  - nested\n", "1. one\n", "Setext\n", "===\n", "\n\n", "   \n", "\x00", "word ", "x" * 50, "é", "讨论", "😀",
    "a" * 300, "![i](data:image/png;base64," + "QUJD" * 100 + ")", "\t", "\u2028", "\x0b", "\x0c", "\x85", "<!--\n",
    "-->\n", "> quote\n", "| a | b |\n"])
NOTE_BYTES = st.lists(st.one_of(_NOTE_PIECES.map(str.encode), st.binary(max_size=12),
                                st.text(max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass"))),
                      max_size=50).map(b"".join)


def test_every_chunk_cites_lines_memory_get_reads_and_no_line_is_lost(tmp_path: Path):
    """For any bytes in a daily log or MEMORY.md, indexed with small chunks: the note is never
    written; every chunk's lines are within the file and ``memory_get`` of them reads the text the
    chunk holds (a long line's pieces, a pasted image left out, are in those lines); every line
    that is not blank is in some chunk.  Held when written."""
    from memdir.reading import decode_note

    ws = _workspace(tmp_path)
    numbers = itertools.count()
    config = {"memorySearch": {"provider": "none", "chunking": {"tokens": 16, "overlap": 4}}}
    with Memory(ws, config=config) as mem:

        @FUZZ
        @given(NOTE_BYTES, st.booleans())
        def cited(data: bytes, curated: bool) -> None:
            rel = "MEMORY.md" if curated else f"memory/f{next(numbers)}.md"
            (ws / rel).write_bytes(data)
            mem.sync()
            assert (ws / rel).read_bytes() == data
            lines = decode_note(data).split("\n")
            rows = mem.store.conn.execute(  # type: ignore[attr-defined]
                "SELECT start_line, end_line, text FROM chunks WHERE path = ?", (rel,)).fetchall()
            covered: set[int] = set()
            for first, last, text in rows:
                assert 1 <= first <= last <= len(lines), (first, last, len(lines))
                cited_lines = lines[first - 1 : last]
                assert mem.get(rel, from_line=first, lines=last - first + 1).text == "\n".join(cited_lines)
                for piece in text.split("\n"):
                    assert any(piece in line for line in cited_lines) or "data:" in "\n".join(cited_lines), piece
                covered.update(range(first, last + 1))
            assert all(n in covered for n, line in enumerate(lines, 1) if line.strip())
            if not curated:
                (ws / rel).unlink()

        cited()


_LINE_PIECES = st.sampled_from(["a", "bb", "word", "x" * 20, "y" * 70, "讨论讨论", "😀", " ", "  ", "\t", "é",
                                "https://example.com/a/very/long/path/that/goes/on"])


@FUZZ
@given(st.lists(st.lists(_LINE_PIECES, max_size=40).map("".join), min_size=1, max_size=8).map("\n".join),
       st.integers(8, 60), st.floats(0, 0.99), st.booleans())
@example("y" * 70 + "😀\tbbhttps://example.com/a/very/long/path/that/goes/on😀é  " + "x" * 20 + "\t😀😀a讨论讨论aé",
         29, 0.87, False)
def test_a_chunk_never_breaks_a_line_the_note_does_not_break(content: str, tokens: int, share: float, curated: bool):
    """A chunk's text has a line break only where the note has one, for any chunk size and overlap
    (``overlap < tokens``, as the config clamps it).  With an overlap of half the chunk size or
    more, a piece of a long line was carried into the next chunk beside the line's next piece, so
    the snippet broke the line in two ("…/a/ve" and "ry/long/path…" on lines of their own) and the
    chunk exceeded ``maxChars``."""
    from memdir.chunking import chunk_markdown, chunk_sections

    overlap = int(share * tokens)
    for chunk in (chunk_sections if curated else chunk_markdown)(content, tokens, overlap):
        assert chunk.text.count("\n") <= chunk.end_line - chunk.start_line, (tokens, overlap, chunk)


def test_memory_get_of_any_path_reads_memory_files_only_or_says_why_not(tmp_path: Path):
    """``Memory.get`` of any path put together from ``..``, ``~``, links out of the workspace,
    absolute paths, NUL, width forms and wildcards reads a memory file or raises memdir's own
    error naming the problem: never text from outside the memory files.

    A path starting with ``~`` and holding a NUL ("~x\\0", a model's JSON "\\u0000") failed
    ``memory_get`` with Python's bare "embedded null byte" (a ValueError from the API)."""
    from memdir.errors import MemdirError

    ws = _workspace(tmp_path)
    (tmp_path / "secret.md").write_text("TOPSECRET\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.md").write_text("TOPSECRET\n")
    (ws / "memory" / "link.md").symlink_to(tmp_path / "secret.md")
    (ws / "memory" / "dirlink").symlink_to(tmp_path / "outside")
    (ws / "notes.md").write_text("TOPSECRET not a memory file\n")
    parts = st.sampled_from(["..", ".", "memory", "MEMORY.md", "secret.md", "link.md", "dirlink", "x.md", "outside",
                             "notes.md", "", "~", "%2e%2e", "\\", "ＭＥＭＯＲＹ.md", "\x00", str(tmp_path), str(ws),
                             "/", "#L1", "*"])
    with Memory(ws, config=KEYWORDS) as mem:

        @FUZZ
        @given(st.lists(parts, min_size=1, max_size=6).map("/".join)
               | st.lists(parts, min_size=1, max_size=4).map("".join))
        @example("~x\x00")
        @example("~\x00/MEMORY.md")
        def read(path: str) -> None:
            try:
                got = mem.get(path)
            except MemdirError:
                return
            assert "TOPSECRET" not in got.text, (path, got.path)

        read()
