"""The ``retrieve`` stage: both legs searched for every intent, filtered inside the stores, and fused: reciprocal rank
fusion here, or the store's own fusion read back (``fused_candidates``); then the union of the per-intent lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from rag.config import Settings
from rag.request import State
from rag.stages.shared import Models, QueryVectors
from rag.stores import LegsQuery
from rag.text import bm25_tokens
from rag.types import Candidate, Chunk, Intent, SearchFilter

Hit = tuple[str, float]  # (chunk_id, score), ranked best first


def _leg(hits: Sequence[Hit], *, as_float: bool = True) -> dict[str, tuple[int, float]]:
    """chunk_id -> (1-based rank, score); a chunk listed twice keeps its first (best) position."""
    out: dict[str, tuple[int, float]] = {}
    for rank, (chunk_id, score) in enumerate(hits, start=1):
        out.setdefault(chunk_id, (rank, float(score) if as_float else score))
    return out


Ranks = dict[str, tuple[int, float]]


def _candidate(
    cid: str,
    chunk: Chunk,
    lex: Ranks,
    den: Ranks,
    *,
    score: float,
    intent: int,
    fused_rank: int | None = None,
) -> Candidate:
    """A fused candidate that keeps both legs' ranks and scores, so a trace can show why it ranked where it did."""
    bm25_rank, bm25_score = lex.get(cid, (None, None))
    dense_rank, dense_score = den.get(cid, (None, None))
    return Candidate(
        chunk=chunk,
        bm25_rank=bm25_rank,
        bm25_score=bm25_score,
        dense_rank=dense_rank,
        dense_score=dense_score,
        fused_score=score,
        fused_rank=fused_rank,
        intents=(intent,),
    )


def _ranked(cands: list[Candidate]) -> list[Candidate]:
    cands.sort(key=lambda c: (-c.fused_score, c.chunk_id))
    return [c.with_(fused_rank=i) for i, c in enumerate(cands, start=1)]


def rrf_fuse(
    lexical: Sequence[Hit],
    dense: Sequence[Hit],
    chunks: Mapping[str, Chunk],
    *,
    k: int = 60,
    intent: int = 0,
    lexical_weight: float = 1.0,
) -> list[Candidate]:
    """Fuse two ranked legs with w/(k + rank) summed over the legs that returned a chunk (``lexical_weight``
    for the BM25 leg, 1 for the dense leg).

    Every candidate keeps both legs' ranks and scores so a trace can show why it ranked where it did.
    Hits whose chunk is missing from ``chunks`` are skipped (the other hits keep their original ranks).
    Ties break on chunk_id, so the output is deterministic.
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    lex, den = _leg(lexical), _leg(dense)
    fused: list[Candidate] = []
    for chunk_id in sorted(lex.keys() | den.keys()):
        chunk = chunks.get(chunk_id)
        if chunk is None:
            continue
        ranks = ((lex.get(chunk_id, (None,))[0], lexical_weight), (den.get(chunk_id, (None,))[0], 1.0))
        score = sum(w / (k + r) for r, w in ranks if r is not None)
        fused.append(_candidate(chunk_id, chunk, lex, den, score=score, intent=intent))
    return _ranked(fused)


def fused_candidates(
    lexical: Sequence[Hit],
    dense: Sequence[Hit],
    fused: Sequence[Hit],
    chunks: Mapping[str, Chunk],
    *,
    intent: int = 0,
) -> list[Candidate]:
    """Candidates in a store's fused order, each keeping both legs' ranks and scores for the trace.

    The twin of ``rrf_fuse`` for fusion that ran inside the store. Hits whose chunk is missing from ``chunks`` are
    skipped; the others keep their original ranks.
    """
    lex, den = _leg(lexical, as_float=False), _leg(dense, as_float=False)
    out: list[Candidate] = []
    seen: set[str] = set()
    for cid, score in fused:
        chunk = chunks.get(cid)
        if chunk is None or cid in seen:
            continue
        seen.add(cid)
        out.append(
            _candidate(cid, chunk, lex, den, score=float(score), intent=intent, fused_rank=len(out) + 1)
        )
    return out


def _best_rank(
    a: int | None, a_score: float | None, b: int | None, b_score: float | None
) -> tuple[int | None, float | None]:
    """The better (lower) of two optional ranks, with the score that came with it."""
    if a is None:
        return b, b_score
    if b is None or a <= b:
        return a, a_score
    return b, b_score


def _max_opt(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _merge_pair(a: Candidate, b: Candidate) -> Candidate:
    bm25_rank, bm25_score = _best_rank(a.bm25_rank, a.bm25_score, b.bm25_rank, b.bm25_score)
    dense_rank, dense_score = _best_rank(a.dense_rank, a.dense_score, b.dense_rank, b.dense_score)
    return a.with_(
        bm25_rank=bm25_rank,
        bm25_score=bm25_score,
        dense_rank=dense_rank,
        dense_score=dense_score,
        fused_score=max(a.fused_score, b.fused_score),
        intents=tuple(sorted(set(a.intents) | set(b.intents))),
        rerank_score=_max_opt(a.rerank_score, b.rerank_score),
        hop=min(a.hop, b.hop),
    )


def merge_intents(lists: Sequence[Sequence[Candidate]]) -> list[Candidate]:
    """Union of per-intent candidate lists, re-ranked by fused score.

    A chunk found by several intents keeps its best (lowest) lexical and dense ranks, its highest fused
    score and the union of the intents that found it.
    """
    merged: dict[str, Candidate] = {}
    for cands in lists:
        for cand in cands:
            seen = merged.get(cand.chunk_id)
            merged[cand.chunk_id] = cand if seen is None else _merge_pair(seen, cand)
    return _ranked(list(merged.values()))


# ----------------------------------------------------------------------------- the stage


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
            LegsQuery(tokens, vector, filt, n_lexical=lexical_n, n_dense=dense_n, rrf_k=s.rrf_k)
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
