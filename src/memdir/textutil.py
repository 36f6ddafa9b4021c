"""Character classes shared by chunking, keyword search and MMR (CJK handling, R§3, R§9)."""

from __future__ import annotations

import re
import unicodedata

# Ranges weighed as 4 "characters" by the chunker (R§3 [v4.12]).
_CJK_WEIGHT = re.compile("[\u2e80-\u9fff\ua000-\ua4ff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]")
# Characters the keyword index splits one by one (Han ideographs and Japanese kana), so that a
# two-character word inside a run of Chinese text can still be found.
_SPLIT_CHARS = re.compile("([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f])")
_HANGUL = re.compile("[\uac00-\ud7af\u3131-\u3163]")
_HAN_OR_KANA = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


def is_cjk(ch: str) -> bool:
    return bool(_CJK_WEIGHT.match(ch))


def weighted_len(text: str) -> int:
    """Length where each CJK/Hangul/Kana code point counts 4 (≈ one token)."""
    if text.isascii():
        return len(text)
    return len(text) + 3 * len(_CJK_WEIGHT.findall(text))


def has_hangul(text: str) -> bool:
    return bool(_HANGUL.search(text))


def has_han_or_kana(text: str) -> bool:
    return bool(_HAN_OR_KANA.search(text))


def fts_text(text: str) -> str:
    """The text given to FTS5: Han/Kana characters spaced apart so each is its own token.

    ``unicode61`` treats a whole CJK run as one token, so a query for 讨论 would never match a
    note saying 之前讨论的那个方案 (R§18.4).  With one token per character, a CJK word becomes a
    phrase query ("讨 论") that matches it anywhere, and BM25 still ranks it.
    """
    if text.isascii() or not _HAN_OR_KANA.search(text):
        return text
    return _SPLIT_CHARS.sub(r" \1 ", text)


def split_words(text: str) -> list[str]:
    """Split on whitespace and Unicode punctuation (``\\p{P}``), keeping other characters."""
    words: list[str] = []
    current: list[str] = []
    for ch in text:
        if ch.isspace() or unicodedata.category(ch).startswith("P"):
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
    return [m.group(0) for m in _WORD.finditer(text)]


def stem(word: str) -> str | None:
    """The Snowball English stem of one lower-case Latin word, or ``None`` for anything else.

    IDs, numbers, mixed letter-digit tokens and CJK are never stemmed: they only match exactly.
    """
    from memdir.stemming import is_latin_word, stemmer

    if not word.isascii() or not is_latin_word(word):
        return None
    return str(stemmer("english").stemWord(word))


def stem_text(text: str) -> str:
    """The stems of a text's Latin words, space-separated: the keyword index's second column.

    Matching a query word's stem against this column forgives word forms (painted/painting,
    checkups/checkup, frustrating/frustration) while the exact column keeps exact words
    ranking higher (they match in both columns).  Each text is stemmed in its own language
    (:mod:`memdir.stemming`).
    """
    from memdir.stemming import text_stems

    return text_stems(text)
