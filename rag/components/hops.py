"""Multi-hop retrieval: follow-up searches from the strongest passages for the terms they name
(rag/stages/hops.py), at most ``max_hops`` rounds, each recorded as its own stage (``hop_1``, ``hop_2``, ...)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rag.components.retrieval import Models, Search
from rag.config import Settings
from rag.request import State, rounded
from rag.stages.budget import score_of
from rag.stages.hops import (
    HOP_NOTHING_NEW,
    AboutIndex,
    follow_ups,
    followable,
    hop_frontier,
    hop_limit,
    link_chains,
    no_follow_up,
)
from rag.types import Candidate, Chain


class Hops:
    """Places linked passages behind the passages that named them; records the chains ((linked chunk id, the
    chunk id that led to it, "chain"), moved or linked in place) and one trace record per hop."""

    name = "hops"

    def __init__(self, settings: Settings, models: Models, search: Search) -> None:
        self.settings, self.models, self.search = settings, models, search
        self._about: tuple[str, AboutIndex] | None = None  # (generation, which passages a term could lead to)

    def run(self, state: State) -> State:
        if state.plan.max_hops <= 0 or not state.ranked:
            return state
        ranked, chains, records = self.follow(state, state.plan.max_hops)
        return replace(state, ranked=ranked, chains=chains, hops=records)

    def follow(
        self, state: State, max_hops: int
    ) -> tuple[list[Candidate], list[Chain], list[dict[str, Any]]]:
        s, filt, ranked = self.settings, state.search_filter, state.ranked
        question, k = state.question.text, state.plan.evidence_k
        chains: list[Chain] = []
        records: list[dict[str, Any]] = []
        frontier = hop_frontier(ranked, passages=s.hop_passages, threshold=state.threshold)
        seen_terms: set[str] = set()
        for hop in range(1, max_hops + 1):
            with state.recorder.stage(f"hop_{hop}") as d:
                record: dict[str, Any] = {"hop": hop, "from": [c.chunk_id for c in frontier], "queries": []}
                records.append(record)
                fus = follow_ups(
                    question, frontier, terms_per_passage=s.hop_terms, seen_terms=frozenset(seen_terms)
                )
                seen_terms.update(f.term for f in fus)
                # A follow-up can only link a passage about its term: one no readable passage is about is
                # not retrieved.
                worth = followable(fus, self.about_index(), allows=filt.allows)
                if skipped := [f.term for f in fus if f not in worth]:
                    record["skipped"] = skipped  # no passage could be about them: nothing to retrieve
                if not worth:
                    record["stopped"] = no_follow_up(fus)
                    d.update(queries=0, linked=0, stopped="no_terms")
                    break
                fus = worth
                self.search.queries.vectors([f.query for f in fus])
                found = []
                for f in fus:
                    cands, _ = self.search.search(f.query, filt, intent=0, top_n=s.hop_top_n)
                    cands = [c.with_(hop=hop, added_by=f"hop_{hop}:{f.term}") for c in cands]
                    reranked = self.models.reranker.rerank(f.query, cands) if cands else []
                    found.append((f, reranked))
                    record["queries"].append(
                        {
                            "term": f.term,
                            "query": f.query,
                            "from": f.parent_id,
                            "found": [c.chunk_id for c in reranked[:3]],
                            "best_score": rounded(score_of(reranked[0])) if reranked else None,
                        }
                    )
                ranked, links = link_chains(ranked, found, k=k)
                chains += [(link.child.chunk_id, link.parent_id, "chain") for link in links]
                record["linked"] = [
                    {
                        "chunk_id": lk.child.chunk_id,
                        "from": lk.parent_id,
                        "term": lk.term,
                        "score": rounded(score_of(lk.child)),
                        "moved": lk.moved,
                    }
                    for lk in links
                ]
                d.update(queries=len(fus), linked=len(links))
                frontier = [lk.child for lk in links if lk.moved]
                if not frontier:
                    record["stopped"] = HOP_NOTHING_NEW
                    d["stopped"] = "nothing_new"
                    break
        else:
            if records:
                records[-1]["stopped"] = hop_limit(max_hops)
        return ranked, chains, records

    def about_index(self) -> AboutIndex:
        """The generation's AboutIndex (which passages a bridge term could lead to), built once per generation,
        by the first question that hops (constructing a Pipeline reads no index; the build is ~0.7 s at 10k
        chunks)."""
        reader = self.models.reader
        generation = reader.generation.name
        if self._about is None or self._about[0] != generation:
            chunks = [c for doc_id in reader.documents() for c in reader.doc_chunks(doc_id)]
            self._about = (generation, AboutIndex(chunks))
        return self._about[1]
