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
from rag.tracestore import FeedbackNotAllowed, InvalidFeedback, TraceNotFound, TraceStore
from rag.tracestore.cli import traces_app
from tests.tracestore.factories import BASE_TIME, make_trace


def _save(store: TraceStore, **kwargs) -> str:  # type: ignore[no-untyped-def]
    return store.save_trace(make_trace(**kwargs))


def test_feedback_is_stored_changed_and_withdrawn(store: TraceStore) -> None:
    tid = _save(store, user="alice")
    assert store.get_feedback(tid) is None
    first = store.set_feedback(tid, "alice", "down", reason="outdated", comment="  The 2021 rule changed.  ")
    assert (first["rating"], first["reason"], first["comment"], first["user"]) == (
        "down",
        "outdated",
        "The 2021 rule changed.",
        "alice",
    )
    changed = store.set_feedback(tid, "alice", "up")
    assert (changed["rating"], changed["reason"], changed["comment"]) == ("up", None, None)
    assert changed["created_at"] == first["created_at"]  # one row per trace, updated in place
    assert changed["updated_at"] >= first["updated_at"]
    assert store.get_feedback(tid)["rating"] == "up"
    assert store.clear_feedback(tid, "alice") is True
    assert store.get_feedback(tid) is None
    assert store.clear_feedback(tid, "alice") is False


def test_feedback_only_on_ones_own_answers(store: TraceStore) -> None:
    tid = _save(store, user="hana")
    with pytest.raises(FeedbackNotAllowed) as err:
        store.set_feedback(tid, "alice", "down", reason="wrong")
    assert isinstance(err.value, AccessError) and "your own answers" in err.value.user_message()
    with pytest.raises(FeedbackNotAllowed):
        store.clear_feedback(tid, "alice")
    assert store.get_feedback(tid) is None
    store.set_feedback(tid, "hana", "up")
    with pytest.raises(FeedbackNotAllowed):  # nor can another user change or withdraw it
        store.set_feedback(tid, "alice", "down")
    assert store.get_feedback(tid)["rating"] == "up"
    with pytest.raises(TraceNotFound):
        store.set_feedback("no-such-trace", "alice", "up")


@pytest.mark.parametrize(
    ("rating", "reason", "comment"),
    [("meh", None, None), ("down", "rude", None), ("down", "other", "x" * 2001), ("up", None, "a\x00b")],
)
def test_invalid_feedback_is_refused(store: TraceStore, rating: str, reason: str | None, comment) -> None:  # type: ignore[no-untyped-def]
    tid = _save(store, user="alice")
    with pytest.raises(InvalidFeedback):
        store.set_feedback(tid, "alice", rating, reason=reason, comment=comment)
    assert store.get_feedback(tid) is None


def test_feedback_in_list_filters_and_counts(store: TraceStore) -> None:
    up = _save(store, user="alice", created_at=BASE_TIME, seed=1)
    down = _save(store, user="bob", created_at=BASE_TIME + timedelta(hours=1), seed=2)
    unrated = _save(store, user="alice", created_at=BASE_TIME + timedelta(hours=2), seed=3)
    store.set_feedback(up, "alice", "up")
    store.set_feedback(down, "bob", "down", reason="incomplete")
    rows = {r["trace_id"]: r for r in store.list_traces()}
    assert (rows[up]["feedback"], rows[down]["feedback"], rows[unrated]["feedback"]) == ("up", "down", None)
    assert rows[down]["feedback_reason"] == "incomplete"
    assert [r["trace_id"] for r in store.list_traces(feedback="down")] == [down]
    assert [r["trace_id"] for r in store.list_traces(feedback="up")] == [up]
    assert [r["trace_id"] for r in store.list_traces(feedback="none")] == [unrated]
    assert {r["trace_id"] for r in store.list_traces(feedback="any")} == {up, down}
    assert store.count_traces(feedback="down", user="alice") == 0
    with pytest.raises(ValueError):
        store.list_traces(feedback="sideways")  # type: ignore[arg-type]


def test_deleting_a_trace_deletes_its_feedback(store: TraceStore) -> None:
    from sqlalchemy import text

    tid = _save(store, user="alice")
    store.set_feedback(tid, "alice", "down")
    with store._writer.begin() as conn:  # what a retention job would do
        conn.execute(text("DELETE FROM answers WHERE trace_id = :t"), {"t": tid})
    assert store.get_feedback(tid) is None


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
    store.set_feedback(a, "alice", "up")
    store.set_feedback(c, "alice", "down", reason="wrong", comment="Oslo is not listed")
    days = store.daily_stats()
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
    assert [d["day"] for d in store.daily_stats(since="2025-03-02")] == ["2025-03-02"]
    assert store.feedback_reasons() == {"wrong": 1}

    gaps = store.gap_questions()
    assert [g["trace_id"] for g in gaps] == [c, b]  # newest first: the down-vote, then the abstention
    assert gaps[0]["feedback_reason"] == "wrong" and gaps[0]["feedback_comment"] == "Oslo is not listed"
    assert gaps[1]["abstained"] is True and gaps[1]["feedback"] is None
    assert store.gap_questions(until="2025-03-01") == [gaps[1]]

    cited = store.cited_documents()
    # make_trace cites evidence 1 and 3 of its chunks (doc-0 .. doc-3, page i+1): doc-0 and doc-2.
    assert set(cited) == {"doc-0", "doc-2"}
    assert all(v["answers"] == 3 for v in cited.values())
    assert store.list_users() == ["alice", "bob"]


def test_export_carries_feedback_and_import_restores_it(
    store: TraceStore, migrated_url: str, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rated = _save(store, user="alice", seed=1)
    plain = _save(store, user="alice", seed=2)
    store.set_feedback(rated, "alice", "down", reason="other", comment="Asked about contractors")
    exported = list(store.export_traces(with_feedback=True))
    by_id = {t["trace_id"]: t for t in exported}
    assert by_id[rated]["feedback"]["comment"] == "Asked about contractors"
    assert "feedback" not in by_id[plain]
    assert all("feedback" not in t for t in store.export_traces())  # without the flag: as written

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
        got = target.get_feedback(rated)
        assert (got["rating"], got["reason"], got["comment"]) == ("down", "other", "Asked about contractors")
        assert target.get_feedback(plain) is None
        assert "feedback" not in target.get_trace(rated)  # stored as feedback, not as a trace extra
