"""The query path, top to bottom. Each stage is a pure function in ``rag/stages``; this runner calls them in
order, times them, and records their inputs and outputs in the trace. Nothing here searches without a filter.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import Any, overload

import numpy as np

from rag import trace_schema as ts
from rag.config import Settings
from rag.cross_encoder import ReaderCrossEncoder
from rag.embedder import Embedder, embedder_for, passage_text
from rag.errors import GenerationError
from rag.index import IndexReader
from rag.models import MODELS_DIR
from rag.protocols import LLM, Reranker, TraceSink
from rag.qdrant_server import open_index_reader
from rag.sentences import sentence_units
from rag.stages.abstention import (
    Abstention,
    abstain,
    abstention_text,
    check_answer_types,
    covered_intents,
    decide_abstention,
    final_answer,
    vouched_evidence,
)
from rag.stages.budget import apply_budget, score_of
from rag.stages.bundling import bundle_dependencies, single_bundles
from rag.stages.citations import (
    check_citations,
    claim_key,
    is_model_answer,
    lexical_support,
    repair_citations,
)
from rag.stages.claims import (
    ClaimCheck,
    add_missing_markers,
    check_claims,
    failed,
    fallback_notice,
    summary,
    verified,
)
from rag.stages.context import rank_by_section_context
from rag.stages.dedup import remove_near_duplicates
from rag.stages.extractive import address_report, check_addresses, evidence_sentences, extractive_answer
from rag.stages.followup import Standalone, standalone, standalone_with_llm
from rag.stages.fusion import merge_intents, rrf_fuse
from rag.stages.hops import (
    HOP_NOTHING_NEW,
    AboutIndex,
    Chain,
    bundle_chains,
    chain_links,
    follow_ups,
    followable,
    hop_frontier,
    hop_limit,
    link_chains,
    no_follow_up,
)
from rag.stages.intents import split_intents
from rag.stages.packing import edge_pack, number_evidence
from rag.stages.prompt import build_prompt
from rag.stages.reading import (
    ReaderModel,
    Reading,
    VectorLookup,
    read,
    reader_coverage,
    reader_support,
    trim_bundles,
)
from rag.stores import fused_candidates
from rag.text import bm25_tokens, count_tokens
from rag.types import (
    Bundle,
    Candidate,
    Citation,
    Dropped,
    Evidence,
    Generated,
    Intent,
    Principal,
    Prompt,
    SearchFilter,
    StageRecord,
)


@dataclass(frozen=True)
class Question:
    """One request: the question and who asks it. The principal is required; there is no anonymous search."""

    text: str
    principal: Principal
    as_of: date | None = None
    tags: frozenset[str] = frozenset()
    session_id: str | None = None
    history: tuple[tuple[str, str], ...] = ()  # (role, content) turns already trimmed to the history budget
    facts: tuple[str, ...] = ()  # confirmed facts about the user, retrieved for this question


@dataclass(frozen=True)
class PipelineOptions:
    """Per-request overrides (evaluation and trace replay use them); None means the settings value."""

    packing: str | None = None
    evidence_k: int | None = None
    token_budget: int | None = None
    use_llm: bool | None = None
    max_hops: int | None = None


@dataclass(frozen=True)
class Plan:
    """What one request runs with: its options, else the settings."""

    packing: str
    evidence_k: int
    token_budget: int
    use_llm: bool  # an LLM client is at hand and the options do not turn it off
    max_hops: int
    generation_mode: str  # the settings' mode with an LLM, else "extractive"


def plan_request(settings: Settings, options: PipelineOptions, *, llm_available: bool) -> Plan:
    """Resolve a request's options against the settings; ``llm_available``: the request has an LLM client."""
    use_llm = llm_available if options.use_llm is None else (options.use_llm and llm_available)
    return Plan(
        packing=options.packing or settings.packing,
        evidence_k=options.evidence_k or settings.evidence_k,
        token_budget=options.token_budget or settings.evidence_token_budget,
        use_llm=use_llm,
        max_hops=settings.max_hops if options.max_hops is None else options.max_hops,
        generation_mode=settings.generation_mode if use_llm else "extractive",
    )


@dataclass(frozen=True)
class Result:
    """Everything the query path produced; ``to_json()`` is the ``rag ask --json`` contract.

    Frozen: its sequences are stored as tuples whatever the caller passed (``dataclasses.replace`` makes a
    changed copy). The dicts (budgets, hops, answer_check, verification, each stage's detail) are JSON records
    the trace schema (rag/trace_schema.py) checks when ``trace()`` builds the trace; the schema is the one
    place the trace's shape is written.
    """

    trace_id: str
    question: Question
    intents: Sequence[Intent]
    candidates: Sequence[Candidate]
    dropped: Sequence[Dropped]
    bundles: Sequence[Bundle]
    evidence: Sequence[Evidence]
    prompt: Prompt | None
    generated: Generated
    answer: str
    abstained: bool
    abstain_reason: str | None
    citations: Sequence[Citation]
    stages: Sequence[StageRecord]
    reranker: str
    packing: str
    generation_mode: str
    budgets: dict[
        str, Any
    ]  # the trace schema's Budgets: what k and the token budgets were, and what was used
    hops: Sequence[dict[str, Any]] = ()
    answer_check: dict[str, Any] = field(default_factory=dict)  # per intent: does the answer address it?
    claims: Sequence[ClaimCheck] = ()  # every claim's verdict (rag/stages/claims.py)
    verification: dict[str, Any] = field(default_factory=dict)  # the claim check, its repair and any fallback
    standalone: Standalone | None = None  # what a follow-up was searched as (rag/stages/followup.py)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def __post_init__(self) -> None:
        for name in _RESULT_SEQUENCES:
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    def trace(self) -> ts.Trace:
        """The typed trace (rag/trace_schema.py); raises pydantic's ValidationError if a stage's record does
        not match the schema (a bug: the schema, not the stage, says what a trace holds)."""
        cited = {c.chunk_id for c in self.citations if c.valid}
        bundle_of = {e.candidate.chunk_id: e.bundle_id for e in self.evidence}
        timings = {s.name: round(s.ms, 3) for s in self.stages}
        timings["total"] = round(sum(s.ms for s in self.stages), 3)
        q = self.question
        prompt = self.prompt
        return ts.Trace(
            trace_id=self.trace_id,
            created_at=self.created_at,
            question=q.text,
            user=q.principal.user,
            groups=sorted(q.principal.groups),
            as_of=(q.as_of or date.today()).isoformat(),
            tags=sorted(q.tags),
            session_id=q.session_id,
            answer=self.answer,
            abstained=self.abstained,
            abstain_reason=self.abstain_reason,
            intents=[ts.Intent(index=i.index, text=i.text) for i in self.intents],
            citations=[
                ts.Citation(
                    n=c.n,
                    chunk_id=c.chunk_id,
                    valid=c.valid,
                    supported=c.supported,
                    sentence=c.sentence,
                    support_score=round(float(c.support_score), 4),
                )
                for c in self.citations
            ],
            evidence=[
                ts.Evidence(
                    n=e.n,
                    **candidate_json(e.candidate),
                    bundle=bundle_of[e.candidate.chunk_id],
                    cited=e.candidate.chunk_id in cited,
                )
                for e in self.evidence
            ],
            candidates=[ts.Candidate(**candidate_json(c), intents=list(c.intents)) for c in self.candidates],
            dropped=[ts.Dropped(chunk_id=d.chunk_id, reason=d.reason, stage=d.stage) for d in self.dropped],
            bundles=[
                ts.Bundle(
                    bundle_id=b.bundle_id, chunk_ids=list(b.chunk_ids), reason=b.reason, score=_r(b.score)
                )
                for b in self.bundles
            ],
            hops=[ts.Hop.model_validate(h) for h in self.hops],
            answer_check=ts.AnswerCheck.model_validate(self.answer_check),
            claims=[ts.Claim.model_validate(c.to_json()) for c in self.claims],
            # the only state shown as "Citations checked": every claim supported, every citation valid and every
            # part of the question addressed by a sentence the reader vouches for
            verified=verified(self.claims)
            and not self.abstained
            and all(c.valid for c in self.citations)
            and bool(self.answer_check.get("complete", True)),
            verification=self.verification,
            budgets=ts.Budgets.model_validate(self.budgets),
            prompt=ts.Prompt(
                system=prompt.system if prompt else "",
                user=prompt.user if prompt else "",
                tokens=prompt.n_tokens if prompt else 0,
            ),
            model=self.generated.model,
            reranker=self.reranker,
            packing=self.packing,
            generation_mode=self.generation_mode,
            tokens=ts.Tokens(
                prompt=self.generated.prompt_tokens,
                completion=self.generated.completion_tokens,
                evidence=sum(e.candidate.chunk.n_tokens for e in self.evidence),
                history=self.budgets.get("history_tokens", 0),
            ),
            timings_ms=timings,
            stages=[ts.Stage(name=s.name, ms=round(s.ms, 3), detail=s.detail) for s in self.stages],
            error=self.generated.error,
            standalone=ts.StandaloneQuestion.model_validate(self.standalone.to_json())
            if self.standalone is not None
            else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The trace as JSON-able dicts: the ``rag ask --json`` shape (docs/schema/trace.schema.json)."""
        return self.trace().to_json()


_RESULT_SEQUENCES = (
    "intents",
    "candidates",
    "dropped",
    "bundles",
    "evidence",
    "citations",
    "stages",
    "hops",
    "claims",
)


@overload
def _r(value: float) -> float: ...
@overload
def _r(value: float | None) -> float | None: ...
def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def candidate_json(c: Candidate) -> dict[str, Any]:
    """The passage fields of a trace's evidence and candidate records (``trace_schema.Passage``)."""
    ch = c.chunk
    return {
        "chunk_id": ch.chunk_id,
        "doc_id": ch.doc_id,
        "source": ch.source,
        "title": ch.title,
        "page": ch.page,
        "page_end": ch.page_end,
        "section": ch.section,
        "text": ch.text,
        "doc_version": ch.doc_version,
        "rerank_rank": c.rerank_rank,
        "rerank_score": _r(c.rerank_score),
        "bm25_rank": c.bm25_rank,
        "bm25_score": _r(c.bm25_score),
        "dense_rank": c.dense_rank,
        "dense_score": _r(c.dense_score),
        "fused_score": _r(c.fused_score),
        "fused_rank": c.fused_rank,
        "hop": c.hop,
        "added_by": c.added_by,
    }


# The weight of a sentence's passage in choosing the quote that answers (dev + sample accuracy 44/70 at 0,
# 45/70 at 0.3, 46/70 at 0.5; docs/evaluation.md). The abstention checks score sentences alone.
QUOTE_CONTEXT = 0.5


class _Recorder:
    """Times stages and keeps a short, JSON-able summary of what each produced."""

    def __init__(self) -> None:
        self.stages: list[StageRecord] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, object]]:
        detail: dict[str, object] = {}
        start = time.perf_counter()
        try:
            yield detail
        finally:
            self.stages.append(StageRecord(name, (time.perf_counter() - start) * 1000, detail))


QUOTES_PER_INTENT = 3  # the reader's answer quotes at most this many sentences for each part of the question


class Pipeline:
    """Runs questions against the published index. Create once per process; ``ask`` is thread-safe for reads."""

    def __init__(
        self,
        settings: Settings,
        *,
        reader: IndexReader | None = None,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        llm: LLM | None = None,
        trace_store: TraceSink | None = None,
        reader_model: ReaderModel | None = None,
    ) -> None:
        from rag.rerank import load_reranker

        self.settings = settings
        self.reader = reader or open_index_reader(settings)
        self.embedder = embedder or embedder_for(settings)
        self._query_vectors: dict[str, np.ndarray] = {}
        self._about: tuple[str, AboutIndex] | None = None  # (generation, which passages a term could lead to)
        # sentence-level rerank features: vectors stored at ingestion + the cached query vector (dot products only)
        self.reranker: Reranker = reranker or load_reranker(
            settings,
            embedder=self.embedder,
            sentence_vectors=getattr(self.reader, "sentence_vectors", None),
            query_vector=self.query_vector,
            passage_tokens=getattr(self.reader, "passage_tokens", None),
        )
        if llm is None and settings.llm_configured:
            from rag.llm import LLMClient

            llm = LLMClient.from_settings(settings)
        self.llm: LLM | None = llm
        self.trace_store: TraceSink | None = trace_store
        self.reader_model: ReaderModel | None = reader_model
        if reader_model is None and "reader" not in settings.ablated:
            self.reader_model = ReaderModel.load()
        # the cross-encoder whose logits the reader model was trained with, when it was
        ce = self.reader_model.meta.get("cross_encoder") if self.reader_model is not None else None
        self.reader_cross_encoder = ReaderCrossEncoder(MODELS_DIR / ce) if ce else None

    # ------------------------------------------------------------------ helpers injected into pure stages
    def _search(
        self,
        text: str,
        filt: SearchFilter,
        *,
        intent: int,
        top_n: int | None = None,
    ) -> tuple[list[Candidate], dict[str, int]]:
        """Both legs for one query text, filtered inside the stores, fused; ``top_n`` overrides both legs' N."""
        s = self.settings
        lexical_n, dense_n = (top_n, top_n) if top_n else (s.lexical_top_n, s.dense_top_n)
        vector = self.query_vector(text)
        tokens = bm25_tokens(text)
        lexical, dense, fused = self.reader.search(
            tokens, vector, filt, n_lexical=lexical_n, n_dense=dense_n, rrf_k=s.rrf_k
        )
        found = {cid: self.reader.get(cid) for cid, _ in [*lexical, *dense]}
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

    def _retrieve(
        self, intents: Sequence[Intent], filt: SearchFilter, *, also_embed: Sequence[str] = ()
    ) -> tuple[list[Candidate], dict[str, object]]:
        # one embedding call for every text this request ranks by: the intents, and the whole question the
        # reranker scores against (a compound question's parts differ from it)
        self.query_vectors([*(i.text for i in intents), *also_embed])
        detail: dict[str, object] = {"lexical_backend": self.reader.lexical_backend}
        per_intent = []
        for intent in intents:
            candidates, counts = self._search(intent.text, filt, intent=intent.index)
            per_intent.append(candidates)
            detail[f"intent_{intent.index}"] = counts
        merged = merge_intents(per_intent)
        detail["candidates"] = len(merged)
        return merged, detail

    def _hops(
        self,
        question: str,
        ranked: list[Candidate],
        filt: SearchFilter,
        k: int,
        max_hops: int,
        rec: _Recorder,
    ) -> tuple[list[Candidate], list[Chain], list[dict[str, Any]]]:
        """Follow-up retrievals from the strongest passages (rag/stages/hops.py), at most ``max_hops`` rounds.

        Returns the ranking with linked passages placed behind the passages that named them, the chains
        ((linked chunk id, the chunk id that led to it, "chain"), moved or linked in place) and one trace
        record per hop.
        """
        s = self.settings
        chains: list[Chain] = []
        records: list[dict[str, Any]] = []
        frontier = hop_frontier(ranked, passages=s.hop_passages, threshold=self.abstain_threshold)
        seen_terms: set[str] = set()
        for hop in range(1, max_hops + 1):
            with rec.stage(f"hop_{hop}") as d:
                record: dict[str, Any] = {"hop": hop, "from": [c.chunk_id for c in frontier], "queries": []}
                records.append(record)
                fus = follow_ups(
                    question, frontier, terms_per_passage=s.hop_terms, seen_terms=frozenset(seen_terms)
                )
                seen_terms.update(f.term for f in fus)
                # A follow-up can only link a passage about its term: one no readable passage is about is
                # not retrieved.
                worth = followable(fus, self._about_index(), allows=filt.allows)
                if skipped := [f.term for f in fus if f not in worth]:
                    record["skipped"] = skipped  # no passage could be about them: nothing to retrieve
                if not worth:
                    record["stopped"] = no_follow_up(fus)
                    d.update(queries=0, linked=0, stopped="no_terms")
                    break
                fus = worth
                self.query_vectors([f.query for f in fus])
                found = []
                for f in fus:
                    cands, _ = self._search(f.query, filt, intent=0, top_n=s.hop_top_n)
                    cands = [c.with_(hop=hop, added_by=f"hop_{hop}:{f.term}") for c in cands]
                    reranked = self.reranker.rerank(f.query, cands) if cands else []
                    found.append((f, reranked))
                    record["queries"].append(
                        {
                            "term": f.term,
                            "query": f.query,
                            "from": f.parent_id,
                            "found": [c.chunk_id for c in reranked[:3]],
                            "best_score": _r(score_of(reranked[0])) if reranked else None,
                        }
                    )
                ranked, links = link_chains(ranked, found, k=k)
                chains += [(link.child.chunk_id, link.parent_id, "chain") for link in links]
                record["linked"] = [
                    {
                        "chunk_id": lk.child.chunk_id,
                        "from": lk.parent_id,
                        "term": lk.term,
                        "score": _r(score_of(lk.child)),
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

    def _about_index(self) -> AboutIndex:
        """The generation's AboutIndex (which passages a bridge term could lead to), built once per generation, by
        the first question that hops (constructing a Pipeline reads no index; the build is ~0.7 s at 10k chunks)."""
        generation = self.reader.generation.name
        if self._about is None or self._about[0] != generation:
            chunks = [c for doc_id in self.reader.documents() for c in self.reader.doc_chunks(doc_id)]
            self._about = (generation, AboutIndex(chunks))
        return self._about[1]

    def clear_caches(self) -> None:
        """Forget cached query vectors (benchmarks time cold queries with it)."""
        self._query_vectors.clear()

    def query_vector(self, text: str) -> np.ndarray:
        """Query embeddings are reused within and across requests (intents, extractive scoring)."""
        vector = self._query_vectors.get(text)
        if vector is None:
            vector = self.embedder.embed_queries([text])[0]
            if len(self._query_vectors) > 2048:
                self._query_vectors.clear()
            self._query_vectors[text] = vector
        return vector

    def query_vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Vectors for several query texts; the ones not cached are embedded in one batch."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._query_vectors]
        if missing:
            if len(self._query_vectors) + len(missing) > 2048:
                self._query_vectors.clear()
            self._query_vectors.update(zip(missing, self.embedder.embed_queries(missing), strict=True))
        return [self._query_vectors[t] for t in texts]

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
            vectors = self.reader.sentence_vectors(e.candidate.chunk_id)
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
                known.update(zip(missing, self.embedder.embed_queries(missing), strict=True))
            qv = self.query_vector(query)
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

    def _stored_sentence_vectors(self, evidence: Sequence[Evidence]) -> dict[str, np.ndarray]:
        """The evidence sentences' vectors embedded at ingestion, by sentence text."""
        known: dict[str, np.ndarray] = {}
        for e in evidence:
            vectors = self.reader.sentence_vectors(e.candidate.chunk_id)
            units = sentence_units(e.candidate.chunk.text)
            if vectors is not None and len(vectors) == len(units):
                known.update(zip(units, vectors, strict=True))
        return known

    def sentence_vector_lookup(self, evidence: Sequence[Evidence]) -> VectorLookup:
        """Vectors of evidence sentences by text: the ones stored at ingestion, the rest (a table row read with its
        header, a passage of an index built before sentence vectors) embedded now, once each, or with
        ``stored_only`` a zero row."""
        known = self._stored_sentence_vectors(evidence)

        def lookup(texts: Sequence[str], *, stored_only: bool = False) -> np.ndarray:
            if stored_only:
                zero = np.zeros(self.embedder.dim, dtype=np.float32)
                return np.vstack([known.get(x, zero) for x in texts]).astype(np.float32)
            missing = [x for x in dict.fromkeys(texts) if x not in known]
            if missing:
                known.update(zip(missing, self.embedder.embed_queries(missing), strict=True))
            return np.vstack([known[x] for x in texts]).astype(np.float32)

        return lookup

    def sentence_scores(self, query: str, sentences: Sequence[str]) -> list[float]:
        """Scores with every sentence embedded now (for callers without evidence, e.g. evaluation)."""
        return self.sentence_scorer(())(query, sentences)

    def support_scorer(self, evidence: Sequence[Evidence]) -> Callable[[str, str], float]:
        """How well a passage supports a claim: the mean of lexical coverage and the best cosine between the
        claim and one of the passage's sentences (vectors from the index; claims embedded once each)."""
        vectors: dict[str, np.ndarray] = {}
        # An extractive claim is an evidence sentence: its vector is already in the index.
        claims: dict[str, np.ndarray] = {}
        for e in evidence:
            v = self.reader.sentence_vectors(e.candidate.chunk_id)
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
                claims[key] = self.query_vector(claim)
            return 0.5 * lexical + 0.5 * max(0.0, float(np.max(units @ claims[key])))

        return support

    @property
    def _scores_are_probabilities(self) -> bool:
        """Whether rerank scores read as P(relevant): every reranker but "none", whose scores are RRF scores."""
        from rag.rerank import NoReranker

        return not isinstance(self.reranker, NoReranker)

    @property
    def abstain_threshold(self) -> float:
        if self.settings.abstain_threshold is not None:
            return self.settings.abstain_threshold
        return float(getattr(self.reranker, "abstain_threshold", 0.0))

    # ------------------------------------------------------------------ the query path
    def ask(
        self, question: Question, options: PipelineOptions | None = None, *, llm: LLM | None = None
    ) -> Result:
        """Answer ``question``; ``llm`` replaces this pipeline's LLM client for this request only (the UI passes
        a client that streams into the page), everything else is shared."""
        llm = self.llm if llm is None else llm
        plan = plan_request(self.settings, options or PipelineOptions(), llm_available=llm is not None)
        s, k, threshold = self.settings, plan.evidence_k, self.abstain_threshold
        rec = _Recorder()

        with rec.stage("index") as d:
            d["switched"] = self.reader.refresh()
            d["generation"] = self.reader.generation.name
        with rec.stage("filters") as d:
            filt = SearchFilter(question.principal, question.as_of or date.today(), question.tags)
            d.update(
                groups=sorted(filt.principal.readable_groups),
                as_of=filt.as_of.isoformat(),
                tags=sorted(filt.tags),
            )
        asked = question
        with rec.stage("standalone") as d:
            # a follow-up is searched and answered as the question it stands for (rag/stages/followup.py)
            # the pipeline's own client: a request's client may stream into the page, and the rewrite is not
            # part of the answer the user reads
            rewrite = self._standalone(question, (self.llm or llm) if plan.use_llm else None)
            d.update(rewrite.to_json())
        if rewrite.rewritten:
            question = replace(question, text=rewrite.question)
        with rec.stage("intents") as d:
            intents = [Intent(0, question.text)] if "intents" in s.ablated else split_intents(question.text)
            d["intents"] = [i.text for i in intents]
        with rec.stage("retrieve") as d:
            candidates, detail = self._retrieve(intents, filt, also_embed=[question.text])
            d.update(detail)
        with rec.stage("rerank") as d:
            reranked = self.reranker.rerank(question.text, candidates) if candidates else []
            d["reranker"] = self.reranker.name
        chains: list[Chain] = []
        hops: list[dict[str, Any]] = []
        if plan.max_hops > 0 and reranked:
            reranked, chains, hops = self._hops(question.text, reranked, filt, k, plan.max_hops, rec)
        with rec.stage("abstention") as d:
            coverage = decide_abstention(reranked, intents, threshold=threshold)
            d.update(
                abstain=coverage.abstain, uncovered=[i.text for i in coverage.uncovered], threshold=threshold
            )
        # Evidence is selected and shown even when the answer abstains: the trace (and the user) can see what
        # was found and why it was not enough.
        dropped: list[Dropped] = []
        with rec.stage("dedup") as d:
            kept, drops = remove_near_duplicates(reranked, threshold=s.dedup_threshold)
            dropped += drops
            d["dropped"] = len(drops)
        fill_order = kept
        if s.section_context_weight and kept and self._scores_are_probabilities:
            # the budget's fill order only: the ranking (candidates, SciFact's nDCG) stays the reranker's
            with rec.stage("context") as d:
                fill_order = rank_by_section_context(
                    kept, weight=s.section_context_weight, window=s.section_context_window
                )
                before = {c.chunk_id: rank for rank, c in enumerate(kept, start=1)}
                d.update(
                    weight=s.section_context_weight,
                    window=s.section_context_window,
                    raised=[
                        {"chunk_id": c.chunk_id, "from": before[c.chunk_id], "to": rank}
                        for rank, c in enumerate(fill_order, start=1)
                        if before[c.chunk_id] > rank
                    ],
                )
        with rec.stage("budget") as d:
            selected, drops = apply_budget(
                fill_order,
                coverage.covered(intents),
                k=k,
                token_budget=plan.token_budget,
                links=chain_links(chains),
                min_score=threshold if s.budget_score_floor else None,
            )
            dropped += drops
            d.update(selected=len(selected), k=k, token_budget=plan.token_budget)
        with rec.stage("bundle") as d:
            added: list[Candidate] = []
            if "bundling" in s.ablated:
                bundles = single_bundles(selected)
            else:
                chains = bundle_chains(question.text, selected, chains)
                d["chains"] = [list(c) for c in chains]
                bundles, added, drops = bundle_dependencies(
                    selected,
                    self.reader,
                    filt,
                    pool=kept,
                    token_budget=plan.token_budget,
                    chains=chains,
                    join_adjacent="adjacent" not in s.ablated,
                )
                dropped += drops
            d.update(bundles=len(bundles), added=[c.chunk_id for c in added])
        with rec.stage("pack") as d:
            evidence = number_evidence(edge_pack(bundles, plan.packing))
            d.update(strategy=plan.packing, order=[e.candidate.chunk_id for e in evidence])
        if evidence and not coverage.abstain and "answer_types" not in s.ablated:
            with rec.stage("answer_type") as d:
                vouched = vouched_evidence(evidence, threshold=threshold, k=s.answer_check_k)
                types = check_answer_types(
                    question.text,
                    intents,
                    coverage,
                    [e.candidate.chunk.text for e in vouched],
                    pool=[c.chunk.text for c in reranked],
                    score=self.sentence_scorer(vouched),
                    labelled=[
                        passage_text(
                            e.candidate.chunk.title, e.candidate.chunk.section, e.candidate.chunk.text
                        )
                        for e in vouched
                    ],
                )
                coverage = types.coverage
                d.update({f"intent_{intent.index}": why for intent, why in types.missing})
        reading: Reading | None = None
        if evidence and self.reader_model is not None and "reader" not in s.ablated:
            with rec.stage("read") as d:
                # which evidence sentence states what each intent asks: the answer quotes them, an intent with
                # none is unanswered, and the badge needs each quoted one to clear the support bar
                reading = self._read(intents, evidence)
                if not coverage.abstain:
                    coverage = reader_coverage(coverage, intents, reading)
                if s.evidence_cut and not coverage.abstain:
                    trimmed, cut = trim_bundles(
                        bundles, evidence, reading, cut=s.evidence_cut, keep=s.evidence_min_bundles
                    )
                    if cut:  # fewer passages: pack and number them again, and read them in their new places
                        bundles, dropped = trimmed, dropped + cut
                        evidence = number_evidence(edge_pack(bundles, plan.packing))
                        reading = self._read(intents, evidence)
                        d.update(
                            cut=[c.chunk_id for c in cut], order=[e.candidate.chunk_id for e in evidence]
                        )
                d.update(reading.to_json())
        with rec.stage("prompt") as d:
            prompt = build_prompt(
                question.text,
                evidence,
                history=question.history,
                facts=question.facts,
                repeat_question=s.repeat_question,
                mode=s.generation_mode,
            )
            d["tokens"] = prompt.n_tokens
        with rec.stage("generate") as d:
            abstention = abstain(coverage, has_evidence=bool(evidence))
            generated = self._generate(
                question,
                intents,
                evidence,
                prompt,
                abstention,
                coverage.uncovered,
                llm if plan.use_llm else None,
                reading,
            )
            answer = final_answer(question.text, intents, coverage, generated, abstention)
            abstained = abstention is not None
            model_answer = is_model_answer(generated, use_llm=plan.use_llm, abstained=abstained)
            d.update(model=generated.model, error=generated.error)
        with rec.stage("citations") as d:
            support = self.support_scorer(evidence)
            if model_answer and s.citation_repair:
                # a model's [n] that points next to the passage it used is re-pointed, never invented
                answer, repairs = repair_citations(answer, evidence, support=support)
                if repairs:
                    d.update(repairs=repairs, model_answer=generated.text)
            citations = check_citations(answer, evidence, support=support)
            d.update(
                total=len(citations),
                invalid=sum(not c.valid for c in citations),
                unsupported=sum(not c.supported for c in citations),
            )
        with rec.stage("claims") as d:
            # every claim, cited or not, against the evidence sentence that best matches it; an LLM answer
            # that fails is repaired once, then answered extractively (rag/stages/claims.py)
            checked, claims, verification = self._verify(
                question,
                intents,
                evidence,
                prompt,
                answer,
                coverage.uncovered,
                llm if model_answer else None,
                support,
                abstained,
                reading,
            )
            if checked != answer:
                answer, citations = checked, check_citations(checked, evidence, support=support)
            d.update(verification)
        with rec.stage("answer_check") as d:
            # does the answer address every part of the question? ("Citations checked" needs it)
            answer_check = address_report(check_addresses(answer, intents, abstained=abstained))
            if reading is not None and not abstained:
                # the badge also needs the reader: every intent answered by a quoted sentence it vouches for
                grounds = [c.evidence_sentence for c in claims if c.evidence_sentence]
                answer_check = reader_support(answer, intents, reading, answer_check, grounds=grounds)
            d.update(answer_check)
        result = Result(
            trace_id=uuid.uuid4().hex,
            question=asked,
            standalone=rewrite,
            intents=intents,
            candidates=reranked,
            dropped=dropped,
            bundles=bundles,
            evidence=evidence,
            prompt=prompt,
            generated=generated,
            answer=answer,
            abstained=abstained,
            abstain_reason=abstention.reason if abstention is not None else None,
            citations=citations,
            stages=rec.stages,
            reranker=self.reranker.name,
            packing=plan.packing,
            generation_mode=plan.generation_mode,
            hops=hops,
            answer_check=answer_check,
            claims=claims,
            verification={key: v for key, v in verification.items() if key != "claims"},
            budgets={
                "evidence_k": k,
                "evidence_token_budget": plan.token_budget,
                "evidence_tokens": sum(e.candidate.chunk.n_tokens for e in evidence),
                "history_token_budget": s.history_token_budget,
                "history_tokens": sum(count_tokens(c) for _, c in question.history),
                "facts": len(question.facts),
            },
        )
        if self.trace_store is not None:
            self.trace_store.save_trace(result.to_json())
        return result

    def _standalone(self, question: Question, llm: LLM | None) -> Standalone:
        """The standalone question a follow-up stands for; the question itself without a conversation."""
        if not question.history or "followup" in self.settings.ablated:
            reason = "switched off (ablate=followup)" if question.history else "no earlier question"
            return Standalone(question.text, question.text, False, "none", None, reason)
        bar = self.settings.followup_bar
        if llm is not None:
            return standalone_with_llm(question.text, question.history, llm, self.query_vectors, bar=bar)
        return standalone(question.text, question.history, self.query_vectors, bar=bar)

    def _read(self, intents: Sequence[Intent], evidence: Sequence[Evidence]) -> Reading:
        """The reader's probabilities for every (intent, evidence sentence) pair."""
        assert self.reader_model is not None
        texts = [i.text for i in intents]
        return read(
            texts,
            evidence_sentences(evidence),
            model=self.reader_model,
            query_vectors=self.query_vectors(texts),
            vectors=self.sentence_vector_lookup(evidence),
            passage_scores={e.n: score_of(e.candidate) for e in evidence},
            cross_encoder=self.reader_cross_encoder,
        )

    def _generate(
        self,
        question: Question,
        intents: Sequence[Intent],
        evidence: Sequence[Evidence],
        prompt: Prompt,
        abstention: Abstention | None,
        uncovered: Sequence[Intent],
        llm: LLM | None,
        reading: Reading | None = None,
    ) -> Generated:
        if abstention is not None:
            return Generated(text="", model="none")
        if llm is not None:
            from rag.generation import generate

            try:
                return generate(
                    prompt, evidence, question.text, llm, self.settings.generation_mode, self.settings
                )
            except GenerationError as exc:
                # The user still gets an answer (quoted evidence); the trace keeps the LLM's failure.
                fallback = self._extractive(question, intents, evidence, uncovered, reading)
                return Generated(
                    text=fallback.text,
                    model=f"extractive (fallback; {self.settings.llm_model} failed)",
                    error=str(exc),
                )
        return self._extractive(question, intents, evidence, uncovered, reading)

    def _verify(
        self,
        question: Question,
        intents: Sequence[Intent],
        evidence: Sequence[Evidence],
        prompt: Prompt,
        answer: str,
        uncovered: Sequence[Intent],
        llm: LLM | None,
        support: Callable[[str, str], float],
        abstained: bool,
        reading: Reading | None = None,
    ) -> tuple[str, list[ClaimCheck], dict[str, Any]]:
        """Check every claim of ``answer``. With ``llm`` (an LLM answer): uncited claims a passage holds get
        its marker, and an answer with a failed claim gets one repair call naming the failed claims; if the
        repair fails too, the answer is the extractive one with a notice saying why. Returns the answer, the
        verdicts and the trace record (the model's text, every verdict, the repair)."""
        if abstained or not evidence:
            return answer, [], {"checked": False, "reason": "abstained: no claim to check"}
        notice = f"\n\n{abstention_text(question.text, uncovered, intents)}" if uncovered else ""
        body = answer[: -len(notice)] if notice and answer.endswith(notice) else answer
        cosine = self.claim_cosine(evidence)
        checks = check_claims(body, evidence, support=support, cosine=cosine)
        record: dict[str, Any] = {
            "model_answer": body,
            "claims": [c.to_json() for c in checks],
            "verdicts": summary(checks),
        }
        if llm is not None and self.settings.citation_repair:
            marked, added = add_missing_markers(body, checks)
            if added:  # a claim the model left unmarked gets the passage that holds it
                body, checks = marked, check_claims(marked, evidence, support=support, cosine=cosine)
                record["markers_added"] = added
        if llm is None or not failed(checks):
            record["verified"] = verified(checks)
            return body + notice, checks, record
        from rag.generation import repair_claims

        bad = failed(checks)
        repair: dict[str, Any] = {
            "failed": [{"text": c.claim.text, "verdict": c.verdict, "reason": c.reason} for c in bad]
        }
        record["repair"] = repair
        try:
            repaired = repair_claims(prompt, evidence, body, bad, llm, self.settings)
            text = repaired.text
            repair["model_answer"] = text
            if self.settings.citation_repair:
                text, moved = repair_citations(text, evidence, support=support)
                again = check_claims(text, evidence, support=support, cosine=cosine)
                text, added = add_missing_markers(text, again)
                if moved or added:
                    again = check_claims(text, evidence, support=support, cosine=cosine)
                    repair.update(citation_repairs=moved, markers_added=added)
            else:
                again = check_claims(text, evidence, support=support, cosine=cosine)
            repair.update(
                claims=[c.to_json() for c in again], verdicts=summary(again), verified=verified(again)
            )
        except GenerationError as exc:
            again, repair["error"] = [], str(exc)
        if again and verified(again):
            record.update(repaired=True, verified=True)
            return text + notice, again, record
        # Neither answer holds: quote the evidence, and say why the model's answer is not shown.
        why = fallback_notice(failed(again) or bad)
        fallback = self._extractive(question, intents, evidence, uncovered, reading).text
        final = check_claims(fallback, evidence, support=support, cosine=cosine)
        record.update(
            repaired=False,
            fallback="extractive",
            notice=why,
            verified=verified(final),
            fallback_claims=[c.to_json() for c in final],
        )
        return f"{fallback}\n\n{why}{notice}", final, record

    def claim_cosine(self, evidence: Sequence[Evidence]) -> Callable[[str, Sequence[str]], list[float]]:
        """Cosines between a claim and passage sentences, from the sentence vectors stored at ingestion (a claim
        that quotes an evidence sentence reuses its vector; other claims are embedded once each)."""
        known = self._stored_sentence_vectors(evidence)
        by_key = {claim_key(u): v for u, v in known.items()}

        def cosine(claim: str, sentences: Sequence[str]) -> list[float]:
            missing = [x for x in dict.fromkeys(sentences) if x not in known]
            if missing:
                known.update(zip(missing, self.embedder.embed_queries(missing), strict=True))
            vector = by_key.get(claim_key(claim))
            if vector is None:
                vector = self.query_vector(claim)
            return [float(known[x] @ vector) for x in sentences]

        return cosine

    def _extractive(
        self,
        question: Question,
        intents: Sequence[Intent],
        evidence: Sequence[Evidence],
        uncovered: Sequence[Intent],
        reading: Reading | None = None,
    ) -> Generated:
        covered = covered_intents(intents, uncovered)
        if reading is not None:
            # the reader's probabilities, looked up by (intent, sentence); a sentence it did not read scores 0
            rows = {i.text: row for row, i in enumerate(intents)}
            sentences = reading.sentences

            def probability(query: str, texts: Sequence[str]) -> list[float]:
                p = reading.probabilities[rows[query]] if query in rows else np.zeros(len(sentences))
                by_text: dict[str, float] = {}
                for s, value in zip(sentences, p, strict=True):
                    by_text[s.text] = max(by_text.get(s.text, 0.0), float(value))
                    if s.row:
                        by_text[s.row] = max(by_text.get(s.row, 0.0), float(value))
                return [by_text.get(t, 0.0) for t in texts]

            return extractive_answer(
                question.text,
                covered,
                evidence,
                score=probability,
                min_score=reading.answer_bar,
                tie_band=1.0 - reading.keep_ratio,
                sentences=sentences,
                max_sentences=QUOTES_PER_INTENT * len(covered),
            )
        scorer = self.sentence_scorer(evidence, context=QUOTE_CONTEXT)
        return extractive_answer(question.text, covered, evidence, score=scorer)
