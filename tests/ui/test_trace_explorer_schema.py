"""The trace explorer reads stored traces through the trace schema (rag/traces/schema.py): a trace stored before
the newer keys existed opens with their defaults; one that does not match is a message, not a broken page."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.tracestore.factories import make_trace
from tests.ui.test_pages import errors, goto, open_app, store_for

pytest.importorskip("streamlit")


@pytest.fixture
def data_dir(tmp_path: Path, ui_data_dir: Path) -> Path:
    """A copy of the UI's sample data: these tests add traces the other UI tests must not see."""
    shutil.copytree(ui_data_dir, tmp_path / "data")
    return tmp_path / "data"


def open_trace(monkeypatch: pytest.MonkeyPatch, data_dir: Path, trace_id: str):  # type: ignore[no-untyped-def]
    at = open_app(monkeypatch, data_dir, user="alice")
    goto(at, "traces")
    assert any(label.endswith(trace_id[:8]) for label in at.selectbox(key="trace_open").options)
    at.selectbox(key="trace_open").select(trace_id).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_an_old_trace_opens_and_a_mismatched_one_is_a_message(
    monkeypatch: pytest.MonkeyPatch, data_dir: Path
) -> None:
    now = datetime.now(UTC)
    old = make_trace(user="alice", question="An answer from before the claim check?", created_at=now, seed=21)
    for key in ("answer_check", "claims", "verified", "verification"):
        del old[key]
    odd = make_trace(user="alice", question="A trace from elsewhere", created_at=now - timedelta(1), seed=22)
    odd["surprise"] = True
    with store_for(data_dir) as store:
        old_id, odd_id = store.traces.save(old), store.traces.save(odd)

    at = open_trace(monkeypatch, data_dir, old_id)
    assert errors(at) == []
    assert any("An answer from before the claim check?" in m.value for m in at.markdown)

    at = open_trace(monkeypatch, data_dir, odd_id)
    assert any(
        odd_id in e and "surprise: unknown key" in e and "docs/schema/trace.schema.json" in e
        for e in errors(at)
    ), errors(at)
