"""``rag db ...`` (migrations) and ``rag traces ...`` (inspect stored traces).

Mounted by ``supportbot/cli.py``: ``app.add_typer(db_app, name="db")`` and ``app.add_typer(traces_app, name="traces")``.
Errors meant for users (:class:`rag.errors.RagError`) print their message to stderr and exit 1, no traceback.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rag.config import Settings, load_settings
from rag.errors import RagError
from rag.traces import schema as ts
from rag.tracestore import db
from rag.tracestore.errors import TraceNotFound
from rag.tracestore.filters import TraceFilter
from rag.tracestore.store import TraceStore

db_app = typer.Typer(help="Create and migrate the trace database.", no_args_is_help=True)
traces_app = typer.Typer(help="List, show, export and import stored answer traces.", no_args_is_help=True)


def _parse_when(value: str | None) -> date | datetime | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value) if len(value.strip()) == 10 else datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(
            f"{value!r} is not an ISO date (2025-03-01) or datetime (2025-03-01T09:30)"
        ) from exc


DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data directory (default: RAG_DATA_DIR or .rag).", show_default=False),
]
UserOption = Annotated[str | None, typer.Option("--user", help="Only this user's answers.")]
SinceOption = Annotated[
    str | None, typer.Option("--since", help="From this ISO date or datetime (inclusive, UTC if no offset).")
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help="Before this datetime; a date includes that whole day.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except RagError as err:
        typer.echo(err.user_message(), err=True)
        raise typer.Exit(1) from None


def _settings(data_dir: Path | None) -> Settings:
    return load_settings(data_dir=data_dir)


@contextlib.contextmanager
def _store(data_dir: Path | None) -> Iterator[TraceStore]:
    store = TraceStore.from_settings(_settings(data_dir))
    try:
        yield store
    finally:
        store.close()


# -- rag db ---------------------------------------------------------------------------------------------------


def _migrate(move: Callable[[Settings, str], str | None], revision: str, data_dir: Path | None) -> None:
    """Migrate the trace database up or down to ``revision`` and say where it now stands."""
    with _user_errors():
        settings = _settings(data_dir)
        now = move(settings, revision)
        typer.echo(f"Trace database at revision {now or 'base'}: {db.display_url(settings.sqlalchemy_url)}")


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    data_dir: DataDirOption = None,
) -> None:
    """Create or migrate the trace database. Run once per deploy, before starting the app."""
    _migrate(db.upgrade, revision, data_dir)


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision; 'base' drops every table.")],
    data_dir: DataDirOption = None,
) -> None:
    """Migrate the trace database down to REVISION."""
    _migrate(db.downgrade, revision, data_dir)


@db_app.command("current")
def db_current(data_dir: DataDirOption = None) -> None:
    """Show the trace database's schema revision."""
    with _user_errors():
        settings = _settings(data_dir)
        now = db.current_revision(settings)
        head = db.head_revision()
        state = "not initialised (run `rag db upgrade`)" if now is None else now
        if now is not None and now == head:
            state += " (head)"
        elif now is not None:
            state += f" (head is {head}: run `rag db upgrade`)"
        typer.echo(f"{state}: {db.display_url(settings.sqlalchemy_url)}")


# -- rag traces -----------------------------------------------------------------------------------------------


@traces_app.command("list")
def traces_list(
    user: UserOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    abstained: Annotated[
        bool | None, typer.Option("--abstained/--no-abstained", help="Only abstentions / only answers.")
    ] = None,
    failed_citations: Annotated[
        bool, typer.Option("--failed-citations", help="Only answers with an invalid or unsupported citation.")
    ] = False,
    doc: Annotated[
        str | None, typer.Option("--doc", help="Only answers with evidence from this doc_id.")
    ] = None,
    feedback: Annotated[
        str | None,
        typer.Option(
            "--feedback", help="Only answers rated 'up', 'down', rated at all ('any'), or not ('none')."
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many rows.")] = 50,
    as_json: JsonOption = False,
    data_dir: DataDirOption = None,
) -> None:
    """Recent answers, newest first."""
    start, end = _parse_when(since), _parse_when(until)
    with _user_errors(), _store(data_dir) as store:
        rows = store.traces.list(
            TraceFilter(
                user=user,
                since=start,
                until=end,
                abstained=abstained,
                failed_citations=True if failed_citations else None,
                doc_id=doc,
                feedback=_feedback_filter(feedback),
            ),
            limit=limit,
        )
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console = Console()
    if not rows:
        console.print("No traces match.")
        return
    cells = []
    for row in rows:
        flags = [
            name
            for name, on in (
                ("abstained", row["abstained"]),
                ("failed-citation", row["has_failed_citation"]),
                ("error", row["error"]),
                (f"rated-{row.get('feedback')}", row.get("feedback")),
            )
            if on
        ]
        cells.append(
            (
                row["created_at"][:16].replace("T", " "),
                row["trace_id"],
                row["user"] or "",
                row["question"] or "",
                ", ".join(flags),
                "" if row["total_ms"] is None else f"{row['total_ms']:.0f}",
            )
        )
    # Every column but the question keeps its full width; the question gets what is left, cut with an ellipsis.
    headers = ("created (UTC)", "trace id", "user", "question", "flags", "ms")
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    fixed = sum(w for i, w in enumerate(widths) if headers[i] != "question") + 3 * len(headers) + 2
    table = Table(box=box.SIMPLE_HEAD)
    for i, name in enumerate(headers):
        if name == "question":
            table.add_column(
                name, no_wrap=True, overflow="ellipsis", max_width=max(12, console.width - fixed)
            )
        else:
            table.add_column(
                name, no_wrap=True, min_width=widths[i], justify="right" if name == "ms" else "left"
            )
    for c in cells:
        table.add_row(*(escape(v) for v in c))
    console.print(table)


def _feedback_filter(value: str | None) -> Any:
    if value is not None and value not in ("up", "down", "any", "none"):
        raise typer.BadParameter(f"--feedback is 'up', 'down', 'any' or 'none', not {value!r}")
    return value


@traces_app.command("show")
def traces_show(
    trace_id: Annotated[str, typer.Argument(help="The trace id (see `rag traces list`).")],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the stored trace as JSON (the shape of docs/schema/trace.schema.json)."
        ),
    ] = False,
    data_dir: DataDirOption = None,
) -> None:
    """One answer's trace: question, answer, final order, citations, drops, timings."""
    with _user_errors(), _store(data_dir) as store:
        trace = store.traces.read(trace_id)  # checked against the trace schema (rag/traces/schema.py)
    if as_json:
        typer.echo(json.dumps(trace.to_json(), ensure_ascii=False, indent=2))
        return
    _print_trace(Console(), trace)


@traces_app.command("export")
def traces_export(
    out: Annotated[Path | None, typer.Option("--out", help="JSONL file to write (default: stdout).")] = None,
    user: UserOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Full traces as JSON Lines, oldest first; a rated answer carries its feedback under "feedback"."""
    start, end = _parse_when(since), _parse_when(until)
    count = 0
    with _user_errors(), _store(data_dir) as store:
        traces = store.traces.export(TraceFilter(user=user, since=start, until=end), with_feedback=True)
        if out is None:
            for trace in traces:
                sys.stdout.write(json.dumps(trace, ensure_ascii=False) + "\n")
                count += 1
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("w", encoding="utf-8") as fh:
                for trace in traces:
                    fh.write(json.dumps(trace, ensure_ascii=False) + "\n")
                    count += 1
    typer.echo(f"Exported {count} trace(s){'' if out is None else f' to {out}'}.", err=True)


@traces_app.command("import")
def traces_import(
    source: Annotated[Path, typer.Argument(help="JSON Lines from `rag traces export` ('-' reads stdin).")],
    data_dir: DataDirOption = None,
) -> None:
    """Load exported traces into this trace database (e.g. SQLite -> PostgreSQL). Stored ids are skipped."""
    imported = skipped = 0
    with _user_errors(), _store(data_dir) as store:
        lines = sys.stdin if str(source) == "-" else source.open(encoding="utf-8")
        try:
            for line_no, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    trace = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise typer.BadParameter(f"line {line_no} of {source} is not JSON: {exc}") from exc
                try:
                    store.traces.get(str(trace.get("trace_id")))
                    skipped += 1
                    continue
                except TraceNotFound:
                    pass
                feedback = trace.pop("feedback", None) if isinstance(trace, dict) else None
                store.traces.save(trace)
                if isinstance(feedback, dict) and feedback.get("rating"):
                    store.feedback.set(
                        str(trace.get("trace_id")),
                        str(feedback.get("user") or trace.get("user")),
                        str(feedback["rating"]),
                        reason=feedback.get("reason"),
                        comment=feedback.get("comment"),
                    )
                imported += 1
        finally:
            if lines is not sys.stdin:
                lines.close()
    typer.echo(f"Imported {imported} trace(s); {skipped} already stored.", err=True)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return escape(str(value))


def _print_trace(console: Console, trace: ts.Trace) -> None:
    console.print(f"[bold]Trace[/bold] {escape(trace.trace_id)}  {escape(trace.created_at)}")
    who = f"{trace.user} ({', '.join(trace.groups)})"
    console.print(f"[bold]User[/bold] {escape(who)}   [bold]as of[/bold] {escape(trace.as_of)}")
    console.print(
        escape(
            f"model={trace.model} · reranker={trace.reranker} · packing={trace.packing}"
            f" · generation_mode={trace.generation_mode}"
        )
    )
    console.print()
    console.print("[bold]Question[/bold]")
    console.print(escape(trace.question))
    console.print()
    if trace.abstained:
        console.print(f"[bold yellow]Abstained[/bold yellow]: {escape(trace.abstain_reason or '')}")
    if trace.error:
        console.print(f"[bold red]Error[/bold red]: {escape(trace.error)}")
    console.print("[bold]Answer[/bold]")
    console.print(escape(trace.answer) or "[dim](empty)[/dim]")
    console.print()

    table = Table(title="Final order (evidence)", title_justify="left")
    for name in ("n", "chunk", "title / section", "page", "rerank", "bundle", "cited"):
        table.add_column(name, justify="right" if name in ("n", "page", "rerank", "bundle") else "left")
    for e in trace.evidence:
        table.add_row(
            _fmt(e.n),
            _fmt(e.chunk_id[:12]),
            escape(e.section or e.title),
            _fmt(e.page),
            _fmt(e.rerank_score),
            _fmt(e.bundle),
            "yes" if e.cited else "",
        )
    console.print(table)

    if trace.citations:
        table = Table(title="Citations", title_justify="left")
        for name in ("n", "valid", "supported", "score", "sentence"):
            table.add_column(name, ratio=1 if name == "sentence" else None)
        for c in trace.citations:
            table.add_row(
                _fmt(c.n),
                "yes" if c.valid else "[red]no[/red]",
                "yes" if c.supported else "[red]no[/red]",
                _fmt(c.support_score, 2),
                _fmt(c.sentence),
            )
        console.print(table)

    if trace.dropped:
        table = Table(title="Dropped", title_justify="left")
        for name in ("chunk", "stage", "reason"):
            table.add_column(name)
        for d in trace.dropped:
            table.add_row(_fmt(d.chunk_id[:12]), _fmt(d.stage), _fmt(d.reason))
        console.print(table)

    if trace.timings_ms:
        table = Table(title="Timings (ms)", title_justify="left")
        table.add_column("stage")
        table.add_column("ms", justify="right")
        for stage, ms in trace.timings_ms.items():
            table.add_row(escape(stage), _fmt(ms, 1))
        console.print(table)
    console.print("Tokens: " + escape(", ".join(f"{k}={v}" for k, v in trace.tokens.model_dump().items())))
    console.print(
        f"{len(trace.candidates)} candidates, {len(trace.evidence)} in the final order. "
        "`--json` shows everything."
    )


__all__ = ["db_app", "traces_app"]
