from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag.stages.retrieve import merge_intents, rrf_fuse
from tests.stages.factories import make_chunk

CHUNKS = {cid: make_chunk(f"text of {cid}", chunk_id=cid) for cid in "abcdefgh"}


def test_rrf_sums_reciprocal_ranks_over_both_legs() -> None:
    fused = rrf_fuse([("a", 9.0), ("b", 7.0), ("c", 5.0)], [("c", 0.9), ("a", 0.8)], CHUNKS)
    assert [c.chunk_id for c in fused] == ["a", "c", "b"]
    by_id = {c.chunk_id: c for c in fused}
    assert by_id["a"].fused_score == pytest.approx(1 / 61 + 1 / 62)
    assert by_id["c"].fused_score == pytest.approx(1 / 63 + 1 / 61)
    assert by_id["b"].fused_score == pytest.approx(1 / 62)


def test_rrf_keeps_every_legs_rank_and_score() -> None:
    fused = {c.chunk_id: c for c in rrf_fuse([("a", 9.0), ("b", 7.0)], [("b", 0.9)], CHUNKS)}
    a, b = fused["a"], fused["b"]
    assert (a.bm25_rank, a.bm25_score, a.dense_rank, a.dense_score) == (1, 9.0, None, None)
    assert (b.bm25_rank, b.bm25_score, b.dense_rank, b.dense_score) == (2, 7.0, 1, 0.9)
    assert [c.fused_rank for c in sorted(fused.values(), key=lambda c: c.fused_rank or 0)] == [1, 2]


def test_rrf_breaks_ties_on_chunk_id() -> None:
    fused = rrf_fuse([("d", 1.0)], [("b", 1.0)], CHUNKS)
    assert [c.chunk_id for c in fused] == ["b", "d"]
    assert fused[0].fused_score == fused[1].fused_score


def test_rrf_records_the_intent() -> None:
    fused = rrf_fuse([("a", 1.0)], [], CHUNKS, intent=2)
    assert fused[0].intents == (2,)


def test_rrf_k_changes_the_weighting() -> None:
    fused = rrf_fuse([("a", 1.0)], [], CHUNKS, k=0)
    assert fused[0].fused_score == pytest.approx(1.0)
    with pytest.raises(ValueError):
        rrf_fuse([], [], CHUNKS, k=-1)


def test_rrf_skips_unknown_chunks_but_keeps_original_ranks() -> None:
    fused = rrf_fuse([("zzz", 5.0), ("a", 4.0)], [], CHUNKS)
    assert [c.chunk_id for c in fused] == ["a"]
    assert fused[0].bm25_rank == 2


def test_rrf_counts_a_repeated_hit_once_at_its_best_rank() -> None:
    fused = rrf_fuse([("a", 5.0), ("a", 1.0)], [], CHUNKS)
    assert len(fused) == 1 and fused[0].bm25_rank == 1 and fused[0].bm25_score == 5.0


def test_rrf_of_nothing_is_empty() -> None:
    assert rrf_fuse([], [], CHUNKS) == []


def test_merge_keeps_best_ranks_max_score_and_union_of_intents() -> None:
    first = rrf_fuse([("a", 9.0), ("b", 8.0)], [("b", 0.7)], CHUNKS, intent=0)
    second = rrf_fuse([("c", 6.0), ("a", 5.0)], [("a", 0.9)], CHUNKS, intent=1)
    merged = {c.chunk_id: c for c in merge_intents([first, second])}
    a = merged["a"]
    assert a.bm25_rank == 1 and a.bm25_score == 9.0  # best lexical rank came from intent 0
    assert a.dense_rank == 1 and a.dense_score == 0.9  # dense rank only from intent 1
    assert a.intents == (0, 1)
    assert a.fused_score == pytest.approx(max(1 / 61, 1 / 62 + 1 / 61))
    assert merged["c"].intents == (1,)


def test_merge_reranks_by_fused_score() -> None:
    first = rrf_fuse([("a", 1.0), ("b", 1.0), ("c", 1.0)], [], CHUNKS, intent=0)
    second = rrf_fuse([("c", 1.0)], [("c", 1.0)], CHUNKS, intent=1)
    merged = merge_intents([first, second])
    assert [c.chunk_id for c in merged] == ["c", "a", "b"]
    assert [c.fused_rank for c in merged] == [1, 2, 3]


def test_merge_of_one_list_is_that_list() -> None:
    only = rrf_fuse([("a", 1.0), ("b", 1.0)], [("b", 1.0)], CHUNKS)
    assert merge_intents([only]) == only
    assert merge_intents([]) == []


hits = st.lists(st.sampled_from(sorted(CHUNKS)), unique=True, max_size=8).map(
    lambda ids: [(cid, float(len(ids) - i)) for i, cid in enumerate(ids)]
)


@given(hits, hits)
def test_rrf_output_is_a_ranked_union(
    lexical: list[tuple[str, float]], dense: list[tuple[str, float]]
) -> None:
    fused = rrf_fuse(lexical, dense, CHUNKS)
    assert {c.chunk_id for c in fused} == {cid for cid, _ in lexical} | {cid for cid, _ in dense}
    assert [c.fused_rank for c in fused] == list(range(1, len(fused) + 1))
    keys = [(-c.fused_score, c.chunk_id) for c in fused]
    assert keys == sorted(keys)
    for c in fused:
        assert (c.bm25_rank is None) == (c.bm25_score is None)
        assert c.bm25_rank is not None or c.dense_rank is not None


def test_rrf_weighs_the_lexical_leg() -> None:
    # a chunk only BM25 ranks first loses to one only the dense leg ranks second once BM25 weighs half
    plain = rrf_fuse([("a", 9.0)], [("z", 0.9), ("b", 0.8)], CHUNKS | {"z": make_chunk("z", chunk_id="z")})
    assert [c.chunk_id for c in plain][:2] == ["a", "z"]
    half = rrf_fuse(
        [("a", 9.0)],
        [("z", 0.9), ("b", 0.8)],
        CHUNKS | {"z": make_chunk("z", chunk_id="z")},
        lexical_weight=0.5,
    )
    assert [c.chunk_id for c in half] == ["z", "b", "a"]
    assert {c.chunk_id: c for c in half}["a"].fused_score == pytest.approx(0.5 / 61)
