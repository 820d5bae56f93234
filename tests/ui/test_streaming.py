"""The chat page with an LLM configured: answers stream (st.write_stream) from an OpenAI-compatible server, and an
unreachable server is a visible warning with a quoted answer, not a traceback.

The server is a small fake on 127.0.0.1 that streams a fixed answer as server-sent events.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rag.tracestore import TraceFilter
from tests.ui.support import free_port
from tests.ui.test_pages import REFUND_Q, answered, ask, html_bodies, open_app, store_for

ANSWER_PARTS = [
    "Customers may return items ",
    "within 45 days of delivery ",
    "for a full refund [1].",
    "\nSources: [1]",
]


class FakeChatServer(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []

    def log_message(self, *_args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChatServer.requests.append(body)
        if not body.get("stream"):
            self._json(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "fake-llm",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "".join(ANSWER_PARTS)},
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                }
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i, part in enumerate(ANSWER_PARTS):
            self._event(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": part, **({"role": "assistant"} if i == 0 else {})},
                            "finish_reason": None,
                        }
                    ]
                }
            )
        self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self._event(
            {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
        )
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, data: dict[str, Any]) -> None:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake-llm", **data}
        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.flush()

    def _json(self, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def fake_llm() -> Iterator[str]:
    FakeChatServer.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_answer_streams_from_the_llm(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path, fake_llm: str
) -> None:
    monkeypatch.setenv("RAG_LLM_BASE_URL", fake_llm)
    monkeypatch.setenv("RAG_LLM_MODEL", "fake-llm")
    at = answered(monkeypatch, ui_data_dir, "alice", REFUND_Q)
    assert FakeChatServer.requests and FakeChatServer.requests[-1]["stream"] is True
    assert "45 days" in html_bodies(at) and 'class="rag-cite' in html_bodies(at)
    store = store_for(ui_data_dir)
    trace = store.traces.get(store.traces.list(TraceFilter(user="alice"), limit=1)[0]["trace_id"])
    assert trace["answer"].startswith("".join(ANSWER_PARTS[:3]))
    assert trace["model"] == "fake-llm" and trace["generation_mode"] == "standard" and not trace["error"]
    assert trace["citations"] and all(c["valid"] for c in trace["citations"])


def test_unreachable_llm_is_a_warning_and_the_answer_quotes_the_evidence(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    monkeypatch.setenv("RAG_LLM_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.setenv("RAG_LLM_MAX_RETRIES", "0")
    monkeypatch.setenv("RAG_LLM_TIMEOUT_S", "5")
    at = open_app(monkeypatch, ui_data_dir, "alice")
    ask(at, REFUND_Q)
    assert not at.exception
    assert any("language model failed" in w.value and "not reachable" in w.value for w in at.warning), [
        w.value for w in at.warning
    ]
    assert "45 days" in html_bodies(at)


def test_ask_streaming_yields_deltas_then_the_result(ui_data_dir: Path, embedder, fake_llm: str) -> None:  # type: ignore[no-untyped-def]
    from rag.config import load_settings
    from rag.llm.client import LLMClient
    from rag.pipeline import Pipeline, Question
    from rag.types import Principal
    from ui.services import ask_streaming

    settings = load_settings(data_dir=ui_data_dir, reranker="none")
    pipeline = Pipeline(settings, embedder=embedder, llm=LLMClient(fake_llm, "fake-llm", max_retries=0))
    running = ask_streaming(pipeline, Question(REFUND_Q, Principal("alice", frozenset({"staff"}))))
    assert list(running.deltas()) == ANSWER_PARTS
    result = running.result()
    assert result.generated.model == "fake-llm" and "45 days" in result.answer
    assert result.generated.completion_tokens == 20  # usage from the stream's last chunk


def test_a_follow_ups_rewrite_is_not_streamed_into_the_answer(
    ui_data_dir: Path, embedder, fake_llm: str
) -> None:  # type: ignore[no-untyped-def]
    """The rewrite is an LLM call of its own (not streamed): the page shows only the answer's deltas, and the
    fake server's answer, not a standalone question, fails the rewrite check and falls back to the offline one."""
    from rag.config import load_settings
    from rag.llm.client import LLMClient
    from rag.pipeline import Pipeline, Question
    from rag.types import Principal
    from ui.services import ask_streaming

    settings = load_settings(data_dir=ui_data_dir, reranker="none")
    pipeline = Pipeline(settings, embedder=embedder, llm=LLMClient(fake_llm, "fake-llm", max_retries=0))
    history = (("user", "How many days do customers have to return an item?"), ("assistant", "45 days [1]."))
    question = Question("and for a full refund?", Principal("alice", frozenset({"staff"})), history=history)
    running = ask_streaming(pipeline, question)
    assert list(running.deltas()) == ANSWER_PARTS
    standalone = running.result().to_json()["standalone"]
    assert standalone["method"].startswith("llm-rejected:") and "adds words" in standalone["reason"]
    assert standalone["rewritten"] and "refund" in standalone["question"]
