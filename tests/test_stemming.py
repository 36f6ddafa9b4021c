"""Stemming in the language of each note (issue 10): English suffix rules stay off other languages'
notes, word forms still meet within a language, and IDs and CJK only ever match exactly."""

from __future__ import annotations

import pytest

from memdir.api import Memory
from memdir.query import keyword_match_expression
from memdir.stemming import detect_language, query_languages, query_stems, text_stems


@pytest.mark.parametrize("text,language", [
    ("We renewed the passports and paid for the new car.", "english"),
    ("Wir haben gestern die Pässe erneuert und das Auto bezahlt.", "german"),
    ("Nous avons renouvelé les passeports et payé la voiture.", "french"),
    ("Hemos renovado los pasaportes y pagado el coche.", "spanish"),
    ("Renovámos os passaportes e pagámos o carro, não foi caro.", "portuguese"),
    ("Abbiamo rinnovato i passaporti e pagato il conto della macchina.", "italian"),
    ("We hebben de paspoorten vernieuwd en het is niet duur.", "dutch"),
    ("Vi har förnyat passen och det är inte dyrt.", "swedish"),
    ("Renewed passports", "english"),  # no function words: English, as before
    ("QX-1773 9f3c2a", "english"),
])
def test_a_text_is_told_by_its_function_words(text: str, language: str) -> None:
    assert detect_language(text) == language


def test_each_text_is_stemmed_by_its_own_language() -> None:
    assert text_stems("Die Lampe aus Messing ist kaputt und wir haben sie gebracht.").split()[3] == "messing"
    assert "mess" in text_stems("The lamp is made of messing, and the mess is ours.").split()
    assert text_stems("Wir haben die Pässe erneuert.").split()[3] == "pass"
    # identifiers, numbers, short words and CJK get no stems at all
    assert text_stems("QX-1773 9f3c2a 之前讨论 ok") == "" and query_stems("qx", ["english"]) == []


def test_a_question_is_stemmed_in_english_and_in_the_language_it_tells() -> None:
    assert query_languages(["when", "renew", "passports"]) == ["english"]
    assert query_languages(["wann", "habe", "ich", "die", "pässe", "erneuert"]) == ["english", "german"]
    # English words never pick up other languages' stems (Dutch rules would make "broken" "brook")
    assert 'stems : ("broken")' in keyword_match_expression("broken")
    assert '"pass"' in (keyword_match_expression("Wann habe ich die Pässe erneuert?") or "")


def test_english_suffix_rules_do_not_reach_a_german_note(make_workspace, keyword_config) -> None:
    ws = make_workspace({
        "memory/2025-03-01.md": "- Die Lampe aus Messing ist kaputt und wir haben sie zur Reparatur gebracht.\n",
        "memory/2025-03-02.md": "- The kitchen was a mess after the party.\n",
        "memory/2025-03-03.md": "- Wir haben gestern die Pässe erneuert und das Auto bezahlt.\n",
    })
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        # English rules would stem "Messing" (brass) to "mess"; German ones keep it apart
        assert [r.path for r in mem.search("mess").results] == ["memory/2025-03-02.md"]
        # a German word form still meets its note by the German stem (Pass / Pässe)
        assert [r.path for r in mem.search("Pass").results] == ["memory/2025-03-03.md"]
        # the exact word ranks first, whatever the language (the English stem "mess" still meets
        # the English note, below it)
        assert [r.path for r in mem.search("Messing").results] == ["memory/2025-03-01.md", "memory/2025-03-02.md"]
