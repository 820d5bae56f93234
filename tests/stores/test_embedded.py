"""The embedded generation passes the store contract: in-process BM25 with the numpy dense matrix, and the
sparse BM25 leg with fusion inside embedded Qdrant (``RAG_LEXICAL_BACKEND=qdrant``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.config import load_settings
from tests.stores.contract import Deployment, StoreContract


class TestEmbeddedBm25(StoreContract):
    @pytest.fixture()
    def deployment(self, tmp_path: Path) -> Deployment:
        return Deployment(load_settings(data_dir=tmp_path / "data"), lexical_backend="bm25", fuses=False)


class TestEmbeddedQdrantLexical(StoreContract):
    @pytest.fixture()
    def deployment(self, tmp_path: Path) -> Deployment:
        settings = load_settings(data_dir=tmp_path / "data", lexical_backend="qdrant")
        return Deployment(settings, lexical_backend="qdrant", fuses=True)
