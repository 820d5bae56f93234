"""Every page, as an employee and as an admin, at 1280 and 420 px in a real headless browser: each one draws
without an error and nothing on it runs off the right edge of the window.

`rag ui` runs with RAG_AUTH=proxy (oauth2-proxy's identity headers on each request), as in test_auth_browser.py.
The screenshots (`ui-page-<page>-<width>.png`) go to test-artifacts/ and, with RAG_SCREENSHOTS=1, to docs/images/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui.test_auth_browser import _headers, _serve, _shot, browser  # noqa: F401  (fixture)
from tests.ui.test_browser import REFUND_Q, chromium  # noqa: F401  (fixture)

pytestmark = pytest.mark.browser

ALICE = _headers("alice", "staff")
OLGA = _headers("olga", "staff,admin")
WIDTHS = {"1280": {"width": 1280, "height": 1000}, "420": {"width": 420, "height": 1400}}
# page -> the text that says it has drawn
PAGES = {
    "chat": "Policies you can ask about",
    "traces": "Trace explorer",
    "documents": "Documents you may read",
    "analytics": "Analytics",
    "evaluation": "Evaluation",
}
# Elements wider than the window, leaving out what scrolls inside its own box by design (tables and charts draw
# on a canvas, code and a row of tabs scroll sideways) and the hidden sidebar.
OVERFLOW = """() => {
  const w = document.documentElement.clientWidth;
  const skip = '[data-testid="stSidebar"], [data-testid="stDataFrame"], [data-testid="stCode"], pre, '
    + '[data-testid="stVegaLiteChart"], .vega-embed, [role="tablist"]';
  return [...document.querySelectorAll('[data-testid="stMain"] *')]
    .filter(el => !el.closest(skip) && el.getClientRects().length)
    .filter(el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.right > w + 1; })
    .slice(0, 5).map(el => (el.getAttribute('data-testid') || el.tagName) + ': ' + (el.textContent || '').slice(0, 60));
}"""


@pytest.fixture(scope="module")
def url(ui_data_dir: Path, chromium: Path) -> Iterator[str]:  # noqa: F811
    with _serve(ui_data_dir, "proxy", "ui-server-page-tour.log") as served:
        yield served


def _visit(browser, url: str, headers: dict[str, str], page_name: str, width: str):  # type: ignore[no-untyped-def] # noqa: F811
    context = browser.new_context(viewport=WIDTHS[width], extra_http_headers=headers)
    page = context.new_page()
    page.goto(url if page_name == "chat" else f"{url}/{page_name}")  # the default page has no path of its own
    page.get_by_text(PAGES[page_name], exact=False).first.wait_for(timeout=240_000)
    page.get_by_text("Loading the models", exact=False).first.wait_for(state="detached", timeout=240_000)
    page.wait_for_timeout(1500)
    return context, page


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_draws_inside_the_window(url: str, browser, width: str) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    # one answer first, so the trace explorer and analytics have something to show
    context, page = _visit(browser, url, OLGA, "chat", width)
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(REFUND_Q)
    box.press("Enter")
    page.wait_for_function("document.querySelectorAll('.rag-answer').length > 0", timeout=240_000)
    context.close()
    for headers, pages in ((ALICE, ["chat", "traces", "documents"]), (OLGA, list(PAGES))):
        for name in pages:
            context, page = _visit(browser, url, headers, name, width)
            try:
                assert not page.get_by_test_id("stException").count(), f"{name} at {width} px raised"
                assert not page.evaluate(OVERFLOW), (name, width, page.evaluate(OVERFLOW))
                if headers is OLGA:
                    _shot(page, f"ui-page-{name}-{width}.png")
            finally:
                context.close()
