"""API keys (docs/api.md): created, listed, expired and revoked with ``rag keys``, checked on every API request.

A key is ``rag_<id>_<secret>``: the id is public (it names the key in listings and traces), the secret is 32
random bytes shown once at creation. Only the SHA-256 of the id and secret is stored: a random 256-bit secret
needs no slow password hash, and the database never holds anything that asks as anyone. A key is bound to a
user and their groups and always has an expiry; a ``service`` key (trusted, for a chat bot) may ask on behalf of
a named user with groups among its own. Keys are never deleted, so a trace's key id always resolves.

:meth:`ApiKeys.authenticate` reads the key on every call (no cache), so an expired or revoked key is refused on
its very next request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, insert, select, update

from rag.errors import AccessError, StorageError
from rag.tracestore import models as m
from rag.tracestore.db import Database

PREFIX = "rag"
ID_BYTES = 6  # 12 hex characters: enough to tell keys apart, short enough to read out
SECRET_BYTES = 32
NAME_CHARS = 128
MAX_GROUPS = 500
_TOKEN = re.compile(rf"^{PREFIX}_([0-9a-f]{{{2 * ID_BYTES}}})_([A-Za-z0-9_-]{{20,128}})$")
_ID = re.compile(rf"^[0-9a-f]{{{2 * ID_BYTES}}}$")


class InvalidKey(AccessError):
    """A key that does not exist, does not match, has expired or was revoked. ``reason``: ``invalid``,
    ``expired`` or ``revoked`` (only a key whose secret matched is told apart)."""

    def __init__(self, reason: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


class KeyNotFound(StorageError):
    """No key with that id (``rag keys expire/revoke``)."""


class InvalidKeySpec(StorageError):
    """A key cannot be created or changed as asked (an empty user, an expiry in the past, ...)."""


@dataclass(frozen=True)
class ApiKey:
    """A stored key, without its secret."""

    id: str
    name: str
    user: str
    groups: frozenset[str]
    service: bool
    rate_limit: int | None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    def state(self, now: datetime | None = None) -> str:
        """'active', 'expired' or 'revoked'."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if (now or datetime.now(UTC)) >= self.expires_at else "active"

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "user": self.user,
            "groups": sorted(self.groups),
            "service": self.service,
            "rate_limit": self.rate_limit,
            "state": self.state(now),
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
        }


def secret_hash(key_id: str, secret: str) -> str:
    return hashlib.sha256(f"{key_id}:{secret}".encode()).hexdigest()


def parse_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed key, else None."""
    match = _TOKEN.match(token.strip())
    return (match.group(1), match.group(2)) if match else None


def _row(row: Any) -> ApiKey:
    return ApiKey(
        id=row.id,
        name=row.name,
        user=row.user,
        groups=frozenset(str(g) for g in row.groups or ()),
        service=bool(row.service),
        rate_limit=row.rate_limit,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


def _clean_groups(groups: Iterable[str]) -> frozenset[str]:
    out = frozenset(str(g).strip() for g in groups if str(g).strip())
    if len(out) > MAX_GROUPS:
        raise InvalidKeySpec(f"A key holds at most {MAX_GROUPS} groups, not {len(out)}.")
    return out


class ApiKeys:
    """The API keys in one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self,
        user: str,
        groups: Iterable[str],
        *,
        expires_at: datetime,
        name: str | None = None,
        service: bool = False,
        rate_limit: int | None = None,
        now: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key for ``user`` with ``groups``, valid until ``expires_at``; returns it and the token to hand
        over (``rag_<id>_<secret>``), which is never stored and cannot be shown again."""
        user = user.strip()
        now = now or datetime.now(UTC)
        if not user or len(user) > 256 or any(ord(c) < 32 for c in user):
            raise InvalidKeySpec("A key needs a user name (1-256 printable characters).")
        label = (name or "").strip() or user
        if len(label) > NAME_CHARS or any(ord(c) < 32 for c in label):
            raise InvalidKeySpec(f"A key's name is at most {NAME_CHARS} printable characters.")
        expires_at = expires_at if expires_at.tzinfo else expires_at.replace(tzinfo=UTC)
        if expires_at <= now:
            raise InvalidKeySpec(
                f"The expiry {expires_at.isoformat()} is not in the future.", hint="--expires-in 90d"
            )
        if rate_limit is not None and rate_limit < 1:
            raise InvalidKeySpec("A rate limit is at least 1 request per minute.")
        key_id = secrets.token_hex(ID_BYTES)
        secret = secrets.token_urlsafe(SECRET_BYTES)
        row = {
            "id": key_id,
            "name": label,
            "user": user,
            "groups": sorted(_clean_groups(groups)),
            "service": service,
            "secret_hash": secret_hash(key_id, secret),
            "rate_limit": rate_limit,
            "created_at": now,
            "expires_at": expires_at,
        }
        self.db.write("create an API key", lambda conn: conn.execute(insert(m.ApiKey).values(**row)))
        return self.get(key_id), f"{PREFIX}_{key_id}_{secret}"

    def get(self, key_id: str) -> ApiKey:
        """The key ``key_id``; KeyNotFound otherwise."""
        found = self.db.read("read an API key", lambda conn: _select(conn, key_id))
        if found is None:
            raise KeyNotFound(
                f"No API key with id {key_id!r}.", hint="`rag keys list --all` lists every key."
            )
        return _row(found)

    def list(self, *, include_inactive: bool = False, now: datetime | None = None) -> list[ApiKey]:
        """Keys, newest first; by default only those that still work."""
        k = m.table(m.ApiKey)
        stmt = select(k).order_by(k.c.created_at.desc(), k.c.id)
        rows = self.db.read("list API keys", lambda conn: list(conn.execute(stmt)))
        keys = [_row(r) for r in rows]
        return keys if include_inactive else [key for key in keys if key.state(now) == "active"]

    def authenticate(self, token: str, *, now: datetime | None = None) -> ApiKey:
        """The active key ``token`` names; InvalidKey otherwise. Read from the database on every call."""
        parsed = parse_token(token)
        if parsed is None:
            raise InvalidKey(
                "invalid",
                "The API key is malformed.",
                hint="Keys look like rag_<12 hex>_<secret>, as `rag keys create` printed them.",
            )
        key_id, secret = parsed
        found = self.db.read("check an API key", lambda conn: _select(conn, key_id))
        stored = found.secret_hash if found is not None else secret_hash("0" * 2 * ID_BYTES, "")
        if not hmac.compare_digest(stored, secret_hash(key_id, secret)) or found is None:
            raise InvalidKey("invalid", "The API key is not valid.", hint="Check it was copied whole.")
        key = _row(found)
        state = key.state(now)
        if state == "revoked":
            assert key.revoked_at is not None
            raise InvalidKey(
                "revoked",
                f"The API key {key.id} ({key.name}) was revoked on {key.revoked_at:%Y-%m-%d %H:%M} UTC.",
                hint="Ask an administrator for a new key (`rag keys create`).",
            )
        if state == "expired":
            raise InvalidKey(
                "expired",
                f"The API key {key.id} ({key.name}) expired on {key.expires_at:%Y-%m-%d %H:%M} UTC.",
                hint="Ask an administrator for a new key (`rag keys create`).",
            )
        return key

    def expire(self, key_id: str, at: datetime | None = None, *, now: datetime | None = None) -> ApiKey:
        """Set the key's expiry to ``at`` (default: now, which stops it at once). A revoked key stays revoked."""
        at = at or now or datetime.now(UTC)
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
        self._update("expire an API key", key_id, expires_at=at)
        return self.get(key_id)

    def revoke(self, key_id: str, *, now: datetime | None = None) -> ApiKey:
        """Stop the key for good (its row stays, so traces still name it)."""
        key = self.get(key_id)
        if key.revoked_at is None:
            self._update("revoke an API key", key_id, revoked_at=now or datetime.now(UTC))
        return self.get(key_id)

    def touch(self, key_id: str, when: datetime | None = None) -> None:
        """Record that the key was used (the API calls this at most once a minute per key)."""
        self._update("record an API key's use", key_id, last_used_at=when or datetime.now(UTC))

    def _update(self, action: str, key_id: str, **values: Any) -> None:
        if not _ID.match(key_id):
            raise KeyNotFound(
                f"No API key with id {key_id!r}.", hint="`rag keys list --all` lists every key."
            )

        def write(conn: Connection) -> int:
            k = m.ApiKey
            return int(conn.execute(update(k).where(k.id == key_id).values(**values)).rowcount)

        if not self.db.write(action, write):
            raise KeyNotFound(
                f"No API key with id {key_id!r}.", hint="`rag keys list --all` lists every key."
            )


def _select(conn: Connection, key_id: str) -> Any:
    if not _ID.match(key_id):
        return None
    k = m.table(m.ApiKey)
    return conn.execute(select(k).where(k.c.id == key_id)).first()


def expiry(days: float, now: datetime | None = None) -> datetime:
    """``days`` from now (UTC)."""
    return (now or datetime.now(UTC)) + timedelta(days=days)


__all__ = ["ApiKey", "ApiKeys", "InvalidKey", "InvalidKeySpec", "KeyNotFound", "expiry", "parse_token"]
