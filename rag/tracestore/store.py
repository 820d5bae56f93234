"""The trace store: one database and the six things kept in it, each in its own module.

    store = TraceStore.from_settings(settings)
    store.traces      # rag/tracestore/traces.py    save, get, read, list, count, export
    store.feedback    # rag/tracestore/feedback.py  set, clear, get
    store.analytics   # rag/tracestore/analytics.py users, daily_stats, feedback_reasons, gap_questions, ...
    store.sessions    # rag/tracestore/sessions.py  create, add_turn, list, turns
    store.memory      # rag/tracestore/memory.py    remember, facts, history, forget
    store.keys        # rag/tracestore/keys.py      create, list, authenticate, expire, revoke (the API's keys)

All six share one :class:`rag.tracestore.db.Database` (one pool, one schema check, retried writes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from rag.tracestore.analytics import Analytics
from rag.tracestore.db import Database, display_url
from rag.tracestore.feedback import Feedback
from rag.tracestore.keys import ApiKeys
from rag.tracestore.memory import Memory
from rag.tracestore.sessions import ChatSessions
from rag.tracestore.traces import Traces

if TYPE_CHECKING:
    from rag.config import Settings


class TraceStore:
    """Traces, feedback, analytics, chat sessions, conversation memory and API keys in one SQL database (SQLite or
    PostgreSQL). The schema is made by ``rag db upgrade``, never implicitly: a call on a database without it
    raises :class:`rag.tracestore.DatabaseNotInitialised`.

    Thread-safe: every call checks a connection out of the engine's pool for one transaction. Create one per
    process and share it; ``close()`` releases the pool.
    """

    def __init__(self, url: str, *, engine: Engine | None = None) -> None:
        self.db = Database(url, engine=engine)
        self.traces = Traces(self.db)
        self.feedback = Feedback(self.db)
        self.analytics = Analytics(self.db)
        self.sessions = ChatSessions(self.db)
        self.memory = Memory(self.db)
        self.keys = ApiKeys(self.db)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> TraceStore:
        if settings is None:
            from rag.config import default_settings

            settings = default_settings()
        return cls(settings.sqlalchemy_url)

    @property
    def url(self) -> str:
        return self.db.url

    def check_ready(self) -> None:
        """Raise a StorageError a user can act on unless the database exists at the expected revision."""
        self.db.check_ready()

    def save_trace(self, trace: Mapping[str, Any]) -> str:
        """``traces.save``: what the pipeline calls (the :class:`rag.protocols.TraceSink` it is given)."""
        return self.traces.save(trace)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TraceStore({display_url(self.url)!r})"
