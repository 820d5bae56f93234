"""The ``rag`` command (``python -m supportbot``). This package is the composition root: the one place that wires
``ingest/``, ``ui/`` and ``evaluation/`` to ``rag/``; ``rag`` the library imports none of them (.importlinter).

The command groups with heavy imports (evaluation, the trace store, the LLM server, the UI) are mounted only when
the command line names them, so a no-op ``rag ingest`` loads none of their libraries."""

from __future__ import annotations

import json
import sys
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import typer

from ingest.cli import ingest_command
from rag.cli_support import DataDir, JsonFlag, user_errors
from rag.config import Settings, load_settings
from rag.errors import ConfigurationError, RagError
from rag.types import Principal

app = typer.Typer(
    help="Policy support bot: ingest documents, ask questions, inspect traces.", no_args_is_help=True
)

app.command("ingest")(ingest_command)


def settings_for(data_dir: Path | None, **overrides: Any) -> Settings:
    return load_settings(data_dir=data_dir, **overrides)


def _parse_groups(groups: str) -> frozenset[str]:
    return frozenset(g.strip() for g in groups.split(",") if g.strip())


def _parse_date(value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ConfigurationError(f"Invalid date {value!r}.", hint="Use YYYY-MM-DD.") from None


def open_trace_store(settings: Settings, *, required: bool = False) -> Any | None:
    """The trace store, or None (with a warning) when the database has not been initialised."""
    from rag.factory import open_trace_store as open_store

    try:
        return open_store(settings)  # the embedded SQLite store migrates itself on first use
    except RagError as exc:
        if required:
            raise
        typer.echo(f"warning: traces are not being stored: {exc.user_message()}", err=True)
        return None


@app.command()
@user_errors
def ask(
    question: Annotated[str | None, typer.Argument(help="The question (omit with --batch).")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Who is asking (required).")] = None,
    groups: Annotated[str, typer.Option("--groups", help="Comma-separated groups the user belongs to.")] = "",
    as_of: Annotated[str | None, typer.Option("--as-of", help="Answer as of this date (YYYY-MM-DD).")] = None,
    tags: Annotated[str, typer.Option("--tags", help="Only documents with these product/version tags.")] = "",
    batch: Annotated[
        Path | None, typer.Option("--batch", help="JSONL of {id, question, user, groups}.")
    ] = None,
    packing: Annotated[
        str | None, typer.Option("--packing", help="edges|best_first|best_last|document_order|bundle_edges")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", help="Evidence budget: at most K passages.")] = None,
    no_trace: Annotated[bool, typer.Option("--no-trace", help="Do not store the trace.")] = False,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Answer a question from the policies USER may read, with citations and a stored trace."""
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions, Question

    settings = settings_for(data_dir, packing=packing, evidence_k=k)
    if batch is None and (question is None or user is None):
        raise ConfigurationError(
            "Give a QUESTION and --user NAME (or --batch FILE.jsonl).", hint="rag ask --help"
        )
    store = None if no_trace else open_trace_store(settings)
    pipeline = build_pipeline(settings, trace_store=store)
    options = PipelineOptions()
    if batch is not None:
        for line_no, line in enumerate(batch.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                groups_in = item.get("groups") or []
                q = Question(
                    text=item["question"],
                    principal=Principal(
                        item["user"],
                        frozenset(groups_in if isinstance(groups_in, list) else _parse_groups(groups_in)),
                    ),
                    as_of=_parse_date(item.get("as_of") or as_of),
                    tags=frozenset(item.get("tags") or ()) or _parse_groups(tags),
                    channel="cli",
                )
                out = {"id": item.get("id"), **pipeline.ask(q, options).to_json()}
            except (KeyError, json.JSONDecodeError) as exc:
                out = {"id": None, "error": f"line {line_no}: bad batch record ({exc})"}
            except RagError as exc:
                out = {"id": item.get("id"), "error": exc.user_message()}
            print_json(out)
        return
    assert question is not None and user is not None
    q = Question(
        question,
        Principal(user, _parse_groups(groups)),
        _parse_date(as_of),
        _parse_groups(tags),
        channel="cli",
    )
    result = pipeline.ask(q, options)
    if as_json:
        print_json(result.to_json())
    else:
        from rag.traces.render import print_result

        print_result(result.to_json())


BENCH_MODULES = {  # speed in benchmarks/, quality (retrieval, rerankers, the peer) in evaluation/
    "ingest": "benchmarks.ingest",
    "query": "benchmarks.query",
    "retrieval": "evaluation.retrieval",
    "scaling": "benchmarks.scaling",
    "rerankers": "evaluation.rerankers",
    "lexical_parity": "evaluation.lexical_parity",
    "lexical_cost": "benchmarks.lexical_cost",
    "trace_load": "benchmarks.trace_load",
    "api": "benchmarks.api",
    "ocr": "benchmarks.ocr",
    "peer": "evaluation.peer",
}
BENCHMARKS = " | ".join(BENCH_MODULES)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False
)
def bench(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help=BENCHMARKS)] = None,
) -> None:
    """Run a benchmark: speed from benchmarks/, quality from evaluation/ (extra options are passed through: `rag bench NAME --help` shows its own)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    if name is None or name in ("-h", "--help"):
        typer.echo(
            f"Usage: rag bench NAME [OPTIONS]\n\nBenchmarks: {BENCHMARKS}\n"
            "Options are the benchmark's own: `rag bench NAME --help`. `peer` runs from .venv-peer "
            "(scripts/peer_venv.sh). Results and commands: docs/benchmarks.md."
        )
        raise typer.Exit(0 if name else 2)
    if name not in BENCH_MODULES:
        typer.echo(f"Error: no benchmark {name!r} (benchmarks: {BENCHMARKS}).", err=True)
        raise typer.Exit(2)
    raise typer.Exit(subprocess.call([sys.executable, "-m", BENCH_MODULES[name], *ctx.args], cwd=root))


def _register_optional(command: str | None = None) -> None:
    """Sub-command groups that live in their own modules; with ``command``, only the group it names.

    Importing them all costs seconds (evaluation's scipy and matplotlib, the trace store's SQLAlchemy), which a
    no-op ``rag ingest`` must not pay; ``rag --help`` and unknown commands still see every group.
    """

    def wanted(*names: str) -> bool:
        return command is None or command in names

    if wanted("db", "traces"):
        from rag.tracestore.cli import db_app, traces_app

        app.add_typer(db_app, name="db", help="Trace database migrations (one-shot step).")
        app.add_typer(traces_app, name="traces", help="List, show and export stored answer traces.")
    if wanted("keys"):
        from rag.tracestore.keys_cli import keys_app

        app.add_typer(keys_app, name="keys", help="API keys: create, list, expire, revoke (docs/api.md).")
    if wanted("eval"):
        from evaluation.cli import eval_app

        app.add_typer(
            eval_app, name="eval", help="Position-sensitivity sweeps and answer-quality evaluation."
        )
    if wanted("llm"):
        from rag.llm.cli import llm_app

        app.add_typer(
            llm_app, name="llm", help="Serve the packaged local LLM behind an OpenAI-compatible API."
        )
    if wanted("ui"):
        try:
            from ui.launch import ui_command
        except ImportError:  # streamlit missing: the rest of the CLI still works
            return
        app.command("ui")(ui_command)
    if wanted("serve"):
        try:
            from ui.api.serve import serve_command
        except ImportError:  # starlette or uvicorn missing: the rest of the CLI still works
            return
        app.command("serve")(serve_command)


def _invoked_command(argv: list[str]) -> str | None:
    """The sub-command named on the command line when it is one of this module's own or a known group."""
    first = next((a for a in argv if not a.startswith("-")), None)
    own = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    if first in own:
        return first
    return first if first in ("db", "traces", "keys", "eval", "llm", "ui", "serve") else None


def main() -> None:
    command = _invoked_command(sys.argv[1:])
    try:
        _register_optional(command)
    except ImportError as exc:  # pragma: no cover - partial installs
        print(f"warning: some commands are unavailable: {exc}", file=sys.stderr)
    app()


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, default=str))
