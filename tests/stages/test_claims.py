"""The claim checker (rag/stages/claims.py): splitting, verdicts, and what flips meaning while keeping words."""

from __future__ import annotations

import re

import pytest

from rag.stages.claims import (
    add_missing_markers,
    check_claims,
    conflicts,
    negated,
    quantities,
    split_claims,
    verified,
)
from rag.types import Evidence
from tests.stages.factories import make_candidate, make_chunk

RULES = (
    "Customers may return items within 45 days of delivery for a full refund. Items returned between 46 and 90 "
    "days after delivery are accepted for store credit only. Refunds to cards are issued within 7 business days "
    "of the returned item arriving at our warehouse."
)
GIFT = "Gift cards are not refundable, except where required by law. A lost gift card is replaced only with a receipt."
TRAVEL = (
    "Using your own car for business trips is reimbursed at $0.70 per mile. Submit Form EXP-7 within 30 days."
)
EVIDENCE = [
    Evidence(n, make_candidate(make_chunk(t, ordinal=n)), n) for n, t in enumerate((RULES, GIFT, TRAVEL), 1)
]
ISSUE = (
    "Yes, we can refund the gift card. The customer's money will be returned within 7 business days of the "
    "returned item arriving at our warehouse.\nSources: [1], [2]"
)


def verdicts(answer: str) -> list[tuple[str, int | None]]:
    return [(c.verdict, c.n) for c in check_claims(answer, EVIDENCE)]


def test_a_sources_line_is_not_a_claim() -> None:
    claims = split_claims(ISSUE)
    assert [c.text for c in claims] == [
        "Yes, we can refund the gift card.",
        "The customer's money will be returned within 7 business days of the returned item arriving at our "
        "warehouse.",
    ]
    assert all(c.cited == () for c in claims)
    assert split_claims("Sources: [1], [2]") == []


def test_the_issue_answer_is_contradicted_and_not_verified() -> None:
    checks = check_claims(ISSUE, EVIDENCE)
    assert [(c.verdict, c.n) for c in checks] == [("contradicted", 2), ("supported", 1)]
    assert "polarity" in checks[0].reason and checks[0].evidence_sentence.startswith("Gift cards are not")
    assert checks[1].attributed  # uncited, given the passage that holds it
    assert not verified(checks)


def test_a_cited_negation_of_its_passage_is_contradicted() -> None:
    assert verdicts("Yes, we can refund the gift card [2].") == [("contradicted", 2)]
    assert verdicts("No, gift cards cannot be refunded [2].") == [("supported", 2)]
    assert verdicts("Gift cards are non-refundable [2].") == [("supported", 2)]


def test_a_claim_about_the_exception_may_take_its_side() -> None:
    assert verdicts("Gift cards can be refunded where the law requires it [2].") == [("supported", 2)]


def test_a_changed_number_is_contradicted_even_when_it_occurs_elsewhere_in_the_passage() -> None:
    # 90 occurs in passage 1 ("between 46 and 90 days"): the old passage-level number test passed this claim
    [check] = check_claims(
        "Customers can return items within 90 days of delivery for a full refund [1].", EVIDENCE
    )
    assert check.verdict == "contradicted" and "'90 days'" in check.reason and "'45 days'" in check.reason


def test_units_comparators_and_ids() -> None:
    assert verdicts("Your own car is reimbursed at $0.70 per kilometre [3].")[0][0] == "contradicted"
    assert verdicts("Submit Form EXP-8 within 30 days [3].")[0][0] == "contradicted"
    assert (
        verdicts(
            "Refunds to cards are issued within 7 calendar days of the item arriving at our warehouse [1]."
        )[0][0]
        == "contradicted"
    )
    assert verdicts("Submit Form EXP-7 within 30 days [3].") == [("supported", 3)]


def test_paraphrases_with_the_same_facts_are_supported() -> None:
    answer = (
        "You have forty-five days from delivery to return an item for a full refund [1]. "
        "Driving your own car on a business trip pays $0.70 a mile [3]."
    )
    assert verdicts(answer) == [("supported", 1), ("supported", 3)]


def test_an_uncited_claim_no_passage_holds_is_uncited_and_a_wrong_citation_unsupported() -> None:
    assert verdicts("Parking at the head office is free for visitors.") == [("uncited", None)]
    assert verdicts("Parking at the head office is free for visitors [1].")[0][0] == "unsupported"
    assert verdicts("Gift cards are not refundable [9].")[0][0] == "unsupported"  # [9] is no passage


def test_missing_markers_are_added_only_where_a_passage_holds_the_claim() -> None:
    answer = "Gift cards are not refundable, except where required by law. Parking is free for visitors."
    text, added = add_missing_markers(answer, check_claims(answer, EVIDENCE))
    assert (
        text
        == "Gift cards are not refundable, except where required by law [2]. Parking is free for visitors."
    )
    assert added == [{"sentence": "Gift cards are not refundable, except where required by law.", "to": 2}]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$1,200 a year", [(1200.0, "$/year")]),
        ("forty-five days", [(45.0, "day")]),
        ("15% restocking fee", [(15.0, "%")]),
        ("7 business days", [(7.0, "day")]),
        ("Form EXP-7 and band L4", []),
        ("3 days per week", [(3.0, "day/week")]),
    ],
)
def test_quantities(text: str, expected: list[tuple[float, str]]) -> None:
    assert [(q.value, q.unit) for q in quantities(text)] == expected


def test_negation_cues() -> None:
    assert negated("Gift cards are not refundable") and negated("Gift cards can't be refunded")
    assert negated("non-refundable") and not negated("Gift cards are refundable")
    assert conflicts("The fee applies.", "The fee applies.") == ()


@pytest.mark.parametrize(
    "text",
    [
        "Submit the form no later than 30 days before the move.",
        "Claims are paid not more than 5 days after approval.",
        "You may work no fewer than 20 hours a week.",
    ],
)
def test_a_bound_is_not_a_denial(text: str) -> None:
    assert not negated(text)
    assert negated(
        text.replace("Submit", "Do not submit")
        .replace("are paid", "are never paid")
        .replace("may", "may not")
    )


def test_a_deadline_restated_with_a_bound_does_not_contradict_its_passage() -> None:
    passage = "This form should be completed no later than 30 days before your relocation date."
    assert conflicts("Complete the form no later than 30 days before you relocate.", passage) == ()
    assert "polarity" in " ".join(conflicts("Do not complete the form before you relocate.", passage))


def test_the_prompt_asks_for_a_marker_after_every_sentence_without_example_ids() -> None:
    from rag.stages.prompt import build_prompt

    user = build_prompt("How long is the refund window?", EVIDENCE).user
    instructions = user[user.index("Instructions:") :]
    assert "every sentence needs one, a Sources line alone is not enough" in instructions
    assert not re.search(r"\[\d+\]", instructions), "a small model copies example ids"


def test_the_fallback_notice_names_the_first_contradiction_and_counts_the_failures() -> None:
    from rag.stages.claims import failed, fallback_notice

    checks = check_claims(ISSUE, EVIDENCE)
    bad = failed(checks)
    assert [c.verdict for c in bad] == ["contradicted"]
    assert fallback_notice(bad) == (
        "Note: the language model's answer was not shown: 1 of its claims contradict the evidence "
        f"({bad[0].reason}), also after one repair. The sentences above are quoted from the evidence instead."
    )


def test_the_fallback_notice_for_unsupported_claims_gives_no_reason() -> None:
    from rag.stages.claims import failed, fallback_notice

    bad = failed(
        check_claims("Parking on site is free for all visitors. Pets may come to the office.", EVIDENCE)
    )
    assert len(bad) == 2 and all(c.verdict != "contradicted" for c in bad)
    assert fallback_notice(bad) == (
        "Note: the language model's answer was not shown: 2 of its claims are not supported by the evidence, "
        "also after one repair. The sentences above are quoted from the evidence instead."
    )
