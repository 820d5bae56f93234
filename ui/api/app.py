"""The API's endpoints (docs/api.md), as Starlette routes: mounted beside the Streamlit app by ui/server.py
(``rag ui``) and served alone by ``rag serve`` (:func:`create_app`).

    POST /v1/chat/completions   OpenAI's chat completions, whole or streamed (server-sent events)
    GET  /v1/models             the bot as a model; GET /v1/models/{id}
    POST /v1/rag/ask            one question, answered with the whole trace (the `rag ask --json` contract)
    POST /v1/rag/feedback       thumbs up or down (with a reason) on an answer, by its trace id
    GET  /v1/openapi.json       the OpenAPI document (docs/openapi.json)
    GET  /v1/health             200 when the server answers (no sign-in, no data)

Every request, in order: who sent it (ui/api/identity.py: an API key, or the deployment's identity), its rate
limit (ui/api/limits.py), its body (bounded, JSON, validated by ui/api/schemas.py), who asks (a service key's
``on_behalf_of``), then the question goes to the one pipeline the UI also answers with
(``ui.services.get_pipeline``: built by ``rag.factory.build_pipeline``), with the same filters before anything is
ranked. The trace is stored whole, in one transaction, once the answer is complete, whether or not the client
is still there; nothing is stored for a request that fails. Every error is OpenAI's shape (ui/api/errors.py).

Answers are computed in a pool of ``RAG_API_WORKERS`` threads; further questions wait their turn. A streamed
answer sends its role at once, keep-alive comments while the answer is computed, then the checked answer: the
text streamed is always the text the whole response would hold (citations and claims are checked first).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rag.config import Settings
from rag.pipeline import Question
from rag.stages.memory import select_history
from rag.traces.schema import describe
from rag.tracestore.errors import FeedbackNotAllowed, TraceNotFound
from ui.api import identity, replies
from ui.api.errors import NO_STORE, ApiError, bad_request, from_exception
from ui.api.limits import RateLimiter, read_body
from ui.api.schemas import (
    AskRequest,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    Delta,
    FeedbackRequest,
    FeedbackResponse,
    Model,
    ModelList,
    OnBehalfOf,
    RagAnswer,
    Usage,
)

_LOG = logging.getLogger("ui.api")
M = TypeVar("M", bound=BaseModel)
PREFIX = "/v1"
KEEPALIVE_S = 10.0  # a comment line this often while an answer is computed keeps proxies from timing out
TOUCH_EVERY_S = 60.0  # a key's last use is written at most this often
CREATED = int(time.time())
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@dataclass
class Answered:
    """One answered question: its trace (stored when ``stored``), and the reply a chat tool shows."""

    trace: dict[str, Any]
    stored: bool
    ask_ms: float = 0.0  # asking and storing, as `rag ask` does: the rest of a response's time is the API's
    text: str = ""
    rag: RagAnswer | None = None

    def timing(self) -> dict[str, str]:
        """The ``Server-Timing`` header: how long the answer itself took (benchmarks/api.py reads it)."""
        return {"Server-Timing": f"ask;dur={self.ask_ms:.1f}"}

    def usage(self) -> Usage:
        tokens = self.trace.get("tokens") or {}
        prompt = int(tokens.get("prompt") or 0)
        completion = int(tokens.get("completion") or 0)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


class Api:
    """One API server: its settings (read once, at the first request or from ``rag serve``), the rate limiter,
    the pool questions are answered in, and the services it shares with the UI in the same process."""

    def __init__(
        self, settings: Settings | None = None, *, server_address: Callable[[], str | None] | None = None
    ) -> None:
        self._settings = settings
        self._server_address = server_address or _streamlit_address
        self.limiter = RateLimiter()
        self._answering: anyio.CapacityLimiter | None = None
        self._touched: dict[str, float] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ services
    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from ui import services

            self._settings = services.get_settings()
        return self._settings

    def answering(self) -> anyio.CapacityLimiter:
        if self._answering is None:  # made inside the event loop, on the first question
            self._answering = anyio.CapacityLimiter(self.settings.api_workers)
        return self._answering

    def store(self) -> Any:
        from ui import services

        return services.get_store(self.settings)

    def pipeline(self) -> Any:
        from ui import services

        return services.get_pipeline(self.settings)

    def demo_users(self) -> dict[str, frozenset[str]]:
        from ui import services

        return services.load_users(self.settings)

    def warm_up(self) -> None:
        """Load the pipeline and open the trace store now (``rag serve`` calls it before it takes requests)."""
        self.pipeline()
        self.store()

    # ------------------------------------------------------------------ steps every request takes
    async def sender(self, request: Request) -> identity.Sender:
        """Who sent it (a key is checked in a worker thread: it reads the database), then its rate limit."""

        def identify() -> identity.Sender:
            found = identity.identify(
                request.headers,
                request.cookies,
                self.settings,
                keys=lambda: self.store().keys,
                server_address=self._server_address(),
            )
            if found.key is not None:
                self._touch(found.key.id)
            return found

        if identity.bearer_token(request.headers) is None:
            found = identify()
        else:
            found = await anyio.to_thread.run_sync(identify)
        self.limiter.check(found.limit_id, found.rate_limit(self.settings), found.limit_label())
        return found

    def _touch(self, key_id: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._touched.get(key_id, -TOUCH_EVERY_S) < TOUCH_EVERY_S:
                return
            self._touched[key_id] = now
        try:
            self.store().keys.touch(key_id)
        except Exception:  # a missed "last used" must not fail the request
            _LOG.warning("could not record the use of API key %s", key_id, exc_info=True)

    async def body(self, request: Request, model: type[M]) -> M:
        """The request's JSON body as ``model``: 415, 413 or 400 otherwise."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise ApiError(
                415,
                f"Send the body as JSON with `Content-Type: application/json` (not {kind or 'none'!r}).",
                code="unsupported_media_type",
            )
        raw = await read_body(
            request.headers.get("content-length"), request.stream(), self.settings.api_max_body_bytes
        )
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise bad_request(f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
        if not isinstance(data, dict):
            raise bad_request("The request body must be a JSON object.", code="invalid_json")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            param = ".".join(str(p) for p in first["loc"]) or None
            raise bad_request(f"Invalid request: {describe(exc, limit=3)}.", param=param) from None

    def question_text(self, text: str, param: str) -> str:
        limit = self.settings.question_max_chars
        if len(text) > limit:
            raise ApiError(
                400,
                f"The question is {len(text):,} characters long; questions can be at most {limit:,} "
                "(RAG_QUESTION_MAX_CHARS, as in the chat). Send the question itself; earlier turns go in "
                "earlier messages.",
                code="question_too_long",
                param=param,
            )
        return text

    def asker(
        self, sender: identity.Sender, on_behalf: OnBehalfOf | None, demo_user: str | None, param: str
    ) -> identity.Asker:
        return identity.resolve(
            sender,
            on_behalf,
            demo_user=demo_user if sender.mode == "demo" else None,
            demo_users=self.demo_users,
            param=param,
        )

    # ------------------------------------------------------------------ answering
    def _ask(self, pipeline: Any, question: Question) -> Answered:
        """Answer and store (in a worker thread): the trace is saved whole, in one transaction, or not at all."""
        start = time.perf_counter()
        trace = pipeline.ask(question).to_json()
        try:
            self.store().traces.save(trace)
            stored = True
        except Exception:
            _LOG.warning("an API answer's trace %s was not stored", trace.get("trace_id"), exc_info=True)
            stored = False
        return Answered(trace, stored, ask_ms=(time.perf_counter() - start) * 1000)

    def _reply(self, pipeline: Any, answered: Answered, asker: identity.Asker, origin: str) -> Answered:
        """The reply text and the ``rag`` extension, with links made for this asker."""
        from ui import answer_text, serving, sources

        documents = pipeline.reader.documents()
        principal = asker.principal

        def link(doc_id: str, page: int | None) -> str | None:
            source = sources.readable_source(documents, principal, doc_id)  # checked again for this asker
            path = None if source is None else serving.open_url(source, principal, page)
            return None if path is None else origin + path

        trace = answered.trace
        cited = replies.sources(trace, link)
        contact = None
        if trace.get("abstained"):
            found = sources.contact_for(documents, principal, answer_text.looked_at(trace))
            contact = found or self.settings.support_contact
        answered.text, answered.rag = replies.reply(trace, cited, contact, stored=answered.stored)
        return answered

    async def answer(self, question: Question, asker: identity.Asker, origin: str | None) -> Answered:
        def work() -> Answered:
            pipeline = self.pipeline()
            answered = self._ask(pipeline, question)
            return answered if origin is None else self._reply(pipeline, answered, asker, origin)

        return await anyio.to_thread.run_sync(work, limiter=self.answering())

    def origin(self, request: Request) -> str:
        """Where links to sources start: ``RAG_PUBLIC_URL``, else the address this request came to."""
        if self.settings.public_url:
            return self.settings.public_url.rstrip("/")
        return f"{request.url.scheme}://{request.url.netloc}"

    def check_model(self, model: str) -> None:
        if model != self.settings.api_model:
            raise ApiError(
                404,
                f"The model {model[:100]!r} does not exist here: this server answers as "
                f"{self.settings.api_model!r} (GET /v1/models lists it).",
                code="model_not_found",
                param="model",
            )

    # ------------------------------------------------------------------ endpoints
    async def chat_completions(self, request: Request) -> Response:
        try:
            sender = await self.sender(request)
            req = await self.body(request, ChatCompletionRequest)
            self.check_model(req.model)
            if req.n not in (None, 1):
                raise bad_request("`n` must be 1: one answer per question.", param="n")
            if len(req.messages) > self.settings.api_max_messages:
                raise bad_request(
                    f"{len(req.messages)} messages is more than {self.settings.api_max_messages} "
                    "(RAG_API_MAX_MESSAGES): send the recent conversation only (older turns do not fit the "
                    "history budget anyway).",
                    code="too_many_messages",
                    param="messages",
                )
            text, turns = replies.conversation(req.messages)
            text = self.question_text(text, f"messages.{len(req.messages) - 1}.content")
            options = req.rag
            asker = self.asker(
                sender, options.on_behalf_of if options else None, req.user, "rag.on_behalf_of"
            )
            question = Question(
                text,
                asker.principal,
                as_of=options.as_of if options else None,
                tags=frozenset(options.tags) if options else frozenset(),
                history=tuple(select_history(turns, self.settings.history_token_budget)),
                channel="api",
                api_key=asker.key_use(),
            )
        except Exception as exc:
            return from_exception(exc).response()
        origin = self.origin(request)
        if req.stream:
            usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(
                self._stream(question, asker, origin, usage),
                media_type="text/event-stream",
                headers={**NO_STORE, "X-Accel-Buffering": "no"},
            )
        try:
            answered = await self.answer(question, asker, origin)
        except Exception as exc:
            return from_exception(exc).response()
        assert answered.rag is not None
        completion = ChatCompletion(
            id=f"chatcmpl-{answered.trace['trace_id']}",
            created=int(time.time()),
            model=self.settings.api_model,
            choices=[Choice(message=AssistantMessage(content=answered.text))],
            usage=answered.usage(),
            rag=answered.rag,
        )
        return JSONResponse(completion.model_dump(mode="json"), headers={**NO_STORE, **answered.timing()})

    async def _stream(
        self, question: Question, asker: identity.Asker, origin: str, include_usage: bool
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        model = self.settings.api_model

        def event(choices: list[ChunkChoice], **extra: Any) -> bytes:
            chunk = ChatCompletionChunk(id=cid, created=created, model=model, choices=choices, **extra)
            return b"data: " + chunk.model_dump_json(exclude_none=True).encode() + b"\n\n"

        yield event([ChunkChoice(delta=Delta(role="assistant", content=""))])
        # The answer runs as a task of its own: a client that goes away cancels this generator, not the answer,
        # which completes and is stored whole.
        task = asyncio.ensure_future(self.answer(question, asker, origin))
        task.add_done_callback(_retrieved)
        while not task.done():
            await asyncio.wait({task}, timeout=KEEPALIVE_S)
            if not task.done():
                yield b": keep-alive\n\n"
        try:
            answered = task.result()
        except Exception as exc:
            yield b"data: " + json.dumps(from_exception(exc).body()).encode() + b"\n\n"
            return
        assert answered.rag is not None
        trace_id = answered.trace["trace_id"]
        for i, piece in enumerate(_pieces(answered.text)):
            extra = {"rag": {"trace_id": trace_id}} if i == 0 else {}
            yield event([ChunkChoice(delta=Delta(content=piece))], **extra)
        yield event(
            [ChunkChoice(delta=Delta(), finish_reason="stop")], rag=answered.rag.model_dump(mode="json")
        )
        if include_usage:
            yield event([], usage=answered.usage())
        yield b"data: [DONE]\n\n"

    async def models(self, request: Request) -> Response:
        try:
            await self.sender(request)
            model = Model(id=self.settings.api_model, created=CREATED)
            wanted = request.path_params.get("model")
            if wanted is not None:
                self.check_model(str(wanted))
                return JSONResponse(model.model_dump(mode="json"), headers=NO_STORE)
            return JSONResponse(ModelList(data=[model]).model_dump(mode="json"), headers=NO_STORE)
        except Exception as exc:
            return from_exception(exc).response()

    async def ask(self, request: Request) -> Response:
        """The native endpoint: the whole trace, as ``rag ask --json`` prints it."""
        try:
            sender = await self.sender(request)
            req = await self.body(request, AskRequest)
            if len(req.history) > self.settings.api_max_messages:
                raise bad_request(
                    f"{len(req.history)} history turns is more than {self.settings.api_max_messages} "
                    "(RAG_API_MAX_MESSAGES).",
                    code="too_many_messages",
                    param="history",
                )
            text = self.question_text(req.question.strip(), "question")
            if not text:
                raise bad_request("The question is empty.", code="empty_question", param="question")
            asker = self.asker(sender, req.on_behalf_of, req.user, "on_behalf_of")
            turns = [
                (t.role, replies.strip_footer(t.content) if t.role == "assistant" else t.content)
                for t in req.history
            ]
            question = Question(
                text,
                asker.principal,
                as_of=req.as_of,
                tags=frozenset(req.tags),
                history=tuple(select_history(turns, self.settings.history_token_budget)),
                channel="api",
                api_key=asker.key_use(),
            )
            answered = await self.answer(question, asker, None)
        except Exception as exc:
            return from_exception(exc).response()
        headers = {
            **NO_STORE,
            **answered.timing(),
            "X-Rag-Trace-Stored": "true" if answered.stored else "false",
        }
        return JSONResponse(answered.trace, headers=headers)

    async def feedback(self, request: Request) -> Response:
        try:
            sender = await self.sender(request)
            req = await self.body(request, FeedbackRequest)
            asker = self.asker(sender, req.on_behalf_of, req.user, "on_behalf_of")
            user = asker.principal.user

            def write() -> FeedbackResponse:
                feedback = self.store().feedback
                if req.rating is None:
                    feedback.clear(req.trace_id, user)
                    return FeedbackResponse(trace_id=req.trace_id, rating=None)
                row = feedback.set(req.trace_id, user, req.rating, reason=req.reason, comment=req.comment)
                return FeedbackResponse(
                    trace_id=req.trace_id,
                    rating=row["rating"],
                    reason=row.get("reason"),
                    comment=row.get("comment"),
                    updated_at=row.get("updated_at"),
                )

            try:
                done = await anyio.to_thread.run_sync(write)
            except (TraceNotFound, FeedbackNotAllowed):  # another user's answer reads as a missing one
                raise ApiError(
                    404,
                    f"No answer with trace id {req.trace_id!r} was given to {user}: feedback rates the asker's "
                    "own answers (the trace id is in the answer's `rag.trace_id`).",
                    code="trace_not_found",
                    param="trace_id",
                ) from None
        except Exception as exc:
            return from_exception(exc).response()
        return JSONResponse(done.model_dump(mode="json"), headers=NO_STORE)

    async def openapi(self, request: Request) -> Response:
        from ui.api.openapi import document

        return JSONResponse(document(self.settings.api_model))

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"}, headers=NO_STORE)

    async def unknown(self, request: Request) -> Response:
        path = request.url.path
        known = {r.path: r.methods or set() for r in self.known_routes()}
        for route_path, methods in known.items():
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", route_path), path):
                return ApiError(
                    405,
                    f"{request.method} is not allowed on {route_path}: use {', '.join(sorted(methods - {'HEAD'}))}.",
                    code="method_not_allowed",
                ).response()
        return ApiError(
            404,
            f"No endpoint {path[:200]!r}. This API serves /v1/chat/completions, /v1/models, /v1/rag/ask, "
            "/v1/rag/feedback and /v1/openapi.json (docs/api.md).",
            code="unknown_endpoint",
        ).response()

    def known_routes(self) -> list[Route]:
        return [
            Route(f"{PREFIX}/chat/completions", self.chat_completions, methods=["POST"]),
            Route(f"{PREFIX}/models", self.models, methods=["GET"]),
            Route(f"{PREFIX}/models/{{model:path}}", self.models, methods=["GET"]),
            Route(f"{PREFIX}/rag/ask", self.ask, methods=["POST"]),
            Route(f"{PREFIX}/rag/feedback", self.feedback, methods=["POST"]),
            Route(f"{PREFIX}/openapi.json", self.openapi, methods=["GET"]),
            Route(f"{PREFIX}/health", self.health, methods=["GET"]),
        ]

    def routes(self) -> list[Route]:
        """The endpoints, then a catch-all under /v1 that answers unknown paths and methods in OpenAI's shape
        (beside the Streamlit app, an unknown path would otherwise get the app's page)."""
        return [*self.known_routes(), Route(f"{PREFIX}/{{path:path}}", self.unknown, methods=METHODS)]


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Read a finished answer task's exception, so one nobody awaited (the client left) is not reported as
    never retrieved; its failure was translated or logged where it happened."""
    if not task.cancelled():
        task.exception()


def _pieces(text: str) -> list[str]:
    """The reply in line-sized pieces, newlines kept (a chat tool shows it as it arrives)."""
    return [p for p in re.split(r"(?<=\n)", text) if p] or [""]


def _streamlit_address() -> str | None:
    import streamlit as st

    return str(st.get_option("server.address") or "") or None


def routes(api: Api | None = None) -> list[Route]:
    """The API's routes for ui/server.py to mount beside the Streamlit app."""
    return (api or Api()).routes()


def create_app(settings: Settings, *, host: str) -> Starlette:
    """The API alone (``rag serve``): its routes and the route that opens cited sources (ui/serving.py), with
    the pipeline loaded before the first request is taken."""
    from contextlib import asynccontextmanager

    from ui import serving

    api = Api(settings, server_address=lambda: host)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            await anyio.to_thread.run_sync(api.warm_up)
        except Exception as exc:  # nothing indexed yet, database not migrated: requests say so
            _LOG.warning("the API starts without its pipeline: %s", from_exception(exc).message)
        yield

    app = Starlette(routes=[*serving.routes(lambda: api.settings), *api.routes()], lifespan=lifespan)
    app.state.api = api
    return app
