"""Claim-level verification end to end: the sample corpus, the real pipeline and a scripted OpenAI-compatible
server that answers what the packaged 1.5B model answered in issue 20 ('Yes, we can refund the gift card')."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from rag.config import load_settings
from rag.llm.client import LLMClient
from rag.pipeline import Pipeline, Question
from rag.types import Principal
from tests.llm.fake_openai import FakeOpenAI, Reply

ALICE = Principal("alice", frozenset({"staff"}))
GIFT_CARD = "A customer bought a gift card 10 days ago and wants their money back. Can we refund it?"
RETURNS = "How many days does a customer have to return an item for a full refund?"
ISSUE_ANSWER = (
    "Yes, we can refund the gift card. The customer's money will be returned within 7 business days of the "
    "returned item arriving at our warehouse.\nSources: [1], [2]"
)
NINETY = "Customers can return items within 90 days of delivery for a full refund [1].\nSources: [1]"


def _passage_n(user: str, needle: str) -> int:
    """The [n] of the evidence passage holding ``needle`` in a prompt."""
    for block in re.split(r"\n(?=\[\d+\] )", user):
        m = re.match(r"\[(\d+)\] ", block)
        if m and needle in " ".join(block.split()):
            return int(m.group(1))
    raise AssertionError(f"{needle!r} is not in the prompt's evidence")


def _ask(sample_data_dir: Path, embedder: Any, fake: FakeOpenAI, question: str) -> dict[str, Any]:
    settings = load_settings(data_dir=sample_data_dir, llm_base_url=fake.url, llm_model="fake-model")
    llm = LLMClient(fake.url, "fake-model", max_retries=0)
    pipeline = Pipeline(settings, embedder=embedder, llm=llm)
    return pipeline.ask(Question(question, ALICE, as_of=date(2026, 6, 1))).to_json()


def assert_badge(r: dict[str, Any]) -> None:
    """ "Citations checked" (``verified``) is every claim supported and, per part of the question, a quoted
    sentence the reader vouches for (docs/reader.md): the claim check alone never shows it."""
    vouched = all(i.get("supported") is not False for i in r["answer_check"]["intents"])
    assert r["verified"] == (r["verification"]["verified"] and r["answer_check"]["complete"] and vouched)


def _stage(r: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s["detail"] for s in r["stages"] if s["name"] == name)


def test_the_issue_answer_is_never_shown_as_checked(sample_data_dir: Path, embedder: Any) -> None:
    with FakeOpenAI(default=Reply(text=ISSUE_ANSWER)) as fake:  # the repair call gets the same answer again
        r = _ask(sample_data_dir, embedder, fake, GIFT_CARD)
        assert len(fake.chat_requests) == 2, "one answer and exactly one repair call"
        repair_prompt = fake.chat_requests[1].user
    assert "Yes, we can refund the gift card." in repair_prompt and "contradicted" in repair_prompt
    detail = _stage(r, "claims")
    assert detail["model_answer"].startswith("Yes, we can refund the gift card.")  # the model's own text
    verdicts = {c["text"]: c["verdict"] for c in detail["claims"]}
    assert verdicts["Yes, we can refund the gift card."] == "contradicted"
    first = next(c for c in detail["claims"] if c["text"].startswith("Yes"))
    assert "polarity" in first["reason"] and "not refundable" in first["evidence_sentence"]
    assert not any("Sources" in c["text"] for c in detail["claims"]), "a sources list is not a claim"
    assert detail["repair"]["verified"] is False and detail["fallback"] == "extractive"
    # the user sees quoted evidence and why, never the contradicted claim
    assert "Yes, we can refund" not in r["answer"]
    assert "not refundable" in r["answer"] and "was not shown" in r["answer"]
    assert r["verification"]["notice"] in r["answer"]
    assert r["verification"]["verified"] is True and all(c["verdict"] == "supported" for c in r["claims"])
    assert_badge(r)


def test_a_repair_that_fixes_the_claim_is_served_and_traced(sample_data_dir: Path, embedder: Any) -> None:
    def fixed(body: dict[str, Any]) -> Reply:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        n = _passage_n(user, "Gift cards are not refundable")
        return Reply(
            text=f"No. Gift cards are not refundable, except where required by law [{n}].\nSources: [{n}]"
        )

    with FakeOpenAI() as fake:
        fake.queue(Reply(text=ISSUE_ANSWER), fixed)
        r = _ask(sample_data_dir, embedder, fake, GIFT_CARD)
    assert r["verification"]["verified"] is True and r["answer"].startswith(
        "No. Gift cards are not refundable"
    )
    assert_badge(r)
    detail = _stage(r, "claims")
    assert detail["repaired"] is True and detail["repair"]["failed"][0]["verdict"] == "contradicted"
    assert "contradicted" in detail["verdicts"] and detail["verdicts"]["contradicted"] >= 1
    assert r["claims"] and all(c["verdict"] == "supported" for c in r["claims"])


def test_a_changed_number_is_contradicted_not_checked(sample_data_dir: Path, embedder: Any) -> None:
    def ninety(body: dict[str, Any]) -> Reply:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        n = _passage_n(user, "return items within 45 days of delivery")
        return Reply(text=NINETY.replace("[1]", f"[{n}]"))

    with FakeOpenAI(default=ninety) as fake:
        r = _ask(sample_data_dir, embedder, fake, RETURNS)
    detail = _stage(r, "claims")
    first = detail["claims"][0]
    assert (
        first["verdict"] == "contradicted" and "90 days" in first["reason"] and "45 days" in first["reason"]
    )
    # the old citation check passed it: 90 also occurs in that passage ("between 46 and 90 days")
    assert "90 days" not in r["answer"].split("\n\n")[0]
    assert all(c["verdict"] == "supported" for c in r["claims"]) == r["verification"]["verified"]
    assert_badge(r)
    assert "was not shown" in r["answer"] and "45 days" in r["answer"]


def test_extractive_answers_are_verified(sample_data_dir: Path, embedder: Any) -> None:
    pipeline = Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder)
    r = pipeline.ask(Question(RETURNS, ALICE, as_of=date(2026, 6, 1))).to_json()
    assert r["claims"] and r["verification"]["verified"] is True, r["claims"]
    assert_badge(r)
    assert "repair" not in _stage(r, "claims")


@pytest.mark.parametrize("question", ["Can I bring my dog to the office?"])
def test_an_abstention_is_not_verified(sample_data_dir: Path, embedder: Any, question: str) -> None:
    pipeline = Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder)
    r = pipeline.ask(Question(question, ALICE, as_of=date(2026, 6, 1))).to_json()
    assert r["abstained"] and r["claims"] == [] and r["verified"] is False
