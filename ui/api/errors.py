"""Every API error in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with the status code
OpenAI's clients map to their own exceptions (400 BadRequestError, 401 AuthenticationError, 403
PermissionDeniedError, 404 NotFoundError, 413, 415, 429 RateLimitError, 5xx InternalServerError).

The project's errors (rag/errors.py) are translated here, at the boundary, as the UI translates them into
messages (ui/services.py). An unexpected exception becomes a 500 that names an error id the server log holds
with its traceback: nothing from inside the failure (which might quote a document) reaches the client.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse

from rag.errors import (
    AccessError,
    ConfigurationError,
    EmptyIndexError,
    GenerationError,
    IndexUnavailableError,
    RagError,
    RetrievalError,
    StorageError,
)

_LOG = logging.getLogger("ui.api")
NO_STORE = {"Cache-Control": "no-store"}


@dataclass
class ApiError(Exception):
    """An error response: the status, OpenAI's ``type``, our ``code``, the request field at fault (``param``)
    and a message a developer can act on."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers={**NO_STORE, **self.headers})


def bad_request(message: str, *, code: str = "invalid_request", param: str | None = None) -> ApiError:
    return ApiError(400, message, code=code, param=param)


def from_exception(exc: BaseException) -> ApiError:
    """The response for an exception raised while answering."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RagError):
        return _from_rag_error(exc)
    error_id = uuid.uuid4().hex[:12]
    _LOG.error("API request failed (error id %s)", error_id, exc_info=exc)
    return ApiError(
        500,
        f"The server failed to answer ({type(exc).__name__}, error id {error_id}). Retry; if it keeps failing, "
        "the server's log holds the details under that id.",
        type="server_error",
        code="internal_error",
    )


def _from_rag_error(exc: RagError) -> ApiError:
    message = " ".join(exc.user_message().split())
    if isinstance(exc, EmptyIndexError):
        return ApiError(
            503,
            "Nothing is indexed yet: an administrator runs `rag ingest PATH` to index the policy documents.",
            type="server_error",
            code="index_empty",
        )
    if isinstance(exc, IndexUnavailableError | RetrievalError):
        return ApiError(
            503, f"Search is unavailable: {message}", type="server_error", code="search_unavailable"
        )
    if isinstance(exc, GenerationError):
        return ApiError(502, f"The language model failed: {message}", type="server_error", code="llm_failed")
    if isinstance(exc, StorageError):
        return ApiError(
            503, f"The trace database failed: {message}", type="server_error", code="storage_error"
        )
    if isinstance(exc, AccessError):
        return ApiError(403, message, type="permission_error", code="access_denied")
    if isinstance(exc, ConfigurationError):
        return ApiError(
            500, f"The server is misconfigured: {message}", type="server_error", code="configuration"
        )
    return ApiError(400, message, code="invalid_request")
