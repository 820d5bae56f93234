"""The API's requests and responses as pydantic models: the endpoints validate requests with them and build their
responses through them, and the OpenAPI document (ui/api/openapi.py, docs/openapi.json) is generated from them,
so the document cannot drift from what the server does.

OpenAI's request fields this server has no use for (temperature, max_tokens, tools, ...) are accepted and
ignored, so clients that always send them work unchanged. The ``rag`` objects are this API's extension:
``rag`` in a chat request (who a service key asks for, the date and tags to answer as of), and ``rag`` in a chat
response or its last streamed chunk (the trace id, the answer's status, the structured sources).
"""

from __future__ import annotations

from datetime import date
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rag.traces.status import Status

MAX_NAME = 256
MAX_GROUPS = 500


class _Open(BaseModel):
    """A request object that takes OpenAI's fields this server ignores."""

    model_config = ConfigDict(extra="allow")


class _Closed(BaseModel):
    """This API's own objects: a misspelt field is an error, not a silent no-op."""

    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------------------- requests
class OnBehalfOf(_Closed):
    """The person a trusted service key asks for (a chat bot asking for who wrote in the channel)."""

    user: str = Field(min_length=1, max_length=MAX_NAME, description="the asker's user name")
    groups: list[str] = Field(
        default=[],
        max_length=MAX_GROUPS,
        description="the asker's groups: each must be one of the key's groups",
    )


class RagOptions(_Closed):
    """The ``rag`` extension of a chat request."""

    on_behalf_of: OnBehalfOf | None = Field(
        default=None, description="service keys only (and required for them): who is asking"
    )
    as_of: date | None = Field(default=None, description="answer from the policies in force on this date")
    tags: list[str] = Field(default=[], max_length=50, description="only documents with these tags")


class ContentPart(_Open):
    type: str
    text: str | None = None


Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ChatMessage(_Open):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(_Open):
    include_usage: bool = False


class ChatCompletionRequest(_Open):
    """``POST /v1/chat/completions``. The last message is the question (role ``user``); the earlier user and
    assistant messages are the conversation a follow-up is rewritten with, as in the chat page."""

    model: str = Field(description="the model GET /v1/models lists")
    messages: list[ChatMessage]
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, description="1 (or absent): one answer per question")
    user: str | None = Field(
        default=None, description="demo mode only: the demo user to ask as (ignored otherwise)"
    )
    rag: RagOptions | None = None


class HistoryTurn(_Closed):
    role: Literal["user", "assistant"]
    content: str


class AskRequest(_Closed):
    """``POST /v1/rag/ask``: one question, answered with the whole trace (the ``rag ask --json`` contract)."""

    question: str = Field(min_length=1)
    history: list[HistoryTurn] = Field(default=[], description="earlier turns, oldest first")
    as_of: date | None = None
    tags: list[str] = Field(default=[], max_length=50)
    on_behalf_of: OnBehalfOf | None = None
    user: str | None = Field(default=None, description="demo mode only: the demo user to ask as")


class FeedbackRequest(_Closed):
    """``POST /v1/rag/feedback``: the chat page's thumbs for an answer the asker got (by its trace id)."""

    trace_id: str = Field(min_length=1, max_length=64)
    rating: Literal["up", "down"] | None = Field(description="null withdraws the feedback")
    reason: Literal["wrong", "incomplete", "outdated", "did_not_answer", "other"] | None = None
    comment: str | None = Field(default=None, max_length=2000)
    on_behalf_of: OnBehalfOf | None = None
    user: str | None = Field(default=None, description="demo mode only: the demo user")


# ----------------------------------------------------------------------------- responses
class Source(BaseModel):
    """A passage the answer cites, as the chat page lists it under the answer."""

    n: int = Field(description="the [n] the answer text cites it with")
    title: str
    doc_id: str
    page: int | None = Field(description="the first page (PDFs)")
    page_end: int | None
    section: str
    locator: str = Field(description='where in the document: "p. 2, Returns > Full refunds"')
    quote: str | None = Field(description="the sentence of the passage the answer rests on")
    passage: str = Field(description="the whole cited passage")
    url: str | None = Field(
        description="opens the source at the page, for this asker only, for 15 minutes (null: no file to open)"
    )
    chunk_id: str
    supported: bool = Field(description="the passage supports the sentences citing it")


class RagAnswer(BaseModel):
    """The ``rag`` extension of a chat response (and of its last streamed chunk)."""

    trace_id: str = Field(description="the stored trace: POST /v1/rag/feedback rates it")
    status: Status
    label: str | None = Field(description="the status in the chat page's words")
    abstained: bool
    verified: bool = Field(description='the "Citations checked" badge')
    answer: str = Field(description="the answer without the notes and the Sources block")
    searched_for: str | None = Field(description="what a follow-up was searched as (null: as asked)")
    sources: list[Source]
    contact: str | None = Field(description="who to ask instead, when it abstained")
    stored: bool = Field(description="false when the trace database could not store the trace")


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    rag: RagAnswer


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: Literal["stop"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed answer. The first carries the role, the next the text; the first text
    chunk carries ``rag.trace_id``, the last (``finish_reason`` "stop") the whole ``rag`` object."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    rag: dict[str, Any] | None = Field(default=None, description="{trace_id} early, then the whole RagAnswer")


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "policy-rag"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class FeedbackResponse(BaseModel):
    trace_id: str
    rating: Literal["up", "down"] | None
    reason: str | None = None
    comment: str | None = None
    updated_at: str | None = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorDetail
