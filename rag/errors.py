"""One error root for the whole project, with children by cause.

Adapters translate third-party exceptions (Qdrant, OpenAI, pypdf, SQLAlchemy) into these at the boundary.
The CLI and UI print ``str(error)`` (and ``error.hint`` when set) to the user, never a traceback.
"""

from __future__ import annotations


class RagError(Exception):
    """Base of every error meant for a user. ``hint`` says what to do about it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def user_message(self) -> str:
        return f"{self}\nHint: {self.hint}" if self.hint else str(self)


class ConfigurationError(RagError):
    """A setting is missing, malformed or points at something that does not exist."""


class IngestError(RagError):
    """Ingestion of one file or of the whole batch failed."""


class IngestFileError(IngestError):
    """One input file could not be ingested. ``reason`` is a short machine-readable code."""

    REASONS = (
        "not_a_pdf",
        "encrypted",
        "corrupt",
        "no_text",
        "too_large",
        "too_many_pages",
        "timed_out",
        "out_of_memory",
        "unsupported",
        "bad_metadata",
        "empty",
        "unreadable",
    )

    def __init__(self, reason: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


class IndexUnavailableError(RagError):
    """The index is missing, empty or unreadable."""


class EmptyIndexError(IndexUnavailableError):
    """Nothing has been ingested yet."""


class RetrievalError(RagError):
    """A retrieval backend (Qdrant, lexical index) failed."""


class AccessError(RagError):
    """A request lacks a principal, or asks for something the principal may not read."""


class GenerationError(RagError):
    """The LLM call failed (timeout, rate limit, server error, bad response)."""


class StorageError(RagError):
    """The trace store (SQLite or PostgreSQL) failed."""
