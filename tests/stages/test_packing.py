from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag.stages.packing import edge_pack, edges_order, number_evidence
from rag.types import Bundle
from tests.stages.factories import make_candidate, make_chunk


def bundles(n: int) -> list[Bundle]:
    """n single-passage bundles ranked best first: bundle_id == rank index (0 = best)."""
    return [
        Bundle(
            i, (make_candidate(f"passage {i}", doc_id=f"d{i}", rerank=float(n - i)),), "single", float(n - i)
        )
        for i in range(n)
    ]


def ranks(packed: list[Bundle]) -> list[int]:
    """1-based rank of the bundle at each position."""
    return [b.bundle_id + 1 for b in packed]


def naive_alternating(items: list[int]) -> list[int]:
    """The trap: alternate insert(0, x) / append(x) over the ranked list."""
    out: list[int] = []
    for i, item in enumerate(items):
        if i % 2 == 0:
            out.insert(0, item)
        else:
            out.append(item)
    return out


def reverse_then_alternate(items: list[int]) -> list[int]:
    """A popular library's reordering: reverse, then alternate insert(0)/append. Best lands last for even n."""
    out: list[int] = []
    for i, item in enumerate(reversed(items)):
        if i % 2 == 1:
            out.append(item)
        else:
            out.insert(0, item)
    return out


def test_five_ranks_become_a_c_e_d_b() -> None:
    assert ranks(edge_pack(bundles(5))) == [1, 3, 5, 4, 2]


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, []),
        (1, [1]),
        (2, [1, 2]),
        (3, [1, 3, 2]),
        (4, [1, 3, 4, 2]),
        (6, [1, 3, 5, 6, 4, 2]),
        (7, [1, 3, 5, 7, 6, 4, 2]),
    ],
)
def test_edges_for_small_counts(n: int, expected: list[int]) -> None:
    assert ranks(edge_pack(bundles(n))) == expected


def test_the_naive_alternating_loop_buries_the_best_and_ours_does_not() -> None:
    assert naive_alternating([1, 2, 3, 4, 5]) == [5, 3, 1, 2, 4]
    assert ranks(edge_pack(bundles(5))) != naive_alternating([1, 2, 3, 4, 5])
    assert ranks(edge_pack(bundles(5)))[0] == 1


@pytest.mark.parametrize("n", [2, 4, 6, 10])
def test_the_library_behaviour_puts_the_best_last_for_even_counts_and_ours_puts_it_first(n: int) -> None:
    library = reverse_then_alternate(list(range(1, n + 1)))
    assert library[-1] == 1
    ours = ranks(edge_pack(bundles(n)))
    assert ours[0] == 1 and ours[-1] == 2


def test_other_strategies() -> None:
    ranked = bundles(4)
    assert ranks(edge_pack(ranked, "best_first")) == [1, 2, 3, 4]
    assert ranks(edge_pack(ranked, "best_last")) == [4, 3, 2, 1]


def test_document_order_sorts_by_source_then_first_ordinal() -> None:
    def bundle(i: int, doc: str, ordinal: int) -> Bundle:
        chunk = make_chunk(f"t{i}", doc_id=doc, ordinal=ordinal, source=f"{doc}.pdf")
        return Bundle(i, (make_candidate(chunk),), "single", 0.0)

    ranked = [bundle(0, "b", 5), bundle(1, "a", 9), bundle(2, "b", 1), bundle(3, "a", 2)]
    assert [b.bundle_id for b in edge_pack(ranked, "document_order")] == [3, 1, 2, 0]


def test_unknown_strategy_raises() -> None:
    with pytest.raises(ValueError, match="unknown packing strategy"):
        edge_pack(bundles(3), "middle_out")


def test_packing_never_reorders_members_of_a_bundle() -> None:
    steps = tuple(make_candidate(f"step {i}", doc_id="howto", ordinal=i) for i in range(3))
    chain = Bundle(1, steps, "continuation", 1.0)
    packed = edge_pack([bundles(1)[0], chain, *bundles(4)[2:]])
    assert next(b for b in packed if b.bundle_id == 1).members == steps


def test_number_evidence_flattens_in_final_order_and_numbers_from_one() -> None:
    steps = tuple(make_candidate(f"step {i}", doc_id="howto", ordinal=i) for i in range(2))
    packed = [
        Bundle(0, (make_candidate("best", doc_id="x"),), "single", 3.0),
        Bundle(1, steps, "continuation", 2.0),
    ]
    evidence = number_evidence(edge_pack(packed))
    assert [(e.n, e.candidate.chunk.text, e.bundle_id) for e in evidence] == [
        (1, "best", 0),
        (2, "step 0", 1),
        (3, "step 1", 1),
    ]
    assert number_evidence([]) == []


@given(st.integers(0, 50))
def test_edge_pack_properties(n: int) -> None:
    check_edge_properties(n)


def test_edge_pack_properties_for_every_count_up_to_fifty() -> None:
    for n in range(51):
        check_edge_properties(n)


def check_edge_properties(n: int) -> None:
    got = ranks(edge_pack(bundles(n)))
    assert sorted(got) == list(range(1, n + 1))  # a permutation
    if n >= 1:
        assert got[0] == 1
    if n >= 2:
        assert got[-1] == 2
    mid = (n - 1) / 2
    left = [r for p, r in enumerate(got) if p <= mid]
    right = [r for p, r in enumerate(got) if p >= mid][::-1]
    assert left == sorted(left) and right == sorted(right)  # ranks worsen toward the middle from both sides
    depth = [min(p, n - 1 - p) for p in range(n)]
    for p in range(n):
        for q in range(n):
            if depth[p] < depth[q]:
                assert got[p] < got[q]  # U-shape: nearer an edge is always better


@given(st.integers(0, 50))
def test_edges_order_matches_the_documented_rule(n: int) -> None:
    order = edges_order(n)
    front = [i for i in range(n) if i % 2 == 0]
    back = [i for i in range(n) if i % 2 == 1]
    assert order[: len(front)] == front
    assert order[len(front) :] == back[::-1]


@given(
    st.lists(st.integers(1, 4), max_size=12),
    st.sampled_from(["edges", "best_first", "best_last", "document_order"]),
)
def test_numbering_is_a_bijection_onto_all_members(sizes: list[int], strategy: str) -> None:
    packed_in = [
        Bundle(
            i, tuple(make_candidate(f"b{i}m{j}", doc_id=f"d{i}", ordinal=j) for j in range(size)), "x", 0.0
        )
        for i, size in enumerate(sizes)
    ]
    evidence = number_evidence(edge_pack(packed_in, strategy))
    assert [e.n for e in evidence] == list(range(1, sum(sizes) + 1))
    assert sorted(e.candidate.chunk_id for e in evidence) == sorted(
        m.chunk_id for b in packed_in for m in b.members
    )
