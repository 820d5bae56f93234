"""The trace store: every answer's trace, its feedback, chat sessions and conversation memory, in SQLite or
PostgreSQL.

store = TraceStore.from_settings(settings)     # schema made by `rag db upgrade`, never implicitly
trace_id = store.traces.save(trace)            # the `rag ask --json` dict
assert store.traces.get(trace_id) == trace
typed = store.traces.read(trace_id)            # a rag.traces.schema.Trace, or TraceSchemaError
rows = store.traces.list(TraceFilter(user="alice", abstained=True), limit=20)
"""

from rag.tracestore.db import current_revision, downgrade, upgrade
from rag.tracestore.errors import (
    DatabaseNotInitialised,
    FeedbackNotAllowed,
    InvalidFeedback,
    InvalidTrace,
    SchemaOutOfDate,
    SessionNotFound,
    TraceNotFound,
)
from rag.tracestore.filters import TraceFilter
from rag.tracestore.store import TraceStore

__all__ = [
    "DatabaseNotInitialised",
    "FeedbackNotAllowed",
    "InvalidFeedback",
    "InvalidTrace",
    "SchemaOutOfDate",
    "SessionNotFound",
    "TraceFilter",
    "TraceNotFound",
    "TraceStore",
    "current_revision",
    "downgrade",
    "upgrade",
]
