"""OIDC sign-in where it meets Streamlit's routes (ui/oidc.py): the middleware that turns a failed sign-in into the
sign-in page with a message, and the identity read from Streamlit's signed cookie. Real HTTP through Starlette's
test client, with small stand-ins for Streamlit's login and callback routes that answer as Streamlit's do; the
provider itself is exercised for real in test_oidc_browser.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient
from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

from rag.config import load_settings
from ui import oidc

SECRET = "cookie-secret-for-tests-0123456789"
ORIGIN = "http://127.0.0.1:8501"


# ----------------------------------------------------------------------------- the messages
def test_only_known_codes_have_a_message() -> None:
    assert set(oidc.MESSAGES) == {"refused", "denied", "unavailable"}
    assert oidc.message_for("refused") == oidc.MESSAGES["refused"]
    for other in ("", "<script>alert(1)</script>", "Refused", None, ["refused"], 1):
        assert oidc.message_for(other) is None, other
    for message in oidc.MESSAGES.values():  # plain sentences: nothing in them is markup
        assert not set(message) & set("<>[]*_`#"), message


# ----------------------------------------------------------------------------- reading Streamlit's answers
def test_an_identity_cookie_set_is_a_sign_in_and_a_cleared_one_is_not() -> None:
    signed = (b"set-cookie", b"_streamlit_user=eyJhIjoxfQ.sig; HttpOnly; Path=/; SameSite=lax")
    cleared = (b"set-cookie", b'_streamlit_user=""; expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=0; Path=/')
    tokens = (b"set-cookie", b"_streamlit_user_tokens=abc; Path=/")
    assert oidc.sets_identity([signed])
    assert oidc.sets_identity([(b"Set-Cookie", signed[1]), (b"location", b"/")])
    assert not oidc.sets_identity([cleared])
    assert not oidc.sets_identity([tokens])  # another cookie whose name starts the same
    assert not oidc.sets_identity([(b"location", b"/"), (b"x-streamlit", b"_streamlit_user=1")])


def test_a_callback_is_judged_by_what_the_provider_sent() -> None:
    assert oidc.callback_failure({"error": ["access_denied"], "state": ["s"]}) == "denied"
    assert oidc.callback_failure({"code": ["c"], "state": ["s"]}) == "refused"
    assert oidc.callback_failure({}) is None  # the provider's way back after signing out
    assert oidc.callback_failure({"state": ["s"]}) is None


# ----------------------------------------------------------------------------- the middleware
def _streamlit_like(login_status: int = 302) -> list[Route]:
    """Routes that answer as Streamlit's: the callback redirects to the app and sets the identity cookie only when
    the provider sent code "good"; a failure clears it."""

    def login(request: Request) -> Response:
        if login_status >= 400:
            return PlainTextResponse("Authentication error", status_code=login_status)
        return RedirectResponse("http://id.example/auth?client_id=x", status_code=302)

    def callback(request: Request) -> Response:
        response = RedirectResponse("/", status_code=302)
        if request.query_params.get("code") == "good":
            response.set_cookie("_streamlit_user", "signed-claims", httponly=True)
        else:
            response.delete_cookie("_streamlit_user")
        return response

    def page(request: Request) -> Response:
        return PlainTextResponse("the app")

    return [Route("/auth/login", login), Route("/oauth2callback", callback), Route("/", page)]


def _client(*, reachable: bool = True, login_status: int = 302, base: str = "") -> TestClient:
    async def probe(url: str | None) -> bool:
        assert url == "http://id.example/.well-known/openid-configuration"
        return reachable

    routes = _streamlit_like(login_status)
    if base:
        routes = [Route(f"/{base}{r.path}", r.endpoint) for r in routes]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                oidc.SignInErrors,
                base_url=lambda: base,
                metadata_url=lambda: "http://id.example/.well-known/openid-configuration",
                reachable=probe,
            )
        ],
    )
    return TestClient(app, base_url=ORIGIN, follow_redirects=False)


def test_a_good_sign_in_passes_through_untouched() -> None:
    response = _client().get("/oauth2callback?code=good&state=s")
    assert response.status_code == 302 and response.headers["location"] == "/"
    assert response.cookies.get("_streamlit_user") == "signed-claims"


@pytest.mark.parametrize(
    ("query", "reachable", "code"),
    [
        ("code=forged&state=s", True, "refused"),  # the token exchange or the ID token failed a check
        ("code=forged&state=s", False, "unavailable"),  # ... because the provider is down
        ("error=access_denied&error_description=no&state=s", True, "denied"),
    ],
)
def test_a_failed_callback_ends_on_the_sign_in_page_with_its_code(
    query: str, reachable: bool, code: str
) -> None:
    response = _client(reachable=reachable).get(f"/oauth2callback?{query}")
    assert response.status_code == 302, response.text
    assert response.headers["location"] == f"/?sign_in_error={code}"
    assert response.headers["cache-control"] == "no-store" and response.content == b""
    # Streamlit's own cookie clearing is kept.
    assert any(c.startswith("_streamlit_user=") for c in response.headers.get_list("set-cookie"))


def test_a_return_from_signing_out_is_no_failure() -> None:
    response = _client(reachable=False).get("/oauth2callback")
    assert response.status_code == 302 and response.headers["location"] == "/"


def test_a_login_that_cannot_reach_the_provider_says_so() -> None:
    response = _client(login_status=400).get("/auth/login?provider=t")
    assert response.status_code == 302 and response.headers["location"] == "/?sign_in_error=unavailable"
    assert b"Authentication error" not in response.content
    ok = _client().get("/auth/login?provider=t")
    assert ok.status_code == 302 and ok.headers["location"].startswith("http://id.example/")


def test_the_middleware_follows_the_base_path_and_leaves_other_routes_alone() -> None:
    client = _client(base="bot", login_status=400)
    response = client.get("/bot/oauth2callback?code=forged&state=s")
    assert response.headers["location"] == "/bot/?sign_in_error=refused"
    assert client.get("/bot/auth/login").headers["location"] == "/bot/?sign_in_error=unavailable"
    assert client.get("/bot/").text == "the app"


# ----------------------------------------------------------------------------- the identity cookie
def _cookie(claims: dict[str, Any], *, secret: str = SECRET, name: str = "_streamlit_user") -> str:
    return create_signed_value(secret, name, json.dumps(claims)).decode()


CLAIMS = {
    "email": "hana@example.com",
    "sub": "hana",
    "groups": ["staff", "hr"],
    "origin": ORIGIN,
    "is_logged_in": True,
    "provider": "default",
}


def test_the_identity_comes_from_the_signed_cookie_only() -> None:
    settings = load_settings(auth="oidc")
    identity = oidc.identity_from_cookies(
        {"_streamlit_user": _cookie(CLAIMS)}, settings, secret=SECRET, origin=ORIGIN
    )
    assert identity is not None and identity.user == "hana@example.com"
    assert identity.principal.groups == frozenset({"staff", "hr"}) and identity.mode == "oidc"

    def read(cookies: dict[str, str]) -> object:
        return oidc.identity_from_cookies(cookies, settings, secret=SECRET, origin=ORIGIN)

    assert read({}) is None
    assert read({"_streamlit_user": _cookie(CLAIMS, secret="another-secret-0123456789abcdef")}) is None
    assert read({"_streamlit_user": _cookie({**CLAIMS, "origin": "http://evil.example"})}) is None
    assert read({"_streamlit_user": _cookie({**CLAIMS, "is_logged_in": False})}) is None
    assert read({"_streamlit_user": _cookie(CLAIMS, name="_streamlit_user_tokens")}) is None  # another salt
    # The claims altered after signing: the signature no longer matches.
    body, _, rest = _cookie(CLAIMS).partition(".")
    forged = base64.urlsafe_b64encode(json.dumps(json.dumps({**CLAIMS, "groups": ["admin"]})).encode())
    assert read({"_streamlit_user": forged.decode().rstrip("=") + "." + rest}) is None
    assert read({"_streamlit_user": "not a signed value"}) is None


def test_a_token_without_the_groups_claim_gives_no_groups() -> None:
    claims = {k: v for k, v in CLAIMS.items() if k != "groups"}
    identity = oidc.identity_from_cookies(
        {"_streamlit_user": _cookie(claims)}, load_settings(auth="oidc"), secret=SECRET, origin=ORIGIN
    )
    assert identity is not None and identity.principal.groups == frozenset()
