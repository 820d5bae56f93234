"""Lexical search and fusion inside Qdrant (embedded mode here; the same calls run against a server).

Parity with rank-bm25, parity of the final evidence across lexical backends, filters on every Qdrant leg,
sparse weights that follow the corpus's average length, and the upgrade of an index built before the sparse leg.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from rank_bm25 import BM25Okapi

from ingest.indexer import ingest
from rag.config import load_settings
from rag.errors import RetrievalError
from rag.pipeline import Pipeline, PipelineOptions, Question
from rag.stages.retrieve import fused_candidates, rrf_fuse
from rag.stores import LegsQuery
from rag.stores.bm25 import K1, B, average_length
from rag.stores.index import (
    EmbeddedBackend,
    IndexReader,
    Manifest,
    current_generation,
    generation_dir,
    load_chunks,
)
from rag.stores.qdrant import (
    COLLECTION,
    DENSE,
    SPARSE,
    avgdl_drifted,
    point_id,
    sparse_document,
    sparse_query,
    term_id,
)
from rag.stores.qdrant_server import resolve_lexical_backend
from rag.text import bm25_tokens
from rag.types import Principal, SearchFilter

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = REPO / "ingest" / "sample" / "questions.jsonl"
TODAY = date(2026, 6, 1)
STAFF = Principal("alice", frozenset({"staff"}))
HR = Principal("hana", frozenset({"staff", "hr"}))
CANARY = "CANARY-HR-7731"


def sample_questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]


def question_filter(q: dict[str, Any]) -> SearchFilter:
    return SearchFilter(Principal(q.get("user", "alice"), frozenset(q.get("groups", ["staff"]))), TODAY)


@pytest.fixture(scope="module")
def reader(sample_data_dir: Path) -> IndexReader:
    """The sample corpus with lexical search and fusion inside (embedded) Qdrant."""
    r = IndexReader(sample_data_dir, EmbeddedBackend(lexical="qdrant"))
    yield r  # type: ignore[misc]
    r.close()


def hybrid(reader: IndexReader, tokens: list[str], vector: Any, filt: SearchFilter, n: int) -> Any:
    return reader.search(LegsQuery(tokens, vector, filt, n_lexical=n, n_dense=n, rrf_k=60))


# ----------------------------------------------------------------------------- sparse vectors
def test_term_ids_are_stable_31_bit_integers() -> None:
    assert term_id("refund") == term_id("refund")
    ids = {term_id(f"t{i}") for i in range(20_000)}
    assert all(0 <= i < 2**31 for i in ids)
    assert len(ids) >= 19_990  # collisions are rare at this vocabulary size
    # fixed across processes and machines (BLAKE2b, not Python's salted hash)
    assert (
        term_id("refund")
        == int.from_bytes(__import__("hashlib").blake2b(b"refund", digest_size=4).digest(), "little")
        & 0x7FFFFFFF
    )


def test_sparse_weights_are_rank_bm25_term_weights() -> None:
    corpus = [
        ["gift", "card", "refund", "refund"],
        ["travel", "book", "flight"],
        ["refund", "window", "day", "day", "day"],
    ]
    avgdl = average_length(corpus)
    assert avgdl == pytest.approx(4.0)
    vec = sparse_document(corpus[0], avgdl)
    assert vec.indices == sorted(vec.indices)
    weight = dict(zip(vec.indices, vec.values, strict=True))
    norm = K1 * (1 - B + B * 4 / avgdl)
    assert weight[term_id("refund")] == pytest.approx(2 * (K1 + 1) / (2 + norm))
    assert weight[term_id("gift")] == pytest.approx(1 * (K1 + 1) / (1 + norm))
    q = sparse_query(["refund", "refund", "day"])
    assert dict(zip(q.indices, q.values, strict=True)) == {term_id("refund"): 2.0, term_id("day"): 1.0}
    assert sparse_query([]) is None
    assert sparse_document([], avgdl).indices == []


def test_qdrant_scores_are_bm25_with_qdrant_idf() -> None:
    """The sparse leg scores sum(query count x Qdrant IDF x BM25 term weight): BM25 up to the IDF formula."""
    from qdrant_client import QdrantClient, models

    corpus = [
        bm25_tokens(t)
        for t in (
            "Gift cards are not refundable.",
            "Customers may return items within 45 days.",
            "Refunds go to the original payment method within 10 days.",
            "Book flights 14 days ahead.",
        )
    ]
    avgdl = average_length(corpus)
    client = QdrantClient(":memory:")
    client.create_collection(
        "c",
        vectors_config={},
        sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    client.upsert(
        "c",
        [models.PointStruct(id=i, vector={SPARSE: sparse_document(t, avgdl)}) for i, t in enumerate(corpus)],
    )
    query = bm25_tokens("refund within days")
    got = {
        p.id: p.score
        for p in client.query_points("c", query=sparse_query(query), using=SPARSE, limit=10).points
    }
    n = len(corpus)
    for i, doc in enumerate(corpus):
        tf, dl = Counter(doc), len(doc)
        expected = 0.0
        for term, qtf in Counter(query).items():
            if term in tf:
                df = sum(term in d for d in corpus)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                expected += qtf * idf * tf[term] * (K1 + 1) / (tf[term] + K1 * (1 - B + B * dl / avgdl))
        assert got.get(i, 0.0) == pytest.approx(expected, rel=1e-5)


def test_avgdl_drift_threshold() -> None:
    assert avgdl_drifted(None, 40.0)
    assert not avgdl_drifted(40.0, 41.9)
    assert avgdl_drifted(40.0, 42.1) and avgdl_drifted(40.0, 37.9)


def test_auto_backend_follows_the_deployment(tmp_path: Path) -> None:
    assert resolve_lexical_backend(load_settings(data_dir=tmp_path)) == "bm25"
    assert (
        resolve_lexical_backend(load_settings(data_dir=tmp_path, qdrant_url="http://qdrant-1:6333"))
        == "qdrant"
    )
    assert resolve_lexical_backend(load_settings(data_dir=tmp_path, lexical_backend="qdrant")) == "qdrant"
    assert (
        resolve_lexical_backend(
            load_settings(data_dir=tmp_path, qdrant_url="http://q:6333", lexical_backend="bm25")
        )
        == "bm25"
    )


# ----------------------------------------------------------------------------- parity on the sample corpus
def rank_bm25_top(reader: IndexReader, tokens: list[str], filt: SearchFilter, n: int) -> list[str]:
    """rank-bm25 itself over the generation's chunk tokens, filtered the way the stores filter."""
    gen = reader.generation
    _chunks, corpus = load_chunks(generation_dir(reader.data_dir, gen.name))
    scores = BM25Okapi(corpus).get_scores(tokens)
    allowed = gen.masks.mask(filt)
    order = sorted(
        (i for i in range(len(scores)) if allowed[i] and scores[i] > 0), key=lambda i: (-scores[i], i)
    )
    return [gen.chunks[i].chunk_id for i in order[:n]]


def test_sparse_leg_agrees_with_rank_bm25(reader: IndexReader) -> None:
    overlaps = []
    for q in sample_questions():
        tokens, filt = bm25_tokens(q["question"]), question_filter(q)
        reference = rank_bm25_top(reader, tokens, filt, 10)
        got = [cid for cid, _ in reader.lexical.search(tokens, filt, 10)]
        if reference:
            overlaps.append(len(set(reference) & set(got)) / len(reference))
            assert got[0] in reference[:3], q["id"]  # the best lexical hit stays near the top
    mean = sum(overlaps) / len(overlaps)
    print(
        f"\nsparse-BM25 vs rank-bm25 overlap@10 on {len(overlaps)} sample questions: mean {mean:.3f}, min {min(overlaps):.2f}"
    )
    assert mean >= 0.85
    assert min(overlaps) >= 0.6


def test_fusion_in_qdrant_equals_rrf_fuse(reader: IndexReader, embedder) -> None:  # type: ignore[no-untyped-def]
    questions = sample_questions()
    vectors = embedder.embed_queries([q["question"] for q in questions])
    for q, vector in zip(questions, vectors, strict=True):
        tokens, filt = bm25_tokens(q["question"]), question_filter(q)
        lexical, dense, fused = hybrid(reader, tokens, vector, filt, 40)
        assert fused is not None
        assert lexical == reader.lexical.search(tokens, filt, 40)
        assert [c for c, _ in dense] == [c for c, _ in reader.dense.search(vector, filt, 40)]
        chunks = {cid: reader.get(cid) for cid, _ in [*lexical, *dense]}
        expected = {c.chunk_id: c.fused_score for c in rrf_fuse(lexical, dense, chunks, k=60)}
        assert {cid for cid, _ in fused} == set(expected)
        for cid, score in fused:
            assert score == pytest.approx(expected[cid], abs=1e-7)
        cands = fused_candidates(lexical, dense, fused, chunks)
        assert [c.fused_rank for c in cands] == list(range(1, len(cands) + 1))
        lex_rank = {cid: r for r, (cid, _) in enumerate(lexical, 1)}
        assert all(c.bm25_rank == lex_rank.get(c.chunk_id) for c in cands)


def _evidence(pipeline: Pipeline, q: dict[str, Any]) -> list[str]:
    result = pipeline.ask(
        Question(q["question"], question_filter(q).principal, as_of=TODAY), PipelineOptions()
    )
    return [e.candidate.chunk_id for e in result.evidence]


@pytest.mark.slow
def test_final_evidence_is_the_same_with_either_lexical_backend(sample_data_dir: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    runs = {}
    for backend in ("bm25", "qdrant"):
        settings = load_settings(data_dir=sample_data_dir, lexical_backend=backend, reranker="none")
        pipeline = Pipeline(settings, embedder=embedder)
        try:
            runs[backend] = [_evidence(pipeline, q) for q in sample_questions()]
            r = pipeline.ask(
                Question("How many days do customers have to return an item?", STAFF, as_of=TODAY)
            )
            assert next(s for s in r.stages if s.name == "retrieve").detail["lexical_backend"] == backend
        finally:
            pipeline.reader.close()
    same = sum(a == b for a, b in zip(runs["bm25"], runs["qdrant"], strict=True))
    same_set = sum(set(a) == set(b) for a, b in zip(runs["bm25"], runs["qdrant"], strict=True))
    jaccard = [
        len(set(a) & set(b)) / max(1, len(set(a) | set(b)))
        for a, b in zip(runs["bm25"], runs["qdrant"], strict=True)
    ]
    n = len(runs["bm25"])
    print(
        f"\nfinal evidence, bm25 vs qdrant lexical backend, {n} sample questions: identical order {same}/{n}, "
        f"same set {same_set}/{n}, mean Jaccard {sum(jaccard) / n:.3f}"
    )
    # measured 21/30 identical, 24/30 same set, Jaccard 0.93 (reranker none: fused order decides the evidence);
    # the legs differ only by Qdrant's IDF formula, which shifts a few lexical ranks
    assert same_set / n >= 0.7
    assert sum(jaccard) / n >= 0.85


# ----------------------------------------------------------------------------- access filters
def test_restricted_canary_never_leaves_qdrant_for_an_outsider(reader: IndexReader, embedder) -> None:  # type: ignore[no-untyped-def]
    questions = [
        f"What is {CANARY}?",
        "What are the salary bands for level L3?",
        "What internal reference code do the pay grades use?",
    ]
    hr_hits: set[str] = set()
    for text in questions:
        tokens, vector = bm25_tokens(text), embedder.embed_queries([text])[0]
        for who, sink in ((STAFF, None), (HR, hr_hits)):
            filt = SearchFilter(who, TODAY)
            hits = reader.lexical.search(tokens, filt, 100)
            lexical, dense, fused = hybrid(reader, tokens, vector, filt, 100)
            assert fused is not None
            texts = [reader.get(cid).text for cid, _ in [*hits, *lexical, *dense, *fused]]  # type: ignore[union-attr]
            if sink is None:
                assert not any(CANARY in t for t in texts), text
                assert all(
                    "hr" not in reader.get(cid).groups or "staff" in reader.get(cid).groups  # type: ignore[union-attr]
                    for cid, _ in [*hits, *fused]
                )
                assert all(filt.allows(reader.get(cid)) for cid, _ in [*hits, *fused])  # type: ignore[arg-type]
            else:
                sink.update(t for t in texts if CANARY in t)
    assert hr_hits, "the canary is findable by a member of hr (the filter, not the index, keeps it out)"


def test_validity_dates_hold_in_the_sparse_leg(reader: IndexReader) -> None:
    tokens = bm25_tokens("How many days a week can I work remotely during COVID?")
    for as_of in (TODAY, date(2021, 6, 1)):
        filt = SearchFilter(STAFF, as_of)
        for cid, _ in reader.lexical.search(tokens, filt, 50):
            assert filt.allows(reader.get(cid))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- incremental generations
def _stored_sparse(data_dir: Path, chunk_id: str) -> dict[int, float]:
    """The sparse vector the published generation's Qdrant Edge shard holds for the chunk."""
    from rag.stores.edge import open_shard

    name = current_generation(data_dir)
    shard = open_shard(generation_dir(data_dir, name), name)  # type: ignore[arg-type]
    try:
        (record,) = shard.retrieve([point_id(chunk_id)], with_payload=False, with_vector=[SPARSE])
        vec = record.vector[SPARSE]
        return dict(zip(vec.indices, vec.values, strict=True))
    finally:
        shard.close()


def _expected_sparse(tokens: list[str], avgdl: float) -> dict[int, float]:
    vec = sparse_document(tokens, avgdl)
    return dict(zip(vec.indices, vec.values, strict=True))


def test_sparse_weights_follow_avgdl_across_incremental_generations(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    docs.mkdir()
    (docs / "refunds.md").write_text("# Refunds\n\nCustomers may return items within 45 days of delivery.\n")
    (docs / "leave.md").write_text("# Leave\n\nEmployees accrue paid leave every month of service.\n")
    settings = load_settings(data_dir=data)
    ingest([str(docs)], settings, embedder=embedder)
    first = Manifest.load(generation_dir(data, current_generation(data)))  # type: ignore[arg-type]
    chunks, tokens = load_chunks(generation_dir(data, first.generation))
    refund = next(i for i, c in enumerate(chunks) if "return items" in c.text)
    rid = chunks[refund].chunk_id
    assert first.bm25_avgdl == pytest.approx(average_length(tokens))
    assert _stored_sparse(data, rid) == pytest.approx(_expected_sparse(tokens[refund], first.bm25_avgdl))

    # a small change: avgdl moves less than 5%, kept chunks keep their weights
    (docs / "leave.md").write_text("# Leave\n\nEmployees accrue paid leave per month of service.\n")
    ingest([str(docs)], settings, embedder=embedder)
    second = Manifest.load(generation_dir(data, current_generation(data)))  # type: ignore[arg-type]
    assert second.generation != first.generation
    assert not avgdl_drifted(first.bm25_avgdl, second.bm25_avgdl)  # type: ignore[arg-type]
    assert _stored_sparse(data, rid) == pytest.approx(_expected_sparse(tokens[refund], first.bm25_avgdl))

    # a long document: avgdl jumps, every kept chunk is re-weighted with the new avgdl
    words = " ".join(f"clause{i} applies to contractors and vendors" for i in range(25))
    (docs / "vendors.md").write_text(f"# Vendors\n\n{words}.\n")
    ingest([str(docs)], settings, embedder=embedder)
    third = Manifest.load(generation_dir(data, current_generation(data)))  # type: ignore[arg-type]
    assert avgdl_drifted(second.bm25_avgdl, third.bm25_avgdl)  # type: ignore[arg-type]
    assert _stored_sparse(data, rid) == pytest.approx(_expected_sparse(tokens[refund], third.bm25_avgdl))  # type: ignore[arg-type]


def test_an_index_without_the_sparse_leg_is_upgraded_by_the_next_ingest(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """A generation written before this change (dense-only collection, no bm25_avgdl) is upgraded in place of a
    no-op run by a deployment that searches the sparse leg (it gets a Qdrant Edge shard); until then the Qdrant
    lexical leg says what to do instead of failing obscurely."""
    from qdrant_client import QdrantClient, models

    docs, data = tmp_path / "docs", tmp_path / "data"
    docs.mkdir()
    (docs / "refunds.md").write_text(
        "# Refunds\n\nGift cards are not refundable.\n\nReturns within 45 days.\n"
    )
    settings = load_settings(data_dir=data)
    ingest([str(docs)], settings, embedder=embedder)
    gen = generation_dir(data, current_generation(data))  # type: ignore[arg-type]
    # make it look like an old generation: the previous release's layout, its collection dense-only
    from tests.stores.legacy import to_previous_release

    to_previous_release(gen)
    client = QdrantClient(path=str(gen / "qdrant"))
    points, _ = client.scroll(COLLECTION, limit=1000, with_payload=True, with_vectors=[DENSE])
    dim = len(points[0].vector[DENSE])
    client.delete_collection(COLLECTION)
    client.create_collection(
        COLLECTION, vectors_config={DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)}
    )
    client.upsert(
        COLLECTION,
        [models.PointStruct(id=p.id, vector={DENSE: p.vector[DENSE]}, payload=p.payload) for p in points],
    )
    client.close()
    manifest = json.loads((gen / "manifest.json").read_text())
    del manifest["bm25_avgdl"]
    (gen / "manifest.json").write_text(json.dumps(manifest))

    filt = SearchFilter(STAFF, TODAY)
    old = IndexReader(data, EmbeddedBackend(lexical="qdrant"))
    assert old.generation.manifest.bm25_avgdl is None  # old manifests still load
    with pytest.raises(RetrievalError) as err:
        old.lexical.search(bm25_tokens("gift card refund"), filt, 5)
    assert "rag ingest" in (err.value.hint or "")
    old.close()

    settings = load_settings(data_dir=data, lexical_backend="qdrant")
    report = ingest([str(docs)], settings, embedder=embedder)
    assert report.published and report.embedded == 0
    new = IndexReader(data, EmbeddedBackend(lexical="qdrant"))
    try:
        hits = new.lexical.search(bm25_tokens("gift card refund"), filt, 5)
        assert hits and "Gift cards" in new.get(hits[0][0]).text  # type: ignore[union-attr]
        assert new.generation.manifest.bm25_avgdl is not None
    finally:
        new.close()
    again = ingest([str(docs)], settings, embedder=embedder)
    assert not again.published  # once upgraded, an unchanged run writes nothing again
