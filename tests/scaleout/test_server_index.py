"""Blue/green collections and the server reader, run against Qdrant's embedded mode standing in for a server.

Embedded mode implements the calls the server path makes (collections with shard/replication parameters,
payload indexes, aliases, the Query API); ``connect`` is pointed at one embedded client so no network is used.
What embedded mode cannot show (replication, per-shard IDF, a node going away) is listed in docs/deployment.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingest.indexer import ingest
from rag.config import load_settings
from rag.errors import IndexUnavailableError, IngestError
from rag.pipeline import Pipeline, Question
from rag.stores.index import current_generation, index_root
from rag.stores.qdrant_server import ServerBackend, ServerIndexWriter, collection_for, open_index_reader
from rag.text import bm25_tokens
from rag.types import Chunk, Principal, SearchFilter
from tests.stores.embedded_server import SharedClient, embedded_server

TODAY = date(2026, 6, 1)
STAFF = Principal("alice", frozenset({"staff"}))
URL = "http://qdrant-1:6333"  # never contacted: connect() is replaced by an embedded client


class Recorder(SharedClient):
    """Forwards to a real client and records the calls that change the server; close() is left to the test."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name in (
            "create_collection",
            "delete_collection",
            "update_collection_aliases",
            "create_payload_index",
        ):

            def recorded(*args: Any, **kwargs: Any) -> Any:
                self.calls.append((name, args, kwargs))
                return attr(*args, **kwargs)

            return recorded
        return attr

    def named(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(a, k) for n, a, k in self.calls if n == name]


@pytest.fixture()
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    with embedded_server(tmp_path, monkeypatch, Recorder) as recorder:
        yield recorder


def make_chunks(n: int, doc: str = "doc-a") -> tuple[list[Chunk], list[list[str]], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    chunks = [
        Chunk(
            chunk_id=f"{i:024x}",
            doc_id=doc,
            source=f"{doc}.md",
            title="Doc",
            section="1",
            text=f"Rule {i}: refunds within {i} days",
            ordinal=i,
            doc_version="v1",
            groups=("staff",),
            n_tokens=8,
        )
        for i in range(n)
    ]
    tokens = [bm25_tokens(c.text) for c in chunks]
    vectors = [v / np.linalg.norm(v) for v in rng.normal(size=(n, 8)).astype(np.float32)]
    return chunks, tokens, vectors


def test_collections_alias_switch_and_garbage_collection(tmp_path: Path, server: Recorder) -> None:
    settings = load_settings(data_dir=tmp_path / "data", qdrant_url=URL)
    writer = ServerIndexWriter(settings)
    chunks, tokens, vectors = make_chunks(5)

    name1 = writer.build("gen-000001", chunks, tokens, vectors, dim=8)
    assert name1 == "chunks-gen-000001" and writer.alias_target() is None  # built, not yet visible
    ((args, kwargs),) = server.named("create_collection")
    assert args == ("chunks-gen-000001",)
    assert (kwargs["shard_number"], kwargs["replication_factor"], kwargs["write_consistency_factor"]) == (
        3,
        2,
        1,
    )
    assert kwargs["sparse_vectors_config"]["bm25"].modifier.value == "idf"
    indexed = {k["field_name"]: k["field_schema"].value for _, k in server.named("create_payload_index")}
    assert indexed == {
        "groups": "keyword",
        "effective_ord": "integer",
        "expires_ord": "integer",
        "tags_f": "keyword",
        "doc_id": "keyword",
    }

    writer.publish("gen-000001")
    assert writer.alias_target() == name1
    for gen in ("gen-000002", "gen-000003"):
        writer.build(gen, chunks[:3], tokens[:3], vectors[:3], dim=8)
        writer.publish(gen)
        assert writer.alias_target() == collection_for("chunks", gen)
    # the alias moved in one call each time: delete + create together, never a moment without the alias
    switches = [k["change_aliases_operations"] for _, k in server.named("update_collection_aliases")]
    assert [len(ops) for ops in switches] == [1, 2, 2]
    assert [type(op).__name__ for op in switches[-1]] == ["DeleteAliasOperation", "CreateAliasOperation"]
    # only the newest two generations are kept
    assert writer.generation_collections() == ["chunks-gen-000002", "chunks-gen-000003"]
    assert server.count("chunks", exact=True).count == 3  # queries through the alias see the published one


def test_half_built_collection_is_replaced_and_alias_repaired(tmp_path: Path, server: Recorder) -> None:
    settings = load_settings(data_dir=tmp_path / "data", qdrant_url=URL)
    writer = ServerIndexWriter(settings)
    chunks, tokens, vectors = make_chunks(4)
    writer.build("gen-000001", chunks, tokens, vectors, dim=8)
    writer.publish("gen-000001")
    writer.build("gen-000002", chunks[:1], tokens[:1], vectors[:1], dim=8)  # "crashed" before publishing
    assert writer.alias_target() == "chunks-gen-000001"
    writer.build("gen-000002", chunks, tokens, vectors, dim=8)  # the re-run reuses the name
    assert server.count("chunks-gen-000002", exact=True).count == 4
    assert writer.ensure_published("gen-000002") and not writer.ensure_published("gen-000002")
    assert writer.alias_target() == "chunks-gen-000002"


def test_a_collection_squatting_on_the_alias_name_is_reported(tmp_path: Path, server: Recorder) -> None:
    from qdrant_client import models

    server.create_collection(
        "chunks", vectors_config={"dense": models.VectorParams(size=8, distance=models.Distance.COSINE)}
    )
    writer = ServerIndexWriter(load_settings(data_dir=tmp_path / "data", qdrant_url=URL))
    chunks, tokens, vectors = make_chunks(2)
    with pytest.raises(IngestError, match="cannot become an alias"):
        writer.build("gen-000001", chunks, tokens, vectors, dim=8)


def test_server_ingest_and_reader_end_to_end(
    tmp_path: Path, server: Recorder, sample_pdfs: Path, embedder
) -> None:  # type: ignore[no-untyped-def]
    """`rag ingest` with RAG_QDRANT_URL set: a collection per generation, the alias, and the app reading it."""
    data = tmp_path / "data"
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("refunds.pdf", "salary-bands.pdf", "remote-work.pdf"):
        for suffix in ("", ".meta.json"):
            (docs / f"{name}{suffix}").write_bytes((sample_pdfs / f"{name}{suffix}").read_bytes())
    settings = load_settings(data_dir=data, qdrant_url=URL, reranker="none")
    report = ingest([str(docs)], settings, embedder=embedder)
    assert report.ok and report.published
    gen1 = current_generation(data)
    assert not (
        index_root(data) / "generations" / gen1 / "qdrant"
    ).exists()  # vectors live on the server only
    assert ServerIndexWriter(settings).alias_target() == f"chunks-{gen1}"
    assert server.count(f"chunks-{gen1}", exact=True).count == report.index_chunks

    reader = open_index_reader(settings)
    assert isinstance(reader.backend, ServerBackend) and reader.lexical_backend == "qdrant"
    pipeline = Pipeline(settings, reader=reader, embedder=embedder)
    result = pipeline.ask(Question("Are gift cards refundable?", STAFF, as_of=TODAY))
    assert any("Gift cards are not refundable" in e.candidate.chunk.text for e in result.evidence)
    assert next(s for s in result.stages if s.name == "retrieve").detail["lexical_backend"] == "qdrant"
    cands = result.candidates
    assert any(c.bm25_rank is not None for c in cands) and any(c.dense_rank is not None for c in cands)
    outsider = pipeline.ask(Question("What are the salary bands for level L3?", STAFF, as_of=TODAY))
    assert "CANARY-HR-7731" not in str(outsider.to_json())

    # a changed corpus: a new collection, the alias moves, the reader follows without a restart
    (docs / "remote-work.pdf").unlink()
    (docs / "remote-work.pdf.meta.json").unlink()
    report2 = ingest([str(docs)], settings, embedder=embedder, prune=True)
    gen2 = current_generation(data)
    assert report2.published and gen2 != gen1 and report2.embedded == 0  # vectors came from the cache
    assert ServerIndexWriter(settings).alias_target() == f"chunks-{gen2}"
    again = pipeline.ask(Question("Are gift cards refundable?", STAFF, as_of=TODAY))
    assert again.stages[0].detail == {"switched": True, "generation": gen2}
    filt = SearchFilter(STAFF, TODAY)
    assert reader.lexical.search(bm25_tokens("remote work days"), filt, 50) == [] or all(
        "remote-work" not in reader.get(cid).source
        for cid, _ in reader.lexical.search(bm25_tokens("remote work"), filt, 50)  # type: ignore[union-attr]
    )

    # a new, empty server: the next run rebuilds the published generation there even though no file changed
    for name in ServerIndexWriter(settings).generation_collections():
        server.delete_collection(name)
    server.update_collection_aliases(change_aliases_operations=[])
    with pytest.raises(IndexUnavailableError):
        open_index_reader(settings)
    report3 = ingest([str(docs)], settings, embedder=embedder)
    assert report3.published and report3.embedded == 0
    assert ServerIndexWriter(settings).alias_target() == f"chunks-{current_generation(data)}"
    reader.close()
