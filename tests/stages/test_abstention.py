from __future__ import annotations

from rag.stages.abstention import abstention_text, decide_abstention
from rag.types import Intent
from tests.stages.factories import make_candidate

TWO = [Intent(0, "What is the refund window"), Intent(1, "can I refund a gift card?")]


def test_answers_when_every_intent_has_a_strong_passage() -> None:
    reranked = [
        make_candidate("a", ordinal=0, rerank=0.9, intents=(0,)),
        make_candidate("b", ordinal=1, rerank=0.6, intents=(1,)),
    ]
    assert decide_abstention(reranked, TWO, threshold=0.5) == (False, [], None)


def test_abstains_when_nothing_clears_the_threshold() -> None:
    reranked = [make_candidate("a", ordinal=0, rerank=0.3, intents=(0, 1))]
    abstain, uncovered, reason = decide_abstention(reranked, TWO, threshold=0.5)
    assert abstain and uncovered == TWO
    assert reason is not None and "0.5" in reason and "0.3" in reason


def test_abstains_when_nothing_was_retrieved() -> None:
    abstain, uncovered, reason = decide_abstention([], TWO, threshold=0.5)
    assert abstain and uncovered == TWO and reason == "no passages were retrieved"


def test_partial_coverage_names_the_missing_intent() -> None:
    reranked = [
        make_candidate("a", ordinal=0, rerank=0.9, intents=(0,)),
        make_candidate("b", ordinal=1, rerank=0.2, intents=(1,)),
    ]
    abstain, uncovered, reason = decide_abstention(reranked, TWO, threshold=0.5)
    assert not abstain and uncovered == [TWO[1]]
    assert reason is not None and "can I refund a gift card?" in reason


def test_a_strong_passage_counts_only_for_the_intents_it_was_retrieved_for() -> None:
    reranked = [make_candidate("a", ordinal=0, rerank=5.0, intents=(1,))]
    _, uncovered, _ = decide_abstention(reranked, TWO, threshold=0.5)
    assert uncovered == [TWO[0]]


def test_the_threshold_is_inclusive_and_falls_back_to_fused_scores() -> None:
    reranked = [make_candidate("a", ordinal=0, fused=0.5, intents=(0,))]
    assert decide_abstention(reranked, [TWO[0]], threshold=0.5) == (False, [], None)


def test_untagged_candidates_count_for_the_first_intent() -> None:
    reranked = [make_candidate("a", ordinal=0, rerank=0.9, intents=())]
    assert decide_abstention(reranked, [Intent(0, "q")], threshold=0.5) == (False, [], None)


def test_full_abstention_text() -> None:
    text = abstention_text(
        "What is the dress code?",
        [Intent(0, "What is the dress code?")],
        [Intent(0, "What is the dress code?")],
    )
    assert text.startswith("I can't answer this from the policies you have access to:")
    assert '"What is the dress code?"' in text


def test_full_abstention_text_lists_every_intent() -> None:
    text = abstention_text("q", TWO, TWO)
    assert text.startswith("I can't answer this from the policies you have access to:")
    assert '"What is the refund window"' in text and '"can I refund a gift card?"' in text


def test_partial_abstention_text() -> None:
    text = abstention_text("q", [TWO[1]], TWO)
    assert text == 'I could not find anything about: "can I refund a gift card?".'


def test_nothing_uncovered_means_no_text() -> None:
    assert abstention_text("q", [], TWO) == ""


def test_a_quantity_question_needs_that_quantity_about_its_topic() -> None:
    from rag.stages.abstention import missing_answer_type

    leave = ["Employees receive 25 days of paid annual leave.", "Weddings are celebrated with a team card."]
    assert missing_answer_type("How many days of paid leave do I get?", leave) is None
    assert missing_answer_type("How many days of leave do I get for my wedding?", leave) is None  # "leave" shared
    why = missing_answer_type("How many years must we keep audit logs?", leave)
    assert why is not None and "years" in why
    assert missing_answer_type("Who approves my leave?", leave) is None  # asks no quantity
    # an intent without a topic of its own takes it from the whole question
    assert missing_answer_type("how much?", ["The 401(k) plan is run by SocialK."], context="Does the 401(k) match? how much?")
    assert missing_answer_type("how much?", ["The 401(k) match is 4% up to $5,000."], context="Does the 401(k) match? how much?") is None


def test_similar_sentences_can_answer_without_shared_words() -> None:
    from rag.stages.abstention import missing_answer_type

    passages = ["Enforce a limit of five (5) consecutive invalid logon attempts."]
    question = "How many times can I mistype my password?"
    assert missing_answer_type(question, passages) is not None
    assert missing_answer_type(question, passages, score=lambda q, ss: [0.6] * len(ss)) is None
    assert missing_answer_type(question, passages, score=lambda q, ss: [0.2] * len(ss)) is not None
