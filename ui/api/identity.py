"""Who is asking an API request, from the request alone: nothing is answered anonymously.

In this order:

1. ``Authorization: Bearer rag_...``: an API key (``rag keys create``), checked against the trace database on
   every request, so an expired or revoked key is refused on its next one. A personal key asks as its user with
   its groups. A trusted service key (``--service``) must name the asker in ``on_behalf_of`` (user and groups);
   the groups must be among the key's own, so a key can never grant more than it was given.
2. Without a key, the deployment's identity, as the UI reads it (ui/auth.py, ``RAG_AUTH``): the authenticating
   proxy's identity headers (``proxy``), Streamlit's signed identity cookie (``oidc``, as the source route reads
   it), or a demo user (``demo``, on a loopback address reached directly only; ``user`` picks one, the first
   name of the user list otherwise, as the picker starts). ``RAG_API_REQUIRE_KEY`` turns this step off for a port
   clients reach without the proxy.

Checked in two steps: :func:`identify` before the body is read (who sent the request: what it is rate-limited
as), :func:`resolve` after (who asks: the principal retrieval filters on).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rag.config import Settings
from rag.request import KeyUse
from rag.tracestore.keys import ApiKey, ApiKeys, InvalidKey
from rag.types import Principal
from ui import auth, oidc
from ui.api.errors import ApiError
from ui.api.schemas import OnBehalfOf

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
CREATE_KEY = "an administrator creates one with `rag keys create --user NAME --groups GROUPS`"


@dataclass(frozen=True)
class Sender:
    """Who sent a request: an API key, or the deployment's identity (proxy, oidc) or demo mode."""

    mode: str  # key, proxy, oidc, demo
    key: ApiKey | None = None
    identity: auth.Identity | None = None

    @property
    def limit_id(self) -> str:
        """What the request is rate-limited as: its key, else its user (one bucket for demo mode)."""
        if self.key is not None:
            return f"key:{self.key.id}"
        return f"user:{self.identity.user}" if self.identity is not None else "demo"

    def limit_label(self) -> str:
        if self.key is not None:
            return f"API key {self.key.id} ({self.key.name})"
        return f"user {self.identity.user}" if self.identity is not None else "demo mode"

    def rate_limit(self, settings: Settings) -> int:
        """Requests per minute: the key's own limit, else ``RAG_API_RATE_LIMIT``."""
        if self.key is not None and self.key.rate_limit:
            return int(self.key.rate_limit)
        return settings.api_rate_limit


@dataclass(frozen=True)
class Asker:
    """Who asks: the principal retrieval filters on, and the key it came with (recorded in the trace)."""

    principal: Principal
    sender: Sender
    on_behalf: bool = False

    def key_use(self) -> KeyUse | None:
        key = self.sender.key
        if key is None:
            return None
        return KeyUse(id=key.id, name=key.name, user=key.user, on_behalf=self.on_behalf)


def _unauthorised(message: str, code: str) -> ApiError:
    return ApiError(401, message, type="authentication_error", code=code)


def _forbidden(message: str, code: str, param: str | None = None) -> ApiError:
    return ApiError(403, message, type="permission_error", code=code, param=param)


def bearer_token(headers: Mapping[str, Any]) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header; None without the header."""
    values = [str(v) for k, v in headers.items() if str(k).lower() == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise _unauthorised("The request carries more than one Authorization header.", "invalid_api_key")
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorised(
            "Send the API key as `Authorization: Bearer <key>` (OpenAI's clients do: api_key=<key>).",
            "invalid_api_key",
        )
    return token.strip()


def identify(
    headers: Mapping[str, Any],
    cookies: Mapping[str, str],
    settings: Settings,
    *,
    keys: Callable[[], ApiKeys],
    server_address: str | None,
) -> Sender:
    """Who sent the request (step 1); an ApiError (401) when nobody can be told."""
    token = bearer_token(headers)
    if token is not None:
        try:
            return Sender("key", key=keys().authenticate(token))
        except InvalidKey as exc:
            code = {"expired": "expired_api_key", "revoked": "revoked_api_key"}.get(
                exc.reason, "invalid_api_key"
            )
            raise _unauthorised(" ".join(exc.user_message().split()), code) from None
    missing = f"No API key: send `Authorization: Bearer <key>` ({CREATE_KEY})."
    if settings.api_require_key:
        raise _unauthorised(missing, "missing_api_key")
    if settings.auth == "proxy":
        try:
            identity = auth.identity_from_headers(headers, settings)
        except auth.IdentityError as exc:
            raise _unauthorised(" ".join(exc.user_message().split()), "ambiguous_identity") from None
        if identity is None:
            raise _unauthorised(
                missing[:-1] + ", or call through the authenticating proxy with a signed-in session.",
                "missing_api_key",
            )
        return Sender("proxy", identity=identity)
    if settings.auth == "oidc":
        identity = oidc.identity_from_cookies(cookies, settings)
        if identity is None:
            raise _unauthorised(
                missing[:-1] + ", or sign in to the bot in this browser first.", "missing_api_key"
            )
        return Sender("oidc", identity=identity)
    refusal = auth.demo_refusal(server_address, headers)
    if refusal is not None:
        raise _unauthorised(f"{refusal} Or send an API key ({CREATE_KEY}).", "missing_api_key")
    return Sender("demo")


def _clean_name(value: str, what: str, param: str) -> str:
    text = value.strip()
    if not text or len(text) > auth.MAX_NAME_CHARS or _CONTROL.search(text):
        raise ApiError(
            400,
            f"{what} must be 1-{auth.MAX_NAME_CHARS} printable characters.",
            code="invalid_name",
            param=param,
        )
    return text


def resolve(
    sender: Sender,
    on_behalf_of: OnBehalfOf | None,
    *,
    demo_user: str | None,
    demo_users: Callable[[], Mapping[str, frozenset[str]]],
    param: str = "rag.on_behalf_of",
) -> Asker:
    """Who asks (step 2): the principal the question is answered for."""
    key = sender.key
    if key is not None and key.service:
        if on_behalf_of is None:
            raise ApiError(
                400,
                f"The API key {key.id} ({key.name}) is a service key: name the person asking in `{param}` "
                '({"user": ..., "groups": [...]}); a service key never asks as itself.',
                code="on_behalf_required",
                param=param,
            )
        user = _clean_name(on_behalf_of.user, "on_behalf_of.user", f"{param}.user")
        groups = frozenset(g.strip() for g in on_behalf_of.groups if g.strip())
        outside = sorted(groups - key.groups)
        if outside:
            raise _forbidden(
                f"The API key {key.id} ({key.name}) may ask for the groups {', '.join(sorted(key.groups)) or '(none)'}"
                f"; not for {', '.join(repr(g) for g in outside)}. An administrator creates a service key with "
                "every group it may ask for (`rag keys create --service --groups ...`).",
                "group_not_allowed",
                f"{param}.groups",
            )
        return Asker(Principal(user, groups), sender, on_behalf=True)
    if on_behalf_of is not None:
        who = f"the API key {key.id} ({key.name})" if key is not None else "a signed-in user"
        raise _forbidden(
            f"Only a trusted service key may ask on behalf of someone else, not {who}. An administrator creates "
            "one with `rag keys create --service`.",
            "on_behalf_not_allowed",
            param,
        )
    if key is not None:
        return Asker(Principal(key.user, key.groups), sender)
    if sender.identity is not None:
        return Asker(sender.identity.principal, sender)
    users = demo_users()
    if demo_user is None:
        name = sorted(users)[0]
    elif demo_user in users:
        name = demo_user
    else:
        raise ApiError(
            400,
            f"Unknown demo user {demo_user[:64]!r}: one of {', '.join(sorted(users))}.",
            code="unknown_user",
            param="user",
        )
    return Asker(Principal(name, users[name]), sender)
