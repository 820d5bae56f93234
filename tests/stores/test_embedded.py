"""The embedded generation passes the store contract: in-process BM25 with the memory-mapped dense matrix, and
the sparse BM25 leg with fusion inside the generation's Qdrant Edge shard (``RAG_LEXICAL_BACKEND=qdrant``); and
so do generations written by the previous release (an embedded qdrant-client store), which readers still serve."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from rag.config import load_settings
from rag.errors import IndexUnavailableError
from rag.stores import LegsQuery
from rag.stores.edge import shard_path
from rag.stores.index import IndexReader, Manifest, generation_dir
from rag.stores.qdrant_server import open_index_reader, open_index_writers
from rag.text import bm25_tokens
from tests.stores.contract import FILTERS, Deployment, StoreContract, query_vector, write
from tests.stores.corpus import make_corpus


class TestEmbeddedBm25(StoreContract):
    @pytest.fixture()
    def deployment(self, tmp_path: Path) -> Deployment:
        return Deployment(load_settings(data_dir=tmp_path / "data"), lexical_backend="bm25", fuses=False)


class TestEmbeddedEdge(StoreContract):
    @pytest.fixture()
    def deployment(self, tmp_path: Path) -> Deployment:
        settings = load_settings(data_dir=tmp_path / "data", lexical_backend="qdrant")
        return Deployment(settings, lexical_backend="qdrant", fuses=True)


class TestPreviousReleaseBm25(StoreContract):
    @pytest.fixture()
    def deployment(self, tmp_path: Path) -> Deployment:
        settings = load_settings(data_dir=tmp_path / "data")
        return Deployment(settings, lexical_backend="bm25", fuses=False, previous_release=True)


class TestPreviousReleaseQdrantLexical(StoreContract):
    """Its sparse leg and fusion in the copied qdrant-client store, until the next ingestion adds an Edge shard."""

    @pytest.fixture()
    def deployment(self, tmp_path: Path) -> Deployment:
        settings = load_settings(data_dir=tmp_path / "data", lexical_backend="qdrant")
        return Deployment(
            settings, lexical_backend="qdrant", fuses=True, previous_release=True, stale_when_published=True
        )


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_readers_open_the_published_edge_shard_in_place_and_change_nothing(tmp_path: Path) -> None:
    """Readers share the published shard (no private copy): opening and searching it, from two readers at once,
    leaves every file of the generation as ingestion wrote it."""
    deployment = Deployment(
        load_settings(data_dir=tmp_path / "data", lexical_backend="qdrant"), "qdrant", True
    )
    write(deployment, "gen-000001", make_corpus())
    folder = generation_dir(deployment.data_dir, "gen-000001")
    before = _digests(folder)
    readers = [open_index_reader(deployment.settings) for _ in range(2)]
    try:
        for reader in readers:
            for text in ("refund window", "salary band"):
                legs = reader.search(
                    LegsQuery(
                        bm25_tokens(text), query_vector(3), FILTERS["staff"], n_lexical=5, n_dense=5, rrf_k=60
                    )
                )
                assert legs.lexical and legs.dense and legs.fused
    finally:
        for reader in readers:
            reader.close()
    assert _digests(folder) == before


def test_the_dense_matrix_is_memory_mapped_not_copied(tmp_path: Path) -> None:
    deployment = Deployment(load_settings(data_dir=tmp_path / "data"), "bm25", False)
    write(deployment, "gen-000001", make_corpus())
    reader = IndexReader(deployment.data_dir)
    try:
        matrix = reader.generation.dense
        assert matrix is not None and matrix.shape == (24, 8)
        assert isinstance(matrix.base, np.memmap) and not matrix.flags.writeable  # a view of the file's map
        assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0)
    finally:
        reader.close()


def test_every_embedded_generation_carries_its_edge_shard(tmp_path: Path) -> None:
    """Ingested for in-process BM25, a generation still carries the shard (switching RAG_LEXICAL_BACKEND needs no
    ingestion); a generation that lost it is stale only for a deployment that searches it, and the Edge reader
    then names the command that rebuilds it."""
    bm25 = load_settings(data_dir=tmp_path / "data")
    edge = load_settings(data_dir=tmp_path / "data", lexical_backend="qdrant")
    write(Deployment(bm25, "bm25", False), "gen-000001", make_corpus())
    folder = generation_dir(tmp_path / "data", "gen-000001")
    assert shard_path(folder).is_dir()
    open_index_reader(edge).close()
    shutil.rmtree(shard_path(folder))
    manifest = Manifest.load(folder)
    assert [w.is_stale(manifest) for w in open_index_writers(bm25)] == [False, False, False]
    assert any(w.is_stale(manifest) for w in open_index_writers(edge))
    with pytest.raises(IndexUnavailableError) as err:
        open_index_reader(edge)
    assert "rag ingest" in (err.value.hint or "")
