"""The API's OpenAPI 3.1 document, generated from the models the endpoints use (ui/api/schemas.py and the trace
schema, rag/traces/schema.py), served at ``GET /v1/openapi.json`` and checked into ``docs/openapi.json``:

    python -m ui.api.openapi --write   # regenerate docs/openapi.json after changing a model
    python -m ui.api.openapi --check   # exit 1 when the committed file is stale (tests/ui/api run it)
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic.json_schema import models_json_schema

from rag.cli_support import write_or_check
from rag.traces import schema as ts
from ui.api import schemas as s

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
DEFAULT_MODEL = "policy-bot"
REF = "#/components/schemas/{model}"
_MODELS: tuple[type[Any], ...] = (
    s.ChatCompletionRequest,
    s.ChatCompletion,
    s.ChatCompletionChunk,
    s.ModelList,
    s.Model,
    s.AskRequest,
    s.FeedbackRequest,
    s.FeedbackResponse,
    s.ErrorResponse,
    ts.Trace,
)
ERRORS = {
    "400": "Bad input: malformed JSON, a missing or invalid field, an empty or oversized message list, a question "
    "over the length limit, a service key without on_behalf_of",
    "401": "No API key or identity, or a malformed, unknown, expired or revoked key",
    "403": "on_behalf_of from a key that is not a trusted service key, or groups outside the key's",
    "404": "An unknown model or endpoint; feedback on a trace id that is not the asker's",
    "413": "A body over RAG_API_MAX_BODY_BYTES",
    "415": "A body that is not application/json",
    "429": "Over the key's rate limit: retry after the Retry-After header's seconds",
    "503": "Nothing indexed yet, search or the trace database unavailable",
}


def _ref(model: type[Any]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _json(model: type[Any]) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(model)}}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"description": ERRORS[c], "content": _json(s.ErrorResponse)} for c in codes}


def _body(model: type[Any]) -> dict[str, Any]:
    return {"required": True, "content": _json(model)}


@lru_cache(maxsize=4)
def _document(model_name: str) -> str:
    _, schemas = models_json_schema([(m, "validation") for m in _MODELS], ref_template=REF)
    common = ("400", "401", "403", "413", "415", "429", "503")
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Policy support bot API",
            "version": "1",
            "description": "OpenAI-compatible chat completions over the policies the asker may read, with "
            "citations, sources and the trace id in the `rag` extension; the native ask and feedback "
            "endpoints. Authentication: `Authorization: Bearer <key>` (`rag keys create`), or the deployment's "
            "sign-in. Guide: docs/api.md.",
        },
        "servers": [{"url": "/"}],
        "components": {
            "schemas": schemas["$defs"],
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "rag_<id>_<secret>"}
            },
        },
        "security": [{"apiKey": []}],
        "paths": {
            "/v1/chat/completions": {
                "post": {
                    "operationId": "createChatCompletion",
                    "summary": "Answer the last user message (streamed as server-sent events with stream=true)",
                    "requestBody": _body(s.ChatCompletionRequest),
                    "responses": {
                        "200": {
                            "description": "The answer; streamed: `data:` events of ChatCompletionChunk, then "
                            "`data: [DONE]`",
                            "content": {
                                "application/json": {"schema": _ref(s.ChatCompletion)},
                                "text/event-stream": {"schema": _ref(s.ChatCompletionChunk)},
                            },
                        },
                        "404": {"description": ERRORS["404"], "content": _json(s.ErrorResponse)},
                        **_errors(*common),
                    },
                }
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": f"The bot as a model ({model_name})",
                    "responses": {
                        "200": {"description": "The model list", "content": _json(s.ModelList)},
                        **_errors("401", "429"),
                    },
                }
            },
            "/v1/models/{model}": {
                "get": {
                    "operationId": "retrieveModel",
                    "parameters": [
                        {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "responses": {
                        "200": {"description": "The model", "content": _json(s.Model)},
                        **_errors("401", "404", "429"),
                    },
                }
            },
            "/v1/rag/ask": {
                "post": {
                    "operationId": "ask",
                    "summary": "Answer one question with the whole trace (the `rag ask --json` contract, "
                    "docs/schema/trace.schema.json)",
                    "requestBody": _body(s.AskRequest),
                    "responses": {
                        "200": {
                            "description": "The trace; header X-Rag-Trace-Stored says whether it was stored",
                            "content": _json(ts.Trace),
                        },
                        **_errors(*common),
                    },
                }
            },
            "/v1/rag/feedback": {
                "post": {
                    "operationId": "feedback",
                    "summary": "Rate one of the asker's answers (thumbs and a reason), or withdraw the rating",
                    "requestBody": _body(s.FeedbackRequest),
                    "responses": {
                        "200": {
                            "description": "The feedback now stored",
                            "content": _json(s.FeedbackResponse),
                        },
                        "404": {"description": ERRORS["404"], "content": _json(s.ErrorResponse)},
                        **_errors(*common),
                    },
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "security": [],
                    "responses": {"200": {"description": "This document"}},
                }
            },
            "/v1/health": {
                "get": {
                    "operationId": "health",
                    "security": [],
                    "responses": {"200": {"description": '{"status": "ok"}'}},
                }
            },
        },
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def document(model_name: str = DEFAULT_MODEL) -> dict[str, Any]:
    """The OpenAPI document (a fresh copy)."""
    return dict(json.loads(_document(model_name)))


def document_text() -> str:
    """The committed document's text (with the default model name)."""
    return _document(DEFAULT_MODEL)


def main(argv: list[str] | None = None) -> int:
    """Write or check docs/openapi.json."""
    return write_or_check(argv, "ui.api.openapi", DOC_PATH, document_text, "is stale")


if __name__ == "__main__":
    raise SystemExit(main())
