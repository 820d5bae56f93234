"""Sources that open (ui/sources.py) and the chat page's helpers, without a browser."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.conftest import ALICE, HANA
from tests.ui.test_pages import answered, assert_clean, goto, open_app, sent
from ui.sources import (
    NOT_AVAILABLE,
    highlighted_html,
    passage_boxes,
    passage_spans,
    pdf_view_html,
    readable_source,
    render_pdf_page,
    text_view_html,
)
from ui.views.chat import conversation_json, conversation_markdown, distinct_title, too_long

SAMPLE = Path(__file__).resolve().parents[2] / "ingest" / "sample" / "pdfs"
DOCS = {
    "salary": {
        "title": "Salary Bands",
        "groups": ["hr"],
        "source": str(SAMPLE / "salary-bands.pdf"),
        "pages": 2,
    },
    "refunds": {"title": "Refunds", "groups": ["*"], "source": str(SAMPLE / "refunds.pdf"), "contact": "x@y"},
}


def test_a_document_is_served_only_by_id_and_only_to_its_groups() -> None:
    assert readable_source(DOCS, ALICE, "salary") is None
    assert readable_source(DOCS, HANA, "salary") is not None
    for doc_id in ("../../etc/passwd", str(SAMPLE / "salary-bands.pdf"), "", "nope"):
        assert readable_source(DOCS, HANA, doc_id) is None
    source = readable_source(DOCS, ALICE, "refunds")
    assert source is not None and source.contact == "x@y" and source.is_pdf


def test_the_passage_is_found_despite_reflowed_whitespace_and_highlighted_as_text() -> None:
    page = "Refunds\nCustomers may return items within 45\ndays of delivery for a full refund. Gift cards are not."
    spans = passage_spans(page, "Customers may return items within 45 days of delivery for a full refund.")
    assert len(spans) == 1 and page[spans[0][0] : spans[0][1]].startswith("Customers")
    assert page[spans[0][0] : spans[0][1]].endswith("refund")
    out = highlighted_html(
        "<b>x</b> Customers may return items within 45 days.", "Customers may return items within 45 days."
    )
    assert (
        "&lt;b&gt;" in out
        and '<mark class="rag-mark">Customers may return items within 45 days</mark>' in out
    )


def test_a_pdf_page_renders_with_the_passage_marked() -> None:
    path = str(SAMPLE / "refunds.pdf")
    assert render_pdf_page(path, 0.0, 1).startswith(b"\x89PNG")
    boxes = passage_boxes(
        path, 0.0, 1, "Customers may return items within 45 days of delivery for a full refund."
    )
    assert boxes and all(0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1 for x0, y0, x1, y1 in boxes)
    assert passage_boxes(path, 0.0, 1, "Nothing like this sentence is on the page.") == ()
    # the marks sit where the passage is printed: "3. Standard returns" is below the page's top third
    assert min(y0 for _, y0, _, _ in boxes) > 0.2


def test_the_view_opens_at_the_mark_and_shows_document_text_as_text() -> None:
    hostile = '<img src=x onerror="alert(1)"> **bold** [link](http://evil.example)'
    view = pdf_view_html(b"\x89PNG fake", [(0.1, 0.5, 0.9, 0.55)], hostile, key="k1")
    assert 'class="rag-hl" style="left:10.000%;top:50.000%;width:80.000%;height:5.000%"' in view
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in view and "<img src=x" not in view
    assert view.count("<img ") == 1 and 'src="data:image/png;base64,' in view  # the page itself, inline
    # the passage as text on a narrow screen; with no passage, the page at every width
    assert 'class="rag-view pdf has-quote"' in view and 'class="rag-quote"' in view
    view_id = view.split('id="', 1)[1].split('"', 1)[0]
    assert f'getElementById("{view_id}")' in view  # the script scrolls this view, and reads nothing else
    assert 'class="rag-view pdf"' in pdf_view_html(b"x", [], "", key="k2")
    text = text_view_html(
        "# Title\n<script>x</script> Customers may return items within 45 days.",
        "Customers may return items within 45 days.",
        key="k3",
    )
    assert "&lt;script&gt;x&lt;/script&gt;" in text and '<mark class="rag-mark">' in text


def test_chat_helpers_titles_length_and_export() -> None:
    assert distinct_title("What is the refund window?", set()) == "What is the refund window?"
    taken = {"What is the refund window?", "What is the refund window? (2)"}
    assert distinct_title("What is the  refund window?", taken) == "What is the refund window? (3)"
    assert too_long("x" * 1000, 1000) is None and "at most 1,000" in (too_long("x" * 1001, 1000) or "")
    trace = {
        "trace_id": "t1",
        "abstained": False,
        "citations": [{"n": 1, "valid": True, "supported": True}],
        "evidence": [
            {
                "n": 1,
                "title": "Refunds",
                "doc_id": "refunds",
                "page": 1,
                "section": "Returns",
                "chunk_id": "c1",
                "text": "Customers may return items within 45 days.",
            }
        ],
    }
    messages = [
        {"role": "user", "content": "Refund window?"},
        {"role": "assistant", "content": "45 days [1]", "trace": trace},
    ]
    md = conversation_markdown(messages)
    assert "**You:**" in md and "- [1] Refunds, p. 1, Returns: \u201cCustomers may return items" in md
    data = conversation_json(messages)
    assert data["turns"][1]["citations"][0]["chunk_id"] == "c1"


def test_documents_page_refuses_a_restricted_doc_in_the_address(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    from rag.stores.index import IndexReader

    salary = next(
        d for d, doc in IndexReader(ui_data_dir).documents().items() if doc.get("title") == "Salary Bands"
    )
    at = open_app(monkeypatch, ui_data_dir, "alice")
    at.query_params["doc"] = salary
    goto(at, "documents")
    assert not at.exception
    assert any(NOT_AVAILABLE in e.value for e in at.error)
    assert b"CANARY-HR" not in sent(at) and not at.get("download_button")
    at = open_app(monkeypatch, ui_data_dir, "hana")
    at.query_params["doc"] = salary
    goto(at, "documents")
    assert_clean(at)
    assert [b.proto.label for b in at.get("download_button")] == ["Download salary-bands.pdf"]


def test_a_cited_source_opens_in_a_dialog_at_the_passage(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    from ui import serving

    at = answered(monkeypatch, ui_data_dir, "hana", "What is the salary band for a senior engineer?")
    (button,) = [b for b in at.button if str(b.key or "").startswith("src_")]
    assert button.label.startswith("\\[") and "Salary Bands" in button.label
    button.click().run()
    assert_clean(at)
    views = [h.proto.body for h in at.get("html") if "rag-view" in h.proto.body]
    assert len(views) == 1 and 'class="rag-hl"' in views[0] and "data:image/png;base64," in views[0]
    downloads = [b.proto.label for b in at.get("download_button") if b.proto.label.startswith("Download")]
    assert downloads == ["Download salary-bands.pdf"]
    assert not at.get("link_button")  # `streamlit run ui/app.py` alone: no route, so no link to it
    monkeypatch.setattr(serving, "MOUNTED", True)  # as ui/server.py mounts it
    at.button(key=button.key).click().run()
    (link,) = at.get("link_button")
    assert link.proto.label == "Open the PDF at page 1" and link.proto.url.endswith("#page=1")
    assert link.proto.url.startswith("/api/source/") and "link=" in link.proto.url


def test_a_passage_on_a_scanned_page_is_marked_on_the_recognised_words(tmp_path: Path) -> None:
    from rag.stores.extracted import ExtractedStore, RecognisedPage, Word
    from ui.sources import ocr_boxes

    line1 = [("Signed", 0.10), ("contracts", 0.20), ("are", 0.32), ("kept", 0.38)]
    line2 = [("for", 0.10), ("seven", 0.16), ("years.", 0.25), ("Drafts", 0.40)]
    words = tuple(Word(t, (x, 0.30, x + 0.08, 0.32), 95.0) for t, x in line1) + tuple(
        Word(t, (x, 0.34, x + 0.08, 0.36), 95.0) for t, x in line2
    )
    store = ExtractedStore(tmp_path)
    store.put_page("k", "tesseract x", RecognisedPage(2, "", words, 95.0, "ok"))
    store.close()
    boxes = ocr_boxes(str(tmp_path), "k", "tesseract x", 2, "Signed contracts are kept for seven years.")
    assert len(boxes) == 2  # one box per line the passage runs over
    (x0, y0, x1, y1), (u0, v0, u1, v1) = boxes
    assert x0 < 0.11 and x1 > 0.45 and y0 < 0.30 < 0.32 < y1  # "Signed ... kept"
    assert u0 < 0.11 and u1 > 0.32 and u1 < 0.40 and v0 > y1 - 0.01  # "for seven years." and not "Drafts"
    assert ocr_boxes(str(tmp_path), "k", "tesseract x", 1, "Signed contracts") == ()  # no such page
