"""The query path's stages as components (rag/stages, listed by rag.pipeline.build_stages): their order, what
ablation removes, the query-vector cache."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from rag.config import ABLATIONS, load_settings
from rag.models.embedder import Embedder
from rag.pipeline import REMOVES_STAGE, Pipeline, Question, build_stages
from rag.stages.shared import QUERY_CACHE_SIZE, Models, QueryVectors
from rag.types import Principal

ALICE = Principal("alice", frozenset({"staff"}))
ORDER = [
    "index",
    "filters",
    "standalone",
    "intents",
    "retrieve",
    "rerank",
    "hops",
    "abstention",
    "dedup",
    "context",
    "budget",
    "bundle",
    "pack",
    "answer_type",
    "read",
    "prompt",
    "generate",
    "citations",
    "claims",
    "answer_check",
    "confirm",
]


@pytest.fixture(scope="module")
def pipeline(sample_data_dir: Path, embedder) -> Pipeline:  # type: ignore[no-untyped-def]
    return Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder)


def test_the_trace_records_the_stages_in_the_order_they_run(pipeline: Pipeline) -> None:
    assert [s.name for s in pipeline.stages] == ORDER
    r = pipeline.ask(Question("How many days of annual leave do I get?", ALICE, as_of=date(2026, 6, 1)))
    recorded = [s.name for s in r.stages]
    # hops records one stage per hop; a stage with nothing to do records nothing
    ran = ["hops" if name.startswith("hop_") else name for name in recorded]
    assert [name for name in ORDER if name in ran] == list(dict.fromkeys(ran))
    assert {"index", "retrieve", "rerank", "generate", "claims", "answer_check"} <= set(recorded)


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_an_ablation_removes_its_stage_or_keeps_the_stage_and_switches_off_a_check(
    pipeline: Pipeline, sample_data_dir: Path, ablation: str
) -> None:
    settings = load_settings(data_dir=sample_data_dir, ablate=ablation)
    names = [s.name for s in build_stages(settings, pipeline.models, pipeline.queries)]
    if ablation in REMOVES_STAGE:
        assert names == [n for n in ORDER if n != REMOVES_STAGE[ablation]]
    else:
        assert names == ORDER


def test_ablating_followup_searches_a_follow_up_as_typed(
    pipeline: Pipeline,
    sample_data_dir: Path,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    history = (("user", "What is the daily meal allowance for domestic travel?"), ("assistant", "EUR 40 [1]"))
    question = Question("and for international trips?", ALICE, as_of=date(2026, 6, 1), history=history)
    on = pipeline.ask(question)
    assert on.standalone is not None and on.standalone.rewritten  # without the ablation it is rewritten
    off = Pipeline(load_settings(data_dir=sample_data_dir, ablate="followup"), embedder=embedder)
    r = off.ask(question)
    assert r.standalone is not None and not r.standalone.rewritten
    assert r.standalone.question == "and for international trips?"
    assert all("meal" not in i.text for i in r.intents)  # the first question's words were not searched
    assert r.to_json()["standalone"]["reason"] == "switched off (ablate=followup)"


class CountingEmbedder:
    dim = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)


def test_query_vectors_embed_each_text_once_in_one_batch() -> None:
    embedder = CountingEmbedder()
    models = Models(reader=cast(object, None), embedder=cast(Embedder, embedder), reranker=cast(object, None))  # type: ignore[arg-type]
    queries = QueryVectors(models)
    first = queries.vectors(["a", "bb", "a"])
    assert embedder.calls == [["a", "bb"]] and [float(v[0]) for v in first] == [1.0, 2.0, 1.0]
    assert float(queries.vector("bb")[0]) == 2.0 and len(embedder.calls) == 1  # served from the cache
    queries.vectors(["a", "ccc"])
    assert embedder.calls[-1] == ["ccc"]  # only the text not cached is embedded
    queries.vectors([str(i) for i in range(QUERY_CACHE_SIZE)])
    assert len(queries.cache) <= QUERY_CACHE_SIZE  # a full cache is emptied, never grows without bound
