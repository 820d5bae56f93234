"""A smoke run of ``benchmarks.scaling stores`` on a small synthetic generation: the writers' files, the figures'
shapes, and the two embedded backends agreeing on what they find (both legs are exact)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np

from benchmarks import scaling
from rag.stores.index import EmbeddedBackend, IndexReader
from rag.types import Principal, SearchFilter


def test_stores_benchmark_writes_opens_and_times_each_leg(tmp_path: Path) -> None:
    folder = tmp_path / "stores-3000"
    written = scaling.build_stores(3000, folder)
    assert written["chunks"] == 3000
    assert set(written["write_s"]) == {"dense_matrix", "bm25", "edge_shard", "chunks_manifest"}
    for name in ("dense.npy", "edge", "tokens.npy", "chunks.pkl", "bm25_weights.npz"):
        assert written["disk_mb"][name] > 0
    measured = scaling.measure_stores(folder, queries=5)
    assert measured["chunks"] == 3000 and measured["open_s"] >= 0 and measured["edge_open_s"] >= 0
    assert set(measured["legs_ms"]) == {"bm25", "dense_matrix", "edge_sparse", "edge_dense", "edge_hybrid"}
    assert all(set(v) == {"p50", "p95"} for v in measured["legs_ms"].values())
    assert measured["rss_mb"]["after_open"] > 0
    scaling._save(tmp_path, "stores", "3000", {**written, **measured})
    assert "| 3,000 |" in scaling.report(tmp_path)

    # the matrix and the Edge shard, both exact, find the same chunks under the same filter
    filt = SearchFilter(Principal("bench", frozenset({"hr"})), date(2026, 6, 1), frozenset({"emea"}))
    matrix, edge = IndexReader(folder), IndexReader(folder, EmbeddedBackend("qdrant"))
    try:
        for seed in range(3):
            vector = np.random.default_rng(seed).normal(size=384).astype(np.float32)
            ours, theirs = matrix.dense.search(vector, filt, 20), edge.dense.search(vector, filt, 20)
            assert [c for c, _ in ours] == [c for c, _ in theirs] and len(ours) == 20
            assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)
            assert all(filt.allows(matrix.get(c)) for c, _ in ours)  # type: ignore[arg-type]
    finally:
        matrix.close()
        edge.close()
