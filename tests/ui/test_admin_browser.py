"""The admin's pages in a real headless browser: nothing a user typed or a document holds is rendered as markup,
and Analytics counts refusals for access apart from knowledge gaps and tells same-title documents apart.

`rag ui` runs with RAG_AUTH=proxy (as in test_auth_browser.py) over a copy of the sample corpus. A tiny HTTP
server stands for an outside host: the planted question, the planted document and a down-vote's comment carry
Markdown, HTML and image links to it, and not one request may reach it from any page. Screenshots of the trace
explorer and Analytics at 1280 and 420 px go to test-artifacts/ (and docs/images/ with RAG_SCREENSHOTS=1).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rag.tracestore import TraceFilter
from tests.ui.support import free_port
from tests.ui.test_auth_browser import (  # noqa: F401  (browser: a fixture)
    _ask,
    _headers,
    _serve,
    _shot,
    _store,
    _wait_text,
    browser,
)
from tests.ui.test_browser import (
    chromium,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.browser

SALARY_Q = "What is the salary band for a senior engineer?"
MEALS_Q = "What is the daily meal allowance for international trips?"
GAP_Q = "Can I bring my dog to the office?"
ADMIN = _headers("olga", "staff,admin")
WIDE = {"width": 1280, "height": 1900}
NARROW = {"width": 420, "height": 2600}
# A 1x1 transparent PNG: what the outside host answers, should anything ask.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


class _Host(ThreadingHTTPServer):
    hits: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Host

    def do_GET(self) -> None:  # noqa: N802  (the stdlib's name)
        self.server.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()
        self.wfile.write(PNG)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def outside() -> Iterator[_Host]:
    """The host planted links point at; ``hits`` lists every path requested from it."""
    host = _Host(("127.0.0.1", free_port()), _Handler)
    host.hits = []
    thread = threading.Thread(target=host.serve_forever, daemon=True)
    thread.start()
    try:
        yield host
    finally:
        host.shutdown()
        host.server_close()


def plant(host: _Host, where: str) -> str:
    """Markdown, HTML, an image, a bare URL, a www. name, an address and a shortcode, all marked with ``where``."""
    base = f"http://127.0.0.1:{host.server_address[1]}"
    return (
        f"**{where} bold** [{where} link]({base}/{where}-link) ![{where} image]({base}/{where}-image.png) "
        f'<b>{where} tag</b> <img src="{base}/{where}-html.png"> {base}/{where}-bare '
        f"www.{where}.plant.example.com {where}@plant.example.com :material/bug_report:"
    )


@pytest.fixture(scope="module")
def data_dir(ui_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the UI's sample data: these tests add a document and traces the other UI tests must not see."""
    copy = tmp_path_factory.mktemp("admin-data") / "data"
    shutil.copytree(ui_data_dir, copy)
    return copy


@pytest.fixture(scope="module")
def url(data_dir: Path, chromium: Path) -> Iterator[str]:  # noqa: F811
    with _serve(data_dir, "proxy", "ui-server-admin.log") as served:
        yield served


def _open(browser, headers: dict[str, str], viewport: dict[str, int] = WIDE):  # type: ignore[no-untyped-def] # noqa: F811
    context = browser.new_context(viewport=viewport, extra_http_headers=headers, accept_downloads=True)
    return context, context.new_page()


def _settled(page, timeout: int = 240_000) -> None:  # type: ignore[no-untyped-def]
    """Until the script run has ended (no Stop button in the status widget), and a moment to draw."""
    page.wait_for_timeout(800)
    page.wait_for_function(
        "!document.querySelector('[data-testid=\"stStatusWidget\"] button')", timeout=timeout
    )
    page.wait_for_timeout(1200)


def _go(page, url: str, path: str, marker: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{url}/{path}")
    _wait_text(page, marker, timeout=240_000)
    _settled(page)


def _choose(page, label: str, *parts: str) -> None:  # type: ignore[no-untyped-def]
    """Pick the first option of the selectbox labelled ``label`` whose text holds every one of ``parts``."""
    box = page.get_by_test_id("stSelectbox").filter(has_text=label).first
    box.locator("input").click()
    box.locator("input").fill(parts[-1])  # the list is virtual: filter it, so the option is drawn
    option = page.get_by_role("option")
    for part in parts:
        option = option.filter(has_text=part)
    option.first.click()
    _settled(page)


# Elements that markup would have made: a link or image to the outside host, an element whose whole text is a
# planted span (emphasis, a tag, a link's text), a drawn shortcode icon.
_RENDERED = """([host, marks]) => {
  const found = [];
  for (const el of document.querySelectorAll("[href], [src], [srcset], [poster], [data]")) {
    for (const attr of ["href", "src", "srcset", "poster", "data"]) {
      const value = el.getAttribute(attr) || "";
      if (value.includes(host) || value.includes("plant.example.com")) found.push(`${el.tagName} ${attr}=${value}`);
    }
  }
  for (const el of document.querySelectorAll("strong, b, em, i, del, a, h1, h2, h3, h4, h5, h6, li, blockquote")) {
    const text = (el.textContent || "").trim();
    if (marks.includes(text)) found.push(`<${el.tagName.toLowerCase()}>${text}`);
  }
  for (const el of document.querySelectorAll("[aria-label='bug_report icon']")) found.push("icon bug_report");
  return found;
}"""


def _marks(places: list[str]) -> list[str]:
    return [f"{w} {kind}" for w in places for kind in ("bold", "tag", "link", "image")]


def _assert_plain(page, host: _Host, where: str) -> None:  # type: ignore[no-untyped-def]
    found = page.evaluate(
        _RENDERED, [f"127.0.0.1:{host.server_address[1]}", _marks(["q", "doc", "fb", "title"])]
    )
    assert found == [], f"{where}: rendered markup {found}"


def _planted_document(folder: Path, host: _Host) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = folder / "bicycle-parking.txt"
    doc.write_text(
        "Bicycle parking\n\n"
        "The bicycle cage is in the basement of building B, next to the goods lift. "
        f"{plant(host, 'doc')}\n\n"
        "Badge access to the bicycle cage is needed after 8 pm; ask reception for a badge.\n",
        encoding="utf-8",
    )
    title = (
        f"Bicycle Parking **title bold** [title link](http://127.0.0.1:{host.server_address[1]}/title-link)"
    )
    meta = {"title": title, "tags": ["facilities"]}
    (folder / "bicycle-parking.txt.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


def _refusal_conversation(store, trace_id: str, host: _Host) -> str:  # type: ignore[no-untyped-def]
    """A stored conversation of olga's whose answer is a refusal that quotes planted text back wherever a
    refusal can (the reason, an intent not addressed, the language model's error): a real trace, changed."""
    trace = store.traces.get(trace_id)
    question = f"How many unicorns may I keep at my desk? {plant(host, 'q')}"
    reason = f'I can\'t answer this from the policies you have access to: I found no passage that answers "{question}".'
    intent = {"index": 0, "text": question, "addressed": False, "coverage": 0.0, "sentence": ""}
    trace.pop("created_at")  # stored as now: the newest answer
    trace.update(
        trace_id=uuid.uuid4().hex,
        question=question,
        answer=reason,
        abstained=True,
        abstain_reason=reason,
        citations=[],
        answer_check={"complete": False, "intents": [intent]},
        error=f"LLM timed out near {plant(host, 'q')}",
    )
    session = store.sessions.create("olga", question[:60])
    store.sessions.add_turn(session, "user", question)
    store.sessions.add_turn(session, "assistant", reason, trace_id=store.traces.save(trace))
    return session


def _csv_of(page, button: str) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    with page.expect_download() as info:
        page.get_by_test_id("stDownloadButton").filter(has_text=button).first.click()
    return list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text(encoding="utf-8"))))


def test_analytics_counts_refusals_apart_and_tells_documents_apart(url: str, browser, data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    context, page = _open(browser, _headers("alice", "staff"))
    try:
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=240_000)
        for n, question in enumerate((MEALS_Q, SALARY_Q, GAP_Q)):
            _ask(page, question, n)
    finally:
        context.close()
    store = _store(data_dir)
    asked = {r["question"]: r for r in store.traces.list(TraceFilter(user="alice"), limit=20)}
    assert asked[SALARY_Q]["abstained"] and not asked[MEALS_Q]["abstained"]
    gap = asked[GAP_Q]["trace_id"]
    store.feedback.set(gap, "alice", "down", reason="did_not_answer")  # a gap, abstained or not
    stored = store.traces.count()

    for viewport, suffix in ((WIDE, "1280"), (NARROW, "420")):
        context, page = _open(browser, ADMIN, viewport)
        try:
            _go(page, url, "analytics", "Documents: cited most")
            body = page.locator("body").inner_text()
            assert "Refused for access" in body and "Questions refused for access" in body
            if suffix == "1280":
                refused = _csv_of(page, "Refused for access (CSV)")
                salary = [r for r in refused if r["question"] == SALARY_Q]
                assert salary and salary[0]["user"] == "alice" and salary[0]["groups"] == "staff"
                assert "Salary Bands" in salary[0]["answered by"]
                kinds = {r["question"]: r["kind"] for r in _csv_of(page, "Every such question (CSV)")}
                assert kinds[SALARY_Q] == "refused for access" and kinds[GAP_Q] != "refused for access"
                topics = " ".join(r["topic"] + " " + r["examples"] for r in _csv_of(page, "Topics (CSV)"))
                assert GAP_Q in topics and SALARY_Q not in topics  # a refusal is not a knowledge gap
                documents = _csv_of(page, "Documents (CSV)")
                travel = {r["file"]: r for r in documents if r["title"] == "Travel Policy"}
                assert set(travel) == {"travel-policy.pdf", "travel-policy-2022.pdf"}
                assert travel["travel-policy-2022.pdf"]["status"] == "expired"
                assert travel["travel-policy-2022.pdf"]["document"].endswith("expired")
                assert int(travel["travel-policy.pdf"]["answers citing it"]) >= 1
                assert travel["travel-policy.pdf"]["document"] != travel["travel-policy-2022.pdf"]["document"]
                assert len({r["document"] for r in documents}) == len(documents)
            _settled(page)
            page.get_by_text("Refused for access", exact=True).first.evaluate(
                "e => e.scrollIntoView({block: 'start'})"
            )
            page.wait_for_timeout(600)
            _shot(page, f"ui-admin-analytics-{suffix}.png")
            assert not page.get_by_test_id("stException").count()

            _go(page, url, "traces", "Open a trace")
            _choose(page, "Open a trace", "alice", "daily meal allowance")
            _wait_text(page, "Final chunk order")
            _settled(page)
            body = page.locator("body").inner_text()
            assert "chosen (k=" in body and "passage(s)" not in body
            page.get_by_text("Question:", exact=False).first.evaluate(
                "e => e.scrollIntoView({block: 'start'})"
            )
            page.wait_for_timeout(600)
            _shot(page, f"ui-admin-traces-{suffix}.png")
        finally:
            context.close()
    assert store.traces.count() == stored  # the analytics check asks again without storing anything


def test_planted_markup_is_text_on_every_page(  # type: ignore[no-untyped-def]
    url: str,
    browser,  # noqa: F811
    data_dir: Path,
    outside: _Host,
    tmp_path: Path,
    embedder,
) -> None:
    from ingest.indexer import ingest
    from rag.config import load_settings

    report = ingest(
        [str(_planted_document(tmp_path / "planted", outside))],
        load_settings(data_dir=data_dir),
        embedder=embedder,
    )
    assert report.ok and report.published, report.to_json()
    question = f"Where is the bicycle cage? {plant(outside, 'q')}"
    host = f"127.0.0.1:{outside.server_address[1]}"
    requests: list[str] = []

    # tom (staff) asks, and rates the answer down with a comment that carries markup too
    context, page = _open(browser, _headers("tom", "staff"))
    page.on("request", lambda r: requests.append(r.url) if host in r.url else None)
    try:
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=240_000)
        _ask(page, question, 0)
        _assert_plain(page, outside, "tom's chat")
    finally:
        context.close()
    store = _store(data_dir)
    tom = store.traces.list(TraceFilter(user="tom"), limit=1)[0]
    assert tom["question"] == question
    assert "bicycle-parking" in {
        e["doc_id"].rsplit("-", 1)[0] for e in store.traces.get(tom["trace_id"])["evidence"]
    }
    store.feedback.set(tom["trace_id"], "tom", "down", reason="other", comment=plant(outside, "fb"))

    context, page = _open(browser, ADMIN)
    page.on("request", lambda r: requests.append(r.url) if host in r.url else None)
    try:
        # Chat, with the evidence panel admins always see; then the conversation reopened from the sidebar
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=240_000)
        _assert_plain(page, outside, "the first screen")
        _ask(page, question, 0)
        _settled(page)
        _assert_plain(page, outside, "chat")
        assert "**q bold**" in page.locator("body").inner_text()  # shown as typed, asterisks and all
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=240_000)
        _settled(page)
        _choose(page, "Reopen a conversation", "bicycle cage")
        page.locator(".rag-answer").first.wait_for(timeout=60_000)
        _settled(page)
        _assert_plain(page, outside, "a reopened conversation")
        # a refusal quotes the question back: its reason, the parts not addressed, a model's error message
        _refusal_conversation(
            store, store.traces.list(TraceFilter(user="olga"), limit=1)[0]["trace_id"], outside
        )
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=240_000)
        _settled(page)
        _choose(page, "Reopen a conversation", "unicorns")
        _wait_text(page, "Why it abstained")
        _settled(page)
        _assert_plain(page, outside, "a reopened refusal")

        # Documents: the list and the planted document opened
        _go(page, url, "documents", "Open a document")
        _assert_plain(page, outside, "documents")
        _choose(page, "Document", "Bicycle Parking")
        _wait_text(page, "bicycle cage is in the basement")
        _assert_plain(page, outside, "the planted document opened")

        # Trace explorer: tom's trace (his comment in the feedback line), every tab, and a replay
        _go(page, url, "traces", "Open a trace")
        _choose(page, "Open a trace", "tom", "bicycle cage")
        _wait_text(page, "Feedback from tom")
        _settled(page)
        _assert_plain(page, outside, "trace explorer")
        text = page.locator("body").inner_text()
        assert "**q bold**" in text and "**fb bold**" in text  # shown, as written
        tabs = page.get_by_role("tab")
        for i in range(tabs.count()):
            name = tabs.nth(i).inner_text()
            tabs.nth(i).click()
            page.wait_for_timeout(900)
            _assert_plain(page, outside, f"trace explorer tab {name!r}")
        page.get_by_role("button", name="Replay").first.click()
        _wait_text(page, "Replay (", timeout=240_000)
        _settled(page)
        _assert_plain(page, outside, "trace replay")
        _choose(page, "Open a trace", "olga", "unicorns")
        _wait_text(page, "Abstained:")
        _assert_plain(page, outside, "a refusal in the trace explorer")

        # Analytics: the gap topics opened (their labels and examples are tom's question)
        _go(page, url, "analytics", "Documents: cited most")
        for summary in page.get_by_test_id("stExpander").locator("summary").all():
            summary.click()
            page.wait_for_timeout(300)
        _assert_plain(page, outside, "analytics")

        _go(page, url, "evaluation", "Load a saved sweep")
        _assert_plain(page, outside, "evaluation")
        assert not page.get_by_test_id("stException").count()
    finally:
        context.close()
    assert requests == [] and outside.hits == [], (requests, outside.hits)
