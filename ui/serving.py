"""A source file at its own address, so the browser's PDF viewer opens it at a page (``...#page=N``), with access
checked on the very request that serves the file.

Streamlit serves no file by a path of ours, so ``ui/server.py`` mounts one route beside the app:
``GET /api/source/{doc_id}?link=TOKEN``. The page that shows a citation makes the link for the signed-in user
(``open_url``); the link carries a token signed with the server's cookie secret that names the user, the groups
they had, the document and an expiry (``LINK_TTL_S``). The route then, on every request:

1. checks the token (signature, expiry, the document in the address is the one it was made for);
2. works out who is asking now, from the deployment as sign-in does (ui/auth.py): in ``proxy`` mode the identity
   headers of this request, in ``oidc`` mode the identity cookie Streamlit signed after a verified sign-in
   (ui/oidc.py); either must name the token's user, and their groups now are the ones used. In ``demo`` mode the
   user list, on a loopback server reached directly;
3. looks the document up by id in the published index and applies the same check as every view and download
   (``ui.sources.readable_source``): a document that user may not read and one that does not exist get the same
   404, so a request cannot tell them apart.

A pasted link therefore opens nothing for anyone else (another user behind the proxy or signed in through the
provider, a browser signed in as nobody, a link past its expiry, a document swapped into the address), and nothing
the index has stopped sharing with its user.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route

from rag.config import Settings
from rag.types import Principal
from ui import auth, oidc

if TYPE_CHECKING:  # ui.sources is imported when a request comes: its st.cache_data wants Streamlit's runtime
    from ui.sources import Source

ROUTE = "api/source/"  # + the doc id, under server.baseUrlPath like Streamlit's own routes
LINK_PARAM = "link"
LINK_TTL_S = 15 * 60  # long enough to read the passage and click; a bookmarked link asks for a fresh one
KEY_CONTEXT = b"policy-rag source link v1"
NOT_VALID = (
    "This link is not valid for you: it has expired or was made for someone else. Open the source again from "
    "the chat."
)
# Set by routes() when ui/server.py mounts the route: a page offers links only where the route exists.
MOUNTED = False
_SETTINGS: Callable[[], Settings] | None = None  # routes(settings=...): rag serve's own settings


@dataclass(frozen=True)
class SourceLink:
    """What a link to a source file grants: ``doc_id``, to ``user`` (with the groups they had), until ``expires``
    (seconds since the epoch)."""

    user: str
    groups: frozenset[str]
    doc_id: str
    expires: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(link: SourceLink, key: bytes) -> str:
    """The token for ``link``: its fields as JSON and an HMAC-SHA256 of them, both base64url."""
    body = _b64(
        json.dumps(
            {"u": link.user, "g": sorted(link.groups), "d": link.doc_id, "x": link.expires},
            separators=(",", ":"),
        ).encode()
    )
    mac = hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()
    return f"{body}.{_b64(mac)}"


def verify(token: str, key: bytes, *, now: float) -> SourceLink | None:
    """The link ``token`` grants, or None when it is malformed, signed with another key or expired."""
    body, _, mac = token.partition(".")
    if not body or not mac or len(token) > 8192:
        return None
    try:
        expected = hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, _unb64(mac)):
            return None
        data = json.loads(_unb64(body))
        link = SourceLink(
            user=str(data["u"]),
            groups=frozenset(str(g) for g in data["g"]),
            doc_id=str(data["d"]),
            expires=int(data["x"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeError):
        return None
    return link if now < link.expires else None


def link_key() -> bytes:
    """The key links are signed with, derived from the secret Streamlit signs its own cookies with
    (``server.cookieSecret``, or ``[auth] cookie_secret``): random per process unless the deployment sets it,
    which replicas behind one address must do (docs/ui.md)."""
    try:
        from streamlit.web.server.server_util import get_cookie_secret

        secret = str(get_cookie_secret())
    except ImportError:  # a Streamlit without the helper: the option it reads
        import streamlit as st

        secret = str(st.get_option("server.cookieSecret"))
    return hmac.new(secret.encode(), KEY_CONTEXT, hashlib.sha256).digest()


def route_path(base_url: str = "") -> str:
    """Where the route starts (the doc id follows) under Streamlit's ``server.baseUrlPath``."""
    base = base_url.strip("/")
    return f"/{base}/{ROUTE}" if base else f"/{ROUTE}"


def _base_url() -> str:
    import streamlit as st

    return str(st.get_option("server.baseUrlPath") or "")


def open_url(
    source: Source, principal: Principal, page: int | None, *, now: float | None = None
) -> str | None:
    """The address that opens ``source`` (a PDF the principal may read) in the browser's viewer at ``page``, or
    None when the route is not mounted (the app run without ui/server.py) or the file is not a PDF."""
    if not MOUNTED or not source.is_pdf:
        return None
    link = SourceLink(
        user=principal.user,
        groups=principal.groups,
        doc_id=source.doc_id,
        expires=int((time.time() if now is None else now) + LINK_TTL_S),
    )
    path = route_path(_base_url()) + quote(source.doc_id, safe="")
    return f"{path}?{LINK_PARAM}={sign(link, link_key())}#page={max(int(page or 1), 1)}"


# ----------------------------------------------------------------------------- the request
def requester(
    link: SourceLink,
    settings: Settings,
    headers: Mapping[str, Any],
    server_address: str | None,
    users: Mapping[str, frozenset[str]] | None,
    signed_in: auth.Identity | None = None,
) -> Principal | None:
    """Who is asking for ``link``'s file on this request, with their groups now, or None when the deployment's
    identity does not match the link's user. ``users``: the demo user list (demo mode only); ``signed_in``: the
    identity of this request's OIDC cookie (oidc mode only, ``oidc.identity_from_cookies``)."""
    if settings.auth == "demo":
        if auth.demo_refusal(server_address, headers) is not None or users is None:
            return None
        groups = users.get(link.user)
        return None if groups is None else Principal(link.user, groups)
    if settings.auth == "oidc":
        identity = signed_in
    else:
        try:
            identity = auth.identity_from_headers(headers, settings)
        except auth.IdentityError:
            return None
    if identity is None or identity.user != link.user:
        return None
    return identity.principal


def published_documents(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The documents of the published index generation, as the index manifest lists them (none: {})."""
    from rag.stores.index import current_generation

    name = current_generation(Path(data_dir))
    return {} if name is None else _manifest_documents(str(Path(data_dir).resolve()), name)


@lru_cache(maxsize=4)
def _manifest_documents(data_dir: str, generation: str) -> dict[str, dict[str, Any]]:
    from rag.stores.index import Manifest, generation_dir

    return Manifest.load(generation_dir(Path(data_dir), generation)).documents


def serve(
    doc_id: str,
    token: str,
    *,
    settings: Settings,
    headers: Mapping[str, Any],
    server_address: str | None,
    users: Mapping[str, frozenset[str]] | None,
    documents: Mapping[str, dict[str, Any]],
    key: bytes,
    now: float,
    signed_in: auth.Identity | None = None,
) -> Response:
    """The response to ``GET /api/source/{doc_id}?link=token``: the PDF, or a refusal that shows no file."""
    from ui.sources import NOT_AVAILABLE, readable_source

    link = verify(token, key, now=now)
    if link is None or link.doc_id != doc_id:
        return _refusal(403, NOT_VALID)
    principal = requester(link, settings, headers, server_address, users, signed_in)
    if principal is None:
        return _refusal(403, NOT_VALID)
    source = readable_source(dict(documents), principal, doc_id)
    if source is None or not source.is_pdf or not source.path.is_file():
        return _refusal(404, NOT_AVAILABLE)
    return FileResponse(
        source.path,
        media_type="application/pdf",
        filename=source.path.name,
        content_disposition_type="inline",
        headers={
            "Cache-Control": "private, no-store",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


def _refusal(status: int, message: str) -> Response:
    return PlainTextResponse(
        message,
        status_code=status,
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


def serve_source(request: Request) -> Response:
    """The route's endpoint (Starlette runs a plain function in its thread pool)."""
    import streamlit as st

    from ui import services

    try:
        settings = _SETTINGS() if _SETTINGS is not None else services.get_settings()
        users = services.load_users(settings) if settings.auth == "demo" else None
        signed_in = oidc.identity_from_cookies(request.cookies, settings) if settings.auth == "oidc" else None
        documents = published_documents(settings.data_dir)
    except Exception:  # unreadable settings, user list, identity cookie or index: nothing is served
        from ui.sources import NOT_AVAILABLE

        return _refusal(404, NOT_AVAILABLE)
    return serve(
        str(request.path_params.get("doc_id") or ""),
        str(request.query_params.get(LINK_PARAM) or ""),
        settings=settings,
        headers=request.headers,
        server_address=str(st.get_option("server.address") or "") or None,
        users=users,
        documents=documents,
        key=link_key(),
        now=time.time(),
        signed_in=signed_in,
    )


def routes(settings: Callable[[], Settings] | None = None) -> list[Route]:
    """The route ui/server.py mounts beside the Streamlit app; from then on pages offer "Open the PDF" links.
    ``settings``: where the route reads its settings (``rag serve`` passes its own; default: the environment)."""
    global MOUNTED, _SETTINGS
    MOUNTED = True
    _SETTINGS = settings
    return [Route(route_path(_base_url()) + "{doc_id:path}", serve_source, methods=["GET", "HEAD"])]
