"""The shared word lists: what each holds, and that the stages read them rather than copies."""

import re

import pytest

from rag.text import lexicon
from rag.text.lexicon import (
    AUXILIARIES,
    BE,
    CARDINAL_PATTERN,
    CARDINALS,
    MODALS,
    MONTH_PATTERN,
    MONTHS,
    spell,
)


def test_cardinals_hold_their_values() -> None:
    assert CARDINALS["zero"] == 0
    assert CARDINALS["seventeen"] == 17
    assert CARDINALS["ninety"] == 90
    assert CARDINALS["hundred"] == 100
    assert "thousand" not in CARDINALS  # a scale, not a count a policy writes in words
    assert len(CARDINALS) == 20 + 8 + 1
    assert set(lexicon.READER_CARDINALS) < CARDINALS.keys()  # the reader's trained subset


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("within thirty days", "thirty"),
        ("Seventeen weeks", "Seventeen"),
        ("sixteen", "sixteen"),
        ("someone", None),
    ],
)
def test_cardinal_pattern_finds_whole_words(text: str, found: str | None) -> None:
    match = re.search(rf"\b{CARDINAL_PATTERN}\b", text, re.IGNORECASE)
    assert (match.group(0) if match else None) == found


def test_spell() -> None:
    assert [spell(n) for n in (0, 7, 12, 30, 45, 99)] == [
        "zero",
        "seven",
        "twelve",
        "thirty",
        "forty-five",
        "ninety-nine",
    ]
    with pytest.raises(ValueError):
        spell(100)


@pytest.mark.parametrize("word", ["January", "jan", "Sept", "sep", "september", "June", "jun", "may", "DEC"])
def test_month_pattern_takes_names_and_abbreviations(word: str) -> None:
    assert re.fullmatch(MONTH_PATTERN, word, re.IGNORECASE)


@pytest.mark.parametrize("word", ["ja", "junes", "septem", "mayo", "monday"])
def test_month_pattern_rejects_other_words(word: str) -> None:
    assert not re.fullmatch(MONTH_PATTERN, word, re.IGNORECASE)


def test_months_in_calendar_order() -> None:
    assert MONTHS[0] == "january" and MONTHS[11] == "december" and len(set(MONTHS)) == 12


def test_stopwords_keep_negations_searchable() -> None:
    assert lexicon.NEGATIONS.isdisjoint(lexicon.STOPWORDS)
    assert {"the", "of", "would"} <= lexicon.STOPWORDS


def test_auxiliaries_compose_be_and_modals() -> None:
    assert BE | MODALS <= AUXILIARIES
    assert {"do", "has", "can't", "weren't"} <= AUXILIARIES
    assert "be" not in AUXILIARIES  # "Be sure to ..." opens an instruction, not a question


def test_stages_share_the_lexicon_instead_of_copies() -> None:
    from rag import text
    from rag.stages import claims, hops, intents

    assert text.STOPWORDS is lexicon.STOPWORDS
    assert claims.MONTHS is lexicon.MONTHS
    assert intents.AUXILIARIES is lexicon.AUXILIARIES
    assert hops._FUNCTION_WORDS == lexicon.STOPWORDS | lexicon.NEGATIONS
