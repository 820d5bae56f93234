"""``rag ingest`` / ``python -m ingest``: one result line per file, a progress bar on long runs, ``--json``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from rag.cli_support import DataDir, JsonFlag, user_errors
from rag.config import Settings, load_settings

if TYPE_CHECKING:
    from rich.progress import TaskID

STATUS_STYLE = {
    "indexed": "green",
    "unchanged": "dim",
    "removed": "yellow",
    "failed": "bold red",
    "skipped": "yellow",
}
PHASES = {"read": "Reading files", "ocr": "Recognising scanned pages (OCR)", "embed": "Embedding chunks"}


def run_ingest(
    paths: Sequence[str],
    settings: Settings,
    *,
    prune: bool = False,
    as_json: bool = False,
    rebuild: bool = False,
) -> int:
    """Run ingestion and print its report. Returns the exit status: 1 when any file failed."""
    # imported here: `rag ask` and the other commands mount `ingest_command` without paying for ingestion
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ingest.indexer import ingest

    err = Console(stderr=True)
    show_progress = not as_json and err.is_terminal
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not show_progress,
        transient=True,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(PHASES.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        report = ingest(paths, settings, prune=prune, progress=progress, rebuild=rebuild)

    if as_json:
        print(json.dumps(report.to_json()))
    else:
        from rich.markup import escape

        out = Console()
        for f in report.files:
            style = STATUS_STYLE.get(f.status, "")
            if f.status in ("failed", "skipped"):
                detail = f" ({f.reason}: {f.message})"
            else:
                detail = f" {f.chunks} chunks" + (
                    f", {f.ocr_pages} page(s) read by OCR" if f.ocr_pages else ""
                )
            out.print(f"[{style}]{f.status:9s}[/] {escape(f.path + detail)}", highlight=False)
            for line in f.warnings:
                out.print(f"[yellow]{'':9s}   warning:[/] {escape(line)}", highlight=False)
            for line in f.notices:
                out.print(f"[dim]{'':9s}   note: {escape(line)}[/]", highlight=False)
            if f.hint and f.status == "failed":
                out.print(f"[dim]{'':9s}   hint: {escape(f.hint)}[/]", highlight=False)
        t = report.totals
        out.print(
            f"{t['indexed']} indexed, {t['unchanged']} unchanged, {t['removed']} removed, {t['failed']} failed, "
            f"{t['skipped']} skipped; {report.embedded} chunks embedded; index {report.generation or '-'} holds "
            f"{report.index_chunks} chunks ({report.seconds:.1f}s)",
            highlight=False,
        )
    return 0 if report.ok else 1


@user_errors
def ingest_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Files, folders (recursive) or globs: .pdf (scans read by OCR) .docx .html .md .txt .jsonl"
        ),
    ],
    data_dir: DataDir = None,
    prune: Annotated[bool, typer.Option("--prune", help="Remove documents whose files are gone.")] = False,
    rebuild: Annotated[
        bool,
        typer.Option(
            "--rebuild",
            help="Write a new index generation even if nothing changed, from the cached vectors (migrates an "
            "index written by an earlier release).",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Ingest policy documents into the hybrid index (safe to re-run; unchanged files cost nothing)."""
    code = run_ingest(paths, load_settings(data_dir=data_dir), prune=prune, as_json=as_json, rebuild=rebuild)
    raise typer.Exit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m ingest`` runs the same command as ``rag ingest`` (which mounts ``ingest_command``)."""
    app = typer.Typer()
    app.command("ingest")(ingest_command)
    app(list(sys.argv[1:] if argv is None else argv), prog_name="python -m ingest")
