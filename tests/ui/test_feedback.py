"""Feedback in the UI: the owner rates an answer in the trace explorer (and changes it); admins see and
filter it; the widget never rates someone else's answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from rag.config import load_settings
from rag.tracestore import TraceFilter
from tests.ui.test_pages import open_app
from ui.feedback import SAVED, feedback_label

REFUND_Q = "How many days does a customer have to return an item for a full refund?"


def _store(data_dir: Path):  # type: ignore[no-untyped-def]
    from rag.tracestore import TraceStore

    return TraceStore.from_settings(load_settings(data_dir=data_dir))


def _table(at: AppTest):  # type: ignore[no-untyped-def]
    return next(d.value for d in at.dataframe if "trace id" in d.value.columns)


def test_feedback_is_stored_changed_shown_and_filtered(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = open_app(monkeypatch, ui_data_dir, "tom")
    at.chat_input(key="chat_input").set_value(REFUND_Q).run()
    at.switch_page("views/traces.py").run()
    assert not at.exception
    tid = at.selectbox(key="trace_open").value
    base = f"feedback_trace_{tid}"
    assert at.feedback(key=f"{base}_thumbs").value is None

    at.feedback(key=f"{base}_thumbs").set_value(0).run()  # thumbs down
    stored = _store(ui_data_dir).feedback.get(tid)
    assert (stored["rating"], stored["reason"], stored["user"]) == ("down", None, "tom")
    assert any(SAVED in c.value for c in at.caption)
    at.pills(key=f"{base}_reason").set_value("other").run()
    at.text_input(key=f"{base}_comment").set_value("I asked about store credit").run()
    stored = _store(ui_data_dir).feedback.get(tid)
    assert (stored["reason"], stored["comment"]) == ("other", "I asked about store credit")
    # Shown in the table, and the "down" filter finds it.
    row = _table(at).set_index("trace id").loc[tid]
    # The table shows the rating and reason (the comment is in the trace), drawn after the save.
    assert row["feedback"] == feedback_label({**stored, "comment": None}) == "down: other"
    at.selectbox(key="trace_f_feedback").select("down").run()
    assert set(_table(at)["trace id"]) == {tid}

    # Changed: thumbs up drops the reason.
    at.selectbox(key="trace_f_feedback").select("any").run()
    at.feedback(key=f"{base}_thumbs").set_value(1).run()
    stored = _store(ui_data_dir).feedback.get(tid)
    assert (stored["rating"], stored["reason"], stored["comment"]) == ("up", None, None)
    at.selectbox(key="trace_f_feedback").select("down").run()
    assert tid not in set(_table(at)["trace id"]) if at.dataframe else True
    # Withdrawn: clicking the chosen thumb again clears it.
    at.selectbox(key="trace_f_feedback").select("any").run()
    at.feedback(key=f"{base}_thumbs").set_value(None).run()
    assert _store(ui_data_dir).feedback.get(tid) is None

    # A fresh session shows the stored rating again.
    _store(ui_data_dir).feedback.set(tid, "tom", "down", reason="outdated")
    at = open_app(monkeypatch, ui_data_dir, "tom")
    at.switch_page("views/traces.py").run()
    at.selectbox(key="trace_open").select(tid).run()
    assert at.feedback(key=f"{base}_thumbs").value == 0
    assert at.pills(key=f"{base}_reason").value == "outdated"


def test_admin_sees_everyones_feedback_and_abstentions_but_cannot_rate_them(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = open_app(monkeypatch, ui_data_dir, "alice")
    at.chat_input(key="chat_input").set_value(
        "What is the airspeed velocity of an unladen swallow on Jupiter?"
    ).run()
    store = _store(ui_data_dir)
    tid = store.traces.list(TraceFilter(user="alice"), limit=1)[0]["trace_id"]
    store.feedback.set(tid, "alice", "down", reason="did_not_answer")

    olga = open_app(monkeypatch, ui_data_dir, "olga")
    olga.switch_page("views/traces.py").run()
    olga.selectbox(key="trace_f_feedback").select("down").run()
    assert not olga.exception
    assert tid in set(_table(olga)["trace id"])
    assert "alice" in set(_table(olga)["user"])  # another user's down-vote, for the admin
    if store.traces.get(tid)["abstained"]:
        olga.selectbox(key="trace_f_feedback").select("any").run()
        olga.selectbox(key="trace_f_abstained").select("yes").run()
        assert tid in set(_table(olga)["trace id"])  # every user's abstentions, not only olga's
    olga.selectbox(key="trace_f_feedback").select("down").run()
    olga.selectbox(key="trace_f_abstained").select("any").run()
    olga.selectbox(key="trace_open").select(tid).run()
    assert not olga.get("feedback"), "no rating widget on someone else's answer"
    assert any("Feedback from alice" in c.value for c in olga.caption)


def test_every_chat_answer_has_the_thumbs_and_they_store(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = open_app(monkeypatch, ui_data_dir, "hana")
    at.chat_input(key="chat_input").set_value(REFUND_Q).run()
    at.chat_input(key="chat_input").set_value("And are gift cards refundable?").run()
    assert not at.exception
    thumbs = [f for f in at.get("feedback")]
    assert len(thumbs) == 2  # one under each answer
    tid = _store(ui_data_dir).traces.list(TraceFilter(user="hana"), limit=1)[0]["trace_id"]
    at.feedback(key=f"feedback_{tid}_3_thumbs").set_value(1).run()  # the second answer is message 3
    assert _store(ui_data_dir).feedback.get(tid)["rating"] == "up"
    assert len(at.get("feedback")) == 2 and not at.exception
