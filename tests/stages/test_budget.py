from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag.stages.budget import apply_budget
from rag.types import Candidate, Intent
from tests.stages.factories import make_candidate

ONE = [Intent(0, "q")]
TWO = [Intent(0, "refund window"), Intent(1, "gift cards")]


def cands(n: int, *, tokens: int = 10, intents: tuple[int, ...] = (0,)) -> list[Candidate]:
    return [
        make_candidate(f"passage {i}", ordinal=i, rerank=float(n - i), intents=intents, n_tokens=tokens)
        for i in range(n)
    ]


def ids(selected: list[Candidate]) -> list[str]:
    return [c.chunk_id for c in selected]


def test_keeps_the_top_k_in_rank_order() -> None:
    ranked = cands(10)
    selected, dropped = apply_budget(ranked, ONE, k=3, token_budget=1000)
    assert selected == ranked[:3]
    assert [(d.chunk_id, d.reason, d.stage) for d in dropped] == [
        (c.chunk_id, "over_budget_k", "budget") for c in ranked[3:]
    ]


def test_respects_the_token_budget_and_lets_a_smaller_passage_fit() -> None:
    ranked = [
        make_candidate("a", ordinal=0, rerank=3.0, n_tokens=50),
        make_candidate("b", ordinal=1, rerank=2.0, n_tokens=80),
        make_candidate("c", ordinal=2, rerank=1.0, n_tokens=30),
    ]
    selected, dropped = apply_budget(ranked, ONE, k=5, token_budget=100)
    assert ids(selected) == ["doc-a:0", "doc-a:2"]
    assert [(d.chunk_id, d.reason) for d in dropped] == [("doc-a:1", "over_budget_tokens")]


def test_every_intent_with_evidence_is_covered_even_below_the_top_k() -> None:
    first_half = cands(8, intents=(0,))
    gift_card = make_candidate("Gift cards are not refundable.", ordinal=99, rerank=-1.0, intents=(1,))
    selected, dropped = apply_budget([*first_half, gift_card], TWO, k=4, token_budget=1000)
    assert gift_card in selected
    assert ids(selected) == ids(first_half[:3]) + [gift_card.chunk_id]  # still returned in rank order
    assert len(selected) == 4
    assert {d.reason for d in dropped} == {"over_budget_k"}


def test_a_candidate_found_by_both_intents_covers_both() -> None:
    both = make_candidate("both", ordinal=0, rerank=5.0, intents=(0, 1))
    rest = [make_candidate(f"r{i}", ordinal=i + 1, rerank=4.0 - i, intents=(0,)) for i in range(3)]
    selected, _ = apply_budget([both, *rest], TWO, k=2, token_budget=1000)
    assert ids(selected) == [both.chunk_id, rest[0].chunk_id]


def test_reservation_prefers_a_candidate_that_clears_min_score() -> None:
    weak = make_candidate("weak", ordinal=0, rerank=0.1, intents=(1,))
    strong = make_candidate("strong", ordinal=1, rerank=0.6, intents=(1,))
    top = make_candidate("top", ordinal=2, rerank=0.9, intents=(0,))
    # ranked order given by the caller; the weak one ranks before the strong one for intent 1 here
    selected, _ = apply_budget([top, weak, strong], TWO, k=2, token_budget=1000, min_score=0.5)
    assert ids(selected) == [top.chunk_id, strong.chunk_id]


def test_reservation_falls_back_to_the_best_candidate_for_an_intent() -> None:
    top = make_candidate("top", ordinal=0, rerank=0.9, intents=(0,))
    weak = make_candidate("weak", ordinal=1, rerank=0.1, intents=(1,))
    selected, dropped = apply_budget([top, weak], TWO, k=5, token_budget=1000, min_score=0.5)
    assert ids(selected) == [top.chunk_id, weak.chunk_id]
    assert dropped == []


def test_below_threshold_candidates_are_dropped_when_filling() -> None:
    ranked = [
        make_candidate("a", ordinal=0, rerank=0.9),
        make_candidate("b", ordinal=1, rerank=0.2),
        make_candidate("c", ordinal=2, rerank=0.7),
    ]
    selected, dropped = apply_budget(ranked, ONE, k=5, token_budget=1000, min_score=0.5)
    assert ids(selected) == ["doc-a:0", "doc-a:2"]
    assert [(d.chunk_id, d.reason) for d in dropped] == [("doc-a:1", "below_threshold")]


def test_min_score_falls_back_to_the_fused_score_before_reranking() -> None:
    ranked = [make_candidate("a", ordinal=0, fused=0.03), make_candidate("b", ordinal=1, fused=0.01)]
    selected, dropped = apply_budget(ranked, ONE, k=5, token_budget=1000, min_score=0.02)
    assert ids(selected) == ["doc-a:0"] and dropped[0].reason == "below_threshold"


def test_a_reserved_passage_must_fit_the_tokens_left() -> None:
    big = make_candidate("big", ordinal=0, rerank=2.0, intents=(1,), n_tokens=500)
    small = make_candidate("small", ordinal=1, rerank=1.0, intents=(1,), n_tokens=50)
    top = make_candidate("top", ordinal=2, rerank=3.0, intents=(0,), n_tokens=50)
    selected, dropped = apply_budget([top, big, small], TWO, k=3, token_budget=120)
    assert ids(selected) == [top.chunk_id, small.chunk_id]
    assert [(d.chunk_id, d.reason) for d in dropped] == [(big.chunk_id, "over_budget_tokens")]


def test_more_intents_than_k_keeps_the_first_intents() -> None:
    three = [Intent(0, "a"), Intent(1, "b"), Intent(2, "c")]
    ranked = [make_candidate(f"i{i}", ordinal=i, rerank=float(-i), intents=(i,)) for i in range(3)]
    selected, dropped = apply_budget(ranked, three, k=2, token_budget=1000)
    assert ids(selected) == ["doc-a:0", "doc-a:1"]
    assert dropped[0].reason == "over_budget_k"


def test_untagged_candidates_count_for_the_whole_question() -> None:
    ranked = [make_candidate("a", ordinal=0, rerank=1.0, intents=())]
    selected, _ = apply_budget(ranked, ONE, k=1, token_budget=100)
    assert selected == ranked


def test_zero_budget_selects_nothing() -> None:
    selected, dropped = apply_budget(cands(3), ONE, k=0, token_budget=1000)
    assert selected == [] and [d.reason for d in dropped] == ["over_budget_k"] * 3
    with pytest.raises(ValueError):
        apply_budget(cands(3), ONE, k=-1, token_budget=10)


candidate_specs = st.lists(
    st.tuples(st.integers(1, 120), st.sets(st.integers(0, 3), max_size=2), st.floats(-5, 5)), max_size=25
)


@given(candidate_specs, st.integers(0, 10), st.integers(0, 600), st.one_of(st.none(), st.floats(-5, 5)))
def test_budget_invariants(
    specs: list[tuple[int, set[int], float]], k: int, token_budget: int, min_score: float | None
) -> None:
    ranked = [
        make_candidate(f"p{i}", ordinal=i, n_tokens=n, intents=tuple(sorted(its)), rerank=score)
        for i, (n, its, score) in enumerate(specs)
    ]
    intents = [Intent(i, f"intent {i}") for i in range(4)]
    selected, dropped = apply_budget(ranked, intents, k=k, token_budget=token_budget, min_score=min_score)

    assert len(selected) <= k
    assert sum(c.chunk.n_tokens for c in selected) <= token_budget
    # a partition of the input, selection in rank order
    assert sorted(ids(selected) + [d.chunk_id for d in dropped]) == sorted(ids(ranked))
    positions = [ranked.index(c) for c in selected]
    assert positions == sorted(positions)
    assert all(d.stage == "budget" for d in dropped)
    assert {d.reason for d in dropped} <= {"over_budget_k", "over_budget_tokens", "below_threshold"}
    if min_score is None:
        assert all(d.reason != "below_threshold" for d in dropped)


@given(st.lists(st.sets(st.integers(0, 3), min_size=1, max_size=2), max_size=25), st.integers(4, 10))
def test_every_intent_with_evidence_is_covered_when_the_budget_allows(tagged: list[set[int]], k: int) -> None:
    ranked = [
        make_candidate(f"p{i}", ordinal=i, n_tokens=10, intents=tuple(sorted(its)), rerank=float(-i))
        for i, its in enumerate(tagged)
    ]
    intents = [Intent(i, f"intent {i}") for i in range(4)]
    selected, _ = apply_budget(ranked, intents, k=k, token_budget=40)
    with_evidence = {i for its in tagged for i in its}
    covered = {i for c in selected for i in c.intents}
    assert with_evidence <= covered


def test_a_chain_link_replaces_the_weakest_passage_outside_the_chain() -> None:
    ranked = cands(5)
    parent, child = ranked[1], ranked[3]  # the link ranks below the budget
    selected, dropped = apply_budget(
        ranked, ONE, k=2, token_budget=1000, links={child.chunk_id: parent.chunk_id}
    )
    assert ids(selected) == [parent.chunk_id, child.chunk_id], "both links, not the first plus a near-copy"
    assert (ranked[0].chunk_id, f"replaced_by_chain_link:{child.chunk_id}") in [
        (d.chunk_id, d.reason) for d in dropped
    ]
    assert child.chunk_id not in {d.chunk_id for d in dropped}


def test_a_link_whose_parent_was_not_selected_changes_nothing() -> None:
    ranked = cands(5)
    plain, _ = apply_budget(ranked, ONE, k=2, token_budget=1000)
    linked, _ = apply_budget(
        ranked, ONE, k=2, token_budget=1000, links={ranked[4].chunk_id: ranked[3].chunk_id}
    )
    assert linked == plain
