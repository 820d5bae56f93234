"""The LLM subset's measurement: its rows and table read from real pipeline results (the sample corpus and a
scripted OpenAI-compatible server), and the fixed subset is the deal of the test split it claims to be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluation.datasets import default_questions_path, load_questions
from evaluation.llm_subset import SUBSET_PATH, deal, row, subset, summarise
from evaluation.qa import run_qa
from evaluation.splits import split_ids
from evaluation.suite import Paths
from rag.config import load_settings
from rag.llm.client import LLMClient
from rag.pipeline import Pipeline, PipelineOptions
from tests.llm.fake_openai import FakeOpenAI, Reply

SHARED = Path(__file__).resolve().parents[3] / "shared"
ISSUE_ANSWER = (
    "Yes, we can refund the gift card. The customer's money will be returned within 7 business days of the "
    "returned item arriving at our warehouse.\nSources: [1], [2]"
)


def _sample(ids: tuple[str, ...]) -> list[Any]:
    by_id = {q.id: q for q in load_questions(default_questions_path())}
    return [by_id[i] for i in ids]


def _reply(body: dict[str, Any]) -> Reply:
    user = body["messages"][-1]["content"]
    if "gift card 10 days ago" in user:  # s02, and its repair call: the issue's wrong answer both times
        return Reply(text=ISSUE_ANSWER)
    # the right answer, its marker on the passage that holds it
    for block in user.split("\n["):
        if "within 45 days of delivery" in " ".join(block.split()):
            n = block.split("]", 1)[0].lstrip("[")
            return Reply(
                text=f"Customers may return items within 45 days of delivery for a full refund [{n}]."
            )
    return Reply(text=ISSUE_ANSWER)


def test_rows_and_table_from_real_results(sample_data_dir: Path, embedder: Any) -> None:
    questions = _sample(("s01", "s02"))
    with FakeOpenAI(default=_reply) as fake:
        settings = load_settings(data_dir=sample_data_dir, llm_base_url=fake.url, llm_model="fake-model")
        pipeline = Pipeline(settings, embedder=embedder, llm=LLMClient(fake.url, "fake-model", max_retries=0))
        results = run_qa(questions, pipeline, options=PipelineOptions(use_llm=True)).results
    right, wrong = (row("sample", q, r) for q, r in zip(questions, results, strict=True))
    assert right["model_correct"] and right["claim_check_passed"] and right["claims_inline_marker"] == 1
    assert not wrong["model_correct"]  # "Yes, we can refund the gift card"
    assert not wrong["claim_check_passed"] and wrong["verdicts"]["contradicted"] >= 1
    assert wrong["fallback"] and not wrong["repaired"]  # the repair call gets the same wrong answer
    s = summarise([right, wrong])
    assert s["model_accuracy"]["k"] == 1 and s["model_accuracy"]["n"] == 2
    assert s["after_claim_check"]["wrong_caught"] == {
        **s["after_claim_check"]["wrong_caught"],
        "k": 1,
        "n": 1,
    }
    assert s["after_claim_check"]["false_flags"]["k"] == 0
    assert s["repair_calls"] == 1 and s["claims"] == right["claims"] + wrong["claims"]


def test_subset_is_the_test_split_dealt_over_question_types() -> None:
    spec = json.loads(SUBSET_PATH.read_text())
    assert sum(len(v) for v in spec["suites"].values()) == 40
    sample = load_questions(default_questions_path())
    dealt = deal(sample, split_ids("sample", "test"))
    assert spec["suites"]["sample"] == dealt[: len(spec["suites"]["sample"])]
    test_ids = split_ids("sample", "test")
    assert all(i in test_ids for i in spec["suites"]["sample"])
    if not (SHARED / "data").is_dir():
        pytest.skip(f"../shared is absent ({SHARED}): the dev and gitlab questions come from there")
    paths = Paths(SHARED, Path("/nonexistent"))
    qs = subset(paths)
    for suite in ("dev", "gitlab"):
        dealt = deal(load_questions(paths.questions(suite)), split_ids(suite, "test"))
        assert [q.id for q in qs[suite]] == dealt[: len(qs[suite])]
        assert not any(q.expects_abstention for q in qs[suite])
