"""Sign-in, feedback and analytics in a real headless browser, the way a deployment serves them.

`rag ui` runs with RAG_AUTH=proxy; each Playwright context plays the authenticating proxy by sending
oauth2-proxy's headers (``extra_http_headers``: on every request, the WebSocket included). A second server runs
the localhost demo (RAG_AUTH=demo). Screenshots of the new pages go to docs/images/ when RAG_SCREENSHOTS=1 and
to test-artifacts/ always.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rag.tracestore import TraceFilter
from tests.ui.conftest import CANARY_HR, CANARY_SEC, REPO
from tests.ui.test_browser import (
    ARTIFACTS,
    CHROMIUM_ARGS,
    SALARY_Q,
    _serve,
    chromium,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.browser

DOCS_IMAGES = REPO / "docs" / "images"
REFUND_Q = "How many days does a customer have to return an item for a full refund?"
GAP_Q = "Can I bring my dog to the office?"
VIEWPORT = {"width": 1400, "height": 950}
GAP_QUESTIONS = [
    "Where can I park my car at the office?",
    "Is there staff parking?",
    "Are pets allowed at work?",
]


def _ask(page, question: str, answers_before: int) -> None:  # type: ignore[no-untyped-def]
    """Ask in the chat box and wait until the answer and the thumbs under it are drawn."""
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(question)
    box.press("Enter")
    page.wait_for_function(
        f"document.querySelectorAll('.rag-answer').length > {answers_before}", timeout=240_000
    )
    page.wait_for_function(
        "document.querySelectorAll('[aria-label=\"Thumbs down\"]').length >= "
        "document.querySelectorAll('.rag-answer').length",
        timeout=60_000,
    )
    page.wait_for_timeout(1500)


def _headers(user: str, groups: str, email: str | None = None) -> dict[str, str]:
    return {
        "X-Forwarded-User": user,
        "X-Forwarded-Email": email or f"{user}@example.com",
        "X-Forwarded-Groups": groups,
    }


def _shot(page, name: str, *, full_page: bool = False) -> None:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)
    if os.environ.get("RAG_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS_IMAGES / name), full_page=full_page)


@pytest.fixture(scope="module")
def proxy_url(ui_data_dir: Path, chromium: Path) -> Iterator[str]:  # noqa: F811
    with _serve(ui_data_dir, "proxy", "ui-server-proxy.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[object]:  # noqa: F811
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@contextmanager
def _page(browser, headers: dict[str, str] | None = None) -> Iterator[object]:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport=VIEWPORT, extra_http_headers=headers or {})
    try:
        yield context.new_page()
    finally:
        context.close()


def _wait_text(page, text: str, timeout: int = 120_000) -> None:  # type: ignore[no-untyped-def]
    page.get_by_text(text, exact=False).first.wait_for(timeout=timeout)


def _store(data_dir: Path):  # type: ignore[no-untyped-def]
    from rag.config import load_settings
    from rag.tracestore import TraceStore

    return TraceStore.from_settings(load_settings(data_dir=data_dir))


def test_no_identity_header_gets_a_sign_in_page_and_no_answer(proxy_url: str, browser) -> None:  # type: ignore[no-untyped-def]
    with _page(browser) as page:
        page.goto(proxy_url)
        _wait_text(page, "Sign in to continue")
        page.wait_for_timeout(1500)
        assert page.get_by_test_id("stChatInputTextArea").count() == 0
        assert page.locator(".rag-answer").count() == 0
        assert page.get_by_test_id("stSelectbox").count() == 0  # no picker to become someone
        _shot(page, "ui-sign-in.png")
        page.goto(proxy_url + "/traces")  # a bookmarked page does not get past it either
        _wait_text(page, "Sign in to continue")
        assert page.get_by_test_id("stDataFrame").count() == 0


def test_header_groups_filter_retrieval_and_cannot_be_chosen(proxy_url: str, browser) -> None:  # type: ignore[no-untyped-def]
    with _page(browser, _headers("hana", "staff,hr")) as page:
        page.goto(proxy_url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        sidebar = page.get_by_test_id("stSidebar").inner_text()
        assert "Signed in as hana" in sidebar and "Groups: hr, staff" in sidebar
        # Nothing in the page chooses a user or groups.
        for widget in ("stSelectbox", "stMultiSelect", "stTextInput"):
            assert page.get_by_test_id("stSidebar").get_by_test_id(widget).count() == 0, widget
        _ask(page, SALARY_Q, 0)
        assert "Salary Bands" in page.content()  # hr may read the salary bands
        _shot(page, "ui-proxy-hana.png")

    with _page(browser, _headers("alice", "staff")) as page:
        page.goto(proxy_url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        assert "Signed in as alice" in page.get_by_test_id("stSidebar").inner_text()
        _ask(page, SALARY_Q, 0)
        html, text = page.content(), page.locator("body").inner_text()
        assert "Salary Bands" not in html
        for canary in (CANARY_HR, CANARY_SEC):
            assert canary not in html and canary not in text


def test_feedback_is_stored_and_shown_in_the_trace_explorer(  # type: ignore[no-untyped-def]
    proxy_url: str, browser, ui_data_dir: Path
) -> None:
    with _page(browser, _headers("sam", "staff,security")) as page:
        page.goto(proxy_url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        _ask(page, GAP_Q, 0)
        tid = _store(ui_data_dir).traces.list(TraceFilter(user="sam"), limit=1)[0]["trace_id"]
        page.goto(proxy_url + "/traces")
        _wait_text(page, "Was this answer helpful?")
        page.get_by_label("Thumbs down").first.click()
        _wait_text(page, "What was wrong?", timeout=30_000)
        page.get_by_test_id("stButtonGroup").get_by_text("Did not answer", exact=True).click()
        _wait_text(page, "your feedback is saved", timeout=30_000)
        deadline = time.monotonic() + 30
        while (_store(ui_data_dir).feedback.get(tid) or {}).get("reason") != "did_not_answer":
            assert time.monotonic() < deadline, _store(ui_data_dir).feedback.get(tid)
            time.sleep(0.5)
        stored = _store(ui_data_dir).feedback.get(tid)
        assert (stored["user"], stored["rating"]) == ("sam", "down")
        page.wait_for_timeout(1500)
        table = page.get_by_test_id("stDataFrame").first
        table.wait_for(timeout=30_000)
        assert (
            "down: did not answer" in page.content()
        )  # the trace table's feedback column (canvas cell text)
        _shot(page, "ui-feedback.png")


def test_analytics_for_an_admin_and_refused_for_others(  # type: ignore[no-untyped-def]
    proxy_url: str, browser, ui_data_dir: Path
) -> None:
    with _page(browser, _headers("alice", "staff")) as page:
        page.goto(proxy_url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=180_000)
        for n, question in enumerate(GAP_QUESTIONS):  # questions the policies do not answer
            _ask(page, question, n)
        # alice finds none of the answers helpful: a thumbs down under each (the chat page's widget).
        for n in range(len(GAP_QUESTIONS)):
            page.get_by_label("Thumbs down").nth(n).click()
            page.wait_for_timeout(2500)
        rated = [
            r for r in _store(ui_data_dir).traces.list(TraceFilter(user="alice", feedback="down"), limit=10)
        ]
        assert {r["question"] for r in rated} >= set(GAP_QUESTIONS)
        page.goto(proxy_url + "/analytics")
        page.get_by_test_id("stSidebar").wait_for(timeout=120_000)
        page.wait_for_timeout(3000)
        body = page.locator("body").inner_text()
        assert "Knowledge gaps" not in body and "Abstention rate" not in body
        assert page.get_by_test_id("stSidebarNav").get_by_text("Analytics").count() == 0

    with _page(browser, _headers("olga", "staff,admin")) as page:
        page.goto(proxy_url + "/analytics")
        _wait_text(page, "Knowledge gaps", timeout=180_000)
        _wait_text(page, "Documents: cited most", timeout=120_000)
        page.wait_for_timeout(2500)
        body = page.locator("body").inner_text()
        assert "Abstention rate" in body and "Questions per day" in body
        assert page.get_by_test_id("stSidebarNav").get_by_text("Analytics").count() == 1
        assert page.get_by_test_id("stDownloadButton").count() >= 3
        gaps = _store(ui_data_dir).analytics.gap_questions()
        parking = [g for g in gaps if "park" in g["question"].lower()]
        assert len(parking) >= 2  # both parking questions abstained (or were rated down)
        assert "2 \u00d7 " in body or "3 \u00d7 " in body  # and they were grouped into one topic
        _shot(page, "ui-analytics.png")
        page.get_by_text("Knowledge gaps").first.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(800)
        _shot(page, "ui-analytics-gaps.png")


def test_demo_mode_is_labelled(ui_data_dir: Path, browser) -> None:  # type: ignore[no-untyped-def]
    with _serve(ui_data_dir, "demo", "ui-server-demo.log") as url, _page(browser) as page:
        page.goto(url)
        page.get_by_test_id("stSidebar").wait_for(timeout=120_000)
        _wait_text(page, "Demo sign-in")
        # the picker (a rerun can show the sidebar's previous picker beside the new one for a moment)
        page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").filter(
            has_text="User (demo)"
        ).first.wait_for(timeout=60_000)
        page.wait_for_timeout(1000)
        sidebar = page.get_by_test_id("stSidebar").inner_text()
        assert "anyone can pick any user" in sidebar and "User (demo)" in sidebar, sidebar
        _wait_text(page, "Policies you can ask about")  # the first screen, for the screenshot
        assert page.locator("body").inner_text().count("Demo sign-in") == 1  # one notice, beside the picker
        _shot(page, "ui-demo-sign-in.png")
