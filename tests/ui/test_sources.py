"""The employee's chat in a real headless browser: the cold-start banner, sources that open at the cited page with
the passage marked, a restricted document refused on direct request, the 420 px and 1280 px layouts, and bad
input (a question over the length limit, "[3]" in a question).

`rag ui` runs with RAG_AUTH=proxy (each Playwright context sends oauth2-proxy's identity headers). Tests run in
file order: the first one meets the server cold. Screenshots go to test-artifacts/ and, with RAG_SCREENSHOTS=1,
to docs/images/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui.conftest import CANARY_HR
from tests.ui.test_auth_browser import _headers, _page, _serve, _shot, browser  # noqa: F401  (fixture)
from tests.ui.test_browser import ANSWER_TIMEOUT_MS, chromium  # noqa: F401  (fixture)
from ui.sources import NOT_AVAILABLE

pytestmark = pytest.mark.browser

HANA = _headers("hana", "staff,hr")
ALICE = _headers("alice", "staff")
TABLE_Q = "What is the salary band for a senior engineer?"
REFUND_Q = "How many days does a customer have to return an item for a full refund?"


@pytest.fixture(scope="module")
def url(ui_data_dir: Path, chromium: Path) -> Iterator[str]:  # noqa: F811
    with _serve(ui_data_dir, "proxy", "ui-server-sources.log") as served:
        yield served


def _salary_doc_id(data_dir: Path) -> str:
    from rag.index import IndexReader

    documents = IndexReader(data_dir).documents()
    return next(d for d, doc in documents.items() if doc.get("title") == "Salary Bands")


def _answer(page, question: str, before: int) -> None:  # type: ignore[no-untyped-def]
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(question)
    box.press("Enter")
    page.wait_for_function(
        f"document.querySelectorAll('.rag-answer').length > {before}", timeout=ANSWER_TIMEOUT_MS
    )
    page.wait_for_function(
        "!document.querySelector('[data-testid=\"stStatusWidget\"] button')", timeout=60_000
    )
    page.wait_for_timeout(1500)


def test_cold_start_shows_the_chat_box_and_a_loading_banner(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        page.goto(url)
        # The first visit loads the models (~15 s): the chat box and the banner are there meanwhile.
        page.get_by_text("Loading the models", exact=False).first.wait_for(timeout=60_000)
        assert page.get_by_test_id("stChatInputTextArea").is_visible()
        _shot(page, "ui-cold-start.png")
        page.get_by_text("Loading the models", exact=False).first.wait_for(state="detached", timeout=240_000)


def test_a_citation_opens_its_pdf_page_with_the_passage_marked(url: str, browser, ui_data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, HANA) as page:
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        _answer(page, TABLE_Q, 0)
        answer = page.locator(".rag-answer").first.inner_text()
        assert "L5 Senior software engineer" in answer and "147,000" in answer, answer
        assert "sets the salary band" not in answer
        # The employee view: no evidence table until asked for.
        assert page.get_by_test_id("stDataFrame").count() == 0
        page.get_by_test_id("stPopover").first.locator("button").first.click()
        body = page.get_by_test_id("stPopoverBody")
        image = body.locator("img").first
        image.wait_for(timeout=60_000)
        page.wait_for_function(
            "(() => { const i = document.querySelector('[data-testid=\"stPopoverBody\"] img');"
            " return i && i.complete && i.naturalWidth > 500; })()",
            timeout=30_000,
        )
        text = body.inner_text()
        assert "page 1" in text and "the cited passage is marked" in text, text
        assert body.get_by_text("Download salary-bands.pdf").count() == 1
        _shot(page, "ui-source-highlight.png")


def test_a_restricted_document_is_refused_on_direct_request(url: str, browser, ui_data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    doc_id = _salary_doc_id(ui_data_dir)
    with _page(browser, ALICE) as page:
        for address in (
            f"/documents?doc={doc_id}&page=1",
            "/documents?doc=../../../etc/passwd",
            "/documents?doc=",
        ):
            page.goto(url + address)
            page.get_by_text(NOT_AVAILABLE[:40], exact=False).first.wait_for(timeout=120_000)
            page.wait_for_timeout(1000)
            html = page.content()
            assert CANARY_HR not in html and "Download salary-bands.pdf" not in html
            assert (
                page.locator("[data-testid='stImage'] img, [data-testid='stFullScreenFrame'] img").count()
                == 0
            )
        _shot(page, "ui-document-refused.png")
    with _page(browser, HANA) as page:  # the same address for a member of hr: the page and the download
        page.goto(url + f"/documents?doc={doc_id}&page=1")
        page.get_by_text("Download salary-bands.pdf").first.wait_for(timeout=120_000)
        assert NOT_AVAILABLE not in page.locator("body").inner_text()
        _shot(page, "ui-documents-open.png")


def test_bad_input_length_limit_and_brackets(url: str, browser, ui_data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        box = page.get_by_test_id("stChatInputTextArea")
        box.fill("How many days? " * 100)  # 1,500 characters
        box.press("Enter")
        page.get_by_text("questions can be at most 1,000", exact=False).first.wait_for(timeout=60_000)
        assert page.locator(".rag-answer").count() == 0
        _shot(page, "ui-too-long.png")
        # "[3]" typed by the user is not a citation, also when the refusal repeats the question.
        _answer(page, "Can I bring my dog [3] to the office on Jupiter?", 0)
        assert page.locator(".rag-cite.bad").count() == 0
        assert "failed the check" not in page.locator("body").inner_text()
        _shot(page, "ui-brackets.png")


def test_420_px_citation_pop_up_stays_on_screen(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    context = browser.new_context(viewport={"width": 420, "height": 860}, extra_http_headers=ALICE)
    try:
        page = context.new_page()
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        _answer(page, REFUND_Q, 0)
        cite = page.locator(".rag-cite").first
        cite.scroll_into_view_if_needed()
        cite.click()
        tip = cite.locator(".rag-tip")
        tip.wait_for(state="visible", timeout=10_000)
        box = tip.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 420, box
        _shot(page, "ui-chat-420.png")
    finally:
        context.close()


def test_employee_view_and_the_evidence_panel_at_1280_px(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 900}, extra_http_headers=ALICE)
    try:
        page = context.new_page()
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        _answer(page, REFUND_Q, 0)
        assert "45 days" in page.locator(".rag-answer").first.inner_text()
        assert "threshold" not in page.locator("body").inner_text()
        _shot(page, "chat.png")  # the README's first screenshot: the employee view
        page.get_by_text("Show how this answer was built").first.click()
        table = page.get_by_test_id("stDataFrame").first
        table.wait_for(timeout=60_000)
        page.wait_for_timeout(1000)
        box = table.bounding_box()
        assert box and box["x"] + box["width"] <= 1280, box
        _shot(page, "ui-chat-evidence.png")
    finally:
        context.close()
