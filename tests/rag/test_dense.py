"""The embedded reader's dense leg (a numpy mask over the generation's vectors) against Qdrant's own search."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from rag.stores.edge import EdgeVectors, open_shard
from rag.stores.index import IndexReader, current_generation, generation_dir
from rag.types import Principal, SearchFilter

PRINCIPALS = [
    Principal("alice", frozenset({"staff"})),
    Principal("hana", frozenset({"staff", "hr"})),
    Principal("sam", frozenset({"staff", "security"})),
    Principal("nobody", frozenset()),
]
QUESTIONS = [
    "What are the salary bands for level L3?",
    "How many days can I work from abroad?",
    "SEV1 escalation",
]


@pytest.fixture(scope="module")
def reader(sample_data_dir: Path) -> IndexReader:
    r = IndexReader(sample_data_dir)
    yield r  # type: ignore[misc]
    r.close()


@pytest.fixture(scope="module")
def qdrant_engine(sample_data_dir: Path) -> Any:
    """The same generation's vectors searched by the Qdrant engine (the generation's Qdrant Edge shard)."""
    name = current_generation(sample_data_dir) or ""
    shard = open_shard(generation_dir(sample_data_dir, name), name)
    yield EdgeVectors(shard)
    shard.close()


@pytest.mark.parametrize("principal", PRINCIPALS, ids=lambda p: p.user)
@pytest.mark.parametrize("as_of", [date(2021, 6, 1), date(2026, 6, 1)])
def test_same_hits_as_qdrants_filtered_search(
    reader: IndexReader, qdrant_engine: EdgeVectors, embedder, principal: Principal, as_of: date
) -> None:  # type: ignore[no-untyped-def]
    filt = SearchFilter(principal, as_of)
    for question in QUESTIONS:
        vector = embedder.embed_queries([question])[0]
        for n in (1, 10, 500):
            ours = reader.dense.search(vector, filt, n)
            theirs = qdrant_engine.search(vector, filt, n)
            assert [cid for cid, _ in ours] == [cid for cid, _ in theirs]
            assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(ours, theirs, strict=True))
            for cid, _ in ours:
                chunk = reader.get(cid)
                assert chunk is not None and filt.allows(chunk)


def test_nothing_readable_means_no_hits(reader: IndexReader, embedder) -> None:  # type: ignore[no-untyped-def]
    vector = embedder.embed_queries(["anything"])[0]
    assert (
        reader.dense.search(vector, SearchFilter(Principal("nobody", frozenset()), date(1990, 1, 1)), 10)
        == []
    )
    assert reader.dense.search(vector, SearchFilter(PRINCIPALS[0], date(2026, 6, 1)), 0) == []


def test_passage_tokens_are_the_tokens_bm25_counted(reader: IndexReader) -> None:
    """The reader hands the reranker each chunk's stored lexical tokens: exactly what tokenising it gives."""
    from rag.models.embedder import passage_text
    from rag.text import bm25_tokens

    chunks = reader.generation.chunks
    assert chunks
    for c in chunks:
        assert reader.passage_tokens(c.chunk_id) == bm25_tokens(passage_text(c.title, c.section, c.text))
    assert reader.passage_tokens("no-such-chunk") is None
