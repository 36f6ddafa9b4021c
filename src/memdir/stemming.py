"""Stemming in the language of the text: Snowball (PyStemmer) stems for the keyword index.

A note is stemmed with the stemmer of the language it is written in, told by its function words
(``und``/``der`` → German, ``et``/``les`` → French, ...); a text without enough of them is
stemmed as English, as before.  A question's words are stemmed in English and, when its words
tell another language (``wann habe ich ...``), in that language too: so English suffix rules
are never the only ones applied to a German note, and an English question never gains stems
from other languages' rules (Dutch would turn ``broken`` into ``brook``).

Only Latin-script words of three letters or more are stemmed: identifiers, numbers, words
mixing letters and digits, CJK and other scripts match exactly (the index's exact column).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache, lru_cache
from typing import Any

#: Snowball stemmer names (PyStemmer), the fallback first.
LANGUAGES = ("english", "german", "french", "spanish", "portuguese", "italian", "dutch", "swedish")
DEFAULT_LANGUAGE = "english"

#: Function words that tell a text's language.  A word listed for several languages counts for
#: each of them in proportion (``de`` is Spanish, Portuguese and Dutch).
_CUES: dict[str, frozenset[str]] = {
    "english": frozenset("the and is are was were with that this have has for not you what when where how did "
                         "does of to in it my we they be been".split()),
    "german": frozenset("der die das und ist nicht ich ein eine mit auf den dem des sich auch wir sie wann wie "
                        "habe haben hat für von zu im bei noch nach".split()),
    "french": frozenset("le la les et est des une un du pour pas que qui dans avec sur je nous vous il elle au "
                        "aux ce cette mais quand où".split()),
    "spanish": frozenset("el la los las y es que de en un una por para con no se del al como pero está qué "
                         "cuándo dónde muy".split()),
    "portuguese": frozenset("o os as e é que de em um uma por para com não se do da dos das no na mas quando "
                            "onde muito".split()),
    "italian": frozenset("il lo gli le e è che di un una per con non del della nel sono ma quando dove come "
                         "anche".split()),
    "dutch": frozenset("de het een en is niet van dat die op met voor ik wij je wat wanneer hoe waar ook "
                       "maar".split()),
    "swedish": frozenset("och att det som en är på inte med för jag vi har av till vad när hur också "
                         "men".split()),
}
_WEIGHT: dict[str, float] = {}
for _words in _CUES.values():
    for _w in _words:
        _WEIGHT[_w] = _WEIGHT.get(_w, 0.0) + 1.0
_WEIGHT = {w: 1.0 / n for w, n in _WEIGHT.items()}
_LANGS_OF: dict[str, tuple[str, ...]] = {w: tuple(lang for lang, cues in _CUES.items() if w in cues) for w in _WEIGHT}
#: How much cue weight a language needs before a text counts as written in it.
MIN_CUES = 2.0

#: Word runs as :func:`detect_language` counts them (cue words are letters only; any other run is no cue).
_TOKEN = re.compile(r"\w+")
#: The words a text's stems are made of: whole word runs (``\w+``) of letters only, three or more;
#: ASCII letters for English (as :func:`memdir.textutil.stem_counts` counts them; a word with
#: accents is stemmed without them, see :func:`english_word`), any Latin letters for the other
#: languages.
_ASCII_WORD = re.compile(r"(?<!\w)[a-z]{3,}(?!\w)")
_LETTER_WORD = re.compile(r"(?<!\w)[^\W\d_]{3,}(?!\w)")


def english_word(word: str) -> str | None:
    """A Latin word as the English stemmer reads it: without its accents (``cafés`` → ``cafes``,
    ``résumé`` → ``resume``), as FTS5 folds the stems it indexes; ``None`` if letters outside
    ASCII remain (``straße``).  Stemmed with its accents, "cafés" became ``café`` and "résumé"
    stayed ``résumé`` (folded: ``resume``, never ``resum``), and English notes' accented words
    were left out of the stems column altogether: "cafe" found no note saying "cafés"."""
    if word.isascii():
        return word
    from memdir.textutil import latin_fold_table

    folded = word.translate(latin_fold_table())
    return folded if folded.isascii() and folded.isalpha() else None


def is_latin_word(word: str) -> bool:
    """Letters only, all of them Latin script (ASCII, Latin-1 and Latin Extended), three or more."""
    return len(word) >= 3 and word.isalpha() and all(ord(ch) < 0x250 for ch in word)


def detect_language(text: str) -> str:
    """The language of ``text`` among :data:`LANGUAGES`, by its function words (English if unsure).

    Asked for every chunk a search scores, so the common case is cheap: a text with three or more
    " the "/" and " is English without counting its words.
    """
    return _language_of(text.lower())


def _language_of(low: str) -> str:
    """:func:`detect_language` of a text already lower-cased."""
    if low.count(" the ") + low.count(" and ") >= 3:
        return DEFAULT_LANGUAGE
    return _detect(low) if len(low) > 4096 else _detect_cached(low)


def _detect(text: str) -> str:
    scores = dict.fromkeys(_CUES, 0.0)
    counts = Counter(_TOKEN.findall(text.lower()))
    for word in counts.keys() & _LANGS_OF.keys():
        for lang in _LANGS_OF[word]:
            scores[lang] += counts[word] * _WEIGHT[word]
    best = max(scores, key=lambda lang: (scores[lang], lang == DEFAULT_LANGUAGE))
    return best if scores[best] >= MIN_CUES else DEFAULT_LANGUAGE


#: A chunk's language is asked for at every search that scores it: remembered for recent texts.
_detect_cached = lru_cache(maxsize=4096)(_detect)


@cache
def stemmer(language: str) -> Any:
    import Stemmer  # PyStemmer: the Snowball stemmers in C; imported when first needed

    return Stemmer.Stemmer(language)


#: Whitespace-separated tokens remembered per language; cleared when full (a vocabulary of
#: notes is small, but ids and numbers keep adding tokens that come up once).
TOKEN_CACHE_MAX = 100_000


class _TokenStems(dict[str, str]):
    """The stems of one whitespace-separated token (``"service,"`` → ``"servic"``), remembered.

    A word run (``\\w+``) never contains whitespace, so a text's stems are its tokens' stems in
    order: finding and stemming the words of each distinct token once made the stems column
    2.7× cheaper to compute (24 against 64 µs a chunk) than the word pattern and the stemmer
    run over every chunk's whole text."""

    def __init__(self, language: str):
        super().__init__()
        self.language = language
        self.stem = stemmer(language).stemWord

    def __missing__(self, token: str) -> str:
        low = token.lower()
        if "\u0307" in low:  # Python lowers the Turkish İ to i and a combining dot, which split the word:
            low = low.replace("i\u0307", "i")  # İstanbul's stem was "stanbul" (as memdir.query.lower does)
        if self.language == DEFAULT_LANGUAGE:
            if low.isascii():
                words = _ASCII_WORD.findall(low)
            else:
                words = [e for w in _LETTER_WORD.findall(low) if is_latin_word(w) and (e := english_word(w))]
        else:
            words = [w for w in _LETTER_WORD.findall(low) if is_latin_word(w)]
        if len(self) >= TOKEN_CACHE_MAX:
            self.clear()
        stems = self[token] = " ".join([str(self.stem(w)) for w in [*words, *camel_words(token)]])
        return stems


@cache
def _token_stems(language: str) -> _TokenStems:
    return _TokenStems(language)


def text_stems(text: str) -> str:
    """The stems of a text's Latin words in the text's language, space-separated (the index column),
    each CamelCase word's followed by its parts' (:func:`camel_words`)."""
    stems = _token_stems(_language_of(text.lower()))
    return " ".join(filter(None, map(stems.__getitem__, text.split())))


#: A CamelCase word's inner capital: after a lower-case letter (``getUser``, ``iPhone``), or ending
#: a run of capitals before a lower-case word (``OOMKilled``, ``HTTPServer``; not ``GPUs``).
_HUMP = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]{2}")
#: A CamelCase word's parts: a run of capitals before a capitalised word, a (capitalised) lower-case
#: word, a run of capitals.
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z]{2})|[A-Z]?[a-z]+|[A-Z]+")
_WORD_RUN = re.compile(r"[^\W_]+")


def has_camel_case(text: str) -> bool:
    """Whether ``text`` may hold a CamelCase word (:func:`camel_words` may find parts in it)."""
    return _HUMP.search(text) is not None


def camel_words(token: str) -> list[str]:
    """The parts of three letters or more of the CamelCase words in ``token``, lower-cased
    (``psycopg2.OperationalError`` → operational, error; ``OOMKilled`` → oom, killed).

    The keyword index holds such a word as one token (``operationalerror``), so a developer's note
    naming ``OperationalError`` or ``ConnectionResetError`` was found by no question for
    "operational error" or "connection reset": the stems column holds its parts' stems too.  A
    CamelCase word is letters only (40 at most) and has no lone lower-case letter but its first
    (``iPhone``): a base64 key, a token or a hash mixes digits in, or letters of either case at
    random, and its pieces are no words."""
    if not _HUMP.search(token):
        return []
    out: list[str] = []
    for run in _WORD_RUN.findall(token):
        if len(run) > 40 or not run.isalpha() or not run.isascii() or not _HUMP.search(run):
            continue
        parts = _CAMEL_PART.findall(run)
        if any(len(p) == 1 and p.islower() for p in parts[1:]):
            continue
        out += [p.lower() for p in parts if len(p) >= 3]
    return out


def query_languages(words: list[str]) -> list[str]:
    """The languages a question's words are stemmed in: English, and the one they tell if another.

    The words are a question's keyword terms, after stop words were dropped: a Spanish or
    Portuguese question whose function words were all stop words is told as English.
    """
    lang = detect_language(" ".join(words))
    return [DEFAULT_LANGUAGE] if lang == DEFAULT_LANGUAGE else [DEFAULT_LANGUAGE, lang]


def query_stems(word: str, languages: list[str]) -> list[str]:
    """A query word's stems in ``languages``, without repeats (none for IDs, numbers, CJK)."""
    if not is_latin_word(word):
        return []
    # the word itself too: a note in another language may keep it whole as its stem (German
    # "Messing"), and then the note with the exact word ranks above one sharing an English stem
    stems = [str(stemmer(lang).stemWord(word if lang != DEFAULT_LANGUAGE else english_word(word) or word))
             for lang in languages]
    # one phrase per token the index holds: FTS5 folds accents, so "café" and its stem "cafe" are one
    out: dict[str, str] = {}
    for s in [*stems, word]:
        out.setdefault(english_word(s) or s, s)
    return list(out.values())
