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
