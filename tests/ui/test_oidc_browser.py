"""OIDC sign-in (RAG_AUTH=oidc, Streamlit's st.login) end to end: Chromium signs in through a real OpenID provider.

The provider is oidc-provider (tests/oidc/provider.mjs, see tests/ui/oidc_provider.py) on a loopback port, with its
own login page, one client for the app (authorization code with PKCE) and users whose ID tokens carry a
``groups`` claim. `rag ui` runs with RAG_AUTH=oidc and an ``[auth]`` secrets file for that provider
(STREAMLIT_SECRETS_FILES), as docs/deployment.md tells an operator to set it up. Nothing is mocked: the browser
follows the redirects and types into the provider's page, and the app verifies the ID token it gets.

Checked: an HR user and a staff user each see only what their groups allow (the first screen, chat answers and
their citations, the Documents page, "Open the PDF"); a user whose token has no groups claim reads the documents
shared with everyone only; signing out ends the app's session and the provider's; an ID token that was tampered
with, names another issuer or is signed with a foreign key is refused with a message and signs nobody in; a
sign-in the user cancels says so; a provider that is down gives the sign-in page with a message, no traceback.
Screenshots go to test-artifacts/ (and docs/images/ with RAG_SCREENSHOTS=1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from urllib.parse import urljoin

import pytest

from tests.ui.conftest import CANARY_HR, CANARY_SEC
from tests.ui.oidc_provider import ATTACKS, USERS, Provider, run_provider, write_secrets
from tests.ui.support import free_port
from tests.ui.test_auth_browser import VIEWPORT, _serve, _shot, browser  # noqa: F401  (fixture)
from tests.ui.test_browser import ARTIFACTS, SALARY_Q, chromium  # noqa: F401  (fixture)
from tests.ui.test_browser import _ask as _ask_until_done
from ui.oidc import MESSAGES
from ui.sources import NOT_AVAILABLE

pytestmark = pytest.mark.browser

SALARY = "Salary Bands"
INCIDENT = "Security Incident Escalation Runbook"
IDENTITY_COOKIE = "_streamlit_user"
# What a traceback or a library's own error would put in the page.
TRACEBACK_WORDS = ("Traceback", "Exception", "authlib", "httpx", "Authentication error", "stack")


@dataclass
class OidcApp:
    """`rag ui` in OIDC mode and the provider it trusts."""

    url: str
    provider: Provider


@contextmanager
def _oidc_app(data_dir: Path, workdir: Path, name: str) -> Iterator[OidcApp]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with run_provider(f"{url}/oauth2callback", ARTIFACTS / f"oidc-provider-{name}.log", workdir) as provider:
        secrets_file = write_secrets(workdir / "secrets.toml", url, provider)
        with _serve(
            data_dir,
            "oidc",
            f"ui-server-oidc-{name}.log",
            port=port,
            env={"STREAMLIT_SECRETS_FILES": str(secrets_file)},
        ):
            yield OidcApp(url, provider)


@pytest.fixture(scope="module")
def app(ui_data_dir: Path, chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcApp]:  # noqa: F811
    with _oidc_app(ui_data_dir, tmp_path_factory.mktemp("oidc"), "main") as served:
        yield served


@contextmanager
def _context(browser) -> Iterator[object]:  # type: ignore[no-untyped-def]  # noqa: F811
    """A fresh browser profile: no cookies, for the app or the provider."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        yield context
    finally:
        context.close()


# ----------------------------------------------------------------------------- steps
def _open_sign_in(page, app: OidcApp, path: str = "") -> None:  # type: ignore[no-untyped-def]
    page.goto(app.url + path)
    page.get_by_text("Sign in to continue").first.wait_for(timeout=120_000)


def _click_sign_in(page, app: OidcApp) -> None:  # type: ignore[no-untyped-def]
    """The app's Sign in button: the browser leaves for the provider."""
    page.locator(".st-key-auth_sign_in button").click()
    page.wait_for_url(f"{app.provider.issuer}/**", timeout=60_000)


def _provider_login(page, user: str, password: str | None = None) -> None:  # type: ignore[no-untyped-def]
    """Type into the provider's own login page and submit it."""
    page.locator("#login").wait_for(timeout=60_000)
    page.locator("#login").fill(user)
    page.locator("#password").fill(password or str(USERS[user]["password"]))
    page.get_by_role("button", name="Sign in").click()


def _back_in_app(page, app: OidcApp) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_url(f"{app.url}/**", timeout=60_000)
    page.get_by_test_id("stSidebar").or_(page.get_by_text("Sign in to continue")).first.wait_for(
        timeout=120_000
    )


def _sign_in(page, app: OidcApp, user: str) -> None:  # type: ignore[no-untyped-def]
    """From the app's sign-in page, through the provider's login page, back to the app signed in as ``user``."""
    _open_sign_in(page, app)
    _click_sign_in(page, app)
    _provider_login(page, user)
    _back_in_app(page, app)
    page.get_by_test_id("stSidebar").get_by_text("Signed in as").wait_for(timeout=120_000)


def _sidebar(page) -> str:  # type: ignore[no-untyped-def]
    """The sidebar's text, without the invisible word joiners that keep an address from becoming a link."""
    return str(page.get_by_test_id("stSidebar").inner_text()).replace("\u2060", "")


def _groups(sidebar: str) -> str:
    """The groups the sidebar shows, as one line."""
    match = re.search(r"Groups: (.*)", sidebar)
    assert match, sidebar
    return match.group(1).strip()


def _identity_cookies(context) -> list[str]:  # type: ignore[no-untyped-def]
    return [c["name"] for c in context.cookies() if c["name"].startswith(IDENTITY_COOKIE)]


def _first_screen(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The titles the chat's first screen lists (policies the user can ask about)."""
    page.get_by_text("Policies you can ask about").first.wait_for(timeout=240_000)
    page.get_by_text("Loading the models", exact=False).first.wait_for(state="detached", timeout=240_000)
    page.wait_for_timeout(1000)
    titles = page.evaluate(
        "() => [...document.querySelectorAll('.rag-policies li')].map(li => li.textContent)"
    )
    return [str(t) for t in titles]


def _in_force_for(data_dir: Path, groups: frozenset[str]) -> set[str]:
    """Titles of the documents a member of ``groups`` may read that are in force today."""
    from rag.stores.index import IndexReader
    from rag.types import Principal
    from ui.sources import document_meta

    principal = Principal("probe", groups)
    titles = set()
    for doc_id, doc in IndexReader(data_dir).documents().items():
        meta = document_meta(doc_id, doc)
        if meta.readable_by(principal) and meta.valid_on(date.today()):
            titles.add(meta.title)
    return titles


def _ask(page, question: str) -> str:  # type: ignore[no-untyped-def]
    """Ask in the chat box; the answer's text once the run has ended."""
    before = page.locator(".rag-answer").count()
    _ask_until_done(page, question, before)
    return str(page.locator(".rag-answer").nth(before).inner_text())


def _salary_doc_id(data_dir: Path) -> str:
    from rag.stores.index import IndexReader

    return next(d for d, doc in IndexReader(data_dir).documents().items() if doc.get("title") == SALARY)


def _documents_page(page, app: OidcApp) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The Documents page: its metrics by label."""
    page.goto(app.url + "/documents")
    page.get_by_text("Documents you may read").first.wait_for(timeout=120_000)
    page.get_by_test_id("stDataFrame").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    metrics = page.get_by_test_id("stMetric")
    return {
        str(metrics.nth(i).get_by_test_id("stMetricLabel").inner_text()).strip(): str(
            metrics.nth(i).get_by_test_id("stMetricValue").inner_text()
        ).strip()
        for i in range(metrics.count())
    }


def _pdf_link(page, app: OidcApp, doc_id: str) -> str:  # type: ignore[no-untyped-def]
    """The "Open the PDF" address the Documents page gives for ``doc_id`` (fragment dropped)."""
    page.goto(app.url + f"/documents?doc={doc_id}&page=1")
    link = page.get_by_role("link", name="Open the PDF at page 1")
    link.wait_for(timeout=120_000)
    href = str(link.get_attribute("href") or "")
    assert href.startswith("/api/source/") and href.endswith("#page=1"), href
    return href.split("#")[0]


def _refused_in_page(page, app: OidcApp, message: str) -> None:  # type: ignore[no-untyped-def]
    """Back on the app's sign-in page with ``message``, nobody signed in."""
    _back_in_app(page, app)
    page.get_by_text(message[:60]).first.wait_for(timeout=60_000)
    page.wait_for_timeout(1000)
    body = str(page.locator("body").inner_text())
    assert "Sign in to continue" in body and "Signed in as" not in body, body
    assert page.get_by_test_id("stChatInputTextArea").count() == 0
    for word in TRACEBACK_WORDS:
        assert word not in body, (word, body)


# ----------------------------------------------------------------------------- who sees what
def test_an_hr_user_signs_in_at_the_provider_and_reads_hr_documents(  # type: ignore[no-untyped-def]
    app: OidcApp,
    browser,  # noqa: F811
    ui_data_dir: Path,
) -> None:
    with _context(browser) as context:
        page = context.new_page()
        _open_sign_in(page, app)
        assert page.get_by_test_id("stChatInputTextArea").count() == 0
        _click_sign_in(page, app)
        page.locator("#login").wait_for(timeout=60_000)
        assert "Test Identity Provider" in page.locator("body").inner_text()  # the provider's own page
        _shot(page, "ui-oidc-provider-login.png")
        _provider_login(page, "hana", "not-her-password")  # the provider checks the password
        page.get_by_text("Wrong user name or password").wait_for(timeout=30_000)
        assert page.url.startswith(app.provider.issuer) and not _identity_cookies(context)
        _provider_login(page, "hana")
        _back_in_app(page, app)
        page.get_by_test_id("stSidebar").get_by_text("Signed in as").wait_for(timeout=120_000)
        sidebar = _sidebar(page)
        assert "Signed in as hana@example.com" in sidebar and _groups(sidebar) == "hr, staff", sidebar
        # Nothing in the page picks a user or groups.
        for widget in ("stSelectbox", "stMultiSelect", "stTextInput"):
            assert page.get_by_test_id("stSidebar").get_by_test_id(widget).count() == 0, widget

        titles = _first_screen(page)
        assert set(titles) == _in_force_for(ui_data_dir, frozenset({"staff", "hr"})), titles
        assert SALARY in titles and INCIDENT not in titles
        _shot(page, "ui-oidc-hana.png")

        answer = _ask(page, SALARY_Q)
        assert "can't answer" not in answer and page.locator(".rag-cite").count() > 0, answer
        # A source under the answer: the salary bands, cited.
        assert page.get_by_role("button", name=re.compile(rf"\[\d+\] {SALARY}")).count() >= 1
        assert CANARY_SEC not in page.content()

        metrics = _documents_page(page, app)
        assert metrics["Hidden from you"] == "1", metrics  # the security runbook
        html = page.content()
        assert SALARY in html and INCIDENT not in html and CANARY_SEC not in html

        link = _pdf_link(page, app, _salary_doc_id(ui_data_dir))
        served = context.request.get(app.url + link)
        assert served.status == 200 and served.headers["content-type"] == "application/pdf"
        assert served.body().startswith(b"%PDF")


def test_a_staff_user_sees_no_hr_document_anywhere(app: OidcApp, browser, ui_data_dir: Path) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    salary_id = _salary_doc_id(ui_data_dir)
    with _context(browser) as hr:  # hana's own link to the salary bands, to try as alice below
        page = hr.new_page()
        _sign_in(page, app, "hana")
        hana_link = _pdf_link(page, app, salary_id)
        assert hr.request.get(app.url + hana_link).status == 200

    with _context(browser) as context:
        page = context.new_page()
        _sign_in(page, app, "alice")
        sidebar = _sidebar(page)
        assert "Signed in as alice@example.com" in sidebar and _groups(sidebar) == "staff", sidebar

        titles = _first_screen(page)
        assert set(titles) == _in_force_for(ui_data_dir, frozenset({"staff"})), titles
        assert SALARY not in titles and INCIDENT not in titles

        answer = _ask(page, SALARY_Q)
        assert "can't answer" in answer, answer
        html, text = page.content(), page.locator("body").inner_text()
        for secret in (SALARY, CANARY_HR, CANARY_SEC):
            assert secret not in html and secret not in text, secret

        page.goto(app.url + "/traces")  # her trace of that question: nothing of the salary bands either
        page.get_by_text("Was this answer helpful?").first.wait_for(timeout=120_000)
        page.wait_for_timeout(1500)
        html = page.content()
        assert SALARY_Q in html and SALARY not in html and CANARY_HR not in html

        metrics = _documents_page(page, app)
        assert metrics["Hidden from you"] == "2", metrics
        html = page.content()
        assert SALARY not in html and INCIDENT not in html and CANARY_HR not in html

        page.goto(app.url + f"/documents?doc={salary_id}&page=1")  # the address a citation of it would have
        page.get_by_text(NOT_AVAILABLE[:40], exact=False).first.wait_for(timeout=120_000)
        page.wait_for_timeout(1000)
        html = page.content()
        assert CANARY_HR not in html and "salary-bands.pdf" not in html
        assert page.get_by_role("link", name="Open the PDF at page 1").count() == 0

        # hana's link, pasted by alice: refused, and no file.
        response = context.request.get(app.url + hana_link)
        assert response.status == 403 and not response.body().startswith(b"%PDF")
        assert b"CANARY" not in response.body()

    with _context(browser) as nobody:  # the same link in a browser signed in as nobody
        response = nobody.request.get(app.url + hana_link)
        assert response.status == 403 and not response.body().startswith(b"%PDF")


def test_a_token_without_a_groups_claim_reads_what_everyone_may(  # type: ignore[no-untyped-def]
    app: OidcApp,
    browser,  # noqa: F811
    ui_data_dir: Path,
) -> None:
    with _context(browser) as context:
        page = context.new_page()
        _sign_in(page, app, "nora")
        sidebar = _sidebar(page)
        # Her address, Markdown and HTML characters and all, is shown as text.
        assert f"Signed in as {USERS['nora']['email']}" in sidebar, sidebar
        assert _groups(sidebar) == "(none)", sidebar
        titles = _first_screen(page)
        assert set(titles) == _in_force_for(ui_data_dir, frozenset()), titles
        assert SALARY not in titles and INCIDENT not in titles
        metrics = _documents_page(page, app)
        assert metrics["Hidden from you"] == "2", metrics
        assert SALARY not in page.content()


# ----------------------------------------------------------------------------- signing out
def test_signing_out_ends_the_session_here_and_at_the_provider(app: OidcApp, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _context(browser) as context:
        page = context.new_page()
        _sign_in(page, app, "hana")
        assert _identity_cookies(context)
        page.locator(".st-key-auth_sign_out button").click()
        # The provider asks to confirm (RP-initiated logout), then sends the browser back to the app.
        page.wait_for_url(f"{app.provider.issuer}/**", timeout=60_000)
        page.get_by_role("button", name="Yes, sign me out").click()
        _back_in_app(page, app)
        page.get_by_text("Sign in to continue").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1000)
        body = page.locator("body").inner_text()
        assert "Signed in as" not in body and page.get_by_test_id("stChatInputTextArea").count() == 0
        assert not any(m[:40] in body for m in MESSAGES.values()), body  # signing out is no failure
        assert not _identity_cookies(context), context.cookies()

        _open_sign_in(page, app, "/documents")  # no page opens without signing in again
        assert page.get_by_text("Documents you may read").count() == 0
        # The provider's session ended too: it asks for a password, it does not offer to continue as hana.
        _click_sign_in(page, app)
        page.locator("#password").wait_for(timeout=60_000)
        assert page.get_by_text("Continue as").count() == 0


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("attack", ATTACKS)
def test_an_id_token_that_fails_verification_signs_nobody_in(app: OidcApp, browser, attack: str) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    """The provider sends alice an ID token altered on the way (more groups, the signature kept), naming another
    issuer (signed with the provider's own key), or signed with a key the provider never published."""
    sent = f"token: sent a {attack} ID token"
    with _context(browser) as context:
        page = context.new_page()
        _open_sign_in(page, app)
        _click_sign_in(page, app)
        app.provider.attack_next_id_token(attack)
        _provider_login(page, "alice")
        _refused_in_page(page, app, MESSAGES["refused"])
        assert sent in app.provider.log.read_text()  # the bad token was the one the app got
        assert not _identity_cookies(context)
        if attack == ATTACKS[0]:
            _shot(page, "ui-oidc-refused.png")

        # The same person, with the token the provider really issues: signed in, with her own groups only.
        _click_sign_in(page, app)
        page.get_by_role("button", name="Continue as alice").click()
        _back_in_app(page, app)
        page.get_by_test_id("stSidebar").get_by_text("Signed in as").wait_for(timeout=120_000)
        sidebar = _sidebar(page)
        assert "Signed in as alice@example.com" in sidebar and _groups(sidebar) == "staff", sidebar


def test_a_sign_in_cancelled_at_the_provider_says_so(app: OidcApp, browser) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    with _context(browser) as context:
        page = context.new_page()
        _open_sign_in(page, app)
        _click_sign_in(page, app)
        page.get_by_role("link", name="Cancel").click()
        _refused_in_page(page, app, MESSAGES["denied"])
        assert not _identity_cookies(context)


def test_a_provider_that_is_down_gives_a_clear_page(  # type: ignore[no-untyped-def]
    ui_data_dir: Path,
    chromium: Path,  # noqa: F811
    browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Its own provider and app. The provider stops while the browser holds its code for the app (the provider's
    redirects are followed one by one, so it can be stopped before the last), then stays down for the next try."""
    with _oidc_app(ui_data_dir, tmp_path, "down") as down, _context(browser) as context:
        page = context.new_page()
        _open_sign_in(page, down)
        _click_sign_in(page, down)
        page.locator("#login").wait_for(timeout=60_000)
        action = str(page.locator("form").first.get_attribute("action"))
        user = USERS["hana"]
        step = context.request.post(
            urljoin(page.url, action),
            form={"login": "hana", "password": str(user["password"])},
            max_redirects=0,
        )
        while step.status in (302, 303) and not step.headers["location"].startswith(down.url):
            step = context.request.get(
                urljoin(down.provider.issuer, step.headers["location"]), max_redirects=0
            )
        callback = step.headers.get("location", "")
        assert callback.startswith(f"{down.url}/oauth2callback?") and "code=" in callback, (
            step.status,
            callback,
        )
        down.provider.stop()
        page.goto(callback)
        _refused_in_page(page, down, MESSAGES["unavailable"])
        assert not _identity_cookies(context)

        _open_sign_in(page, down)  # a fresh visit: no message yet
        assert page.get_by_text(MESSAGES["unavailable"][:60]).count() == 0
        page.locator(".st-key-auth_sign_in button").click()
        _refused_in_page(page, down, MESSAGES["unavailable"])
        _shot(page, "ui-oidc-provider-down.png")
