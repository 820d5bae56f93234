"""The UI answers with the pipeline `rag ask` builds (rag/factory.py): same answers, same evidence, and a
reranker fed with the generation's stored sentence vectors and passage tokens; streaming reuses it."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.ui.test_streaming import ANSWER_PARTS, REFUND_Q, fake_llm  # noqa: F401  (fake_llm is a fixture)

pytest.importorskip("streamlit")

SAMPLE_QUESTIONS = Path(__file__).resolve().parents[2] / "ingest" / "sample" / "questions.jsonl"


def _questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE_QUESTIONS.read_text().splitlines() if line.strip()]


def _summary(out: dict[str, Any]) -> tuple[Any, ...]:
    return out["answer"], out["abstained"], [e["chunk_id"] for e in out["evidence"]]


def test_ui_and_cli_give_the_same_answers_and_evidence(ui_data_dir: Path) -> None:
    from rag.pipeline import Question
    from rag.types import Principal
    from supportbot.cli import app
    from ui import services

    result = CliRunner().invoke(
        app, ["ask", "--batch", str(SAMPLE_QUESTIONS), "--data-dir", str(ui_data_dir), "--no-trace", "--json"]
    )
    assert result.exit_code == 0, result.output
    cli = {r["id"]: _summary(r) for r in map(json.loads, result.stdout.splitlines()) if r.get("id")}

    settings = services.Settings.model_validate({"data_dir": ui_data_dir})
    pipeline = services.get_pipeline(settings)
    assert services.get_pipeline(settings) is pipeline  # cached per settings and generation
    ui = {}
    for q in _questions():
        as_of = date.fromisoformat(q["as_of"]) if q.get("as_of") else None
        principal = Principal(q["user"], frozenset(q["groups"]))
        question = Question(q["question"], principal, as_of, frozenset(q.get("tags") or ()))
        ui[q["id"]] = _summary(pipeline.ask(question).to_json())
    assert len(ui) == len(cli) == len(_questions())
    assert ui == cli


def test_the_ui_reranker_reads_the_stored_sentence_vectors_and_passage_tokens(ui_data_dir: Path) -> None:
    from ui import services

    settings = services.Settings.model_validate({"data_dir": ui_data_dir})
    pipeline = services.get_pipeline(settings)
    reranker = pipeline.reranker
    assert reranker.name == "features-v2"
    # bound to the pipeline's reader and query-vector cache: no sentence is re-embedded per question
    assert reranker.sentence_vectors is not None and reranker.sentence_vectors.__self__ is pipeline.reader
    assert reranker.passage_tokens is not None and reranker.passage_tokens.__self__ is pipeline.reader
    assert reranker.query_vector is not None and reranker.query_vector.__self__ is pipeline
    chunk = pipeline.reader.generation.chunks[0]
    assert reranker.sentence_vectors(chunk.chunk_id) is not None
    assert reranker.passage_tokens(chunk.chunk_id)


def test_streaming_answers_through_the_cached_pipeline(
    monkeypatch: pytest.MonkeyPatch,
    ui_data_dir: Path,
    fake_llm: str,  # noqa: F811
) -> None:
    from rag import pipeline as pipeline_module
    from rag.pipeline import Question
    from rag.types import Principal
    from ui import services

    settings = services.Settings.model_validate(
        {"data_dir": ui_data_dir, "llm_base_url": fake_llm, "llm_model": "fake-llm", "llm_max_retries": 0}
    )
    pipeline = services.get_pipeline(settings)
    built: list[object] = []
    original = pipeline_module.Pipeline.__init__

    def counting(self: object, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline_module.Pipeline, "__init__", counting)
    running = services.ask_streaming(pipeline, Question(REFUND_Q, Principal("alice", frozenset({"staff"}))))
    assert list(running.deltas()) == ANSWER_PARTS
    result = running.result()
    assert result.generated.model == "fake-llm" and "45 days" in result.answer
    assert built == []  # no per-question pipeline
    assert REFUND_Q in pipeline._query_vectors  # the shared pipeline's query-vector cache served the request
    assert pipeline.llm is not None and type(pipeline.llm).__name__ == "LLMClient"  # the tee was per request
