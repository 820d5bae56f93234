"""The employee's chat in a real headless browser: the cold-start banner, sources that open at the passage (a wide
dialog scrolled to the marked passage, the passage as text at 420 px, "Open the PDF at page N" served to its owner
and refused to anyone else who has the address), citation previews inside the window at 1280 and 420 px, a
restricted document refused on direct request, the 1280 px evidence panel, and bad input (a question over the
length limit, "[3]" in a question).

`rag ui` runs with RAG_AUTH=proxy (each Playwright context sends oauth2-proxy's identity headers). Tests run in
file order: the first one meets the server cold. Screenshots go to test-artifacts/ and, with RAG_SCREENSHOTS=1,
to docs/images/.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.ui.conftest import CANARY_HR
from tests.ui.test_auth_browser import (  # noqa: F401  (fixture)
    DOCS_IMAGES,
    _headers,
    _page,
    _serve,
    _shot,
    browser,
)
from tests.ui.test_browser import ARTIFACTS, _ask, chromium  # noqa: F401  (fixture)
from ui.sources import NOT_AVAILABLE

pytestmark = pytest.mark.browser

HANA = _headers("hana", "staff,hr")
ALICE = _headers("alice", "staff")
TABLE_Q = "What is the salary band for a senior engineer?"
LEAVE_Q = "How many weeks of parental leave do birth parents get?"
REFUND_Q = "How many days does a customer have to return an item for a full refund?"


@pytest.fixture(scope="module")
def url(ui_data_dir: Path, chromium: Path) -> Iterator[str]:  # noqa: F811
    with _serve(ui_data_dir, "proxy", "ui-server-sources.log") as served:
        yield served


def _salary_doc_id(data_dir: Path) -> str:
    from rag.stores.index import IndexReader

    documents = IndexReader(data_dir).documents()
    return next(d for d, doc in documents.items() if doc.get("title") == "Salary Bands")


# From the first paint: whether the banner was drawn, and whether the chat box was there while it was (Streamlit
# may draw the banner a moment before the chat box; the note is final once both were seen, or the banner is gone).
COLD_START_OBSERVER = """
new MutationObserver((_, observer) => {
  const banner = !!document.body && document.body.innerText.includes('Loading the models');
  const box = !!document.querySelector('[data-testid="stChatInputTextArea"]');
  if (banner) {
    window.__banner = {seen: true, chat_box: !!(window.__banner && window.__banner.chat_box) || box};
    if (box) observer.disconnect();
  } else if (window.__banner !== undefined) {
    observer.disconnect();
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""
BANNER_NOTED = (
    "window.__banner !== undefined && (window.__banner.chat_box"
    " || !document.body.innerText.includes('Loading the models'))"
)


@contextmanager
def _first_answer(browser, headers: dict[str, str], viewport: dict[str, int], url: str, question: str):  # type: ignore[no-untyped-def] # noqa: F811
    """A page in a browser context of its own at ``viewport``, signed in by ``headers``, once the chat has
    answered ``question``; the context is closed afterwards."""
    context = browser.new_context(viewport=viewport, extra_http_headers=headers)
    try:
        page = context.new_page()
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        _ask(page, question, 0)
        yield page
    finally:
        context.close()


def test_cold_start_shows_the_chat_box_and_a_loading_banner(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        # The first visit loads the models (a few seconds now): the chat box and the banner are there
        # meanwhile. The banner can be gone before a poll sees it, so the page itself notes it
        # (COLD_START_OBSERVER).
        page.add_init_script(COLD_START_OBSERVER)
        page.goto(url)
        page.wait_for_function(BANNER_NOTED, timeout=120_000)
        if page.get_by_text("Loading the models", exact=False).count():
            _shot(page, "ui-cold-start.png")
        assert page.evaluate("window.__banner") == {"seen": True, "chat_box": True}
        page.get_by_text("Loading the models", exact=False).first.wait_for(state="detached", timeout=240_000)


def _open_source(page, title: str):  # type: ignore[no-untyped-def]
    """Click the source button under the answer that names ``title``; the dialog it opens."""
    page.get_by_role("button", name=re.compile(rf"\[\d+\] {re.escape(title)}")).first.click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for(timeout=60_000)
    return dialog


def _inside(inner: dict | None, outer: dict | None, slack: float = 1.0) -> bool:  # type: ignore[type-arg]
    return bool(
        inner
        and outer
        and inner["x"] >= outer["x"] - slack
        and inner["y"] >= outer["y"] - slack
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack
    )


def _window(page) -> dict:  # type: ignore[no-untyped-def, type-arg]
    size = page.viewport_size
    return {"x": 0, "y": 0, "width": size["width"], "height": size["height"]}


def _no_horizontal_overflow(page) -> bool:  # type: ignore[no-untyped-def]
    return bool(page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


def _source_shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    """What the window shows (a dialog or a pop-up over the page): test-artifacts/, and docs/images/ with
    RAG_SCREENSHOTS=1."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))
    if os.environ.get("RAG_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS_IMAGES / name))


def test_the_citation_dialog_opens_wide_at_the_highlighted_passage(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    # Parental leave is section 4 of the leave policy, in the lower part of its page.
    with _first_answer(browser, HANA, {"width": 1280, "height": 900}, url, LEAVE_Q) as page:
        assert "18 weeks" in page.locator(".rag-answer").first.inner_text()
        dialog = _open_source(page, "Leave Policy")
        page.wait_for_function(
            "(() => { const i = document.querySelector('[role=dialog] .rag-page img');"
            " return i && i.complete && i.naturalWidth > 500; })()",
            timeout=60_000,
        )
        page.wait_for_timeout(1500)  # the view scrolls to the mark once the dialog has its size
        text = dialog.inner_text()
        assert "page 1" in text and "the cited passage is marked" in text, text
        box = dialog.bounding_box()
        assert box and box["width"] >= 1000, box  # wide enough to read the page (st.dialog width="large")
        view = dialog.locator(".rag-view")
        marks = dialog.locator(".rag-hl")
        assert marks.count() >= 1
        # The first mark of the passage is in view without the user scrolling: inside the page view's visible box,
        # the dialog and the window; at the top of the page it would lie below the view's fold.
        mark = marks.first.bounding_box()
        shown = view.bounding_box()
        assert _inside(mark, shown) and _inside(mark, box) and _inside(mark, _window(page)), (
            mark,
            shown,
            box,
        )
        scrolled, height = view.evaluate("v => [v.scrollTop, v.clientHeight]")
        assert mark and shown and mark["y"] - shown["y"] + scrolled > height, (mark, shown, scrolled, height)
        assert dialog.get_by_text("Download leave.pdf").count() == 1
        _source_shot(page, "ui-source-dialog-1280.png")
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden", timeout=10_000)

        # The hr-only salary bands: "Open the PDF at page 1" is served to hana, its owner.
        _ask(page, TABLE_Q, 1)
        answer = page.locator(".rag-answer").nth(1).inner_text()
        assert "L5 Senior software engineer" in answer and "147,000" in answer, answer
        assert "sets the salary band" not in answer
        assert page.get_by_test_id("stDataFrame").count() == 0  # the employee view: no evidence table
        dialog = _open_source(page, "Salary Bands")
        link = dialog.get_by_role("link", name="Open the PDF at page 1")
        link.wait_for(timeout=60_000)
        href = link.get_attribute("href") or ""
        assert href.startswith("/api/source/") and href.endswith("#page=1"), href
        assert link.get_attribute("target") == "_blank"
        assert dialog.get_by_text("Download salary-bands.pdf").count() == 1
        served = page.context.request.get(url + href.split("#")[0])
        assert served.status == 200 and served.headers["content-type"] == "application/pdf"
        assert served.body().startswith(b"%PDF") and served.headers["content-disposition"].startswith(
            "inline"
        )

    # Refused to an outsider who has the very same address (pasted, not made for her), and to her variants of it.
    with _page(browser, ALICE) as page:
        for address in (
            href,
            href.split("?")[0],
            href.replace("link=", "link=x"),
            href.split("#")[0] + "&page=1",
        ):
            response = page.request.get(url + address.split("#")[0])
            assert response.status in (403, 404), (address, response.status)
            assert not response.body().startswith(b"%PDF") and b"CANARY" not in response.body()
        opened = page.goto(url + href)  # as a pasted link: a navigation, fragment and all
        assert opened is not None and opened.status == 403
        assert "not valid for you" in page.locator("body").inner_text()


def test_at_420_px_the_dialog_shows_the_passage_as_text(url: str, browser, ui_data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _first_answer(browser, ALICE, {"width": 420, "height": 860}, url, REFUND_Q) as page:
        dialog = _open_source(page, "Customer Refunds")
        quote = dialog.locator(".rag-quote")
        quote.wait_for(state="visible", timeout=60_000)
        page.wait_for_timeout(1000)
        # The passage as text, readable: full size, inside the window, no page image squeezed to 400 px.
        assert "45 days" in quote.inner_text()
        assert not dialog.locator(".rag-view").is_visible()
        assert _inside(quote.bounding_box(), _window(page)) and _no_horizontal_overflow(page)
        assert quote.evaluate("q => parseFloat(getComputedStyle(q).fontSize)") >= 15
        link = dialog.get_by_role("link", name="Open the PDF at page 1")
        assert _inside(link.bounding_box(), _window(page))
        href = link.get_attribute("href") or ""
        assert href.endswith("#page=1"), href
        _source_shot(page, "ui-source-dialog-420.png")
        # Her own link opens her document; the same link with the salary bands' id in it does not.
        own = page.context.request.get(url + href.split("#")[0])
        assert own.status == 200 and own.body().startswith(b"%PDF")
        doc_id = href.split("/api/source/", 1)[1].split("?", 1)[0]
        swapped = page.context.request.get(
            url + href.split("#")[0].replace(doc_id, _salary_doc_id(ui_data_dir))
        )
        assert swapped.status == 403 and not swapped.body().startswith(b"%PDF")


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
        _ask(page, "Can I bring my dog [3] to the office on Jupiter?", 0)
        assert page.locator(".rag-cite.bad").count() == 0
        assert "failed the check" not in page.locator("body").inner_text()
        _shot(page, "ui-brackets.png")


@pytest.mark.parametrize(("width", "height"), [(1280, 900), (420, 860)])
def test_citation_previews_stay_inside_the_window(url: str, browser, width: int, height: int) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _first_answer(browser, ALICE, {"width": width, "height": height}, url, REFUND_Q) as page:
        cites = page.locator(".rag-cite")
        assert cites.count() >= 1
        bottom = page.get_by_test_id("stBottom").bounding_box()
        floor = bottom["y"] if bottom else height
        for i in range(cites.count()):
            cite = cites.nth(i)
            cite.scroll_into_view_if_needed()
            if width < 640:
                cite.click()  # a tap
            else:
                cite.hover()
            tip = cite.locator(".rag-tip")
            tip.wait_for(state="visible", timeout=10_000)
            page.wait_for_timeout(300)
            box = tip.bounding_box()
            # Inside the window (no part off the right edge or below the bottom) and clear of the chat box.
            assert _inside(box, _window(page)), (i, box)
            assert box and box["y"] + box["height"] <= floor + 1, (i, box, floor)
            assert "Refunds" in tip.inner_text()
            assert _no_horizontal_overflow(page)
            if (
                i == 0
            ):  # at 1280 px the first [n] ends a long line: its pop-up must not run off the right edge
                _source_shot(page, f"ui-source-preview-{width}.png")
                if width < 640:
                    _shot(page, "ui-chat-420.png")
            page.mouse.click(2, height // 2)  # away: the pop-up goes


def test_employee_view_and_the_evidence_panel_at_1280_px(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _first_answer(browser, ALICE, {"width": 1280, "height": 900}, url, REFUND_Q) as page:
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
