"""Chat sessions and turns; conversation memory where a correction replaces the old fact."""

from __future__ import annotations

import pytest

from rag.tracestore import SessionNotFound, TraceFilter, TraceStore
from tests.tracestore.factories import errors_in_threads, make_trace


def test_sessions_and_turns(store: TraceStore) -> None:
    first = store.sessions.create("alice", "Travel questions")
    second = store.sessions.create("alice", "Expenses")
    store.sessions.create("bob", "Bob's chat")

    trace = make_trace(user="alice", session_id=first)
    store.sessions.add_turn(first, "user", trace["question"])
    trace_id = store.traces.save(trace)
    turn_id = store.sessions.add_turn(first, "assistant", trace["answer"], trace_id=trace_id)
    store.sessions.add_turn(first, "user", "And for trains?")

    turns = store.sessions.turns(first)
    assert [(t["role"], t["content"], t["trace_id"]) for t in turns] == [
        ("user", trace["question"], None),
        ("assistant", trace["answer"], trace_id),
        ("user", "And for trains?", None),
    ]
    assert turns[1]["id"] == turn_id
    assert all(t["session_id"] == first and t["created_at"].endswith("+00:00") for t in turns)

    sessions = store.sessions.list("alice")
    assert [(s["id"], s["title"], s["turns"]) for s in sessions] == [
        (second, "Expenses", 0),
        (first, "Travel questions", 3),
    ]
    assert sessions[0]["last_turn_at"] is None and sessions[1]["last_turn_at"] == turns[-1]["created_at"]
    assert [s["user"] for s in store.sessions.list("bob")] == ["bob"]
    assert store.sessions.list("nobody") == []
    assert store.traces.list(TraceFilter(user="alice"))[0]["session_id"] == first
    assert store.sessions.turns(second) == []


def test_turns_need_a_known_session_and_role(store: TraceStore) -> None:
    with pytest.raises(SessionNotFound):
        store.sessions.add_turn("missing", "user", "hello")
    with pytest.raises(SessionNotFound):
        store.sessions.turns("missing")
    session = store.sessions.create("alice", None)
    with pytest.raises(ValueError, match="role"):
        store.sessions.add_turn(session, "system", "hello")  # type: ignore[arg-type]


def test_a_correction_replaces_the_fact_and_keeps_history(store: TraceStore) -> None:
    store.memory.remember("alice", "home_office", "Berlin")
    store.memory.remember("alice", "team", "finance")
    store.memory.remember("bob", "home_office", "Paris")
    corrected = store.memory.remember("alice", "home_office", "Munich")

    assert [(f["key"], f["value"]) for f in store.memory.facts("alice")] == [
        ("team", "finance"),
        ("home_office", "Munich"),
    ]
    history = store.memory.history("alice", "home_office")
    assert [(f["value"], f["active"], f["superseded_by"]) for f in history] == [
        ("Berlin", False, corrected["id"]),
        ("Munich", True, None),
    ]
    assert [(f["key"], f["value"]) for f in store.memory.facts("bob")] == [("home_office", "Paris")]

    # Saying the same thing again is not a correction.
    assert store.memory.remember("alice", "home_office", "Munich")["id"] == corrected["id"]
    assert len(store.memory.history("alice", "home_office")) == 2


def test_forget_fact(store: TraceStore) -> None:
    store.memory.remember("alice", "team", "finance")
    assert store.memory.forget("alice", "team") is True
    assert store.memory.facts("alice") == []
    assert store.memory.forget("alice", "team") is False
    assert [f["active"] for f in store.memory.history("alice", "team")] == [False]
    store.memory.remember("alice", "team", "legal")
    assert [(f["key"], f["value"]) for f in store.memory.facts("alice")] == [("team", "legal")]


def test_concurrent_corrections_leave_one_active_fact(store: TraceStore) -> None:
    def correct(worker: int) -> None:
        for i in range(10):
            store.memory.remember("alice", "home_office", f"office-{worker}-{i}")

    assert errors_in_threads(correct) == []
    active = store.memory.facts("alice")
    assert len(active) == 1
    history = store.memory.history("alice", "home_office")
    assert len(history) == 40
    assert sum(f["active"] for f in history) == 1
