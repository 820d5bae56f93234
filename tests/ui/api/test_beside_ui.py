"""The API served beside the UI: ``rag ui`` (Streamlit's server, ui/server.py) answers /v1 too, with the pipeline
and sign-in the pages use. In demo mode on a loopback address a request without a key asks as a demo user, as
the demo's picker does; through a forwarding proxy it is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui.api.conftest import MODEL, REFUND_Q, Server, chat, copy_data_dir, run_server


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory, sample_data_dir: Path) -> Iterator[Server]:
    data_dir = copy_data_dir(tmp_path_factory, sample_data_dir, "api-ui-data")
    log = tmp_path_factory.mktemp("api-ui-log") / "ui.log"
    with run_server(data_dir, log, {"RAG_AUTH": "demo"}, command="ui", health="/_stcore/health") as server:
        yield server


def test_rag_ui_serves_the_api_beside_the_app(ui_server: Server) -> None:
    status, _, page = ui_server.request("GET", "/")
    assert status == 200 and b"<html" in page.lower()  # the app is still there
    status, _, body = ui_server.request("GET", "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == MODEL
    status, _, body = ui_server.request("GET", "/v1/no-such-thing")
    assert status == 404 and json.loads(body)["error"]["code"] == "unknown_endpoint"  # not the app's page

    status, reply = ui_server.post("/v1/chat/completions", chat(REFUND_Q, user="hana"))
    assert status == 200 and reply["rag"]["sources"]
    with ui_server.store() as store:
        trace = store.traces.get(reply["rag"]["trace_id"])
    assert (trace["user"], trace["groups"], trace["channel"], trace["api_key"]) == (
        "hana",
        ["hr", "staff"],
        "api",
        None,
    )
    url = reply["rag"]["sources"][0]["url"]
    assert url.startswith(ui_server.url + "/api/source/")
    status, headers, pdf = ui_server.request(
        "GET", "/" + url.split("://", 1)[1].split("/", 1)[1].split("#")[0]
    )
    assert status == 200 and pdf.startswith(b"%PDF")  # the link opens, for the demo user it was made for

    status, reply = ui_server.post("/v1/chat/completions", chat(REFUND_Q))
    with ui_server.store() as store:
        assert store.traces.get(reply["rag"]["trace_id"])["user"] == "alice"  # the picker's first user

    status, error = ui_server.post("/v1/chat/completions", chat(REFUND_Q, user="mallory"))
    assert status == 400 and error["error"]["code"] == "unknown_user"
    status, error = ui_server.post(
        "/v1/chat/completions", chat(REFUND_Q), headers={"X-Forwarded-For": "10.0.0.9"}
    )
    assert status == 401 and "proxy" in error["error"]["message"]

    key = ui_server.key("beside-ui", "sam", ["staff", "security"])
    status, reply = ui_server.post("/v1/chat/completions", chat(REFUND_Q, stream=False), key=key)
    with ui_server.store() as store:
        trace = store.traces.get(reply["rag"]["trace_id"])
    assert trace["user"] == "sam" and trace["api_key"]["name"] == "beside-ui"
    assert "Traceback" not in ui_server.log.read_text(errors="replace")
