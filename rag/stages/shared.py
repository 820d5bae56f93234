"""What the stages share: the index reader and the loaded models (``Models``), the query-vector caches
(``QueryVectors``) and the sentence-level scores built from the vectors stored at ingestion (``Scoring``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rag.models.dependency import DependencyModel
from rag.models.embedder import Embedder
from rag.models.reader import ReaderModel
from rag.models.sentences import chunk_heading, reading_text, sentence_units
from rag.protocols import Reranker
from rag.stores.index import IndexReader
from rag.text import bm25_tokens
from rag.types import Evidence

QUERY_CACHE_SIZE = 2048  # query texts whose vectors are kept; the cache is emptied when it would hold more


@dataclass
class Models:
    """The index reader and the models the stages share. A stage reads them when it runs, so replacing one
    (a benchmark wraps the embedder to time it) replaces it for every stage."""

    reader: IndexReader
    embedder: Embedder
    reranker: Reranker
    reader_model: ReaderModel | None = None  # the reader (rag/stages/read.py); None when switched off
    reading_encoder: Embedder | None = None  # what the reader reads sentences with (rag/models/reading.py)
    reading_model: str = ""  # the identity its stored vectors carry (``rag.models.reading.identity``)
    # which sentences an extractive answer's excerpt takes with the chosen one (rag/models/dependency.py); None:
    # the chosen sentence alone (``ablate=excerpts``)
    dependency_model: DependencyModel | None = None


class QueryVectors:
    """Query embeddings, reused within and across requests (intents, hops, sentence scoring, the reranker): by
    the retrieval embedder, or with ``reading`` by the reading encoder."""

    def __init__(self, models: Models, *, reading: bool = False) -> None:
        self.models = models
        self.reading = reading
        self.cache: dict[str, np.ndarray] = {}

    @property
    def encoder(self) -> Embedder:
        encoder = self.models.reading_encoder if self.reading else self.models.embedder
        if encoder is None:
            raise ValueError("no reading encoder is loaded")
        return encoder

    def vector(self, text: str) -> np.ndarray:
        vector = self.cache.get(text)
        if vector is None:
            vector = self.encoder.embed_queries([text])[0]
            if len(self.cache) > QUERY_CACHE_SIZE:
                self.cache.clear()
            self.cache[text] = vector
        return vector

    def vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Vectors for several query texts; the ones not cached are embedded in one batch."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            if len(self.cache) + len(missing) > QUERY_CACHE_SIZE:
                self.cache.clear()
            self.cache.update(zip(missing, self.encoder.embed_queries(missing), strict=True))
        return [self.cache[t] for t in texts]


# ----------------------------------------------------------------------------- the stage


class VectorLookup(Protocol):
    """Evidence sentences' vectors by text (L2-normalised rows). ``stored_only``: a text not embedded at ingestion
    (a heading before a sentence) gets a zero row instead of being embedded now."""

    def __call__(self, texts: Sequence[str], *, stored_only: bool = False) -> np.ndarray: ...


class Scoring:
    def __init__(self, models: Models, queries: QueryVectors, reading: QueryVectors | None = None) -> None:
        self.models, self.queries = models, queries
        self.reading = reading if reading is not None else QueryVectors(models, reading=True)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of texts the index does not hold, by the retrieval embedder (read when called)."""
        return self.models.embedder.embed_queries(texts)

    def sentence_scorer(
        self, evidence: Sequence[Evidence], *, context: float = 0.0
    ) -> Callable[[str, Sequence[str]], list[float]]:
        """Relevance of sentences to a query: dense cosine blended with lexical coverage.

        Sentence vectors come from the index (embedded at ingestion); only fragments it lacks (headings,
        or a generation built before sentence vectors) are embedded now. With ``context`` > 0 a sentence's
        cosine is blended with its passage's (the normalised mean of the passage's sentence vectors), so a
        sentence is read in the passage it stands in: "The Service Desk cannot issue a replacement until Form
        SEC-9 is accepted" answers "what do I need before the Service Desk gives me a replacement laptop"
        because its passage is about that, where a sentence of a reporting-deadline passage alone scored higher.
        """
        known: dict[str, np.ndarray] = {}
        passages: dict[str, list[np.ndarray]] = {}  # sentence -> the centroid of each passage holding it
        for e in evidence:
            vectors = self.models.reader.sentence_vectors(e.candidate.chunk_id)
            units = sentence_units(e.candidate.chunk.text)
            if vectors is not None and len(vectors) == len(units):
                known.update(zip(units, vectors, strict=True))
                if context:
                    centroid = vectors.mean(axis=0)
                    centroid = centroid / (float(np.linalg.norm(centroid)) or 1.0)
                    for unit in units:
                        passages.setdefault(unit, []).append(centroid)

        def score(query: str, sentences: Sequence[str]) -> list[float]:
            if not sentences:
                return []
            missing = [x for x in dict.fromkeys(sentences) if x not in known]
            if missing:
                known.update(zip(missing, self.embed(missing), strict=True))
            qv = self.queries.vector(query)
            q = set(bm25_tokens(query))
            out = []
            for x in sentences:
                lex = len(q & set(bm25_tokens(x))) / len(q) if q else 0.0
                cos = float(known[x] @ qv)
                if x in passages:
                    cos = (1 - context) * cos + context * max(float(c @ qv) for c in passages[x])
                out.append(float(0.7 * cos + 0.3 * lex))
            return out

        return score

    def stored_sentence_vectors(self, evidence: Sequence[Evidence]) -> dict[str, np.ndarray]:
        """The evidence sentences' vectors embedded at ingestion, by sentence text."""
        known: dict[str, np.ndarray] = {}
        for e in evidence:
            vectors = self.models.reader.sentence_vectors(e.candidate.chunk_id)
            units = sentence_units(e.candidate.chunk.text)
            if vectors is not None and len(vectors) == len(units):
                known.update(zip(units, vectors, strict=True))
        return known

    def sentence_vector_lookup(self, evidence: Sequence[Evidence]) -> VectorLookup:
        """Vectors of evidence sentences by text: the ones stored at ingestion, the rest (a table row read with
        its header, a passage of an index built before sentence vectors) embedded now, once each, or with
        ``stored_only`` a zero row."""
        return _lookup(self.stored_sentence_vectors(evidence), lambda: self.models.embedder)

    def reading_vector_lookup(self, evidence: Sequence[Evidence]) -> VectorLookup:
        """The reading encoder's vectors of evidence sentences by ``reading_text`` (heading and sentence): the
        ones stored at ingestion, the rest (a table row read with its header, an index built before reading
        vectors) embedded now, once each, or with ``stored_only`` a zero row."""
        models = self.models
        known: dict[str, np.ndarray] = {}
        for e in evidence:
            chunk = e.candidate.chunk
            vectors = models.reader.reading_vectors(e.candidate.chunk_id, models.reading_model)
            units = sentence_units(chunk.text)
            if vectors is not None and len(vectors) == len(units):
                heading = chunk_heading(chunk.title, chunk.section)
                known.update((reading_text(heading, u), v) for u, v in zip(units, vectors, strict=True))
        return _lookup(known, lambda: self.reading.encoder)


def _lookup(known: dict[str, np.ndarray], encoder: Callable[[], Embedder]) -> VectorLookup:
    """``known`` vectors by text; a text not there is embedded by ``encoder()`` (looked up when the lookup runs: a
    benchmark may swap the embedder) once, or with ``stored_only`` given a zero row."""

    def lookup(texts: Sequence[str], *, stored_only: bool = False) -> np.ndarray:
        embedder = encoder()
        if stored_only:
            zero = np.zeros(embedder.dim, dtype=np.float32)
            return np.vstack([known.get(x, zero) for x in texts]).astype(np.float32)
        missing = [x for x in dict.fromkeys(texts) if x not in known]
        if missing:
            known.update(zip(missing, embedder.embed_queries(missing), strict=True))
        return np.vstack([known[x] for x in texts]).astype(np.float32)

    return lookup
