"""OIDC sign-in (``RAG_AUTH=oidc``) where it meets Streamlit's own routes for ``st.login``.

Streamlit serves ``/auth/login``, ``/oauth2callback`` and ``/auth/logout`` itself, and Authlib checks the ID token
there: its signature against the provider's published keys (JWKS), the issuer, the audience, the nonce, the
expiry. Only a token that passes becomes the signed identity cookie that ``st.user`` reads. When a check fails,
or the provider cannot be reached, Streamlit logs it and sends the browser back to the app, which would show the
sign-in page again without a word (``/auth/login`` answers a bare "Authentication error" when the provider is
down). ``SignInErrors``, the middleware ui/server.py mounts, sends the browser instead to the sign-in page with
``?sign_in_error=CODE``; the page shows the fixed message for that code (``message_for``), never text from the
request, so a crafted address can show no more than one of these sentences.

``identity_from_cookies`` reads that signed identity cookie for a request outside the app's WebSocket: the route
that serves a cited PDF (ui/serving.py) checks who is asking with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from rag.config import Settings
from ui import auth

ERROR_PARAM = "sign_in_error"
USER_COOKIE = "_streamlit_user"  # Streamlit's signed identity cookie (its starlette_server_config)
LOGIN_ROUTE = "auth/login"
CALLBACK_ROUTE = "oauth2callback"
PROBE_TIMEOUT_S = 3.0
MESSAGES = {
    "refused": (
        "Sign-in was refused: the answer from your organisation's sign-in service could not be verified (a "
        "token that was altered, signed by someone else, issued by another provider, expired or used twice). "
        "Nobody is signed in. Sign in again; if this keeps happening, tell IT."
    ),
    "denied": (
        "Sign-in was cancelled or refused at your organisation's sign-in service. Nobody is signed in. Sign "
        "in again, or ask IT whether you have access to the support bot."
    ),
    "unavailable": (
        "Your organisation's sign-in service cannot be reached right now, so nobody can sign in. Try again in "
        "a few minutes; if it keeps happening, tell IT."
    ),
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_LOG = logging.getLogger(__name__)


def message_for(code: Any) -> str | None:
    """The message the sign-in page shows for ``?sign_in_error=code``; None for any other value."""
    return MESSAGES.get(code) if isinstance(code, str) else None


# ----------------------------------------------------------------------------- the middleware
def route_path(base_url: str, route: str) -> str:
    """Streamlit's path for ``route`` under ``server.baseUrlPath``."""
    base = base_url.strip("/")
    return f"/{base}/{route}" if base else f"/{route}"


def _base_url() -> str:
    import streamlit as st

    return str(st.get_option("server.baseUrlPath") or "")


def sets_identity(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a response's headers set Streamlit's identity cookie to a value (a sign-in that succeeded); the
    deletion Streamlit sends when it clears the cookie does not count."""
    for name, value in headers:
        if name.lower() != b"set-cookie":
            continue
        cookie, _, _ = value.decode("latin-1").partition(";")
        key, _, content = cookie.partition("=")
        if key.strip() == USER_COOKIE and content.strip().strip('"'):
            return True
    return False


def callback_failure(query: Mapping[str, list[str]]) -> str | None:
    """For a callback that signed nobody in: "denied" when the provider answered with an error, None when it was no
    sign-in reply at all (the provider sending the browser back after sign-out), else "refused" (the code
    exchange or the ID token failed a check; the caller tells a provider that is down apart)."""
    if query.get("error"):
        return "denied"
    if not query.get("code"):
        return None
    return "refused"


def _answers(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) < 500
    except urllib.error.HTTPError as exc:  # it answered, with an error status
        return exc.code < 500
    except (OSError, ValueError):  # refused, timed out, unresolvable, not a URL
        return False


async def provider_reachable(metadata_url: str | None, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the provider's discovery document answers (any status below 500). Asked only after a sign-in
    failed, in a worker thread."""
    if not metadata_url:
        return True  # nothing to ask: say what failed, not that the provider is down
    return await asyncio.to_thread(_answers, metadata_url, timeout)


def configured_metadata_url() -> str | None:
    """``server_metadata_url`` of the ``[auth]`` section (the default provider's), if configured."""
    try:
        from streamlit.auth_util import get_secrets_auth_section

        section = get_secrets_auth_section()
    except Exception:  # no secrets file, or a Streamlit without the helper
        return None
    if not section:
        return None
    url = section.get("server_metadata_url")
    if url is None:
        default = section.get("default")
        url = default.get("server_metadata_url") if default else None
    return str(url) if url else None


def redirect_start(
    location: str, original: Message | None = None, status: int = 302
) -> tuple[Message, Message]:
    """The response that sends the browser to ``location``, keeping the cookies ``original`` set or cleared."""
    cookies = [(k, v) for k, v in (original or {}).get("headers", []) if k.lower() == b"set-cookie"]
    headers = [
        (b"location", location.encode("latin-1")),
        (b"cache-control", b"no-store"),
        (b"content-length", b"0"),
        *cookies,
    ]
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": b"", "more_body": False},
    )


class SignInErrors:
    """ASGI middleware over Streamlit's ``/auth/login`` and ``/oauth2callback``: a sign-in that fails ends on the
    app's sign-in page with a message saying why (``?sign_in_error=CODE``), never on a bare error or in silence.

    Everything else passes through untouched. A successful sign-in (the callback sets the identity cookie) and a
    return from the provider's sign-out pass through too.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        base_url: Callable[[], str] = _base_url,
        metadata_url: Callable[[], str | None] = configured_metadata_url,
        reachable: Callable[[str | None], Awaitable[bool]] = provider_reachable,
    ) -> None:
        self.app = app
        self._base_url = base_url
        self._metadata_url = metadata_url
        self._reachable = reachable

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        base = self._base_url()
        path = scope.get("path", "")
        if path == route_path(base, LOGIN_ROUTE):
            await self._guard(scope, receive, send, base, self._judge_login)
        elif path == route_path(base, CALLBACK_ROUTE):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            failure = callback_failure(query)
            if failure is None:
                await self.app(scope, receive, send)
                return

            async def judge(start: Message) -> str | None:
                if sets_identity(start.get("headers", [])):
                    return None
                if failure == "refused" and not await self._reachable(self._metadata_url()):
                    return "unavailable"
                return failure

            await self._guard(scope, receive, send, base, judge)
        else:
            await self.app(scope, receive, send)

    async def _judge_login(self, start: Message) -> str | None:
        # Streamlit's login route fails only when it cannot load the provider's discovery document.
        return "unavailable" if int(start.get("status", 200)) >= 400 else None

    async def _guard(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        base: str,
        judge: Callable[[Message], Awaitable[str | None]],
    ) -> None:
        replaced = False

        async def guarded(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start":
                code = await judge(message)
                if code is not None:
                    replaced = True
                    _LOG.warning("sign-in failed at %s: %s", scope.get("path"), code)
                    location = route_path(base, "") + f"?{ERROR_PARAM}={code}"
                    for part in redirect_start(location, message):
                        await send(part)
                    return
            elif replaced:
                return  # the original body of a replaced response
            await send(message)

        await self.app(scope, receive, guarded)


# ----------------------------------------------------------------------------- the identity cookie
def signed_in_user(
    cookies: Mapping[str, str], *, secret: str | None = None, origin: str | None = None
) -> dict[str, Any] | None:
    """The claims Streamlit stored in its signed identity cookie after a verified sign-in, or None (no cookie, a
    bad signature, another origin's cookie). ``secret`` and ``origin`` default to this server's cookie secret and
    the origin of the configured ``redirect_uri``."""
    try:
        from streamlit.auth_util import get_cookie_with_chunks, get_origin_from_redirect_uri
        from streamlit.web.server.server_util import get_cookie_secret
        from streamlit.web.server.starlette.starlette_app_utils import decode_signed_value
    except ImportError:  # a Streamlit without these helpers: nobody is signed in here (fail closed)
        return None
    key = str(get_cookie_secret() if secret is None else secret)
    expected_origin = get_origin_from_redirect_uri() if origin is None else origin

    def single(name: str) -> bytes | None:
        value = cookies.get(name)
        return None if value is None else decode_signed_value(key, name, value.encode("latin-1"))

    try:
        raw = get_cookie_with_chunks(single, USER_COOKIE)
        payload = json.loads(raw) if raw else None
    except (ValueError, UnicodeError):
        return None
    if not isinstance(payload, dict) or not expected_origin or payload.get("origin") != expected_origin:
        return None
    return payload


def identity_from_cookies(
    cookies: Mapping[str, str], settings: Settings, *, secret: str | None = None, origin: str | None = None
) -> auth.Identity | None:
    """Who is signed in on a plain HTTP request in OIDC mode: the identity cookie's claims, read as ``st.user``'s
    are (ui/auth.py); None when nobody is."""
    info = signed_in_user(cookies, secret=secret, origin=origin)
    return None if info is None else auth.identity_from_user_info(info, settings)
