"""API keys in the trace store (rag/tracestore/keys.py) and ``rag keys``, on SQLite and PostgreSQL: only a hash is
stored, a key is refused as soon as it expires or is revoked, and a key is never deleted."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from rag.tracestore import TraceStore
from rag.tracestore.keys import InvalidKey, InvalidKeySpec, KeyNotFound, parse_token
from rag.tracestore.keys_cli import keys_app
from tests.tracestore.factories import make_trace

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _reason(store: TraceStore, token: str, now: datetime = NOW) -> str:
    with pytest.raises(InvalidKey) as caught:
        store.keys.authenticate(token, now=now)
    return caught.value.reason


def test_a_key_authenticates_as_its_user_and_groups_and_only_its_hash_is_stored(store: TraceStore) -> None:
    key, token = store.keys.create(
        "alice", ["staff", " hr ", ""], expires_at=NOW + timedelta(days=30), name="laptop", now=NOW
    )
    assert parse_token(token) == (key.id, token.split("_", 2)[2])
    found = store.keys.authenticate(token, now=NOW)
    assert (found.id, found.user, found.groups, found.name, found.service) == (
        key.id,
        "alice",
        frozenset({"staff", "hr"}),
        "laptop",
        False,
    )
    secret = token.split("_", 2)[2]
    with store.db.engine.connect() as conn:
        rows = [tuple(map(str, r)) for r in conn.execute(text("SELECT * FROM api_keys"))]
    assert rows and not any(secret in cell for row in rows for cell in row)


def test_wrong_malformed_and_unknown_keys_are_refused_alike(store: TraceStore) -> None:
    key, token = store.keys.create("alice", ["staff"], expires_at=NOW + timedelta(days=1), now=NOW)
    other = f"rag_{'0' * 12}_{token.split('_', 2)[2]}"
    for bad in (token[:-3] + "xyz", other, "sk-not-ours", "", f"rag_{key.id}_"):
        assert _reason(store, bad) == "invalid"


def test_expired_and_revoked_keys_are_refused_on_the_next_request(store: TraceStore) -> None:
    key, token = store.keys.create("bot", ["staff"], expires_at=NOW + timedelta(hours=1), now=NOW)
    assert _reason(store, token, NOW + timedelta(hours=2)) == "expired"
    store.keys.expire(key.id, NOW + timedelta(days=5))  # extended again
    assert store.keys.authenticate(token, now=NOW + timedelta(hours=2)).id == key.id
    store.keys.expire(key.id, now=NOW)  # expire now
    assert _reason(store, token) == "expired"
    store.keys.expire(key.id, NOW + timedelta(days=5))
    revoked = store.keys.revoke(key.id, now=NOW)
    assert revoked.state(NOW) == "revoked"
    assert _reason(store, token) == "revoked"
    store.keys.expire(key.id, NOW + timedelta(days=50))  # a later expiry does not bring it back
    assert _reason(store, token) == "revoked"
    assert [k.id for k in store.keys.list(include_inactive=True, now=NOW)] == [key.id]  # never deleted
    assert store.keys.list(now=NOW) == []


def test_keys_are_listed_newest_first_with_their_kind_and_limit(store: TraceStore) -> None:
    first, _ = store.keys.create("alice", ["staff"], expires_at=NOW + timedelta(days=1), now=NOW)
    second, _ = store.keys.create(
        "slack-bot",
        ["staff", "hr"],
        expires_at=NOW + timedelta(days=1),
        service=True,
        rate_limit=600,
        now=NOW + timedelta(minutes=1),
    )
    listed = store.keys.list(now=NOW + timedelta(minutes=2))
    assert [k.id for k in listed] == [second.id, first.id]
    assert listed[0].service and listed[0].rate_limit == 600
    assert listed[0].to_json(NOW)["state"] == "active"


def test_a_key_must_be_usable_when_it_is_made(store: TraceStore) -> None:
    with pytest.raises(InvalidKeySpec):
        store.keys.create("alice", [], expires_at=NOW - timedelta(seconds=1), now=NOW)
    with pytest.raises(InvalidKeySpec):
        store.keys.create("  ", [], expires_at=NOW + timedelta(days=1), now=NOW)
    with pytest.raises(InvalidKeySpec):
        store.keys.create("alice", [], expires_at=NOW + timedelta(days=1), rate_limit=0, now=NOW)
    with pytest.raises(KeyNotFound):
        store.keys.revoke("0123456789ab")
    with pytest.raises(KeyNotFound):
        store.keys.expire("not-an-id")


def test_answers_are_counted_by_channel(store: TraceStore) -> None:
    for seed, channel in enumerate(["api", "api", "ui", None]):
        trace = make_trace(seed=seed, abstained=seed == 0)
        store.traces.save(trace if channel is None else {**trace, "channel": channel})
    stats = {c["channel"]: c for c in store.analytics.channel_stats()}
    assert {k: v["questions"] for k, v in stats.items()} == {"api": 2, "ui": 1, "unrecorded": 1}
    assert stats["api"]["abstained"] == 1
    gaps = store.analytics.gap_questions()
    assert [g["channel"] for g in gaps] == ["api"]


def test_rag_keys_commands(tmp_path: Path) -> None:
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(keys_app, [*args, "--data-dir", str(tmp_path)], env={"COLUMNS": "160"})
        assert result.exit_code == 0, result.output
        return result.stdout

    token = run(
        "create", "--user", "slack-bot", "--groups", "staff,hr", "--service", "--expires-in", "7d"
    ).strip()
    assert (
        token.startswith("rag_") and "\n" not in token
    )  # the key alone on stdout, for KEY=$(rag keys create ...)
    created = json.loads(run("create", "--user", "alice", "--groups", "staff", "--name", "laptop", "--json"))
    assert created["key"].startswith(f"rag_{created['id']}_") and created["state"] == "active"
    listing = json.loads(run("list", "--json"))
    assert {k["name"] for k in listing} == {"slack-bot", "laptop"}
    assert all("key" not in k and "secret" not in json.dumps(k) for k in listing)
    assert "laptop" in run("list")
    assert json.loads(run("expire", created["id"], "--json"))["state"] == "expired"
    assert "revoked" in run("revoke", created["id"])
    assert "laptop" not in run("list") and "laptop" in run("list", "--all")
    bad = runner.invoke(keys_app, ["revoke", "0123456789ab", "--data-dir", str(tmp_path)])
    assert bad.exit_code == 1 and "No API key with id" in bad.output
    bad = runner.invoke(
        keys_app, ["create", "--user", "x", "--expires-in", "soon", "--data-dir", str(tmp_path)]
    )
    assert bad.exit_code == 1 and "Not a duration" in bad.output
