"""What every ``rag`` sub-command shares: user errors become a message and an exit status, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from rag.errors import RagError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data directory (index, traces). Env: RAG_DATA_DIR.", show_default=False),
]
JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print one JSON object (a stable contract for scripts).")
]


def or_exit(call: Callable[[], T]) -> T:
    """``call()``, a RagError it raises printed as a message the user can act on, with exit status 1."""
    try:
        return call()
    except RagError as exc:
        typer.echo(f"Error: {exc.user_message()}", err=True)
        raise typer.Exit(1) from None


def user_errors(func: F) -> F:
    """Print RagErrors as a message the user can act on, with exit status 1 (130 on Ctrl-C)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return or_exit(lambda: func(*args, **kwargs))
        except KeyboardInterrupt:
            typer.echo("Interrupted.", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]
