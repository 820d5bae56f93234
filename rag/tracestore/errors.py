"""The trace store's errors: each a :class:`rag.errors.StorageError` (or, for feedback on another user's answer,
an :class:`rag.errors.AccessError`) that the CLI and the UI show as a message, never a traceback."""

from __future__ import annotations

from rag.errors import AccessError, StorageError


class TraceNotFound(StorageError):
    """No trace with that id."""


class SessionNotFound(StorageError):
    """No chat session with that id."""


class InvalidTrace(StorageError):
    """The trace dict cannot be stored (not JSON-able, or an unusable ``trace_id``)."""


class DatabaseNotInitialised(StorageError):
    """The trace tables do not exist yet: ``rag db upgrade`` was never run against this database."""


class SchemaOutOfDate(StorageError):
    """The database schema is at a different migration than this code expects."""


class FeedbackNotAllowed(AccessError):
    """Feedback on a trace that is not the caller's own."""


class InvalidFeedback(StorageError):
    """A rating, reason or comment the feedback table cannot take."""
