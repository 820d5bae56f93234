"""The published index: immutable generations, each holding both retrieval legs for the same chunks.

Layout under ``<data_dir>/index``::

    CURRENT                     name of the published generation (replaced atomically)
    generations/gen-000007/     one immutable generation
        manifest.json           documents, their versions and chunk ids; embedding model
        chunks.pkl              the generation's chunks (ordered)
        bm25_*.npz/json         the lexical index over exactly those chunks
        tokens.npy, token_offsets.npy   each chunk's BM25 tokens, as ids into the BM25 vocabulary
        dense.npy               the chunks' vectors, L2-normalised, row i = chunk i
        sentences.npz, sentence_vectors.npy   each chunk's sentence vectors (``rag.models.sentences``)
        reading.npz, reading_vectors.npy      the same sentences read by the reading encoder (``rag.models.reading``)
        edge/                   Qdrant Edge shard with the same chunks (searched with RAG_LEXICAL_BACKEND=qdrant)
    chunks.sqlite               append-only archive of every chunk text ever indexed (traces resolve old ids)

Readers memory-map the ``.npy`` files: opening a generation reads its chunks, BM25 matrix and filter columns,
and every process reading it shares one copy of its vectors in the page cache. Generations written by the
previous release (their vectors in an embedded qdrant-client store, ``qdrant/``, their tokens inside
``chunks.pkl``) are still served, more slowly to open; ``rag ingest --rebuild`` rewrites one in this layout
from the cached vectors.

Ingestion builds the next generation in a temporary folder and publishes it by renaming the folder and then
replacing ``CURRENT``; a crash at any moment leaves the previous generation serving. A reader checks
``CURRENT`` before each query and switches to a new generation without a restart.

The reader (``IndexReader``) holds the generation's files (``Generation``) and the stores a ``StoreBackend``
opens for it (``rag.stores.Stores``): by composition, so the query path asks the reader for the legs and never
which backend serves them. ``EmbeddedBackend`` serves an embedded generation; ``rag.stores.qdrant_server`` has the
server's backend and ``open_index_reader(settings)``, which picks one.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from rag.errors import EmptyIndexError, IndexUnavailableError
from rag.models.sentences import SentenceStore
from rag.stores import Legs, LegsQuery, LexicalIndex, Stores, VectorStore, chunk_from_dict, chunk_to_dict
from rag.stores.bm25 import BM25Index
from rag.stores.edge import EdgeHybrid, EdgeLexical, EdgeVectors, has_shard, open_shard
from rag.stores.memory import Bm25Lexical, FilterArrays, MatrixVectors, TokenStore, load_dense_matrix
from rag.stores.qdrant import COLLECTION, LEGACY_FOLDER, QdrantHybrid, QdrantLexical, read_dense_matrix
from rag.types import Chunk

log = logging.getLogger(__name__)

CURRENT = "CURRENT"
GENERATIONS = "generations"
LexicalBackend = Literal["bm25", "qdrant"]  # in-process BM25, or the sparse BM25 leg inside Qdrant


# ----------------------------------------------------------------------------- generation files
@dataclass(frozen=True)
class Manifest:
    generation: str
    created_at: str
    embedding_model: str
    dim: int
    documents: dict[str, dict[str, Any]]  # doc_id -> {source, version, fmt, title, groups, ..., chunk_ids}
    sources: dict[str, dict[str, Any]]  # source file -> {version, doc_ids}
    bm25_avgdl: float | None = (
        None  # avgdl the Qdrant sparse BM25 weights were computed with (None: no sparse leg)
    )

    @property
    def n_chunks(self) -> int:
        return sum(len(d["chunk_ids"]) for d in self.documents.values())

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def load(cls, folder: Path) -> Manifest:
        return cls(**json.loads((folder / "manifest.json").read_text()))


def index_root(data_dir: Path) -> Path:
    return Path(data_dir) / "index"


def current_generation(data_dir: Path) -> str | None:
    try:
        name = (index_root(data_dir) / CURRENT).read_text().strip()
    except FileNotFoundError:
        return None
    return name or None


def generation_dir(data_dir: Path, name: str) -> Path:
    return index_root(data_dir) / GENERATIONS / name


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(data_dir: Path, tmp_folder: Path, name: str) -> Path:
    """Make a fully written generation visible: rename its folder, then atomically replace CURRENT."""
    root = index_root(data_dir)
    final = root / GENERATIONS / name
    for path in tmp_folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    os.replace(tmp_folder, final)
    _fsync_dir(final.parent)
    pointer_tmp = root / f"{CURRENT}.tmp-{os.getpid()}"
    with open(pointer_tmp, "w") as fh:
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(pointer_tmp, root / CURRENT)
    _fsync_dir(root)
    return final


CHUNK_FIELDS = tuple(Chunk.__dataclass_fields__)


def save_chunks(folder: Path, chunks: Sequence[Chunk]) -> None:
    """The generation's chunks, in order, as one list per field (their tokens are the BM25 writer's:
    ``rag.stores.memory``). Columns load in half the time of a dict per chunk (0.6 s against 1.3 s at 100k
    chunks), and a document's chunks share one copy of its source, title and version strings."""
    columns = {name: [getattr(c, name) for c in chunks] for name in CHUNK_FIELDS}
    with open(folder / "chunks.pkl", "wb") as fh:
        pickle.dump({"columns": columns}, fh, protocol=pickle.HIGHEST_PROTOCOL)


def _read_chunk_file(folder: Path) -> tuple[list[Chunk], list[list[str]] | None]:
    """The chunks, and the token lists that generations of the previous release kept beside them (a dict per
    chunk then)."""
    with open(folder / "chunks.pkl", "rb") as fh:
        data = pickle.load(fh)
    if "columns" in data:
        columns = data["columns"]
        names = [
            name for name in CHUNK_FIELDS if name in columns
        ]  # a Chunk field added since needs a default
        rows = zip(*(columns[name] for name in names), strict=True)
        if len(names) == len(CHUNK_FIELDS):
            return [Chunk(*row) for row in rows], None
        return [Chunk(**dict(zip(names, row, strict=True))) for row in rows], None
    return [chunk_from_dict(c) for c in data["chunks"]], data.get("tokens")


def load_chunks(folder: Path) -> tuple[list[Chunk], list[list[str]]]:
    """A generation's chunks and each one's BM25 tokens (what ingestion keeps of the published generation)."""
    chunks, lists = _read_chunk_file(folder)
    if lists is not None:
        return chunks, lists
    row_of = {c.chunk_id: i for i, c in enumerate(chunks)}
    tokens = TokenStore.open(folder, row_of, BM25Index.load(folder).vocab).all_tokens()
    if tokens is None:
        raise IndexUnavailableError(f"The stored tokens of {folder.name} do not match its chunks.")
    return chunks, tokens


# ----------------------------------------------------------------------------- chunk archive
class ChunkArchive:
    """Every chunk text ever indexed, by content-derived id. Written by ingestion; read by traces and the UI."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "chunks.sqlite"

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS chunks (chunk_id TEXT PRIMARY KEY, doc_id TEXT, data TEXT)")
        return conn

    def add(self, chunks: Iterable[Chunk]) -> None:
        rows = [(c.chunk_id, c.doc_id, json.dumps(chunk_to_dict(c))) for c in chunks]
        if not rows:
            return
        with self._connect() as conn:
            conn.executemany("INSERT OR IGNORE INTO chunks VALUES (?, ?, ?)", rows)

    def get(self, chunk_id: str) -> Chunk | None:
        if not self.path.exists():
            return None
        with self._connect() as conn:
            row = conn.execute("SELECT data FROM chunks WHERE chunk_id = ?", (chunk_id,)).fetchone()
        return chunk_from_dict(json.loads(row[0])) if row else None


# ----------------------------------------------------------------------------- reading side
class Generation:
    """One published generation's files opened for reading: chunks, manifest, BM25, tokens, sentence vectors.

    The stores that search it are opened beside it by a ``StoreBackend``.
    """

    def __init__(self, data_dir: Path, name: str) -> None:
        self.folder = generation_dir(data_dir, name)
        self.name = name
        self.manifest = Manifest.load(self.folder)
        self.chunks, token_lists = _read_chunk_file(self.folder)
        self.chunk_ids = [c.chunk_id for c in self.chunks]
        self.by_id = {c.chunk_id: c for c in self.chunks}
        self.row_of = {c.chunk_id: i for i, c in enumerate(self.chunks)}  # chunk id -> its row in every array
        self.by_doc: dict[str, list[Chunk]] = {}
        for c in self.chunks:
            self.by_doc.setdefault(c.doc_id, []).append(c)
        for doc_chunks in self.by_doc.values():
            doc_chunks.sort(key=lambda c: c.ordinal)
        self.bm25 = BM25Index.load(self.folder)
        self.token_store = TokenStore.open(self.folder, self.row_of, self.bm25.vocab, token_lists)
        del token_lists
        self.sentences = SentenceStore.load(self.folder)  # None for generations built before sentence vectors
        self.reading = SentenceStore.load(self.folder, reading=True)  # None: built before reading vectors
        self.masks = FilterArrays(self.chunks)
        self.dense = load_dense_matrix(self.folder)  # None for a generation of the previous release

    def bm25_lexical(self) -> Bm25Lexical:
        """The in-process lexical index over this generation's BM25 files."""
        return Bm25Lexical(self.bm25, self.masks, self.chunk_ids)


class StoreBackend(Protocol):
    """Opens the stores that serve a generation (a new set per generation the reader switches to)."""

    @property
    def lexical_backend(self) -> LexicalBackend:
        """Which lexical index the stores search (the trace records it)."""
        ...

    @property
    def unavailable_hint(self) -> str | None:
        """What to tell the user when no generation could be opened."""
        ...

    def open(self, generation: Generation) -> Stores:
        """The generation's stores; raises ``IndexUnavailableError`` when they cannot be opened."""
        ...

    def close(self) -> None:
        """Release what the backend shares across generations (a server connection)."""
        ...


class EmbeddedBackend:
    """An embedded generation's stores, opened in place: in-process BM25 (``"bm25"``) beside the memory-mapped
    dense matrix, or (``"qdrant"``) the generation's Qdrant Edge shard for the sparse leg, the dense leg and
    their fusion. A generation of the previous release is served from a private copy of its qdrant-client store
    (that embedded mode locks its folder against a second client); for ``"bm25"`` the copy is closed and removed
    once the dense matrix has been read from it."""

    unavailable_hint: str | None = None

    def __init__(self, lexical: LexicalBackend = "bm25") -> None:
        self._lexical: LexicalBackend = lexical

    @property
    def lexical_backend(self) -> LexicalBackend:
        return self._lexical

    def open(self, generation: Generation) -> Stores:
        legacy = generation.dense is None and (generation.folder / LEGACY_FOLDER).exists()
        if legacy:
            log.warning(
                "Index generation %s was written by the previous release (an embedded qdrant-client store): it is "
                "served as before, but opens slowly at scale. `rag ingest --rebuild PATH...` rewrites it from the "
                "cached vectors, embedding nothing.",
                generation.name,
            )
        if self._lexical == "qdrant":
            if legacy and not has_shard(generation.folder):
                return _open_legacy(generation, keep_client=True)
            shard = open_shard(generation.folder, generation.name)
            return Stores(
                lexical=EdgeLexical(shard),
                dense=EdgeVectors(shard),
                hybrid=EdgeHybrid(shard),
                close=shard.close,
            )
        if legacy:
            return _open_legacy(generation, keep_client=False)
        if generation.dense is None:
            raise IndexUnavailableError(f"Index generation {generation.name} has no dense vectors.")
        return Stores(
            lexical=generation.bm25_lexical(),
            dense=MatrixVectors(generation.dense, generation.masks, generation.chunk_ids),
        )

    def close(self) -> None:
        """Each generation's stores release what they opened."""


def _open_legacy(generation: Generation, *, keep_client: bool) -> Stores:
    """A previous-release generation: its qdrant-client store copied (that mode locks its folder), the dense
    matrix read from it, and the client kept only when it serves the sparse leg (``keep_client``)."""
    from qdrant_client import QdrantClient

    tmp = Path(tempfile.mkdtemp(prefix=f"rag-{generation.name}-"))
    client: Any = None
    try:
        shutil.copytree(generation.folder / LEGACY_FOLDER, tmp / LEGACY_FOLDER)
        client = QdrantClient(path=str(tmp / LEGACY_FOLDER))
        matrix = read_dense_matrix(client, generation.row_of, generation.manifest.dim, generation.name)
    except Exception as exc:
        if client is not None:
            client.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise IndexUnavailableError(f"Could not open index generation {generation.name}: {exc}") from exc

    def close() -> None:
        try:
            client.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    dense = MatrixVectors(matrix, generation.masks, generation.chunk_ids)
    if not keep_client:
        close()
        return Stores(lexical=generation.bm25_lexical(), dense=dense)
    return Stores(
        lexical=QdrantLexical(client, COLLECTION),
        dense=dense,
        hybrid=QdrantHybrid(client, COLLECTION),
        close=close,
    )


@dataclass(frozen=True)
class _Serving:
    generation: Generation
    stores: Stores


class IndexReader:
    """Searches the published generation; switches to a newer one when ingestion publishes it.

    Composes the generation's files with the stores ``backend`` opens for it (embedded by default). Implements
    the ``ChunkLookup`` protocol used by dependency bundling (restricted to the current generation).
    """

    def __init__(self, data_dir: Path, backend: StoreBackend | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.backend: StoreBackend = backend if backend is not None else EmbeddedBackend()
        self._lock = threading.RLock()
        self._serving: _Serving | None = None
        self._reading_warned: set[str] = set()
        try:
            self.refresh()
        except BaseException:
            self.backend.close()
            raise

    # -- lifecycle
    def refresh(self) -> bool:
        """Open the published generation if it changed. Returns True when it switched."""
        name = current_generation(self.data_dir)
        if name is None:
            if self._serving is None:
                raise EmptyIndexError(
                    f"No index in {self.data_dir}: nothing has been ingested yet.",
                    hint="Run `rag ingest PATH...` first.",
                )
            return False
        with self._lock:
            if self._serving is not None and self._serving.generation.name == name:
                return False
            new = self._open_with_retry(name)
            old, self._serving = self._serving, new
        if old is not None:
            old.stores.close()
        return True

    def _open_with_retry(self, name: str) -> _Serving:
        last: Exception | None = None
        for attempt in range(
            3
        ):  # the generation may be garbage-collected between reading CURRENT and opening it
            try:
                generation = Generation(self.data_dir, name)
                return _Serving(generation, self.backend.open(generation))
            except (FileNotFoundError, IndexUnavailableError) as exc:
                last = exc
                time.sleep(0.2 * attempt)
                name = current_generation(self.data_dir) or name
        raise IndexUnavailableError(
            f"Index generation {name} could not be opened: {last}",
            hint=getattr(last, "hint", None) or self.backend.unavailable_hint,
        )

    def close(self) -> None:
        with self._lock:
            if self._serving is not None:
                self._serving.stores.close()
                self._serving = None
        self.backend.close()

    def _current(self) -> _Serving:
        serving = self._serving
        if serving is None:
            raise IndexUnavailableError("The index reader is closed.")
        return serving

    @property
    def generation(self) -> Generation:
        return self._current().generation

    # -- retrieval (the filter is a required argument: there is no unfiltered search)
    @property
    def lexical_backend(self) -> LexicalBackend:
        return self.backend.lexical_backend

    def search(self, query: LegsQuery) -> Legs:
        """Both legs for one query, each filtered inside its store; ``fused`` is set when the store fused them
        (RRF, ``1 / (rrf_k + rank)``), else None and the caller fuses."""
        return self._current().stores.search(query)

    @property
    def lexical(self) -> LexicalIndex:
        """The current generation's lexical index (one leg alone: benchmarks, evaluation)."""
        return self._current().stores.lexical

    @property
    def dense(self) -> VectorStore:
        """The current generation's vector store (one leg alone: benchmarks, evaluation)."""
        return self._current().stores.dense

    def sentence_vectors(self, chunk_id: str) -> np.ndarray | None:
        """Vectors of ``rag.models.sentences.sentence_units(chunk.text)``, embedded at ingestion (None if absent)."""
        store = self.generation.sentences
        return store.vectors_of(chunk_id) if store is not None else None

    def reading_vectors(self, chunk_id: str, model: str) -> np.ndarray | None:
        """The reading encoder's vectors of ``rag.models.sentences.sentence_units(chunk.text)``, each read after the
        chunk's heading, embedded at ingestion by ``model`` (None when the generation has none by it: an index
        written before reading vectors, or with another reading model, until the next ingest adds them)."""
        generation = self.generation
        store = generation.reading
        if store is None or store.model != model:
            if generation.name not in self._reading_warned:
                self._reading_warned.add(generation.name)
                log.warning(
                    "Index generation %s has no sentence vectors by the reading encoder %s: the evidence is read "
                    "by embedding its sentences now, more slowly. `rag ingest PATH...` (or `--rebuild`) adds them.",
                    generation.name,
                    model,
                )
            return None
        return store.vectors_of(chunk_id)

    def passage_tokens(self, chunk_id: str) -> list[str] | None:
        """``bm25_tokens(passage_text(title, section, text))`` of the chunk, as ingestion stored them (None if
        the chunk is not in the serving generation)."""
        return self.generation.token_store.tokens(chunk_id)

    # -- ChunkLookup
    def get(self, chunk_id: str) -> Chunk | None:
        return self.generation.by_id.get(chunk_id)

    def doc_chunks(self, doc_id: str) -> Sequence[Chunk]:
        return self.generation.by_doc.get(doc_id, [])

    def docs_by_title(self, title: str) -> Sequence[str]:
        needle = " ".join(title.lower().split())
        if not needle:
            return []
        out = []
        for doc_id, doc in self.generation.manifest.documents.items():
            have = " ".join(str(doc.get("title", "")).lower().split())
            if have and (needle in have or have in needle):
                out.append(doc_id)
        return out

    # -- what is indexed (documents page, CLI)
    def documents(self) -> dict[str, dict[str, Any]]:
        return self.generation.manifest.documents


__all__ = [
    "CURRENT",
    "GENERATIONS",
    "ChunkArchive",
    "EmbeddedBackend",
    "Generation",
    "IndexReader",
    "LexicalBackend",
    "Manifest",
    "StoreBackend",
    "chunk_from_dict",
    "chunk_to_dict",
    "current_generation",
    "generation_dir",
    "index_root",
    "load_chunks",
    "publish",
    "save_chunks",
]
