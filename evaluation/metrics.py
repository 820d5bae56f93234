"""Ranking metrics as BEIR reports them (pytrec_eval, i.e. trec_eval's ``ndcg_cut`` and ``recall``): the one
definition that reranker training (``evaluation.training.reranker``) and the
retrieval benchmarks (``evaluation.retrieval``, ``evaluation.rerankers``, ``evaluation.peer``) all import.

- nDCG@k: gain = the qrels grade (linear, not 2^grade - 1), discount log2(rank + 1), ideal DCG from the qrels'
  own grades sorted best first (judged documents the ranking never returned still count in the ideal).
- recall@k: relevant documents (grade > 0) among the first k, over all relevant documents in the qrels.

A query's relevance is either a mapping doc id -> grade or a plain collection of relevant ids (grade 1 each).
Rankings are lists of ids, best first; an id listed twice counts once, at its first (best) position. A query
with no relevant document scores 0.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence

Relevance = Mapping[str, float] | Collection[str]


def gains(relevance: Relevance) -> dict[str, float]:
    """doc id -> positive gain (documents judged 0 or below are not relevant)."""
    if isinstance(relevance, Mapping):
        return {str(d): float(g) for d, g in relevance.items() if float(g) > 0}
    return {str(d): 1.0 for d in relevance}


def first_occurrences(ids: Iterable[str]) -> list[str]:
    """Each id once, at its first position: a document ranked by its best chunk."""
    return list(dict.fromkeys(ids))


def ndcg_at(ranked: Sequence[str], relevance: Relevance, k: int = 10) -> float:
    g = gains(relevance)
    top = first_occurrences(ranked)[:k]
    dcg = sum(g.get(d, 0.0) / math.log2(rank + 2) for rank, d in enumerate(top))
    ideal = sum(v / math.log2(rank + 2) for rank, v in enumerate(sorted(g.values(), reverse=True)[:k]))
    return dcg / ideal if ideal > 0 else 0.0


def recall_at(ranked: Sequence[str], relevance: Relevance, k: int = 10) -> float:
    relevant = gains(relevance)
    if not relevant:
        return 0.0
    return len(set(first_occurrences(ranked)[:k]) & relevant.keys()) / len(relevant)
