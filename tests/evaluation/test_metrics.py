"""nDCG@k and recall@k (evaluation.metrics): the one definition training, evaluation and the benchmarks share."""

import math

import pytest

from evaluation.metrics import ndcg_at, recall_at

GRADED = {"a": 3, "b": 2, "c": 0, "d": 1}


def test_graded_relevance_gains_are_the_grades() -> None:
    dcg = 1 / math.log2(2) + 3 / math.log2(3) + 0 + 2 / math.log2(5)  # d, a, c (judged 0), b
    ideal = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)  # a, b, d
    assert ndcg_at(["d", "a", "c", "b"], GRADED) == pytest.approx(dcg / ideal)
    assert ndcg_at(["d", "a", "c", "b"], GRADED) == pytest.approx(0.788377, abs=1e-6)
    assert ndcg_at(["a", "b", "d"], GRADED) == pytest.approx(1.0)


def test_k_cuts_the_ranking_and_the_ideal() -> None:
    ideal_at_2 = 3 + 2 / math.log2(3)
    assert ndcg_at(["d", "a", "c", "b"], GRADED, k=2) == pytest.approx((1 + 3 / math.log2(3)) / ideal_at_2)
    assert ndcg_at(["x", "y", "a"], GRADED, k=2) == 0.0  # the one relevant hit is past the cut
    assert recall_at(["x", "a", "b"], GRADED, k=2) == pytest.approx(1 / 3)


def test_ties_between_equal_grades_do_not_matter() -> None:
    tied = {"a": 1, "b": 1, "c": 1}
    assert ndcg_at(["a", "b", "x"], tied) == ndcg_at(["b", "a", "x"], tied)
    assert ndcg_at(["b", "x", "a"], {"a": 2, "b": 2}) == ndcg_at(["a", "x", "b"], {"a": 2, "b": 2})


def test_a_repeated_id_counts_once_at_its_best_position() -> None:
    assert ndcg_at(["a", "a", "b"], {"a": 1, "b": 1}) == pytest.approx(1.0)
    assert recall_at(["a", "a"], {"a", "b"}, k=2) == 0.5


def test_relevant_documents_never_returned_count_in_the_ideal() -> None:
    assert ndcg_at(["a"], {"a", "z"}) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_a_plain_collection_is_grade_one_each() -> None:
    assert ndcg_at(["c", "a"], {"a", "b"}) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_empty_relevance_or_ranking_scores_zero() -> None:
    assert ndcg_at(["a"], frozenset()) == 0.0
    assert ndcg_at(["a"], {"a": 0, "b": -1}) == 0.0  # judged, none relevant
    assert recall_at(["a"], {}) == 0.0
    assert ndcg_at([], GRADED) == 0.0
    assert recall_at([], GRADED) == 0.0
