"""The Qdrant server passes the store contract: its collections written blue/green, read with the sparse BM25
leg and fusion in Qdrant (the default on a server) or with the generation's in-process BM25.

As in ``tests/scaleout/test_server_index.py``, Qdrant's embedded mode stands in for the server: it implements
the calls the server path makes (collections, payload indexes, aliases, the Query API), and ``connect`` is
pointed at one embedded client, so no network and no server binary are needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import rag.stores.qdrant_server as qs
from rag.config import load_settings
from tests.stores.contract import Deployment, StoreContract
from tests.stores.embedded_server import SharedClient, embedded_server

URL = "http://qdrant-1:6333"  # never contacted: connect() is replaced by an embedded client


@pytest.fixture()
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SharedClient]:
    with embedded_server(tmp_path, monkeypatch, SharedClient) as shared:
        yield shared


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
