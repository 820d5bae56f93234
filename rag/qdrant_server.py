"""Qdrant as the search engine for both legs: BM25 as sparse vectors, hybrid fusion in the Query API, and
blue/green collections on a Qdrant server.

Lexical search inside Qdrant: each chunk carries a sparse vector named ``bm25`` whose indices are stable term
ids (31 bits of a BLAKE2b hash of the ``rag.text.bm25_tokens`` token) and whose values are the BM25 term weights
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with rank-bm25's k1 and b. The collection declares the
vector with ``Modifier.IDF``, so Qdrant multiplies each query term (value = its count in the query) by its IDF at
query time. Qdrant's IDF is ``ln(1 + (N - df + 0.5) / (df + 0.5))`` where rank-bm25 uses ``ln((N - df + 0.5) /
(df + 0.5))`` floored at 0.25 x the mean IDF: the two agree on rare terms and differ on very common ones, so the
rankings are close but not identical (``benchmarks/lexical_parity.py`` measures how close). On a sharded server
each shard computes IDF over its own points; with hash-distributed points that is a small, random perturbation.

Hybrid: one ``query_batch_points`` call runs the sparse leg, the dense leg and the RRF fusion of the two (same
filter, same limits), so the trace keeps each leg's ranks and scores while fusion itself runs in Qdrant. Qdrant
scores a rank-r hit ``1 / (k - 1 + r)``; this project's ``rrf_fuse`` scores it ``1 / (k + r)``, so the request
passes ``k + 1`` and both give the same numbers.

Server writes are blue/green, like embedded generations: ingestion builds a new collection
``<qdrant_collection>-<generation>``, then moves the alias ``<qdrant_collection>`` to it in one
``update_collection_aliases`` call, then drops collections beyond the newest ``KEEP_COLLECTIONS``. Readers
follow the published generation (``CURRENT`` in the data directory that ingestion and the app share) and query
that generation's own collection, so a hit and the chunk it names always come from the same generation.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rag.config import Settings
from rag.errors import ConfigurationError, IndexUnavailableError, IngestError, RetrievalError
from rag.index import DENSE, Generation, IndexReader, chunk_payload, point_id, qdrant_filter
from rag.lexical import K1, B
from rag.types import Candidate, Chunk, SearchFilter

SPARSE = "bm25"
TERM_ID_MASK = (
    0x7FFF_FFFF  # 31 bits: Qdrant takes uint32 indices; staying below 2**31 keeps every client happy
)
AVGDL_DRIFT = 0.05  # re-weight every chunk's sparse vector when the corpus's avgdl moved more than this
KEEP_COLLECTIONS = 2
UPSERT_BATCH = 256
PAYLOAD_INDEXES: dict[str, str] = {
    "groups": "keyword",
    "effective_ord": "integer",
    "expires_ord": "integer",
    "tags_f": "keyword",
    "doc_id": "keyword",
}

Hit = tuple[str, float]  # (chunk_id, score), best first
LexicalBackend = Literal["bm25", "qdrant"]


# ----------------------------------------------------------------------------- sparse BM25 vectors
@lru_cache(maxsize=500_000)
def term_id(token: str) -> int:
    """A stable id for a token: the same on every machine and in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little") & TERM_ID_MASK


def average_length(corpus: Sequence[Sequence[str]]) -> float:
    """rank-bm25's avgdl: mean token count over every chunk of the generation."""
    return float(sum(len(t) for t in corpus) / len(corpus)) if corpus else 0.0


def avgdl_drifted(previous: float | None, current: float, tolerance: float = AVGDL_DRIFT) -> bool:
    """True when stored sparse weights (computed with ``previous``) are too stale for ``current``."""
    if previous is None or previous <= 0:
        return True
    return abs(current - previous) / previous > tolerance


def sparse_document(tokens: Sequence[str], avgdl: float, *, k1: float = K1, b: float = B) -> Any:
    """A chunk's BM25 term weights (without IDF: Qdrant's IDF modifier applies that at query time).

    Two tokens whose ids collide (about one pair in a 100k-term vocabulary) share an index: their weights add up.
    """
    from qdrant_client import models

    weights: dict[int, float] = {}
    dl = len(tokens)
    if dl and avgdl > 0:
        norm = k1 * (1 - b + b * dl / avgdl)
        for token, tf in Counter(tokens).items():
            tid = term_id(token)
            weights[tid] = weights.get(tid, 0.0) + tf * (k1 + 1) / (tf + norm)
    indices = sorted(weights)
    return models.SparseVector(indices=indices, values=[weights[i] for i in indices])


def sparse_query(tokens: Sequence[str]) -> Any | None:
    """Query term counts (rank-bm25 counts a repeated query term repeatedly); None for an empty query."""
    from qdrant_client import models

    counts: Counter[int] = Counter(term_id(t) for t in tokens)
    if not counts:
        return None
    indices = sorted(counts)
    return models.SparseVector(indices=indices, values=[float(counts[i]) for i in indices])


# ----------------------------------------------------------------------------- queries (embedded or server)
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


def lexical_search(
    client: Any, collection: str, tokens: Sequence[str], filt: SearchFilter, n: int
) -> list[Hit]:
    """BM25 inside Qdrant: the sparse leg alone, filtered like every other query."""
    query = sparse_query(tokens)
    if query is None:
        return []
    try:
        response = client.query_points(
            collection,
            query=query,
            using=SPARSE,
            query_filter=qdrant_filter(filt),
            limit=n,
            with_payload=["chunk_id"],
        )
    except Exception as exc:
        raise _failed("Lexical search in Qdrant", exc) from exc
    return _hits(response.points)


def dense_search(client: Any, collection: str, vector: np.ndarray, filt: SearchFilter, n: int) -> list[Hit]:
    try:
        response = client.query_points(
            collection,
            query=np.asarray(vector, dtype=np.float32).tolist(),
            using=DENSE,
            query_filter=qdrant_filter(filt),
            limit=n,
            with_payload=["chunk_id"],
        )
    except Exception as exc:
        raise _failed("Dense search", exc) from exc
    return _hits(response.points)


def hybrid_requests(
    tokens: Sequence[str], vector: np.ndarray, filt: SearchFilter, n_lexical: int, n_dense: int, rrf_k: int
) -> tuple[list[Any], bool]:
    """The batch: [sparse leg,] dense leg, and their RRF fusion; the bool says whether a sparse leg is present."""
    from qdrant_client import models

    qfilter = qdrant_filter(filt)
    dense_q = np.asarray(vector, dtype=np.float32).tolist()
    sparse_q = sparse_query(tokens)
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
            query=models.RrfQuery(rrf=models.Rrf(k=qdrant_rrf_k(rrf_k))),
            filter=qfilter,
            limit=n_lexical + n_dense,  # the union of the legs: fusion drops nothing
            with_payload=["chunk_id"],
        )
    )
    return requests, sparse_q is not None


def hybrid_search(
    client: Any,
    collection: str,
    tokens: Sequence[str],
    vector: np.ndarray,
    filt: SearchFilter,
    n_lexical: int,
    n_dense: int,
    rrf_k: int,
) -> tuple[list[Hit], list[Hit], list[Hit]]:
    """(lexical hits, dense hits, fused hits) from one ``query_batch_points`` round trip."""
    requests, has_sparse = hybrid_requests(tokens, vector, filt, n_lexical, n_dense, rrf_k)
    try:
        responses = client.query_batch_points(collection, requests=requests)
    except Exception as exc:
        raise _failed("Hybrid search in Qdrant", exc) from exc
    legs = [_hits(r.points) for r in responses]
    lexical = legs.pop(0) if has_sparse else []
    dense, fused = legs
    return lexical, dense, fused


def fused_candidates(
    lexical: Sequence[Hit],
    dense: Sequence[Hit],
    fused: Sequence[Hit],
    chunks: Mapping[str, Chunk],
    *,
    intent: int = 0,
) -> list[Candidate]:
    """Candidates in Qdrant's fused order, each keeping both legs' ranks and scores for the trace.

    The twin of ``rrf_fuse`` for fusion that ran inside Qdrant. Hits whose chunk is missing from ``chunks`` are
    skipped; the others keep their original ranks.
    """
    lex: dict[str, tuple[int, float]] = {}
    for rank, (cid, score) in enumerate(lexical, start=1):
        lex.setdefault(cid, (rank, score))
    den: dict[str, tuple[int, float]] = {}
    for rank, (cid, score) in enumerate(dense, start=1):
        den.setdefault(cid, (rank, score))
    out: list[Candidate] = []
    seen: set[str] = set()
    for cid, score in fused:
        chunk = chunks.get(cid)
        if chunk is None or cid in seen:
            continue
        seen.add(cid)
        bm25_rank, bm25_score = lex.get(cid, (None, None))
        dense_rank, dense_score = den.get(cid, (None, None))
        out.append(
            Candidate(
                chunk=chunk,
                bm25_rank=bm25_rank,
                bm25_score=bm25_score,
                dense_rank=dense_rank,
                dense_score=dense_score,
                fused_score=float(score),
                fused_rank=len(out) + 1,
                intents=(intent,),
            )
        )
    return out


def resolve_lexical_backend(settings: Settings) -> LexicalBackend:
    """'auto': in-process BM25 over an embedded index, Qdrant's sparse leg on a server."""
    if settings.lexical_backend == "auto":
        return "qdrant" if settings.qdrant_url else "bm25"
    return settings.lexical_backend


# ----------------------------------------------------------------------------- server connection
def connect(settings: Settings) -> Any:
    """A client for ``settings.qdrant_url``; configuration errors become a message the user can act on."""
    if not settings.qdrant_url:
        raise ConfigurationError(
            "No Qdrant server is configured.", hint="Set RAG_QDRANT_URL (e.g. http://qdrant-1:6333)."
        )
    from qdrant_client import QdrantClient

    try:
        return QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key, timeout=60)
    except Exception as exc:
        raise ConfigurationError(
            f"Bad Qdrant server URL {settings.qdrant_url!r}: {exc}",
            hint="RAG_QDRANT_URL looks like http://host:6333.",
        ) from exc


def collection_for(alias: str, generation: str) -> str:
    return f"{alias}-{generation}"


def _generation_number(alias: str, collection: str) -> int | None:
    match = re.fullmatch(re.escape(alias) + r"-gen-(\d+)", collection)
    return int(match.group(1)) if match else None


# ----------------------------------------------------------------------------- writing (blue/green)
class ServerIndexWriter:
    """Builds one collection per generation on a Qdrant server and switches the alias to it atomically."""

    def __init__(
        self, settings: Settings, client: Any | None = None, *, keep: int = KEEP_COLLECTIONS
    ) -> None:
        self.settings = settings
        self.alias = settings.qdrant_collection
        self.client = client if client is not None else connect(settings)
        self._owns_client = client is None
        self.keep = max(1, keep)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except IngestError:
            raise
        except Exception as exc:
            raise IngestError(
                f"Qdrant server: could not {what}: {exc}",
                hint=f"Check that the Qdrant cluster at {self.settings.qdrant_url} is up and healthy, then re-run.",
            ) from exc

    # -- what the server holds
    def alias_target(self) -> str | None:
        aliases = self._call("read the aliases", self.client.get_aliases).aliases
        return next((a.collection_name for a in aliases if a.alias_name == self.alias), None)

    def has_generation(self, generation: str) -> bool:
        """Whether the server holds this generation's collection (a new or replaced server needs a rebuild)."""
        return bool(
            self._call(
                "read the collections", self.client.collection_exists, collection_for(self.alias, generation)
            )
        )

    def generation_collections(self) -> list[str]:
        names = [c.name for c in self._call("list the collections", self.client.get_collections).collections]
        ours = [(n, _generation_number(self.alias, n)) for n in names]
        return [n for n, num in sorted(((n, num) for n, num in ours if num is not None), key=lambda x: x[1])]

    # -- build
    def build(
        self,
        generation: str,
        chunks: Sequence[Chunk],
        tokens: Sequence[Sequence[str]],
        vectors: Sequence[np.ndarray],
        dim: int,
    ) -> str:
        """Write every chunk of ``generation`` into a fresh collection; return its name. Nothing reads it yet."""
        from qdrant_client import models

        if not (len(chunks) == len(tokens) == len(vectors)):
            raise IngestError("Internal error: chunks, tokens and vectors differ in length.")
        s = self.settings
        name = collection_for(self.alias, generation)
        if (
            self._call("read the collections", self.client.collection_exists, self.alias)
            and self.alias_target() is None
        ):
            raise IngestError(
                f"A collection named {self.alias!r} exists on the Qdrant server, so it cannot become an alias.",
                hint="Delete or rename that collection, or set RAG_QDRANT_COLLECTION to another name.",
            )
        if self._call("read the collections", self.client.collection_exists, name):
            # left by a run that crashed before publishing (published generations never reuse a name)
            self._call("drop a half-built collection", self.client.delete_collection, name)
        self._call(
            "create the collection",
            self.client.create_collection,
            name,
            vectors_config={DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            shard_number=s.qdrant_shards,
            replication_factor=s.qdrant_replication,
            write_consistency_factor=s.qdrant_write_consistency,
        )
        kinds = {"keyword": models.PayloadSchemaType.KEYWORD, "integer": models.PayloadSchemaType.INTEGER}
        for field, kind in PAYLOAD_INDEXES.items():
            self._call(
                f"index the payload field {field}",
                self.client.create_payload_index,
                name,
                field_name=field,
                field_schema=kinds[kind],
                wait=True,
            )
        avgdl = average_length(tokens)
        for start in range(0, len(chunks), UPSERT_BATCH):
            points = [
                models.PointStruct(
                    id=point_id(c.chunk_id),
                    vector={
                        DENSE: np.asarray(v, dtype=np.float32).tolist(),
                        SPARSE: sparse_document(t, avgdl),
                    },
                    payload=chunk_payload(c),
                )
                for c, t, v in zip(
                    chunks[start : start + UPSERT_BATCH],
                    tokens[start : start + UPSERT_BATCH],
                    vectors[start : start + UPSERT_BATCH],
                    strict=True,
                )
            ]
            self._call("write points", self.client.upsert, name, points=points, wait=True)
        expected = len({c.chunk_id for c in chunks})
        counted = self._call("count points", self.client.count, name, exact=True).count
        if counted != expected:
            raise IngestError(
                f"Qdrant server: collection {name} holds {counted} points, expected {expected}; not publishing it.",
                hint="Check the cluster's health (all shard replicas active), then re-run `rag ingest`.",
            )
        return name

    # -- publish
    def publish(self, generation: str) -> None:
        """Point the alias at ``generation``'s collection (one atomic call), then drop old collections."""
        from qdrant_client import models

        name = collection_for(self.alias, generation)
        ops: list[Any] = []
        if self.alias_target() is not None:
            ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self.alias)))
        ops.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name=name, alias_name=self.alias)
            )
        )
        self._call("switch the alias", self.client.update_collection_aliases, change_aliases_operations=ops)
        self.collect_garbage(current=name)

    def ensure_published(self, generation: str) -> bool:
        """Switch the alias to ``generation`` if it points elsewhere; True when it had to."""
        if self.alias_target() == collection_for(self.alias, generation):
            return False
        self.publish(generation)
        return True

    def collect_garbage(self, current: str | None = None) -> list[str]:
        """Drop generation collections beyond the newest ``keep`` (never the alias's target)."""
        current = current or self.alias_target()
        ours = self.generation_collections()
        dropped = []
        for old in ours[: -self.keep]:
            if old != current:
                self._call("drop an old collection", self.client.delete_collection, old)
                dropped.append(old)
        return dropped


# ----------------------------------------------------------------------------- reading
class ServerGeneration(Generation):
    """A published generation whose vectors live on the Qdrant server (no private copy to make)."""

    def __init__(self, data_dir: Path, name: str, client: Any, collection: str) -> None:
        self.client = client
        self.collection = collection
        super().__init__(data_dir, name)

    def _open_vectors(self, folder: Path) -> None:
        try:
            exists = self.client.collection_exists(self.collection)
        except Exception as exc:
            raise IndexUnavailableError(f"Qdrant server unreachable: {exc}") from exc
        if not exists:
            raise IndexUnavailableError(
                f"The Qdrant server has no collection {self.collection} for the published generation {self.name}."
            )

    def close(self) -> None:
        """The client is the reader's, shared across generations: nothing to release here."""


class ServerIndexReader(IndexReader):
    """``IndexReader`` over a Qdrant server: chunks and manifest from the shared data directory, vectors from
    the generation's collection on the server."""

    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self.settings = settings
        self.client = client if client is not None else connect(settings)
        self._owns_client = client is None
        super().__init__(settings.data_dir)

    def _open_with_retry(self, name: str) -> Generation:
        last: Exception | None = None
        for attempt in range(3):
            try:
                return ServerGeneration(
                    self.data_dir, name, self.client, collection_for(self.settings.qdrant_collection, name)
                )
            except (FileNotFoundError, IndexUnavailableError) as exc:
                last = exc
                time.sleep(0.2 * attempt)
        raise IndexUnavailableError(
            f"Index generation {name} could not be opened: {last}",
            hint="Run `rag ingest` against this Qdrant server (RAG_QDRANT_URL) and data directory.",
        )

    def _qdrant_target(self) -> tuple[Any, str]:
        gen = self.generation
        return gen.client, getattr(
            gen, "collection", collection_for(self.settings.qdrant_collection, gen.name)
        )

    def search_dense(self, vector: np.ndarray, filt: SearchFilter, n: int) -> list[tuple[str, float]]:
        client, collection = self._qdrant_target()
        return dense_search(client, collection, vector, filt, n)

    def close(self) -> None:
        super().close()
        if self._owns_client:
            self.client.close()


def open_index_reader(settings: Settings) -> IndexReader:
    """The reader for these settings: a Qdrant server when ``qdrant_url`` is set, else embedded generations."""
    if settings.qdrant_url:
        return ServerIndexReader(settings)
    return IndexReader(settings.data_dir)


__all__ = [
    "SPARSE",
    "ServerIndexReader",
    "ServerIndexWriter",
    "average_length",
    "avgdl_drifted",
    "collection_for",
    "fused_candidates",
    "hybrid_search",
    "lexical_search",
    "open_index_reader",
    "resolve_lexical_backend",
    "sparse_document",
    "sparse_query",
    "term_id",
]
