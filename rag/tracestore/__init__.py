"""The trace store: every answer's trace, chat sessions and conversation memory, in SQLite or PostgreSQL.

store = TraceStore.from_settings(settings)   # schema made by `rag db upgrade`, never implicitly
trace_id = store.save_trace(trace)           # the `rag ask --json` dict
assert store.get_trace(trace_id) == trace
typed = store.read_trace(trace_id)           # a rag.trace_schema.Trace, or TraceSchemaError
"""

from rag.tracestore.db import current_revision, downgrade, upgrade
from rag.tracestore.repository import (
    DatabaseNotInitialised,
    FeedbackNotAllowed,
    InvalidFeedback,
    InvalidTrace,
    SchemaOutOfDate,
    SessionNotFound,
    TraceNotFound,
    TraceStore,
)

__all__ = [
    "DatabaseNotInitialised",
    "FeedbackNotAllowed",
    "InvalidFeedback",
    "InvalidTrace",
    "SchemaOutOfDate",
    "SessionNotFound",
    "TraceNotFound",
    "TraceStore",
    "current_revision",
    "downgrade",
    "upgrade",
]
