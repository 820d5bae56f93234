"""Sign-in: identity from proxy headers or st.user, the demo picker only on loopback, admin-only pages.

Header parsing and the demo checks are plain functions; the pages are driven with Streamlit's AppTest (which
sends no HTTP headers, so in proxy mode it is always a session without a sign-in). The browser tests in
test_auth_browser.py send real headers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.runtime.context import StreamlitHeaders
from streamlit.testing.v1 import AppTest

from rag.config import load_settings
from tests.ui.conftest import APP, REPO
from ui.auth import (
    IdentityError,
    demo_refusal,
    groups_from_claim,
    identity_from_headers,
    identity_from_user_info,
    is_admin,
    is_loopback,
    parse_groups,
)
from ui.oidc import ERROR_PARAM, MESSAGES

TIMEOUT = 300


@pytest.fixture
def settings():  # type: ignore[no-untyped-def]
    return load_settings()


# ----------------------------------------------------------------------------- proxy headers
def test_identity_from_oauth2_proxy_headers(settings) -> None:  # type: ignore[no-untyped-def]
    identity = identity_from_headers(
        {
            "x-forwarded-user": " hana ",  # names are case-insensitive, values trimmed
            "X-Forwarded-Email": "hana@example.com",
            "X-Forwarded-Groups": "staff, hr,,  ",
        },
        settings,
    )
    assert identity is not None
    assert identity.principal.user == "hana"
    assert identity.principal.groups == frozenset({"staff", "hr"})
    assert identity.email == "hana@example.com" and identity.mode == "proxy"


def test_no_user_header_is_no_identity(settings) -> None:  # type: ignore[no-untyped-def]
    assert identity_from_headers({}, settings) is None
    assert identity_from_headers({"X-Forwarded-User": "   ", "X-Forwarded-Groups": "admin"}, settings) is None
    # Groups alone never sign anybody in.
    assert (
        identity_from_headers({"X-Forwarded-Groups": "admin", "X-Forwarded-Email": "a@b.c"}, settings) is None
    )


def test_a_user_without_groups_reads_public_documents_only(settings) -> None:  # type: ignore[no-untyped-def]
    identity = identity_from_headers({"X-Forwarded-User": "alice"}, settings)
    assert identity is not None and identity.principal.groups == frozenset()


def test_repeated_identity_headers_are_refused(settings) -> None:  # type: ignore[no-untyped-def]
    """A client's forged copy beside the proxy's: refuse rather than pick one (the proxy must strip it)."""
    forged = StreamlitHeaders(
        [("X-Forwarded-User", "alice"), ("X-Forwarded-Groups", "staff"), ("X-Forwarded-Groups", "hr,admin")]
    )
    with pytest.raises(IdentityError, match="2 X-Forwarded-Groups headers"):
        identity_from_headers(forged, settings)
    with pytest.raises(IdentityError):
        identity_from_headers({"X-Forwarded-User": ["alice", "olga"]}, settings)


def test_an_underscore_header_is_another_header(settings) -> None:  # type: ignore[no-untyped-def]
    """Some servers fold X_Forwarded_User into X-Forwarded-User; here it is a different header, ignored."""
    headers = StreamlitHeaders([("X_Forwarded_User", "olga"), ("X_Forwarded_Groups", "admin")])
    assert identity_from_headers(headers, settings) is None
    assert identity_from_headers({"X_Forwarded_User": "olga"}, settings) is None


@pytest.mark.parametrize("value", ["alice\r\nX-Forwarded-Groups: admin", "a\x00b", "x" * 9000])
def test_malformed_user_header_is_refused(settings, value: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(IdentityError):
        identity_from_headers({"X-Forwarded-User": value}, settings)


def test_header_names_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_AUTH_USER_HEADER", "X-Auth-Request-User")
    monkeypatch.setenv("RAG_AUTH_GROUPS_HEADER", "X-Auth-Request-Groups")
    settings = load_settings()
    headers = {
        "X-Auth-Request-User": "sam",
        "X-Auth-Request-Groups": "staff,security",
        "X-Forwarded-User": "olga",
    }
    identity = identity_from_headers(headers, settings)
    assert identity is not None and identity.principal.user == "sam"
    assert identity.principal.groups == frozenset({"staff", "security"})


def test_parse_groups() -> None:
    assert parse_groups(None) == frozenset()
    assert parse_groups("a,b , c,,") == frozenset({"a", "b", "c"})
    with pytest.raises(IdentityError):
        parse_groups(",".join(f"g{i}" for i in range(600)))


def test_admin_group_is_a_setting(monkeypatch: pytest.MonkeyPatch, settings) -> None:  # type: ignore[no-untyped-def]
    identity = identity_from_headers(
        {"X-Forwarded-User": "olga", "X-Forwarded-Groups": "staff,admin"}, settings
    )
    assert identity is not None and is_admin(identity.principal, settings)
    monkeypatch.setenv("RAG_ADMIN_GROUP", "rag-admins")
    assert not is_admin(identity.principal, load_settings())


# ----------------------------------------------------------------------------- OIDC claims
def test_identity_from_oidc_claims(monkeypatch: pytest.MonkeyPatch, settings) -> None:  # type: ignore[no-untyped-def]
    assert identity_from_user_info({}, settings) is None
    assert identity_from_user_info({"is_logged_in": False, "email": "a@b.c"}, settings) is None
    info = {"is_logged_in": True, "email": "hana@example.com", "sub": "123", "groups": ["staff", "hr"]}
    identity = identity_from_user_info(info, settings)
    assert identity is not None and identity.principal.user == "hana@example.com"
    assert identity.principal.groups == frozenset({"staff", "hr"}) and identity.mode == "oidc"
    monkeypatch.setenv("RAG_AUTH_GROUPS_CLAIM", "roles")
    identity = identity_from_user_info(
        {"is_logged_in": True, "sub": "u-1", "roles": "staff admin"}, load_settings()
    )
    assert identity is not None and identity.principal.user == "u-1"
    assert identity.principal.groups == frozenset({"staff", "admin"})


def test_groups_from_claim_shapes() -> None:
    assert groups_from_claim(None) == frozenset()
    assert groups_from_claim(["a", " b ", ""]) == frozenset({"a", "b"})
    assert groups_from_claim("a,b c") == frozenset({"a", "b", "c"})
    assert groups_from_claim({"nested": "dict"}) == frozenset()


# ----------------------------------------------------------------------------- demo mode
@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.1:8501", True),
        ("localhost:8501", True),
        ("[::1]:8501", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("", False),
        (None, False),
        ("10.0.0.5", False),
        ("bot.example.com", False),
    ],
)
def test_is_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_demo_is_refused_off_loopback() -> None:
    assert demo_refusal("127.0.0.1", {"Host": "127.0.0.1:8501"}) is None
    assert demo_refusal("localhost", {}) is None
    assert "0.0.0.0" in str(demo_refusal("0.0.0.0", {}))
    assert demo_refusal(None, {}) is not None  # Streamlit's default address is every interface
    assert "proxy" in str(demo_refusal("127.0.0.1", {"X-Forwarded-For": "203.0.113.9"}))
    assert demo_refusal("127.0.0.1", {"Host": "bot.example.com"}) is not None


def test_default_mode_is_proxy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A deployment that sets nothing gets the sign-in page, never the demo picker."""
    monkeypatch.delenv("RAG_AUTH", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env
    assert load_settings().auth == "proxy"
    assert "export RAG_AUTH=demo" in (REPO / "scripts" / "start.sh").read_text()


# ----------------------------------------------------------------------------- pages (AppTest)
def _app(monkeypatch: pytest.MonkeyPatch, data_dir: Path, mode: str, script: Path = APP) -> AppTest:
    monkeypatch.setenv("RAG_DATA_DIR", str(data_dir))
    monkeypatch.setenv("RAG_AUTH", mode)
    at = AppTest.from_file(str(script), default_timeout=TIMEOUT)
    at.run()
    return at


def _no_chat(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.chat_input, "a session that is not signed in must not get the chat box"
    assert not at.get("selectbox"), "no user picker outside demo mode"
    assert not at.get("html")  # no answer


def test_proxy_mode_without_headers_shows_only_a_sign_in_page(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = _app(monkeypatch, ui_data_dir, "proxy")
    _no_chat(at)
    assert [s.value for s in at.subheader] == ["Sign in to continue"]
    assert any("sign-in" in i.value for i in at.info)
    # A page opened on its own does not get past the sign-in either.
    for page in ("chat", "traces", "documents", "analytics", "evaluation"):
        at = _app(monkeypatch, ui_data_dir, "proxy", REPO / "ui" / "views" / f"{page}.py")
        _no_chat(at)
        assert not at.dataframe and not at.metric, page


def test_oidc_mode_not_logged_in_offers_sign_in_only(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = _app(monkeypatch, ui_data_dir, "oidc")
    _no_chat(at)
    assert [b.label for b in at.button] == ["Sign in"]
    # No [auth] section in .streamlit/secrets.toml here: clicking says what an administrator must configure.
    at.button(key="auth_sign_in").click().run()
    assert not at.chat_input
    assert any("secrets.toml" in e.value for e in at.error), [e.value for e in at.error]


def test_oidc_sign_in_page_says_why_a_sign_in_failed(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    """ui/oidc.py sends a failed sign-in back with ?sign_in_error=CODE: the page shows that code's fixed message,
    and nothing for a value it does not know (the address is the user's to edit)."""
    monkeypatch.setenv("RAG_DATA_DIR", str(ui_data_dir))
    monkeypatch.setenv("RAG_AUTH", "oidc")
    for code, message in MESSAGES.items():
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.query_params[ERROR_PARAM] = code
        at.run()
        _no_chat(at)
        assert [e.value for e in at.error] == [message]
        assert [b.label for b in at.button] == ["Sign in"]  # and the way to try again
    for forged in ("<b>you are hacked</b>", "refused ", "**Call 555-0100**"):
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.query_params[ERROR_PARAM] = forged
        at.run()
        _no_chat(at)
        assert not at.error, [e.value for e in at.error]
        assert forged not in str([m.value for m in at.markdown])


@pytest.fixture
def server_address() -> Iterator[None]:
    from streamlit import config

    before = config.get_option("server.address")
    yield
    config.set_option("server.address", before)


def test_demo_mode_is_labelled_and_refused_off_loopback(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path, server_address: None
) -> None:
    at = _app(monkeypatch, ui_data_dir, "demo")
    assert not at.exception
    assert any("Demo sign-in" in w.value for w in at.sidebar.warning)
    assert at.selectbox(key="user_select").label == "User (demo)"
    assert at.chat_input

    from streamlit import config

    config.set_option("server.address", "0.0.0.0")
    at = _app(monkeypatch, ui_data_dir, "demo")
    _no_chat(at)
    assert any("Demo sign-in is refused" in e.value for e in at.error)


def test_admin_pages_are_for_the_admin_group_only(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    for page in ("analytics", "evaluation"):
        at = _app(monkeypatch, ui_data_dir, "demo", REPO / "ui" / "views" / f"{page}.py")
        at.selectbox(key="user_select").select("alice").run()
        assert not at.exception
        assert any("for administrators" in e.value for e in at.error), page
        assert not at.metric and not at.tabs and not at.dataframe
        at.selectbox(key="user_select").select("olga").run()  # group admin
        assert not at.exception
        assert not any("for administrators" in e.value for e in at.error), page
    # Through the app: the admin pages are in olga's navigation, and not even in alice's.
    at = _app(monkeypatch, ui_data_dir, "demo")
    at.selectbox(key="user_select").select("olga").run()
    at.switch_page("views/analytics.py").run()
    assert [t.value for t in at.title] == ["Analytics"]
    at.selectbox(key="user_select").select("alice").run()  # on the analytics page, olga hands over to alice
    assert not at.exception and "Analytics" not in [t.value for t in at.title] and not at.metric
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("views/analytics.py")
