"""The route that serves a cited PDF to the browser's viewer (ui/serving.py): the signed link, who is asking on the
request, and the access check on the request that serves the file. Real HTTP through Starlette's test client, real
sample PDFs; no browser and no model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient
from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

from rag.config import load_settings
from rag.types import Principal
from ui import oidc, serving
from ui.auth import Identity
from ui.sources import NOT_AVAILABLE, readable_source

SAMPLE = Path(__file__).resolve().parents[2] / "ingest" / "sample" / "pdfs"
KEY = b"k" * 32
COOKIE_SECRET = "streamlit-cookie-secret-0123456789"
ORIGIN = "http://127.0.0.1:8501"
NOW = 1_800_000_000.0
DOCS: dict[str, dict[str, Any]] = {
    "salary": {
        "title": "Salary Bands",
        "groups": ["hr"],
        "source": str(SAMPLE / "salary-bands.pdf"),
        "pages": 2,
    },
    "refunds": {"title": "Refunds", "groups": ["*"], "source": str(SAMPLE / "refunds.pdf"), "pages": 1},
    "notes": {"title": "Notes", "groups": ["*"], "source": str(SAMPLE / "salary-bands.pdf.meta.json")},
}
HANA = Principal("hana", frozenset({"staff", "hr"}))
ALICE = Principal("alice", frozenset({"staff"}))


def _proxy(user: str, groups: str) -> dict[str, str]:
    return {"X-Forwarded-User": user, "X-Forwarded-Groups": groups}


def _link(principal: Principal, doc_id: str, *, expires: float = NOW + 60) -> str:
    return serving.sign(serving.SourceLink(principal.user, principal.groups, doc_id, int(expires)), KEY)


def _client(mode: str, documents: dict[str, dict[str, Any]] = DOCS, tmp: Path | None = None) -> TestClient:
    """The route as ui/server.py mounts it, but with the settings, index, keys and origin of this test."""
    settings = load_settings(data_dir=tmp or Path("."), auth=mode)
    users = {"alice": ALICE.groups, "hana": HANA.groups}

    def endpoint(request):  # type: ignore[no-untyped-def]
        signed_in = (
            oidc.identity_from_cookies(request.cookies, settings, secret=COOKIE_SECRET, origin=ORIGIN)
            if mode == "oidc"
            else None
        )
        return serving.serve(
            str(request.path_params["doc_id"]),
            str(request.query_params.get(serving.LINK_PARAM) or ""),
            settings=settings,
            headers=request.headers,
            server_address="127.0.0.1",
            users=users,
            documents=documents,
            key=KEY,
            now=NOW,
            signed_in=signed_in,
        )

    from starlette.routing import Route

    app = Starlette(routes=[Route(serving.route_path() + "{doc_id:path}", endpoint)])
    return TestClient(app, base_url="http://127.0.0.1:8501")


# ----------------------------------------------------------------------------- the link
def test_a_link_verifies_only_as_signed_and_until_it_expires() -> None:
    link = serving.SourceLink("hana", frozenset({"hr", "staff"}), "salary", int(NOW + 60))
    token = serving.sign(link, KEY)
    assert serving.verify(token, KEY, now=NOW) == link
    assert serving.verify(token, KEY, now=NOW + 60) is None  # expired
    assert serving.verify(token, b"another key" * 3, now=NOW) is None
    body, mac = token.split(".")
    forged = serving.sign(serving.SourceLink("alice", frozenset({"hr"}), "salary", int(NOW + 60)), KEY)
    assert serving.verify(f"{forged.split('.')[0]}.{mac}", KEY, now=NOW) is None  # a body swapped under a MAC
    assert serving.verify(f"{body}.{mac[:-2]}", KEY, now=NOW) is None
    for junk in ("", ".", "abc", "a.b", body, f"{body}.", "x" * 9000, "e30.e30", "%%%.%%%"):
        assert serving.verify(junk, KEY, now=NOW) is None, junk


def test_open_url_names_the_page_and_only_where_the_route_is_mounted(monkeypatch: pytest.MonkeyPatch) -> None:
    source = readable_source(DOCS, HANA, "salary")
    assert source is not None
    monkeypatch.setattr(serving, "MOUNTED", False)
    assert serving.open_url(source, HANA, 2) is None  # `streamlit run ui/app.py`: no route, no link
    monkeypatch.setattr(serving, "MOUNTED", True)
    monkeypatch.setattr(serving, "link_key", lambda: KEY)
    url = serving.open_url(source, HANA, 2, now=NOW)
    assert url is not None and url.startswith("/api/source/salary?link=") and url.endswith("#page=2")
    token = urlsplit(url).query.split("=", 1)[1]
    link = serving.verify(token, KEY, now=NOW)
    assert link == serving.SourceLink("hana", HANA.groups, "salary", int(NOW + serving.LINK_TTL_S))
    text = readable_source(DOCS, HANA, "notes")
    assert text is not None and serving.open_url(text, HANA, 1) is None  # only PDFs open in the PDF viewer
    assert serving.route_path("/bot/") == "/bot/api/source/" and serving.route_path("") == "/api/source/"


def test_routes_mount_the_endpoint_under_the_base_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "MOUNTED", False)
    monkeypatch.setattr(serving, "_base_url", lambda: "bot")
    (route,) = serving.routes()
    assert serving.MOUNTED and route.path == "/bot/api/source/{doc_id:path}"
    assert route.endpoint is serving.serve_source and "GET" in (route.methods or set())


# ----------------------------------------------------------------------------- who asks
def test_the_requester_comes_from_the_deployment_on_each_request() -> None:
    link = serving.SourceLink("hana", frozenset({"hr", "staff"}), "salary", int(NOW + 60))
    proxy = load_settings(auth="proxy")
    # proxy: this request's headers, which must name the link's user; their groups count, not the link's
    assert serving.requester(link, proxy, _proxy("hana", "staff,hr"), None, None) == HANA
    assert serving.requester(link, proxy, _proxy("hana", "staff"), None, None) == Principal(
        "hana", frozenset({"staff"})
    )
    assert serving.requester(link, proxy, _proxy("alice", "staff,hr"), None, None) is None
    assert serving.requester(link, proxy, {}, None, None) is None
    # a client's forged header beside the proxy's: refused, not guessed at
    assert serving.requester(link, proxy, {"X-Forwarded-User": ["hana", "alice"]}, None, None) is None
    # demo: the user list, on a loopback server reached directly
    demo = load_settings(auth="demo")
    users = {"hana": frozenset({"staff"}), "alice": ALICE.groups}
    assert serving.requester(link, demo, {"Host": "127.0.0.1:8501"}, "127.0.0.1", users) == Principal(
        "hana", frozenset({"staff"})
    )
    assert serving.requester(link, demo, {}, "127.0.0.1", {"alice": ALICE.groups}) is None
    assert serving.requester(link, demo, {}, "0.0.0.0", users) is None
    assert serving.requester(link, demo, {"X-Forwarded-For": "10.0.0.9"}, "127.0.0.1", users) is None
    # oidc: the identity of this request's signed cookie (ui/oidc.py), which must name the link's user; the groups
    # its verified ID token carries count, not the link's
    oidc_settings = load_settings(auth="oidc")
    signed_in = Identity(Principal("hana", frozenset({"staff"})), mode="oidc")
    assert serving.requester(link, oidc_settings, {}, None, None, signed_in) == signed_in.principal
    assert serving.requester(link, oidc_settings, {}, None, None, Identity(ALICE, mode="oidc")) is None
    assert serving.requester(link, oidc_settings, {}, None, None) is None  # signed in as nobody
    # proxy headers mean nothing in oidc mode
    assert serving.requester(link, oidc_settings, _proxy("hana", "staff,hr"), None, None) is None


# ----------------------------------------------------------------------------- the request that serves the file
def test_the_owner_gets_the_pdf_inline() -> None:
    client = _client("proxy")
    response = client.get(
        f"/api/source/salary?link={_link(HANA, 'salary')}", headers=_proxy("hana", "staff,hr")
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["content-disposition"].startswith("inline")
    assert "no-store" in response.headers["cache-control"]
    assert response.content == (SAMPLE / "salary-bands.pdf").read_bytes()
    head = client.head(f"/api/source/salary?link={_link(HANA, 'salary')}", headers=_proxy("hana", "staff,hr"))
    assert head.status_code == 200 and head.headers["content-type"] == "application/pdf"


def test_an_outsider_gets_no_file_whatever_the_address() -> None:
    client = _client("proxy")
    pdf = (SAMPLE / "salary-bands.pdf").read_bytes()[:5]
    alice = _proxy("alice", "staff")
    hana_link = _link(HANA, "salary")
    refused = {
        # hana's own address, pasted by alice
        f"/api/source/salary?link={hana_link}": 403,
        # no link, a junk link, an expired one
        "/api/source/salary": 403,
        "/api/source/salary?link=abc.def": 403,
        f"/api/source/salary?link={_link(ALICE, 'salary', expires=NOW - 1)}": 403,
        # alice's valid link to a document she may read, with the salary bands' id swapped into the address
        f"/api/source/salary?link={_link(ALICE, 'refunds')}": 403,
        # a correctly signed link for alice to the salary bands (the page never makes one): the access check says no,
        # exactly as for a document that does not exist
        f"/api/source/salary?link={_link(ALICE, 'salary')}": 404,
        f"/api/source/nope?link={_link(ALICE, 'nope')}": 404,
        # paths, never files by path
        f"/api/source/..%2F..%2Fetc%2Fpasswd?link={_link(ALICE, '../../etc/passwd')}": 404,
        f"/api/source/{SAMPLE / 'salary-bands.pdf'}?link={_link(ALICE, str(SAMPLE / 'salary-bands.pdf'))}": 404,
    }
    for address, status in refused.items():
        response = client.get(address, headers=alice)
        assert response.status_code == status, (address, response.status_code)
        assert not response.content.startswith(pdf) and response.headers["content-type"].startswith(
            "text/plain"
        )
        assert response.text in (serving.NOT_VALID, NOT_AVAILABLE)
    same = {client.get(a, headers=alice).text for a, s in refused.items() if s == 404}
    assert same == {NOT_AVAILABLE}  # restricted and missing read the same
    # hana's link for hana, but sent without the proxy's headers (a copy of the address outside the sign-in)
    assert client.get(f"/api/source/salary?link={hana_link}").status_code == 403


def test_access_is_checked_now_not_when_the_link_was_made() -> None:
    link = _link(HANA, "salary")
    # hana left hr after the link was made: the proxy now sends her without it
    assert (
        _client("proxy").get(f"/api/source/salary?link={link}", headers=_proxy("hana", "staff")).status_code
        == 404
    )
    # the document was re-ingested for another group
    moved = {**DOCS, "salary": {**DOCS["salary"], "groups": ["finance"]}}
    response = _client("proxy", moved).get(
        f"/api/source/salary?link={link}", headers=_proxy("hana", "staff,hr")
    )
    assert response.status_code == 404
    # a file that is not a PDF is not served by this route
    notes = _client("proxy").get(
        f"/api/source/notes?link={_link(HANA, 'notes')}", headers=_proxy("hana", "hr")
    )
    assert notes.status_code == 404


def _oidc_cookie(email: str, groups: list[str] | None, secret: str = COOKIE_SECRET) -> str:
    """Streamlit's identity cookie after a verified sign-in (signed with its cookie secret)."""
    claims: dict[str, Any] = {"email": email, "origin": ORIGIN, "is_logged_in": True, "provider": "default"}
    if groups is not None:
        claims["groups"] = groups
    return create_signed_value(secret, "_streamlit_user", json.dumps(claims)).decode()


def test_oidc_mode_serves_the_signed_in_user_s_groups_only() -> None:
    client = _client("oidc")
    hana = Principal("hana@example.com", HANA.groups)
    url = f"/api/source/salary?link={_link(hana, 'salary')}"
    client.cookies.set("_streamlit_user", _oidc_cookie("hana@example.com", ["staff", "hr"]))
    ok = client.get(url)
    assert ok.status_code == 200 and ok.content.startswith(b"%PDF")
    client.cookies.clear()
    assert client.get(url).status_code == 403  # the link without a signed-in browser
    for cookie in (
        _oidc_cookie("alice@example.com", ["staff", "hr"]),  # someone else, even with the groups
        _oidc_cookie("hana@example.com", ["staff", "hr"], secret="not-this-server-s-secret-0123456789"),
    ):
        client.cookies.set("_streamlit_user", cookie)
        response = client.get(url)
        assert response.status_code == 403 and not response.content.startswith(b"%PDF")
    # hana, no longer in hr by the token she signed in with: the link she made before opens nothing
    client.cookies.set("_streamlit_user", _oidc_cookie("hana@example.com", ["staff"]))
    assert client.get(url).status_code == 404
    # proxy headers mean nothing in oidc mode
    client.cookies.clear()
    assert client.get(url, headers=_proxy("hana@example.com", "staff,hr")).status_code == 403


def test_demo_mode_serves_the_user_list_s_groups_on_loopback_only() -> None:
    client = _client("demo")
    assert client.get(f"/api/source/salary?link={_link(HANA, 'salary')}").status_code == 200
    assert client.get(f"/api/source/salary?link={_link(ALICE, 'salary')}").status_code == 404
    forwarded = client.get(
        f"/api/source/salary?link={_link(HANA, 'salary')}", headers={"X-Forwarded-For": "203.0.113.9"}
    )
    assert forwarded.status_code == 403


def test_the_endpoint_reads_the_published_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """serve_source as ui/server.py mounts it: settings from the environment, documents from the manifest of the
    published generation, the key from Streamlit's cookie secret."""
    generation = tmp_path / "index" / "generations" / "gen-000001"
    generation.mkdir(parents=True)
    manifest = {
        "generation": "gen-000001",
        "created_at": "2026-01-01T00:00:00",
        "embedding_model": "m",
        "dim": 3,
        "documents": {k: {**v, "chunk_ids": []} for k, v in DOCS.items()},
        "sources": {},
    }
    (generation / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "index" / "CURRENT").write_text("gen-000001")
    monkeypatch.setenv("RAG_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAG_AUTH", "proxy")
    monkeypatch.setattr(serving, "MOUNTED", False)
    monkeypatch.setattr(serving, "_base_url", lambda: "")
    assert set(serving.published_documents(tmp_path)) == set(DOCS)
    app = Starlette(routes=serving.routes())
    source = readable_source(DOCS, HANA, "salary")
    assert source is not None
    url = serving.open_url(source, HANA, 1)
    assert url is not None
    with TestClient(app, base_url="http://127.0.0.1:8501") as client:
        ok = client.get(url.split("#")[0], headers=_proxy("hana", "staff,hr"))
        assert ok.status_code == 200 and ok.headers["content-type"] == "application/pdf"
        assert client.get(url.split("#")[0], headers=_proxy("alice", "staff")).status_code == 403
    assert serving.published_documents(tmp_path / "empty") == {}
