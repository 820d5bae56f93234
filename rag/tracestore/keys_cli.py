"""``rag keys ...``: create, list, expire and revoke the API's keys (docs/api.md).

Mounted by ``supportbot/cli.py`` (``app.add_typer(keys_app, name="keys")``). The embedded SQLite database is
created and migrated on first use, as ``rag ask`` does; PostgreSQL needs ``rag db upgrade`` first.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rag.cli_support import DataDir, JsonFlag, user_errors
from rag.config import load_settings
from rag.errors import ConfigurationError
from rag.tracestore.db import ensure_embedded_schema
from rag.tracestore.keys import ApiKey
from rag.tracestore.store import TraceStore

keys_app = typer.Typer(
    help="API keys for the OpenAI-compatible API (docs/api.md): each bound to a user, their groups and an expiry.",
    no_args_is_help=True,
)
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hdw])\s*$")
_UNITS = {"h": 1 / 24, "d": 1.0, "w": 7.0}


def _store(data_dir: Path | None) -> TraceStore:
    """The trace store, ready to write (the embedded SQLite database migrates itself first, as for `rag ask`)."""
    settings = load_settings(data_dir=data_dir)
    ensure_embedded_schema(settings.sqlalchemy_url)
    store = TraceStore.from_settings(settings)
    store.check_ready()
    return store


def parse_span(value: str) -> timedelta:
    """'90d', '12h', '2w' as a timedelta."""
    match = _SPAN.match(value)
    if match is None or float(match.group(1)) <= 0:
        raise ConfigurationError(f"Not a duration: {value!r}.", hint="Use e.g. 90d, 12h or 2w.")
    return timedelta(days=float(match.group(1)) * _UNITS[match.group(2)])


def parse_moment(value: str) -> datetime:
    """An ISO date (the start of that day, UTC) or datetime (UTC when it names no offset)."""
    text = value.strip()
    try:
        moment = (
            datetime.combine(date.fromisoformat(text), datetime.min.time())
            if len(text) == 10
            else datetime.fromisoformat(text)
        )
    except ValueError:
        raise ConfigurationError(
            f"Not an ISO date or datetime: {value!r}.", hint="Use 2027-01-31 or 2027-01-31T18:00."
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _when(expires: str | None, expires_in: str | None, default: timedelta | None) -> datetime | None:
    if expires and expires_in:
        raise ConfigurationError("Give one expiry: a moment or a duration, not both.")
    if expires:
        return parse_moment(expires)
    if expires_in:
        return datetime.now(UTC) + parse_span(expires_in)
    return None if default is None else datetime.now(UTC) + default


def _describe(key: ApiKey) -> str:
    groups = ", ".join(sorted(key.groups)) or "none"
    kind = "a trusted service key (asks on behalf of named users)" if key.service else "a personal key"
    return (
        f"API key {key.id} ({key.name}): {kind} for user {key.user} (groups: {groups}), "
        f"expires {key.expires_at:%Y-%m-%d %H:%M} UTC, {key.state()}."
    )


@keys_app.command("create")
@user_errors
def create(
    user: Annotated[
        str, typer.Option("--user", help="The user the key asks as (a service key: its own name).")
    ],
    groups: Annotated[
        str,
        typer.Option(
            "--groups",
            help="Comma-separated groups. A service key may ask for users with any of these groups, no others.",
        ),
    ] = "",
    name: Annotated[
        str | None, typer.Option("--name", help="A label for listings (default: the user).")
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option("--expires-in", help="Valid for e.g. 90d, 12h, 2w (default: RAG_API_KEY_DAYS)."),
    ] = None,
    expires: Annotated[
        str | None, typer.Option("--expires", help="Valid until this ISO date or datetime.")
    ] = None,
    service: Annotated[
        bool,
        typer.Option(
            "--service",
            help="A trusted service key (a chat bot): it must name the user and groups it asks for.",
        ),
    ] = False,
    rate_limit: Annotated[
        int | None, typer.Option("--rate-limit", help="Requests per minute (default: RAG_API_RATE_LIMIT).")
    ] = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a key. Its secret is printed once, on stdout (the description goes to stderr)."""
    settings = load_settings(data_dir=data_dir)
    until = _when(expires, expires_in, timedelta(days=settings.api_key_days))
    assert until is not None
    with _store(data_dir) as store:
        key, token = store.keys.create(
            user,
            groups.split(","),
            expires_at=until,
            name=name,
            service=service,
            rate_limit=rate_limit,
        )
    if as_json:
        typer.echo(json.dumps({"key": token, **key.to_json()}))
        return
    typer.echo("Created " + _describe(key), err=True)
    typer.echo(
        "The key is shown only now: keep it where the client reads it (e.g. OPENAI_API_KEY).", err=True
    )
    typer.echo(token)


@keys_app.command("list")
@user_errors
def list_keys(
    all_keys: Annotated[bool, typer.Option("--all", help="Also expired and revoked keys.")] = False,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """List keys (never their secrets): id, name, user, groups, kind, expiry, last use."""
    with _store(data_dir) as store:
        keys = store.keys.list(include_inactive=all_keys)
    if as_json:
        typer.echo(json.dumps([k.to_json() for k in keys]))
        return
    if not keys:
        typer.echo("No keys." if all_keys else "No active keys (`rag keys list --all` shows every key).")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("id", "name", "user", "groups", "kind", "state", "expires (UTC)", "last used (UTC)"):
        # ids and dates are copied and compared: never wrapped; the free text is cut with an ellipsis
        free = column in ("name", "user", "groups")
        table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=40 if free else None)
    for k in keys:
        table.add_row(
            k.id,
            escape(k.name),
            escape(k.user),
            escape(", ".join(sorted(k.groups))),
            "service" if k.service else "personal",
            k.state(),
            f"{k.expires_at:%Y-%m-%d %H:%M}",
            f"{k.last_used_at:%Y-%m-%d %H:%M}" if k.last_used_at else "never",
        )
    # a pipe or a narrow terminal still gets whole ids and dates
    Console(width=max(Console().width, 130)).print(table)


@keys_app.command("expire")
@user_errors
def expire(
    key_id: Annotated[str, typer.Argument(help="The key's id (rag keys list).")],
    at: Annotated[str | None, typer.Option("--at", help="Expire at this ISO date or datetime.")] = None,
    expires_in: Annotated[str | None, typer.Option("--in", help="Expire after e.g. 7d, 12h.")] = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Set a key's expiry: now by default (it stops working at once), or later, or later again."""
    when = _when(at, expires_in, None)
    with _store(data_dir) as store:
        key = store.keys.expire(key_id, when)
    typer.echo(json.dumps(key.to_json()) if as_json else _describe(key))


@keys_app.command("revoke")
@user_errors
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (rag keys list).")],
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Revoke a key for good: its next request is refused. Traces keep naming it."""
    with _store(data_dir) as store:
        key = store.keys.revoke(key_id)
    typer.echo(json.dumps(key.to_json()) if as_json else _describe(key))
