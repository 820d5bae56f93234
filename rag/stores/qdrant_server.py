"""Qdrant server: blue/green collections written by ingestion, and the store backend that reads them.

The point layout and the searches (dense, sparse BM25 and their fusion in one Query API call) are the ones an
embedded generation uses (``rag.stores.qdrant``); here they run against the server's collection of the
published generation.

Server writes are blue/green, like embedded generations: ingestion builds a new collection
``<qdrant_collection>-<generation>``, then moves the alias ``<qdrant_collection>`` to it in one
``update_collection_aliases`` call, then drops collections beyond the newest ``KEEP_COLLECTIONS``. Readers
follow the published generation (``CURRENT`` in the data directory that ingestion and the app share) and query
that generation's own collection, so a hit and the chunk it names always come from the same generation.

``open_index_reader`` and ``open_index_writers`` pick the embedded generation or the server from the settings:
the only place that decides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from rag.config import Settings
from rag.errors import ConfigurationError, IndexUnavailableError, IngestError
from rag.stores import GenerationBuild, IndexWriter, PublishedGeneration, Stores
from rag.stores.bm25 import average_length
from rag.stores.edge import EdgeWriter
from rag.stores.index import EmbeddedBackend, Generation, IndexReader, LexicalBackend, generation_dir
from rag.stores.memory import Bm25Writer, MatrixWriter
from rag.stores.qdrant import (
    QdrantHybrid,
    QdrantLexical,
    QdrantVectors,
    collection_config,
    point,
)
from rag.types import Chunk

KEEP_COLLECTIONS = 2
UPSERT_BATCH = 256
PAYLOAD_INDEXES: dict[str, str] = {
    "groups": "keyword",
    "effective_ord": "integer",
    "expires_ord": "integer",
    "tags_f": "keyword",
    "doc_id": "keyword",
}


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
        vectors: Sequence[np.ndarray] | np.ndarray,
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
            **collection_config(dim),
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
                point(c, v, t, avgdl)
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

    # -- IndexWriter
    def is_stale(self, published: PublishedGeneration) -> bool:
        """A new or replaced server lacks the published generation's collection: rebuild it there."""
        return not self.has_generation(published.generation)

    def write(self, build: GenerationBuild) -> None:
        """Every chunk of the generation into its own collection (vectors from the cache: ``all_vectors``)."""
        self.build(build.name, build.chunks, build.tokens, build.all_vectors(), build.dim)

    def publish(self, generation: str) -> None:
        """Point the alias at ``generation``'s collection if it points elsewhere (see ``ensure_published``)."""
        self.ensure_published(generation)

    # -- publish
    def switch_alias(self, generation: str) -> None:
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
        self.switch_alias(generation)
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
class ServerBackend:
    """``StoreBackend`` over a Qdrant server: each generation's own collection (checked when the reader switches
    to it), its dense leg, and its sparse leg and fusion (``"qdrant"``) or the generation's in-process BM25
    (``"bm25"``). The chunks and manifest come from the shared data directory."""

    unavailable_hint = "Run `rag ingest` against this Qdrant server (RAG_QDRANT_URL) and data directory."

    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self.settings = settings
        self.client = client if client is not None else connect(settings)
        self._owns_client = client is None
        self._lexical = resolve_lexical_backend(settings)

    @property
    def lexical_backend(self) -> LexicalBackend:
        return self._lexical

    def open(self, generation: Generation) -> Stores:
        collection = collection_for(self.settings.qdrant_collection, generation.name)
        try:
            exists = self.client.collection_exists(collection)
        except Exception as exc:
            raise IndexUnavailableError(f"Qdrant server unreachable: {exc}") from exc
        if not exists:
            raise IndexUnavailableError(
                f"The Qdrant server has no collection {collection} for the published generation {generation.name}."
            )
        in_qdrant = self._lexical == "qdrant"
        return (
            Stores(  # the client is the backend's, shared across generations: nothing to close per generation
                lexical=QdrantLexical(self.client, collection) if in_qdrant else generation.bm25_lexical(),
                dense=QdrantVectors(self.client, collection),
                hybrid=QdrantHybrid(self.client, collection) if in_qdrant else None,
            )
        )

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


def open_index_reader(settings: Settings) -> IndexReader:
    """The reader for these settings: a Qdrant server when ``qdrant_url`` is set, else embedded generations."""
    if settings.qdrant_url:
        return IndexReader(settings.data_dir, ServerBackend(settings))
    return IndexReader(settings.data_dir, EmbeddedBackend(resolve_lexical_backend(settings)))


def open_index_writers(settings: Settings) -> list[IndexWriter]:
    """What ingestion writes a generation through: on a server, the points (with their sparse BM25 vectors) in
    the generation's collection; embedded, the dense matrix and the Qdrant Edge shard (the same points, which
    the reader searches when ``RAG_LEXICAL_BACKEND=qdrant``); and the generation's BM25 files either way."""
    if settings.qdrant_url:
        return [ServerIndexWriter(settings), Bm25Writer()]
    edge = EdgeWriter(
        lambda name: generation_dir(settings.data_dir, name),
        required=resolve_lexical_backend(settings) == "qdrant",
    )
    return [MatrixWriter(), Bm25Writer(), edge]


__all__ = [
    "KEEP_COLLECTIONS",
    "ServerBackend",
    "ServerIndexWriter",
    "collection_for",
    "connect",
    "open_index_reader",
    "open_index_writers",
    "resolve_lexical_backend",
]
