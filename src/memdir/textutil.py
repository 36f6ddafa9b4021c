"""Character classes shared by chunking, keyword search and MMR (CJK handling, R§3, R§9)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from typing import Any


class LazyPattern:
    """A regex compiled on first use: the CJK classes below cost 10-80 ms each to compile (the
    ``re`` module builds a bitmap for wide Unicode ranges), which ``memdir search`` would pay at
    start-up for every ASCII query that never uses them."""

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int = 0):
        self._source, self._flags = source, flags
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return getattr(self._compiled, name)


# Ranges weighed as 4 "characters" by the chunker (R§3 [v4.12]).
_CJK_WEIGHT: Any = LazyPattern("[\u2e80-\u9fff\ua000-\ua4ff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]")
# Characters the keyword index splits one by one (Han ideographs and Japanese kana), so that a
# two-character word inside a run of Chinese text can still be found.
_SPLIT_CHARS: Any = LazyPattern("([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f])")
_HANGUL: Any = LazyPattern("[\uac00-\ud7af\u3131-\u3163]")
_HAN_OR_KANA: Any = LazyPattern("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


# The lowest code point of each class: below it, most non-ASCII text (accents, dashes, quotes) is
# answered without compiling the class, which costs ``memdir search`` 5 ms on a note with an em dash.
_CJK_WEIGHT_FROM = "\u2e80"
_HANGUL_FROM = "\u3131"
_HAN_OR_KANA_FROM = "\u3040"


def _all_below(text: str, bound: str) -> bool:
    """Whether a short ``text`` has no code point at or above ``bound``; on a long text a compiled
    class is faster than ``max``, so the answer there is False (unknown)."""
    return len(text) < 256 and max(text) < bound


def is_cjk(ch: str) -> bool:
    return ch >= _CJK_WEIGHT_FROM and bool(_CJK_WEIGHT.match(ch))


def weighted_len(text: str) -> int:
    """Length where each CJK/Hangul/Kana code point counts 4 (≈ one token)."""
    if text.isascii() or _all_below(text, _CJK_WEIGHT_FROM):
        return len(text)
    return len(text) + 3 * len(_CJK_WEIGHT.findall(text))


def has_hangul(text: str) -> bool:
    return not text.isascii() and not _all_below(text, _HANGUL_FROM) and bool(_HANGUL.search(text))


def has_han_or_kana(text: str) -> bool:
    return not text.isascii() and not _all_below(text, _HAN_OR_KANA_FROM) and bool(_HAN_OR_KANA.search(text))


#: A fence line of a fenced code block (CommonMark: up to three spaces, then ``` or ~~~ at least thrice).
_FENCE = LazyPattern(r" {0,3}(`{3,}|~{3,})")


def fenced_lines(text: str) -> set[int]:
    """The 0-based numbers of the lines of ``text`` in fenced code blocks, fences included (an
    unclosed fence runs to the end, as Markdown renders it): a ``# comment`` in a shell snippet
    is code, not a heading that starts a section or dates the lines below it."""
    # a note without a backtick or a tilde is told in two one-character scans (~0.3 µs for 9 KB
    # where looking for the three-character fences themselves took 12 µs, 7% of indexing a note)
    if ("`" not in text or "```" not in text) and ("~" not in text or "~~~" not in text):
        return set()
    out: set[int] = set()
    fence = ""
    for n, line in enumerate(text.split("\n")):
        m = _FENCE.match(line)
        if not fence:
            if m and not (m.group(1)[0] == "`" and "`" in line[m.end():]):  # `` ```x` `` is inline code
                fence = m.group(1)
                out.add(n)
            continue
        out.add(n)
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end():].strip():
            fence = ""
    return out


def open_fence(text: str) -> str:
    """The fence (its run of backticks or tildes) of a code block ``text`` ends inside, or ``""``:
    read as :func:`fenced_lines` reads fences."""
    if ("`" not in text or "```" not in text) and ("~" not in text or "~~~" not in text):
        return ""
    fence = ""
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if not fence:
            if m and not (m.group(1)[0] == "`" and "`" in line[m.end():]):
                fence = m.group(1)
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end():].strip():
            fence = ""
    return fence


#: A line of front matter: a ``key: value`` (YAML) or ``key = value`` (TOML) line, and the lines
#: between them: blank, indented, a comment, a list item, a TOML table.
_FRONT_MATTER_KEY: Any = LazyPattern(r"[^\s#:=-][^:=]*[:=](?:\s|$)")
_FRONT_MATTER_OTHER: Any = LazyPattern(r"$|[ \t\r#\[]|-(?:\s|$)")


def front_matter_lines(text: str) -> int:
    """How many lines a YAML (``---`` ... ``---`` or ``...``) or TOML (``+++`` ... ``+++``) front
    matter block at the top of a note spans, both fences included; 0 when there is none: never
    closed, or what lies between is no ``key: value`` lines (a note opening with a ``---`` rule,
    prose and another rule)."""
    if not text.startswith(("---", "+++")):
        return 0
    first, _, rest = text.partition("\n")
    mark = first.rstrip()
    if mark not in ("---", "+++"):
        return 0
    ends = (mark, "...") if mark == "---" else (mark,)
    keys = rest.split("\n", 1)[0].rstrip() in ends  # an empty block (``---`` twice) is front matter too
    for n, line in enumerate(rest.split("\n"), start=2):
        if line.rstrip() in ends:
            return n if keys else 0
        if _FRONT_MATTER_KEY.match(line):
            keys = True
        elif not _FRONT_MATTER_OTHER.match(line):
            return 0
    return 0


def literal_lines(text: str) -> set[int]:
    """The 0-based numbers of the lines of ``text`` that are no Markdown prose: fenced code
    (:func:`fenced_lines`), a front matter block (:func:`front_matter_lines`) and HTML comment
    blocks (:func:`comment_lines`), whose ``# comment`` or commented-out ``## 2024-01-05`` is no
    heading and whose closing ``---`` underlines nothing."""
    fenced = fenced_lines(text)
    top = front_matter_lines(text)
    out = fenced | set(range(top)) if top else fenced
    return out | comment_lines(text, out) if "<!--" in text else out


def comment_lines(text: str, skip: Collection[int] = ()) -> set[int]:
    """The 0-based numbers of the lines of ``text`` in HTML comment blocks (a line opening with
    ``<!--``, up to three spaces in, to the line holding ``-->``, or the end as Markdown renders
    it): hidden when the note is shown.  ``skip`` lines (code) open none."""
    out: set[int] = set()
    inside = False
    for n, line in enumerate(text.split("\n")):
        if inside:
            out.add(n)
            inside = "-->" not in line
        elif "<!--" in line[:7] and n not in skip:
            body = line.lstrip(" ")
            if body.startswith("<!--") and len(line) - len(body) <= 3:
                out.add(n)
                inside = "-->" not in body[4:]
    return out


#: A Setext heading's underline (``===`` or ``---``) in ``"\n" + text``: the ``\n`` before it
#: anchors it, as the scan then jumps from line end to line end.
_UNDERLINE: Any = LazyPattern(r"\n {0,3}(=+|-{2,})[ \t\r]*(?=\n|\Z)")
#: A line that is no Setext heading's text, whatever is under it: a list item, a quote, an ATX
#: heading, HTML, a table row, indented code.
_NO_SETEXT_TEXT: Any = LazyPattern(r" {0,3}(?:[-*+](?:\s|$)|\d{1,9}[.)](?:\s|$)|[>#<|])|(?: {4}|\t)")


def setext_headings(text: str, literal: set[int]) -> dict[int, int]:
    """``{line: level}`` of the Setext headings of ``text`` (a line of text underlined by ``===``,
    level 1, or ``---``, level 2; 0-based numbers of the text lines): a heading as much as a
    ``#`` one, which pandoc and many editors write.  Only a one-line paragraph after a blank line
    counts: a ``---`` right under several lines of text, or under the one line below a heading
    (``## 2024-03-02``, ``Met Sam.``, ``---``), is more often meant as a rule.  ``literal`` lines
    (:func:`literal_lines`) are none."""
    # one regex scan (~4 µs for 3 KB of bullets): looking for "--" or "\n-" first took as long
    if "-" not in text and "=" not in text:
        return {}
    out: dict[int, int] = {}
    lines: list[str] | None = None
    line, pos = -1, 0  # the padding's line end is none of ``text``'s
    padded = "\n" + text
    for m in _UNDERLINE.finditer(padded):
        line += padded.count("\n", pos, m.start() + 1)  # the underline's line (0-based in ``text``)
        pos = m.start() + 1
        head = line - 1
        if head < 0 or line in literal or head in literal:
            continue
        if lines is None:
            lines = text.split("\n")
        title = lines[head]
        if not title.strip(" \t\r-*_=") or _NO_SETEXT_TEXT.match(title):  # blank, or a rule itself
            continue
        if head > 0 and lines[head - 1].strip() and head - 1 not in literal:
            continue  # the last line of a longer paragraph, or a line right under a heading
        out[head] = 1 if m.group(1)[0] == "=" else 2
    return out


# An inline ``data:<type>;base64,<payload>`` (an image pasted as a data URI, a Markdown ``![](data:…)``):
# its payload is opaque bytes, kept out of the index and the hook's file.  Bounded runs: linear time.
_DATA_URI: Any = LazyPattern(r"(data:[\w.+-]{1,100}/[\w.+-]{1,100}(?:;[\w.+-]{1,100}=[\w.+-]{1,200}){0,8};base64,)"
                             r"[A-Za-z0-9+/_-]{64,}=*")


def elide_data_uris(text: str) -> str:
    """``text`` with the payload of each inline base64 data URI replaced by ``…``.

    Why: a pasted image as a data URI put megabytes of base64 into the index (one huge token per
    chunk, nothing a search can match) and into the session hook's memory file.  The payload
    never holds a line end, so the text keeps its lines."""
    return _DATA_URI.sub(r"\1…", text) if "base64," in text else text


# The opening of a fenced block whose first line is a run of base64 (Excalidraw's
# ``compressed-json``): only these are looked at line by line.
_BASE64_FENCE: Any = LazyPattern(r"^ {0,3}(`{3,}|~{3,})[^\n`]*\n[A-Za-z0-9+/_-]{64,}={0,2}[ \t]*$", re.MULTILINE)
_BASE64_LINE: Any = LazyPattern(r"[A-Za-z0-9+/_-]*={0,2}")
#: Fewer base64 characters than this in a block are left as they are (a hash or two in a fence).
BASE64_BLOCK_MIN = 512


def elide_base64_blocks(text: str) -> str:
    """``text`` with the lines of each fenced block that holds nothing but base64 emptied.

    Why: Obsidian's Excalidraw plugin saves each drawing as ``<name>.excalidraw.md``, the
    drawing's words under ``# Text Elements`` and the drawing itself as LZ-compressed base64 in a
    ``compressed-json`` block: a drawing of 20 KB was 15 chunks of base64 (embedded one by one,
    never matched by a question, a drawing's noise among the vector search's candidates).  The
    lines stay, empty, so every other line keeps its number."""
    if "```" not in text and "~~~" not in text:
        return text
    lines: list[str] | None = None
    at = row = 0  # the line (0-based) character ``at`` is on: counted on from the last block
    for m in _BASE64_FENCE.finditer(text):
        if lines is None:
            lines = text.split("\n")
        row += text.count("\n", at, m.start())
        at = m.start()
        first = row + 1  # the block's first line
        fence = m[1]
        end, size = first, 0
        while end < len(lines):
            line = lines[end].strip()
            if line.startswith(fence[0] * 3) and line.rstrip(fence[0]) == "" and len(line) >= len(fence):
                break
            if not _BASE64_LINE.fullmatch(line):
                end = -1
                break
            size += len(line)
            end += 1
        if end < len(lines) and end > first and size >= BASE64_BLOCK_MIN:
            lines[first:end] = [""] * (end - first)
    return text if lines is None else "\n".join(lines)


_ZWJ = "\u200d"


def continues_character(before: str, after: str) -> bool:
    """Whether ``after`` belongs to the same user-perceived character as ``before``: a combining
    mark, a zero-width joiner or what follows one, a variation selector, a skin tone or an emoji
    tag character continues the character before it; so do a Hangul syllable's vowel and final
    consonant written as conjoining jamo (Korean in NFD, as macOS names and some PDFs give it:
    a cut there left 한 as ᄒ at one chunk's end and ᅡᆫ at the next one's start)."""
    return (before == _ZWJ or after == _ZWJ or "\ufe00" <= after <= "\ufe0f"
            or "\U0001f3fb" <= after <= "\U0001f3ff" or "\U000e0020" <= after <= "\U000e007f"
            or "\u1160" <= after <= "\u11ff" or "\ud7b0" <= after <= "\ud7ff"
            or unicodedata.category(after) in ("Mn", "Mc", "Me"))


#: How far :func:`cut_text` backs off to the start of a character: a cluster longer than this
#: (a letter under a thousand accents) is cut where the limit falls.
_MAX_CLUSTER = 32


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` code points, never inside a character a reader sees as
    one (``e`` + an accent, a family emoji joined by ZWJs, a waving hand and its skin tone): a
    snippet cut there ended in a dangling joiner or lost a letter's accent."""
    if len(text) <= limit:
        return text
    return text[:character_cut(text, limit)]


def character_cut(text: str, limit: int) -> int:
    """Where to cut ``text`` (``0 < limit < len(text)``) at or before ``limit`` so that no
    character a reader sees as one is split (:func:`cut_text`); ``limit`` when it cannot be helped."""
    cut = limit
    while cut > 0 and limit - cut < _MAX_CLUSTER and continues_character(text[cut - 1], text[cut]):
        cut -= 1
    return cut if cut > 0 and not continues_character(text[cut - 1], text[cut]) else limit


#: Longest text :func:`nfc` normalises in one piece.
_NFC_PIECE = 1024


def nfc(text: str) -> str:
    """``text`` in Unicode NFC, in linear time.

    Python puts a run of combining marks in canonical order by insertion: marks of two alternating
    classes (U+0301 and U+0316, a hostile "Zalgo" text) cost the square of the run, a question of
    80,000 such characters 4.4 s and an MCP request's 4 MB hours.  A long text is normalised in
    pieces of at most :data:`_NFC_PIECE` characters, each cut before a character that starts one
    (:func:`continues_character`); a run of marks longer than that is ordered piece by piece."""
    if unicodedata.is_normalized("NFC", text):
        return text
    if len(text) <= _NFC_PIECE:
        return unicodedata.normalize("NFC", text)
    parts: list[str] = []
    start, n = 0, len(text)
    while start < n:
        end = min(start + _NFC_PIECE, n)
        if end < n:
            cut = end
            while cut > end - _MAX_CLUSTER and continues_character(text[cut - 1], text[cut]):
                cut -= 1
            if not continues_character(text[cut - 1], text[cut]):
                end = cut
        parts.append(unicodedata.normalize("NFC", text[start:end]))
        start = end
    return "".join(parts)


#: Characters invisible inside a word: the soft hyphen (PDFs, word processors, web pages), zero-width
#: space, non-joiner and joiner, word joiner, and a byte order mark left mid-text.  ``unicode61``
#: takes each for a separator, so a note saying ``infor\u00admation`` was indexed as ``infor`` and
#: ``mation`` and never found by "information".
_INVISIBLE_CHARS = "\u00ad\u200b\u200c\u200d\u2060\ufeff"
_DROP_INVISIBLE = dict.fromkeys(map(ord, _INVISIBLE_CHARS))
#: Letters :func:`word_form` folds into others: the Turkish dotless ``ı``, which ``unicode61`` keeps
#: (it folds every other Turkish letter: ç ğ ö ş ü İ), while the upper case of ``kapı`` is ``KAPI``:
#: a note saying "kapı" was found by no "KAPI" nor "kapi" (and one saying "KAPI" by no "kapı"); it
#: is indexed and searched as ``i``, as its dotted and accented kin are.  And Russian ё, which
#: Russian text may write as е and mostly does (ещё and еще, ёлка and елка are the same words),
#: while ``unicode61`` keeps the two apart: "елку" found no note saying ёлку.  And the German ß,
#: which capitals write SS (STRASSE) and Swiss German always does (Strasse), where ``unicode61``
#: keeps ß: "strasse" found no note saying Straße, "Straße" none saying STRASSE.
_FOLDED_LETTERS = "\u0131\u0451\u0401\u00df\u1e9e"
_FOLD_LETTERS = {0x131: "i", 0x451: "\u0435", 0x401: "\u0415", 0xDF: "ss", 0x1E9E: "SS"}


#: Every character :func:`word_form` or the Han/Kana spacing of :func:`fts_text` can act on, and
#: more: the invisible ones, combining marks and everything from U+0300 on but general punctuation
#: and currency (U+2002-U+20CF, as the em dash of a plain English note; U+2000/U+2001 have
#: canonical singletons).  A text with none of them is its own word form and needs no spacing,
#: which one search tells (a note's non-ASCII text is most often a dash or a quote).
#: Written as what it is not (ASCII, Latin-1 but the soft hyphen and ß, up to U+02FF but the
#: dotless ı, general punctuation but the invisible ones, currency): compiled in 0.35 ms where the
#: same class spelled up to U+10FFFF took 3.2 ms (on first use: ``memdir search`` starts without
#: it), and searched a fifth faster.
_MAY_CHANGE = LazyPattern("[^\x00-\xac\xae-\xde\xe0-\u0130\u0132-\u02ff\u2002-\u200a\u200e-\u205f\u2061-\u20cf]")


#: Presentation forms (ligatures, Arabic and Hebrew presentation forms, small and vertical forms)
#: and half-width and full-width forms: letters written another way for typesetting or an input
#: method, which ``unicode61`` keeps as other letters.  A full-width ``ＫＡＦＫＡ`` (a Japanese or
#: Chinese keyboard's Latin mode) found no note saying Kafka, a PDF's ``ﬁle`` (one ligature) no
#: question asking for a file; each is indexed and searched as its compatibility form (NFKC).
_COMPAT_FORMS: Any = LazyPattern("[\ufb00-\ufdff\ufe10-\ufe19\ufe30-\ufefe\uff00-\uffef]+")


def _compat(match: re.Match[str]) -> str:
    """The letters and digits of a run of :data:`_COMPAT_FORMS` in NFKC, and full-width ASCII
    punctuation (``ｕｓｅｒ＿ｉｄ`` is the identifier user_id to the question's parser); other
    punctuation and symbols as they are (separators either way; the rial sign's NFKC is a word,
    which is no word here)."""
    return "".join(unicodedata.normalize("NFKC", ch)
                   if "\uff01" <= ch <= "\uff5e" or unicodedata.category(ch)[0] in "LN" else ch
                   for ch in match.group())


#: Arabic and Hebrew vowel points and cantillation marks, and the Arabic tatweel: optional marks
#: (a Quran quote, a textbook, a name written out in full) most text and every question leave out.
#: ``unicode61`` removes only Latin diacritics and splits a word at any other mark, so a note saying
#: مَرْحَبًا was indexed as single letters, found by no مرحبا, and a pointed question matched whichever
#: note held its letters in a row; they are dropped as Latin accents are.
_POINTS: Any = LazyPattern("[\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u0610-\u061a\u0640\u064b-\u065f"
                           "\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed]+")


#: Greek letters that carry an accent, a breathing, a diaeresis or an iota subscript, and the final
#: sigma.  Greek written in capitals leaves its accents out (ΟΔΟΣ for οδός) and people type
#: questions without them, but ``unicode61`` keeps them (it folds Latin letters only), and lowers
#: ``Σ`` to ``σ`` where a word's end has ``ς``: "ΟΔΟΣ" and "οδος" found no note saying οδός, nor
#: "συνάντηση" one written in capitals.  Each becomes its bare letter (:func:`_greek_table`).
_GREEK_MARKED: Any = LazyPattern("[\u0386-\u03ce\u03d3\u03d4\u1f00-\u1ffc]")
_greek: dict[int, str] | None = None


def _greek_table() -> dict[int, str]:
    """``str.translate`` table taking each marked Greek letter to its bare letter, and ``ς`` to ``σ``."""
    global _greek
    if _greek is None:
        table = {0x3C2: "\u03c3"}
        for code in (*range(0x386, 0x3D5), *range(0x1F00, 0x1FFD)):
            ch = chr(code)
            if unicodedata.category(ch)[0] == "L":
                bare = "".join(x for x in unicodedata.normalize("NFD", ch) if not unicodedata.combining(x))
                if bare and bare != ch:
                    table[code] = bare
        _greek = table
    return _greek


def word_form(text: str, *, fold: bool = True) -> str:
    """Text as its words are indexed and searched: invisible characters inside words dropped,
    presentation and width forms as their plain letters (:data:`_COMPAT_FORMS`), in Unicode NFC
    (a note or question saved decomposed, e.g. Korean or Greek in NFD, matches its composed form);
    then, with ``fold``, the Turkish ı, Russian ё and German ß as i, е and ss
    (:data:`_FOLD_LETTERS`), Greek letters without their accents (:data:`_GREEK_MARKED`), and
    without Arabic and Hebrew vowel points (:data:`_POINTS`; after NFC, which composes the hamza
    and madda they share a range with).
    Without ``fold``: a question as an embedding model is to read it (notes are embedded as
    written).  ASCII text is returned as it is, at no cost; other text costs about a microsecond a
    chunk (one ``in`` scan a character is 20x cheaper than a regex search here)."""
    if text.isascii() or not _MAY_CHANGE.search(text):  # (an English note's dashes and quotes)
        return text
    if any(ch in text for ch in _INVISIBLE_CHARS):
        text = text.translate(_DROP_INVISIBLE)
    if text and not _all_below(text, "\ufb00") and _COMPAT_FORMS.search(text):
        text = _COMPAT_FORMS.sub(_compat, text)
    text = nfc(text)
    if not fold:
        return text
    if any(ch in text for ch in _FOLDED_LETTERS):  # (after NFC: a decomposed ё is one by now)
        text = text.translate(_FOLD_LETTERS)
    if text and not _all_below(text, "\u0386") and _GREEK_MARKED.search(text):
        text = text.translate(_greek_table())
    if text and not _all_below(text, "\u0591") and _POINTS.search(text):
        text = _POINTS.sub("", text)
    return text


def fts_text(text: str) -> str:
    """The text given to FTS5 (:func:`word_form`): Han/Kana characters spaced apart so each is its
    own token.

    ``unicode61`` treats a whole CJK run as one token, so a query for 讨论 would never match a
    note saying 之前讨论的那个方案 (R§18.4).  With one token per character, a CJK word becomes a
    phrase query ("讨 论") that matches it anywhere, and BM25 still ranks it.
    """
    if text.isascii() or not _MAY_CHANGE.search(text):
        return text
    return _spaced(word_form(text))


def _spaced(text: str) -> str:
    """:func:`fts_text` of a text already in :func:`word_form`."""
    if text.isascii() or _all_below(text, _HAN_OR_KANA_FROM) or not _HAN_OR_KANA.search(text):
        return text
    return _SPLIT_CHARS.sub(r" \1 ", text)


def split_words(text: str) -> list[str]:
    """Split on whitespace, Unicode punctuation (``\\p{P}``) and control characters, keeping other
    characters: a NUL or other control byte glued to a word (an MCP client's ``"zebra\\u0000"``)
    made a keyword no note contains, and notes holding "zebra" were no longer rescued."""
    words: list[str] = []
    current: list[str] = []
    for ch in text:
        if ch.isspace() or (cat := unicodedata.category(ch)).startswith("P") or cat == "Cc":
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


_WORD = re.compile(r"[^\W]+", re.UNICODE)


def word_runs(text: str) -> list[str]:
    """Maximal runs of letters, digits or ``_`` (``[\\p{L}\\p{N}_]+``), as FTS query tokens."""
    return _WORD.findall(text)


#: Latin letters with diacritics (Latin-1 Supplement to Latin Extended-B, Latin Extended Additional).
_LATIN_RANGES = ((0xC0, 0x250), (0x1E00, 0x1F00))
_fold: dict[int, str] | None = None


def latin_fold_table() -> dict[int, str]:
    """``str.translate`` table taking each Latin letter to what FTS5's ``unicode61`` tokenizer
    indexes it as (lower case, diacritics removed: ``é`` → ``e``), asked of FTS5 itself once;
    without FTS5, the letter's decomposition less its combining marks."""
    global _fold
    if _fold is None:
        import sqlite3

        letters = [chr(c) for a, b in _LATIN_RANGES for c in range(a, b) if unicodedata.category(chr(c))[0] == "L"]
        folded: dict[str, str] = {}
        try:
            conn = sqlite3.connect(":memory:")
            try:
                conn.execute("CREATE VIRTUAL TABLE f USING fts5(x)")
                conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)")
                # one row, a letter a token (each letter is a word of its own: L* classes)
                conn.execute("INSERT INTO f(rowid, x) VALUES (1, ?)", (" ".join(letters),))
                folded = {letters[offset]: term for term, offset in conn.execute("SELECT term, offset FROM v")}
            finally:
                conn.close()
        except sqlite3.Error:
            for ch in letters:
                base = "".join(x for x in unicodedata.normalize("NFD", ch) if not unicodedata.combining(x))
                folded[ch] = base.lower()
        _fold = {ord(ch): to for ch, to in folded.items() if to and to != ch.lower() and to.isalpha()}
    return _fold


#: The ranges of the letters :func:`latin_fold_table` may change.
_LATIN_FOLDABLE: Any = LazyPattern("[\xc0-\u024f\u1e00-\u1eff]")


def fold_latin(text: str) -> str:
    """``text`` with its Latin letters as FTS5 indexes them (:func:`latin_fold_table`), each looked
    up where it is (a translate of the whole text cost 60 ns a character, accented or not)."""
    table = latin_fold_table()
    return _LATIN_FOLDABLE.sub(lambda m: table.get(ord(m.group()), m.group()), text)


_stemmer: Any = None


def _english_stemmer() -> Any:
    global _stemmer
    if _stemmer is None:
        import Stemmer  # PyStemmer: the Snowball stemmers in C; imported when first needed

        _stemmer = Stemmer.Stemmer("english")
    return _stemmer


_stems: dict[str, str] = {}


def stem_word(word: str) -> str:
    """Snowball (English) stem of one lower-case ASCII word, remembered (a vocabulary is small)."""
    s = _stems.get(word)
    if s is None:
        if len(_stems) > 200_000:
            _stems.clear()
        s = _stems[word] = str(_english_stemmer().stemWord(word))
    return s


def stem(word: str) -> str | None:
    """The Snowball (English) stem of one lower-case Latin word, or ``None`` for anything else.

    IDs, numbers, mixed letter-digit tokens and CJK are never stemmed: they only match exactly.
    """
    if not word.isascii() or not word.isalpha() or len(word) < 3:
        return None
    return str(_english_stemmer().stemWord(word))


#: A whole word run (``[^\W]+``) made of three or more ASCII letters: the words :func:`stem_text`
#: stems, found in one pass (filtering every word run in Python cost ~400 µs per chunk).
_LATIN_WORD = re.compile(r"(?<!\w)[a-z]{3,}(?!\w)")


def stem_counts(text: str, wanted: set[str]) -> dict[str, int]:
    """How many of a text's words :func:`stem_text` turns into each stem in ``wanted``.

    Snowball never changes a word's first letter, so only words starting like a wanted stem are
    stemmed (scoring a few candidates must not cost a full :func:`stem_text` each)."""
    from memdir.stemming import DEFAULT_LANGUAGE, detect_language, has_camel_case, text_stems

    text = word_form(text)
    # stemmed by its own language's rules, an English text with accented words (stemmed without
    # their accents, :mod:`memdir.stemming`) or CamelCase words (their parts stemmed too): counted
    # from the stems column's own words
    if not text.isascii() or detect_language(text) != DEFAULT_LANGUAGE or has_camel_case(text):
        counts: dict[str, int] = {}
        for s in text_stems(text).split():
            if s in wanted:
                counts[s] = counts.get(s, 0) + 1
        return counts
    firsts = {s[0] for s in wanted if s}
    counts = {}
    stemmer = _english_stemmer()
    for word in _LATIN_WORD.findall(text.lower()):
        if word[0] in firsts:
            s = stemmer.stemWord(word)
            if s in wanted:
                counts[s] = counts.get(s, 0) + 1
    return counts


def stem_text(text: str) -> str:
    """The stems of a text's Latin words, space-separated: the keyword index's second column.

    Matching a query word's stem against this column forgives word forms (painted/painting,
    checkups/checkup, frustrating/frustration) while the exact column keeps exact words
    ranking higher (they match in both columns).  Each text is stemmed in its own language
    (:mod:`memdir.stemming`).
    """
    from memdir.stemming import text_stems

    return text_stems(text if text.isascii() or not _MAY_CHANGE.search(text) else word_form(text))


def fts_values(text: str) -> tuple[str, str]:
    """What ``chunks_fts`` indexes for a chunk's text: its ``text`` and ``stems`` columns.

    Deterministic on purpose: a row of the contentless keyword index is deleted by handing FTS5
    these same values again, so a change to what they produce must change the index identity
    (``sync.identity()["schema"]``) and rebuild the index.  Used in process and in
    :mod:`memdir.build_worker` alike."""
    from memdir.stemming import text_stems

    if text.isascii():
        return text, text_stems(text)
    form = word_form(text) if _MAY_CHANGE.search(text) else text  # once for both columns
    words = _spaced(form)
    if "\u0130" in words:
        # the Turkish İ as a plain I: unicode61 folds it to i, as a question is lowered
        # (:func:`memdir.query.lower`), but a ``trigram`` index keeps it, so a word holding it and
        # no Latin stem ("00İ") was found by no search there
        words = words.replace("\u0130", "I")
    return words, text_stems(form)


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: a byte the OS's encoding could not decode (a
    command-line argument), or a ``\\ud800`` escape in JSON; such text cannot be written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def spelled_out(text: str) -> str:
    """``text`` with its unprintable characters spelt out (``\\x0a``, ``\\u2028``), for a file name
    shown to a model.  Why: a name is whatever a sync tool or a cloned repository made it, and a
    line break in one wrote lines of its own where the name was quoted ("…x\\n\\nSYSTEM: obey.md")."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
                   for ch in text)


#: Chat templates' control tokens, which a model server may read as the real ones in a message's
#: text (the templated prompt tokenised with its special tokens): ChatML's ``<|im_start|>``,
#: Llama 3's ``<|start_header_id|>``, Phi's ``<|system|>``, gpt-oss's ``<|channel|>``, DeepSeek's
#: ``<｜User｜>``, Gemma's ``<start_of_turn>``, Llama 2's ``<<SYS>>`` and ``</s>``, Qwen's
#: ``<tool_call>``, Mistral's ``[INST]`` and ``[TOOL_RESULTS]``.
_CONTROL_TOKEN = re.compile(
    r"<(?=[|\uff5c][^\n<>]{1,64}?[|\uff5c]>|/?(?:s|start_of_turn|end_of_turn|tool_call|tool_response)>|</?SYS>>)"
    r"|\[(?=/?(?:INST|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS|SYSTEM_PROMPT|TOOL_CONTENT)\])")
_CONTROL_DISARMED = {"<": "\u2039", "[": "\uff3b"}


def disarm_control_tokens(text: str) -> str:
    """``text`` with each chat-template control token's first character changed (``<`` to ``‹``,
    ``[`` to ``［``; the length kept), so quoted memory cannot end its message and open a system
    turn.  Why: a note holding ``<|im_end|>\\n<|im_start|>system`` reached a local model's server
    as written, in the session context and in tool results, where the server's tokenizer can
    take it for the template's own tokens."""
    if "<" not in text and "[" not in text:
        return text
    return _CONTROL_TOKEN.sub(lambda m: _CONTROL_DISARMED[m.group(0)], text)
