"""The published index: immutable generations, each holding both retrieval legs for the same chunks.

Layout under ``<data_dir>/index``::

    CURRENT                     name of the published generation (replaced atomically)
    generations/gen-000007/     one immutable generation
        manifest.json           documents, their versions and chunk ids; embedding model
        chunks.pkl              the generation's chunks (ordered) and their BM25 tokens
        bm25_*.npz/json         the lexical index over exactly those chunks
        qdrant/                 embedded Qdrant storage with exactly those chunks' vectors
    chunks.sqlite               append-only archive of every chunk text ever indexed (traces resolve old ids)

Ingestion builds the next generation in a temporary folder and publishes it by renaming the folder and then
replacing ``CURRENT``; a crash at any moment leaves the previous generation serving. Readers never open a
generation's Qdrant folder in place: Qdrant's embedded mode locks its folder against a second client, so each
reader copies the (immutable) folder to a private temporary directory first. A reader checks ``CURRENT`` before
each query and switches to a new generation without a restart.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from rag.errors import EmptyIndexError, IndexUnavailableError, RetrievalError
from rag.lexical import BM25Index
from rag.sentences import SentenceStore
from rag.types import FAR_FUTURE, FAR_PAST, Chunk, SearchFilter

CURRENT = "CURRENT"
GENERATIONS = "generations"
DENSE = "dense"
COLLECTION = "chunks"  # the collection inside an embedded generation
NO_TAGS = "__none__"


# ----------------------------------------------------------------------------- chunk (de)serialisation
def chunk_to_dict(chunk: Chunk) -> dict[str, Any]:
    data = asdict(chunk)
    for key in ("effective", "expires"):
        data[key] = data[key].isoformat() if data[key] else None
    data["groups"] = list(chunk.groups)
    data["tags"] = list(chunk.tags)
    return data


def chunk_from_dict(data: dict[str, Any]) -> Chunk:
    fields = {k: data[k] for k in Chunk.__dataclass_fields__ if k in data}
    for key in ("effective", "expires"):
        fields[key] = date.fromisoformat(fields[key]) if fields.get(key) else None
    fields["groups"] = tuple(fields.get("groups") or ())
    fields["tags"] = tuple(fields.get("tags") or ())
    return Chunk(**fields)


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


def save_chunks(folder: Path, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]]) -> None:
    with open(folder / "chunks.pkl", "wb") as fh:
        pickle.dump({"chunks": [chunk_to_dict(c) for c in chunks], "tokens": [list(t) for t in tokens]}, fh)


def load_chunks(folder: Path) -> tuple[list[Chunk], list[list[str]]]:
    with open(folder / "chunks.pkl", "rb") as fh:
        data = pickle.load(fh)
    return [chunk_from_dict(c) for c in data["chunks"]], data["tokens"]


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


_BLAS = ThreadpoolController()


# ----------------------------------------------------------------------------- reading side
class Generation:
    """One published generation opened for reading: chunks, BM25, and a private copy of its Qdrant store."""

    def __init__(self, data_dir: Path, name: str) -> None:
        folder = generation_dir(data_dir, name)
        self.name = name
        self.manifest = Manifest.load(folder)
        self.chunks, tokens = load_chunks(folder)
        self.by_id = {c.chunk_id: c for c in self.chunks}
        self.row_of = {c.chunk_id: i for i, c in enumerate(self.chunks)}  # chunk id -> its row in every array
        self.by_doc: dict[str, list[Chunk]] = {}
        for c in self.chunks:
            self.by_doc.setdefault(c.doc_id, []).append(c)
        for doc_chunks in self.by_doc.values():
            doc_chunks.sort(key=lambda c: c.ordinal)
        self.bm25 = BM25Index.load(folder)
        self.token_store = _TokenStore(self.row_of, tokens, self.bm25.vocab)
        del tokens
        self.sentences = SentenceStore.load(folder)  # None for generations built before sentence vectors
        self._masks = _FilterArrays(self.chunks)
        self._open_vectors(folder)

    def _open_vectors(self, folder: Path) -> None:
        """Open the generation's Qdrant store (a server-backed generation overrides this)."""
        self._tmp = Path(tempfile.mkdtemp(prefix=f"rag-{self.name}-"))
        try:
            shutil.copytree(folder / "qdrant", self._tmp / "qdrant")
            from qdrant_client import QdrantClient

            self.client = QdrantClient(path=str(self._tmp / "qdrant"))
            self.dense = self._load_dense()
        except Exception as exc:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise IndexUnavailableError(f"Could not open index generation {self.name}: {exc}") from exc

    def _load_dense(self) -> np.ndarray:
        """The generation's dense vectors as one matrix in chunk order, read from its Qdrant store once.

        Embedded Qdrant evaluates a payload filter point by point in Python (about 0.2 ms per point: 0.4 s
        per query at 2,000 chunks); the same filter as a numpy mask over this matrix costs microseconds.
        """
        row = self.row_of
        matrix = np.zeros((len(self.chunks), self.manifest.dim), dtype=np.float32)
        seen = 0
        offset = None
        while True:
            points, offset = self.client.scroll(
                COLLECTION, limit=4096, offset=offset, with_payload=["chunk_id"], with_vectors=[DENSE]
            )
            for p in points:
                i = row.get((p.payload or {}).get("chunk_id", ""))
                vector = p.vector.get(DENSE) if isinstance(p.vector, dict) else p.vector
                if i is not None and isinstance(vector, list):
                    matrix[i] = np.asarray(vector, dtype=np.float32)
                    seen += 1
            if offset is None:
                break
        if seen != len(self.chunks):
            raise IndexUnavailableError(
                f"Index generation {self.name} has {seen} dense vectors for {len(self.chunks)} chunks.",
                hint="Re-run `rag ingest` to rebuild the index.",
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms > 0, norms, 1.0)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


class _TokenStore:
    """Each chunk's lexical tokens as ingestion stored them (``bm25_tokens(passage_text(...))``, the tokens its
    BM25 row counts), kept as vocabulary ids in one flat array: ~4 bytes a token instead of a str object each.

    The feature reranker reads them instead of tokenising and stemming every new candidate again (Snowball in
    pure Python: ~0.2 ms a word the stem cache has not seen, most of a cold rerank's time at 10k chunks).
    """

    def __init__(
        self, row_of: dict[str, int], tokens: Sequence[Sequence[str]], vocab: dict[str, int]
    ) -> None:
        self._row = row_of
        self._terms = [""] * len(vocab)
        for term, i in vocab.items():
            self._terms[i] = term
        lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
        self._offsets = np.concatenate([[0], np.cumsum(lengths)])
        total = int(self._offsets[-1])
        # a generation whose stored tokens do not match its chunks (or its vocabulary) keeps no tokens: the
        # reranker then tokenises as before
        self._ids: np.ndarray | None = None
        if len(tokens) == len(row_of):
            try:
                self._ids = np.fromiter(
                    (vocab[t] for doc in tokens for t in doc), dtype=np.int32, count=total
                )
            except KeyError:
                self._ids = None

    def tokens(self, chunk_id: str) -> list[str] | None:
        row = self._row.get(chunk_id)
        if row is None or self._ids is None:
            return None
        terms = self._terms
        return [terms[i] for i in self._ids[self._offsets[row] : self._offsets[row + 1]].tolist()]


class _FilterArrays:
    """Per-chunk access and validity columns, so the lexical leg filters with numpy like Qdrant does."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.effective = np.array([(c.effective or FAR_PAST).toordinal() for c in chunks], dtype=np.int64)
        self.expires = np.array([(c.expires or FAR_FUTURE).toordinal() for c in chunks], dtype=np.int64)
        self.groups: dict[str, np.ndarray] = {}
        self.tags: dict[str, np.ndarray] = {}
        n = len(chunks)
        for i, c in enumerate(chunks):
            for g in c.groups:
                self.groups.setdefault(g, np.zeros(n, dtype=bool))[i] = True
            for t in c.tags or (NO_TAGS,):
                self.tags.setdefault(t, np.zeros(n, dtype=bool))[i] = True
        self.n = n

    def mask(self, filt: SearchFilter) -> np.ndarray:
        allowed = np.zeros(self.n, dtype=bool)
        for g in filt.principal.readable_groups:
            if g in self.groups:
                allowed |= self.groups[g]
        day = filt.as_of.toordinal()
        allowed &= (self.effective <= day) & (self.expires >= day)
        if filt.tags:
            tagged = np.zeros(self.n, dtype=bool)
            for t in (*filt.tags, NO_TAGS):
                if t in self.tags:
                    tagged |= self.tags[t]
            allowed &= tagged
        return allowed


class IndexReader:
    """Searches the published generation; switches to a newer one when ingestion publishes it.

    Implements the ``ChunkLookup`` protocol used by dependency bundling (restricted to the current generation).
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._lock = threading.RLock()
        self._gen: Generation | None = None
        self.refresh()

    # -- lifecycle
    def refresh(self) -> bool:
        """Open the published generation if it changed. Returns True when it switched."""
        name = current_generation(self.data_dir)
        if name is None:
            if self._gen is None:
                raise EmptyIndexError(
                    f"No index in {self.data_dir}: nothing has been ingested yet.",
                    hint="Run `rag ingest PATH...` first.",
                )
            return False
        with self._lock:
            if self._gen is not None and self._gen.name == name:
                return False
            new = self._open_with_retry(name)
            old, self._gen = self._gen, new
        if old is not None:
            old.close()
        return True

    def _open_with_retry(self, name: str) -> Generation:
        last: Exception | None = None
        for _ in range(3):  # the generation may be garbage-collected between reading CURRENT and copying it
            try:
                return Generation(self.data_dir, name)
            except (FileNotFoundError, IndexUnavailableError) as exc:
                last = exc
                name = current_generation(self.data_dir) or name
        raise IndexUnavailableError(f"Index generation {name} could not be opened: {last}")

    def close(self) -> None:
        with self._lock:
            if self._gen is not None:
                self._gen.close()
                self._gen = None

    @property
    def generation(self) -> Generation:
        if self._gen is None:
            raise IndexUnavailableError("The index reader is closed.")
        return self._gen

    # -- retrieval legs (the filter is a required argument: there is no unfiltered search)
    def search_lexical(self, tokens: Sequence[str], filt: SearchFilter, n: int) -> list[tuple[str, float]]:
        gen = self.generation
        hits = gen.bm25.top(tokens, n, mask=gen._masks.mask(filt))
        return [(gen.chunks[i].chunk_id, score) for i, score in hits]

    def search_dense(self, vector: np.ndarray, filt: SearchFilter, n: int) -> list[tuple[str, float]]:
        """Cosine top ``n`` among the chunks ``filt`` allows (the mask is applied before ranking)."""
        gen = self.generation
        mask = gen._masks.mask(filt)
        allowed = int(mask.sum())
        if n <= 0 or not allowed:
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        q = q / (float(np.linalg.norm(q)) or 1.0)
        with _BLAS.limit(limits=1, user_api="blas"):  # a threaded matvec waits on a busy core: 15 ms, not 0.3
            scores = np.where(mask, gen.dense @ q, -np.inf)
        n = min(n, allowed)
        top = np.argpartition(-scores, n - 1)[:n] if len(scores) > n else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]
        return [(gen.chunks[i].chunk_id, float(scores[i])) for i in top]

    def search_dense_qdrant(self, vector: np.ndarray, filt: SearchFilter, n: int) -> list[tuple[str, float]]:
        """The same search run by the embedded Qdrant engine (the reference the tests compare against)."""
        gen = self.generation
        try:
            response = gen.client.query_points(
                COLLECTION,
                query=vector.tolist(),
                using=DENSE,
                query_filter=qdrant_filter(filt),
                limit=n,
                with_payload=["chunk_id"],
            )
        except Exception as exc:
            raise RetrievalError(
                f"Dense search failed: {exc}", hint="Re-run `rag ingest` to rebuild the index."
            ) from exc
        return [(p.payload["chunk_id"], float(p.score)) for p in response.points if p.payload]

    # -- lexical search inside Qdrant (sparse BM25 vectors; see rag/qdrant_server.py)
    def _qdrant_target(self) -> tuple[Any, str]:
        """The client and collection holding the current generation's vectors."""
        return self.generation.client, COLLECTION

    def search_lexical_qdrant(
        self, tokens: Sequence[str], filt: SearchFilter, n: int
    ) -> list[tuple[str, float]]:
        from rag.qdrant_server import lexical_search

        client, collection = self._qdrant_target()
        return lexical_search(client, collection, tokens, filt, n)

    def search_hybrid_qdrant(
        self,
        tokens: Sequence[str],
        vector: np.ndarray,
        filt: SearchFilter,
        n_lexical: int,
        n_dense: int,
        k: int,
    ) -> tuple[list[tuple[str, float]], list[tuple[str, float]], list[tuple[str, float]]]:
        """(lexical, dense, fused) hits: both legs and their RRF fusion (``1/(k + rank)``) in one Qdrant call."""
        from rag.qdrant_server import hybrid_search

        client, collection = self._qdrant_target()
        return hybrid_search(client, collection, tokens, vector, filt, n_lexical, n_dense, k)

    def sentence_vectors(self, chunk_id: str) -> np.ndarray | None:
        """Vectors of ``rag.sentences.sentence_units(chunk.text)``, embedded at ingestion (None if absent)."""
        store = self.generation.sentences
        return store.vectors_of(chunk_id) if store is not None else None

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
