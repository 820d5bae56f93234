"""Readable terminal views of a result/trace dict (the ``rag ask --json`` shape)."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def evidence_table(trace: dict[str, Any]) -> Table:
    table = Table(title="Final evidence order (as the model saw it)", show_lines=False)
    for col in ("n", "bundle", "rerank", "score", "bm25", "dense", "document", "page", "section", "cited"):
        table.add_column(col)
    for e in trace["evidence"]:
        table.add_row(
            str(e["n"]),
            str(e["bundle"]),
            str(e["rerank_rank"] or "+"),
            f"{e['rerank_score']:.3f}" if e["rerank_score"] is not None else "-",
            str(e["bm25_rank"] or "-"),
            str(e["dense_rank"] or "-"),
            e["title"],
            str(e["page"] or "-"),
            (e["section"] or "")[-60:],
            "yes" if e["cited"] else "",
        )
    return table


def answer_text(trace: dict[str, Any]) -> Text:
    """The answer as terminal text, never read as markup: in an extractive answer each excerpt's heading dimmed and
    the sentences that carried the choice in bold (the rest of an excerpt is what their meaning depends on)."""
    answer = str(trace.get("answer") or "")
    text = Text(answer)
    for x in trace.get("excerpts") or []:
        heading = str(x.get("heading") or "")
        if heading:
            for m in re.finditer(rf"(?m)^{re.escape(heading)} \u2014 ", answer):
                text.stylize("dim", m.start(), m.start() + len(heading))
        for key in x.get("key") or []:
            for m in re.finditer(re.escape(str(key)), answer):
                text.stylize("bold", m.start(), m.end())
    return text


def print_result(trace: dict[str, Any], console: Console | None = None) -> None:
    out = console or Console()
    if trace.get("abstained"):
        out.print("[bold yellow]Abstained[/]")
    out.print(answer_text(trace), highlight=False)
    bad = [c for c in trace["citations"] if not (c["valid"] and c["supported"])]
    if bad:
        out.print(
            f"[red]{len(bad)} citation(s) failed the check:[/] " + ", ".join(f"[{c['n']}]" for c in bad)
        )
    if trace.get("error"):
        out.print(f"[red]Generation error:[/] {trace['error']}")
    if trace["evidence"]:
        out.print(evidence_table(trace))
    for line in hop_lines(trace):
        out.print(f"[dim]{line}[/]", highlight=False)
    timings = ", ".join(f"{k} {v:.0f}ms" for k, v in trace["timings_ms"].items())
    out.print(f"[dim]trace {trace['trace_id']} | reranker {trace['reranker']} | {timings}[/]")


def hop_lines(trace: dict[str, Any]) -> list[str]:
    """One line per follow-up hop: the terms it followed, what it linked, why it stopped."""
    titles = {
        c["chunk_id"]: c.get("title") or c["chunk_id"]
        for c in [*trace.get("candidates", []), *trace["evidence"]]
    }
    lines = []
    for hop in trace.get("hops") or []:
        terms = ", ".join(repr(q["term"]) for q in hop.get("queries", [])) or "none"
        linked = "; ".join(
            f"{titles.get(lk['chunk_id'], lk['chunk_id'])} (via {lk['term']!r})"
            for lk in hop.get("linked", [])
        )
        lines.append(
            f"hop {hop['hop']}: followed {terms}; linked {linked or 'nothing'}; {hop.get('stopped') or ''}"
        )
    return lines
