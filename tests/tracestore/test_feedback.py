"""Feedback on answers: only on one's own, changeable, filterable, counted, exported and imported again.

Runs on SQLite and (with RAG_TEST_POSTGRES_URL) PostgreSQL, like the rest of this suite.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.errors import AccessError
from rag.tracestore import FeedbackNotAllowed, InvalidFeedback, TraceFilter, TraceNotFound, TraceStore
from rag.tracestore.cli import traces_app
from tests.tracestore.factories import BASE_TIME, make_trace


def _save(store: TraceStore, **kwargs) -> str:  # type: ignore[no-untyped-def]
    return store.traces.save(make_trace(**kwargs))


def test_feedback_is_stored_changed_and_withdrawn(store: TraceStore) -> None:
    tid = _save(store, user="alice")
    assert store.feedback.get(tid) is None
    first = store.feedback.set(tid, "alice", "down", reason="outdated", comment="  The 2021 rule changed.  ")
    assert (first["rating"], first["reason"], first["comment"], first["user"]) == (
        "down",
        "outdated",
        "The 2021 rule changed.",
        "alice",
    )
    changed = store.feedback.set(tid, "alice", "up")
    assert (changed["rating"], changed["reason"], changed["comment"]) == ("up", None, None)
    assert changed["created_at"] == first["created_at"]  # one row per trace, updated in place
    assert changed["updated_at"] >= first["updated_at"]
    assert store.feedback.get(tid)["rating"] == "up"
    assert store.feedback.clear(tid, "alice") is True
    assert store.feedback.get(tid) is None
    assert store.feedback.clear(tid, "alice") is False


def test_feedback_only_on_ones_own_answers(store: TraceStore) -> None:
    tid = _save(store, user="hana")
    with pytest.raises(FeedbackNotAllowed) as err:
        store.feedback.set(tid, "alice", "down", reason="wrong")
    assert isinstance(err.value, AccessError) and "your own answers" in err.value.user_message()
    with pytest.raises(FeedbackNotAllowed):
        store.feedback.clear(tid, "alice")
    assert store.feedback.get(tid) is None
    store.feedback.set(tid, "hana", "up")
    with pytest.raises(FeedbackNotAllowed):  # nor can another user change or withdraw it
        store.feedback.set(tid, "alice", "down")
    assert store.feedback.get(tid)["rating"] == "up"
    with pytest.raises(TraceNotFound):
        store.feedback.set("no-such-trace", "alice", "up")


@pytest.mark.parametrize(
    ("rating", "reason", "comment"),
    [("meh", None, None), ("down", "rude", None), ("down", "other", "x" * 2001), ("up", None, "a\x00b")],
)
def test_invalid_feedback_is_refused(store: TraceStore, rating: str, reason: str | None, comment) -> None:  # type: ignore[no-untyped-def]
    tid = _save(store, user="alice")
    with pytest.raises(InvalidFeedback):
        store.feedback.set(tid, "alice", rating, reason=reason, comment=comment)
    assert store.feedback.get(tid) is None


def test_feedback_in_list_filters_and_counts(store: TraceStore) -> None:
    up = _save(store, user="alice", created_at=BASE_TIME, seed=1)
    down = _save(store, user="bob", created_at=BASE_TIME + timedelta(hours=1), seed=2)
    unrated = _save(store, user="alice", created_at=BASE_TIME + timedelta(hours=2), seed=3)
    store.feedback.set(up, "alice", "up")
    store.feedback.set(down, "bob", "down", reason="incomplete")
    rows = {r["trace_id"]: r for r in store.traces.list()}
    assert (rows[up]["feedback"], rows[down]["feedback"], rows[unrated]["feedback"]) == ("up", "down", None)
    assert rows[down]["feedback_reason"] == "incomplete"
    assert [r["trace_id"] for r in store.traces.list(TraceFilter(feedback="down"))] == [down]
    assert [r["trace_id"] for r in store.traces.list(TraceFilter(feedback="up"))] == [up]
    assert [r["trace_id"] for r in store.traces.list(TraceFilter(feedback="none"))] == [unrated]
    assert {r["trace_id"] for r in store.traces.list(TraceFilter(feedback="any"))} == {up, down}
    assert store.traces.count(TraceFilter(feedback="down", user="alice")) == 0
    with pytest.raises(ValueError):
        store.traces.list(TraceFilter(feedback="sideways"))  # type: ignore[arg-type]


def test_deleting_a_trace_deletes_its_feedback(store: TraceStore) -> None:
    from sqlalchemy import text

    tid = _save(store, user="alice")
    store.feedback.set(tid, "alice", "down")
    # What a retention job would do: delete the answer row, in a write transaction on the store's database.
    store.db.write(
        "delete", lambda conn: conn.execute(text("DELETE FROM answers WHERE trace_id = :t"), {"t": tid})
    )
    assert store.feedback.get(tid) is None


def test_analytics_queries(store: TraceStore) -> None:
    day1, day2 = BASE_TIME, BASE_TIME + timedelta(days=1)
    a = _save(store, user="alice", created_at=day1, seed=1)
    b = _save(
        store,
        user="bob",
        created_at=day1 + timedelta(hours=1),
        abstained=True,
        seed=2,
        question="Can I bring my dog to the office?",
    )
    c = _save(
        store,
        user="alice",
        created_at=day2,
        failed_citation=True,
        seed=3,
        question="What is the per diem in Oslo?",
    )
    store.feedback.set(a, "alice", "up")
    store.feedback.set(c, "alice", "down", reason="wrong", comment="Oslo is not listed")
    days = store.analytics.daily_stats()
    assert [d["day"] for d in days] == ["2025-03-01", "2025-03-02"]
    assert {
        k: days[0][k] for k in ("questions", "abstained", "failed_citations", "thumbs_up", "thumbs_down")
    } == {
        "questions": 2,
        "abstained": 1,
        "failed_citations": 0,
        "thumbs_up": 1,
        "thumbs_down": 0,
    }
    assert (days[1]["questions"], days[1]["failed_citations"], days[1]["thumbs_down"]) == (1, 1, 1)
    assert [d["day"] for d in store.analytics.daily_stats(since="2025-03-02")] == ["2025-03-02"]
    assert store.analytics.feedback_reasons() == {"wrong": 1}

    gaps = store.analytics.gap_questions()
    assert [g["trace_id"] for g in gaps] == [c, b]  # newest first: the down-vote, then the abstention
    assert gaps[0]["feedback_reason"] == "wrong" and gaps[0]["feedback_comment"] == "Oslo is not listed"
    assert gaps[1]["abstained"] is True and gaps[1]["feedback"] is None
    assert store.analytics.gap_questions(until="2025-03-01") == [gaps[1]]

    cited = store.analytics.cited_documents()
    # make_trace cites evidence 1 and 3 of its chunks (doc-0 .. doc-3, page i+1): doc-0 and doc-2.
    assert set(cited) == {"doc-0", "doc-2"}
    assert all(v["answers"] == 3 for v in cited.values())
    assert store.analytics.users() == ["alice", "bob"]


def test_export_carries_feedback_and_import_restores_it(
    store: TraceStore, migrated_url: str, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rated = _save(store, user="alice", seed=1)
    plain = _save(store, user="alice", seed=2)
    store.feedback.set(rated, "alice", "down", reason="other", comment="Asked about contractors")
    exported = list(store.traces.export(with_feedback=True))
    by_id = {t["trace_id"]: t for t in exported}
    assert by_id[rated]["feedback"]["comment"] == "Asked about contractors"
    assert "feedback" not in by_id[plain]
    assert all("feedback" not in t for t in store.traces.export())  # without the flag: as written

    # Through the CLI: export from this database, import into a fresh SQLite one, feedback included.
    monkeypatch.chdir(tmp_path)
    if store_url.startswith("sqlite"):
        monkeypatch.delenv("RAG_DATABASE_URL", raising=False)
        source_dir = Path(store_url.removeprefix("sqlite:///")).parent
    else:
        monkeypatch.setenv("RAG_DATABASE_URL", store_url)
        source_dir = tmp_path
    runner = CliRunner()
    out = tmp_path / "export.jsonl"
    result = runner.invoke(traces_app, ["export", "--out", str(out), "--data-dir", str(source_dir)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sum("feedback" in t for t in lines) == 1

    from rag.tracestore.db import upgrade

    target_dir = tmp_path / "target"
    target_dir.mkdir()
    monkeypatch.delenv("RAG_DATABASE_URL", raising=False)
    target_url = f"sqlite:///{target_dir / 'traces.sqlite'}"
    upgrade(target_url)
    result = runner.invoke(traces_app, ["import", str(out), "--data-dir", str(target_dir)])
    assert result.exit_code == 0, result.output
    with TraceStore(target_url) as target:
        got = target.feedback.get(rated)
        assert (got["rating"], got["reason"], got["comment"]) == ("down", "other", "Asked about contractors")
        assert target.feedback.get(plain) is None
        assert "feedback" not in target.traces.get(rated)  # stored as feedback, not as a trace extra
