"""What every ``rag`` sub-command shares: user errors become a message and an exit status, never a traceback."""

from __future__ import annotations

import argparse
import sys
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


def write_or_check(
    argv: list[str] | None, module: str, path: Path, text: Callable[[], str], stale: str
) -> int:
    """``python -m MODULE --write`` (re)generates the committed file ``path`` from ``text()``; ``--check`` exits 1,
    saying why (missing, or ``stale``), when the file is not what ``text()`` gives. ``--path`` names another file."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=f"Write or check {path.name}.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="(re)generate the file")
    action.add_argument("--check", action="store_true", help="exit 1 when the committed file is stale")
    parser.add_argument("--path", type=Path, default=path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    expected = text()
    if args.write:
        args.path.parent.mkdir(parents=True, exist_ok=True)
        args.path.write_text(expected, encoding="utf-8")
        print(f"wrote {args.path}")
        return 0
    current = args.path.read_text(encoding="utf-8") if args.path.exists() else None
    if current != expected:
        state = "is missing" if current is None else stale
        print(f"{args.path} {state}: run `python -m {module} --write`", file=sys.stderr)
        return 1
    print(f"{args.path} is up to date")
    return 0
