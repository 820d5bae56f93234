"""The ACL canaries through the API: for every kind of asker (personal keys, a service key asking for named users,
the proxy's identity headers) a restricted document never appears in an answer, a source, a link, an error or a
stored trace of someone outside its group, whole, streamed or through the native endpoint; the insiders see it
(so the check can fail). Keys that expired or were revoked are refused on their next request, and nothing is
answered anonymously.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.ui.api.conftest import SALARY_Q, Server, chat, proxy_headers
from tests.ui.conftest import CANARY_HR, CANARY_SEC

QUESTIONS = (
    SALARY_Q,
    "What internal reference code do the pay grades use?",
    "What is the runbook reference for escalating a security incident?",
    "Who do I call first when a critical security incident happens at night?",
)


@dataclass(frozen=True)
class Asker:
    name: str
    groups: frozenset[str]
    key: str | None = None
    on_behalf: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        return {"key": self.key, "headers": self.headers}


@dataclass
class Restricted:
    """A restricted document: the group that reads it, and every string that would give it away."""

    group: str
    markers: tuple[str, ...]


def _restricted(server: Server) -> list[Restricted]:
    from ui.serving import published_documents

    docs = published_documents(server.data_dir)
    out = []
    for stem, group, canary in (
        ("salary-bands", "hr", CANARY_HR),
        ("incident-escalation", "security", CANARY_SEC),
    ):
        doc_id, doc = next((d, v) for d, v in docs.items() if str(v["source"]).endswith(f"{stem}.pdf"))
        assert doc["groups"] == [group]
        out.append(Restricted(group, (canary, stem, doc_id, str(doc["title"]))))
    return out


@pytest.fixture(scope="module")
def askers(api_server: Server) -> list[Asker]:
    service = api_server.key("acl-bot", "acl-bot", ["staff", "hr", "security"], service=True)

    def behalf(user: str, groups: list[str]) -> Asker:
        return Asker(user, frozenset(groups), service, {"user": user, "groups": groups})

    return [
        Asker("alice", frozenset({"staff"}), api_server.key("acl-alice", "alice", ["staff"])),
        Asker("hana", frozenset({"staff", "hr"}), api_server.key("acl-hana", "hana", ["staff", "hr"])),
        Asker(
            "sam", frozenset({"staff", "security"}), api_server.key("acl-sam", "sam", ["staff", "security"])
        ),
        behalf("tom", ["staff"]),
        behalf("hana", ["staff", "hr"]),
        Asker("alice", frozenset({"staff"}), headers=proxy_headers("alice", ["staff"])),
        Asker("sam", frozenset({"staff", "security"}), headers=proxy_headers("sam", ["staff", "security"])),
    ]


def _stream(server: Server, body: dict[str, Any], asker: Asker) -> tuple[bytes, str | None]:
    """A streamed answer's raw bytes, and its trace id."""
    status, _, raw = server.request("POST", "/v1/chat/completions", body, **asker.kwargs())
    assert status == 200, raw[:500]
    trace_id = None
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            trace_id = (json.loads(line[6:]).get("rag") or {}).get("trace_id") or trace_id
    return raw, trace_id


def _everything(server: Server, asker: Asker, question: str) -> Iterator[tuple[str, bytes]]:
    """Every byte the asker gets for the question (whole, streamed, native) and the traces stored for them."""
    extra = {"rag": {"on_behalf_of": asker.on_behalf}} if asker.on_behalf else {}
    status, _, whole = server.request(
        "POST", "/v1/chat/completions", chat(question, **extra), **asker.kwargs()
    )
    assert status == 200, whole[:500]
    yield "whole answer", whole
    streamed, streamed_id = _stream(server, chat(question, stream=True, **extra), asker)
    yield "streamed answer", streamed
    native_body: dict[str, Any] = {"question": question}
    if asker.on_behalf:
        native_body["on_behalf_of"] = asker.on_behalf
    status, headers, native = server.request("POST", "/v1/rag/ask", native_body, **asker.kwargs())
    assert status == 200 and headers.get("x-rag-trace-stored") == "true", native[:500]
    yield "native trace", native
    ids = [json.loads(whole)["rag"]["trace_id"], streamed_id, json.loads(native)["trace_id"]]
    with server.store() as store:
        for trace_id in ids:
            assert trace_id is not None
            trace = store.traces.get(trace_id)
            assert trace["user"] == asker.name and set(trace["groups"]) == asker.groups
            yield f"stored trace {trace_id}", json.dumps(trace).encode()
    for url in re.findall(
        rb'"url":\s*"([^"]+)"', whole
    ):  # every link opens, for this asker, what they may read
        path = url.decode().split("://", 1)[1].split("/", 1)[1]
        status, _, body = server.request("GET", "/" + path.split("#")[0], headers=asker.headers or {})
        yield f"link {path[:40]}", body


def test_no_restricted_document_reaches_an_outsider_through_any_route(
    api_server: Server, askers: list[Asker]
) -> None:
    restricted = _restricted(api_server)
    leaks: list[str] = []
    seen_inside = {r.group: False for r in restricted}
    checked = 0
    for asker in askers:
        for question in QUESTIONS:
            for where, payload in _everything(api_server, asker, question):
                text = payload.decode("utf-8", errors="replace")
                for doc in restricted:
                    found = [m for m in doc.markers if m in text]
                    if doc.group in asker.groups:
                        seen_inside[doc.group] |= bool(found)
                    elif found:
                        leaks.append(
                            f"{asker.name} ({sorted(asker.groups)}) {where} for {question!r}: {found}"
                        )
                checked += 1
    assert leaks == [], "\n".join(leaks)
    assert seen_inside == {"hr": True, "security": True}, (
        "the insiders must see the documents (positive control)"
    )
    assert checked >= len(askers) * len(QUESTIONS) * 6


def test_links_errors_and_feedback_say_nothing_of_a_restricted_document(
    api_server: Server, askers: list[Asker]
) -> None:
    restricted = _restricted(api_server)
    hana = next(a for a in askers if a.name == "hana" and a.key and not a.on_behalf)
    alice_key = next(a for a in askers if a.name == "alice" and a.key)
    status, reply = api_server.post("/v1/chat/completions", chat(SALARY_Q), key=hana.key)
    assert status == 200
    salary = next(s for s in reply["rag"]["sources"] if "salary" in s["doc_id"])
    path = "/" + salary["url"].split("://", 1)[1].split("/", 1)[1].split("#")[0]
    bodies = []
    # The link hana got opens for hana behind the proxy, and for nobody else (another user, nobody signed in).
    status, headers, pdf = api_server.request("GET", path, headers=proxy_headers("hana", ["staff", "hr"]))
    assert status == 200 and headers["content-type"] == "application/pdf" and pdf.startswith(b"%PDF")
    for other in (proxy_headers("alice", ["staff"]), proxy_headers("hana", ["staff"]), {}):
        status, _, body = api_server.request("GET", path, headers=other)
        assert status in (403, 404)
        bodies.append(body)
    # Feedback on hana's answer from anyone else reads as an unknown answer.
    for kwargs in ({"key": alice_key.key}, {"headers": proxy_headers("alice", ["staff"])}):
        status, error = api_server.post(
            "/v1/rag/feedback", {"trace_id": reply["rag"]["trace_id"], "rating": "down"}, **kwargs
        )
        assert status == 404 and error["error"]["code"] == "trace_not_found"
        bodies.append(json.dumps(error).encode())
    # A service key asking for groups outside its own, and a personal key asking for someone else.
    narrow = api_server.key("acl-narrow-bot", "narrow-bot", ["staff"], service=True)
    for key, behalf in (
        (narrow, {"user": "hana", "groups": ["staff", "hr"]}),
        (alice_key.key, {"user": "hana", "groups": ["hr"]}),
    ):
        status, error = api_server.post(
            "/v1/chat/completions", chat(SALARY_Q, rag={"on_behalf_of": behalf}), key=key
        )
        assert status == 403 and error["error"]["type"] == "permission_error"
        bodies.append(json.dumps(error).encode())
    for body in bodies:
        text = body.decode("utf-8", errors="replace")
        assert not [m for doc in restricted for m in doc.markers if m in text], text


def test_expired_and_revoked_keys_are_refused_on_their_next_request(api_server: Server) -> None:
    with api_server.store() as store:
        key, token = store.keys.create("alice", ["staff"], expires_at=datetime.now(UTC) + timedelta(days=1))
    assert api_server.request("GET", "/v1/models", key=token)[0] == 200
    with api_server.store() as store:
        store.keys.expire(key.id)
    status, error = api_server.post("/v1/chat/completions", chat(SALARY_Q), key=token)
    assert (
        status == 401 and error["error"]["code"] == "expired_api_key" and key.id in error["error"]["message"]
    )
    with api_server.store() as store:
        store.keys.expire(key.id, datetime.now(UTC) + timedelta(days=1))
    assert api_server.request("GET", "/v1/models", key=token)[0] == 200
    with api_server.store() as store:
        store.keys.revoke(key.id)
    status, error = api_server.post("/v1/chat/completions", chat(SALARY_Q), key=token)
    assert status == 401 and error["error"]["code"] == "revoked_api_key"
    assert error["error"]["type"] == "authentication_error"


def test_nothing_is_answered_anonymously(api_server: Server) -> None:
    before = api_server.answers()
    for headers in (
        {},  # nobody
        {"X-Forwarded-Email": "alice@example.com"},  # no user header
        {"Authorization": "Basic YWxpY2U6cHc="},  # not a bearer key
        {"Authorization": "Bearer "},
    ):
        status, _, body = api_server.request("POST", "/v1/chat/completions", chat(SALARY_Q), headers=headers)
        assert status == 401, body
        assert json.loads(body)["error"]["type"] == "authentication_error"
    # A forged second identity header beside the proxy's is refused, not guessed at.
    host, port = api_server.url.split("://", 1)[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest("GET", "/v1/models")
    connection.putheader("X-Forwarded-User", "alice")
    connection.putheader("X-Forwarded-User", "hana")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 401 and json.loads(response.read())["error"]["code"] == "ambiguous_identity"
    connection.close()
    status, _, body = api_server.request("GET", "/v1/models", headers=proxy_headers("alice", ["staff"]))
    assert status == 200
    assert api_server.answers() == before
