"""The ``rag`` command. It is the composition root: the one place that wires ``ingest/`` and ``ui/`` to ``rag/``
(their imports happen inside the commands, so ``rag`` the library never depends on them)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from rag.config import Settings, load_settings
from rag.errors import RagError

app = typer.Typer(help="Policy support bot: ingest documents, ask questions, inspect traces.", no_args_is_help=True)

DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Data directory (index, traces). Env: RAG_DATA_DIR.", show_default=False)
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object (a stable contract for scripts).")]

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Print RagErrors as a message the user can act on, with exit status 1, never a traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RagError as exc:
            typer.echo(f"Error: {exc.user_message()}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            typer.echo("Interrupted.", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def settings_for(data_dir: Path | None, **overrides: Any) -> Settings:
    return load_settings(data_dir=data_dir, **overrides)


@app.command()
@user_errors
def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files, folders (recursive) or globs: .pdf .md .txt .jsonl")],
    data_dir: DataDir = None,
    prune: Annotated[bool, typer.Option("--prune", help="Remove documents whose files are gone.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Ingest policy documents into the hybrid index (safe to re-run; unchanged files cost nothing)."""
    from ingest.cli import run_ingest

    code = run_ingest(paths, settings_for(data_dir), prune=prune, as_json=as_json)
    raise typer.Exit(code)


def _register_optional() -> None:
    """Sub-command groups that live in their own modules."""
    from rag.tracestore.cli import db_app, traces_app

    app.add_typer(db_app, name="db", help="Trace database migrations (one-shot step).")
    app.add_typer(traces_app, name="traces", help="List, show and export stored answer traces.")


def main() -> None:
    try:
        _register_optional()
    except ImportError as exc:  # pragma: no cover - partial installs
        print(f"warning: some commands are unavailable: {exc}", file=sys.stderr)
    app()


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, default=str))
