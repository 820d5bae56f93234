"""Sentence-level scores the stages share, from the sentence vectors stored at ingestion (only text the index
lacks is embedded now): a sentence's relevance to a query, a passage's support for a claim, and cosines
between a claim and passage sentences."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rag.components.retrieval import Models, QueryVectors
from rag.models.sentences import chunk_heading, reading_text, sentence_units
from rag.stages.citations import claim_key, lexical_support
from rag.stages.extractive import shown_sentence
from rag.stages.read import VectorLookup
from rag.text import bm25_tokens
from rag.types import Evidence


class Scoring:
    def __init__(self, models: Models, queries: QueryVectors, reading: QueryVectors | None = None) -> None:
        self.models, self.queries = models, queries
        self.reading = reading if reading is not None else QueryVectors(models, reading=True)

    def _embed(self, texts: list[str]) -> np.ndarray:
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
                known.update(zip(missing, self._embed(missing), strict=True))
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
        known = self.stored_sentence_vectors(evidence)

        def lookup(texts: Sequence[str], *, stored_only: bool = False) -> np.ndarray:
            if stored_only:
                zero = np.zeros(self.models.embedder.dim, dtype=np.float32)
                return np.vstack([known.get(x, zero) for x in texts]).astype(np.float32)
            missing = [x for x in dict.fromkeys(texts) if x not in known]
            if missing:
                known.update(zip(missing, self._embed(missing), strict=True))
            return np.vstack([known[x] for x in texts]).astype(np.float32)

        return lookup

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

        def lookup(texts: Sequence[str], *, stored_only: bool = False) -> np.ndarray:
            encoder = self.reading.encoder
            if stored_only:
                zero = np.zeros(encoder.dim, dtype=np.float32)
                return np.vstack([known.get(x, zero) for x in texts]).astype(np.float32)
            missing = [x for x in dict.fromkeys(texts) if x not in known]
            if missing:
                known.update(zip(missing, encoder.embed_queries(missing), strict=True))
            return np.vstack([known[x] for x in texts]).astype(np.float32)

        return lookup

    def support_scorer(self, evidence: Sequence[Evidence]) -> Callable[[str, str], float]:
        """How well a passage supports a claim: the mean of lexical coverage and the best cosine between the
        claim and one of the passage's sentences (vectors from the index; claims embedded once each)."""
        vectors: dict[str, np.ndarray] = {}
        # An extractive claim is an evidence sentence: its vector is already in the index.
        claims: dict[str, np.ndarray] = {}
        for e in evidence:
            v = self.models.reader.sentence_vectors(e.candidate.chunk_id)
            if v is not None and len(v):
                vectors[e.candidate.chunk.text] = v
                units = sentence_units(e.candidate.chunk.text)
                if len(units) == len(v):
                    claims.update((claim_key(u), vec) for u, vec in zip(units, v, strict=True))

        def support(claim: str, passage: str) -> float:
            lexical = lexical_support(claim, passage)
            units = vectors.get(passage)
            if units is None:
                return lexical
            key = claim_key(claim)
            if key not in claims:
                quoted = claims.get(shown_sentence(key))
                claims[key] = quoted if quoted is not None else self.queries.vector(claim)
            return 0.5 * lexical + 0.5 * max(0.0, float(np.max(units @ claims[key])))

        return support

    def claim_cosine(self, evidence: Sequence[Evidence]) -> Callable[[str, Sequence[str]], list[float]]:
        """Cosines between a claim and passage sentences, from the sentence vectors stored at ingestion (a claim
        that quotes an evidence sentence reuses its vector; other claims are embedded once each)."""
        known = self.stored_sentence_vectors(evidence)
        by_key = {claim_key(u): v for u, v in known.items()}

        def cosine(claim: str, sentences: Sequence[str]) -> list[float]:
            missing = [x for x in dict.fromkeys(sentences) if x not in known]
            if missing:
                known.update(zip(missing, self._embed(missing), strict=True))
            key = claim_key(claim)
            vector = by_key.get(key)
            if vector is None:
                vector = by_key.get(shown_sentence(key))
            if vector is None:
                vector = self.queries.vector(claim)
            return [float(known[x] @ vector) for x in sentences]

        return cosine
