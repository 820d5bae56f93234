"""Real clients against a running ``rag serve``: the official ``openai`` Python client and the official ``openai``
npm client on Node, whole and streamed. Answers, citations, sources and the trace id arrive; the trace is stored
with the key and the asker; a follow-up is rewritten exactly as the chat page rewrites it.

The npm client is installed by scripts/node_clients.sh (pinned by tests/node_clients/package-lock.json); without
Node or npm the test skips with the reason, unless RAG_REQUIRE_NODE=1 or RAG_REQUIRE_BROWSER=1 (CI) make that a
failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from rag.config import load_settings
from rag.stages.memory import select_history
from tests.ui.api.conftest import MODEL, REFUND_Q, Server
from tests.ui.conftest import REPO

_URL = re.compile(r"\(http[^)\s]+\)|https?://\S+")


def _client(server: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api, api_key=key, max_retries=0)


def _without_links(text: str) -> str:
    """The reply with its links taken out: each link is signed with its own expiry."""
    return _URL.sub("(link)", text)


def _check_reply(
    server: Server, content: str, rag: dict[str, Any], *, user: str, key_name: str
) -> dict[str, Any]:
    """A cited answer with its Sources block and structured sources, and its stored trace (returned)."""
    assert re.search(r"\[\d+\]", content), content
    assert "\n\n---\n" in content and "\nSources:\n[" in content, content
    assert rag["sources"] and not rag["abstained"]
    for source in rag["sources"]:
        assert f"[{source['n']}]" in rag["answer"]
        assert source["title"] and source["locator"].startswith("p. ") and source["passage"]
        assert source["url"].startswith(server.url + "/api/source/") and "#page=" in source["url"]
        assert f"[{source['n']}] [{source['title']}]({source['url']})" in content
    assert any(s["quote"] and s["quote"] in s["passage"].replace("\n", " ") for s in rag["sources"])
    with server.store() as store:
        trace = store.traces.read(rag["trace_id"]).to_json()
    assert trace["channel"] == "api" and trace["user"] == user
    assert trace["api_key"]["name"] == key_name and not trace["api_key"]["on_behalf"]
    assert [s["chunk_id"] for s in rag["sources"]] == [
        e["chunk_id"]
        for n in dict.fromkeys(c["n"] for c in trace["citations"])
        for e in trace["evidence"]
        if e["n"] == n
    ]
    return trace


def test_the_openai_python_client_whole_and_streamed(api_server: Server) -> None:
    key = api_server.key("py-client", "alice", ["staff"])
    client = _client(api_server, key)
    assert [m.id for m in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    messages = [{"role": "user", "content": REFUND_Q}]

    whole = client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    content = whole.choices[0].message.content or ""
    rag = (whole.model_extra or {})["rag"]
    assert whole.id == f"chatcmpl-{rag['trace_id']}" and whole.choices[0].finish_reason == "stop"
    trace = _check_reply(api_server, content, rag, user="alice", key_name="py-client")
    assert "45 days" in content and "Gift cards are not refundable" in content
    assert trace["answer"].startswith(rag["answer"])

    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},  # type: ignore[arg-type]
    )
    pieces, early, final, finish, usage = [], None, None, None, None
    for chunk in stream:
        extra = (chunk.model_extra or {}).get("rag") or {}
        early = early or extra.get("trace_id")
        final = extra if "sources" in extra else final
        usage = chunk.usage or usage
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    streamed = "".join(pieces)
    assert final is not None and early == final["trace_id"] != rag["trace_id"] and finish == "stop"
    assert usage is not None
    _check_reply(api_server, streamed, final, user="alice", key_name="py-client")
    assert _without_links(streamed) == _without_links(content)  # the stream holds what the whole answer holds


def test_a_follow_up_is_rewritten_as_in_the_chat_page(api_server: Server) -> None:
    """The chat page's conversation (ui/tests/test_browser.py): the domestic meal allowance, then "and what
    about for international trips?". Through the API, the earlier reply comes back with its Sources block;
    the question is searched as the chat page searches it, which the same pipeline, asked in-process with the
    history the chat page keeps (its turns through rag.stages.memory.select_history), shows."""
    from rag.factory import build_pipeline
    from rag.pipeline import Question
    from rag.types import Principal

    client = _client(api_server, api_server.key("follow-up", "alice", ["staff"]))
    first_q, follow_q = (
        "What is the daily meal allowance for domestic travel?",
        "and what about for international trips?",
    )
    first = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": first_q}])
    first_reply = first.choices[0].message.content or ""
    assert "\nSources:\n" in first_reply
    second = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": first_q},
            {"role": "assistant", "content": first_reply},
            {"role": "user", "content": follow_q},
        ],
    )
    rag = (second.model_extra or {})["rag"]
    searched = rag["searched_for"]
    assert searched and "international" in searched and "domestic" not in searched, searched
    assert "Searched for: " + searched in (second.choices[0].message.content or "")

    with api_server.store() as store:
        first_trace = store.traces.get((first.model_extra or {})["rag"]["trace_id"])
        api_trace = store.traces.get(rag["trace_id"])
    settings = load_settings(data_dir=api_server.data_dir)
    chat_history = select_history(
        [("user", first_q), ("assistant", first_trace["answer"])], settings.history_token_budget
    )
    pipeline = build_pipeline(settings)
    chat_page = pipeline.ask(
        Question(follow_q, Principal("alice", frozenset({"staff"})), history=tuple(chat_history))
    ).to_json()
    assert api_trace["standalone"] == chat_page["standalone"]
    assert api_trace["budgets"]["history_tokens"] == chat_page["budgets"]["history_tokens"]
    assert [e["chunk_id"] for e in api_trace["evidence"]] == [e["chunk_id"] for e in chat_page["evidence"]]


def test_a_service_key_asks_for_the_person_it_names(api_server: Server) -> None:
    key = api_server.key("slack-bot", "slack-bot", ["staff", "hr", "security"], service=True)
    client = _client(api_server, key)
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": REFUND_Q}],
        extra_body={"rag": {"on_behalf_of": {"user": "hana", "groups": ["staff", "hr"]}}},
    )
    rag = (reply.model_extra or {})["rag"]
    with api_server.store() as store:
        trace = store.traces.get(rag["trace_id"])
    assert (trace["user"], trace["groups"]) == ("hana", ["hr", "staff"])  # the asker
    assert trace["api_key"]["name"] == "slack-bot" and trace["api_key"]["user"] == "slack-bot"  # and the key
    assert trace["api_key"]["on_behalf"] is True
    assert "link=" in rag["sources"][0]["url"]


# ----------------------------------------------------------------------------- the npm client
NODE_DIR = REPO / "tests" / "node_clients"


def _node_client() -> Path:
    """The installed client's folder; skips (or fails under CI) when Node or the package cannot be had."""
    reason = None
    if shutil.which("node") is None or shutil.which("npm") is None:
        reason = "node and npm are not installed"
    else:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "node_clients.sh")], capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            reason = f"scripts/node_clients.sh failed: {(done.stderr or done.stdout).strip()[-500:]}"
    if reason is None:
        return NODE_DIR
    if os.environ.get("RAG_REQUIRE_NODE") == "1" or os.environ.get("RAG_REQUIRE_BROWSER") == "1":
        pytest.fail(f"the openai npm client cannot run: {reason} (RAG_REQUIRE_NODE/RAG_REQUIRE_BROWSER=1)")
    pytest.skip(f"the openai npm client cannot run: {reason}; run scripts/node_clients.sh")


def test_the_openai_npm_client_whole_and_streamed(api_server: Server) -> None:
    folder = _node_client()
    key = api_server.key("node-client", "alice", ["staff"])
    settings = {
        "baseURL": api_server.api,
        "apiKey": key,
        "model": MODEL,
        "messages": [{"role": "user", "content": REFUND_Q}],
    }
    done = subprocess.run(
        ["node", str(folder / "client.mjs"), json.dumps(settings)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["models"] == [MODEL]
    _check_reply(
        api_server, out["whole"]["content"], out["whole"]["rag"], user="alice", key_name="node-client"
    )
    streamed = out["streamed"]
    assert streamed["finish"] == "stop" and streamed["earlyTraceId"] == streamed["rag"]["trace_id"]
    _check_reply(api_server, streamed["content"], streamed["rag"], user="alice", key_name="node-client")
    assert _without_links(streamed["content"]) == _without_links(out["whole"]["content"])
    assert out["error"]["status"] == 404 and out["error"]["name"] == "NotFoundError"
    assert out["error"]["code"] == "model_not_found"
