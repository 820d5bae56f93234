"""The ranking metrics, and smoke runs of the retrieval-quality and scaling benchmarks on a tiny BEIR corpus.

Only shapes and ranges are checked: the figures themselves are in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from benchmarks import retrieval, scaling
from benchmarks.metrics import load_qrels
from rag.metrics import ndcg_at, recall_at

CORPUS = [
    {
        "_id": "d1",
        "title": "Annual leave",
        "text": "Employees receive 25 days of paid annual leave per calendar year. "
        "Unused leave may be carried over to the next year.",
    },
    {
        "_id": "d2",
        "title": "Remote work",
        "text": "Staff may work remotely up to three days a week with the approval of their manager.",
    },
    {
        "_id": "d3",
        "title": "Expense claims",
        "text": "Travel expenses must be claimed within 30 days, with the receipts attached to the claim.",
    },
    {
        "_id": "d4",
        "title": "Passwords",
        "text": "Passwords must be at least 14 characters long and must never be shared with anyone.",
    },
]
QUERIES = {
    "q1": "How many days of annual leave do employees get?",
    "q2": "How long do I have to claim travel expenses?",
    "q3": "How long must a password be?",
    "q4": "Can staff work from home?",
    "q5": "Who approves remote work?",
    "q6": "Can unused leave be carried over?",
}
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\nq2\td1\t0\nq3\td4\t1\nq4\td2\t1\n"


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
    root = tmp_path_factory.mktemp("beir")
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in QUERIES.items())
    )
    (root / "qrels.tsv").write_text(QRELS)
    return root


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


def test_scaling_benchmark_builds_queries_and_reports(
    beir_index: Path, tmp_path: Path, tiny_cross_encoder_dir: Path
) -> None:
    work = tmp_path / "scale"
    # 4 real chunks + 3 synthetic, at most 5 chunks per ingestion: two ingestions; a deadline already passed
    # stops the build after the first, and the next call resumes it
    first = scaling.build(beir_index, 7, work, step=5, deadline=time.monotonic(), child=False)
    assert first["incomplete"] and [s["chunks"] for s in first["steps"]] == [5]
    built = scaling.build(beir_index, 7, work, step=5, child=False)
    assert built["real_documents"] == 4 and built["synthetic_documents"] == 3
    assert built["ingest"]["chunks"] == 7 and built["ingest"]["steps"] == 2
    assert built["ingest"]["embedded"] == 0  # every vector came from the seeded cache
    assert built["ingest"]["peak_rss_mb"] > 0
    scaling._save(work, "build", "7", built)

    data_dir = work / "7" / "data"
    questions = list(QUERIES.values())
    q = scaling.measure_query(data_dir, questions, n_sequential=2, n_concurrent=2, clients=2, legs=1)
    assert q["chunks"] == 7 and q["queries"] == 2 and q["concurrent"]["queries"] == 2
    assert {"retrieve", "rerank"} <= set(q["stages_ms"])
    assert set(q["end_to_end_ms_without_generator"]) == {"p50", "p95"}
    assert q["concurrent"]["qps"] > 0 and q["rss_mb"]["peak"] > 0
    scaling._save(work, "query", "7", q)

    f = scaling.measure_floor(data_dir, questions[:3], repeats=1, cross_encoder=None)
    assert f["queries"] == 2 and f["floor_ms_p50"] > 0 and f["ratio"] > 0
    assert f["floor_all_calls_ms_p50"] > 0 and f["reranked_pairs_p50"] > 0
    scaling._save(work, "floor", "7", f)
    # the pipeline reranking with a cross-encoder, timed against that model's forward time for the same pairs
    ce = scaling.measure_floor(
        data_dir, questions[:3], repeats=1, cross_encoder=None, rerank_with=tiny_cross_encoder_dir
    )
    assert ce["reranker"] == f"cross-encoder:{tiny_cross_encoder_dir.name}"
    assert ce["reranked_pairs_p50"] > 0 and ce["floor_all_calls_ms_p50"] > 0 and ce["ratio_to_all_calls"] > 0
    scaling._save(work, "floor", "7-cross-encoder", ce)
    table = scaling.report(work)
    assert "end to end (no generator)" in table and "ratio" in table
    assert "Every model call of the request replayed" in table and "cross-encoder:" in table
