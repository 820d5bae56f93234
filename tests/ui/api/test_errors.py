"""Bad input against a running server: each is an error in OpenAI's shape, with the status OpenAI's clients map to
their own exceptions and a message a developer can act on, and nothing is stored (half-way or at all). A stream
the client drops half-way leaves one whole trace and a server that keeps answering."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import openai
import pytest

from tests.ui.api.conftest import MODEL, REFUND_Q, Server, chat


def _error(status: int, body: bytes) -> dict[str, Any]:
    """The error object, checked to be OpenAI's shape."""
    payload = json.loads(body)
    assert set(payload) == {"error"}, payload
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and len(error["message"]) > 20
    assert error["type"] in {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "rate_limit_error",
    }
    return dict(error)


@pytest.fixture(scope="module")
def key(api_server: Server) -> str:
    return api_server.key("errors", "alice", ["staff"])


BAD_INPUT = [
    ("malformed JSON", b'{"model": "policy-bot", "messages": [', 400, "invalid_json", None),
    ("not an object", b"[1, 2]", 400, "invalid_json", None),
    ("no messages", json.dumps({"model": MODEL}).encode(), 400, "invalid_request", "messages"),
    ("unknown model", json.dumps(chat("Hi?", model="gpt-4o")).encode(), 404, "model_not_found", "model"),
    (
        "empty message list",
        json.dumps({"model": MODEL, "messages": []}).encode(),
        400,
        "empty_messages",
        "messages",
    ),
    (
        "oversized message list",
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi?"}] * 21}).encode(),
        400,
        "too_many_messages",
        "messages",
    ),
    (
        "a 1 MB message",
        json.dumps(chat("How many days of leave? " + "x" * 1_000_000)).encode(),
        413,
        "request_too_large",
        None,
    ),
    (
        "a question over the limit",
        json.dumps(chat("leave " * 400)).encode(),
        400,
        "question_too_long",
        "messages.0.content",
    ),
    (
        "the last message is not a question",
        json.dumps({"model": MODEL, "messages": [{"role": "assistant", "content": "Hello"}]}).encode(),
        400,
        "invalid_request",
        "messages.0.role",
    ),
    ("an empty question", json.dumps(chat("   ")).encode(), 400, "empty_question", "messages.0.content"),
    (
        "a bad role",
        json.dumps({"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}).encode(),
        400,
        "invalid_request",
        "messages.0.role",
    ),
    (
        "an image",
        json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
        ).encode(),
        400,
        "unsupported_content",
        "messages.0.content",
    ),
    ("two answers", json.dumps(chat("Hi?", n=2)).encode(), 400, "invalid_request", "n"),
    (
        "a misspelt extension",
        json.dumps(chat("Hi?", rag={"as_off": "2025-01-01"})).encode(),
        400,
        "invalid_request",
        "rag.as_off",
    ),
]


@pytest.mark.parametrize(("what", "raw", "status", "code", "param"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_an_openai_error_and_stores_nothing(
    api_server: Server, key: str, what: str, raw: bytes, status: int, code: str, param: str | None
) -> None:
    before = api_server.answers()
    got, _, body = api_server.request("POST", "/v1/chat/completions", raw=raw, key=key)
    error = _error(got, body)
    assert got == status, (what, error)
    assert error["code"] == code, error
    assert error["param"] == param, error
    assert api_server.answers() == before


def test_missing_wrong_and_unsent_keys(api_server: Server) -> None:
    before = api_server.answers()
    for headers, code in (
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer rag_0123456789ab_" + "x" * 43}, "invalid_api_key"),
        ({"Authorization": "Bearer sk-proj-something"}, "invalid_api_key"),
    ):
        status, _, body = api_server.request("POST", "/v1/chat/completions", chat(REFUND_Q), headers=headers)
        error = _error(status, body)
        assert status == 401 and error["code"] == code and error["type"] == "authentication_error"
    assert "rag keys create" in error["message"] or "not valid" in error["message"]
    client = openai.OpenAI(base_url=api_server.api, api_key="rag_0123456789ab_" + "y" * 43, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": REFUND_Q}])
    assert api_server.answers() == before


def test_the_official_client_gets_each_error_as_its_exception(api_server: Server, key: str) -> None:
    client = openai.OpenAI(base_url=api_server.api, api_key=key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi?"}])
    assert "policy-bot" in caught.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[])
    with pytest.raises(openai.APIStatusError) as too_large:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 1_000_000}])
    assert too_large.value.status_code == 413
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model=MODEL, input="x")


def test_unknown_endpoints_methods_and_content_types(api_server: Server, key: str) -> None:
    status, _, body = api_server.request("GET", "/v1/chat/completions", key=key)
    assert status == 405 and _error(status, body)["code"] == "method_not_allowed"
    status, _, body = api_server.request("POST", "/v1/completions", chat("Hi?"), key=key)
    assert status == 404 and _error(status, body)["code"] == "unknown_endpoint"
    status, _, body = api_server.request(
        "POST",
        "/v1/chat/completions",
        raw=b"model=policy-bot",
        key=key,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 415 and "application/json" in _error(status, body)["message"]


def test_a_key_over_its_rate_limit_is_told_when_to_retry(api_server: Server) -> None:
    key = api_server.key("limited", "alice", ["staff"], rate_limit=2)
    assert api_server.request("GET", "/v1/models", key=key)[0] == 200
    assert api_server.request("GET", "/v1/models", key=key)[0] == 200
    status, headers, body = api_server.request("POST", "/v1/chat/completions", chat(REFUND_Q), key=key)
    error = _error(status, body)
    assert status == 429 and error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
    assert int(headers["retry-after"]) >= 1 and "2 requests per minute" in error["message"]
    client = openai.OpenAI(base_url=api_server.api, api_key=key, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.models.list()
    other = api_server.key("not-limited", "alice", ["staff"])  # limits are per key
    assert api_server.request("GET", "/v1/models", key=other)[0] == 200


def test_a_stream_dropped_half_way_stores_one_whole_trace(api_server: Server, key: str) -> None:
    before = api_server.answers()
    host, port = api_server.url.split("://", 1)[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    body = json.dumps(chat(REFUND_Q, stream=True))
    connection.request(
        "POST",
        "/v1/chat/completions",
        body=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Type", "").startswith("text/event-stream")
    trace_id = None
    while trace_id is None:  # read up to the first piece of the answer, then hang up
        line = response.readline().decode()
        assert line, "the stream ended before the answer"
        if line.startswith("data: {"):
            trace_id = (json.loads(line[6:]).get("rag") or {}).get("trace_id")
    connection.sock.close()  # type: ignore[union-attr]
    connection.close()

    deadline = time.monotonic() + 60
    while api_server.answers() == before and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # anything else it would write has had time
    assert api_server.answers() == before + 1
    with api_server.store() as store:
        trace = store.traces.read(trace_id).to_json()  # whole: it parses against the trace schema
    assert trace["answer"] and trace["evidence"] and trace["channel"] == "api"
    # The server keeps answering, streams included.
    status, _, raw = api_server.request("POST", "/v1/chat/completions", chat(REFUND_Q, stream=True), key=key)
    assert status == 200 and raw.rstrip().endswith(b"data: [DONE]")
    assert api_server.answers() == before + 2
