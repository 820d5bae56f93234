"""The query path as components: each stage of ``Pipeline.ask`` (rag/pipeline.py) is a small object with a
``name`` and a ``run(state) -> state`` (rag/request.py). The ones that need a model or the index own a
reference to it; the logic they run is the pure functions in ``rag/stages``.

``build_stages`` lists them top to bottom, the order the trace records them in.
"""

from __future__ import annotations

from rag.components.generation import BuildPrompt, Extractive, Generate
from rag.components.hops import Hops
from rag.components.question import Intents, StandaloneQuestion
from rag.components.reader import Read
from rag.components.retrieval import Filters, Models, OpenIndex, QueryVectors, Rerank, Retrieve, Search
from rag.components.scoring import Scoring
from rag.components.selection import (
    Abstention,
    AnswerTypes,
    Budget,
    Bundle,
    Dedup,
    Pack,
    SectionContext,
)
from rag.components.verification import AnswerCheck, Citations, Claims, Confirm
from rag.config import Settings
from rag.request import Stage

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
        Abstention(),
        Dedup(threshold=settings.dedup_threshold),
        SectionContext(
            models, weight=settings.section_context_weight, window=settings.section_context_window
        ),
        Budget(score_floor=settings.budget_score_floor),
        Bundle(models, bundling="bundling" not in off, join_adjacent="adjacent" not in off),
        Pack(),
        AnswerTypes(scoring, check_k=settings.answer_check_k, followup_topic="followup_topic" not in off),
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


__all__ = ["REMOVES_STAGE", "Models", "QueryVectors", "Scoring", "Search", "build_stages"]
