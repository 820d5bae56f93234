"""Section context: a passage from the section the strongest passages come from ranks up.

Chunks are small (a handbook section is often split into three or four), and the reranker scores each alone
against the question: the chunk that states the rule can rank far below its section's opening chunk, which
names the topic. Reading a passage's section as evidence for it ("the request's best passages are in this
section") is passage-level evidence aggregation; it is scored from the reranker's own probabilities, with no
threshold of any corpus, and leaves documents of one passage (HotpotQA paragraphs) untouched.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from rag.request import State
from rag.stages.shared import Models
from rag.types import Candidate

STAGE = "context"
_EPS = 1e-6


def _logit(p: float) -> float:
    p = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(p / (1.0 - p))


def section_key(cand: Candidate) -> tuple[str, str]:
    """The section a candidate belongs to: its document and its section path."""
    return cand.chunk.doc_id, cand.chunk.section


def context_scores(
    ranked: Sequence[Candidate], *, weight: float, window: int | None = None
) -> list[float] | None:
    """Each candidate's rerank logit plus ``weight`` x (the score of the best sibling ranked above it / the
    best score of all), or None when some candidate has no rerank score (nothing to read a probability from).

    A sibling is another candidate of the same document and section path, and, with ``window``, at most
    ``window`` chunks away in the document. Only a sibling ranked above lends support, so a section's best
    passage keeps its score: a weaker passage follows its section's best, and no section's best is raised by
    the many weaker chunks of a long section (abstracts of several chunks did that to SciFact's ranking).
    """
    scores = [c.rerank_score for c in ranked]
    if not ranked or any(s is None for s in scores):
        return None
    probs = [float(s) for s in scores if s is not None]
    top = max(probs)
    if top <= 0:
        return [_logit(p) for p in probs]
    sections: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, cand in enumerate(ranked):
        sections[section_key(cand)].append(i)
    out = []
    for i, cand in enumerate(ranked):
        siblings = [
            probs[j]
            for j in sections[section_key(cand)]
            if j < i and (window is None or abs(ranked[j].chunk.ordinal - cand.chunk.ordinal) <= window)
        ]
        support = max(siblings) / top if siblings else 0.0
        out.append(_logit(probs[i]) + weight * support)
    return out


def rank_by_section_context(
    ranked: Sequence[Candidate], *, weight: float, window: int | None = None
) -> list[Candidate]:
    """``ranked`` (best first, reranked) in the order of ``context_scores``; ties keep their order. Scores and
    ``rerank_rank`` stay the reranker's, so thresholds read the same probabilities. Unchanged when ``weight``
    is 0 or a candidate has no rerank score."""
    if weight == 0:
        return list(ranked)
    scores = context_scores(ranked, weight=weight, window=window)
    if scores is None:
        return list(ranked)
    order = sorted(range(len(ranked)), key=lambda i: (-scores[i], i))
    return [ranked[i] for i in order]


# ----------------------------------------------------------------------------- the stage


class SectionContext:
    """The budget's fill order only, raised by the passages' section neighbours: the ranking (candidates,
    SciFact's nDCG) stays the reranker's. Runs when the weight is set and the scores read as probabilities
    (every reranker but "none", whose scores are RRF scores)."""

    name = "context"

    def __init__(self, models: Models, *, weight: float, window: int | None) -> None:
        self.models, self.weight, self.window = models, weight, window

    def run(self, state: State) -> State:
        from rag.models.rerankers import NoReranker

        kept = state.kept
        if not (self.weight and kept and not isinstance(self.models.reranker, NoReranker)):
            return state
        with state.recorder.stage(self.name) as d:
            fill_order = rank_by_section_context(kept, weight=self.weight, window=self.window)
            before = {c.chunk_id: rank for rank, c in enumerate(kept, start=1)}
            d.update(
                weight=self.weight,
                window=self.window,
                raised=[
                    {"chunk_id": c.chunk_id, "from": before[c.chunk_id], "to": rank}
                    for rank, c in enumerate(fill_order, start=1)
                    if before[c.chunk_id] > rank
                ],
            )
        return replace(state, fill_order=fill_order)
