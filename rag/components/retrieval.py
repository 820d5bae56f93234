"""Retrieval: the index, the request's filter, both search legs fused per intent, the reranker, and the
query-vector cache every stage that embeds a query shares. Nothing here searches without a filter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date

import numpy as np

from rag.config import Settings
from rag.cross_encoder import ReaderCrossEncoder
from rag.models.dependency import DependencyModel
from rag.models.embedder import Embedder
from rag.models.reader import ReaderModel
from rag.protocols import Reranker
from rag.request import State
from rag.stages.retrieve import merge_intents, rrf_fuse
from rag.stores import fused_candidates
from rag.stores.index import IndexReader
from rag.text import bm25_tokens
from rag.types import Candidate, Intent, SearchFilter

QUERY_CACHE_SIZE = 2048  # query texts whose vectors are kept; the cache is emptied when it would hold more


@dataclass
class Models:
    """The index reader and the models the stages share. A stage reads them when it runs, so replacing one
    (a benchmark wraps the embedder to time it) replaces it for every stage."""

    reader: IndexReader
    embedder: Embedder
    reranker: Reranker
    reader_model: ReaderModel | None = None  # the reader (rag/stages/read.py); None when switched off
    reader_cross_encoder: ReaderCrossEncoder | None = None  # whose logits the reader model was trained with
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


class Search:
    """Both legs (lexical and dense) for query texts, filtered inside the stores, fused."""

    def __init__(self, settings: Settings, models: Models, queries: QueryVectors) -> None:
        self.settings, self.models, self.queries = settings, models, queries

    def search(
        self, text: str, filt: SearchFilter, *, intent: int, top_n: int | None = None
    ) -> tuple[list[Candidate], dict[str, int]]:
        """One query text; ``top_n`` overrides both legs' N. Returns the fused candidates and each leg's count."""
        s, reader = self.settings, self.models.reader
        lexical_n, dense_n = (top_n, top_n) if top_n else (s.lexical_top_n, s.dense_top_n)
        vector = self.queries.vector(text)
        tokens = bm25_tokens(text)
        lexical, dense, fused = reader.search(
            tokens, vector, filt, n_lexical=lexical_n, n_dense=dense_n, rrf_k=s.rrf_k
        )
        found = {cid: reader.get(cid) for cid, _ in [*lexical, *dense]}
        chunks = {k: v for k, v in found.items() if v is not None and filt.allows(v)}
        lexical = [h for h in lexical if h[0] in chunks]
        dense = [h for h in dense if h[0] in chunks]
        if fused is None or s.rrf_lexical_weight != 1.0:  # a server's own fusion weighs both legs alike
            candidates = rrf_fuse(
                lexical, dense, chunks, k=s.rrf_k, intent=intent, lexical_weight=s.rrf_lexical_weight
            )
        else:
            candidates = fused_candidates(lexical, dense, fused, chunks, intent=intent)
        return candidates, {"lexical": len(lexical), "dense": len(dense)}

    def retrieve(
        self, intents: Sequence[Intent], filt: SearchFilter, *, also_embed: Sequence[str] = ()
    ) -> tuple[list[Candidate], dict[str, object]]:
        """Every intent searched, the results merged; with the stage's trace detail."""
        # one embedding call for every text this request ranks by: the intents, and the whole question the
        # reranker scores against (a compound question's parts differ from it)
        self.queries.vectors([*(i.text for i in intents), *also_embed])
        detail: dict[str, object] = {"lexical_backend": self.models.reader.lexical_backend}
        per_intent = []
        for intent in intents:
            candidates, counts = self.search(intent.text, filt, intent=intent.index)
            per_intent.append(candidates)
            detail[f"intent_{intent.index}"] = counts
        merged = merge_intents(per_intent)
        detail["candidates"] = len(merged)
        return merged, detail


class OpenIndex:
    """Switch to the newest published generation, if there is one."""

    name = "index"

    def __init__(self, models: Models) -> None:
        self.models = models

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            d["switched"] = self.models.reader.refresh()
            d["generation"] = self.models.reader.generation.name
        return state


class Filters:
    """What the asker may read, as of when, with which tags: every search below is filtered by it."""

    name = "filters"

    def run(self, state: State) -> State:
        q = state.question
        with state.recorder.stage(self.name) as d:
            filt = SearchFilter(q.principal, q.as_of or date.today(), q.tags)
            d.update(
                groups=sorted(filt.principal.readable_groups),
                as_of=filt.as_of.isoformat(),
                tags=sorted(filt.tags),
            )
        return replace(state, filter=filt)


class Retrieve:
    name = "retrieve"

    def __init__(self, search: Search) -> None:
        self.search = search

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            candidates, detail = self.search.retrieve(
                state.intents, state.search_filter, also_embed=[state.question.text]
            )
            d.update(detail)
        return replace(state, candidates=candidates)


class Rerank:
    name = "rerank"

    def __init__(self, models: Models) -> None:
        self.models = models

    def run(self, state: State) -> State:
        reranker = self.models.reranker
        with state.recorder.stage(self.name) as d:
            ranked = reranker.rerank(state.question.text, state.candidates) if state.candidates else []
            d["reranker"] = reranker.name
        return replace(state, ranked=ranked)
