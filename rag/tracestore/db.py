"""Engines, migrations and the retrying database object every part of the trace store works through.

:class:`Database` runs one function per transaction: reads on a pooled connection, writes in a write
transaction rerun (a bounded number of times, with jittered backoff) when SQLite says "database is locked" or
PostgreSQL reports a deadlock or serialisation failure. It checks once that the tables exist at the revision
this code expects, and translates SQLAlchemy errors into :class:`rag.errors.StorageError`.

SQLite (the default, a file in ``data_dir``) runs in WAL mode with a 30 s busy timeout, ``synchronous=NORMAL``
and foreign keys on; writes open with ``BEGIN IMMEDIATE`` so two writers queue on the busy timeout instead of
failing on a lock upgrade. PostgreSQL gets a small pre-pinged pool.

Migrations are a one-shot step (``rag db upgrade``), never run by app processes. Two upgrades started at once
are safe: ``migrations/env.py`` holds :func:`migration_lock` (an advisory lock on PostgreSQL, a file lock on
SQLite) around every migration run, including a plain ``alembic upgrade head``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from rag.errors import ConfigurationError, RagError, StorageError
from rag.tracestore.errors import DatabaseNotInitialised, SchemaOutOfDate

if TYPE_CHECKING:
    from alembic.config import Config

    from rag.config import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_S = 30.0
WRITE_ATTEMPTS = 6  # bounded retry on "database is locked" / PostgreSQL deadlock or serialisation failure
# pg_advisory_lock key held around migrations: any fixed 64-bit number unlikely to clash ("ragtrace").
MIGRATION_LOCK_KEY = 0x7261677472616365
REPO_ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS_DIR = REPO_ROOT / "migrations"

# Execution option that makes the SQLite "begin" hook open the transaction with BEGIN IMMEDIATE.
_BEGIN_OPTION = "rag_sqlite_begin"


def resolve_url(target: Settings | str) -> str:
    """The SQLAlchemy URL for settings or a URL string, with the driver we ship spelled out."""
    url = target if isinstance(target, str) else target.sqlalchemy_url
    # psycopg 3 is the PostgreSQL driver we depend on; a bare postgresql:// would ask for psycopg2.
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def display_url(url: str) -> str:
    """The URL with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL; None for other backends and in-memory databases."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:") or parsed.query.get("mode") == "memory":
        return None
    return Path(database)


def make_engine(url: str, *, for_migrations: bool = False) -> Engine:
    """An engine with this project's connection settings.

    ``for_migrations``: no pool, writes only, and (on SQLite) foreign keys off, because batch migrations
    recreate tables and a DROP TABLE with foreign keys on would cascade into child rows.
    """
    url = resolve_url(url)
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
        if backend == "sqlite":
            path = sqlite_path(url)
            if path is not None and for_migrations:
                path.parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(
                url,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S},
                **({"poolclass": NullPool} if for_migrations else {}),
            )
            _configure_sqlite(engine, foreign_keys=not for_migrations)
            if for_migrations:
                engine = engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
            return engine
        if backend == "postgresql":
            pool: dict[str, Any] = (
                {"poolclass": NullPool}
                if for_migrations
                else {
                    "pool_size": 5,
                    "max_overflow": 10,
                    "pool_timeout": 30,
                    "pool_recycle": 1800,
                    "pool_pre_ping": True,
                }
            )
            return create_engine(
                url, connect_args={"connect_timeout": 10, "application_name": "rag-tracestore"}, **pool
            )
        return create_engine(url)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise ConfigurationError(
            f"Unusable database URL {display_url(url)}: {exc}",
            hint="Set RAG_DATABASE_URL to sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST/DB.",
        ) from exc


def _configure_sqlite(engine: Engine, *, foreign_keys: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module: the "begin" hook below emits BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front (and wait busy_timeout for it); a deferred transaction that
        # later upgrades to a writer fails at once with "database is locked" when another writer is active.
        mode = conn.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def write_engine(engine: Engine) -> Engine:
    """The same engine (and pool) with transactions that begin as writers."""
    return engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})


@contextlib.contextmanager
def migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection for one migration run, serialised against other runs across processes and hosts.

    PostgreSQL: a session-level ``pg_advisory_lock`` on the migration connection. SQLite: ``flock`` on
    ``<db>.migrate.lock``, taken before connecting: opening a new database switches it to WAL, which fails at
    once ("database is locked") while another process is migrating it. Committed before alembic starts its own
    transaction, so the lock spans the whole run.
    """
    path = sqlite_path(engine.url.render_as_string(hide_password=False))
    if engine.dialect.name == "sqlite" and path is not None:
        lock_path = path.with_name(path.name + ".migrate.lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a+b") as lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                with engine.connect() as connection:
                    yield connection
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
        return
    with engine.connect() as connection:
        if engine.dialect.name != "postgresql":
            yield connection
            return
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        connection.commit()
        try:
            yield connection
        finally:
            if connection.in_transaction():
                connection.rollback()
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()


def alembic_config(target: Settings | str) -> Config:
    """An alembic Config for this project's migrations, pointed at ``target``'s database."""
    from alembic.config import Config

    ini = REPO_ROOT / "alembic.ini"
    # stdout is passed at call time: alembic's default is bound when alembic is first imported, which may be
    # inside a CLI runner whose captured stream is closed by now.
    config = Config(str(ini), stdout=sys.stdout) if ini.exists() else Config(stdout=sys.stdout)
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # configparser interpolation: a literal % (URL-encoded passwords, options) must be doubled.
    config.set_main_option("sqlalchemy.url", resolve_url(target).replace("%", "%%"))
    # Our callers configure logging themselves; env.py leaves it alone when this is set.
    config.attributes["configure_logging"] = False
    return config


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    """The newest migration in ``migrations/``; None when the directory is not shipped with the code."""
    if not MIGRATIONS_DIR.is_dir():
        return None
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def _run_alembic(action: str, target: Settings | str, fn: Any) -> None:
    from alembic.util import CommandError

    url = resolve_url(target)
    if not MIGRATIONS_DIR.is_dir():
        raise StorageError(
            f"Cannot {action}: migrations not found at {MIGRATIONS_DIR}.",
            hint="Run `rag db ...` from a source checkout (pip install -e .).",
        )
    try:
        fn(alembic_config(url))
    except CommandError as exc:
        raise StorageError(f"Cannot {action} {display_url(url)}: {exc}") from exc
    except SQLAlchemyError as exc:
        raise StorageError(
            f"Cannot {action} {display_url(url)}: {describe_db_error(exc)}",
            hint="Check RAG_DATABASE_URL and that the database server is running.",
        ) from exc


def upgrade(target: Settings | str, revision: str = "head") -> str | None:
    """Migrate the database up to ``revision``; returns the revision it is at afterwards."""
    from alembic import command

    _run_alembic("upgrade", target, lambda cfg: command.upgrade(cfg, revision))
    return current_revision(target)


def downgrade(target: Settings | str, revision: str) -> str | None:
    """Migrate the database down to ``revision`` ("base" removes every table)."""
    from alembic import command

    _run_alembic("downgrade", target, lambda cfg: command.downgrade(cfg, revision))
    return current_revision(target)


def current_revision(target: Settings | str) -> str | None:
    """The revision the database is at; None when it was never migrated."""
    url = resolve_url(target)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return None
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url, for_migrations=True)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except SQLAlchemyError as exc:
        raise StorageError(
            f"Cannot read the schema revision of {display_url(url)}: {describe_db_error(exc)}",
            hint="Check RAG_DATABASE_URL and that the database server is running.",
        ) from exc
    finally:
        engine.dispose()


def describe_db_error(exc: BaseException) -> str:
    """The driver's one-line message, without SQLAlchemy's statement dump and background link."""
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def ensure_embedded_schema(target: Settings | str) -> bool:
    """On the embedded default (a SQLite file), create or migrate the trace database on first use; True when
    it ran a migration.

    The upgrade runs under :func:`migration_lock` (``migrations/env.py`` takes it), so processes that start
    at once queue and the later ones find nothing to do. PostgreSQL is left alone: there migrations stay the
    explicit one-shot ``rag db upgrade``. A database newer than this code is left alone too
    (``TraceStore.check_ready`` reports it).
    """
    url = resolve_url(target)
    if sqlite_path(url) is None or not MIGRATIONS_DIR.is_dir():
        return False
    current, head = current_revision(url), head_revision()
    if current == head:
        return False
    if current is not None:
        from alembic.script import ScriptDirectory

        script = ScriptDirectory(str(MIGRATIONS_DIR))
        if current not in {rev.revision for rev in script.walk_revisions()}:
            return False  # written by a newer rag: never downgrade implicitly
    upgrade(url)
    return True


class Database:
    """One trace database (SQLite or PostgreSQL): the engine, its write twin, and transactions run with
    errors translated and lock conflicts retried. Thread-safe; ``close()`` releases the pool."""

    def __init__(self, url: str, *, engine: Engine | None = None) -> None:
        self.url = resolve_url(url)
        self.engine = engine or make_engine(self.url)
        self._writer = write_engine(self.engine)
        self._schema_checked = False
        self._schema_lock = threading.Lock()

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Database({display_url(self.url)!r})"

    @contextlib.contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Translate SQLAlchemy errors into StorageErrors a user can act on."""
        try:
            yield
        except RagError:
            raise
        except SQLAlchemyError as exc:
            if _is_missing_table(exc):
                raise self._not_initialised() from exc
            raise StorageError(
                f"Could not {action} in {display_url(self.url)}: {describe_db_error(exc)}",
                hint="Check RAG_DATABASE_URL, that the database server is running, and `rag db current`.",
            ) from exc

    def _not_initialised(self) -> DatabaseNotInitialised:
        return DatabaseNotInitialised(
            f"Database not initialised: run `rag db upgrade` ({display_url(self.url)})."
        )

    def check_ready(self) -> None:
        """Raise a StorageError a user can act on unless the database exists at the expected revision."""
        with self.errors("open the trace database"):
            self._check_schema()

    def _check_schema(self) -> None:
        """Once per database object: the tables exist and are at the revision this code was written for."""
        if self._schema_checked:
            return
        with self._schema_lock:
            if self._schema_checked:
                return
            path = sqlite_path(self.url)
            if path is not None and not path.exists():  # do not create an empty file as a side effect
                raise self._not_initialised()
            with self.engine.connect() as conn:
                version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            expected = head_revision()
            if version is None:
                raise self._not_initialised()
            if expected is not None and version != expected:
                raise SchemaOutOfDate(
                    f"The trace database is at schema revision {version}, this version of rag needs {expected}.",
                    hint="Run `rag db upgrade` (or upgrade rag, if the database is newer).",
                )
            self._schema_checked = True

    def read(self, action: str, fn: Callable[[Connection], T]) -> T:
        """``fn`` on one connection; ``action`` names it in error messages ("list traces")."""
        with self.errors(action):
            self._check_schema()
            with self.engine.connect() as conn:
                return fn(conn)

    def write(
        self, action: str, fn: Callable[[Connection], T], *, retry_on: tuple[type[Exception], ...] = ()
    ) -> T:
        """Run ``fn`` in one write transaction, rerunning it when the database says it may (or on
        ``retry_on``: e.g. an IntegrityError from a concurrent insert of the same row)."""
        with self.errors(action):
            self._check_schema()
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                try:
                    with self._writer.begin() as conn:
                        return fn(conn)
                except DBAPIError as exc:
                    if attempt == WRITE_ATTEMPTS or not (_is_retryable(exc) or isinstance(exc, retry_on)):
                        raise
                    delay = min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0)
                    log.warning("%s: %s; retrying in %.2fs", action, describe_db_error(exc), delay)
                    time.sleep(delay)
            raise AssertionError("unreachable")


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(getattr(exc, "orig", None), "sqlstate", None)


def _is_missing_table(exc: BaseException) -> bool:
    return _sqlstate(exc) == "42P01" or "no such table" in str(getattr(exc, "orig", exc)).lower()


def _is_retryable(exc: BaseException) -> bool:
    """SQLite lock timeouts and PostgreSQL deadlocks / serialisation failures: the transaction can rerun."""
    if _sqlstate(exc) in ("40001", "40P01"):
        return True
    message = str(getattr(exc, "orig", exc)).lower()
    return (
        "database is locked" in message
        or "database is busy" in message
        or "database table is locked" in message
    )


def iso(value: datetime | None) -> str | None:
    """A timestamp column's value as the ISO string the store's rows carry."""
    return value.isoformat() if value is not None else None


def as_datetime(value: Any) -> datetime | None:
    """An aggregate over a timestamp column (``max(created_at)``) as an aware UTC datetime: SQLite gives the
    raw stored text, since the column's type decorator does not apply to the aggregate."""
    if value is None or isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)
