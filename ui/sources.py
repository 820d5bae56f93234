"""Sources that open at the passage: a cited passage shown in its document (a PDF page rendered with the passage's
text boxes marked over it, on a scanned page the boxes of the words OCR recognised; a Markdown/text file with the
passage highlighted; a Word or HTML document as the text that was indexed, the passage highlighted, since the
browser cannot show the one and must not run the other), scrolled so the mark is in view, and the file itself: to
download, or (ui/serving.py) to open in the browser's PDF viewer at the cited page.

Every view and download looks the document up by its id in the published index and checks the signed-in
principal against the index's access metadata first, the same groups check retrieval applies. Nothing is served
by path: a doc id the index does not know, or one the user may not read, gets the same "not available" answer,
so a request cannot tell a restricted document from a missing one.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import streamlit as st

from rag.stores.extracted import ExtractedStore, word_text
from rag.types import DocumentMeta, Principal
from ui.components import escape_md

NOT_AVAILABLE = "This document is not available to you (it does not exist or is restricted to other groups)."
RENDER_SCALE = 1.6  # 72 dpi points -> pixels; about 950 px wide for an A4 page
MARK_PAD_PT = 1.5  # a mark reaches this far around its characters
TEXT_SUFFIXES = {".md", ".markdown", ".txt", ".text", ".rst"}
CONVERTED_SUFFIXES = {".docx": "Word document", ".html": "web page", ".htm": "web page"}
MIME = {
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".html": "application/octet-stream",  # downloaded, never shown by the browser as a page of this site
    ".htm": "application/octet-stream",
}


@dataclass(frozen=True)
class Extracted:
    """Where ``rag.stores.extracted`` keeps what ingestion read out of the file: OCR'd pages' words, converted text."""

    key: str
    by: str
    ocr_pages: frozenset[int]


@dataclass(frozen=True)
class Source:
    """A document the principal may read, as the index knows it."""

    doc_id: str
    title: str
    path: Path
    pages: int | None
    contact: str | None
    extracted: Extracted | None = None

    @property
    def is_pdf(self) -> bool:
        return self.path.suffix.lower() == ".pdf"

    @property
    def is_text(self) -> bool:
        return self.path.suffix.lower() in TEXT_SUFFIXES

    @property
    def is_converted(self) -> bool:
        """A Word or HTML document: shown as the text ingestion converted it to."""
        return self.path.suffix.lower() in CONVERTED_SUFFIXES


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
    raw = doc.get("extracted")
    extracted = (
        Extracted(
            str(raw["key"]), str(raw.get("by") or ""), frozenset(int(n) for n in raw.get("ocr_pages") or ())
        )
        if isinstance(raw, dict) and raw.get("key")
        else None
    )
    return Source(
        doc_id=str(doc_id),
        title=str(doc.get("title") or doc_id),
        path=Path(source),
        pages=doc.get("pages"),
        contact=str(contact) if contact else None,
        extracted=extracted,
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
Box = tuple[
    float, float, float, float
]  # left, top, right, bottom, as fractions of the page's width and height


@st.cache_data(max_entries=32, show_spinner=False)
def render_pdf_page(path: str, mtime: float, page: int) -> bytes:
    """The 1-based ``page`` of the PDF at ``path`` (clamped to its pages) as PNG bytes; ``mtime`` keys the cache to
    the file's version. The passage is marked over the image (``passage_boxes``), not drawn into it."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        pdf_page = pdf[min(max(page, 1), len(pdf)) - 1]
        buffer = io.BytesIO()
        pdf_page.render(scale=RENDER_SCALE).to_pil().convert("RGB").save(buffer, format="PNG", optimize=True)
        return buffer.getvalue()
    finally:
        pdf.close()


@st.cache_data(max_entries=64, show_spinner=False)
def passage_boxes(path: str, mtime: float, page: int, passage: str) -> tuple[Box, ...]:
    """Where the passage's text sits on the 1-based ``page``: one box per run of characters on a line, as
    fractions of the page (top-left origin), so the marks scale with the image. None found: ()."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        pdf_page = pdf[min(max(page, 1), len(pdf)) - 1]
        textpage = pdf_page.get_textpage()
        width, height = pdf_page.get_size()
        boxes: list[Box] = []
        # get_text_range() gives one character per text-page index here (ranges are in text-page indices)
        for start, end in passage_spans(textpage.get_text_range(), passage):
            for r in range(textpage.count_rects(start, end - start)):
                left, bottom, right, top = textpage.get_rect(r)
                boxes.append(
                    (
                        max(left - MARK_PAD_PT, 0.0) / width,
                        max(height - top - MARK_PAD_PT, 0.0) / height,
                        min(right + MARK_PAD_PT, width) / width,
                        min(height - bottom + MARK_PAD_PT, height) / height,
                    )
                )
        return tuple(boxes)
    finally:
        pdf.close()


@st.cache_data(max_entries=64, show_spinner=False)
def ocr_boxes(data_dir: str, key: str, engine: str, page: int, passage: str) -> tuple[Box, ...]:
    """Where the passage sits on a scanned page: the boxes of the recognised words it spans, one box per run of
    words on a line. The words are those OCR read when the page was indexed (``rag.stores.extracted``)."""
    store = ExtractedStore(data_dir)
    try:
        recognised = store.page(key, engine, page) if store.exists() else None
    finally:
        store.close()
    if recognised is None:
        return ()
    words = recognised.words
    text, owner = word_text(words)
    hit: list[int] = []
    for start, end in passage_spans(text, passage):
        for i in sorted({owner[c] for c in range(start, end) if owner[c] >= 0}):
            if not hit or hit[-1] != i:
                hit.append(i)
    boxes: list[Box] = []
    last = -2
    for i in hit:
        x0, y0, x1, y1 = words[i].box
        same_line = boxes and i == last + 1 and abs(y0 - boxes[-1][1]) < (y1 - y0) * 0.6
        if same_line:
            b = boxes[-1]
            boxes[-1] = (min(b[0], x0), min(b[1], y0), max(b[2], x1), max(b[3], y1))
        else:
            boxes.append((x0, y0, x1, y1))
        last = i
    pad = 0.002
    return tuple(
        (max(a - pad, 0.0), max(b - pad, 0.0), min(c + pad, 1.0), min(d + pad, 1.0)) for a, b, c, d in boxes
    )


def converted_text(data_dir: str, key: str) -> str | None:
    """The Markdown a Word or HTML document was converted to when it was indexed."""
    store = ExtractedStore(data_dir)
    try:
        return store.text(key) if store.exists() else None
    finally:
        store.close()


# ----------------------------------------------------------------------------- the viewer
VIEWER_CSS = """
<style>
.rag-view { max-height: min(62vh, 48rem); overflow: auto; border: 1px solid #d6d6d9; border-radius: .5rem;
  background: #fafafa; overscroll-behavior: contain; }
.rag-view.text { white-space: pre-wrap; overflow-wrap: anywhere; font-size: .95rem; line-height: 1.55;
  padding: .75rem 1rem; }
.rag-page { position: relative; max-width: 60rem; margin: 0 auto; line-height: 0; background: #ffffff; }
.rag-page img { display: block; width: 100%; height: auto; }
.rag-hl { position: absolute; background: rgba(255, 212, 0, .42); outline: 1px solid rgba(214, 150, 0, .9);
  border-radius: 2px; mix-blend-mode: multiply; pointer-events: none; }
.rag-mark { background: #ffe066; padding: 0 .1em; border-radius: .2em; }
.rag-quote { display: none; }
@media (max-width: 640px) {
  /* a page image is unreadable on a phone: the passage as text instead, the page one link away */
  .rag-view.pdf.has-quote { display: none; }
  .rag-quote { display: block; margin: 0; max-height: 50vh; overflow: auto; white-space: pre-wrap; overflow-wrap: anywhere;
    font-size: 1rem; line-height: 1.55; padding: .7rem .9rem; background: #fffbe6; color: #262730;
    border-left: 4px solid #ffd400; border-radius: .35rem; }
}
</style>
"""
# Scrolls the view so the first mark sits a quarter down its box, once the box has a size (a dialog lays out after
# it opens), and stops as soon as the reader scrolls themselves. The view's id is the only value it reads.
SCROLL_TO_MARK = """
<script>
(() => {
  const box = document.getElementById("%s");
  const mark = box && box.querySelector(".rag-hl, .rag-mark");
  if (!mark) return;
  let moved = false;
  for (const name of ["wheel", "touchmove", "keydown", "mousedown"]) {
    box.addEventListener(name, () => { moved = true; }, { passive: true });
  }
  const go = () => {
    if (moved || !box.clientHeight) return;
    const top = mark.getBoundingClientRect().top - box.getBoundingClientRect().top + box.scrollTop;
    box.scrollTop = Math.max(0, top - box.clientHeight / 4);
  };
  go();
  requestAnimationFrame(go);
  for (const ms of [150, 400, 1000]) setTimeout(go, ms);
  const image = box.querySelector("img");
  if (image && !image.complete) image.addEventListener("load", go);
  if (window.ResizeObserver) {
    const watch = new ResizeObserver(go);
    watch.observe(box);
    setTimeout(() => watch.disconnect(), 4000);
  }
})();
</script>
"""


def view_id(key: str) -> str:
    """An HTML id for the view drawn under ``key`` (letters and digits only)."""
    return "rag-view-" + hashlib.sha1(key.encode()).hexdigest()[:12]


def pdf_view_html(png: bytes, boxes: Sequence[Box], passage: str, key: str) -> str:
    """A PDF page in a scroll box with the passage's boxes marked over it, opened at the first mark; on a narrow
    screen the passage as text instead. Every text is escaped; the image is inline (no address to share)."""
    marks = "".join(
        f'<span class="rag-hl" style="left:{100 * x0:.3f}%;top:{100 * y0:.3f}%;'
        f'width:{100 * (x1 - x0):.3f}%;height:{100 * (y1 - y0):.3f}%"></span>'
        for x0, y0, x1, y1 in boxes
    )
    image = base64.b64encode(png).decode("ascii")
    quote = _quote_html(passage)
    return (
        VIEWER_CSS
        + f'<div class="rag-view pdf{" has-quote" if quote else ""}" id="{view_id(key)}" tabindex="0" '
        f'aria-label="The cited page, the passage marked"><div class="rag-page">'
        f'<img src="data:image/png;base64,{image}" alt="The cited page">{marks}</div></div>'
        + quote
        + SCROLL_TO_MARK % view_id(key)
    )


def text_view_html(text: str, passage: str, key: str) -> str:
    """A Markdown or text file, escaped, in a scroll box opened at the first highlighted span of the passage."""
    return (
        VIEWER_CSS
        + f'<div class="rag-view text" id="{view_id(key)}" tabindex="0">{highlighted_html(text, passage)}</div>'
        + SCROLL_TO_MARK % view_id(key)
    )


def _quote_html(passage: str) -> str:
    text = passage.strip()
    return f'<blockquote class="rag-quote">{html.escape(text)}</blockquote>' if text else ""


def render_source(
    source: Source,
    *,
    page: int | None,
    passage: str,
    key: str,
    data_dir: Path | str,
    open_link: Callable[[int], str | None] | None = None,
) -> None:
    """The document at the cited page, opened at the passage; a link that opens the PDF in the browser's viewer
    at that page (``open_link(page)``, ui/serving.py), and a download button for the file. ``data_dir`` holds
    what ingestion read out of scans and converted documents (``rag.stores.extracted``)."""
    if not source.path.is_file():
        st.warning(
            f"The file of “{escape_md(source.title)}” is no longer where it was indexed ({source.path.name}): re-run "
            "`rag ingest` to index its new location.",
            icon=":material/folder_off:",
        )
        return
    data = source.path.read_bytes()
    shown = None
    if source.is_pdf:
        total = source.pages or 0
        shown = min(max(page or 1, 1), total) if total else max(page or 1, 1)
        mtime = source.path.stat().st_mtime
        png = render_pdf_page(str(source.path), mtime, shown)
        scanned = source.extracted is not None and shown in source.extracted.ocr_pages
        if not passage:
            boxes: tuple[Box, ...] = ()
        elif scanned and source.extracted is not None:
            boxes = ocr_boxes(str(data_dir), source.extracted.key, source.extracted.by, shown, passage)
        else:
            boxes = passage_boxes(str(source.path), mtime, shown, passage)
        st.caption(
            f"{escape_md(source.title)} · page {shown}"
            + (f" of {total}" if total else "")
            + (" · a scanned page, read by OCR" if scanned else "")
            + (
                " · the cited passage is marked"
                if boxes
                else (" · passage not found on this page" if passage else "")
            )
        )
        st.html(pdf_view_html(png, boxes, passage, key), unsafe_allow_javascript=True)
    elif source.is_text:
        text = data.decode("utf-8", errors="replace")
        st.caption(escape_md(source.title) + (" · the cited passage is highlighted" if passage else ""))
        st.html(text_view_html(text, passage, key), unsafe_allow_javascript=True)
    elif source.is_converted and (
        converted := converted_text(str(data_dir), source.extracted.key) if source.extracted else None
    ):
        kind = CONVERTED_SUFFIXES[source.path.suffix.lower()]
        st.caption(
            f"{escape_md(source.title)} · the {kind}'s text as it was indexed"
            + (" · the cited passage is highlighted" if passage else "")
        )
        st.html(text_view_html(converted, passage, key), unsafe_allow_javascript=True)
    else:
        st.caption(f"{escape_md(source.title)}: no preview for {source.path.suffix or 'this'} files.")
    url = open_link(shown) if open_link is not None and shown is not None else None
    with st.container(horizontal=True):
        if url:
            st.link_button(
                f"Open the PDF at page {shown}",
                url,
                icon=":material/open_in_new:",
                help="In your browser's PDF viewer, in a new tab",
            )
        st.download_button(
            f"Download {source.path.name}",
            data=data,
            file_name=source.path.name,
            mime=MIME.get(source.path.suffix.lower(), "text/plain"),
            icon=":material/download:",
            key=f"dl_{key}",
            on_click="ignore",
        )
