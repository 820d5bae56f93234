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
    assert (
        missing_answer_type("How many days of leave do I get for my wedding?", leave) is None
    )  # "leave" shared
    why = missing_answer_type("How many years must we keep audit logs?", leave)
    assert why is not None and "years" in why
    assert missing_answer_type("Who approves my leave?", leave) is None  # asks no quantity
    # an intent without a topic of its own takes it from the whole question
    assert missing_answer_type(
        "how much?", ["The 401(k) plan is run by SocialK."], context="Does the 401(k) match? how much?"
    )
    assert (
        missing_answer_type(
            "how much?", ["The 401(k) match is 4% up to $5,000."], context="Does the 401(k) match? how much?"
        )
        is None
    )


def test_similar_sentences_can_answer_without_shared_words() -> None:
    from rag.stages.abstention import missing_answer_type

    passages = ["Enforce a limit of five (5) consecutive invalid logon attempts."]
    question = "How many times can I mistype my password?"
    assert missing_answer_type(question, passages) is not None
    assert missing_answer_type(question, passages, score=lambda q, ss: [0.6] * len(ss)) is None
    assert missing_answer_type(question, passages, score=lambda q, ss: [0.2] * len(ss)) is not None


def test_how_many_years_needs_a_count_of_years_not_a_frequency() -> None:
    from rag.stages.abstention import missing_answer_type

    question = "Exactly how many years do we have to keep our system audit logs?"
    annually = ["Review and update the event types selected for logging annually."]
    assert missing_answer_type(question, annually) is not None  # "annually" says how often, not how long
    assert missing_answer_type(question, ["Retain audit logs for three (3) years."]) is None
    assert missing_answer_type(question, ["Audit log retention: a 5-year minimum applies."]) is None
    days = ["Customers may return items within forty-five (45) calendar days."]
    assert missing_answer_type("How many days do customers have to return an item?", days) is None
    assert missing_answer_type(
        "How many days do customers have to return an item?", ["Refunds are paid daily."]
    )


def test_a_question_whether_something_exists_needs_evidence_that_mentions_it() -> None:
    from rag.stages.abstention import missing_focus

    laid_off = [
        "There are two types of involuntary termination, often referred to as being fired and laid off.",
        "Being laid off is a result of a strategic decision and affects multiple employees.",
    ]
    question = "If I get laid off, is there any severance pay?"
    why = missing_focus(question, laid_off, pool=laid_off)
    assert why is not None and "severance pay" in why
    assert missing_focus(question, [*laid_off, "Severance is paid at two weeks per year of service."]) is None
    # a paraphrase counts when the sentence scorer rates it close to the thing asked about
    assert missing_focus(question, laid_off, pool=laid_off, score=lambda q, ss: [0.7] * len(ss)) is None
    assert missing_focus(question, laid_off, pool=laid_off, score=lambda q, ss: [0.2] * len(ss)) is not None


def test_the_existence_check_applies_only_to_clauses_asking_whether_something_exists() -> None:
    from rag.stages.abstention import missing_focus

    leave = ["Employees receive 25 days of paid annual leave."]
    assert missing_focus("Who approves my leave?", leave) is None
    assert missing_focus("How many days of leave do I get?", leave) is None
    assert missing_focus("Does the company offer a bike allowance?", leave) is not None
    assert missing_focus("Do I get paid annual leave?", leave) is None  # "annual" is mentioned


def test_a_count_asked_for_one_occasion_needs_the_occasion_mentioned() -> None:
    from rag.stages.abstention import missing_focus

    leave = ["Full-time employees receive 25 days of paid annual leave per calendar year."]
    why = missing_focus("How many days of paid leave do I get for my wedding?", leave, pool=leave)
    assert why is not None and "wedding" in why
    assert (
        missing_focus(
            "How many days of paid leave do I get for my wedding?",
            [*leave, "Employees get three days of leave for their wedding."],
        )
        is None
    )
    # the occasion named by the policy itself ("for a full refund") is what the evidence states
    refunds = ["Customers may return items within 45 days of delivery for a full refund."]
    assert (
        missing_focus("How many days does a customer have to return an item for a full refund?", refunds)
        is None
    )
    # "for the server room": a thing, not an occasion of the asker's; not checked
    assert missing_focus("How often are the logs reviewed for the server room?", leave) is None


def test_the_most_specific_word_of_the_thing_is_chosen_from_the_requests_own_candidates() -> None:
    from rag.stages.abstention import missing_focus

    pool = ["Travel is paid by the company.", "Pay is reviewed each July.", "Meal allowances are paid daily."]
    evidence = ["Pay is reviewed each July."]
    # "severance" appears in no candidate, "pay" in several: the evidence must mention severance
    assert missing_focus("Is there any severance pay?", evidence, pool=pool) is not None
    assert missing_focus("Is there any review of pay?", evidence, pool=pool) is None


def test_what_x_do_we_get_presupposes_x() -> None:
    from rag.stages.abstention import missing_focus

    equipment = ["This policy covers the laptops, phones and monitors that the company provides for work."]
    why = missing_focus("What discount do employees get on company products?", equipment, pool=equipment)
    assert why is not None and "discount" in why
    assert missing_focus("What laptops do employees get?", equipment, pool=equipment) is None
    assert missing_focus("What do employees get?", equipment, pool=equipment) is None  # names nothing
