"""FTS5 ``unicode61`` phrase frequencies counted in Python, for texts where that is exact.

Scoring a few candidates with FTS5's BM25 needs how often each query phrase occurs in each of
them.  Letting FTS5 tokenise them (a scratch table, :mod:`memdir.stores.fts_scores`) costs about
as much as the search; for most notes a regex gives the same tokens.  ``unicode61`` (default
options) makes a token of every run of characters in the Unicode classes L*, N* and Co, folds
case and removes diacritics.  In a text whose every character outside ASCII is some other class
(dashes, quotes, currency signs, emoji, spaces: :func:`is_simple`), its tokens are exactly the
runs of ``[A-Za-z0-9]``, lower-cased, numbered from 0 in order (FTS5's positions).  Any other
text (accented or CJK letters, combining marks, private-use characters) is left to FTS5.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

#: Unicode classes that are separators for ``unicode61`` (never inside a token, never folded).
_SEPARATOR_CLASSES = frozenset(("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl",
                                "Zp", "Cc"))
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_known: dict[str, bool] = {}
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")


def is_simple(text: str) -> bool:
    """True when FTS5 ``unicode61`` tokenises ``text`` as runs of ASCII letters and digits."""
    if text.isascii():
        return True
    for ch in set(_NON_ASCII.findall(text)):
        ok = _known.get(ch)
        if ok is None:
            ok = _known[ch] = unicodedata.category(ch) in _SEPARATOR_CLASSES
        if not ok:
            return False
    return True


def simple_tokens(body: str) -> list[str] | None:
    """The tokens FTS5 makes of a query phrase's body, when it is simple (else ``None``)."""
    if not is_simple(body):
        return None
    return _ASCII_TOKEN.findall(body.lower())


_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")


def phrase_count(lowered: str, tokens: Sequence[str]) -> int:
    """Occurrences of the token sequence in a lower-cased simple text (overlapping ones too, as
    FTS5 counts them): each occurrence of the first token at token boundaries, then the rest."""
    if not tokens:
        return 0
    first, rest, n = tokens[0], tokens[1:], len(lowered)
    count = 0
    i = lowered.find(first)
    while i >= 0:
        j = i + len(first)
        if (i == 0 or lowered[i - 1] not in _ALNUM) and (j == n or lowered[j] not in _ALNUM):
            k, ok = j, True
            for t in rest:
                while k < n and lowered[k] not in _ALNUM:
                    k += 1
                if not lowered.startswith(t, k):
                    ok = False
                    break
                k += len(t)
                if k < n and lowered[k] in _ALNUM:
                    ok = False
                    break
            count += ok
        i = lowered.find(first, i + 1)
    return count


#: Porter2's exceptional forms whose stem is not their own prefix (all others: the stem less its
#: last letter starts the word; step 1b may add an "e", step 1c turn "y" into "i").
_STEM_EXCEPTIONS = {"die": ("dying",), "lie": ("lying",), "tie": ("tying",)}


def stem_counts(lowered: str, wanted: set[str], stem_word: Callable[[str], str]) -> dict[str, int]:
    """How many words :func:`memdir.textutil.stem_text` would turn into each stem of ``wanted``,
    in a lower-cased simple text: only words starting with a stem's first letters are stemmed."""
    counts: dict[str, int] = {}
    n = len(lowered)
    seen: set[int] = set()
    for s in wanted:
        for key in (s[:-1] or s, *_STEM_EXCEPTIONS.get(s, ())):
            i = lowered.find(key)
            while i >= 0:
                if i not in seen and (i == 0 or lowered[i - 1] not in _WORD_CHARS):
                    j = i
                    while j < n and lowered[j] in _LETTERS:
                        j += 1
                    if j - i >= 3 and (j == n or lowered[j] not in _WORD_CHARS):
                        seen.add(i)
                        st = stem_word(lowered[i:j])
                        if st in wanted:
                            counts[st] = counts.get(st, 0) + 1
                i = lowered.find(key, i + 1)
    return counts
