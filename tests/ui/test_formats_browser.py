"""Citations from every format open at the passage, in a real browser: a scanned PDF at its page with the marks on
the recognised words, a Word file and an intranet page as their indexed text with the passage highlighted; a
restricted scan never opens for someone outside its group, by any route.

`rag ui` runs with RAG_AUTH=proxy (identity headers, as behind the authenticating proxy) over a library ingested
here: two scans (one restricted to group legal, with a canary), a Word file and an HTML page. Needs Chromium
(scripts/browser.sh) and Tesseract (scripts/ocr.sh); skipped with a message without them, failed under CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluation.format_copies import render_pages, scan_image, write_image_pdf
from tests.ingest.hostile import text_pdf
from tests.ingest.test_formats import PAGE, word_file
from tests.ui.test_auth_browser import (  # noqa: F401  (browser: a fixture)
    _headers,
    _page,
    _serve,
    _shot,
    browser,
)
from tests.ui.test_browser import chromium  # noqa: F401  (fixture)
from ui.sources import NOT_AVAILABLE

pytestmark = pytest.mark.browser

CANARY = "CANARY-LEGAL-5521"
ALICE = _headers("alice", "staff")
LEE = _headers("lee", "staff,legal")
RETENTION = [
    [
        "Records Retention Schedule",
        "",
        "This schedule applies to every office.",
        "Ask the records team first.",
    ],
    [
        "Contracts",
        "",
        "Signed customer contracts are kept for seven years after they end.",
        "Drafts of contracts are destroyed after ninety days.",
    ],
]
HOLD = [["Legal Hold", "", f"Matter {CANARY}: preserve every mailbox of the sales team until released."]]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:  # type: ignore[no-untyped-def]
    if shutil.which("tesseract") is None:
        if os.environ.get("RAG_REQUIRE_OCR"):
            pytest.fail("tesseract is not installed; RAG_REQUIRE_OCR=1 requires it (scripts/ocr.sh)")
        pytest.skip("tesseract is not installed (bash scripts/setup.sh installs it: scripts/ocr.sh)")
    from ingest.indexer import ingest
    from rag.config import load_settings
    from rag.tracestore.db import upgrade

    docs = tmp_path_factory.mktemp("library")
    retention = [
        scan_image(p, skew=0.9, noise_seed=n) for n, p in enumerate(render_pages(text_pdf(RETENTION)))
    ]
    write_image_pdf(retention, docs / "retention.pdf")
    write_image_pdf([scan_image(render_pages(text_pdf(HOLD))[0], skew=-0.6)], docs / "legal-hold.pdf")
    (docs / "legal-hold.pdf.meta.json").write_text(
        json.dumps({"title": "Legal Hold Notice", "groups": ["legal"]})
    )
    word_file(docs / "expenses.docx")
    (docs / "leave.html").write_text(PAGE)
    data = tmp_path_factory.mktemp("library-data")
    settings = load_settings(data_dir=data)
    report = ingest([str(docs)], settings, embedder=embedder)
    assert report.ok and report.totals["ocr_pages"] == 3, report.to_json()
    upgrade(settings)
    return data


@pytest.fixture(scope="module")
def url(library: Path, chromium: Path) -> Iterator[str]:  # noqa: F811
    with _serve(library, "proxy", "ui-server-formats.log") as served:
        yield served


def _answer(page, question: str) -> str:  # type: ignore[no-untyped-def]
    page.goto(page.url.split("?")[0])
    box = page.get_by_test_id("stChatInputTextArea")
    box.wait_for(timeout=120_000)
    box.fill(question)
    box.press("Enter")
    page.wait_for_function("document.querySelectorAll('.rag-answer').length > 0", timeout=240_000)
    page.wait_for_function(
        "!document.querySelector('[data-testid=\"stStatusWidget\"] button')", timeout=60_000
    )
    page.wait_for_timeout(1000)
    return str(page.locator(".rag-answer").first.inner_text())


def _open_source(page, title: str):  # type: ignore[no-untyped-def]
    page.get_by_role("button", name=re.compile(re.escape(title))).first.click()
    dialog = page.get_by_role("dialog")
    dialog.locator(".rag-view").first.wait_for(timeout=60_000)
    page.wait_for_timeout(800)
    return dialog


def test_a_scanned_citation_opens_at_its_page_with_the_words_marked(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        page.goto(url)
        answer = _answer(page, "How long are signed customer contracts kept?")
        assert "seven years" in answer, answer
        dialog = _open_source(page, "Records Retention Schedule, p. 2")  # the title: the scan's first heading
        text = dialog.inner_text()
        assert "page 2" in text and "read by OCR" in text and "the cited passage is marked" in text, text
        marks = dialog.locator(".rag-view.pdf .rag-hl")
        assert marks.count() >= 1
        # the marks lie on the sentence's line: in the top third of the page, inside the image
        tops = [float(m.get_attribute("style").split("top:")[1].split("%")[0]) for m in marks.all()]
        assert all(2 < top < 35 for top in tops), tops
        _shot(page, "ui-scanned-citation.png")


def test_word_and_html_citations_open_at_the_passage(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        page.goto(url)
        answer = _answer(page, "Where do I book hotels for a business trip?")
        assert "travel portal" in answer, answer
        dialog = _open_source(page, "Expenses Policy")
        marked = " ".join(dialog.locator(".rag-view.text mark.rag-mark").all_inner_texts())
        assert "travel portal" in marked, marked
        assert "Word document's text as it was indexed" in dialog.inner_text()
        page.keyboard.press("Escape")

        answer = _answer(page, "How many weeks of parental leave do birth parents get?")
        assert "16 weeks" in answer, answer
        dialog = _open_source(page, "Parental Leave Policy")
        marked = " ".join(dialog.locator(".rag-view.text mark.rag-mark").all_inner_texts())
        assert "16 weeks" in marked, marked
        body = dialog.inner_text()
        assert "web page's text as it was indexed" in body and "Accept all cookies" not in body


def test_a_restricted_scan_never_opens_outside_its_group(url: str, browser, library: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    from rag.stores.index import IndexReader

    hold = next(
        d for d, doc in IndexReader(library).documents().items() if doc["title"] == "Legal Hold Notice"
    )
    with _page(browser, ALICE) as page:
        page.goto(url)
        answer = _answer(page, "Which mailboxes must be preserved under the legal hold?")
        assert CANARY not in answer and CANARY not in page.content()
        page.goto(f"{url}/documents?doc={hold}")
        page.get_by_text(NOT_AVAILABLE).first.wait_for(timeout=120_000)
        assert CANARY not in page.content() and "Legal Hold Notice" not in page.content()
    # the file's own route: no link made for alice can exist, and a forged one opens nothing
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(
            urllib.request.Request(f"{url}/api/source/{hold}?link=forged", headers=ALICE), timeout=30
        )
    assert refused.value.code in (403, 404)
    # positive control: lee (group legal) sees the scan cited and opened at the passage
    with _page(browser, LEE) as page:
        page.goto(url)
        answer = _answer(page, "Which mailboxes must be preserved under the legal hold?")
        assert "sales team" in answer, answer
        dialog = _open_source(page, "Legal Hold Notice")
        assert dialog.locator(".rag-view.pdf .rag-hl").count() >= 1
