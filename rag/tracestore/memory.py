"""Conversation memory: facts a user told the bot about themselves ("I work part-time"), one active value per
key, earlier values kept as history."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from rag.tracestore import models as m
from rag.tracestore.db import Database, iso


class Memory:
    """The memory facts in one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def remember(self, user: str, key: str, value: str) -> dict[str, Any]:
        """Make ``value`` the user's fact for ``key``. A different active value is superseded, kept as history."""
        f = m.MemoryFact

        def write(conn: Connection) -> dict[str, Any]:
            now = datetime.now(UTC)
            current = conn.execute(
                select(f.id, f.value)
                .where(f.user == user, f.key == key, f.active.is_(True))
                .with_for_update()
            ).first()
            if current is not None and current.value == value:
                return _fact(conn, current.id)
            if current is not None:
                conn.execute(update(f).where(f.id == current.id).values(active=False, updated_at=now))
            row = {
                "user": user,
                "key": key,
                "value": value,
                "created_at": now,
                "updated_at": now,
                "active": True,
            }
            new_id = conn.execute(insert(f).values(**row).returning(f.id)).scalar_one()
            if current is not None:
                conn.execute(update(f).where(f.id == current.id).values(superseded_by=new_id))
            return _fact(conn, new_id)

        # Two writers correcting the same fact at once: the loser hits the one-active-fact index and reruns.
        return self.db.write("remember the fact", write, retry_on=(IntegrityError,))

    def facts(self, user: str) -> list[dict[str, Any]]:
        """The user's active facts, oldest first: id, key, value, created_at, updated_at."""
        f = m.MemoryFact
        stmt = select(m.table(f)).where(f.user == user, f.active.is_(True)).order_by(f.created_at, f.id)
        return [
            _fact_dict(r, history=False)
            for r in self.db.read("read memory facts", lambda conn: list(conn.execute(stmt).mappings()))
        ]

    def history(self, user: str, key: str) -> list[dict[str, Any]]:
        """Every value the fact has had, oldest first, with ``active`` and ``superseded_by``."""
        f = m.MemoryFact
        stmt = select(m.table(f)).where(f.user == user, f.key == key).order_by(f.id)
        return [
            _fact_dict(r)
            for r in self.db.read("read memory facts", lambda conn: list(conn.execute(stmt).mappings()))
        ]

    def forget(self, user: str, key: str) -> bool:
        """Deactivate the user's fact for ``key`` (kept as history). False when there was none."""
        f = m.MemoryFact
        stmt = (
            update(f)
            .where(f.user == user, f.key == key, f.active.is_(True))
            .values(active=False, updated_at=datetime.now(UTC))
        )
        return bool(self.db.write("forget the fact", lambda conn: conn.execute(stmt).rowcount))


def _fact(conn: Connection, fact_id: int) -> dict[str, Any]:
    f = m.MemoryFact
    return _fact_dict(conn.execute(select(m.table(f)).where(f.id == fact_id)).mappings().one())


def _fact_dict(row: Mapping[Any, Any], *, history: bool = True) -> dict[str, Any]:
    out = {
        "id": row["id"],
        "key": row["key"],
        "value": row["value"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }
    if history:
        out.update(active=row["active"], superseded_by=row["superseded_by"])
    return out
