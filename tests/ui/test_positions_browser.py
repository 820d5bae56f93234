"""Issue 44 in a real browser: the chat and the trace explorer show each passage's true place in the prompt, and
an answer's label and text say what happened.

The leave question is the issue's: its rule (rerank 1) used to sit third, behind the Leave Policy's effective-date
line and its scope, while the evidence panel said "near an edge (position 3 of 13)". The laptop question was
labelled "Answers only part of the question" (one part, answered: the badge was withheld) and opened with
"However, ...". Same server and browser fixtures as test_browser.py.
"""

from __future__ import annotations

import pytest

from tests.ui.test_browser import (  # noqa: F401  (fixtures)
    ARTIFACTS,
    _ask,
    chromium,
    page,
    ui_url,
)

pytestmark = pytest.mark.browser

LAPTOP_Q = "What should I do if I lose my company laptop?"
LEAVE_Q = "How many days of annual leave do I get?"


def test_the_chat_and_the_trace_explorer_show_true_positions(ui_url: str, page) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    page.goto(ui_url)
    page.get_by_test_id("stChatInputTextArea").wait_for(timeout=120_000)

    # The laptop answer: labelled for what happened (answered, not confirmed), and not opening with "However".
    _ask(page, LAPTOP_Q, 0)
    label = page.locator(".rag-badge").first.inner_text()
    assert "only part of the question" not in label and "not confirmed" in label, label
    first_line = page.locator(".rag-answer").first.inner_text().strip().splitlines()[0]
    assert not first_line.startswith(("However", "This", "In addition", "Otherwise")), first_line

    # The leave answer with its evidence panel: the rule leads the prompt, and the note says so as it is.
    page.get_by_text("Show how this answer was built").first.click()
    _ask(page, LEAVE_Q, 1)
    assert "25 days" in page.locator(".rag-answer").nth(1).inner_text()
    page.get_by_test_id("stDataFrame").first.wait_for(timeout=60_000)
    body = page.locator("body").inner_text()
    assert "Best passage (rank 1) is first of" in body, body[-2000:]
    assert "near an edge" not in body
    page.screenshot(path=str(ARTIFACTS / "ui-chat-positions.png"), full_page=True)

    # The trace explorer opens the latest answer (the leave question): the same note, and the prompt the model
    # read, whose first passage is the rule and whose labels carry the document's order.
    page.goto(f"{ui_url}/traces")
    page.get_by_text("Trace explorer").first.wait_for(timeout=120_000)
    page.get_by_text("is first of", exact=False).first.wait_for(timeout=60_000)
    page.get_by_role("tab", name="Prompt").click()
    prompt = page.get_by_test_id("stCode").last
    prompt.wait_for(timeout=30_000)
    text = prompt.inner_text()
    evidence = text[text.index("<<<EVIDENCE") :]
    first = evidence.split("\n[2]")[0]
    assert first.splitlines()[1].startswith("[1] Leave Policy"), first
    assert "Full-time employees receive 25 days" in first
    assert "Effective date" not in first  # the metadata line never leads: its words are the label's
    assert "(continues [" in evidence or "continued in [" in evidence
    page.screenshot(path=str(ARTIFACTS / "ui-trace-positions.png"), full_page=True)
    assert not page.get_by_test_id("stException").count()
