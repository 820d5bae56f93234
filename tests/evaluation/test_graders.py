"""Graders: the paper metric, number-word normalisation, the negation-aware strict grader, abstention, and
evidence coverage identical to the reference grader."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evaluation.graders import (
    best_gold_at_edge,
    content_recall,
    covered,
    grade,
    grade_all_of,
    is_abstention,
    key_facts,
    mention_status,
    normalised_match,
    numbers_to_digits,
    paper_match,
    paper_normalize,
    strict_match,
)

GOLD = ["45 days"]


def test_the_substring_grader_is_fooled_both_ways() -> None:
    # The mission's two traps, which the paper metric falls into and the strict grader does not.
    assert paper_match("30 days, not 45 days", GOLD)
    assert not paper_match("forty-five days", GOLD)
    assert not strict_match("30 days, not 45 days", GOLD)
    assert strict_match("forty-five days", GOLD)


@pytest.mark.parametrize(
    "output",
    [
        "30 days, not 45 days",
        "The window is 30 days (not 45 days).",
        "It is 30 days instead of 45 days.",
        "Customers have 30 days rather than 45 days.",
        "45 days is outdated; it is now 30 days.",
        "The window is no longer 45 days.",
        "It was previously 45 days but is now 30.",
        "They have 45 days. Actually, not 45 days: 30.",
    ],
)
def test_strict_rejects_negated_or_contradicted_mentions(output: str) -> None:
    assert normalised_match(output, GOLD)  # the lenient grader still sees the string
    assert not strict_match(output, GOLD)


@pytest.mark.parametrize(
    "output",
    [
        "Customers may return items within 45 days of delivery [1].",
        "Not 30 days but 45 days.",
        "No, the window is forty-five days.",
        "You have no more than 45 days to return an item.",
        "FORTY FIVE DAYS",
        "45 days, not 30 days.",
    ],
)
def test_strict_accepts_asserted_mentions(output: str) -> None:
    assert strict_match(output, GOLD)


def test_a_gold_that_is_itself_negative_is_not_its_own_negation() -> None:
    answers = ["not refundable", "non-refundable", "cannot be refunded"]
    assert strict_match("Gift cards are not refundable, except where required by law [2].", answers)
    assert strict_match("Gift cards can't be refunded.", answers)
    assert strict_match("The $85 limit doesn't apply to the celebration.", ["does not apply"])
    assert not strict_match("Gift cards are refundable within 45 days.", answers)


def test_citation_markers_are_not_answer_text() -> None:
    # "$30" must not be found in the passage id [30]; "45 days" is not "[45] days".
    assert strict_match("Internet costs are not reimbursed. [30]\nSources: [30]", ["not reimbursed"], ["$30"])
    assert not normalised_match("It is [45] days.", GOLD)
    assert normalised_match("It is 45 days [1][2].", GOLD)


def test_must_not_contain_fails_strict() -> None:
    assert not strict_match("$120 per day (the old table said $100).", ["$120"], must_not_contain=["$100"])
    assert strict_match("$120 per day.", ["$120"], must_not_contain=["$100"])


def test_mention_status_counts() -> None:
    assert mention_status("45 days, not 45 days", "45 days") == (1, 1)
    assert mention_status("nothing here", "45 days") == (0, 0)


@pytest.mark.parametrize(
    ("text", "digits"),
    [
        ("forty-five days", "45 days"),
        ("one hundred and twenty dollars", "120 dollars"),
        ("twelve hundred", "1200"),
        ("three thousand five hundred", "3500"),
        ("seven years", "7 years"),
        ("someone else", "someone else"),  # "one" inside a word is not a number
    ],
)
def test_number_words(text: str, digits: str) -> None:
    assert numbers_to_digits(text) == digits


def test_normalised_match_details() -> None:
    assert normalised_match("Reimbursed at $1,200 per year", ["$1200"])
    assert normalised_match("0.70 per mile", ["$0.70"])
    assert not normalised_match("070 per mile", ["0.70"])
    assert not normalised_match("145 days", GOLD)  # whole words only
    assert normalised_match("The Economy class", ["economy"])
    assert not normalised_match("", GOLD)


def test_paper_metric_is_squad_normalised_substring() -> None:
    assert paper_normalize("The Nobel-Prize, in 1901!") == "nobelprize in 1901"
    assert paper_match("It was Wilhelm Conrad Röntgen.", ["Wilhelm Conrad Röntgen"])
    assert paper_match("145 days", GOLD)  # a plain substring: the paper's metric is this lenient


def test_grade_dispatch_and_all_of() -> None:
    out = "The department director approves it [1]. It is paid within twelve business days [2]."
    assert grade_all_of(out, [["director"], ["12 business days"]])
    assert not grade_all_of("The director approves it.", [["director"], ["12 business days"]])
    assert grade("forty-five days", GOLD, "normalised") and not grade("forty-five days", GOLD, "paper")
    with pytest.raises(ValueError):
        grade("x", GOLD, "fuzzy")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "I can't answer this from the policies you have access to: I found no passage that answers it.",
            True,
        ),
        ("The provided evidence does not answer this question.", True),
        ("The provided passages do not contain the information needed to answer this question.", True),
        ('I could not find anything about "wedding leave".', True),
        ("The evidence is insufficient to say.", True),
        ("The policies say nothing of the sort.", False),  # not one of the phrasings we recognise
        ("Customers have 45 days [1].", False),
        ("Gift cards are not refundable [2].", False),
        ("", False),
    ],
)
def test_is_abstention(text: str, expected: bool) -> None:
    assert is_abstention(text) is expected


def test_key_facts_and_content_recall_for_free_text_golds() -> None:
    answer = (
        "Not yet. New team members have to wait 90 days before they get access to the prodev budget "
        "(an annual $1,200 for full-time staff)."
    )
    assert key_facts(answer) == ["90 days"]  # the parenthetical is a detail, not the answer
    assert key_facts("Report it within one hour, then call 1-866 (not 2-877).") == ["1 hour", "1", "866"]
    assert normalised_match("Paid on the 25th day of the month.", ["25"])
    assert key_facts("Only that you were employed, your employment dates, and the positions you held.") == []
    assert (
        content_recall(
            "Only your employment dates and positions held.", "We confirm dates of employment and positions."
        )
        >= 0.5
    )


def test_covered_and_edge_follow_the_reference_definition() -> None:
    quote = "Customers may return items within 45 days of delivery for a full refund."
    assert covered(
        quote, ["3. Returns\nCustomers may return *items* within 45 days of delivery for a full refund."]
    )
    assert covered(quote, ["Customers may return items within", "45 days of delivery for a full refund."])
    assert not covered(quote, ["Gift cards are not refundable."])
    assert not covered(quote, []) and not covered(quote, ["", "***"])  # the reference raises IndexError here
    evidence = [
        {"n": 1, "text": "unrelated", "bundle": 0},
        {"n": 2, "text": quote, "bundle": 1},
        {"n": 3, "text": "also unrelated", "bundle": 2},
    ]
    assert not best_gold_at_edge(quote, evidence)
    evidence[2]["bundle"] = 1  # the gold's bundle now ends the context
    assert best_gold_at_edge(quote, evidence)


@pytest.mark.shared
def test_covered_is_identical_to_the_shared_reference(shared_dir: Path) -> None:
    path = shared_dir / "tools" / "grade_evidence.py"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    spec = importlib.util.spec_from_file_location("grade_evidence", path)
    assert spec and spec.loader
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    cases = [
        (
            "Customers may return items within 45 days",
            ["customers may return items within 45 days of delivery"],
        ),
        ("Customers may return items within 45 days", ["Customers may return goods within 45 days"]),
        (
            "Paychecks are direct deposited on the 25th day",
            ["Paychecks are deposited on the 25th", "day of the month"],
        ),
        ("a b c d e f g h", ["a b x d e f g h"]),
        ("a b c d e f g h", ["a x y d z f q h"]),
        ("", ["anything"]),
    ]
    for quote, passages in cases:
        assert covered(quote, passages) == ref.covered(quote, passages), (quote, passages)
        assert covered(quote, passages, 0.6) == ref.covered(quote, passages, 0.6)


# --------------------------------------------------------------------------------------- passage-level positions
EVIDENCE = [
    {
        "n": 1,
        "bundle": 0,
        "text": "Leave Policy. Effective date: 1 January 2024.",
        "rerank_score": 0.1,
        "rerank_rank": 9,
    },
    {
        "n": 2,
        "bundle": 0,
        "text": "Full-time employees receive 25 days of paid annual leave.",
        "rerank_score": 0.9,
        "rerank_rank": 1,
    },
    {"n": 3, "bundle": 1, "text": "Sick leave is 12 days.", "rerank_score": 0.5, "rerank_rank": 2},
]


def test_passage_positions_are_the_passages_place_not_its_bundles() -> None:
    from evaluation.graders import at_prompt_edge, first_covering, rerank_top

    quote = "Full-time employees receive 25 days of paid annual leave"
    # the bundle is at the first edge (the grader of issue 44's 'best gold at an edge' counts it) ...
    assert best_gold_at_edge(quote, EVIDENCE)
    # ... but the passage is second of three: not at an edge
    assert first_covering(quote, EVIDENCE) == 2 and not at_prompt_edge(2, EVIDENCE)
    assert at_prompt_edge(1, EVIDENCE) and at_prompt_edge(3, EVIDENCE) and not at_prompt_edge(None, EVIDENCE)
    assert first_covering("not in the evidence at all", EVIDENCE) is None
    top = rerank_top(EVIDENCE)
    assert top is not None and top["n"] == 2
    assert rerank_top([{"n": 1, "rerank_score": None}]) is None


# --------------------------------------------------------------------------------------- answer text
@pytest.mark.parametrize(
    ("reason", "plain"),
    [
        ("no passage states an amount of money for what the question asks about", True),
        ('no passage scored high enough to answer "can I refund a gift card?"', True),
        ("no passage states a number of amounts for what the question asks about", False),
        ("no passage reached the threshold 0.0036 (best score 0.000758)", False),
        ("no evidence sentence states what was asked: 'how long does the lockout last?' (best 0.05)", False),
        ("answer_type: missing_unit", False),
    ],
)
def test_plain_reason(reason: str, plain: bool) -> None:
    from evaluation.graders import plain_reason

    assert plain_reason(reason) is plain


def answer(text: str, *, intents: list[str], addressed: list[bool], **extra: object) -> dict:
    checks = [
        {"index": i, "text": t, "addressed": a}
        for i, (t, a) in enumerate(zip(intents, addressed, strict=True))
    ]
    return {
        "answer": text,
        "abstained": False,
        "intents": [{"index": i, "text": t} for i, t in enumerate(intents)],
        "citations": [{"n": 1, "valid": True, "supported": True}],
        "claims": [{"verdict": "supported"}],
        "verified": all(addressed),
        "answer_check": {"complete": all(addressed), "intents": checks},
        **extra,
    }


def test_a_note_that_denies_what_the_answer_quotes_is_counted() -> None:
    from evaluation.graders import answer_text_faults

    two = ["What is the refund window", "can I refund a gift card?"]
    text = (
        "Customers may request a refund within 45 days. [1]\nGift cards are not eligible for a refund. [1]\n\n"
        'I could not find anything about: "can I refund a gift card?".'
    )
    faults = answer_text_faults(answer(text, intents=two, addressed=[True, False]))
    assert faults["contradicting_note"] and not faults["mislabelled_partial"]  # labelled partial, as it says
    honest = "Customers may request a refund within 45 days. [1]\n\n" + text.split("\n\n")[1]
    assert not any(answer_text_faults(answer(honest, intents=two, addressed=[True, False])).values())


def test_a_withheld_badge_is_not_a_partial_answer() -> None:
    from evaluation.graders import answer_text_faults
    from rag.traces.status import answer_status

    one = ["What should I do if I lose my company laptop?"]
    trace = answer("Report a lost laptop to the IT Service Desk. [1]", intents=one, addressed=[True])
    trace["answer_check"]["intents"][0]["supported"] = False  # the reader does not vouch for the quote
    trace["verified"] = False
    assert answer_status(trace) == "unconfirmed"
    assert not answer_text_faults(trace)["mislabelled_partial"]


def test_an_answer_opening_with_a_pointer_back_is_counted() -> None:
    from evaluation.graders import answer_text_faults

    one = ["What if I lose my laptop?"]
    text = "However, a second lost laptop within 12 months is reviewed. [1]\nReport it at once. [1]\nSources: [1]"
    assert answer_text_faults(answer(text, intents=one, addressed=[True]))["leading_back_reference"]
    fixed = "A lost laptop is replaced. [1]\n" + text
    assert not answer_text_faults(answer(fixed, intents=one, addressed=[True]))["leading_back_reference"]


def test_an_abstention_is_checked_for_its_reason_only() -> None:
    from evaluation.graders import answer_text_faults

    refused = {"answer": "I can't answer this.", "abstained": True, "abstain_reason": "a number of amounts"}
    assert answer_text_faults(refused) == {
        "contradicting_note": False,
        "mislabelled_partial": False,
        "leading_back_reference": False,
        "unplain_reason": True,
        "cut_dependency": False,
        "unaccounted_part": False,
    }


POLICY = (
    "2. General principles\n\nPersonal costs are never reimbursed, even when they arise on a business trip. "
    "Examples include in-room films, minibar items, gym fees and fines of any kind."
)


def _traced(text: str, **extra: object) -> dict:
    one = ["Can I expense a minibar?"]
    evidence = [
        {
            "n": 1,
            "chunk_id": "c1",
            "doc_id": "d",
            "title": "Expenses",
            "section": "Expenses > 2. General principles",
            "text": POLICY,
        }
    ]
    return answer(text, intents=one, addressed=[True], evidence=evidence, **extra)


def test_a_shown_sentence_cut_from_the_rule_it_depends_on_is_counted() -> None:
    from evaluation.graders import answer_text_faults, cut_dependencies

    cut = _traced(
        "Examples include in-room films, minibar items, gym fees and fines of any kind. [1]\nSources: [1]"
    )
    found = cut_dependencies(cut)
    assert [f["before"] for f in found] == [
        "Personal costs are never reimbursed, even when they arise on a business trip."
    ]
    assert answer_text_faults(cut)["cut_dependency"]
    whole = _traced(
        "General principles \u2014 Personal costs are never reimbursed, even when they arise on a business trip. "
        "Examples include in-room films, minibar items, gym fees and fines of any kind. [1]\nSources: [1]"
    )
    assert cut_dependencies(whole) == [] and not answer_text_faults(whole)["cut_dependency"]
    assert cut_dependencies({**cut, "abstained": True}) == []


def test_answer_words_leave_out_the_sources_line_and_markers() -> None:
    from evaluation.graders import answer_words

    assert answer_words({"answer": "Refunds take 45 days. [1]\nSources: [1], [2]", "abstained": False}) == 4
    assert answer_words({"answer": "I can't answer this.", "abstained": True}) == 0


def test_a_part_neither_answered_nor_named_is_counted() -> None:
    from evaluation.graders import unaccounted_parts

    two = ["What is the refund window", "can I refund a gift card?"]
    silent = answer(
        "Customers may request a refund within 45 days. [1]", intents=two, addressed=[True, False]
    )
    assert unaccounted_parts(silent) == ["can I refund a gift card?"]
    named = answer(
        silent["answer"] + '\n\nI could not find anything about: "can I refund a gift card?".',
        intents=two,
        addressed=[True, False],
    )
    assert unaccounted_parts(named) == []
    by_excerpt = answer(
        silent["answer"], intents=two, addressed=[True, False], excerpts=[{"intents": [0, 1]}]
    )
    assert unaccounted_parts(by_excerpt) == []


def test_a_follow_up_answer_that_only_repeats_the_previous_one_is_told() -> None:
    from evaluation.graders import repeats_previous

    first = "Sick leave \u2014 Employees receive up to 12 days of paid sick leave. [1]\nSources: [1]"
    again = {
        "answer": first,
        "abstained": False,
        "excerpts": [{"key": ["Employees receive up to 12 days of paid sick leave."]}],
    }
    assert repeats_previous(first, again)
    other = {"answer": "x", "abstained": False, "excerpts": [{"key": ["Parental leave is 18 weeks."]}]}
    assert not repeats_previous(first, other) and not repeats_previous(first, {**again, "abstained": True})
