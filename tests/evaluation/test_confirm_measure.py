"""The measurement of the LLM's word on the badge (evaluation/confirm_measure.py) serves what the query path
would: the same decision function, the badge only where every asked part was confirmed at the bar."""

from __future__ import annotations

from typing import Any

from evaluation.confirm_measure import at_bar, badge_in_reach, confirm_result, heading_of
from rag.types import Generated, Prompt

QUOTE = "Parental leave is 16 weeks at full pay."


class Yes:
    model, max_tokens = "yes-model", 3

    def __init__(self) -> None:
        self.prompts: list[Prompt] = []

    def complete(
        self, prompt: Prompt, *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> Generated:
        self.prompts.append(prompt)
        return Generated("yes", self.model)


def _result(support: float, *, verified: bool = True) -> dict[str, Any]:
    check = {"index": 0, "text": "How long is parental leave?", "addressed": True, "support": support}
    return {
        "abstained": False,
        "verified": False,
        "citations": [{"n": 1, "valid": True, "supported": True}],
        "verification": {"verified": verified},
        "evidence": [{"n": 1, "title": "Leave", "section": "Parental", "text": f"Intro. {QUOTE} More."}],
        "answer_check": {"complete": False, "intents": [{**check, "supported": False, "quote": QUOTE}]},
    }


def test_a_confirmed_part_grants_the_badge_only_at_or_below_its_support() -> None:
    llm = Yes()
    done = confirm_result(_result(0.3), llm, 0.0)
    assert [a["confirmed"] for a in done["asked"]] == [True] and done["asked"][0]["support"] == 0.3
    assert "From: Leave > Parental" in llm.prompts[0].user
    assert at_bar(done, 0.2)["verified"] and at_bar(done, 0.2)["answer_check"]["complete"]
    assert not at_bar(done, 0.4)["verified"]


def test_out_of_reach_nothing_is_asked() -> None:
    llm = Yes()
    for result in (_result(0.3, verified=False), {**_result(0.3), "citations": []}):
        assert not badge_in_reach(result)
        assert confirm_result(result, llm, 0.0)["asked"] == [] and llm.prompts == []
    assert confirm_result(_result(0.01), llm, 0.05)["asked"] == []  # below the bar asked at


def test_the_heading_is_the_passage_the_quote_comes_from() -> None:
    evidence = _result(0.3)["evidence"]
    assert heading_of(QUOTE, evidence) == "Leave > Parental" and heading_of("elsewhere", evidence) == ""
