"""Fixtures for the trace store suite, which runs against SQLite and PostgreSQL alike.

PostgreSQL: set RAG_TEST_POSTGRES_URL (``export RAG_TEST_POSTGRES_URL="$(scripts/postgres.sh)"``). Unset, the
postgres half of the suite skips -- or fails, when RAG_REQUIRE_POSTGRES=1 (CI). Each test gets its own
schema (via the connection's search_path), dropped afterwards, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from rag.tracestore import TraceStore
from rag.tracestore.db import upgrade

POSTGRES_URL_ENV = "RAG_TEST_POSTGRES_URL"


def _postgres_base_url() -> str:
    url = os.environ.get(POSTGRES_URL_ENV)
    if url:
        return url
    message = (
        f"{POSTGRES_URL_ENV} is not set: start a server with "
        f'`export {POSTGRES_URL_ENV}="$(scripts/postgres.sh)"` to run the PostgreSQL half of this suite'
    )
    if os.environ.get("RAG_REQUIRE_POSTGRES") == "1":
        pytest.fail(message + " (RAG_REQUIRE_POSTGRES=1)", pytrace=False)
    pytest.skip(message)


def url_with_schema(url: str, schema: str) -> str:
    """The URL with every connection's search_path set to ``schema``."""
    parsed = make_url(url)
    return parsed.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False
    )


@pytest.fixture
def postgres_schema_url() -> Iterator[str]:
    base = _postgres_base_url()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        yield url_with_schema(base, schema)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An empty database (no tables): a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'traces.sqlite'}"
    return request.getfixturevalue("postgres_schema_url")


@pytest.fixture
def migrated_url(store_url: str) -> str:
    upgrade(store_url)
    return store_url


@pytest.fixture
def store(migrated_url: str) -> Iterator[TraceStore]:
    with TraceStore(migrated_url) as trace_store:
        yield trace_store
