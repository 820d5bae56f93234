"""The store contract: what every implementation of ``LexicalIndex``, ``VectorStore``, ``HybridSearch`` and
``IndexWriter`` must do, run through the composed ``IndexReader`` the query path uses.

The pattern of Haystack's ``haystack/testing/document_store.py``: the cases live in base classes here, and each
implementation's test module subclasses them and supplies the ``deployment`` fixture (the settings whose
``open_index_writers`` / ``open_index_reader`` pick that implementation). A new backend passes the same suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from rag.config import Settings
from rag.stages.retrieve import rrf_fuse
from rag.stores import Hit, LegsQuery
from rag.stores.index import IndexReader, current_generation, generation_dir
from rag.stores.qdrant_server import open_index_reader, open_index_writers
from rag.text import bm25_tokens
from rag.types import Chunk, Principal, SearchFilter
from tests.stores.corpus import TODAY, Written, make_corpus, vectors_for, write_generation

EVERYONE = Principal("root", frozenset({"staff", "hr", "security"}))
STAFF = Principal("alice", frozenset({"staff"}))
NOBODY = Principal("eve", frozenset())
FILTERS = {
    "everyone": SearchFilter(EVERYONE, TODAY),
    "staff": SearchFilter(STAFF, TODAY),
    "staff-2021": SearchFilter(STAFF, date(2021, 6, 1)),
    "staff-2028": SearchFilter(STAFF, date(2028, 1, 1)),
    "hr-emea": SearchFilter(Principal("hana", frozenset({"hr"})), TODAY, frozenset({"emea"})),
    "everyone-us": SearchFilter(EVERYONE, TODAY, frozenset({"us"})),
    "public-only": SearchFilter(NOBODY, TODAY),
}
QUERIES = ("refund window code3", "salary band", "laptop theft rule detail", "travel booking code9 code10")


@dataclass(frozen=True)
class Deployment:
    """One implementation under test: the settings that select it and what it should report."""

    settings: Settings
    lexical_backend: str  # what the trace records
    fuses: bool  # whether the store fuses the legs itself (HybridSearch)
    previous_release: bool = False  # each generation rewritten as the previous release wrote it (legacy.py)
    stale_when_published: bool = False  # whether today's writers find such a generation in need of a rebuild

    @property
    def data_dir(self) -> Path:
        return Path(self.settings.data_dir)


def write(deployment: Deployment, name: str, chunks: list[Chunk], previous: Written | None = None) -> Written:
    writers = open_index_writers(deployment.settings)
    try:
        written = write_generation(deployment.data_dir, writers, name, chunks, previous=previous)
    finally:
        for w in writers:
            w.close()
    if deployment.previous_release:
        from tests.stores.legacy import to_previous_release

        to_previous_release(generation_dir(deployment.data_dir, name))
    return written


def matching(chunks: list[Chunk], tokens: list[str], filt: SearchFilter) -> set[str]:
    """Chunks the filter allows that share a term with the query: what a lexical index may return."""
    query = set(tokens)
    return {c.chunk_id for c in chunks if filt.allows(c) and query & set(bm25_tokens(c.text))}


def cosine_ranking(written: Written, vector: np.ndarray, filt: SearchFilter) -> list[Hit]:
    q = vector / np.linalg.norm(vector)
    scored = [(c.chunk_id, float(written.vectors[c.chunk_id] @ q)) for c in written.chunks if filt.allows(c)]
    return sorted(scored, key=lambda h: -h[1])


def query_vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=8).astype(np.float32)
    return v / np.linalg.norm(v)


def non_increasing(hits: list[Hit]) -> bool:
    return all(a[1] >= b[1] - 1e-9 for a, b in zip(hits, hits[1:], strict=False))


class StoreFixtures:
    @pytest.fixture()
    def written(self, deployment: Deployment) -> Written:
        return write(deployment, "gen-000001", make_corpus())

    @pytest.fixture()
    def reader(self, deployment: Deployment, written: Written) -> IndexReader:
        r = open_index_reader(deployment.settings)
        yield r  # type: ignore[misc]
        r.close()


class LexicalIndexContract(StoreFixtures):
    @pytest.mark.parametrize("who", FILTERS)
    @pytest.mark.parametrize("text", QUERIES)
    def test_lexical_filters_apply_inside_the_store(
        self, reader: IndexReader, written: Written, who: str, text: str
    ) -> None:
        filt, tokens = FILTERS[who], bm25_tokens(text)
        hits = reader.lexical.search(tokens, filt, 1000)
        assert all(filt.allows(reader.get(cid)) for cid, _ in hits)  # type: ignore[arg-type]
        assert {cid for cid, _ in hits} == matching(written.chunks, tokens, filt)  # nothing allowed is lost
        assert len({cid for cid, _ in hits}) == len(hits)

    @pytest.mark.parametrize("text", QUERIES)
    def test_lexical_n_and_order(self, reader: IndexReader, text: str) -> None:
        tokens, filt = bm25_tokens(text), FILTERS["everyone"]
        full = reader.lexical.search(tokens, filt, 1000)
        assert len(full) >= 3 and non_increasing(full) and all(score > 0 for _, score in full)
        for n in (1, 2, 3):
            top = reader.lexical.search(tokens, filt, n)
            assert len(top) == n
            assert [s for _, s in top] == pytest.approx([s for _, s in full[:n]], rel=1e-5)

    def test_lexical_ranks_the_chunk_that_names_the_code_first(
        self, reader: IndexReader, written: Written
    ) -> None:
        filt = FILTERS["everyone"]
        for c in written.chunks:
            if filt.allows(c):
                code = next(w for w in c.text.split() if w.startswith("code"))
                assert reader.lexical.search(bm25_tokens(f"{code} policy"), filt, 3)[0][0] == c.chunk_id

    def test_lexical_no_hits(self, reader: IndexReader) -> None:
        filt = FILTERS["everyone"]
        assert reader.lexical.search([], filt, 10) == []
        assert reader.lexical.search(bm25_tokens("zeppelin quasar"), filt, 10) == []
        assert (
            reader.lexical.search(bm25_tokens("refund window"), SearchFilter(NOBODY, date(1990, 1, 1)), 10)
            == []
        )
        assert reader.lexical.search(bm25_tokens("refund window"), filt, 0) == []


class VectorStoreContract(StoreFixtures):
    @pytest.mark.parametrize("who", FILTERS)
    def test_dense_filters_apply_before_ranking(
        self, reader: IndexReader, written: Written, who: str
    ) -> None:
        filt = FILTERS[who]
        for seed in range(3):
            vector = query_vector(seed)
            expected = cosine_ranking(written, vector, filt)
            for n in (1, 5, 1000):
                hits = reader.dense.search(vector, filt, n)
                assert [cid for cid, _ in hits] == [cid for cid, _ in expected[:n]]
                assert [s for _, s in hits] == pytest.approx([s for _, s in expected[:n]], abs=1e-4)

    def test_dense_finds_each_chunk_by_its_own_vector(self, reader: IndexReader, written: Written) -> None:
        filt = FILTERS["everyone"]
        for c in written.chunks:
            if filt.allows(c):
                (cid, score), *_ = reader.dense.search(written.vectors[c.chunk_id], filt, 2)
                assert cid == c.chunk_id and score == pytest.approx(1.0, abs=1e-4)

    def test_dense_no_hits(self, reader: IndexReader) -> None:
        vector = query_vector(0)
        assert reader.dense.search(vector, SearchFilter(NOBODY, date(1990, 1, 1)), 10) == []
        assert reader.dense.search(vector, FILTERS["everyone"], 0) == []


class ReaderContract(StoreFixtures):
    """``IndexReader.search``: the one entry the query path calls, whatever serves it."""

    def test_reader_reports_its_lexical_backend(self, reader: IndexReader, deployment: Deployment) -> None:
        assert reader.lexical_backend == deployment.lexical_backend

    @pytest.mark.parametrize("who", FILTERS)
    @pytest.mark.parametrize("text", QUERIES)
    def test_search_returns_both_filtered_legs_and_their_fusion(
        self, reader: IndexReader, deployment: Deployment, who: str, text: str
    ) -> None:
        filt, tokens, vector = FILTERS[who], bm25_tokens(text), query_vector(len(text))
        legs = reader.search(LegsQuery(tokens, vector, filt, n_lexical=5, n_dense=4, rrf_k=60))
        assert len(legs.lexical) <= 5 and len(legs.dense) <= 4
        assert legs.lexical == reader.lexical.search(tokens, filt, 5)
        assert [c for c, _ in legs.dense] == [c for c, _ in reader.dense.search(vector, filt, 4)]
        for cid, _ in [*legs.lexical, *legs.dense, *(legs.fused or [])]:
            assert filt.allows(reader.get(cid))  # type: ignore[arg-type]
        if not deployment.fuses:
            assert legs.fused is None
            return
        assert legs.fused is not None
        chunks = {cid: reader.get(cid) for cid, _ in [*legs.lexical, *legs.dense]}
        expected = {c.chunk_id: c.fused_score for c in rrf_fuse(legs.lexical, legs.dense, chunks, k=60)}  # type: ignore[arg-type]
        assert {cid for cid, _ in legs.fused} == set(expected)
        for cid, score in legs.fused:
            assert score == pytest.approx(expected[cid], abs=1e-7)
        assert non_increasing(legs.fused)

    def test_search_with_nothing_readable(self, reader: IndexReader) -> None:
        legs = reader.search(
            LegsQuery(
                bm25_tokens("refund"),
                query_vector(1),
                SearchFilter(NOBODY, date(1990, 1, 1)),
                n_lexical=5,
                n_dense=5,
                rrf_k=60,
            )
        )
        assert legs.lexical == [] and legs.dense == [] and not legs.fused


class IndexWriterContract:
    """Writers then reader: what was written comes back; a rebuilt generation is published and followed."""

    def test_round_trip(self, deployment: Deployment) -> None:
        written = write(deployment, "gen-000001", make_corpus())
        reader = open_index_reader(deployment.settings)
        try:
            assert reader.generation.name == "gen-000001"
            assert [c.chunk_id for c in reader.generation.chunks] == [c.chunk_id for c in written.chunks]
            for c, tokens in zip(written.chunks, written.tokens, strict=True):
                assert reader.get(c.chunk_id) == c  # every field survives the files (and the payload)
                assert reader.passage_tokens(c.chunk_id) == tokens
            doc0 = reader.doc_chunks("doc0")
            assert [c.ordinal for c in doc0] == sorted(c.ordinal for c in doc0) and doc0
            assert set(reader.documents()) == {c.doc_id for c in written.chunks}
            manifest = reader.generation.manifest
            writers = open_index_writers(deployment.settings)
            try:
                # freshly published: nothing to rebuild (unless it is in an older layout that lacks a store)
                assert any(w.is_stale(manifest) for w in writers) == deployment.stale_when_published
            finally:
                for w in writers:
                    w.close()
        finally:
            reader.close()

    def test_rebuild_publishes_the_next_generation(self, deployment: Deployment) -> None:
        first = write(deployment, "gen-000001", make_corpus())
        reader = open_index_reader(deployment.settings)
        try:
            assert not reader.refresh()
            dropped = [c for c in first.chunks if c.doc_id == "doc1"]
            added = make_corpus(2, docs=1, start=96)  # doc0 chunks saying code96 and code97
            chunks = [c for c in first.chunks if c.doc_id != "doc1"] + added
            second = write(deployment, "gen-000002", chunks, previous=first)
            assert current_generation(deployment.data_dir) == "gen-000002"
            assert reader.refresh() and reader.generation.name == "gen-000002"
            assert not reader.refresh()
            everyone = FILTERS["everyone"]
            gone = {c.chunk_id for c in dropped}
            for text in (*QUERIES, "rule"):
                hits = reader.lexical.search(bm25_tokens(text), everyone, 1000)
                assert not gone & {cid for cid, _ in hits}
                assert {cid for cid, _ in hits} == matching(second.chunks, bm25_tokens(text), everyone)
            for c in dropped:
                assert reader.get(c.chunk_id) is None
                assert c.chunk_id not in {
                    cid for cid, _ in reader.dense.search(first.vectors[c.chunk_id], everyone, 1000)
                }
            new = added[0]
            assert everyone.allows(new)
            assert reader.lexical.search(bm25_tokens("code96"), everyone, 1)[0][0] == new.chunk_id
            assert reader.dense.search(vectors_for([new])[new.chunk_id], everyone, 1)[0][0] == new.chunk_id
            for seed in range(3):  # every kept chunk kept its vector
                vector = query_vector(seed)
                expected = cosine_ranking(second, vector, everyone)
                assert [c for c, _ in reader.dense.search(vector, everyone, 1000)] == [c for c, _ in expected]
        finally:
            reader.close()

    def test_an_empty_generation_serves_no_hits(self, deployment: Deployment) -> None:
        write(deployment, "gen-000001", [])
        reader = open_index_reader(deployment.settings)
        try:
            everyone = FILTERS["everyone"]
            assert reader.generation.chunks == [] and reader.documents() == {}
            assert reader.lexical.search(bm25_tokens("refund"), everyone, 10) == []
            assert reader.dense.search(query_vector(0), everyone, 10) == []
            legs = reader.search(
                LegsQuery(bm25_tokens("refund"), query_vector(0), everyone, n_lexical=5, n_dense=5, rrf_k=60)
            )
            assert legs.lexical == [] and legs.dense == [] and not legs.fused
        finally:
            reader.close()


class StoreContract(LexicalIndexContract, VectorStoreContract, ReaderContract, IndexWriterContract):
    """Every case, for one implementation."""
