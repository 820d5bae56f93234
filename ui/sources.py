"""Sources that open: a cited passage shown in its document (a PDF page rendered with the passage's text boxes
marked, or a Markdown/text file with the passage highlighted), and the file itself for download.

Every view and download looks the document up by its id in the published index and checks the signed-in
principal against the index's access metadata first, the same groups check retrieval applies. Nothing is served
by path: a doc id the index does not know, or one the user may not read, gets the same "not available" answer,
so a request cannot tell a restricted document from a missing one.
"""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import streamlit as st

from rag.types import DocumentMeta, Principal

NOT_AVAILABLE = "This document is not available to you (it does not exist or is restricted to other groups)."
RENDER_SCALE = 1.6  # 72 dpi points -> pixels; about 950 px wide for an A4 page
HIGHLIGHT = (255, 212, 0, 110)
OUTLINE = (214, 150, 0, 255)
TEXT_SUFFIXES = {".md", ".markdown", ".txt", ".text", ".rst"}


@dataclass(frozen=True)
class Source:
    """A document the principal may read, as the index knows it."""

    doc_id: str
    title: str
    path: Path
    pages: int | None
    contact: str | None

    @property
    def is_pdf(self) -> bool:
        return self.path.suffix.lower() == ".pdf"

    @property
    def is_text(self) -> bool:
        return self.path.suffix.lower() in TEXT_SUFFIXES


def document_meta(doc_id: str, doc: dict[str, Any]) -> DocumentMeta:
    """The access metadata retrieval filters on, from an index manifest entry."""
    return DocumentMeta(
        title=str(doc.get("title") or doc_id),
        groups=tuple(doc.get("groups") or ("*",)),
        effective=date.fromisoformat(doc["effective"]) if doc.get("effective") else None,
        expires=date.fromisoformat(doc["expires"]) if doc.get("expires") else None,
        tags=tuple(doc.get("tags") or ()),
    )


def readable_source(documents: dict[str, dict[str, Any]], principal: Principal, doc_id: str) -> Source | None:
    """The document ``doc_id`` if the index knows it and ``principal`` may read it, else None.

    The path is the one the index recorded at ingestion; a doc id never becomes a path.
    """
    doc = documents.get(str(doc_id))
    if not isinstance(doc, dict) or not document_meta(doc_id, doc).readable_by(principal):
        return None
    source = str(doc.get("source") or "")
    if not source or "#" in Path(source).name:  # a JSONL record (path#id) has no file of its own to open
        return None
    contact = doc.get("contact") or (doc.get("metadata") or {}).get("contact")
    return Source(
        doc_id=str(doc_id),
        title=str(doc.get("title") or doc_id),
        path=Path(source),
        pages=doc.get("pages"),
        contact=str(contact) if contact else None,
    )


def contact_for(documents: dict[str, dict[str, Any]], principal: Principal, doc_ids: list[str]) -> str | None:
    """The first contact named in the metadata of a readable document among ``doc_ids``."""
    for doc_id in doc_ids:
        source = readable_source(documents, principal, doc_id)
        if source is not None and source.contact:
            return source.contact
    return None


# ----------------------------------------------------------------------------- finding the passage
def _normalised(text: str) -> tuple[str, list[int]]:
    """Lower-case letters and digits only, with the index in ``text`` of each kept character."""
    keep, where = [], []
    for i, ch in enumerate(text):
        if ch.isalnum():
            keep.append(ch.lower())
            where.append(i)
    return "".join(keep), where


def passage_spans(page_text: str, passage: str, *, min_chars: int = 12) -> list[tuple[int, int]]:
    """Character ranges (start, end) of ``page_text`` that hold the passage, sentence by sentence.

    Extraction and chunking change whitespace, hyphenation and line order, so each passage line or sentence is
    matched on its letters and digits alone; a piece not found whole is tried by its first and last 40
    characters. Table rows whose cells were reordered are found piece by piece the same way.
    """
    hay, where = _normalised(page_text)
    spans: list[tuple[int, int]] = []
    pieces = [p for line in passage.splitlines() for p in re.split(r"(?<=[.!?;:])\s+", line) if p.strip()]
    for piece in pieces:
        needle, _ = _normalised(piece)
        if len(needle) < min_chars:
            continue
        found = []
        at = hay.find(needle)
        if at >= 0:
            found.append((at, at + len(needle)))
        else:
            for part in {needle[:40], needle[-40:]}:
                at = hay.find(part) if len(part) >= min_chars else -1
                if at >= 0:
                    found.append((at, at + len(part)))
        if not found:  # a flattened table line: its cells, word pair by word pair, and its figures
            words = piece.split()
            parts = [" ".join(words[i : i + 2]) for i in range(0, len(words), 2)]
            for part in parts + [w for w in words if sum(c.isdigit() for c in w) >= 3]:
                small, _ = _normalised(part)
                at = hay.find(small) if len(small) >= 5 else -1
                if at >= 0:
                    found.append((at, at + len(small)))
        for start, end in found:
            spans.append((where[start], where[end - 1] + 1))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1] + 2:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def highlighted_html(text: str, passage: str) -> str:
    """``text`` escaped, with the passage's spans in <mark>; for Markdown and text sources."""
    out, last = [], 0
    for start, end in passage_spans(text, passage):
        out.append(html.escape(text[last:start]))
        out.append(f'<mark class="rag-mark">{html.escape(text[start:end])}</mark>')
        last = end
    out.append(html.escape(text[last:]))
    return "".join(out)


# ----------------------------------------------------------------------------- rendering a PDF page
@st.cache_data(max_entries=64, show_spinner=False)
def render_pdf_page(path: str, mtime: float, page: int, passage: str) -> tuple[bytes, int]:
    """The 1-based ``page`` of the PDF at ``path`` as PNG bytes with the passage's text boxes marked, and how
    many boxes were marked (``mtime`` keys the cache to the file's version)."""
    import pypdfium2 as pdfium
    from PIL import Image, ImageDraw

    pdf = pdfium.PdfDocument(path)
    try:
        index = min(max(page, 1), len(pdf)) - 1
        pdf_page = pdf[index]
        textpage = pdf_page.get_textpage()
        _, height = pdf_page.get_size()
        image = pdf_page.render(scale=RENDER_SCALE).to_pil().convert("RGBA")
        overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(overlay)
        text = textpage.get_text_range()
        boxes = 0
        for start, end in passage_spans(text, passage):
            # get_text_range() gives one character per text-page index here (ranges are in text-page indices)
            for r in range(textpage.count_rects(start, end - start)):
                left, bottom, right, top = textpage.get_rect(r)
                draw.rectangle(
                    (
                        left * RENDER_SCALE - 2,
                        (height - top) * RENDER_SCALE - 2,
                        right * RENDER_SCALE + 2,
                        (height - bottom) * RENDER_SCALE + 2,
                    ),
                    fill=HIGHLIGHT,
                    outline=OUTLINE,
                )
                boxes += 1
        buffer = io.BytesIO()
        Image.alpha_composite(image, overlay).convert("RGB").save(buffer, format="PNG", optimize=True)
        return buffer.getvalue(), boxes
    finally:
        pdf.close()


# ----------------------------------------------------------------------------- the viewer
VIEWER_CSS = """
<style>
.rag-source { max-height: 32rem; overflow: auto; white-space: pre-wrap; font-size: .9rem; line-height: 1.5;
  padding: .75rem 1rem; border: 1px solid #d6d6d9; border-radius: .5rem; background: #fafafa; }
.rag-mark { background: #ffe066; padding: 0 .1em; border-radius: .2em; }
</style>
"""


def render_source(source: Source, *, page: int | None, passage: str, key: str) -> None:
    """The document at the cited page with the passage marked, and a download button for the file."""
    if not source.path.is_file():
        st.warning(
            f"The file of “{source.title}” is no longer where it was indexed ({source.path.name}): re-run "
            "`rag ingest` to index its new location.",
            icon=":material/folder_off:",
        )
        return
    data = source.path.read_bytes()
    if source.is_pdf:
        total = source.pages or 0
        shown = min(max(page or 1, 1), total) if total else max(page or 1, 1)
        png, boxes = render_pdf_page(str(source.path), source.path.stat().st_mtime, shown, passage)
        st.caption(
            f"{source.title} · page {shown}"
            + (f" of {total}" if total else "")
            + (
                " · the cited passage is marked"
                if boxes
                else (" · passage not found on this page" if passage else "")
            )
        )
        st.image(png, width="stretch")
    elif source.is_text:
        text = data.decode("utf-8", errors="replace")
        st.caption(source.title + (" · the cited passage is highlighted" if passage else ""))
        st.html(VIEWER_CSS + f'<div class="rag-source">{highlighted_html(text, passage)}</div>')
    else:
        st.caption(f"{source.title}: no preview for {source.path.suffix or 'this'} files.")
    st.download_button(
        f"Download {source.path.name}",
        data=data,
        file_name=source.path.name,
        mime="application/pdf" if source.is_pdf else "text/plain",
        icon=":material/download:",
        key=f"dl_{key}",
        on_click="ignore",
    )
