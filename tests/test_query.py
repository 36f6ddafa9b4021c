"""FTS query building and keyword extraction: R§17 vectors 22-24 and 40-45."""

from __future__ import annotations

import unicodedata

import pytest

from memdir import Memory
from memdir.query import build_fts_query, extract_keywords, keyword_match_expression, keyword_terms


@pytest.mark.parametrize("raw,expected", [
    ("hello world", '"hello" AND "world"'),
    ("FOO_bar baz-1", '"FOO_bar" AND "baz" AND "1"'),
    ("foo-bar baz", '"foo" AND "bar" AND "baz"'),
    ("   ", None),
    ("--", None),
    ("金银价格", '"金银价格"'),
    ("価格 2026年", '"価格" AND "2026年"'),
    ("テスト、確認", '"テスト" AND "確認"'),
    ("한국어 검색", '"한국어" AND "검색"'),
    ("user@example.com", '"user" AND "example" AND "com"'),
    ("C++ & C#", '"C" AND "C"'),
    ("don't stop", '"don" AND "t" AND "stop"'),
    ("café naïve", '"café" AND "naïve"'),
    ("emoji 😀 test", '"emoji" AND "test"'),
    ("OR AND NOT", '"OR" AND "AND" AND "NOT"'),
    ("memorySearch.query.hybrid", '"memorySearch" AND "query" AND "hybrid"'),
])
def test_build_fts_query(raw, expected):
    assert build_fts_query(raw) == expected


@pytest.mark.parametrize("query,expected", [
    ("that thing we discussed about the API", ["discussed", "api"]),
    ("之前讨论的那个方案", ["之", "讨", "论", "个", "方", "案", "前讨", "讨论", "论的", "的那", "个方", "方案"]),
    ("昨日話したデプロイ戦略", ["昨日話", "日話", "デプロイ", "戦略"]),
    ("昨日話したAPIのバグ", ["昨日話", "日話", "api", "バグ"]),
    ("서버에서 발생한 에러를 확인", ["서버에서", "서버", "발생한", "에러를", "에러", "확인"]),
    ("나는 그리고 그래서", []),
    ("논의", ["논의"]),
    ("기능으로 설명", ["기능으로", "기능", "설명"]),
    ("API를 배포했다", ["api를", "api", "배포했다"]),
    ("ayer hablamos sobre la estrategia de despliegue", ["hablamos", "estrategia", "despliegue"]),
    ("بالأمس ناقشنا استراتيجية النشر", ["ناقشنا", "استراتيجية", "النشر"]),
    ("sqlite-vec error 42 on db.sqlite", ["sqlite", "vec", "error"]),
    ("test test testing", ["test", "testing"]),
    ("the a an is are", []),
    ("", []),
])
def test_extract_keywords(query, expected):
    assert extract_keywords(query) == expected


def test_match_expression_quotes_every_term():
    assert keyword_match_expression('NEAR(alpha beta) "gamma* -delta OR') == (
        'text : ("near" OR "alpha" OR "beta" OR "gamma" OR "delta") OR stems : ("near" OR "alpha" OR "beta" OR '
        '"gamma" OR "delta")'
    )
    assert keyword_match_expression("之前讨论的方案").count('"讨 论"') == 1
    assert keyword_match_expression("에러") == 'text : ("에러"*)'
    # only stop words: still searchable by its words rather than returning nothing
    assert keyword_match_expression("what is it") == 'text : ("what" OR "is" OR "it") OR stems : ("what")'


def test_word_forms_match_by_stem_and_identifiers_as_phrases():
    expr = keyword_match_expression("Who was frustrating about the broken QX-1773 checkups?")
    assert expr == ('text : ("qx 1773" OR "frustrating" OR "broken" OR "checkups") OR '
                    'stems : ("frustrat" OR "frustrating" OR "broken" OR "checkup" OR "checkups")')
    assert keyword_match_expression("!!! ???") is None


def test_a_decomposed_question_finds_its_composed_note(make_workspace, keyword_config):
    """A question in NFD (pasted from a macOS file name or a PDF) had its accents as combining
    marks, which split its words: ``résumé`` searched for ``re`` and ``sume`` and ``Σίσυφος``
    for ``σ`` and ``συφος``, so the note (saved in NFC, as editors do) was never found."""
    ws = make_workspace({"memory/people.md": "# People\nAda sent her résumé\n", "memory/myths.md": "# Myths\nΣίσυφος\n",
                         "memory/korean.md": "# 회의\n회의록 정리\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for word, path in (("résumé", "memory/people.md"), ("Σίσυφος", "memory/myths.md"),
                           ("회의록", "memory/korean.md")):
            nfd = unicodedata.normalize("NFD", word)
            assert nfd != word
            assert [r.path for r in mem.search(nfd).results] == [path], word


def test_a_question_with_a_turkish_capital_i_keeps_its_word_whole(make_workspace, keyword_config):
    """Python lowers ``İ`` to ``i`` plus a combining dot, which split ``İstanbul`` into ``i`` and
    ``stanbul``: the note saying "istanbul" was missed and one saying "stanbul" ranked first."""
    assert keyword_terms("İstanbul İZMİR") == ["istanbul", "izmir"]
    ws = make_workspace({"memory/trip.md": "# Trip\nmeeting in İstanbul on Friday\n",
                         "memory/food.md": "# Food\nistanbul kebab place\n",
                         "memory/odd.md": "# Odd\nthe stanbul typo\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        assert sorted(r.path for r in mem.search("İstanbul").results) == ["memory/food.md", "memory/trip.md"]


def test_a_word_with_an_invisible_character_inside_is_found(make_workspace, keyword_config):
    """A soft hyphen (PDFs, word processors) or a zero-width space inside a word was a separator
    for FTS5, so ``infor\\u00admation`` was indexed as ``infor`` and ``mation``: "information" never
    found the note.  A note in NFD (Korean decomposed to its jamo) is indexed composed.  Editing
    and deleting such notes hands FTS5 the same values again, so the index stays whole."""
    ws = make_workspace({"memory/pdf.md": "# Pasted\nthe infor\u00admation desk opens at nine\n",
                         "memory/web.md": "# Web\nzero\u200bwidth\u2060joiner trick\n",
                         "memory/nfd.md": "# " + unicodedata.normalize("NFD", "회의록") + "\nminutes\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        assert [r.path for r in mem.search("information").results] == ["memory/pdf.md"]
        assert [r.path for r in mem.search("zerowidthjoiner").results] == ["memory/web.md"]
        assert [r.path for r in mem.search("회의록").results] == ["memory/nfd.md"]
        # a question carrying the invisible character finds the note too
        assert [r.path for r in mem.search("infor\u00admation").results] == ["memory/pdf.md"]
        (ws / "memory/pdf.md").write_text("# Pasted\nthe infor\u00admation desk moved\n", encoding="utf-8")
        (ws / "memory/web.md").unlink()
        mem.sync()
        assert [r.path for r in mem.search("information moved").results] == ["memory/pdf.md"]
        assert mem.search("zerowidthjoiner").results == []
        conn = mem.store.conn
        conn.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, chunks_fts, row)")
        terms = {t for (t,) in conn.execute("SELECT term FROM temp.words")}
    # the deleted and rewritten rows were taken out with the very values they were indexed with
    assert "zerowidthjoiner" not in terms and "information" in terms and "infor" not in terms
    assert "mation" not in terms and "nine" not in terms


def test_text_the_fast_path_passes_over_is_its_own_word_form():
    """fts_values skips word_form and the Han/Kana spacing for a text with no character of
    ``_MAY_CHANGE``: every character it leaves out must be one those steps never change, alone
    or after a letter (U+2000 and U+2001 are canonical singletons, so they are in the class)."""
    from memdir.textutil import _MAY_CHANGE, fts_text, fts_values, word_form

    skipped = [chr(cp) for cp in range(0x80, 0x2100) if not _MAY_CHANGE.search(chr(cp))]
    assert "\u2014" in skipped and "\u00e9" in skipped and "\u2000" not in skipped and "\u00ad" not in skipped
    for ch in skipped:
        for text in (ch, "a" + ch, "\u1100" + ch, "e" + ch + "x"):
            assert word_form(text) == text and fts_text(text) == text, hex(ord(ch))
    assert fts_values("caf\u00e9 \u2014 infor\u00admation")[0] == "caf\u00e9 \u2014 information"
