"""The query path, top to bottom: ``build_stages`` lists the stages in the order they run, each a small component
(``name``, ``run(state) -> state``) in the module of rag/stages named for it, beside the pure functions it runs;
``Pipeline.ask`` loops over them on one request's state (rag/request.py), and each stage records its output in
the trace. Nothing here searches without a filter.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from rag.config import Settings
from rag.models.dependency import DependencyModel
from rag.models.embedder import Embedder, embedder_for, reading_encoder_for
from rag.models.reader import ReaderModel
from rag.models.reading import identity
from rag.protocols import LLM, Reranker, TraceSink
from rag.request import PipelineOptions, Plan, Question, Recorder, Stage, State, plan_request, rounded
from rag.stages.abstention import DecideAbstention
from rag.stages.answer_check import AnswerCheck
from rag.stages.answer_type import CheckAnswerTypes
from rag.stages.budget import Budget
from rag.stages.bundle import BundleDependencies
from rag.stages.citations import Citations
from rag.stages.claims import Claims, verified
from rag.stages.confirm import Confirm
from rag.stages.context import SectionContext
from rag.stages.dedup import Dedup
from rag.stages.filters import Filters
from rag.stages.generate import Extractive, Generate
from rag.stages.hops import Hops
from rag.stages.index import OpenIndex
from rag.stages.intents import Intents
from rag.stages.pack import Pack
from rag.stages.prompt import BuildPrompt
from rag.stages.read import Read
from rag.stages.rerank import Rerank
from rag.stages.retrieve import Retrieve, Search
from rag.stages.shared import Models, QueryVectors, Scoring, VectorLookup
from rag.stages.standalone import StandaloneQuestion
from rag.stores.index import IndexReader
from rag.stores.qdrant_server import open_index_reader
from rag.text import count_tokens
from rag.traces import schema as ts
from rag.types import (
    Bundle,
    Candidate,
    Citation,
    ClaimCheck,
    Dropped,
    Evidence,
    Excerpt,
    Generated,
    Intent,
    Prompt,
    StageRecord,
    Standalone,
)

# An ablation (settings ``ablate``, rag/config.py ABLATIONS) either removes a stage, by the stage's name, or
# switches off a check inside one (intents, bundling, adjacent, followup, followup_topic; excerpts, the models' own:
# see build_stages and rag/pipeline.py).
REMOVES_STAGE = {"answer_types": "answer_type", "reader": "read"}


def build_stages(settings: Settings, models: Models, queries: QueryVectors) -> list[Stage]:
    """The stages a request runs, in order, less the ones the settings ablate."""
    off = settings.ablated
    search = Search(settings, models, queries)
    scoring = Scoring(models, queries)
    extractive = Extractive(scoring)
    stages: list[Stage] = [
        OpenIndex(models),
        Filters(),
        StandaloneQuestion(queries, bar=settings.followup_bar, enabled="followup" not in off),
        Intents(split="intents" not in off),
        Retrieve(search),
        Rerank(models),
        Hops(settings, models, search),
        DecideAbstention(),
        Dedup(threshold=settings.dedup_threshold),
        SectionContext(
            models, weight=settings.section_context_weight, window=settings.section_context_window
        ),
        Budget(score_floor=settings.budget_score_floor),
        BundleDependencies(models, bundling="bundling" not in off, join_adjacent="adjacent" not in off),
        Pack(),
        CheckAnswerTypes(
            scoring, check_k=settings.answer_check_k, followup_topic="followup_topic" not in off
        ),
        Read(models, queries, scoring, cut=settings.evidence_cut, keep=settings.evidence_min_bundles),
        BuildPrompt(repeat_question=settings.repeat_question, mode=settings.generation_mode),
        Generate(settings, extractive),
        Citations(scoring, repair=settings.citation_repair),
        Claims(settings, scoring, extractive),
        AnswerCheck(),
        Confirm(enabled=settings.llm_confirm, bar=settings.llm_confirm_bar),
    ]
    removed = {stage for ablation, stage in REMOVES_STAGE.items() if ablation in off}
    return [stage for stage in stages if stage.name not in removed]


@dataclass(frozen=True)
class Result:
    """Everything the query path produced; ``to_json()`` is the ``rag ask --json`` contract.

    Frozen: its sequences are stored as tuples whatever the caller passed (``dataclasses.replace`` makes a
    changed copy). The dicts (budgets, hops, answer_check, verification, each stage's detail) are JSON records
    the trace schema (rag/traces/schema.py) checks when ``trace()`` builds the trace; the schema is the one
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
    standalone: Standalone | None = None  # what a follow-up was searched as (rag/stages/standalone.py)
    excerpts: Sequence[
        Excerpt
    ] = ()  # what an extractive answer shows, point by point (rag/stages/extractive.py)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def __post_init__(self) -> None:
        for name in _RESULT_SEQUENCES:
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    def trace(self) -> ts.Trace:
        """The typed trace (rag/traces/schema.py); raises pydantic's ValidationError if a stage's record does
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
                    bundle_id=b.bundle_id,
                    chunk_ids=list(b.chunk_ids),
                    reason=b.reason,
                    score=rounded(b.score),
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
            channel=q.channel,
            api_key=ts.ApiKeyUse(
                id=q.api_key.id, name=q.api_key.name, user=q.api_key.user, on_behalf=q.api_key.on_behalf
            )
            if q.api_key is not None
            else None,
            excerpts=[
                ts.Excerpt(
                    n=x.n,
                    chunk_id=x.chunk_id,
                    heading=x.heading,
                    start=x.span[0],
                    end=x.span[1],
                    sentences=list(x.sentences),
                    key=list(x.key),
                    intents=list(x.intents),
                    score=x.score,
                )
                for x in self.excerpts
            ],
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
    "excerpts",
)


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
        "rerank_score": rounded(c.rerank_score),
        "bm25_rank": c.bm25_rank,
        "bm25_score": rounded(c.bm25_score),
        "dense_rank": c.dense_rank,
        "dense_score": rounded(c.dense_score),
        "fused_score": rounded(c.fused_score),
        "fused_rank": c.fused_rank,
        "hop": c.hop,
        "added_by": c.added_by,
    }


class Pipeline:
    """Runs questions against the published index. Create once per process; ``ask`` is thread-safe for reads.

    Opens what it is not given, in this order: the reader for these settings (``open_index_reader`` raises
    EmptyIndexError / IndexUnavailableError before any model loads), the embedder, the reading encoder, the
    reranker wired to the reader's stored sentence vectors, reading vectors and passage tokens and to both
    query-vector caches, the configured LLM client, the reader model (unless ablated).
    """

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
        reading_encoder: Embedder | None = None,
    ) -> None:
        from rag.models.rerankers import load_reranker

        self.settings = settings
        reader = reader or open_index_reader(settings)
        embedder = embedder or embedder_for(settings)
        reading_encoder = reading_encoder or reading_encoder_for(settings)
        reading_model = identity(settings.reading_model, settings.reading_runtime)
        # sentence-level rerank features: vectors stored at ingestion + the cached query vectors (dot products only)
        reranker = reranker or load_reranker(
            settings,
            embedder=embedder,
            sentence_vectors=getattr(reader, "sentence_vectors", None),
            query_vector=self.query_vector,
            passage_tokens=getattr(reader, "passage_tokens", None),
            reading_encoder=reading_encoder,
            reading_vectors=_bound_reading_vectors(reader, reading_model),
            reading_query_vector=self.reading_query_vector,
        )
        if llm is None and settings.llm_configured:
            from rag.llm.client import LLMClient

            llm = LLMClient.from_settings(settings)
        self.llm: LLM | None = llm
        self.trace_store: TraceSink | None = trace_store
        if reader_model is None and "reader" not in settings.ablated:
            reader_model = ReaderModel.load()
        self.models = Models(
            reader,
            embedder,
            reranker,
            reader_model,
            reading_encoder,
            reading_model,
            dependency_model=None if "excerpts" in settings.ablated else DependencyModel.load(),
        )
        self.queries = QueryVectors(self.models)
        self.scoring = Scoring(self.models, self.queries)
        self.search = Search(settings, self.models, self.queries)
        self.stages = build_stages(settings, self.models, self.queries)

    def ask(
        self, question: Question, options: PipelineOptions | None = None, *, llm: LLM | None = None
    ) -> Result:
        """Answer ``question``; ``llm`` replaces this pipeline's LLM client for this request only (the UI passes
        a client that streams into the page), everything else is shared."""
        llm = self.llm if llm is None else llm
        plan = plan_request(self.settings, options or PipelineOptions(), llm_available=llm is not None)
        state = State(
            asked=question,
            question=question,
            plan=plan,
            threshold=self.abstain_threshold,
            recorder=Recorder(),
            llm=llm if plan.use_llm else None,
            rewrite_llm=(self.llm or llm) if plan.use_llm else None,
        )
        for stage in self.stages:
            state = stage.run(state)
        result = self.result(state)
        if self.trace_store is not None:
            self.trace_store.save_trace(result.to_json())
        return result

    def result(self, state: State) -> Result:
        """What a request's stages produced, as the trace records it."""
        plan, question = state.plan, state.question
        return Result(
            trace_id=uuid.uuid4().hex,
            question=state.asked,
            standalone=state.standalone,
            intents=state.intents,
            candidates=state.ranked,
            dropped=state.dropped,
            bundles=state.bundles,
            evidence=state.evidence,
            prompt=state.prompt,
            generated=state.generated,
            answer=state.answer,
            abstained=state.abstained,
            abstain_reason=state.abstention.reason if state.abstention is not None else None,
            citations=state.citations,
            stages=state.recorder.stages,
            reranker=self.reranker.name,
            packing=plan.packing,
            generation_mode=plan.generation_mode,
            hops=state.hops,
            answer_check=state.answer_check,
            claims=state.claims,
            verification=state.verification,
            excerpts=state.excerpts,
            budgets={
                "evidence_k": plan.evidence_k,
                "evidence_token_budget": plan.token_budget,
                "evidence_tokens": sum(e.candidate.chunk.n_tokens for e in state.evidence),
                "history_token_budget": self.settings.history_token_budget,
                "history_tokens": sum(count_tokens(c) for _, c in question.history),
                "facts": len(question.facts),
            },
        )

    # ------------------------------------------------------------------ the models the stages share
    @property
    def reader(self) -> IndexReader:
        return self.models.reader

    @property
    def embedder(self) -> Embedder:
        return self.models.embedder

    @embedder.setter
    def embedder(self, embedder: Embedder) -> None:
        self.models.embedder = embedder

    @property
    def reranker(self) -> Reranker:
        return self.models.reranker

    @reranker.setter
    def reranker(self, reranker: Reranker) -> None:
        self.models.reranker = reranker

    @property
    def reader_model(self) -> ReaderModel | None:
        return self.models.reader_model

    @property
    def abstain_threshold(self) -> float:
        """The score a passage needs to answer: the settings' override, else the reranker's calibrated one."""
        if self.settings.abstain_threshold is not None:
            return self.settings.abstain_threshold
        return float(getattr(self.reranker, "abstain_threshold", 0.0))

    # ------------------------------------------------------------------ for evaluation and benchmarks
    def query_vector(self, text: str) -> np.ndarray:
        """Query embeddings are reused within and across requests (intents, extractive scoring)."""
        return self.queries.vector(text)

    def query_vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Vectors for several query texts; the ones not cached are embedded in one batch."""
        return self.queries.vectors(texts)

    @property
    def _query_vectors(self) -> dict[str, np.ndarray]:
        return self.queries.cache

    def clear_caches(self) -> None:
        """Forget cached query vectors (benchmarks time cold queries with it)."""
        self.queries.cache.clear()

    def sentence_vector_lookup(self, evidence: Sequence[Evidence]) -> VectorLookup:
        return self.scoring.sentence_vector_lookup(evidence)

    def reading_vector_lookup(self, evidence: Sequence[Evidence]) -> VectorLookup:
        """The reading encoder's vectors of evidence sentences, by ``rag.models.sentences.reading_text``."""
        return self.scoring.reading_vector_lookup(evidence)

    def reading_query_vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The reading encoder's vectors of query texts (cached)."""
        return self.scoring.reading.vectors(texts)

    def reading_query_vector(self, text: str) -> np.ndarray:
        """The reading encoder's vector of a query text (cached, shared with the reader)."""
        return self.scoring.reading.vector(text)

    def sentence_scores(self, query: str, sentences: Sequence[str]) -> list[float]:
        """Scores with every sentence embedded now (for callers without evidence, e.g. evaluation)."""
        return self.scoring.sentence_scorer(())(query, sentences)


def _bound_reading_vectors(reader: IndexReader, model: str) -> Callable[[str], np.ndarray | None] | None:
    """chunk_id -> the reading vectors ``model`` embedded at ingestion (None: the reader stores none)."""
    lookup = getattr(reader, "reading_vectors", None)
    if lookup is None:
        return None
    return lambda chunk_id: lookup(chunk_id, model)


__all__ = ["Pipeline", "PipelineOptions", "Plan", "Question", "Result", "candidate_json", "plan_request"]
