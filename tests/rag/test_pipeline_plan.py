"""What one request runs with (rag.pipeline.plan_request): the request's options, else the settings."""

from __future__ import annotations

import pytest

from rag.config import load_settings
from rag.pipeline import PipelineOptions, Plan, plan_request

SETTINGS = load_settings(
    packing="edges", evidence_k=6, evidence_token_budget=1800, max_hops=1, generation_mode="quote_then_answer"
)


def test_without_options_the_settings_decide() -> None:
    assert plan_request(SETTINGS, PipelineOptions(), llm_available=True) == Plan(
        packing="edges",
        evidence_k=6,
        token_budget=1800,
        use_llm=True,
        max_hops=1,
        generation_mode="quote_then_answer",
    )


def test_options_override_the_settings() -> None:
    options = PipelineOptions(packing="best_first", evidence_k=3, token_budget=900, max_hops=0)
    plan = plan_request(SETTINGS, options, llm_available=True)
    assert (plan.packing, plan.evidence_k, plan.token_budget, plan.max_hops) == ("best_first", 3, 900, 0)


def test_zero_hops_is_an_override_but_a_zero_budget_is_not() -> None:
    # max_hops=0 turns hopping off; evidence_k / token_budget of 0 fall back to the settings, as before
    plan = plan_request(
        SETTINGS, PipelineOptions(evidence_k=0, token_budget=0, max_hops=0), llm_available=False
    )
    assert (plan.evidence_k, plan.token_budget, plan.max_hops) == (
        SETTINGS.evidence_k,
        SETTINGS.evidence_token_budget,
        0,
    )


@pytest.mark.parametrize(
    ("use_llm", "available", "expected"),
    [
        (None, True, True),
        (None, False, False),
        (True, True, True),
        (True, False, False),
        (False, True, False),
    ],
)
def test_the_llm_answers_only_when_there_is_one_and_the_options_allow_it(
    use_llm: bool | None, available: bool, expected: bool
) -> None:
    plan = plan_request(SETTINGS, PipelineOptions(use_llm=use_llm), llm_available=available)
    assert plan.use_llm is expected
    assert plan.generation_mode == ("quote_then_answer" if expected else "extractive")
