"""Section context in the query path: the budget takes a weaker passage of the best passage's section before a
stronger stray, the ranking itself stays the reranker's, and the trace says what moved."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path

import pytest

from rag.config import load_settings
from rag.models.rerankers import NoReranker
from rag.pipeline import Pipeline, PipelineOptions, Question
from rag.types import Candidate, Principal

HANDBOOK = """# Staff Handbook

## Parental leave

Parental leave overview: every employee who becomes a parent by birth or adoption may take parental leave.

Tell your manager in writing at least eight weeks before the parental leave starts, with the expected date.

Pay during parental leave: the first twelve weeks are paid in full, the rest at half pay.

## Annual leave

Annual leave is twenty-five days a year, booked in the leave planner and approved by your manager.
"""

# P(relevant) by the words a passage holds: the section's opening scores best, its pay rule low on its own
SCORES = {"overview": 0.9, "twenty-five": 0.3, "twelve weeks": 0.2}


class Scripted:
    """A reranker whose probabilities are fixed per passage, so the test reads the budget, not a model."""

    name = "scripted"
    abstain_threshold = 0.0

    def rerank(self, question: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        def p(c: Candidate) -> float:
            return next((v for k, v in SCORES.items() if k in c.chunk.text), 0.01)

        ranked = sorted(NoReranker().rerank(question, candidates), key=lambda c: -p(c))
        return [c.with_(rerank_score=p(c), rerank_rank=i) for i, c in enumerate(ranked, start=1)]

    def support(self, sentence: str, passage: str) -> float | None:
        return None


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:  # type: ignore[no-untyped-def]
    from ingest.indexer import ingest

    root = tmp_path_factory.mktemp("context")
    (root / "handbook.md").write_text(HANDBOOK)
    settings = load_settings(
        data_dir=root / "data", chunk_target_tokens=20, chunk_max_tokens=30, chunk_min_tokens=8
    )
    assert ingest([str(root / "handbook.md")], settings, embedder=embedder).ok
    return root / "data"


def ask(data_dir: Path, embedder, **settings: object) -> dict:  # type: ignore[no-untyped-def, type-arg]
    s = load_settings(data_dir=data_dir, evidence_k=2, max_hops=0, ablate="bundling", **settings)
    pipeline = Pipeline(s, embedder=embedder, reranker=Scripted())
    question = Question("Is parental leave paid?", Principal("ann", frozenset()), as_of=date(2026, 6, 1))
    return pipeline.ask(question, PipelineOptions()).to_json()


def texts(result: dict) -> str:  # type: ignore[type-arg]
    return " ".join(e["text"] for e in result["evidence"])


def test_the_budget_follows_the_best_section_but_the_ranking_stays_the_rerankers(
    data_dir: Path,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    on = ask(data_dir, embedder)
    assert "twelve weeks" in texts(on) and "twenty-five" not in texts(on)
    assert [c["rerank_rank"] for c in on["candidates"]] == sorted(c["rerank_rank"] for c in on["candidates"])
    detail = next(s["detail"] for s in on["stages"] if s["name"] == "context")
    pay = next(e["chunk_id"] for e in on["evidence"] if "twelve weeks" in e["text"])
    assert {"chunk_id": pay, "from": 3, "to": 2} in detail["raised"] and detail["weight"] == 1.5

    off = ask(data_dir, embedder, section_context_weight=0)
    assert "twenty-five" in texts(off) and "twelve weeks" not in texts(off)
    assert "context" not in [s["name"] for s in off["stages"]]
