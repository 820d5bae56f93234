"""The chat's first screen in a real headless browser: the policies alice can ask about grouped by tag, examples
that ask themselves, no deployment details for employees (an admin has them), an over-long question kept in the
box with a counter, and a refusal said once.

`rag ui` runs with RAG_AUTH=proxy (each Playwright context sends oauth2-proxy's identity headers), as in
test_sources.py. Screenshots go to test-artifacts/ and, with RAG_SCREENSHOTS=1, to docs/images/.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from tests.ui.conftest import CANARY_HR
from tests.ui.test_auth_browser import _headers, _page, _serve, _shot, browser  # noqa: F401  (fixture)
from tests.ui.test_browser import ANSWER_TIMEOUT_MS, SALARY_Q, chromium  # noqa: F401  (fixture)

pytestmark = pytest.mark.browser

ALICE = _headers("alice", "staff")
OLGA = _headers("olga", "staff,admin")
LIMIT = 1000  # Settings.question_max_chars' default, which these servers run with


@pytest.fixture(scope="module")
def url(ui_data_dir: Path, chromium: Path) -> Iterator[str]:  # noqa: F811
    with _serve(ui_data_dir, "proxy", "ui-server-first-screen.log") as served:
        yield served


def _open(page, url: str) -> None:  # type: ignore[no-untyped-def]
    """The chat page with its first screen drawn and the models loaded."""
    page.goto(url)
    page.get_by_text("Policies you can ask about").first.wait_for(timeout=240_000)
    page.get_by_text("Loading the models", exact=False).first.wait_for(state="detached", timeout=240_000)
    page.wait_for_timeout(1000)


def _to_top(page) -> None:  # type: ignore[no-untyped-def]
    page.get_by_text("Policy support bot").first.scroll_into_view_if_needed()
    page.wait_for_timeout(300)


def _listed(page) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """The policy list as drawn: tag -> titles."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('.rag-policies section')].map(s =>
            [s.querySelector('h4').textContent, [...s.querySelectorAll('li')].map(li => li.textContent)]))"""
    )


def _in_force_for(data_dir: Path, groups: frozenset[str]) -> dict[str, dict]:  # type: ignore[type-arg]
    """Documents of the index a member of ``groups`` may read that are in force today, by title."""
    from rag.stores.index import IndexReader
    from rag.types import Principal
    from ui.sources import document_meta

    reader = IndexReader(data_dir)
    principal = Principal("probe", groups)
    out = {}
    for doc_id, doc in reader.documents().items():
        meta = document_meta(doc_id, doc)
        if meta.readable_by(principal) and meta.valid_on(date.today()):
            out[meta.title] = doc
    return out


def _examples(page):  # type: ignore[no-untyped-def]
    return page.locator("[class*='st-key-chat_example_'] button")


def _label(button) -> str:  # type: ignore[no-untyped-def]
    """A button's text without its icon's name."""
    return str(button.locator("[data-testid='stMarkdownContainer']").inner_text()).strip()


def test_alice_sees_her_policies_by_tag(url: str, browser, ui_data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        page.set_viewport_size({"width": 1280, "height": 900})
        _open(page, url)
        listed = _listed(page)
        titles = [t for ts in listed.values() for t in ts]
        expected = _in_force_for(ui_data_dir, frozenset({"staff"}))
        assert sorted(titles) == sorted(expected), listed  # each once: no group repeats a title
        assert "Salary Bands" not in titles and "Security Incident Escalation Runbook" not in titles
        assert titles.count("Travel Policy") == 1  # the expired 2022 edition is not listed
        assert not any("COVID" in t for t in titles)
        for tag, group in listed.items():  # every title sits under one of its own document's tags
            assert all(tag in expected[t]["tags"] for t in group), (tag, group)
        assert set(listed["hr"]) == {"Leave Policy", "Remote Work Policy"}

        examples = [_label(b) for b in _examples(page).all()]
        assert 3 <= len(examples) <= 4, examples
        body = page.locator("body").inner_text()
        for text in ("generation:", "Deployment details", "Data folder", "extractive", str(ui_data_dir)):
            assert text not in body, text
        assert "Demo sign-in" not in body  # proxy sign-in: no demo notice at all
        assert CANARY_HR not in page.content()
        _to_top(page)
        _shot(page, "ui-first-screen.png")


def test_the_first_screen_at_420_px(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    context = browser.new_context(viewport={"width": 420, "height": 860}, extra_http_headers=ALICE)
    try:
        page = context.new_page()
        _open(page, url)
        for button in _examples(page).all():  # wrapped, inside the screen
            box = button.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 420, box
        _shot(page, "ui-first-screen-420.png")
    finally:
        context.close()


def test_clicking_an_example_asks_it(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        _open(page, url)
        example = _examples(page).first
        question = _label(example)
        example.click()
        page.wait_for_function(
            "document.querySelectorAll('.rag-answer').length > 0", timeout=ANSWER_TIMEOUT_MS
        )
        page.wait_for_function(
            "!document.querySelector('[data-testid=\"stStatusWidget\"] button')", timeout=60_000
        )
        page.wait_for_timeout(1500)
        asked = page.locator("[data-testid='stChatMessage']").first.inner_text()
        assert question in asked, (question, asked)
        answer = page.locator(".rag-answer").first.inner_text()
        assert "can't answer" not in answer and page.locator(".rag-cite").count() > 0, answer
        assert page.get_by_text("Policies you can ask about").count() == 0  # the conversation took its place


def test_an_over_long_question_stays_in_the_box_with_a_counter(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        page.set_viewport_size({"width": 1280, "height": 900})
        _open(page, url)
        question = ("How many days of annual leave can I carry over into next year? " * 80)[:5000]
        box = page.get_by_test_id("stChatInputTextArea")
        box.fill(question)
        counter = page.get_by_test_id("ragCharCounter")
        counter.wait_for(timeout=10_000)
        assert "5,000 / 1,000" in counter.inner_text(), counter.inner_text()
        box.press("Enter")
        page.get_by_text(f"questions can be at most {LIMIT:,}", exact=False).first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        assert box.input_value() == question  # nothing lost
        assert counter.is_visible() and "5,000 / 1,000" in counter.inner_text()
        assert page.locator(".rag-answer").count() == 0
        _shot(page, "ui-first-screen-too-long.png")
        box.press("End")
        box.press_sequentially("??")
        page.wait_for_timeout(500)
        assert "5,002 / 1,000" in counter.inner_text()  # it counts as the user types


def test_a_refusal_says_it_once(url: str, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, ALICE) as page:
        _open(page, url)
        box = page.get_by_test_id("stChatInputTextArea")
        box.fill(SALARY_Q)  # hr's document: alice is refused
        box.press("Enter")
        page.wait_for_function(
            "document.querySelectorAll('.rag-answer').length > 0", timeout=ANSWER_TIMEOUT_MS
        )
        page.wait_for_function(
            "!document.querySelector('[data-testid=\"stStatusWidget\"] button')", timeout=60_000
        )
        page.wait_for_timeout(1500)
        body = page.locator("body").inner_text()
        assert body.count("can't answer") == 1, body
        assert "could not find" not in body and "rather not guess" not in body
        assert "You can ask" in body  # and where to ask instead, once
        assert CANARY_HR not in page.content()


def test_an_admin_has_the_deployment_details(url: str, browser, ui_data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _page(browser, OLGA) as page:
        _open(page, url)
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_text("Deployment details").click()
        sidebar.get_by_text("Data folder", exact=False).wait_for(timeout=10_000)
        details = sidebar.inner_text()
        assert str(ui_data_dir) in details and "Answer generation" in details, details
