"""A word is found with or without its accents, on both backends alike.

SQLite's FTS5 ``unicode61`` tokenizer removes diacritics from Latin letters, so there "cafe" finds
a note saying "café" and "café" one saying "cafe".  PostgreSQL's ``simple`` configuration keeps
them: the same workspace and question found the note on SQLite and nothing on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import Backend, pg_query
from memdir.api import Memory
from memdir.stores.pgkeyword import pg_text

NOTES = {
    "memory/2026-02-01.md": "- Lunch with the design team at the café on Rue Cler.\n",
    "memory/2026-02-02.md": "- Upload your résumé to the hiring portal before Friday.\n",
    "memory/2026-02-03.md": "- Herr Müller signs the purchase orders now.\n",
    "memory/2026-02-04.md": "- The naive retry loop caused the outage.\n",
    "memory/2026-02-05.md": "- Quarterly planning for the data platform.\n",
}
QUERIES = [("cafe", "2026-02-01"), ("resume", "2026-02-02"), ("muller", "2026-02-03"), ("naïve", "2026-02-04")]


def _assert_first(backend: Backend, workspace: Path, query: str, day: str) -> None:
    """``query`` (keyword only) ranks ``memory/<day>.md`` first on ``backend``."""
    with Memory(workspace, config=backend.config({"memorySearch": {"provider": "none"}})) as mem:
        mem.sync()
        results = mem.search(query, max_results=3).results
    assert results and results[0].path == f"memory/{day}.md", [(r.path, r.snippet) for r in results]


def test_pg_text_folds_latin_diacritics_as_unicode61_does() -> None:
    assert pg_text("Café résumé Müller naïve Łódź Ørsted") == "Cafe resume Muller naive Łodz Ørsted"
    # unicode61 folds Latin letters only; Greek is folded before it (word_form), Cyrillic kept
    assert pg_text("Ελληνικά и кириллица й") == "Ελληνικα и кириллица й"
    assert pg_text("user_id v2.3.1") == "user id v2 3 1"


@pytest.mark.parametrize(("query", "day"), QUERIES)
def test_a_word_is_found_with_or_without_its_accents(backend: Backend, make_workspace: Callable[..., Path],
                                                     query: str, day: str) -> None:
    _assert_first(backend, make_workspace(NOTES), query, day)


def test_an_index_written_with_accents_is_rebuilt(pg: Backend, make_workspace: Callable[..., Path]) -> None:
    """A PostgreSQL index written before accents were folded held "café" where the question now asks
    for "cafe": the next sync rebuilds it rather than leave such words unfindable."""
    config = pg.config({"memorySearch": {"provider": "none"}})
    ws = make_workspace(NOTES)
    with Memory(ws, config=config) as mem:
        mem.sync()
    # as an earlier version left it: accents kept, no text form recorded
    pg_query(pg.url, f'UPDATE "{pg.schema}".chunks SET tsv = to_tsvector(\'simple\', text)')
    pg_query(pg.url, f'UPDATE "{pg.schema}".indexes SET meta = meta - \'pgTextForm\'')
    with Memory(ws, config=config) as mem:
        report = mem.sync()
        assert report.full and "keyword text form" in report.reason, report
        results = mem.search("cafe", max_results=3).results
        assert results and results[0].path == "memory/2026-02-01.md"
        assert not mem.sync().full


FORMS = {
    "memory/2026-03-01.md": "- We tried three cafés in Lyon before the offsite.\n",
    "memory/2026-03-02.md": "- Both résumés went to the hiring committee.\n",
    "memory/2026-03-03.md": "- The naïvely cached tokens expired overnight.\n",
    "memory/2026-03-04.md": "- Quarterly planning for the data platform.\n",
    "memory/2026-03-05.md": "- Renewed the domain for two more years.\n",
}


@pytest.mark.parametrize(("query", "day"), [("cafe", "2026-03-01"), ("café", "2026-03-01"),
                                            ("resume", "2026-03-02"), ("résumé", "2026-03-02"),
                                            ("naive", "2026-03-03")])
def test_another_form_of_an_accented_word_is_found_on_both_backends(
        backend: Backend, make_workspace: Callable[..., Path], query: str, day: str) -> None:
    """Word forms are forgiven by stems, but an English note's accented words were left out of the
    stems column on SQLite, and an accented question word had no stem phrase on PostgreSQL: "cafe"
    found the note saying "cafés" on PostgreSQL only, "café" on neither, "resume" no "résumés"."""
    _assert_first(backend, make_workspace(FORMS), query, day)


def test_accented_word_forms_score_alike_on_both_backends(pg: Backend, make_workspace: Callable[..., Path]) -> None:
    ws = make_workspace(FORMS)
    scores = []
    for config in ({"memorySearch": {"provider": "none"}}, pg.config({"memorySearch": {"provider": "none"}})):
        with Memory(ws, config=config) as mem:
            mem.sync()
            scores.append([[(r.path, round(r.score, 6)) for r in mem.search(q, max_results=3).results]
                           for q in ("cafes", "café", "resumes", "naive tokens")])
    assert scores[0] == scores[1] and all(scores[0])


COMPAT = {
    "memory/2026-04-01.md": "- The ＫＡＦＫＡ brokers moved to the new rack.\n",  # typed in an IME's full-width mode
    "memory/2026-04-02.md": "- The ﬁnal ﬂight list is in the shared ﬁle.\n",  # ligatures, as a PDF pastes them
    "memory/2026-04-03.md": "- Quarterly planning for the data platform.\n",
    "memory/2026-04-04.md": "- Order ２０２６１１ ships from the ｶﾞｲﾄﾞ warehouse.\n",  # full-width digits, kana
    "memory/2026-04-05.md": "- Renewed the redis lease for two more years.\n",
}


@pytest.mark.parametrize(("query", "day"), [("kafka", "2026-04-01"), ("final flight", "2026-04-02"),
                                            ("ＲＥＤＩＳ", "2026-04-05"), ("ﬂight", "2026-04-02"),
                                            ("202611", "2026-04-04"), ("ガイド", "2026-04-04")])
def test_full_width_letters_and_ligatures_are_their_plain_letters(
        backend: Backend, make_workspace: Callable[..., Path], query: str, day: str) -> None:
    """unicode61 keeps a full-width ``ＫＡＦＫＡ`` or a ligature ``ﬁ`` as letters of their own: a note
    written in an IME's full-width mode was found by no question typed in ASCII (and the reverse),
    a PDF's ``ﬁnal ﬂight`` by no "final flight"; both backends index and search them as NFKC does."""
    _assert_first(backend, make_workspace(COMPAT), query, day)



@pytest.mark.parametrize("query", ["\u200b", "\u00ad\u2060\ufeff", "\ufdfd", "\uff0a", "ｶﾞ" * 300])
def test_a_question_of_invisible_or_symbol_forms_finds_nothing_without_failing(
        backend: Backend, make_workspace: Callable[..., Path], query: str) -> None:
    # a question left empty once its invisible characters were dropped must not fail the search
    with Memory(make_workspace(COMPAT), config=backend.config({"memorySearch": {"provider": "none"}})) as mem:
        mem.sync()
        assert mem.search(query, max_results=3).results == []

TURKISH = {
    "memory/2026-05-01.md": "- Arka kapı kilitli kalmıştı, anahtar bekçide.\n",
    "memory/2026-05-02.md": "- KIRMIZI DOSYA müdürün masasında.\n",
    "memory/2026-05-03.md": "- Quarterly planning for the data platform.\n",
    "memory/2026-05-04.md": "- Renewed the domain for two more years.\n",
}


@pytest.mark.parametrize(("query", "day"), [("KAPI", "2026-05-01"), ("kapi", "2026-05-01"), ("kapı", "2026-05-01"),
                                            ("kırmızı dosya", "2026-05-02"), ("Kırmızı", "2026-05-02")])
def test_turkish_dotless_i_is_found_in_either_case(
        backend: Backend, make_workspace: Callable[..., Path], query: str, day: str) -> None:
    """The upper case of Turkish ``kapı`` is ``KAPI``, which FTS5 lowers to ``kapi``; ``unicode61``
    folds ç ğ ö ş ü and İ but keeps ``ı``: "KAPI" found no note saying kapı, and "kırmızı" none
    written in capitals.  ``ı`` is indexed and searched as ``i`` on both backends."""
    _assert_first(backend, make_workspace(TURKISH), query, day)


POINTED = {
    "memory/2026-07-01.md": "- قال مَرْحَبًا بِكُم في المَدْرَسَة\n",  # vowel points, as a textbook writes them
    "memory/2026-07-02.md": "- ذهبنا إلى المكتبة مساء الخميس\n",
    "memory/2026-07-03.md": "- שָׁלוֹם עֲלֵיכֶם מִן הַבַּיִת\n",
    "memory/2026-07-04.md": "- Quarterly planning for the data platform.\n",
    "memory/2026-07-05.md": "- Renewed the domain for two more years.\n",
}


@pytest.mark.parametrize(("query", "day"), [("مرحبا", "2026-07-01"), ("المدرسة", "2026-07-01"),
                                            ("المَكْتَبَة", "2026-07-02"), ("שלום", "2026-07-03"),
                                            ("הַבַּיִת", "2026-07-03")])
def test_arabic_and_hebrew_vowel_points_are_optional_on_both_backends(
        backend: Backend, make_workspace: Callable[..., Path], query: str, day: str) -> None:
    """unicode61 splits a word at an Arabic or Hebrew vowel point (it removes Latin accents only):
    a note saying مَرْحَبًا was single letters to the index, found by no مرحبا, and the pointed
    المَكْتَبَة found the note holding its letters in a row (المَدْرَسَة's), not the one saying
    المكتبة.  The points are dropped as Latin accents are, on both backends."""
    _assert_first(backend, make_workspace(POINTED), query, day)


GREEK = {
    "memory/2026-08-01.md": "- Η οδός Σταδίου είναι κλειστή ως την Τρίτη\n",
    "memory/2026-08-02.md": "- ΣΥΝΑΝΤΗΣΗ ΣΤΟ ΓΡΑΦΕΙΟ ΤΟΥ ΚΩΣΤΑ\n",  # capitals: no accents, as Greek writes them
    "memory/2026-08-03.md": "- Quarterly planning for the data platform.\n",
    "memory/2026-08-04.md": "- Renewed the domain for two more years.\n",
}


@pytest.mark.parametrize(("query", "day"), [("ΟΔΟΣ", "2026-08-01"), ("οδος σταδιου", "2026-08-01"),
                                            ("οδός", "2026-08-01"), ("συνάντηση", "2026-08-02"),
                                            ("Κώστα", "2026-08-02")])
def test_greek_is_found_with_or_without_its_accents_and_in_capitals(
        backend: Backend, make_workspace: Callable[..., Path], query: str, day: str) -> None:
    """Greek in capitals leaves its accents out (ΟΔΟΣ for οδός) and questions are often typed
    without them, but unicode61 keeps them and lowers a word's last Σ to σ where the note has ς:
    "ΟΔΟΣ" and "οδος" found no note saying οδός, "συνάντηση" none written in capitals."""
    _assert_first(backend, make_workspace(GREEK), query, day)


@pytest.mark.parametrize(("query", "day"), [("елку", "2026-09-01"), ("ЁЛКУ", "2026-09-01"), ("ещё", "2026-09-02"),
                                            ("Ещё", "2026-09-02")])
def test_russian_yo_and_ye_are_one_letter_on_both_backends(
        backend: Backend, make_workspace: Callable[..., Path], query: str, day: str) -> None:
    """Russian writes ё as е more often than not (ёлка and елка, ещё and еще are the same words),
    but unicode61 keeps them apart: "елку" found no note saying ёлку, "ещё" none saying еще."""
    notes = {"memory/2026-09-01.md": "- Купили ёлку и игрушки\n",
             "memory/2026-09-02.md": "- Надо еще позвонить в банк\n",
             "memory/2026-09-03.md": "- Quarterly planning for the data platform.\n"}
    _assert_first(backend, make_workspace(notes), query, day)


@pytest.mark.parametrize(("query", "day"), [("strasse", "2026-10-01"), ("STRASSE", "2026-10-01"),
                                            ("Grüße", "2026-10-02"), ("gruesse", None), ("Maß", "2026-10-01")])
def test_german_sharp_s_is_found_as_ss_on_both_backends(
        backend: Backend, make_workspace: Callable[..., Path], query: str, day: str | None) -> None:
    """Capitals write ß as SS (STRASSE) and Swiss German always does (Strasse), but unicode61 keeps
    ß: "strasse" found no note saying Straße, "Grüße" none written GRÜSSE.  (ue for ü is a spelling
    of its own, not folded.)"""
    notes = {"memory/2026-10-01.md": "- Die Baustelle in der Straße ist nach Maß geplant.\n",
             "memory/2026-10-02.md": "- VIELE GRÜSSE AN DAS TEAM IN ZÜRICH\n",
             "memory/2026-10-03.md": "- Quarterly planning for the data platform.\n"}
    if day is None:
        with Memory(make_workspace(notes), config=backend.config({"memorySearch": {"provider": "none"}})) as mem:
            mem.sync()
            assert mem.search(query, max_results=3).results == []
        return
    _assert_first(backend, make_workspace(notes), query, day)


def test_a_full_width_identifier_is_searched_as_its_ascii_twin(backend: Backend,
                                                               make_workspace: Callable[..., Path]) -> None:
    """Full-width punctuation stayed as it was: 'ｕｓｅｒ＿ｉｄ' or 'ｖ２．３．１' typed in an IME's
    full-width mode was no identifier to the question's parser (searched as separate words, lower
    than 'user_id'); it is one as its ASCII twin is, same results and scores."""
    notes = {"memory/a.md": "- the user_id field moved in v2.3.1\n", "memory/b.md": "- the user list is long\n",
             "memory/c.md": "- version 2 of the id scheme\n"}
    with Memory(make_workspace(notes), config=backend.config({"memorySearch": {"provider": "none"}})) as mem:
        mem.sync()
        for wide, plain in (("ｕｓｅｒ＿ｉｄ", "user_id"), ("ｖ２．３．１", "v2.3.1")):
            assert [(r.path, r.score) for r in mem.search(wide).results] == \
                [(r.path, r.score) for r in mem.search(plain).results], wide
