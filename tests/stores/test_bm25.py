"""The sparse BM25 must give rank-bm25's scores exactly (rank-bm25 is the reference)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from rag.stores.bm25 import BM25Index
from rag.text import bm25_tokens

words = st.sampled_from([f"w{i}" for i in range(40)])
docs = st.lists(st.lists(words, min_size=1, max_size=30), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(corpus=docs, query=st.lists(words, min_size=1, max_size=6))
def test_scores_equal_rank_bm25(corpus: list[list[str]], query: list[str]) -> None:
    ours = BM25Index.build(corpus).scores(query)
    ref = BM25Okapi(corpus).get_scores(query)
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-9)


def test_top_respects_mask_and_order() -> None:
    corpus = [
        bm25_tokens(t)
        for t in [
            "refund window 45 days",
            "gift cards are not refundable",
            "travel per diem",
            "refund refund",
            "laptop refresh",
            "parental leave",
            "expense claims",
            "security badge",
        ]
    ]
    index = BM25Index.build(corpus)
    hits = index.top(bm25_tokens("refund"), 10)
    assert [i for i, _ in hits] == [3, 0, 1]  # "refundable" stems to "refund"
    masked = index.top(bm25_tokens("refund"), 10, mask=np.array([True, True, True, False] + [True] * 4))
    assert [i for i, _ in masked] == [0, 1]
    assert index.top(bm25_tokens("unknown words"), 10) == []


def test_save_load_roundtrip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    corpus = [["a", "b"], ["b", "c", "c"], ["d"]]
    index = BM25Index.build(corpus)
    index.save(tmp_path)
    loaded = BM25Index.load(tmp_path)
    np.testing.assert_allclose(loaded.scores(["c", "b"]), index.scores(["c", "b"]))


def test_tokens_normalise_and_stem() -> None:
    assert bm25_tokens("Refunds are NOT allowed") == ["refund", "not", "allow"]
    assert bm25_tokens("The ﬃce") == bm25_tokens("The ffice")
