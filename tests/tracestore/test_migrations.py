"""Migrations: round trip, two upgrades at once, no drift between models and migrations."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from sqlalchemy import Connection, inspect, text

from rag.tracestore import TraceStore, current_revision, downgrade, upgrade
from rag.tracestore.db import alembic_config, head_revision, make_engine
from rag.tracestore.models import Base
from tests.tracestore.factories import make_trace, upgrade_in_child

MODEL_TABLES = set(Base.metadata.tables)


@contextmanager
def _connection(url: str) -> Iterator[Connection]:
    """One connection in a transaction, its engine disposed of afterwards."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    with _connection(url) as conn:
        return set(inspect(conn).get_table_names())


def _insert_answer(url: str, trace_id: str, **flags: bool) -> None:
    """An answers row with the columns of an earlier revision, written directly (the store checks the head)."""
    with _connection(url) as conn:
        conn.execute(
            text(
                f'INSERT INTO answers (trace_id, created_at, "user", question, {", ".join(flags)}) '
                f"VALUES (:t, :c, 'alice', 'q?', {', '.join(':' + name for name in flags)})"
            ),
            {"t": trace_id, "c": "2025-03-01 09:00:00", **flags},
        )


def test_head_is_the_api_keys_revision() -> None:
    assert head_revision() == "0003"


def test_feedback_migration_keeps_the_traces_of_revision_0001(store_url: str) -> None:
    """0001 -> 0002 adds only the feedback table; 0002 -> 0001 drops only it; traces survive both ways."""
    upgrade(store_url, "0001")
    assert _tables(store_url) == MODEL_TABLES - {"feedback", "api_keys"} | {"alembic_version"}
    trace = make_trace(seed=3)
    _insert_answer(store_url, trace["trace_id"], has_failed_citation=False)  # as a 0001-era store wrote it
    assert upgrade(store_url) == head_revision()
    with TraceStore(store_url) as store:
        assert store.traces.count() == 1
        store.feedback.set(trace["trace_id"], "alice", "down", reason="outdated")
        assert store.feedback.get(trace["trace_id"])["reason"] == "outdated"
    assert downgrade(store_url, "0001") == "0001"
    assert "feedback" not in _tables(store_url)
    with _connection(store_url) as conn:
        assert conn.execute(text("SELECT count(*) FROM answers")).scalar() == 1


def test_api_keys_migration_keeps_answers_and_adds_their_channel(store_url: str) -> None:
    """0002 -> 0003 adds the api_keys table and answers.channel (NULL for earlier answers, counted as
    unrecorded); 0003 -> 0002 drops both and keeps every answer and its feedback."""
    upgrade(store_url, "0002")
    assert "api_keys" not in _tables(store_url)
    old = make_trace(seed=5)
    _insert_answer(store_url, old["trace_id"], abstained=True, has_failed_citation=False)  # as 0002 wrote it
    assert upgrade(store_url) == "0003"
    with TraceStore(store_url) as store:
        assert store.analytics.channel_stats()[0]["channel"] == "unrecorded"
        new = {**make_trace(seed=6), "channel": "api"}
        store.traces.save(new)
        assert store.traces.get(new["trace_id"]) == new
        assert {c["channel"]: c["questions"] for c in store.analytics.channel_stats()} == {
            "unrecorded": 1,
            "api": 1,
        }
        key, token = store.keys.create("bot", ["staff"], expires_at=datetime.now(UTC) + timedelta(days=1))
        assert store.keys.authenticate(token).id == key.id
        store.feedback.set(old["trace_id"], "alice", "down", reason="outdated")
    assert downgrade(store_url, "0002") == "0002"
    assert "api_keys" not in _tables(store_url)
    with _connection(store_url) as conn:
        assert conn.execute(text("SELECT count(*) FROM answers")).scalar() == 2
        assert conn.execute(text("SELECT count(*) FROM feedback")).scalar() == 1
        columns = {c["name"] for c in inspect(conn).get_columns("answers")}
    assert "channel" not in columns


def test_upgrade_downgrade_upgrade_round_trip(store_url: str) -> None:
    assert current_revision(store_url) is None

    assert upgrade(store_url) == head_revision()
    assert _tables(store_url) == MODEL_TABLES | {"alembic_version"}
    with TraceStore(store_url) as store:
        store.traces.save(make_trace())
        assert store.traces.count() == 1

    assert downgrade(store_url, "base") is None
    assert _tables(store_url) == {"alembic_version"}

    assert upgrade(store_url) == head_revision()
    assert _tables(store_url) == MODEL_TABLES | {"alembic_version"}
    with TraceStore(store_url) as store:
        assert store.traces.list() == []
        trace = make_trace(seed=1)
        store.traces.save(trace)
        assert store.traces.get(trace["trace_id"]) == trace


def test_upgrade_twice_is_a_no_op(migrated_url: str) -> None:
    assert upgrade(migrated_url) == head_revision()
    assert _tables(migrated_url) == MODEL_TABLES | {"alembic_version"}


def test_two_upgrades_started_at_once_both_succeed(store_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = [ctx.Process(target=upgrade_in_child, args=(store_url, barrier)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0]

    assert current_revision(store_url) == head_revision()
    assert _tables(store_url) == MODEL_TABLES | {"alembic_version"}
    engine = make_engine(store_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [
                head_revision()
            ]
    finally:
        engine.dispose()


def test_models_and_migrations_do_not_drift(migrated_url: str) -> None:
    # Raises AutogenerateDiffsDetected when the models' metadata differs from what the migrations built.
    command.check(alembic_config(migrated_url))


def test_sqlite_connection_settings(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            pragma = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
    finally:
        engine.dispose()
    assert pragma == {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1, "busy_timeout": 30000}


@pytest.mark.parametrize("url", ["postgresql://u:p@h/db", "postgres://u:p@h/db"])
def test_bare_postgres_urls_use_psycopg(url: str) -> None:
    from rag.tracestore.db import resolve_url

    assert resolve_url(url) == "postgresql+psycopg://u:p@h/db"
