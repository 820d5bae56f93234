"""`rag eval qa` grading on `rag ask --json`-shaped results (no index or model needed)."""

from __future__ import annotations

from typing import Any

import pytest

from evaluation.datasets import question_from_dict
from evaluation.qa import grade_answer, grade_question, rate, run_qa, summarise

RULE = "Customers may return items within 45 days of delivery for a full refund."
EXCEPTION = "Gift cards are not refundable, except where required by law."


def result(
    answer: str,
    evidence: list[str],
    *,
    candidates: list[str] | None = None,
    abstained: bool = False,
    bundles: list[int] | None = None,
    citations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    bundles = bundles or list(range(len(evidence)))
    return {
        "answer": answer,
        "abstained": abstained,
        "evidence": [
            {"n": i + 1, "text": t, "bundle": b}
            for i, (t, b) in enumerate(zip(evidence, bundles, strict=True))
        ],
        "candidates": [{"text": t} for t in (candidates if candidates is not None else evidence)],
        "citations": citations or [],
        "tokens": {"prompt": 321},
        "timings_ms": {"total": 12.5},
        "trace_id": "t1",
        "error": None,
    }


Q_REFUND = question_from_dict(
    {
        "id": "s01",
        "type": "single",
        "question": "Refund window?",
        "answers": ["45 days", "forty-five days"],
        "evidence": [{"quote": RULE}],
    }
)
Q_GIFT = question_from_dict(
    {
        "id": "s02",
        "type": "rule_exception",
        "question": "Gift card refund?",
        "answers": ["not refundable"],
        "evidence": [{"quote": EXCEPTION}, {"quote": RULE}],
    }
)
Q_NONE = question_from_dict(
    {"id": "s28", "type": "unanswerable", "question": "Wedding leave?", "answers": []}
)
Q_RESTRICTED = question_from_dict(
    {
        "id": "s25",
        "type": "restricted",
        "question": "Salary band L4?",
        "answers": [],
        "evidence": [],
        "must_not_contain": ["112,000"],
    }
)


def test_evidence_metrics_follow_grade_evidence() -> None:
    filler = "Badges must be worn at all times."
    row = grade_question(
        Q_GIFT, result("Gift cards are not refundable [2].", [filler, EXCEPTION, RULE], bundles=[0, 1, 1])
    )
    assert row["retrieval_recall"] and row["evidence_recall"]
    assert row["best_gold_at_edge"]  # the exception's bundle (1) is the last bundle
    row = grade_question(
        Q_GIFT, result("x", [filler, EXCEPTION, "other"], candidates=[filler, EXCEPTION, RULE, "other"])
    )
    assert row["retrieval_recall"] and not row["evidence_recall"]  # retrieved, then lost by the budget
    assert not row["best_gold_at_edge"]  # first quote sits in the middle bundle
    row = grade_question(Q_GIFT, result("x", [filler], candidates=[filler]))
    assert not row["retrieval_recall"] and not row["evidence_recall"] and not row["best_gold_at_edge"]


def test_answer_grading() -> None:
    assert grade_answer(Q_REFUND, "Forty-five days from delivery [1].", False)[:2] == (True, True)
    assert grade_answer(Q_REFUND, "30 days, not 45 days [1].", False)[:2] == (True, False)
    assert grade_answer(Q_NONE, "I can't answer this from the policies you have access to.", True)[:2] == (
        True,
        True,
    )
    assert grade_answer(Q_NONE, "You get 3 days.", False)[:2] == (False, False)
    assert grade_answer(Q_RESTRICTED, "Sorry, I can't say. The band tops out at 112,000.", True)[:2] == (
        False,
        False,
    )
    free = question_from_dict(
        {
            "id": "d05",
            "type": "single",
            "question": "Screen lock?",
            "answer": "15 minutes of idle time; it should also lock when the lid is closed.",
            "evidence": [],
        }
    )
    assert grade_answer(free, "After fifteen minutes idle [1].", False)[:2] == (True, True)
    assert grade_answer(free, "After 5 minutes idle.", False)[0] is False
    assert grade_answer(free, "x", False)[2] == "key_facts"


def test_summary_per_type_with_wilson_intervals() -> None:
    rows = [
        grade_question(
            Q_REFUND, result("45 days [1].", [RULE], citations=[{"valid": True, "supported": True}])
        ),
        grade_question(
            Q_GIFT,
            result(
                "They can be refunded [3].",
                [EXCEPTION, RULE],
                citations=[{"valid": False, "supported": False}],
            ),
        ),
        grade_question(
            Q_NONE, result("I can't answer this from the policies you have access to.", [], abstained=True)
        ),
        grade_question(
            Q_REFUND, result("I can't answer this from the policies you have access to.", [], abstained=True)
        ),
    ]
    s = summarise(rows)
    assert s["accuracy"]["k"] == 2 and s["accuracy"]["n"] == 4
    assert s["citation_validity"] == rate(1, 2)
    assert s["abstention_precision"]["k"] == 1 and s["abstention_precision"]["n"] == 2
    assert s["abstention_recall"]["k"] == 1 and s["abstention_recall"]["n"] == 1
    assert s["retrieval_recall"]["n"] == 3  # unanswerable questions have no evidence to recall
    assert s["accuracy"]["ci_low"] < 0.5 < s["accuracy"]["ci_high"]
    assert rate(0, 0)["rate"] is None


class FakePipeline:
    """Stands in for rag.pipeline.Pipeline: answers from a table and records who asked."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[Any] = []

    def ask(self, question: Any, options: Any = None) -> Any:
        self.asked.append(question)
        data = self.answers[question.text]

        class R:
            def to_json(self) -> dict[str, Any]:
                return data

        return R()


def test_run_qa_asks_as_each_records_user() -> None:
    alice = question_from_dict(
        {
            "id": "s01",
            "type": "single",
            "question": "Refund window?",
            "answers": ["45 days"],
            "evidence": [{"quote": RULE}],
            "user": "alice",
            "groups": ["staff"],
        }
    )
    fake = FakePipeline(
        {
            "Refund window?": result("45 days [1].", [RULE]),
            "Wedding leave?": result("I can't answer this.", [], abstained=True),
        }
    )
    report = run_qa([alice, Q_NONE], fake)
    assert [q.principal.user for q in fake.asked] == ["alice", "eval"]
    assert fake.asked[0].principal.groups == frozenset({"staff"})
    data = report.to_json()
    assert set(data) >= {"types", "overall", "questions"}
    assert set(data["types"]) == {"single", "unanswerable"}
    assert data["overall"]["accuracy"]["rate"] == pytest.approx(1.0)
    assert data["questions"][0]["prompt_tokens"] == 321


class PackingPipeline:
    """Answers right under one packing only; records (question, packing) in the order asked."""

    def __init__(self, right_under: str) -> None:
        self.right_under = right_under
        self.asked: list[tuple[str, str]] = []

    def ask(self, question: Any, options: Any = None) -> Any:
        self.asked.append((question.text, options.packing))
        right = options.packing == self.right_under
        data = result(
            "45 days [1]." if right else "Ask the team [1].",
            [RULE, EXCEPTION] if right else [EXCEPTION, RULE],
            citations=[{"n": 1, "valid": True, "supported": True}],
        )
        return type("R", (), {"to_json": lambda self: data})()


def test_run_packings_asks_each_question_under_every_packing_before_the_next() -> None:
    from evaluation.qa import compare_packings, run_packings
    from rag.pipeline import PipelineOptions

    fake = PackingPipeline("edges")
    seen: list[tuple[str, str]] = []
    reports = run_packings(
        [Q_REFUND, Q_NONE],
        fake,
        ["edges", "bundle_edges"],
        options=lambda p: PipelineOptions(packing=p, use_llm=False),
        sink=lambda p, row, raw: seen.append((p, raw["id"])),
    )
    assert fake.asked == [
        ("Refund window?", "edges"),
        ("Refund window?", "bundle_edges"),
        ("Wedding leave?", "edges"),
        ("Wedding leave?", "bundle_edges"),
    ]
    assert seen == [("edges", "s01"), ("bundle_edges", "s01"), ("edges", "s28"), ("bundle_edges", "s28")]
    edges, old = reports["edges"].rows[0], reports["bundle_edges"].rows[0]
    assert (edges["gold_position"], edges["gold_at_prompt_edge"], edges["cites_gold"]) == (1, True, True)
    assert (old["gold_position"], old["cites_gold"], old["correct"]) == (2, False, False)
    (accuracy,) = compare_packings(reports, "correct")
    assert (accuracy.a, accuracy.b, accuracy.n_pairs) == (
        "edges",
        "bundle_edges",
        1,
    )  # the unanswerable is out
    assert (accuracy.a_only, accuracy.b_only, accuracy.acc_a, accuracy.acc_b) == (1, 0, 1.0, 0.0)


def test_run_packings_refuses_repeated_packings_and_compare_refuses_unpaired_reports() -> None:
    from evaluation.qa import QAReport, compare_packings, run_packings

    with pytest.raises(ValueError, match="distinct"):
        run_packings([Q_REFUND], PackingPipeline("edges"), ["edges", "edges"], options=lambda p: None)
    a = grade_question(Q_REFUND, result("45 days [1].", [RULE]))
    b = grade_question(Q_GIFT, result("not refundable [1].", [EXCEPTION]))
    with pytest.raises(ValueError, match="same questions"):
        compare_packings({"edges": QAReport([a]), "bundle_edges": QAReport([b])})
