"""The API's pure parts, without a server: the reply text and what comes back of it in a conversation, who is
asking (keys, service keys, proxy headers, demo mode, keys-only), the rate limit and the body limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rag.config import load_settings
from rag.stages.memory import select_history
from rag.tracestore.keys import ApiKey, InvalidKey
from ui.api import identity, replies
from ui.api.errors import ApiError
from ui.api.limits import RateLimiter, read_body
from ui.api.schemas import ChatMessage, OnBehalfOf

EVIDENCE = [
    {
        "n": 1,
        "doc_id": "refunds",
        "chunk_id": "c1",
        "title": "Refunds",
        "page": 2,
        "page_end": 2,
        "section": "Refunds > 4. Exceptions",
        "text": "4. Exceptions\nGift cards are not refundable.",
    },
    {
        "n": 2,
        "doc_id": "leave",
        "chunk_id": "c2",
        "title": "Leave [v2]",
        "page": 1,
        "page_end": 3,
        "section": "Leave [v2]",
        "text": "Annual leave is 25 days.",
    },
]


def trace(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "trace_id": "t1",
        "answer": "Gift cards are not refundable. [1]\nLeave is 25 days. [2]\nSources: [1], [2]",
        "abstained": False,
        "evidence": EVIDENCE,
        "citations": [
            {"n": 1, "valid": True, "supported": True, "sentence": "Gift cards are not refundable. [1]"},
            {"n": 2, "valid": True, "supported": True, "sentence": "Leave is 25 days. [2]"},
        ],
        "claims": [{"n": 1, "evidence_sentence": "Gift cards are not refundable.", "verdict": "supported"}],
        "verified": True,
        "answer_check": {"complete": True, "intents": []},
    }
    return {**base, **overrides}


def link(doc_id: str, page: int | None) -> str | None:
    return None if doc_id == "leave" else f"https://bot.example.com/api/source/{doc_id}?link=x#page={page}"


def test_the_reply_is_the_answer_then_its_label_and_a_readable_sources_block() -> None:
    t = trace()
    text, rag = replies.reply(t, replies.sources(t, link), None, stored=True)
    assert text == (
        "Gift cards are not refundable. [1]\nLeave is 25 days. [2]\n\n---\nCitations checked\n\nSources:\n"
        "[1] [Refunds](https://bot.example.com/api/source/refunds?link=x#page=2), p. 2, 4. Exceptions: "
        "\u201cGift cards are not refundable.\u201d\n"
        "[2] Leave (v2), pp. 1-3"
    )
    assert rag.status == "checked" and rag.verified and rag.label == "Citations checked"
    assert (
        [s.n for s in rag.sources] == [1, 2] and rag.sources[1].url is None and rag.sources[1].quote is None
    )


def test_a_refusal_says_where_to_ask_and_lists_no_sources() -> None:
    t = trace(
        answer="I can't answer this from the policies you have access to.", abstained=True, citations=[]
    )
    text, rag = replies.reply(t, replies.sources(t, link), "the People Team", stored=False)
    assert text.startswith("I can't answer this")
    assert "No answer in your policies. You can ask the People Team, or rephrase" in text
    assert "Sources:" not in text and rag.sources == [] and rag.contact == "the People Team"
    assert rag.status == "abstained" and not rag.stored


def test_a_partial_answer_a_rewritten_follow_up_and_a_failed_llm_read_as_in_the_chat() -> None:
    t = trace(
        verified=False,
        answer_check={"complete": False, "intents": [{"text": "and gift cards?", "addressed": False}]},
        standalone={"rewritten": True, "question": "Can gift cards be refunded?"},
        error="timeout after 120 s",
    )
    text, rag = replies.reply(t, replies.sources(t, link), None, stored=True)
    footer = text.split("\n\n---\n", 1)[1]
    assert footer.startswith("Searched for: Can gift cards be refunded?\nAnswers only part of the question\n")
    assert "The language model failed, so this answer quotes the policies directly: timeout" in footer
    assert rag.searched_for == "Can gift cards be refunded?" and rag.status == "partial"


def test_a_conversation_comes_back_as_the_chat_page_keeps_it() -> None:
    t = trace()
    reply_text, _ = replies.reply(t, replies.sources(t, link), None, stored=True)
    messages = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="Can I refund a gift card?"),
        ChatMessage(role="assistant", content=reply_text),
        ChatMessage(role="assistant", content="A --- rule\n\n---\nthat is not ours"),
        ChatMessage(role="user", content=[{"type": "text", "text": "and leave?"}]),  # type: ignore[list-item]
    ]
    question, turns = replies.conversation(messages)
    assert question == "and leave?"
    assert turns[1] == ("assistant", "Gift cards are not refundable. [1]\nLeave is 25 days. [2]")
    assert turns[2][1].endswith("that is not ours")  # someone else's text is kept whole
    chat_page = select_history([("user", "Can I refund a gift card?"), ("assistant", t["answer"])], 400)
    assert select_history(turns[:2], 400) == chat_page


# ----------------------------------------------------------------------------- who is asking
def key(service: bool = False, groups: frozenset[str] = frozenset({"staff", "hr"})) -> ApiKey:
    now = datetime.now(UTC)
    return ApiKey(
        "0123456789ab", "bot", "bot", groups, service, None, now, now + timedelta(days=1), None, None
    )


class Keys:
    def __init__(self, found: ApiKey | None) -> None:
        self.found = found

    def authenticate(self, token: str) -> ApiKey:
        if self.found is None:
            raise InvalidKey("revoked", "The API key 0123456789ab (bot) was revoked.")
        return self.found


def identify(
    headers: dict[str, str], found: ApiKey | None = None, address: str = "127.0.0.1", **settings: Any
) -> identity.Sender:
    return identity.identify(
        headers,
        {},
        load_settings(**settings),
        keys=lambda: Keys(found),
        server_address=address,  # type: ignore[arg-type,return-value]
    )


def failure(fn: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        fn(*args, **kwargs)
    return caught.value


def test_a_key_identifies_before_any_deployment_identity() -> None:
    sender = identify({"Authorization": "Bearer rag_x", "X-Forwarded-User": "eve"}, key(), auth="proxy")
    assert sender.mode == "key" and sender.limit_id == "key:0123456789ab"
    error = failure(identify, {"Authorization": "Bearer rag_x"}, None, auth="proxy")
    assert (error.status, error.code) == (401, "revoked_api_key")


def test_the_deployment_identity_when_there_is_no_key() -> None:
    sender = identify({"X-Forwarded-User": "hana", "X-Forwarded-Groups": "staff, hr"}, auth="proxy")
    assert sender.mode == "proxy" and sender.identity is not None
    assert sender.identity.principal.groups == frozenset({"staff", "hr"})
    assert failure(identify, {}, auth="proxy").code == "missing_api_key"
    assert failure(identify, {}, auth="oidc").code == "missing_api_key"  # no identity cookie
    keys_only = failure(identify, {"X-Forwarded-User": "hana"}, auth="proxy", api_require_key=True)
    assert keys_only.status == 401 and keys_only.code == "missing_api_key"
    assert identify({"Host": "127.0.0.1:8000"}, auth="demo").mode == "demo"
    assert (
        failure(identify, {}, address="0.0.0.0", auth="demo").status == 401
    )  # demo needs a loopback address
    assert failure(identify, {"X-Forwarded-For": "1.2.3.4"}, auth="demo").status == 401


def test_a_service_key_asks_for_a_named_person_within_its_groups() -> None:
    sender = identity.Sender("key", key=key(service=True))
    users = dict
    asker = identity.resolve(
        sender, OnBehalfOf(user="tom", groups=["staff"]), demo_user=None, demo_users=users
    )
    assert asker.principal.user == "tom" and asker.principal.groups == frozenset({"staff"})
    assert asker.key_use() is not None and asker.key_use().on_behalf  # type: ignore[union-attr]
    error = failure(identity.resolve, sender, None, demo_user=None, demo_users=users)
    assert (error.status, error.code) == (400, "on_behalf_required")
    error = failure(
        identity.resolve, sender, OnBehalfOf(user="tom", groups=["finance"]), demo_user=None, demo_users=users
    )
    assert (error.status, error.code) == (403, "group_not_allowed") and "finance" in error.message
    error = failure(
        identity.resolve, sender, OnBehalfOf(user="\x00", groups=[]), demo_user=None, demo_users=users
    )
    assert error.status == 400


def test_only_a_service_key_asks_for_someone_else() -> None:
    personal = identity.Sender("key", key=key())
    asker = identity.resolve(personal, None, demo_user=None, demo_users=dict)
    assert asker.principal.user == "bot" and not asker.on_behalf
    error = failure(identity.resolve, personal, OnBehalfOf(user="hana"), demo_user=None, demo_users=dict)
    assert (error.status, error.code) == (403, "on_behalf_not_allowed")
    demo = identity.Sender("demo")
    users = {"alice": frozenset({"staff"}), "hana": frozenset({"staff", "hr"})}
    assert identity.resolve(demo, None, demo_user=None, demo_users=lambda: users).principal.user == "alice"
    assert (
        identity.resolve(demo, None, demo_user="hana", demo_users=lambda: users).principal.groups
        == users["hana"]
    )
    assert (
        failure(identity.resolve, demo, None, demo_user="eve", demo_users=lambda: users).code
        == "unknown_user"
    )


# ----------------------------------------------------------------------------- limits
def test_the_rate_limit_is_a_token_bucket_per_key() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert [limiter.take("k", 3) for _ in range(3)] == [None, None, None]
    assert limiter.take("k", 3) == pytest.approx(20.0)  # 3 a minute: one every 20 s
    assert limiter.take("other", 3) is None
    now[0] = 10.0
    error = failure(limiter.check, "k", 3, "API key k")
    assert error.status == 429 and error.headers == {"Retry-After": "10"}
    now[0] = 20.0
    assert limiter.take("k", 3) is None


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def test_the_body_is_read_no_further_than_its_limit() -> None:
    assert asyncio.run(read_body("5", _chunks([b"ab", b"cde"]), 10)) == b"abcde"
    assert failure(asyncio.run, read_body(None, _chunks([b"x" * 6, b"x" * 6]), 10)).status == 413
    assert (
        failure(asyncio.run, read_body(str(10**9), _chunks([]), 10)).status == 413
    )  # refused before reading
    assert failure(asyncio.run, read_body("many", _chunks([]), 10)).status == 400
