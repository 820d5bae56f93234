"""The answer check: a part of the question is addressed by the answer's words or by the reader's answer bar."""

from __future__ import annotations

import numpy as np

from rag.stages.answer_check import check_answer, unanswered
from rag.stages.extractive import evidence_sentences
from rag.types import Evidence, Intent, Reading
from tests.stages.factories import make_candidate, make_chunk

LAPTOP = [
    Evidence(
        1,
        make_candidate(make_chunk("Report a lost or stolen laptop to the IT Service Desk within 2 hours.")),
        0,
    ),
    Evidence(2, make_candidate(make_chunk("Lock your screen when you step away.", ordinal=1)), 1),
]
LOSE = Intent(0, "What should I do if I lose my company laptop?")
QUOTE = "Report a lost or stolen laptop to the IT Service Desk within 2 hours. [1]"


def reading(p_lost: float) -> Reading:
    sents = evidence_sentences(LAPTOP)
    p = np.array([[p_lost if "lost" in s.text else 0.01 for s in sents]])
    return Reading(p, tuple(sents), 0.07, 0.6, 0.3)


def test_words_alone_miss_a_paraphrase_the_reader_answers() -> None:
    # "lose" and "lost" share no stem: by words, one of three ("laptop") is not enough
    assert check_answer(QUOTE, [LOSE], None)["intents"][0]["addressed"] is False
    # the reader puts the quoted sentence over its answer bar: the part is answered (not "partial") ...
    check = check_answer(QUOTE, [LOSE], reading(0.14))
    assert check["intents"][0]["addressed"] is True
    # ... but below the support bar it is not vouched for: no "Citations checked"
    assert check["intents"][0]["supported"] is False and check["complete"] is False
    assert check_answer(QUOTE, [LOSE], reading(0.9))["complete"] is True
    assert check_answer(QUOTE, [LOSE], reading(0.02))["intents"][0]["addressed"] is False
    assert check_answer(QUOTE, [LOSE], reading(0.9), abstained=True)["complete"] is False


def test_a_part_a_quoted_sentence_addresses_is_not_called_unanswered() -> None:
    intents = [Intent(0, "What is the refund window"), Intent(1, "can I refund a gift card?")]
    both = "Customers may request a refund within 45 days. [2]\nGift cards are not eligible for a refund. [1]"
    assert unanswered(both, intents, intents[1:], None) == []
    one = "Customers may request a refund within 45 days. [2]"
    assert unanswered(one, intents, intents[1:], None) == intents[1:]
    assert unanswered(one, intents, [], None) == []
