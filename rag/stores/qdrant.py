"""Qdrant as a store through qdrant-client: the point layout, both legs and their fusion.

Every chunk is one point (id derived from its chunk id) carrying a dense vector ``dense``, a sparse vector
``bm25`` and the chunk as payload, with the filter fields ``effective_ord``/``expires_ord``/``tags_f``. These calls
run against a server (``rag.stores.qdrant_server``) and against the embedded qdrant-client store (a ``qdrant/`` folder)
that generations of the previous release carry, which readers still serve; embedded generations are now
written for Qdrant Edge (``rag.stores.edge``, the same layout and searches in the engine's own types).

Lexical search inside Qdrant: the sparse vector's indices are stable term ids (31 bits of a BLAKE2b hash of the
``rag.text.bm25_tokens`` token) and its values the BM25 term weights ``tf * (k1 + 1) / (tf + k1 * (1 - b + b *
dl / avgdl))`` with rank-bm25's k1 and b. The collection declares the vector with ``Modifier.IDF``, so Qdrant
multiplies each query term (value = its count in the query) by its IDF at query time. Qdrant's IDF is ``ln(1 +
(N - df + 0.5) / (df + 0.5))`` where rank-bm25 uses ``ln((N - df + 0.5) / (df + 0.5))`` floored at 0.25 x the
mean IDF: the two agree on rare terms and differ on very common ones, so the rankings are close but not
identical (``benchmarks/lexical_parity.py`` measures how close). On a sharded server each shard computes IDF
over its own points; with hash-distributed points that is a small, random perturbation.

Hybrid: one ``query_batch_points`` call runs the sparse leg, the dense leg and the RRF fusion of the two (same
filter, same limits), so the trace keeps each leg's ranks and scores while fusion itself runs in Qdrant. Qdrant
scores a rank-r hit ``1 / (k - 1 + r)``; this project's ``rrf_fuse`` scores it ``1 / (k + r)``, so the request
passes ``k + 1`` and both give the same numbers.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from rag.errors import IndexUnavailableError, RetrievalError
from rag.stores import Hit, Legs, LegsQuery, chunk_to_dict, separate_legs
from rag.stores.bm25 import K1, B
from rag.types import FAR_FUTURE, FAR_PAST, Chunk, SearchFilter

COLLECTION = "chunks"  # the collection inside a generation's ``qdrant/`` folder (the previous release)
LEGACY_FOLDER = "qdrant"
DENSE = "dense"
SPARSE = "bm25"
NO_TAGS = "__none__"
TERM_ID_MASK = (
    0x7FFF_FFFF  # 31 bits: Qdrant takes uint32 indices; staying below 2**31 keeps every client happy
)
AVGDL_DRIFT = 0.05  # re-weight every chunk's sparse vector when the corpus's avgdl moved more than this


# ----------------------------------------------------------------------------- point layout
def point_id(chunk_id: str) -> str:
    """Qdrant wants an unsigned int or a UUID: derive a UUID from the content-derived chunk id."""
    return str(uuid.UUID(hex=(chunk_id + "0" * 32)[:32]))


def chunk_payload(chunk: Chunk) -> dict[str, Any]:
    payload = chunk_to_dict(chunk)
    payload["effective_ord"] = (chunk.effective or FAR_PAST).toordinal()
    payload["expires_ord"] = (chunk.expires or FAR_FUTURE).toordinal()
    payload["tags_f"] = list(chunk.tags) or [NO_TAGS]
    return payload


def qdrant_filter(filt: SearchFilter) -> Any:
    """The store-side twin of ``SearchFilter.allows``: access groups, validity dates, tags."""
    from qdrant_client import models

    day = filt.as_of.toordinal()
    must: list[Any] = [
        models.FieldCondition(
            key="groups", match=models.MatchAny(any=sorted(filt.principal.readable_groups))
        ),
        models.FieldCondition(key="effective_ord", range=models.Range(lte=day)),
        models.FieldCondition(key="expires_ord", range=models.Range(gte=day)),
    ]
    if filt.tags:
        must.append(
            models.FieldCondition(key="tags_f", match=models.MatchAny(any=sorted(filt.tags) + [NO_TAGS]))
        )
    return models.Filter(must=must)


# ----------------------------------------------------------------------------- sparse BM25 vectors
@lru_cache(maxsize=500_000)
def term_id(token: str) -> int:
    """A stable id for a token: the same on every machine and in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little") & TERM_ID_MASK


def avgdl_drifted(previous: float | None, current: float, tolerance: float = AVGDL_DRIFT) -> bool:
    """True when stored sparse weights (computed with ``previous``) are too stale for ``current``."""
    if previous is None or previous <= 0:
        return True
    return abs(current - previous) / previous > tolerance


def bm25_term_weights(
    tokens: Sequence[str], avgdl: float, *, k1: float = K1, b: float = B
) -> tuple[list[int], list[float]]:
    """A chunk's BM25 term weights as (sorted term ids, weights), without IDF (Qdrant's IDF modifier applies
    that at query time). Two tokens whose ids collide (about one pair in a 100k-term vocabulary) share an
    index: their weights add up."""
    weights: dict[int, float] = {}
    dl = len(tokens)
    if dl and avgdl > 0:
        norm = k1 * (1 - b + b * dl / avgdl)
        for token, tf in Counter(tokens).items():
            tid = term_id(token)
            weights[tid] = weights.get(tid, 0.0) + tf * (k1 + 1) / (tf + norm)
    indices = sorted(weights)
    return indices, [weights[i] for i in indices]


def query_term_counts(tokens: Sequence[str]) -> tuple[list[int], list[float]] | None:
    """Query term counts as (sorted term ids, counts): rank-bm25 counts a repeated query term repeatedly. None
    for an empty query."""
    counts: Counter[int] = Counter(term_id(t) for t in tokens)
    if not counts:
        return None
    indices = sorted(counts)
    return indices, [float(counts[i]) for i in indices]


def sparse_document(tokens: Sequence[str], avgdl: float, *, k1: float = K1, b: float = B) -> Any:
    """``bm25_term_weights`` as a qdrant-client sparse vector."""
    from qdrant_client import models

    indices, values = bm25_term_weights(tokens, avgdl, k1=k1, b=b)
    return models.SparseVector(indices=indices, values=values)


def sparse_query(tokens: Sequence[str]) -> Any | None:
    """``query_term_counts`` as a qdrant-client sparse vector; None for an empty query."""
    from qdrant_client import models

    counts = query_term_counts(tokens)
    if counts is None:
        return None
    return models.SparseVector(indices=counts[0], values=counts[1])


def point(chunk: Chunk, vector: np.ndarray, tokens: Sequence[str], avgdl: float) -> Any:
    """The chunk's point: both vectors and the filterable payload."""
    from qdrant_client import models

    return models.PointStruct(
        id=point_id(chunk.chunk_id),
        vector={
            DENSE: np.asarray(vector, dtype=np.float32).tolist(),
            SPARSE: sparse_document(tokens, avgdl),
        },
        payload=chunk_payload(chunk),
    )


def collection_config(dim: int) -> dict[str, Any]:
    """``create_collection`` arguments for the point layout: cosine dense vectors, IDF-weighted sparse BM25."""
    from qdrant_client import models

    return {
        "vectors_config": {DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)},
        "sparse_vectors_config": {SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    }


# ----------------------------------------------------------------------------- queries
def qdrant_rrf_k(rrf_k: int) -> int:
    """The Qdrant ``Rrf.k`` that reproduces ``rrf_fuse``'s ``1 / (rrf_k + rank)``."""
    return rrf_k + 1


def _hits(points: Sequence[Any]) -> list[Hit]:
    return [(p.payload["chunk_id"], float(p.score)) for p in points if p.payload]


def _failed(leg: str, exc: Exception) -> RetrievalError:
    text = str(exc)
    if SPARSE in text and ("vector name" in text.lower() or "not exist" in text.lower()):
        return RetrievalError(
            f"{leg} failed: this index has no '{SPARSE}' sparse vectors (it was built before lexical search "
            "could run in Qdrant).",
            hint="Re-run `rag ingest` (it upgrades the index), or set RAG_LEXICAL_BACKEND=bm25.",
        )
    return RetrievalError(
        f"{leg} failed: {exc}", hint="Check that Qdrant is reachable; re-run `rag ingest` if needed."
    )


def _leg(
    client: Any, collection: str, query: Any, using: str, filt: SearchFilter, n: int, what: str
) -> list[Hit]:
    """One leg alone: ``query`` against the ``using`` vectors, filtered like every other query."""
    try:
        response = client.query_points(
            collection,
            query=query,
            using=using,
            query_filter=qdrant_filter(filt),
            limit=n,
            with_payload=["chunk_id"],
        )
    except Exception as exc:
        raise _failed(what, exc) from exc
    return _hits(response.points)


def lexical_search(
    client: Any, collection: str, tokens: Sequence[str], filt: SearchFilter, n: int
) -> list[Hit]:
    """BM25 inside Qdrant: the sparse leg alone, filtered like every other query."""
    query = sparse_query(tokens)
    if query is None or n <= 0:
        return []
    return _leg(client, collection, query, SPARSE, filt, n, "Lexical search in Qdrant")


def dense_search(client: Any, collection: str, vector: np.ndarray, filt: SearchFilter, n: int) -> list[Hit]:
    if n <= 0:
        return []
    query = np.asarray(vector, dtype=np.float32).tolist()
    return _leg(client, collection, query, DENSE, filt, n, "Dense search")


def hybrid_requests(query: LegsQuery) -> tuple[list[Any], bool]:
    """The batch: [sparse leg,] dense leg, and their RRF fusion; the bool says whether a sparse leg is present."""
    from qdrant_client import models

    n_lexical, n_dense = query.n_lexical, query.n_dense
    qfilter = qdrant_filter(query.filt)
    dense_q = np.asarray(query.vector, dtype=np.float32).tolist()
    sparse_q = sparse_query(query.tokens)
    legs = [models.Prefetch(query=dense_q, using=DENSE, filter=qfilter, limit=n_dense)]
    requests = [
        models.QueryRequest(
            query=dense_q, using=DENSE, filter=qfilter, limit=n_dense, with_payload=["chunk_id"]
        )
    ]
    if sparse_q is not None:
        legs.insert(0, models.Prefetch(query=sparse_q, using=SPARSE, filter=qfilter, limit=n_lexical))
        requests.insert(
            0,
            models.QueryRequest(
                query=sparse_q, using=SPARSE, filter=qfilter, limit=n_lexical, with_payload=["chunk_id"]
            ),
        )
    requests.append(
        models.QueryRequest(
            prefetch=legs,
            query=models.RrfQuery(rrf=models.Rrf(k=qdrant_rrf_k(query.rrf_k))),
            filter=qfilter,
            limit=n_lexical + n_dense,  # the union of the legs: fusion drops nothing
            with_payload=["chunk_id"],
        )
    )
    return requests, sparse_q is not None


def hybrid_search(client: Any, collection: str, query: LegsQuery) -> tuple[list[Hit], list[Hit], list[Hit]]:
    """(lexical hits, dense hits, fused hits) from one ``query_batch_points`` round trip."""
    requests, has_sparse = hybrid_requests(query)
    try:
        responses = client.query_batch_points(collection, requests=requests)
    except Exception as exc:
        raise _failed("Hybrid search in Qdrant", exc) from exc
    legs = [_hits(r.points) for r in responses]
    lexical = legs.pop(0) if has_sparse else []
    dense, fused = legs
    return lexical, dense, fused


class QdrantLexical:
    """``LexicalIndex``: the sparse BM25 leg of a Qdrant collection."""

    def __init__(self, client: Any, collection: str) -> None:
        self.client, self.collection = client, collection

    def search(self, tokens: Sequence[str], filt: SearchFilter, n: int) -> list[Hit]:
        return lexical_search(self.client, self.collection, tokens, filt, n)


class QdrantVectors:
    """``VectorStore``: the dense leg of a Qdrant collection."""

    def __init__(self, client: Any, collection: str) -> None:
        self.client, self.collection = client, collection

    def search(self, vector: np.ndarray, filt: SearchFilter, n: int) -> list[Hit]:
        return dense_search(self.client, self.collection, vector, filt, n)


class QdrantHybrid:
    """``HybridSearch``: both legs and Qdrant's RRF fusion of them in one round trip."""

    def __init__(self, client: Any, collection: str) -> None:
        self.client, self.collection = client, collection

    def search(self, query: LegsQuery) -> Legs:
        if query.n_lexical <= 0 or query.n_dense <= 0:  # Qdrant takes no zero limit: the caller fuses
            return separate_legs(
                QdrantLexical(self.client, self.collection),
                QdrantVectors(self.client, self.collection),
                query,
            )
        return Legs(*hybrid_search(self.client, self.collection, query))


# ----------------------------------------------------------------------------- generations of the previous release
def read_dense_matrix(client: Any, row_of: dict[str, int], dim: int, generation: str) -> np.ndarray:
    """The dense vectors of a generation written by the previous release (an embedded qdrant-client store in its
    ``qdrant/`` folder, ``LEGACY_FOLDER``) as one L2-normalised matrix in chunk order (row ``row_of[id]``)."""
    matrix = np.zeros((len(row_of), dim), dtype=np.float32)
    seen = 0
    offset = None
    while True:
        points, offset = client.scroll(
            COLLECTION, limit=4096, offset=offset, with_payload=["chunk_id"], with_vectors=[DENSE]
        )
        for p in points:
            i = row_of.get((p.payload or {}).get("chunk_id", ""))
            vector = p.vector.get(DENSE) if isinstance(p.vector, dict) else p.vector
            if i is not None and isinstance(vector, list):
                matrix[i] = np.asarray(vector, dtype=np.float32)
                seen += 1
        if offset is None:
            break
    if seen != len(row_of):
        raise IndexUnavailableError(
            f"Index generation {generation} has {seen} dense vectors for {len(row_of)} chunks.",
            hint="Re-run `rag ingest` to rebuild the index.",
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)
