"""Excerpts: each point of the extractive answer is a contiguous run of one passage, the chosen sentence with what
its meaning depends on (rag/models/dependency.py, rag/stages/extractive.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest

from evaluation.training.dependency import load_labels
from rag.models.dependency import DependencyModel, dependency_features, is_list_item
from rag.stages.citations import check_citations
from rag.stages.extractive import extractive_answer
from rag.types import Evidence, Intent
from tests.stages.factories import make_candidate, make_chunk

# A model whose verdicts a reader can predict: a sentence after a lead-in's colon, a list item, and one opening
# with "However", "This", "Examples" or "Otherwise" depends on the sentence before it; nothing else does.
RULES = DependencyModel(
    {
        "prev:colon": 8.0,
        "cur:item": 8.0,
        "w1:however": 8.0,
        "w1:this": 8.0,
        "w1:examples": 8.0,
        "w1:otherwise": 8.0,
    },
    intercept=-4.0,
    bar=0.5,
)


def ev(n: int, text: str, **fields: object) -> Evidence:
    return Evidence(n, make_candidate(make_chunk(text, ordinal=n, chunk_id=f"doc-a:{n}", **fields)), n)


def scorer(best: str, second: str = "") -> Callable[[str, Sequence[str]], list[float]]:
    def score(query: str, sentences: Sequence[str]) -> list[float]:
        return [
            1.0 if s.startswith(best) else 0.9 if second and s.startswith(second) else 0.0 for s in sentences
        ]

    return score


def body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("Sources:")]


EXPENSES = (
    "2. General principles\n\n"
    "Spend company money as carefully as you would spend your own.\n\n"
    "Personal costs are never reimbursed, even when they arise on a business trip. Examples include in-room "
    "films, minibar items, gym fees and fines of any kind. Laundry is reimbursed only on trips of five nights."
)


def test_an_example_is_quoted_with_the_rule_it_belongs_to() -> None:
    evidence = [ev(1, EXPENSES, title="Expense Policy", section="Expense Policy > 2. General principles")]
    out = extractive_answer(
        "Can I expense a minibar?", [], evidence, score=scorer("Examples"), dependency=RULES
    )
    assert body(out.text) == [
        "General principles \u2014 Personal costs are never reimbursed, even when they arise on a business trip. "
        "Examples include in-room films, minibar items, gym fees and fines of any kind. [1]"
    ]
    (excerpt,) = out.excerpts
    assert excerpt.key == ("Examples include in-room films, minibar items, gym fees and fines of any kind.",)
    assert excerpt.heading == "General principles" and excerpt.n == 1 and excerpt.intents == (0,)
    text = evidence[0].candidate.chunk.text
    assert text[excerpt.span[0] : excerpt.span[1]].startswith("Personal costs are never reimbursed")
    assert text[excerpt.span[0] : excerpt.span[1]].endswith("fines of any kind.")
    assert all(c.valid and c.supported for c in check_citations(out.text, evidence))
    # without the model the chosen sentence stands alone, still under its heading
    alone = extractive_answer("Can I expense a minibar?", [], evidence, score=scorer("Examples"))
    assert body(alone.text) == [
        "General principles \u2014 Examples include in-room films, minibar items, gym fees and fines of any kind. [1]"
    ]


def test_a_rule_is_quoted_with_the_exception_that_qualifies_it_and_no_more() -> None:
    evidence = [
        ev(
            1,
            "The company replaces a lost laptop. However, a second loss within 12 months is reviewed by your "
            "manager. Laptops are refreshed every three years.",
        )
    ]
    for best in ("The company", "However"):
        out = extractive_answer(
            "What if I lose my laptop?", [], evidence, score=scorer(best), dependency=RULES
        )
        assert body(out.text) == [
            "Refund Policy \u2014 The company replaces a lost laptop. However, a second loss within 12 months is "
            "reviewed by your manager. [1]"
        ], best


def test_a_lead_in_is_quoted_with_the_items_it_introduces() -> None:
    chunk = make_chunk(
        "Lost devices. Follow these steps:\n- Call the Service Desk.\n- Change your password.\n"
        "The desk is open all day.",
        ordinal=3,
        title="Security",
    )
    evidence = [Evidence(1, make_candidate(chunk, rerank=0.9), 1)]
    for best in ("Follow", "- Change"):  # the lead-in, or an item: the excerpt is the same
        out = extractive_answer(
            "What do I do?", [], evidence, score=scorer(best), min_score=0.5, dependency=RULES
        )
        (excerpt,) = out.excerpts
        assert excerpt.sentences == (
            "Follow these steps:",
            "- Call the Service Desk.",
            "- Change your password.",
        )
        assert "The desk is open all day." not in out.text


def test_excerpts_of_one_passage_merge() -> None:
    text = (
        "Birth parents receive 18 weeks at full pay. Other parents receive 10 weeks at full pay. Leave can be "
        "taken in three blocks. Tell the People Team 8 weeks ahead. Pay continues as normal. Keeping-in-touch "
        "days are optional. Parental leave does not reduce annual leave."
    )
    evidence = [ev(1, text)]
    near = extractive_answer(
        "parental leave", [], evidence, score=scorer("Birth", "Leave can"), dependency=RULES
    )
    assert len(near.excerpts) == 1  # one sentence apart: joined with the one between
    assert near.excerpts[0].sentences[1] == "Other parents receive 10 weeks at full pay."
    far = extractive_answer(
        "parental leave", [], evidence, score=scorer("Birth", "Parental leave"), dependency=RULES
    )
    assert (
        len(far.excerpts) == 1 and "\u2026" in far.excerpts[0].sentences
    )  # far apart: one point, an ellipsis
    assert len(body(far.text)) == 1


def test_a_near_tie_from_another_section_that_answers_nothing_asked_is_left_out() -> None:
    evidence = [
        ev(
            1,
            "Birth parents receive 18 weeks of parental leave at full pay.",
            section="Leave > Parental leave",
        ),
        ev(2, "Employees may ask for up to 4 weeks of unpaid leave.", section="Leave > Unpaid leave"),
    ]

    def score(query: str, sentences: Sequence[str]) -> list[float]:
        return [0.9 if "Birth" in s else 0.55 for s in sentences]

    out = extractive_answer(
        "How many weeks of parental leave do I get?", [], evidence, score=score, min_score=0.1
    )
    assert "unpaid" not in out.text
    # a near-equal from another section is still quoted
    close = extractive_answer(
        "How many weeks of leave do I get?",
        [],
        evidence,
        score=lambda q, s: [0.9, 0.85][: len(s)],
        min_score=0.1,
    )
    assert "unpaid" in close.text


def test_a_part_answered_by_another_part_s_excerpt_is_answered_there() -> None:
    evidence = [ev(1, "Refunds are paid within 10 days to the original card.")]
    intents = [Intent(0, "How fast is a refund paid"), Intent(1, "where does the refund go")]
    out = extractive_answer("q", intents, evidence, score=lambda q, s: [1.0] * len(s), dependency=RULES)
    assert [x.intents for x in out.excerpts] == [(0, 1)]
    assert "does not cover" not in out.text


def test_a_table_row_is_quoted_with_the_statement_its_table_belongs_to() -> None:
    table = (
        "Equipment is replaced on a fixed cycle that depends on your role:\n\n"
        "Role Laptop refresh (years) Monitor refresh (years) Software engineer 3 5\n"
        "Designer 3 4\nWarehouse supervisor 4 7\nAll other roles 4 6"
    )
    out = extractive_answer(
        "monitor refresh for a warehouse supervisor",
        [],
        [ev(1, table)],
        score=scorer("Warehouse"),
        dependency=RULES,
    )
    (excerpt,) = out.excerpts
    assert excerpt.sentences[0] == "Equipment is replaced on a fixed cycle that depends on your role:"
    assert excerpt.sentences[1].startswith("Warehouse supervisor")
    assert len(excerpt.sentences) == 2  # the other rows stay out


def test_a_first_sentence_that_depends_on_the_passage_before_comes_after_it() -> None:
    first = make_chunk("Refunds are paid to the original payment method.", ordinal=1, next_id="doc-a:2")
    second = make_chunk(
        "Otherwise, a store credit is issued.", ordinal=2, chunk_id="doc-a:2", prev_id="doc-a:1"
    )
    evidence = [Evidence(1, make_candidate(second), 0), Evidence(2, make_candidate(first), 0)]
    out = extractive_answer(
        "How is a refund paid?", [], evidence, score=scorer("Otherwise"), dependency=RULES
    )
    assert body(out.text) == [
        "Refund Policy \u2014 Refunds are paid to the original payment method. [2]",
        "Refund Policy \u2014 Otherwise, a store credit is issued. [1]",
    ]
    assert out.excerpts[0].key == ()  # context, not the reader's choice


def test_a_sentence_under_a_heading_is_shown_under_it() -> None:
    chunk = make_chunk("Lost laptops\n\nThis must be reported within 24 hours.", section="Lost laptops")
    out = extractive_answer(
        "lost laptop", [], [Evidence(1, make_candidate(chunk), 1)], score=scorer("This"), dependency=RULES
    )
    assert body(out.text) == ["Lost laptops \u2014 This must be reported within 24 hours. [1]"]


def test_features_read_structure_and_opening_words() -> None:
    f = dependency_features("Follow these steps:", "- Call the desk.")
    assert f["prev:colon"] == 1.0 and f["cur:item"] == 1.0 and f["item_after_colon"] == 1.0
    assert f["w1:call"] == 1.0 and f["prev:sentence"] == 1.0
    hidden = dependency_features("ignored", "However, it is late.", kind="hidden")
    assert hidden["prev:hidden"] == 1.0 and "shared" not in hidden and hidden["w1:however"] == 1.0
    assert is_list_item("3) Test backups") and not is_list_item("3 days are allowed")
    with pytest.raises(ValueError):
        dependency_features("a", "b", kind="other")


def test_the_model_round_trips() -> None:
    again = DependencyModel.from_json(json.loads(json.dumps(RULES.to_json())))
    assert again.probability("Steps:", "- Go.") == pytest.approx(
        RULES.probability("Steps:", "- Go."), abs=1e-6
    )
    assert RULES.depends("Steps:", "- Go.") and not RULES.depends("Rule one.", "Rule two.")


def test_the_shipped_model_keeps_the_minibar_with_its_rule() -> None:
    model = DependencyModel.load()
    assert model.depends(
        "Personal costs are never reimbursed, even when they arise on a business trip.",
        "Examples include in-room films, minibar items, gym fees and fines of any kind.",
    )
    assert not model.depends(
        "Spend company money as carefully as you would spend your own.",
        "Personal costs are never reimbursed, even when they arise on a business trip.",
    )


def test_the_labels_are_well_formed() -> None:
    rows = load_labels()
    assert len(rows) >= 500 and {r["source"] for r in rows} == {"pool", "answer"}
    assert all(r["kind"] in ("sentence", "heading") and r["label"] in (0, 1) for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
