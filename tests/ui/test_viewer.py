"""Sources that open (ui/sources.py) and the chat page's helpers, without a browser."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.types import Principal
from tests.ui.test_pages import assert_clean, goto, open_app, sent
from ui.sources import NOT_AVAILABLE, highlighted_html, passage_spans, readable_source, render_pdf_page
from ui.views.chat import conversation_json, conversation_markdown, distinct_title, too_long

ALICE = Principal("alice", frozenset({"staff"}))
HANA = Principal("hana", frozenset({"staff", "hr"}))
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
    png, boxes = render_pdf_page(
        str(SAMPLE / "refunds.pdf"),
        0.0,
        1,
        "Customers may return items within 45 days of delivery for a full refund.",
    )
    assert png.startswith(b"\x89PNG") and boxes >= 1
    _, none = render_pdf_page(
        str(SAMPLE / "refunds.pdf"), 0.0, 1, "Nothing like this sentence is on the page."
    )
    assert none == 0


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
    from rag.index import IndexReader

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
