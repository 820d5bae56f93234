"""The Qdrant server passes the store contract: its collections written blue/green, read with the sparse BM25
leg and fusion in Qdrant (the default on a server) or with the generation's in-process BM25.

As in ``tests/scaleout/test_server_index.py``, Qdrant's embedded mode stands in for the server: it implements
the calls the server path makes (collections, payload indexes, aliases, the Query API), and ``connect`` is
pointed at one embedded client, so no network and no server binary are needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rag.stores.qdrant_server as qs
from rag.config import load_settings
from tests.stores.contract import Deployment, StoreContract

URL = "http://qdrant-1:6333"  # never contacted: connect() is replaced by an embedded client


class SharedClient:
    """One embedded client shared by every writer and reader of a test, like one server; close() is the test's."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def close(self) -> None:
        pass


@pytest.fixture()
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SharedClient:
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp_path / "qdrant-server"))
    shared = SharedClient(client)
    monkeypatch.setattr(qs, "connect", lambda settings: shared)
    yield shared  # type: ignore[misc]
    client.close()


class TestServerQdrantLexical(StoreContract):
    @pytest.fixture()
    def deployment(self, tmp_path: Path, server: SharedClient) -> Deployment:
        settings = load_settings(data_dir=tmp_path / "data", qdrant_url=URL)
        return Deployment(settings, lexical_backend="qdrant", fuses=True)


class TestServerBm25(StoreContract):
    @pytest.fixture()
    def deployment(self, tmp_path: Path, server: SharedClient) -> Deployment:
        settings = load_settings(data_dir=tmp_path / "data", qdrant_url=URL, lexical_backend="bm25")
        return Deployment(settings, lexical_backend="bm25", fuses=False)


def test_a_server_without_the_published_generation_is_stale(tmp_path: Path, server: SharedClient) -> None:
    """The writer side of a replaced server: its generation is rebuilt even though no document changed."""
    from rag.stores.index import Manifest, generation_dir
    from tests.stores.contract import write
    from tests.stores.corpus import make_corpus

    deployment = Deployment(load_settings(data_dir=tmp_path / "data", qdrant_url=URL), "qdrant", True)
    write(deployment, "gen-000001", make_corpus())
    manifest = Manifest.load(generation_dir(deployment.data_dir, "gen-000001"))
    writer = qs.ServerIndexWriter(deployment.settings)
    assert not writer.is_stale(manifest)
    server.delete_collection(qs.collection_for("chunks", "gen-000001"))
    assert writer.is_stale(manifest)
