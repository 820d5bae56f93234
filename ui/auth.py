"""Who is signed in. The identity comes from the deployment (``RAG_AUTH``), never from a choice in the page.

* ``proxy`` (the default): user, e-mail and groups from the headers an authenticating reverse proxy sets
  (oauth2-proxy's ``X-Forwarded-User`` / ``X-Forwarded-Email`` / ``X-Forwarded-Groups``; the names are
  settings). Headers are read in this mode only; the proxy must overwrite whatever a client sends under those
  names, and the UI port must be reachable only through the proxy (docs/ui.md).
* ``oidc``: Streamlit's own ``st.login`` / ``st.user`` (an ``[auth]`` section in ``.streamlit/secrets.toml``),
  groups from the ID-token claim ``RAG_AUTH_GROUPS_CLAIM``; a token without the claim has no groups. Where it
  meets Streamlit's routes (a failed sign-in, the identity cookie on a plain request): ``ui.oidc``.
* ``demo``: a user picker, labelled as a demo, served only on a loopback address (scripts/start.sh).

This module holds the pure parts (parsing, the checks); ``ui.services`` reads ``st.context`` / ``st.user``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rag.config import Settings
from rag.errors import AccessError
from rag.types import Principal

MAX_HEADER_CHARS = 8192
MAX_NAME_CHARS = 256
MAX_GROUPS = 500
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
# Headers that say a request came through another hop: demo mode must not be served through one.
FORWARDING_HEADERS = ("X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip", "Forwarded")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class IdentityError(AccessError):
    """The identity the deployment sent cannot be trusted as it is (ambiguous or malformed headers)."""


@dataclass(frozen=True)
class Identity:
    """A signed-in person: the principal retrieval filters on, and where the identity came from."""

    principal: Principal
    email: str | None = None
    mode: str = "proxy"

    @property
    def user(self) -> str:
        return self.principal.user


def is_admin(principal: Principal, settings: Settings) -> bool:
    return settings.admin_group in principal.groups


# ----------------------------------------------------------------------------- proxy headers
def _values(headers: Mapping[str, Any], name: str) -> list[str]:
    """Every value of header ``name`` (case-insensitive). A mapping may hold a string or a list of strings."""
    getter = getattr(headers, "get_all", None)
    if callable(getter):  # st.context.headers keeps repeated headers
        return [str(v) for v in getter(name)]
    wanted = name.lower()
    out: list[str] = []
    for key, value in headers.items():
        if str(key).lower() == wanted:
            out.extend([value] if isinstance(value, str) else [str(v) for v in value])
    return out


def _single(headers: Mapping[str, Any], name: str) -> str | None:
    values = _values(headers, name)
    if len(values) > 1:
        raise IdentityError(
            f"The request carries {len(values)} {name} headers; an identity must come from exactly one.",
            hint="The authenticating proxy must strip client-sent identity headers and set its own (docs/ui.md).",
        )
    if not values:
        return None
    value = values[0].strip()
    if len(value) > MAX_HEADER_CHARS or _CONTROL.search(value):
        raise IdentityError(f"The {name} header is malformed (too long or with control characters).")
    return value or None


def parse_groups(value: str | None) -> frozenset[str]:
    """Groups from a comma-separated header value (oauth2-proxy joins them with ","): trimmed, empty dropped."""
    if not value:
        return frozenset()
    groups = frozenset(g.strip() for g in value.split(",") if g.strip())
    if len(groups) > MAX_GROUPS:
        raise IdentityError(
            f"The groups header lists {len(groups)} groups; at most {MAX_GROUPS} are accepted."
        )
    return groups


def identity_from_headers(headers: Mapping[str, Any], settings: Settings) -> Identity | None:
    """The identity an authenticating proxy sent, or None when it sent none (the user is not signed in).

    Only the user header is required. A header repeated (a client's forged copy beside the proxy's) or
    malformed is refused with an IdentityError rather than guessed at.
    """
    user = _single(headers, settings.auth_user_header)
    email = _single(headers, settings.auth_email_header)
    groups = parse_groups(_single(headers, settings.auth_groups_header))
    if user is None:
        return None
    if len(user) > MAX_NAME_CHARS:
        raise IdentityError(
            f"The {settings.auth_user_header} header is longer than {MAX_NAME_CHARS} characters."
        )
    return Identity(Principal(user, groups), email=email, mode="proxy")


# ----------------------------------------------------------------------------- OIDC (st.user)
def groups_from_claim(value: Any) -> frozenset[str]:
    """A groups claim as providers send it: a list of names, or one string separated by commas or spaces."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        items: Sequence[Any] = re.split(r"[,\s]+", value)
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(value)
    else:
        return frozenset()
    return frozenset(str(g).strip() for g in items if str(g).strip())


def identity_from_user_info(info: Mapping[str, Any], settings: Settings) -> Identity | None:
    """The identity in ``st.user`` (the ID token's claims), or None when nobody is logged in."""
    if not info.get("is_logged_in"):
        return None
    user = next(
        (
            str(info[k]).strip()
            for k in ("email", "preferred_username", "sub")
            if str(info.get(k) or "").strip()
        ),
        None,
    )
    if user is None:
        return None
    email = str(info["email"]) if info.get("email") else None
    return Identity(Principal(user, groups_from_claim(info.get(settings.auth_groups_claim))), email, "oidc")


# ----------------------------------------------------------------------------- demo mode
def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or host name, with or without a port) names this machine only."""
    if not host:
        return False
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8501
        name = name[1:].split("]", 1)[0]
    elif name.count(":") == 1:  # 127.0.0.1:8501, localhost:8501
        name = name.split(":", 1)[0]
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def demo_refusal(server_address: str | None, headers: Mapping[str, Any]) -> str | None:
    """Why demo sign-in must not be served here, or None. Demo mode lets anyone be anyone, so it serves only
    a server bound to a loopback address, reached directly (no forwarding proxy, a loopback Host)."""
    if not is_loopback(server_address):
        return (
            f"Demo sign-in is refused: the server listens on {server_address or 'every interface'!s}, not a "
            "loopback address. Set RAG_AUTH=proxy (behind an authenticating proxy) or RAG_AUTH=oidc to deploy."
        )
    if any(_values(headers, h) for h in FORWARDING_HEADERS):
        return (
            "Demo sign-in is refused: this request came through a proxy. Set RAG_AUTH=proxy (the proxy "
            "authenticates) or RAG_AUTH=oidc to deploy."
        )
    host = _values(headers, "Host")
    if host and not is_loopback(host[0]):
        return f"Demo sign-in is refused for the host {host[0]!r}: open it on http://127.0.0.1 or localhost."
    return None
