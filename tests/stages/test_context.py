"""Section context (rag/stages/context.py): a weaker passage follows its section's best into the budget."""

from __future__ import annotations

import math

import pytest

from rag.stages.context import context_scores, rank_by_section_context
from rag.types import Candidate
from tests.stages.factories import make_candidate


def cand(score: float | None, section: str, ordinal: int, doc_id: str = "handbook") -> Candidate:
    return make_candidate(
        f"{section} passage {ordinal}", rerank=score, doc_id=doc_id, section=section, ordinal=ordinal
    )


def ids(cands: list[Candidate]) -> list[str]:
    return [c.chunk_id for c in cands]


def test_a_weaker_passage_of_the_best_section_ranks_above_a_stronger_stray() -> None:
    best = cand(0.60, "Leave > Parental leave", 3)
    stray = cand(0.10, "Travel > Booking", 8)
    rule = cand(0.05, "Leave > Parental leave", 4)  # the section's rule, scored low on its own
    out = rank_by_section_context([best, stray, rule], weight=1.5)
    assert ids(out) == ids([best, rule, stray])


def test_the_boost_is_the_best_sibling_above_over_the_best_score() -> None:
    best = cand(0.60, "A", 0)
    other = cand(0.30, "B", 1)
    low = cand(0.05, "B", 2)
    scores = context_scores([best, other, low], weight=2.0)
    assert scores is not None
    logit = [math.log(p / (1 - p)) for p in (0.60, 0.30, 0.05)]
    assert scores == pytest.approx([logit[0], logit[1], logit[2] + 2.0 * 0.30 / 0.60])


def test_a_sections_best_passage_is_not_raised_by_weaker_siblings() -> None:
    # a long section of many chunks does not outrank a better section for being long
    single = cand(0.50, "Short", 0, doc_id="a")
    long_best = cand(0.40, "Long", 0, doc_id="b")
    tail = [cand(0.39 - i / 100, "Long", i + 1, doc_id="b") for i in range(5)]
    out = rank_by_section_context([single, long_best, *tail], weight=1.5)
    assert out.index(single) < out.index(long_best)
    scores = context_scores([single, long_best, *tail], weight=1.5)
    assert scores is not None and scores[1] == pytest.approx(math.log(0.40 / 0.60))  # its own score, no boost


def test_same_section_name_in_another_document_is_not_a_sibling() -> None:
    best = cand(0.60, "Overview", 0, doc_id="travel")
    stray = cand(0.10, "Budget", 1, doc_id="travel")
    namesake = cand(0.05, "Overview", 0, doc_id="security")
    assert ids(rank_by_section_context([best, stray, namesake], weight=1.5)) == ids([best, stray, namesake])


def test_window_limits_siblings_to_nearby_chunks() -> None:
    best = cand(0.60, "Directive", 0)
    stray = cand(0.10, "Other", 50)
    far = cand(0.05, "Directive", 40)
    near = cand(0.04, "Directive", 2)
    out = rank_by_section_context([best, stray, far, near], weight=1.5, window=3)
    assert ids(out) == ids([best, near, stray, far])


def test_scores_and_ranks_stay_the_rerankers() -> None:
    best, stray, rule = cand(0.60, "A", 0), cand(0.10, "B", 0), cand(0.05, "A", 1)
    out = rank_by_section_context([best, stray, rule], weight=1.5)
    assert [c.rerank_score for c in out] == [0.60, 0.05, 0.10]


def test_off_or_without_rerank_scores_the_order_is_unchanged() -> None:
    best, stray, rule = cand(0.60, "A", 0), cand(0.10, "B", 0), cand(0.05, "A", 1)
    assert ids(rank_by_section_context([best, stray, rule], weight=0)) == ids([best, stray, rule])
    unscored = [cand(None, "A", 0), cand(None, "B", 0), cand(None, "A", 1)]
    assert context_scores(unscored, weight=1.5) is None
    assert ids(rank_by_section_context(unscored, weight=1.5)) == ids(unscored)
    assert rank_by_section_context([], weight=1.5) == []
