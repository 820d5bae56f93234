"""A smoke run of the scaling benchmark on a tiny BEIR corpus (ingested as the retrieval-quality benchmark does).

Only shapes and ranges are checked: the figures themselves are in docs/benchmarks.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks import scaling
from evaluation import retrieval
from tests.beir_corpus import QUERIES, write_beir


@pytest.fixture(scope="module")
def beir_index(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:  # type: ignore[no-untyped-def]
    root = write_beir(tmp_path_factory.mktemp("beir"))
    data_dir = root / "data"
    retrieval.ingest_corpus(root / "corpus.jsonl", data_dir)
    return data_dir


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
