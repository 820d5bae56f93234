"""The one trace schema (rag/traces/schema.py): what `rag ask --json` prints and `rag traces show --json` prints
back match the committed docs/schema/trace.schema.json; the file is current; stored traces are read through the
schema (older ones get the newer keys' defaults, a mismatch is a TraceSchemaError that says where)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from rag.traces import schema as ts
from tests.asking import ask_refund
from tests.tracestore.factories import make_trace

REPO = Path(__file__).resolve().parents[2]
QUESTION_FILES = [
    REPO / "ingest" / "sample" / "questions.jsonl",  # answerable, single and multi-intent, some with hops
    REPO / "evaluation" / "suites" / "near_miss" / "sample.jsonl",  # unanswerable: abstentions
]
# Keys a trace stored before answer_check and the claim check existed lacks (the schema gives them defaults).
NEWER_KEYS = ("answer_check", "claims", "verified", "verification")


def committed_schema() -> dict[str, Any]:
    return json.loads((REPO / "docs" / "schema" / "trace.schema.json").read_text(encoding="utf-8"))


def schema_errors(trace: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(committed_schema())
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in sorted(validator.iter_errors(trace), key=str)
    ]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, sample_data_dir: Path) -> Path:
    data = tmp_path_factory.mktemp("schema-data")
    shutil.copytree(sample_data_dir, data, dirs_exist_ok=True)  # the embedded trace store migrates itself
    return data


def invoke(*args: str) -> Any:
    from rag.tracestore.cli import traces_app
    from supportbot.cli import app

    if args[0] == "traces":
        return CliRunner().invoke(traces_app, list(args[1:]))
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def asked(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """`rag ask --json` on every sample and near-miss question (one `--batch` run), plus one plain `rag ask`."""
    batch = tmp_path_factory.mktemp("batch") / "questions.jsonl"
    batch.write_text("".join(p.read_text(encoding="utf-8") for p in QUESTION_FILES), encoding="utf-8")
    result = invoke("ask", "--batch", str(batch), "--data-dir", str(data_dir), "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    # a batch line is {"id": ..., **the rag ask --json object}
    traces = [{k: v for k, v in row.items() if k != "id"} for row in rows]
    single = ask_refund(data_dir)
    assert single.exit_code == 0, single.output
    traces.append(json.loads(single.stdout.strip().splitlines()[-1]))
    return traces


def test_rag_ask_json_matches_the_committed_schema(asked: list[dict[str, Any]]) -> None:
    n_questions = sum(1 for p in QUESTION_FILES for line in p.read_text().splitlines() if line.strip())
    assert len(asked) == n_questions + 1
    # the questions exercise every part of the shape: abstentions, answers with claims, follow-up hops
    assert any(t["abstained"] for t in asked) and any(not t["abstained"] for t in asked)
    assert any(t["claims"] for t in asked) and any(t["hops"] for t in asked)
    assert any(h.get("linked") for t in asked for h in t["hops"])
    for trace in asked:
        assert schema_errors(trace) == [], trace["question"]
        assert list(trace) == list(ts.Trace.model_fields), "keys in schema order"


def test_rag_traces_show_json_matches_the_schema_and_gives_back_what_ask_printed(
    asked: list[dict[str, Any]], data_dir: Path
) -> None:
    for trace in asked:
        shown = invoke("traces", "show", trace["trace_id"], "--data-dir", str(data_dir), "--json")
        assert shown.exit_code == 0, shown.output
        stored = json.loads(shown.stdout)
        assert schema_errors(stored) == [], trace["question"]
        assert stored == trace
        assert list(stored) == list(trace)


def test_the_committed_schema_is_current_and_check_fails_on_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert committed_schema() == ts.json_schema()
    assert ts.main(["--check"]) == 0

    path = tmp_path / "trace.schema.json"
    assert ts.main(["--check", "--path", str(path)]) == 1
    assert "is missing" in capsys.readouterr().err
    assert ts.main(["--write", "--path", str(path)]) == 0
    assert ts.main(["--check", "--path", str(path)]) == 0

    stale = json.loads(path.read_text())
    del stale["properties"]["verified"]  # as if the file predates a key the models have
    path.write_text(json.dumps(stale, indent=2) + "\n")
    capsys.readouterr()
    assert ts.main(["--check", "--path", str(path)]) == 1
    err = capsys.readouterr().err
    assert "is stale" in err and "python -m rag.traces.schema --write" in err


@pytest.mark.parametrize(
    "variant",
    [{}, {"abstained": True}, {"failed_citation": True}, {"error": "timeout"}, {"session_id": "s-1"}],
)
def test_the_trace_store_test_traces_have_the_schema_shape(variant: dict[str, Any]) -> None:
    """tests/tracestore builds its traces with make_trace: they must be the shape the pipeline writes."""
    trace = make_trace(**variant)
    assert schema_errors(trace) == []
    assert ts.parse_trace(trace).to_json() == trace


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The SQLite trace store of data directory ``tmp_path`` (what `rag traces --data-dir tmp_path` opens)."""
    from rag.config import load_settings
    from rag.tracestore import TraceStore
    from rag.tracestore.db import upgrade

    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.delenv("RAG_DATABASE_URL", raising=False)
    settings = load_settings(data_dir=tmp_path)
    upgrade(settings)
    with TraceStore.from_settings(settings) as trace_store:
        yield trace_store


def test_an_unknown_key_in_a_stored_trace_is_a_trace_schema_error(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(seed=7)
    trace["surprise"] = 1  # e.g. written by a newer rag, or imported from elsewhere
    trace["evidence"][0]["colour"] = "red"
    trace_id = store.traces.save(trace)
    assert store.traces.get(trace_id) == trace  # stored and exported as it is

    with pytest.raises(ts.TraceSchemaError) as caught:
        store.traces.read(trace_id)
    message = str(caught.value)
    assert trace_id in message and "does not match the trace schema" in message
    assert "surprise: unknown key" in message and "evidence.0.colour: unknown key" in message
    assert "docs/schema/trace.schema.json" in caught.value.user_message()

    # `rag traces show` says so, without a traceback, in text and JSON alike
    for extra in ([], ["--json"]):
        shown = invoke("traces", "show", trace_id, "--data-dir", str(tmp_path), *extra)
        assert shown.exit_code == 1, shown.output
        assert "surprise: unknown key" in shown.stderr and "Traceback" not in shown.output


def test_a_value_of_the_wrong_type_says_where() -> None:
    trace = make_trace()
    trace["evidence"][1]["n"] = "2"
    trace["tokens"]["prompt"] = 10.5
    with pytest.raises(ts.TraceSchemaError) as caught:
        ts.parse_trace(trace)
    message = str(caught.value)
    assert "evidence.1.n: Input should be a valid integer" in message
    assert "tokens.prompt: Input should be a valid integer" in message


def test_a_trace_stored_before_the_newer_keys_loads_with_their_defaults(store) -> None:  # type: ignore[no-untyped-def]
    old = {k: v for k, v in make_trace(seed=8).items() if k not in NEWER_KEYS}
    for hop in old["hops"]:
        del hop["linked"], hop["stopped"]  # present only when they apply
    trace_id = store.traces.save(old)

    typed = store.traces.read(trace_id)
    assert typed.verified is False and typed.claims == [] and typed.verification == {}
    assert typed.answer_check == ts.AnswerCheck(complete=False, intents=[])
    assert typed.hops[0].linked == [] and typed.hops[0].stopped == ""
    assert typed.to_json() == old  # printed back as stored: no key it did not have
    assert schema_errors(typed.to_json()) == []
    filled = typed.to_json(defaults=True)
    assert {k: filled[k] for k in NEWER_KEYS} == {
        "answer_check": {"complete": False, "intents": []},
        "claims": [],
        "verified": False,
        "verification": {},
    }
    assert schema_errors(filled) == []


def test_result_is_frozen_and_replace_makes_a_changed_copy(data_dir: Path) -> None:
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from rag.pipeline import Question
    from rag.types import Principal

    pipeline = build_pipeline(load_settings(data_dir=data_dir))
    result = pipeline.ask(
        Question(
            "How many days does a customer have to return an item?", Principal("alice", frozenset({"staff"}))
        )
    )
    assert isinstance(result.evidence, tuple) and isinstance(result.stages, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.answer = "changed"  # type: ignore[misc]
    changed = dataclasses.replace(result, answer="changed", evidence=list(result.evidence[:1]))
    assert isinstance(changed.evidence, tuple) and len(changed.evidence) == 1
    assert changed.to_json()["answer"] == "changed" and result.to_json()["answer"] != "changed"
    assert schema_errors(changed.to_json()) == []
