"""Place bundles in the prompt, and number the passages in their final order.

Models use the edges of a long context best (Liu et al., "Lost in the Middle"), so by default the strongest
bundle goes first, the second-strongest last and the weakest in the middle. Members of a bundle stay
together and keep their document order: their order carries meaning.
"""

from __future__ import annotations

from collections.abc import Sequence

from rag.types import Bundle, Evidence

STRATEGIES = ("edges", "best_first", "best_last", "document_order")


def edges_order(n: int) -> list[int]:
    """Rank indices in edge order: ranks 0, 2, 4, ... fill from the front, ranks 1, 3, 5, ... from the back.

    ``edges_order(5) == [0, 2, 4, 3, 1]`` (A B C D E -> A C E D B); the best is first and the second-best last
    for every n >= 2, odd or even.
    """
    return list(range(0, n, 2)) + list(range(1, n, 2))[::-1]


def _document_key(bundle: Bundle) -> tuple[str, str, int]:
    if not bundle.members:
        return ("", "", -1)
    first = bundle.members[0].chunk
    return (
        first.source,
        first.doc_id,
        min(m.chunk.ordinal for m in bundle.members if m.chunk.doc_id == first.doc_id),
    )


def edge_pack(bundles: Sequence[Bundle], strategy: str = "edges") -> list[Bundle]:
    """Order ``bundles`` (ranked best first) for the prompt; members inside a bundle are never reordered."""
    if strategy == "edges":
        return [bundles[i] for i in edges_order(len(bundles))]
    if strategy == "best_first":
        return list(bundles)
    if strategy == "best_last":
        return list(bundles)[::-1]
    if strategy == "document_order":
        return sorted(bundles, key=_document_key)
    raise ValueError(f"unknown packing strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")


def number_evidence(packed: Sequence[Bundle]) -> list[Evidence]:
    """Flatten packed bundles into passages numbered 1..m in final order: [n] is the passage at position n."""
    flat = [(member, bundle.bundle_id) for bundle in packed for member in bundle.members]
    return [Evidence(n, cand, bundle_id) for n, (cand, bundle_id) in enumerate(flat, start=1)]
