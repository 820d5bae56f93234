from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag.stages.pack import STRATEGIES, edge_pack, edges_order, number_evidence, states_nothing
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


def test_members_no_score_tells_apart_are_never_reordered() -> None:
    steps = tuple(make_candidate(f"step {i}", doc_id="howto", ordinal=i) for i in range(3))
    chain = Bundle(1, steps, "continuation", 1.0)
    packed = edge_pack([bundles(1)[0], chain, *bundles(4)[2:]])
    assert packed[-1].bundle_id == 1  # the last edge
    assert packed[-1].members == steps


def member_bundle(bundle_id: int, scores: list[float], doc: str) -> Bundle:
    members = tuple(
        make_candidate(f"{doc} {i}", doc_id=doc, ordinal=i, rerank=score) for i, score in enumerate(scores)
    )
    return Bundle(bundle_id, members, "adjacent", max(scores))


def texts(bundle: Bundle) -> list[str]:
    return [m.chunk.text for m in bundle.members]


def test_the_edge_bundles_put_their_best_passage_at_the_edge_and_the_rest_in_document_order() -> None:
    first = member_bundle(0, [0.2, 0.9, 0.5], "a")  # A B C, B best
    middle = member_bundle(1, [0.1, 0.3, 0.2], "m")
    last = member_bundle(2, [0.4, 0.8, 0.6], "z")
    packed = edge_pack([first, last, middle])
    assert [texts(b) for b in packed] == [
        ["a 1", "a 0", "a 2"],  # B A C: the best first, the others in document order
        ["m 0", "m 1", "m 2"],  # the middle keeps document order
        ["z 0", "z 2", "z 1"],  # A C B: the best last
    ]
    evidence = number_evidence(packed)
    assert evidence[0].candidate.rerank_score == 0.9 and evidence[-1].candidate.rerank_score == 0.8


def test_bundle_edges_places_bundles_as_edges_does_but_keeps_every_bundle_in_document_order() -> None:
    first = member_bundle(0, [0.2, 0.9, 0.5], "a")
    middle = member_bundle(1, [0.1, 0.3, 0.2], "m")
    last = member_bundle(2, [0.4, 0.8, 0.6], "z")
    old = edge_pack([first, last, middle], "bundle_edges")
    assert [b.bundle_id for b in old] == [b.bundle_id for b in edge_pack([first, last, middle])]
    assert [texts(b) for b in old] == [["a 0", "a 1", "a 2"], ["m 0", "m 1", "m 2"], ["z 0", "z 1", "z 2"]]


def test_a_passage_that_states_nothing_never_leads() -> None:
    heading = make_candidate(
        "Leave Policy\n\nEffective date: 1 January 2024. Policy owner: People Team.",
        title="Leave Policy",
        section="Leave Policy",
        doc_id="leave",
        ordinal=0,
        rerank=0.9,
    )
    rule = make_candidate(
        "Full-time employees receive 25 days of paid annual leave.",
        title="Leave Policy",
        section="Leave Policy > 2. Annual leave",
        doc_id="leave",
        ordinal=1,
        rerank=0.5,
    )
    assert states_nothing(heading.chunk) and not states_nothing(rule.chunk)
    packed = edge_pack([Bundle(0, (heading, rule), "adjacent", 0.9), *bundles(3)[1:]])
    assert number_evidence(packed)[0].candidate is rule
    # a bundle of headings alone is not put at an edge while another bundle can be
    only_heading = Bundle(0, (heading,), "single", 0.9)
    packed = edge_pack([only_heading, *bundles(4)[1:]])
    assert only_heading not in (packed[0], packed[-1])


@pytest.mark.parametrize(
    ("text", "nothing"),
    [
        ("GITLAB HANDBOOK\n360 Feedback\n\n360 Feedback", True),  # running header and title
        ("IT Help FAQ\n\nLast updated: 1 March 2025. Owner: IT Service Desk.", True),  # metadata fields
        ("Note: claims must be filed within 30 days.", False),  # a label, but a rule after it
        ("Effective date: 1 July 2023. This policy replaces the 2020 policy.", False),  # a statement
        ("3. Standard returns\n\nCustomers may return items within 45 days.", False),
    ],
)
def test_what_states_nothing(text: str, nothing: bool) -> None:
    chunk = make_chunk(text, title="360 Feedback", section="360 Feedback > GITLAB HANDBOOK > IT Help FAQ")
    assert states_nothing(chunk) is nothing


@given(st.lists(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4), min_size=1, max_size=10))
def test_the_best_passage_is_first_and_the_last_bundles_best_last(scores: list[list[float]]) -> None:
    ranked_in = sorted((member_bundle(i, s, f"d{i}") for i, s in enumerate(scores)), key=lambda b: -b.score)
    evidence = number_evidence(edge_pack(ranked_in))
    best = max(m.rerank_score or 0.0 for b in ranked_in for m in b.members)
    assert evidence[0].candidate.rerank_score == best
    if len(ranked_in) > 1:
        assert evidence[-1].candidate.rerank_score == ranked_in[1].score


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
    st.sampled_from(STRATEGIES),
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
