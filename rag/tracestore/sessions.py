"""Chat sessions: a user's conversations, each an ordered list of turns (an assistant turn links its trace)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import Connection, func, insert, select

from rag.tracestore import models as m
from rag.tracestore.db import Database, as_datetime, iso
from rag.tracestore.errors import SessionNotFound


class ChatSessions:
    """The chat sessions in one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, user: str, title: str | None = None) -> str:
        """A new, empty session of ``user``'s; returns its id."""
        session_id = uuid.uuid4().hex
        row = {"id": session_id, "user": user, "title": title, "created_at": datetime.now(UTC)}
        self.db.write("create the chat session", lambda conn: conn.execute(insert(m.ChatSession), [row]))
        return session_id

    def add_turn(
        self, session_id: str, role: Literal["user", "assistant"], content: str, trace_id: str | None = None
    ) -> int:
        """Append a turn; returns its id. ``trace_id`` links an assistant turn to the answer's trace."""
        if role not in ("user", "assistant"):
            raise ValueError(f"role must be 'user' or 'assistant', not {role!r}")

        def write(conn: Connection) -> int:
            _require_session(conn, session_id)
            row = {
                "session_id": session_id,
                "role": role,
                "content": content,
                "trace_id": trace_id,
                "created_at": datetime.now(UTC),
            }
            return int(conn.execute(insert(m.ChatTurn).values(**row).returning(m.ChatTurn.id)).scalar_one())

        return self.db.write("add the chat turn", write)

    def turns(self, session_id: str) -> list[dict[str, Any]]:
        """A session's turns in order: id, session_id, role, content, trace_id, created_at."""
        t = m.ChatTurn

        def read(conn: Connection) -> list[Any]:
            _require_session(conn, session_id)
            stmt = (
                select(t.id, t.session_id, t.role, t.content, t.trace_id, t.created_at)
                .where(t.session_id == session_id)
                .order_by(t.id)
            )
            return list(conn.execute(stmt).mappings())

        return [
            {**r, "created_at": iso(r["created_at"])} for r in self.db.read("read the chat session", read)
        ]

    def list(self, user: str, limit: int = 100) -> list[dict[str, Any]]:
        """The user's sessions, newest first: id, user, title, created_at, turns, last_turn_at."""
        s, t = m.ChatSession, m.ChatTurn
        stmt = (
            select(
                s.id,
                s.user,
                s.title,
                s.created_at,
                func.count(t.id).label("turns"),
                func.max(t.created_at).label("last_turn_at"),
            )
            .outerjoin(t, t.session_id == s.id)
            .where(s.user == user)
            .group_by(s.id, s.user, s.title, s.created_at)
            .order_by(s.created_at.desc(), s.id.desc())
            .limit(limit)
        )
        rows = self.db.read("list chat sessions", lambda conn: list(conn.execute(stmt).mappings()))
        return [
            {**r, "created_at": iso(r["created_at"]), "last_turn_at": iso(as_datetime(r["last_turn_at"]))}
            for r in rows
        ]


def _require_session(conn: Connection, session_id: str) -> None:
    if conn.execute(select(m.ChatSession.id).where(m.ChatSession.id == session_id)).first() is None:
        raise SessionNotFound(f"No chat session with id {session_id!r}.")
