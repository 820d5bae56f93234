"""The sources an answer cites: one button each under the answer, opening a wide dialog at the cited page with the
passage marked and in view, a link that opens the PDF in the browser's viewer at that page, and the download.

The document is looked up again, by id, with the signed-in principal when the dialog opens (ui/sources.py); the
link is made for that principal and checked again on the request that serves the file (ui/serving.py).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from rag.types import Principal
from ui import answer_text, components, services, serving, sources

LABEL_CHARS = 40


def source_label(e: dict[str, Any]) -> str:
    """'[2] Salary Bands, p. 1' for a button (the title shortened); escape before rendering."""
    title = str(e.get("title") or e.get("doc_id") or "")
    if len(title) > LABEL_CHARS:
        title = title[: LABEL_CHARS - 1].rstrip() + "\u2026"
    page = f", p. {e['page']}" if e.get("page") else ""
    return f"[{e['n']}] {title}{page}"


@st.dialog("Cited passage", width="large")
def source_dialog(e: dict[str, Any], principal: Principal) -> None:
    """The cited passage in its document, opened at the passage (a dialog: one at a time, over the page)."""
    st.markdown(f"**[{e['n']}] {components.escape_md(components.passage_label(e))}**")
    settings = services.get_settings()
    source = sources.readable_source(
        services.get_reader(settings).documents(), principal, str(e.get("doc_id"))
    )
    if source is None:
        st.caption(sources.NOT_AVAILABLE)
        return
    sources.render_source(
        source,
        page=e.get("page"),
        passage=str(e.get("text") or ""),
        key=f"cited_{e.get('chunk_id')}",
        data_dir=settings.data_dir,
        open_link=lambda page: serving.open_url(source, principal, page),
    )


def render_cited_sources(trace: dict[str, Any], principal: Principal, *, key: str) -> None:
    """One button per cited passage (in citation order) that opens it in ``source_dialog``."""
    cited = answer_text.cited_evidence(trace)
    if not cited:
        return
    with st.container(horizontal=True, key=f"sources_{key}"):
        for e in cited:
            if st.button(
                components.escape_md(source_label(e)),
                icon=":material/open_in_new:",
                key=f"src_{key}_{e['n']}",
                help="Open the cited page with the passage marked",
            ):
                source_dialog(e, principal)
