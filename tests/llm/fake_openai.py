"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for unit tests.

A real ``http.server`` in a thread, so the real ``openai`` client (retries, timeouts, SSE parsing) is exercised.
Queue ``Reply`` objects (or callables ``body -> Reply``); each POST to ``/v1/chat/completions`` takes the next
one, and every request is recorded. With an empty queue the ``default`` reply (if any) answers, else a 500.

    with FakeOpenAI() as fake:
        fake.queue(Reply.error(429), Reply(text="Fine [1]"))
        client = LLMClient(fake.url, "fake-model", max_retries=1)
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer."""

    text: str = ""
    status: int = 200
    delay_s: float = (
        0.0  # before the response starts (a slow server; longer than the client timeout = timeout)
    )
    usage: tuple[int, int] | None = (11, 7)  # (prompt, completion); None: the server reports no usage
    model: str | None = None  # defaults to the requested model
    headers: dict[str, str] = field(default_factory=dict)
    error_message: str = ""
    error_type: str = "server_error"
    chunk_size: int = 4  # characters per streamed delta
    stall_after: int | None = None  # streaming: after this many deltas, sleep stall_s
    stall_s: float = 0.0
    drop_after: int | None = None  # streaming: after this many deltas, cut the connection
    finish_reason: str = "stop"

    @classmethod
    def error(cls, status: int, message: str = "", **kw: Any) -> Reply:
        kinds = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_error",
        }
        # retry-after-ms keeps the client's retries fast (openai honours it)
        headers = {"retry-after-ms": "5"} if status == 429 or status >= 500 else {}
        headers.update(kw.pop("headers", {}))
        return cls(
            status=status,
            error_message=message or f"scripted {status}",
            error_type=kinds.get(status, "server_error"),
            headers=headers,
            **kw,
        )


ReplySource = Reply | Callable[[dict[str, Any]], Reply]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, str]]:
        return list(self.body.get("messages", []))

    @property
    def user(self) -> str:
        return next((m["content"] for m in self.messages if m["role"] == "user"), "")


class FakeOpenAI:
    def __init__(
        self,
        *,
        models: tuple[str, ...] = ("fake-model",),
        default: ReplySource | None = None,
        reject_stream_options: bool = False,
    ) -> None:
        self.models = models
        self.default = default
        self.reject_stream_options = reject_stream_options
        self.requests: list[Recorded] = []
        self._queue: deque[ReplySource] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *replies: ReplySource) -> FakeOpenAI:
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            source = self._queue.popleft() if self._queue else self.default
        if source is None:
            return Reply.error(500, "no scripted reply left", headers={"x-should-retry": "false"})
        return source(body) if callable(source) else source

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def _record(self, body: dict[str, Any]) -> None:
                with fake._lock:
                    fake.requests.append(Recorded(self.command, self.path, dict(self.headers), body))

            def _json(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._record({})
                if self.path.rstrip("/") == "/v1/models":
                    data = [
                        {"id": m, "object": "model", "owned_by": "fake", "created": 0} for m in fake.models
                    ]
                    self._json(200, {"object": "list", "data": data})
                else:
                    self._json(
                        404, {"error": {"message": f"no route {self.path}", "type": "not_found_error"}}
                    )

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                self._record(body)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(
                        404, {"error": {"message": f"no route {self.path}", "type": "not_found_error"}}
                    )
                    return
                if fake.reject_stream_options and "stream_options" in body:
                    self._json(
                        400,
                        {
                            "error": {
                                "message": "Unrecognized request argument: stream_options",
                                "type": "invalid_request_error",
                            }
                        },
                    )
                    return
                reply = fake._next(body)
                try:
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    if reply.status != 200:
                        err = {"error": {"message": reply.error_message, "type": reply.error_type}}
                        self._json(reply.status, err, reply.headers)
                    elif body.get("stream"):
                        self._stream(body, reply)
                    else:
                        self._json(200, completion(body, reply), reply.headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                model = reply.model or body.get("model", "fake-model")
                base = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                }

                def send(payload: dict[str, Any] | str) -> None:
                    data = payload if isinstance(payload, str) else json.dumps(payload)
                    self.wfile.write(f"data: {data}\n\n".encode())
                    self.wfile.flush()

                send(
                    {
                        **base,
                        "choices": [
                            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                        ],
                    }
                )
                pieces = [
                    reply.text[i : i + reply.chunk_size] for i in range(0, len(reply.text), reply.chunk_size)
                ]
                for i, piece in enumerate(pieces):
                    if reply.drop_after is not None and i == reply.drop_after:
                        self.wfile.flush()
                        self.connection.shutdown(2)  # cut mid-stream
                        self.close_connection = True
                        return
                    if reply.stall_after is not None and i == reply.stall_after:
                        time.sleep(reply.stall_s)
                    send(
                        {
                            **base,
                            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                        }
                    )
                send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]})
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                if include_usage and reply.usage is not None:
                    p, c = reply.usage
                    send(
                        {
                            **base,
                            "choices": [],
                            "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
                        }
                    )
                send("[DONE]")
                self.close_connection = True

        return Handler


def completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": reply.model or body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": reply.finish_reason,
            }
        ],
    }
    if reply.usage is not None:
        p, c = reply.usage
        payload["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    return payload
