"""Extractive answers to table questions over the sample corpus: the row asked about, and nothing beside it."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from rag.config import load_settings
from rag.pipeline import Pipeline, Question
from rag.types import Principal

HANA = Principal("hana", frozenset({"staff", "hr"}))


@pytest.fixture(scope="module")
def pipeline(sample_data_dir: Path, embedder) -> Pipeline:  # type: ignore[no-untyped-def]
    return Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder)


def test_salary_band_question_answers_with_the_senior_engineer_row(pipeline: Pipeline) -> None:
    r = pipeline.ask(
        Question("What is the salary band for a senior engineer?", HANA, as_of=date(2026, 6, 1))
    ).to_json()
    claims = [line for line in r["answer"].splitlines() if not line.startswith("Sources:")]
    # the row, read with its column names, is what the reader chose; the statement its figures belong to (annual
    # base salary in US dollars) comes with it
    first = r["excerpts"][0]
    assert first["key"] and first["key"][0].startswith("L5 Senior software engineer"), r["answer"]
    assert "105,000" in first["key"][0] and "147,000" in first["key"][0]
    assert "annual base salary in US dollars" in claims[0], r["answer"]
    assert not any("sets the salary band" in c or "1 July" in c for c in claims), r["answer"]
    assert all(c["valid"] and c["supported"] for c in r["citations"]), r["citations"]
    assert all(i["addressed"] for i in r["answer_check"]["intents"])
    # the badge also needs the reader to vouch for the quoted row (docs/reader.md)
    assert r["answer_check"]["complete"] == all(i["supported"] for i in r["answer_check"]["intents"])
    assert any(s["name"] == "answer_check" for s in r["stages"])


def test_a_compound_answer_carries_no_filler(pipeline: Pipeline) -> None:
    q = "Who needs to approve a $3,000 expense claim, and how quickly is it paid after approval?"
    r = pipeline.ask(Question(q, Principal("alice", frozenset({"staff"})), as_of=date(2026, 6, 1))).to_json()
    claims = [line for line in r["answer"].splitlines() if not line.startswith("Sources:")]
    assert any("director" in c for c in claims) and any("12 business days" in c for c in claims), r["answer"]
    # was a third sentence: "No claim is ever approved automatically ..."; both parts' sentences share a passage,
    # so they are one excerpt, each part's sentence its key
    assert "approved automatically" not in r["answer"], r["answer"]
    keys = [k for x in r["excerpts"] for k in x["key"]]
    assert len(keys) == 2 and sorted(i for x in r["excerpts"] for i in x["intents"]) == [0, 1], r["excerpts"]
