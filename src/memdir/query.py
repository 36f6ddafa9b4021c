"""From a user's question to a safe FTS5 query (R§7 step 5, R§9).

User text never reaches FTS5 as syntax: every term is a double-quoted string (quotes inside are
removed), so ``NEAR``, ``*``, ``-``, ``OR`` or unbalanced parentheses are just words.
"""

from __future__ import annotations

import re
from typing import Any

from memdir.stemming import camel_words, has_camel_case, query_languages, query_stems
from memdir.stopwords import ALL as STOP_WORDS
from memdir.stopwords import KO as KO_STOP
from memdir.textutil import LazyPattern, fts_text, has_han_or_kana, has_hangul, split_words, word_form, word_runs

_KANA: Any = LazyPattern("[\u3040-\u30ff]")
#: Han characters as the index spaces them apart (:func:`memdir.textutil.fts_text`): the unified
#: block and its extensions A, B and later (Cantonese 㗎 and 𨋢, rare names) and the compatibility
#: ideographs.  Only the unified block was read as Han, so a question's extension characters were
#: dropped (搭𨋢 searched for 搭) or, beside a letter, spelt a phrase the index never holds.
_HAN_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_HAN: Any = LazyPattern(f"[{_HAN_CHARS}]")
_JA_RUNS: Any = LazyPattern(
    f"[^\\W\u3040-\u30ff{_HAN_CHARS}]+|[\u30a0-\u30ffー]+|[{_HAN_CHARS}]+|[\u3040-\u309f]{{2,}}")
_ASCII_WORD = re.compile(r"^[a-z0-9_]+$")
_KO_PARTICLES = sorted(
    [
        "에서", "으로", "에게", "한테", "처럼", "같이", "보다", "까지", "부터", "마다", "밖에", "대로",
        "은", "는", "이", "가", "을", "를", "의", "에", "로", "와", "과", "도", "만",
    ],
    key=len,
    reverse=True,
)


def normalise_query(query: str, *, fold: bool = True) -> str:
    """A question stripped, in Unicode NFC, without invisible characters inside its words: the form
    notes are indexed in (:func:`memdir.textutil.word_form`); ``fold=False`` keeps its letters as
    typed (accents, ё, vowel points), for the embedding model.

    A question typed or pasted decomposed (NFD: macOS file names, some PDFs) had its accents as
    separate combining marks, which split its words (``résumé`` became ``re`` and ``sume``) and
    found no note.  ASCII text is returned as it is, at no cost."""
    text = query.strip()
    return text if text.isascii() else word_form(text, fold=fold)


def lower(text: str) -> str:
    """``text`` in lower case as FTS5 folds it: Python lowers the Turkish ``İ`` to ``i`` plus a
    combining dot, which then split the word (``İstanbul`` searched for ``i`` and ``stanbul`` and
    missed every note saying Istanbul), and a Greek ``Σ`` ending a word to ``ς``, which notes are
    indexed without (:func:`memdir.textutil.word_form`)."""
    low = text.lower()
    if "\u0307" in low:
        low = low.replace("i\u0307", "i")
    return low.replace("\u03c2", "\u03c3") if "\u03c2" in low else low


def match_form(text: str) -> str:
    """``text`` as the keyword index matches it, for looking a query's words up in a note's own
    text (which snippet lines hold them, whether a note holds them all): in word form (NFC, no
    invisible characters, width forms as plain letters), lower case as FTS5 folds, Latin letters
    without accents.  A note saved in NFD, or saying "café" to a question for "cafe", matched in
    the index but held none of the question's words for these checks.  ASCII costs one ``lower``."""
    if text.isascii():
        return text.lower()
    from memdir.textutil import fold_latin

    return fold_latin(lower(word_form(text)))


def build_fts_query(raw: str) -> str | None:
    """OpenClaw's ``buildFtsQuery``: every ``[\\p{L}\\p{N}_]+`` run quoted, joined with AND."""
    tokens = [t.replace('"', "") for t in word_runs(raw)]
    tokens = [t for t in tokens if t]
    if not tokens:
        return None
    return " AND ".join(f'"{t}"' for t in tokens)


def _bigrams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _korean_tokens(segment: str) -> list[str]:
    stem = segment
    for particle in _KO_PARTICLES:
        if segment.endswith(particle) and len(segment) > len(particle):
            stem = segment[: -len(particle)]
            break
    out: list[str] = []
    if segment not in KO_STOP and stem not in KO_STOP:
        out.append(segment)
    if stem != segment and stem not in KO_STOP:
        useful = len(stem) >= 2 if has_hangul(stem) else bool(_ASCII_WORD.match(stem))
        if useful:
            out.append(stem)
    return out


def extract_keywords(query: str) -> list[str]:
    """Content words of a question, stop words dropped, CJK split as R§9 (order kept, deduped)."""
    tokens: list[str] = []
    for segment in split_words(lower(query.strip())):
        if segment.isascii():
            tokens.append(segment)
        elif _KANA.search(segment):
            for m in _JA_RUNS.finditer(segment):
                run = m.group(0)
                tokens.append(run)
                if _HAN.fullmatch(run[0]) and _HAN.search(run) and len(run) > 1 and _HAN.fullmatch(run[-1]):
                    tokens.extend(_bigrams(run))
        elif _HAN.search(segment):
            han = "".join(_HAN.findall(segment))
            tokens.extend(han)
            tokens.extend(_bigrams(han))
            # its other words too: "Python脚本" searched for 脚, 本 and 脚本 alone, "OK㗎" for 㗎
            tokens.extend(run for run in _HAN.split(segment) if run)
        elif has_hangul(segment):
            tokens.extend(_korean_tokens(segment))
        else:
            tokens.append(segment)
    out: dict[str, None] = {}  # (a list's `in` made a question of 100,000 words take minutes)
    for token in tokens:
        if not token or token in STOP_WORDS or token in out:
            continue
        if token.isascii() and token.isalpha() and len(token) < 3:
            continue
        if token.isdigit() or not any(ch.isalnum() for ch in token):
            continue
        out[token] = None
    return list(out)


def fts_term(token: str) -> str:
    """One quoted FTS5 term for a keyword, matching how :func:`memdir.textutil.fts_text` indexes.

    Han/Kana words become a phrase of single characters; Hangul words match as a prefix, so
    ``에러`` finds ``에러를``; everything else is a plain quoted term.
    """
    clean = token.replace('"', "")
    if has_han_or_kana(clean):
        # spelt as the index spaces it (each Han or Kana character a token, other letters words):
        # every character apart, "ŝn 𣾳 ě" was "ŝ n 𣾳 ě", a phrase no note holds
        return '"' + " ".join(fts_text(clean).split()) + '"'
    if has_hangul(clean):
        return f'"{clean}"*'
    return f'"{clean}"'


#: Identifier-like tokens: letters and digits mixed, parts joined by - _ . / : (QX-1773, 9f3c2a, v2.1).
_ID_TOKEN = re.compile(r"(?<![\w])[^\W_]+(?:[-_./:][^\W_]+)*")
#: Numbers joined by dots: a version, an IP address, a decimal (2.3.1, 10.0.0.12, 3.11).
_DOTTED_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)+")
#: A version: numbers joined by dots after a "v" (v2.3.1, v1.0), or two or three of them without
#: it (2.3.1; not an IP address).
_VERSION = re.compile(r"v[0-9]+(?:\.[0-9]+)+|[0-9]+(?:\.[0-9]+){1,2}")
#: A number written with thousands separators (1,200; 12,000,000), not a list of numbers ("1,2023").
_GROUPED_NUMBER = re.compile(r"(?<![\w.,])[0-9]{1,3}(?:,[0-9]{3})+(?![\w]|[.,][0-9])")


def id_terms(query: str) -> list[str]:
    """Identifiers in a question (a letter and a digit in one token, or words joined by ``_``), as
    phrases of their parts.

    ``extract_keywords`` (R§9) drops short and all-digit words, so ``QX-1773`` inside a sentence
    would vanish; kept as the phrase ``qx 1773`` it matches the identifier exactly.  A snake_case
    name is such a phrase too: FTS5 splits it at ``_`` and R§9 drops its short parts, so
    ``user_id`` searched for ``user`` alone, which every note about a user matched as well as
    the one naming the column, and that note was often not among the results at all.  So are
    numbers joined by dots: "2.3.1" searched for the words 2, 3 and 1, which "1.3.2" has as
    well, and "python 3.11" for "python" alone; and numbers written with thousands separators
    ("$1,200" searched for 1 and 200, and any note with a 1 in it matched).  A version is searched
    for with and without its "v": "2.3.1" found no note saying "v2.3.1", nor "v2.3.1" one saying
    "2.3.1".
    """
    out: dict[str, None] = {}
    for m in _ID_TOKEN.finditer(lower(query)):
        tok = m.group(0)
        if not tok.isascii():
            continue
        if ("_" in tok or (any(ch.isdigit() for ch in tok) and any(ch.isalpha() for ch in tok))
                or _DOTTED_NUMBER.fullmatch(tok)):
            phrase = " ".join(word_runs(tok))
            if phrase:
                out[phrase] = None
            # a version is written with its "v" or without it ("v2.3.1", "2.3.1"), and the index
            # holds "v2.3.1" as the words v2, 3 and 1: each form searched for the other's words too
            if _VERSION.fullmatch(tok):
                out[phrase[1:] if tok[0] == "v" else "v" + phrase] = None
    if "," in query:
        for m in _GROUPED_NUMBER.finditer(query):
            out[m.group(0).replace(",", " ")] = None
    return list(out)


def number_terms(query: str) -> list[str]:
    """Stand-alone numbers of three or more digits in a question (a ticket, an order, a port, a
    room), years 1900-2099 left out.

    ``extract_keywords`` (R§9) drops all-digit words, so "order 88123" searched for "order" alone
    and never found the note that names 88123.  Years are left to date-aware retrieval (a daily
    log's heading names its year), and one- and two-digit numbers (days, counts) are too common to
    tell notes apart; digits inside an identifier or a date (``QX-1773``, ``2025-02-12``) are not
    stand-alone.
    """
    out: dict[str, None] = {}
    for m in _NUMBER.finditer(query):
        tok = m.group(0)
        # a year has four digits after any leading zeros: read as an int, a number of 4,301 digits
        # or more raised ValueError and failed the whole search
        digits = tok.lstrip("0")
        if not (len(digits) == 4 and 1900 <= int(digits) <= 2099):
            out[tok] = None
    return list(out)


#: Three or more ASCII digits standing alone: not inside a word, an identifier, a decimal, a date,
#: a time or a number written with separators (``1,234``, ``12.50``, ``2025-02-12``, ``10:30``).
_NUMBER = re.compile(r"(?<![\w.,:/-])[0-9]{3,}(?![\w]|[.,:/-][0-9])")


_TWO_CAPITALS = re.compile(r"(?<![^\W\d_])[A-Z]{2}(?![^\W\d_])")


def acronyms(query: str) -> list[str]:
    """Two-letter acronyms a question writes in capitals ("TV", "UK", "HR", "AI/ML"), lower-cased;
    stop words left out ("IT", "US", "OR" are words too), and an identifier's letters (``QX-1773``
    is searched for as itself, :func:`id_terms`).

    R§9 drops every word shorter than three letters, so "which TV did I buy?" searched for "buy"
    alone and "HR meeting" for "meeting": the note naming the acronym ranked by chance.  A
    question written all in capitals has none (its every word is capitals)."""
    if query.upper() == query or not any(ch.isupper() for ch in query):
        return []
    out: dict[str, None] = {}
    for m in _ID_TOKEN.finditer(query):
        tok = m.group(0)
        if tok.isascii() and "_" not in tok and not any(ch.isdigit() for ch in tok):
            out.update((w.lower(), None) for w in _TWO_CAPITALS.findall(tok) if w.lower() not in STOP_WORDS)
    return list(out)


def keyword_terms(query: str) -> list[str]:
    """The words a keyword search looks for: identifiers, content words, split into FTS-sized word runs.

    A term may be a phrase of several words (an identifier such as ``qx 1773``).  Falls back to
    every word of the query when all of them are stop words (a query made only of stop words
    still deserves an answer); empty when there is nothing to search for.  Every store backend
    turns these terms into its own query syntax.
    """
    keywords = extract_keywords(query)
    if has_camel_case(query):
        # a CamelCase word's parts too (the note may write "connection reset error" for the
        # question's ConnectionResetError; the index holds such a word's parts' stems, ``stems``)
        keywords += [w for w in dict.fromkeys(camel_words(query)) if w not in STOP_WORDS and w not in keywords]
    keywords += [w for w in acronyms(query) if w not in keywords]
    ids = id_terms(query) if ID_PHRASES else []
    numbers = number_terms(query) if NUMBERS else []
    if not keywords and not ids and not numbers:
        keywords = [lower(t) for t in word_runs(query) if t.replace('"', "")]
    terms = dict.fromkeys([*ids, *numbers])
    for kw in keywords:
        if len(terms) >= 64:  # all that is kept
            break
        for part in word_runs(kw) if not has_han_or_kana(kw) else [kw]:
            part = part.replace('"', "")
            if part:
                terms[part] = None
    return list(terms)[:64]


#: Bench switches for ablations (``bench/cv_locomo.py``): stem matching, identifier phrases and
#: stand-alone numbers.
STEMMING = True
ID_PHRASES = True
NUMBERS = True


def stemmed_terms(terms: list[str]) -> list[str]:
    """The Snowball stems of the Latin-word terms (IDs, numbers and CJK have none), de-duplicated.

    Stemmed in English and in the language the terms tell, if another (:mod:`memdir.stemming`):
    a note is stemmed in its own language.
    """
    out: list[str] = []
    languages = query_languages([t.lower() for t in terms])
    for t in terms:
        for s in query_stems(t.lower(), languages):
            if s not in out:
                out.append(s)
    return out


def fts5_phrases(terms: list[str]) -> list[tuple[str, str]]:
    """The ``(column, quoted phrase)`` pairs :func:`fts5_match` ORs together, in its order (the
    order FTS5's bm25 numbers its phrases in; :mod:`memdir.stores.fts_scores` scores them alike)."""
    quoted = list(dict.fromkeys(fts_term(t) for t in terms if t))
    if not quoted:
        return []
    stems = stemmed_terms(terms) if STEMMING else []
    return [("text", q) for q in quoted] + [("stems", f'"{s}"') for s in stems]


def fts5_match(terms: list[str]) -> str | None:
    """An FTS5 MATCH expression for :func:`keyword_terms`: terms OR-ed, so BM25 rewards notes sharing more.

    Each term matches its exact form in the ``text`` column, and its stem in the ``stems``
    column (:func:`memdir.textutil.stem_text`): a note with the exact word matches in both and
    ranks above one that only shares the stem.
    """
    return match_phrases(fts5_phrases(terms))


def trigram_phrases(phrases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``phrases`` for an index built with the ``trigram`` tokenizer (``store.fts.tokenizer``).

    A trigram index matches the text itself, spaces included, and :func:`memdir.textutil.fts_text`
    writes each Han or Kana character with a space on either side (two between neighbours): the
    one-space phrase ``"讨 论"`` was found in no note, and a one-character term was too short
    for any trigram, so no Chinese or Japanese question found anything.  Such a phrase is spelled
    here as the index spells its text.  Likewise an identifier's phrase (``qx 1773``) matched no
    text, where the identifier is written ``QX-1773``: its parts are searched instead."""
    out: dict[tuple[str, str], None] = {}
    for column, quoted in phrases:
        if column == "text" and has_han_or_kana(quoted):
            body = "".join(quoted.strip('"*').split())
            out[(column, '"' + fts_text(body) + '"')] = None
        elif column == "text" and " " in quoted:
            # an identifier's parts (``qx 1773`` for QX-1773): the trigram index holds the text
            # with its own separators, never these spaces, so its parts long enough are searched
            parts = [p for p in quoted.strip('"').split() if len(p) >= 3]
            out.update(dict.fromkeys((column, f'"{p}"') for p in parts) if parts else {(column, quoted): None})
        else:
            out[(column, quoted)] = None
    return list(out)


def match_phrases(phrases: list[tuple[str, str]]) -> str | None:
    """The MATCH expression ORing ``(column, quoted phrase)`` pairs, grouped by column."""
    parts = []
    for column in dict.fromkeys(col for col, _ in phrases):
        parts.append(f"{column} : (" + " OR ".join(q for col, q in phrases if col == column) + ")")
    return " OR ".join(parts) or None


def keyword_match_expression(query: str) -> str | None:
    """The MATCH expression memdir runs on SQLite for a question (``None``: nothing to search)."""
    return fts5_match(keyword_terms(query))
