"""Documents: what is indexed (only what the signed-in user may read), each document to open and download, and
the last ingestion's failures.

A document opens from the list or from the address (``/documents?doc=<doc id>&page=<n>``, the link a citation
gives). Either way the doc id is looked up in the published index and the signed-in user's access is checked on
this run (ui/sources.py): an id they may not read gets the same answer as one that does not exist.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from rag.stores.index import generation_dir
from rag.types import DocumentMeta, Principal
from ui import services, serving, sources


def _meta(doc_id: str, doc: dict[str, Any]) -> DocumentMeta:
    return sources.document_meta(doc_id, doc)


def _status(meta: DocumentMeta, today: date) -> str:
    if meta.valid_on(today):
        return "in force"
    if meta.expires and today > meta.expires:
        return "expired"
    return "not yet in force"


def split_readable(documents: dict[str, dict[str, Any]], principal: Principal) -> tuple[dict[str, Any], int]:
    """The documents ``principal`` may read, and how many others are hidden."""
    visible = {d: doc for d, doc in documents.items() if _meta(d, doc).readable_by(principal)}
    return visible, len(documents) - len(visible)


def documents_frame(documents: dict[str, dict[str, Any]]) -> pd.DataFrame:
    today = date.today()
    rows = []
    for doc_id, doc in documents.items():
        meta = _meta(doc_id, doc)
        rows.append(
            {
                "title": meta.title,
                "document id": doc_id,
                "file": Path(str(doc.get("source") or "")).name,
                "version": str(doc.get("version") or "")[:12],
                "chunks": len(doc.get("chunk_ids") or []),
                "pages": doc.get("pages"),
                "access groups": ", ".join("everyone" if g == "*" else g for g in meta.groups),
                "effective": doc.get("effective") or "",
                "expires": doc.get("expires") or "",
                "status today": _status(meta, today),
                "tags": ", ".join(meta.tags),
            }
        )
    frame = pd.DataFrame(
        rows,
        columns=[
            "title",
            "document id",
            "file",
            "version",
            "chunks",
            "pages",
            "access groups",
            "effective",
            "expires",
            "status today",
            "tags",
        ],
    )
    return frame.sort_values(["title", "effective"]).reset_index(drop=True)


def ingest_report(data_dir: Path, generation: str) -> list[dict[str, Any]]:
    """Per-file results of the ingestion that built ``generation`` (empty when the report is missing)."""
    path = generation_dir(data_dir, generation) / "ingest-report.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    files = data.get("files", []) if isinstance(data, dict) else data
    return [f for f in files if isinstance(f, dict)]


def _hidden_sources(documents: dict[str, dict[str, Any]], visible: dict[str, Any]) -> set[str]:
    """File names of documents the user may not read: their ingestion results are not shown either."""
    return {Path(str(doc.get("source") or "")).name for d, doc in documents.items() if d not in visible}


def _requested_page() -> int | None:
    try:
        return max(int(str(st.query_params.get("page") or "")), 1)
    except ValueError:
        return None


def _viewer(documents: dict[str, dict[str, Any]], visible: dict[str, Any], principal: Principal) -> None:
    """Open one document: the one the address asks for (access checked now), else the one picked here."""
    st.subheader("Open a document")
    requested = st.query_params.get("doc")
    if requested is not None:
        source = sources.readable_source(documents, principal, str(requested))
        if source is None:
            st.error(sources.NOT_AVAILABLE, icon=":material/lock:")
            return
        doc_id, page = source.doc_id, _requested_page()
    else:
        titles = {
            d: str(doc.get("title") or d)
            for d, doc in sorted(visible.items(), key=lambda i: str(i[1].get("title")))
        }
        if not titles:
            st.caption("No documents you may read.")
            return
        doc_id = str(st.selectbox("Document", list(titles), format_func=lambda d: titles[d], key="docs_open"))
        source = sources.readable_source(documents, principal, doc_id)  # re-checked on every run
        if source is None:
            st.error(sources.NOT_AVAILABLE, icon=":material/lock:")
            return
        page = None
    if source.is_pdf and (source.pages or 0) > 1:
        page = st.number_input("Page", 1, int(source.pages or 1), int(page or 1), key=f"docs_page_{doc_id}")
    sources.render_source(
        source,
        page=page,
        passage="",
        key=f"doc_{doc_id}",
        data_dir=services.get_settings().data_dir,
        open_link=lambda p: serving.open_url(source, principal, p),
    )


def render() -> None:
    settings = services.get_settings()
    principal = services.current_principal(settings)
    st.title("Documents")
    reader = services.get_reader(settings)
    generation = reader.generation
    documents = reader.documents()
    visible, hidden = split_readable(documents, principal)
    chunks = sum(len(d.get("chunk_ids") or []) for d in visible.values())
    admin = services.is_admin(principal, settings)
    cols = st.columns(4 if admin else 3)
    cols[0].metric("Documents you may read", len(visible))
    cols[1].metric("Chunks", chunks)
    cols[2].metric("Hidden from you", hidden, help="Documents restricted to groups you are not in.")
    if admin:  # deployment details are for whoever runs it, not for every employee
        cols[3].metric("Index generation", generation.name)
        st.caption(
            f"Published {str(generation.manifest.created_at)[:19].replace('T', ' ')} UTC \u00b7 embedding model "
            f"`{generation.manifest.embedding_model}`"
        )
    if hidden:
        st.info(
            f"{hidden} more document(s) are indexed but restricted to groups you are not in.",
            icon=":material/lock:",
        )
    st.dataframe(
        documents_frame(visible),
        hide_index=True,
        key="docs_table",
        column_config={"chunks": st.column_config.NumberColumn(help="Indexed passages")},
    )

    _viewer(documents, visible, principal)

    st.subheader("Last ingestion")
    report = ingest_report(Path(settings.data_dir), generation.name)
    if not report:
        st.caption("No ingestion report in this index generation.")
        return
    hide = _hidden_sources(documents, visible)
    shown = [f for f in report if Path(str(f.get("path") or "")).name not in hide]
    counts: dict[str, int] = {}
    for f in shown:
        counts[str(f.get("status"))] = counts.get(str(f.get("status")), 0) + 1
    st.caption(" \u00b7 ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no files")
    failed = [f for f in shown if f.get("status") == "failed"]
    if failed:
        st.error(f"{len(failed)} file(s) could not be ingested:", icon=":material/error:")
        st.dataframe(
            pd.DataFrame(
                [
                    {"file": f.get("path"), "reason": f.get("reason"), "message": f.get("message")}
                    for f in failed
                ],
                columns=["file", "reason", "message"],
            ),
            hide_index=True,
            key="docs_failures",
        )
    else:
        st.success("No files failed in the last ingestion.", icon=":material/check_circle:")
    warned = [f for f in shown if f.get("warnings")]
    if warned:  # indexed, but pages left out: a scan too poor to read, a blank page
        st.warning(f"{len(warned)} file(s) were indexed with pages left out:", icon=":material/warning:")
        st.dataframe(
            pd.DataFrame(
                [{"file": f.get("path"), "left out": " ".join(f.get("warnings") or [])} for f in warned],
                columns=["file", "left out"],
            ),
            hide_index=True,
            key="docs_warnings",
        )
    skipped = [f for f in shown if f.get("status") == "skipped" and f.get("reason") != "hidden"]
    if skipped:
        st.caption(f"{len(skipped)} file(s) of a type this does not read were skipped:")
        st.dataframe(
            pd.DataFrame(
                [
                    {"file": f.get("path"), "why": f.get("message"), "what to do": f.get("hint")}
                    for f in skipped
                ],
                columns=["file", "why", "what to do"],
            ),
            hide_index=True,
            key="docs_skipped",
        )


with services.page_guard():
    render()
