"""Qdrant Edge: the Qdrant engine in-process, one shard per embedded generation (its ``edge/`` folder).

The point layout is the server's (``rag.stores.qdrant``): a dense vector ``dense``, the sparse BM25 vector ``bm25``
with Qdrant's IDF modifier, and the filter fields ``groups``/``effective_ord``/``expires_ord``/``tags_f`` with a
payload index each, plus ``chunk_id`` (the chunk itself lives in the generation's files, so the payload holds
nothing else). Searches are the server's too: each leg filtered inside the engine, and both legs with their RRF
fusion in one ``query_batch`` call.

A shard is written once, by ingestion, into the generation's staging folder: without a write-ahead log (the
generation is published by renaming its folder, after ``flush``), points upserted in batches (no per-point
commits), and for a generation that changes a few documents, a copy of the published shard with the changes
applied. Readers open the published shard in place: opening and searching it leaves its files' contents as they
were (a load rewrites two small JSON files with the same content, each by an atomic rename;
``tests/stores/test_embedded.py`` checks), and several processes may open it at once.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag.errors import IndexUnavailableError, IngestError, RetrievalError
from rag.stores import GenerationBuild, Hit, Legs, LegsQuery, PublishedGeneration, separate_legs
from rag.stores.bm25 import average_length
from rag.stores.qdrant import (
    DENSE,
    NO_TAGS,
    SPARSE,
    avgdl_drifted,
    bm25_term_weights,
    point_id,
    qdrant_rrf_k,
    query_term_counts,
)
from rag.types import FAR_FUTURE, FAR_PAST, Chunk, SearchFilter

FOLDER = "edge"  # the shard's folder inside a generation
UPSERT_BATCH = 1024
PAYLOAD_INDEXES = {
    "groups": "keyword",
    "tags_f": "keyword",
    "effective_ord": "integer",
    "expires_ord": "integer",
}


def shard_path(generation_folder: Path) -> Path:
    return Path(generation_folder) / FOLDER


def has_shard(generation_folder: Path) -> bool:
    return (shard_path(generation_folder) / "edge_config.json").exists()


# ----------------------------------------------------------------------------- point layout
def edge_config(dim: int) -> Any:
    """Cosine dense vectors and IDF-weighted sparse BM25; no WAL (the generation's rename publishes it); no
    HNSW graph (``indexing_threshold=0``: every search is exact, as the in-process matrix's is, and building
    the graph took 344 s for 100k points here); one search thread (the query path runs searches from several
    clients at once, on few cores)."""
    import qdrant_edge as qe

    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=0),
        wal_enabled=False,
        max_search_threads=1,
    )


def edge_filter(filt: SearchFilter) -> Any:
    """``rag.stores.qdrant.qdrant_filter`` in Edge's types: access groups, validity dates, tags."""
    import qdrant_edge as qe

    day = float(filt.as_of.toordinal())
    must: list[Any] = [
        qe.FieldCondition(key="groups", match=qe.MatchAny(any=sorted(filt.principal.readable_groups))),
        qe.FieldCondition(key="effective_ord", range=qe.RangeFloat(lte=day)),
        qe.FieldCondition(key="expires_ord", range=qe.RangeFloat(gte=day)),
    ]
    if filt.tags:
        must.append(qe.FieldCondition(key="tags_f", match=qe.MatchAny(any=sorted(filt.tags) + [NO_TAGS])))
    return qe.Filter(must=must)


def edge_point(chunk: Chunk, vector: np.ndarray, tokens: Sequence[str], avgdl: float) -> Any:
    import qdrant_edge as qe

    indices, values = bm25_term_weights(tokens, avgdl)
    return qe.Point(
        point_id(chunk.chunk_id),
        {
            DENSE: np.asarray(vector, dtype=np.float32).tolist(),
            SPARSE: qe.SparseVector(indices, values),
        },
        {
            "chunk_id": chunk.chunk_id,
            "groups": list(chunk.groups),
            "effective_ord": (chunk.effective or FAR_PAST).toordinal(),
            "expires_ord": (chunk.expires or FAR_FUTURE).toordinal(),
            "tags_f": list(chunk.tags) or [NO_TAGS],
        },
    )


# ----------------------------------------------------------------------------- reading
def open_shard(generation_folder: Path, generation: str) -> Any:
    import qdrant_edge as qe

    path = shard_path(generation_folder)
    if not has_shard(generation_folder):
        raise IndexUnavailableError(
            f"Index generation {generation} has no Qdrant Edge store (it was built for in-process BM25).",
            hint="Re-run `rag ingest` with RAG_LEXICAL_BACKEND=qdrant: it builds the store from the cached "
            "vectors, without embedding anything again.",
        )
    try:
        return qe.EdgeShard.load(str(path))
    except Exception as exc:
        raise IndexUnavailableError(
            f"Could not open index generation {generation}'s Qdrant Edge store: {exc}"
        ) from exc


def _hits(points: Sequence[Any]) -> list[Hit]:
    return [(p.payload["chunk_id"], float(p.score)) for p in points if p.payload]


def _run(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as exc:
        raise RetrievalError(
            f"{what} failed: {exc}", hint="Re-run `rag ingest` to rebuild the index."
        ) from exc


def _leg(shard: Any, query: Any, using: str, filt: SearchFilter, n: int) -> Any:
    import qdrant_edge as qe

    return qe.QueryRequest(
        limit=n,
        query=qe.Query.Nearest(query, using=using),
        filter=edge_filter(filt),
        with_payload=["chunk_id"],
    )


def _sparse(tokens: Sequence[str]) -> Any | None:
    import qdrant_edge as qe

    counts = query_term_counts(tokens)
    return qe.SparseVector(*counts) if counts is not None else None


def _dense(vector: np.ndarray) -> list[float]:
    return np.asarray(vector, dtype=np.float32).reshape(-1).tolist()  # type: ignore[no-any-return]


class EdgeLexical:
    """``LexicalIndex``: the sparse BM25 leg of a generation's Edge shard."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard

    def search(self, tokens: Sequence[str], filt: SearchFilter, n: int) -> list[Hit]:
        query = _sparse(tokens)
        if query is None or n <= 0:
            return []
        return _hits(
            _run(
                "Lexical search in Qdrant Edge",
                lambda: self.shard.query(_leg(self.shard, query, SPARSE, filt, n)),
            )
        )


class EdgeVectors:
    """``VectorStore``: the dense leg of a generation's Edge shard."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard

    def search(self, vector: np.ndarray, filt: SearchFilter, n: int) -> list[Hit]:
        if n <= 0:
            return []
        request = _leg(self.shard, _dense(vector), DENSE, filt, n)
        return _hits(_run("Dense search in Qdrant Edge", lambda: self.shard.query(request)))


class EdgeHybrid:
    """``HybridSearch``: both legs and their RRF fusion in one ``query_batch`` call (Qdrant scores a rank-r hit
    ``1 / (k - 1 + r)``, so the request passes ``k + 1``, as on a server)."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard

    def search(self, query: LegsQuery) -> Legs:
        import qdrant_edge as qe

        filt, n_lexical, n_dense = query.filt, query.n_lexical, query.n_dense
        sparse = _sparse(query.tokens)
        if sparse is None or n_lexical <= 0 or n_dense <= 0:  # one leg alone: the caller fuses
            return separate_legs(EdgeLexical(self.shard), EdgeVectors(self.shard), query)
        dense, flt = _dense(query.vector), edge_filter(filt)
        fusion: Any = qe.Fusion.Rrf(
            k=qdrant_rrf_k(query.rrf_k)
        )  # the stubs type Rrf apart from the Fusion it is
        requests = [
            _leg(self.shard, sparse, SPARSE, filt, n_lexical),
            _leg(self.shard, dense, DENSE, filt, n_dense),
        ]
        requests.append(
            qe.QueryRequest(
                limit=n_lexical + n_dense,  # the union of the legs: fusion drops nothing
                prefetches=[
                    qe.Prefetch(limit=n_lexical, query=qe.Query.Nearest(sparse, using=SPARSE), filter=flt),
                    qe.Prefetch(limit=n_dense, query=qe.Query.Nearest(dense, using=DENSE), filter=flt),
                ],
                query=fusion,
                filter=flt,
                with_payload=["chunk_id"],
            )
        )
        lexical, dense_hits, fused = _run(
            "Hybrid search in Qdrant Edge", lambda: self.shard.query_batch(qe.QueryBatchRequest(requests))
        )
        return Legs(_hits(lexical), _hits(dense_hits), _hits(fused))


# ----------------------------------------------------------------------------- writing
class EdgeWriter:
    """``IndexWriter`` for a generation's Edge shard.

    A generation starts from a copy of the published one's shard: the dropped points are deleted, the run's
    new points upserted, and Qdrant's optimizer vacuums a segment once a fifth of it is deleted. The shard is
    written from every chunk's vector instead (``GenerationBuild.all_vectors``) for the first generation, after
    a published generation without a shard, and when the average chunk length drifted so far that every sparse
    weight must be recomputed. Either way nothing is committed point by point: points go in batches of
    ``UPSERT_BATCH`` and one ``flush`` makes the shard durable.
    """

    def __init__(self, folder_of: Callable[[str], Path], *, required: bool = False) -> None:
        self.folder_of = folder_of  # a published generation's folder, by name
        self.required = required  # the reader searches the shard: a published generation without one is stale

    def is_stale(self, published: PublishedGeneration) -> bool:
        return self.required and not has_shard(self.folder_of(published.generation))

    def write(self, build: GenerationBuild) -> None:
        import qdrant_edge as qe

        avgdl = average_length(build.tokens)
        target = shard_path(build.folder)
        previous = build.previous
        incremental = (
            previous is not None and has_shard(previous) and not avgdl_drifted(build.previous_avgdl, avgdl)
        )
        try:
            if incremental:
                assert previous is not None
                shutil.copytree(shard_path(previous), target)
                shard = qe.EdgeShard.load(str(target))
                tokens = {c.chunk_id: t for c, t in zip(build.chunks, build.tokens, strict=True)}
                points = [(c, v, tokens[c.chunk_id]) for c, v in build.fresh]
            else:
                shard = qe.EdgeShard.create(str(target), edge_config(build.dim))
                for field, kind in PAYLOAD_INDEXES.items():
                    schema = (
                        qe.PayloadSchemaType.Keyword if kind == "keyword" else qe.PayloadSchemaType.Integer
                    )
                    shard.update(qe.UpdateOperation.create_field_index(field, schema))
                vectors = build.all_vectors()
                points = list(zip(build.chunks, vectors, build.tokens, strict=True))
            try:
                dropped: list[Any] = [point_id(cid) for cid in build.dropped] if incremental else []
                for start in range(0, len(dropped), UPSERT_BATCH):
                    shard.update(qe.UpdateOperation.delete_points(dropped[start : start + UPSERT_BATCH]))
                for start in range(0, len(points), UPSERT_BATCH):
                    batch = [edge_point(c, v, t, avgdl) for c, v, t in points[start : start + UPSERT_BATCH]]
                    shard.update(qe.UpdateOperation.upsert_points(batch))
                if incremental:
                    shard.optimize()
                shard.flush()
                expected, counted = len({c.chunk_id for c in build.chunks}), shard.info().points_count
            finally:
                shard.close()
            # the first load of a new shard completes its files (the persisted config gains its defaults, each
            # mutable tracker its empty journal); loading it once here publishes it in the state every later
            # load leaves unchanged, so readers can share it in place
            qe.EdgeShard.load(str(target)).close()
        except IngestError:
            raise
        except Exception as exc:
            raise IngestError(f"Could not write the Qdrant Edge store of {build.name}: {exc}") from exc
        if counted != expected:
            raise IngestError(
                f"The Qdrant Edge store of {build.name} holds {counted} points, expected {expected}; not publishing it."
            )

    def publish(self, generation: str) -> None:
        """The shard is inside the generation folder: publishing the folder published it."""

    def close(self) -> None:
        """Each write opens and closes its own shard."""


__all__ = [
    "FOLDER",
    "EdgeHybrid",
    "EdgeLexical",
    "EdgeVectors",
    "EdgeWriter",
    "edge_config",
    "edge_filter",
    "edge_point",
    "has_shard",
    "open_shard",
    "shard_path",
]
