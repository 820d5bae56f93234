"""Alembic environment for the trace store.

The database URL comes from, in order: ``-x url=...`` on the alembic command line, the ``sqlalchemy.url`` main
option (set by ``rag.tracestore.db.alembic_config``; alembic.ini leaves it unset), else
``rag.config.load_settings().sqlalchemy_url`` -- so ``alembic`` run from the repository root and ``rag db``
always agree on the database.

Every online run holds ``migration_lock`` (a PostgreSQL advisory lock, or a file lock next to the SQLite
database), so two upgrades started at once run one after the other; the second finds nothing to do.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from rag.tracestore.db import make_engine, migration_lock, resolve_url
from rag.tracestore.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        from rag.config import load_settings

        url = load_settings().sqlalchemy_url
    return resolve_url(url)


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(database_url(), for_migrations=True)
    try:
        with migration_lock(engine) as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=True,
                compare_type=True,
                # SQLite DDL is transactional once the driver stops managing transactions (db.make_engine
                # does that): run the whole upgrade as one BEGIN IMMEDIATE transaction there too.
                transactional_ddl=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
