"""The ranking metrics, and a smoke run of the retrieval-quality benchmark on a tiny BEIR corpus.

Only shapes and ranges are checked: the figures themselves are in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evaluation import retrieval
from evaluation.metrics import ndcg_at, recall_at
from evaluation.retrieval import load_qrels
from tests.beir_corpus import QRELS, write_beir


# ----------------------------------------------------------------------------------------- metrics
def test_perfect_ranking_scores_one() -> None:
    relevance = {"a": 2, "b": 1, "c": 0}
    assert ndcg_at(["a", "b", "x", "c"], relevance) == pytest.approx(1.0)
    assert recall_at(["a", "b"], relevance) == 1.0
    assert ndcg_at(["a"], {"a"}) == 1.0  # a plain set: grade 1 each


def test_ndcg_is_graded_with_a_log2_discount_and_an_ideal_from_the_qrels() -> None:
    relevance = {"a": 2, "b": 1, "missing": 1}
    ideal = 2 + 1 / math.log2(3) + 1 / math.log2(4)  # every judged document counts in the ideal
    assert ndcg_at(["b", "x", "a"], relevance) == pytest.approx((1 + 2 / math.log2(4)) / ideal)
    assert ndcg_at(["x", "y"], relevance) == 0.0
    assert ndcg_at(["a", "a", "b"], {"a": 1, "b": 1}) == pytest.approx(1.0)  # a repeated id counts once
    assert ndcg_at(["b", "a"], relevance, k=1) == pytest.approx(1 / 2)


def test_recall_counts_only_positive_grades_within_k() -> None:
    relevance = {"a": 1, "b": 3, "c": 0}
    assert recall_at(["c", "a", "x"], relevance, k=2) == 0.5
    assert recall_at(["v", "w", "x", "y", "z", "a", "b"], relevance, k=5) == 0.0
    assert recall_at(["a"], {}, k=10) == 0.0


def test_qrels_load_with_or_without_header(tmp_path: Path) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text(QRELS)
    assert load_qrels(path)["q2"] == {"d3": 2, "d1": 0}
    path.write_text("q1\td1\t1\n")
    assert load_qrels(path) == {"q1": {"d1": 1}}


# ----------------------------------------------------------------------------------------- benchmarks
@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir"))


@pytest.fixture(scope="module")
def beir_index(beir: Path, embedder) -> Path:  # type: ignore[no-untyped-def]
    data_dir = beir / "data"
    retrieval.ingest_corpus(beir / "corpus.jsonl", data_dir)
    return data_dir


def test_retrieval_benchmark_reports_every_system(
    beir: Path, beir_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    retrieval.main(
        [
            "--corpus",
            str(beir / "corpus.jsonl"),
            "--queries",
            str(beir / "queries.jsonl"),
            "--qrels",
            str(beir / "qrels.tsv"),
            "--data-dir",
            str(beir_index),
            "--json",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert result["ingestion"]["reused"] is True  # the unchanged corpus is not ingested again
    assert result["queries"] == 4  # q5, q6 have no qrels; q2's grade-0 document is not relevant
    assert set(result["systems"]) == {"bm25", "dense", "hybrid", "pipeline"}
    for row in result["systems"].values():
        assert {"ndcg@10", "recall@10", "recall@100", "ms_per_query"} <= set(row)
        for metric in ("ndcg@10", "recall@10", "recall@100"):
            assert 0.0 <= row[metric] <= 1.0
        assert row["ms_per_query"] >= 0
    assert result["systems"]["pipeline"]["recall@100"] == 1.0  # 4 documents: every one is ranked
    split = result["reranker_training_split"]
    assert split["trained_on"]["queries"] + split["held_out"]["queries"] == 4


def test_retrieval_limit_keeps_the_first_judged_queries(beir: Path) -> None:
    queries = retrieval.load_queries(beir / "queries.jsonl", beir / "qrels.tsv", limit=2)
    assert [q.qid for q in queries] == ["q1", "q2"]
