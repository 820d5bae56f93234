"""The native endpoints against a running server: ``/v1/rag/ask`` answers with the ``rag ask --json`` contract (the
committed trace schema validates it), ``/v1/rag/feedback`` rates the asker's own answers as the chat page's
buttons do, and the OpenAPI document served is the one checked into docs/."""

from __future__ import annotations

import json

import jsonschema

from rag.traces.schema import SCHEMA_PATH
from tests.ui.api.conftest import REFUND_Q, Server, chat, proxy_headers
from ui.api import openapi


def test_the_native_ask_is_the_rag_ask_json_contract(api_server: Server) -> None:
    key = api_server.key("native", "alice", ["staff"])
    status, trace = api_server.post(
        "/v1/rag/ask",
        {
            "question": "and can I refund a gift card?",
            "history": [
                {"role": "user", "content": "How long do I have to return an item for a full refund?"}
            ],
            "as_of": "2026-06-01",
        },
        key=key,
    )
    assert status == 200
    jsonschema.validate(trace, json.loads(SCHEMA_PATH.read_text()))
    assert trace["as_of"] == "2026-06-01" and trace["channel"] == "api" and trace["user"] == "alice"
    assert trace["standalone"]["asked"] == "and can I refund a gift card?"
    assert trace["budgets"]["history_tokens"] > 0
    with api_server.store() as store:
        assert store.traces.get(trace["trace_id"]) == trace


def test_feedback_rates_the_askers_own_answer_and_can_be_withdrawn(api_server: Server) -> None:
    key = api_server.key("feedback", "alice", ["staff"])
    status, reply = api_server.post("/v1/chat/completions", chat(REFUND_Q), key=key)
    trace_id = reply["rag"]["trace_id"]
    status, done = api_server.post(
        "/v1/rag/feedback",
        {"trace_id": trace_id, "rating": "down", "reason": "incomplete", "comment": "no fee"},
        key=key,
    )
    assert status == 200 and (done["rating"], done["reason"], done["comment"]) == (
        "down",
        "incomplete",
        "no fee",
    )
    with api_server.store() as store:
        assert store.feedback.get(trace_id)["rating"] == "down"
    # The same person behind the proxy changes it; then withdraws it.
    alice = proxy_headers("alice", ["staff"])
    assert (
        api_server.post("/v1/rag/feedback", {"trace_id": trace_id, "rating": "up"}, headers=alice)[0] == 200
    )
    with api_server.store() as store:
        assert store.feedback.get(trace_id)["rating"] == "up"
    assert (
        api_server.post("/v1/rag/feedback", {"trace_id": trace_id, "rating": None}, headers=alice)[1][
            "rating"
        ]
        is None
    )
    with api_server.store() as store:
        assert store.feedback.get(trace_id) is None
    status, error = api_server.post("/v1/rag/feedback", {"trace_id": trace_id, "rating": "meh"}, key=key)
    assert status == 400 and error["error"]["param"] == "rating"


def test_a_service_key_gives_feedback_for_the_person_it_asked_for(api_server: Server) -> None:
    bot = api_server.key("feedback-bot", "feedback-bot", ["staff"], service=True)
    behalf = {"user": "tom", "groups": ["staff"]}
    status, reply = api_server.post(
        "/v1/chat/completions", chat(REFUND_Q, rag={"on_behalf_of": behalf}), key=bot
    )
    trace_id = reply["rag"]["trace_id"]
    status, done = api_server.post(
        "/v1/rag/feedback", {"trace_id": trace_id, "rating": "up", "on_behalf_of": behalf}, key=bot
    )
    assert status == 200 and done["rating"] == "up"
    other = {"user": "alice", "groups": ["staff"]}
    status, error = api_server.post(
        "/v1/rag/feedback", {"trace_id": trace_id, "rating": "down", "on_behalf_of": other}, key=bot
    )
    assert status == 404


def test_the_openapi_document_is_served_and_committed(api_server: Server) -> None:
    assert openapi.main(["--check"]) == 0, (
        "docs/openapi.json is stale: run `python -m ui.api.openapi --write`"
    )
    status, _, body = api_server.request("GET", "/v1/openapi.json")
    assert status == 200 and json.loads(body) == json.loads(openapi.DOC_PATH.read_text())
    document = json.loads(body)
    assert set(document["paths"]) >= {"/v1/chat/completions", "/v1/models", "/v1/rag/ask", "/v1/rag/feedback"}
    for schema in document["components"]["schemas"].values():  # every schema is a valid JSON Schema
        jsonschema.Draft202012Validator.check_schema(schema)
    assert api_server.request("GET", "/v1/health")[0] == 200
