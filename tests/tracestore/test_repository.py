"""The repository: traces come back equal, filters, export, and errors a user can act on."""

from __future__ import annotations

import copy
import multiprocessing
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import text

from rag.errors import StorageError
from rag.tracestore import (
    DatabaseNotInitialised,
    InvalidTrace,
    SchemaOutOfDate,
    TraceFilter,
    TraceNotFound,
    TraceStore,
)
from rag.tracestore.db import make_engine, sqlite_path
from tests.tracestore.factories import (
    BASE_TIME,
    chunk,
    errors_in_threads,
    make_trace,
    roundtrip,
    write_traces_in_child,
)


def test_trace_comes_back_equal(store: TraceStore) -> None:
    trace = make_trace()
    assert len(trace["candidates"]) >= 10
    assert store.traces.save(trace) == trace["trace_id"]
    got = store.traces.get(trace["trace_id"])
    assert got == roundtrip(trace)
    assert list(got) == list(trace)  # same key order, so `show --json` reads like `ask --json`
    assert [c["chunk_id"] for c in got["candidates"]] == [c["chunk_id"] for c in trace["candidates"]]


@pytest.mark.parametrize(
    "kind",
    ["abstained", "failed_citation", "generation_error"],
)
def test_every_kind_of_outcome_comes_back_equal(store: TraceStore, kind: str) -> None:
    trace = make_trace(
        abstained=kind == "abstained",
        failed_citation=kind == "failed_citation",
        error="LLM request timed out after 120 s" if kind == "generation_error" else None,
    )
    store.traces.save(trace)
    assert store.traces.get(trace["trace_id"]) == roundtrip(trace)


def test_irregular_traces_lose_nothing(store: TraceStore) -> None:
    trace = make_trace()
    trace["created_at"] = "2025-03-01T10:00:00Z"  # not the canonical isoformat
    trace["new_top_level"] = {"nested": [1, 2.5, None, "x"]}
    trace["session_id"] = "s" * 80  # longer than the column
    del trace["as_of"]
    trace["tokens"]["cached"] = 12
    del trace["tokens"]["history"]
    trace["timings_ms"] = None
    trace["hops"] = []
    trace["budgets"] = None
    trace["prompt"] = None
    trace["evidence"][0]["new_score"] = 0.5
    trace["evidence"][1]["page"] = "iv"  # a roman page number
    trace["evidence"][2]["text"] = "NUL \x00 inside"  # PostgreSQL text columns cannot hold NUL
    del trace["evidence"][3]["section"]
    trace["evidence"][4]["cited"] = None
    trace["candidates"][0]["rerank_rank"] = 2**40  # too big for the column
    trace["candidates"][1]["intents"] = "not a list"
    del trace["candidates"][2]["hop"]
    trace["bundles"][0]["chunk_ids"] = [None, 3]
    del trace["bundles"][1]["chunk_ids"]
    trace["citations"][0]["extra_verdict"] = {"judge": "nli"}
    trace["dropped"] = "not a list"
    trace["stages"][0]["detail"] = None
    trace["intents"] = [{"index": 0}]
    store.traces.save(trace)
    assert store.traces.get(trace["trace_id"]) == roundtrip(trace)


def test_minimal_trace_gets_an_id_and_a_timestamp(store: TraceStore) -> None:
    trace_id = store.traces.save({"question": "Hi?", "user": "alice", "answer": ""})
    got = store.traces.get(trace_id)
    assert len(trace_id) == 32
    created = datetime.fromisoformat(got.pop("created_at"))
    assert created.tzinfo is not None and abs(datetime.now(UTC) - created) < timedelta(minutes=5)
    assert got == {"trace_id": trace_id, "question": "Hi?", "user": "alice", "answer": ""}


def test_trace_stays_readable_after_its_document_changes(store: TraceStore) -> None:
    old = [chunk("travel", f"Old rule {i}: taxis up to {10 + i} EUR.") for i in range(10)]
    kept = chunk("travel", "Receipts are required for every claim.")
    trace_a = make_trace(chunks=[*old, kept], seed=1)
    store.traces.save(trace_a)

    # Re-ingestion: new text means new chunk ids; the unchanged passage keeps its id but not its doc_version.
    new = [chunk("travel", f"New rule {i}: taxis up to {30 + i} EUR.", version="v2") for i in range(10)]
    kept_v2 = {**kept, "doc_version": "v2", "title": "Travel policy (2025)"}
    trace_b = make_trace(chunks=[*new, kept_v2], seed=2)
    store.traces.save(trace_b)

    got_a = store.traces.get(trace_a["trace_id"])
    assert got_a == roundtrip(trace_a)
    assert got_a["evidence"][0]["text"].startswith("Old rule 0")
    assert got_a["candidates"][-1]["doc_version"] == "v1"
    got_b = store.traces.get(trace_b["trace_id"])
    assert got_b == roundtrip(trace_b)
    assert got_b["candidates"][-1]["doc_version"] == "v2"
    assert got_b["candidates"][-1]["title"] == "Travel policy (2025)"


def test_saving_the_same_trace_twice_fails_clearly(store: TraceStore) -> None:
    trace = make_trace()
    store.traces.save(trace)
    with pytest.raises(StorageError, match="already stored"):
        store.traces.save(trace)
    assert store.traces.count() == 1


def test_unknown_trace_raises_trace_not_found(store: TraceStore) -> None:
    with pytest.raises(TraceNotFound):
        store.traces.get("0" * 32)


def test_unusable_traces_are_rejected(store: TraceStore) -> None:
    with pytest.raises(InvalidTrace):
        store.traces.save({"trace_id": "x", "question": object()})
    with pytest.raises(InvalidTrace):
        store.traces.save({"trace_id": "x" * 65})
    assert store.traces.count() == 0


@pytest.fixture
def populated(store: TraceStore) -> dict[str, dict]:
    day = timedelta(days=1)
    policy = [chunk("expenses", f"Expense rule {i}.") for i in range(12)]
    traces = {
        "alice_old": make_trace(user="alice", created_at=BASE_TIME, seed=1),
        "alice_abstained": make_trace(user="alice", created_at=BASE_TIME + day, abstained=True, seed=2),
        "bob_failed": make_trace(user="bob", created_at=BASE_TIME + 2 * day, failed_citation=True, seed=3),
        "bob_expenses": make_trace(user="bob", created_at=BASE_TIME + 3 * day, chunks=policy, seed=4),
        "carol_error": make_trace(
            user="carol", created_at=BASE_TIME + 4 * day, error="rate limited (429)", seed=5
        ),
    }
    for trace in traces.values():
        store.traces.save(trace)
    return traces


def _ids(rows: list[dict]) -> list[str]:
    return [row["trace_id"] for row in rows]


def test_list_filters(store: TraceStore, populated: dict[str, dict]) -> None:
    t = {name: trace["trace_id"] for name, trace in populated.items()}
    newest_first = [
        t["carol_error"],
        t["bob_expenses"],
        t["bob_failed"],
        t["alice_abstained"],
        t["alice_old"],
    ]
    assert _ids(store.traces.list()) == newest_first
    assert _ids(store.traces.list(TraceFilter(user="alice"))) == [t["alice_abstained"], t["alice_old"]]
    assert _ids(store.traces.list(TraceFilter(abstained=True))) == [t["alice_abstained"]]
    assert t["alice_abstained"] not in _ids(store.traces.list(TraceFilter(abstained=False)))
    assert _ids(store.traces.list(TraceFilter(failed_citations=True))) == [t["bob_failed"]]
    assert _ids(store.traces.list(TraceFilter(doc_id="expenses"))) == [t["bob_expenses"]]
    assert _ids(store.traces.list(TraceFilter(doc_id="doc-1"))) == [
        t["carol_error"],
        t["bob_failed"],
        t["alice_abstained"],
        t["alice_old"],
    ]
    assert _ids(store.traces.list(TraceFilter(since=BASE_TIME + timedelta(days=3)))) == newest_first[:2]
    assert _ids(store.traces.list(TraceFilter(since="2025-03-04"))) == newest_first[:2]
    assert (
        _ids(store.traces.list(TraceFilter(until=date(2025, 3, 2)))) == newest_first[3:]
    )  # a date includes that day
    assert _ids(
        store.traces.list(TraceFilter(since="2025-03-02T00:00:00+00:00", until="2025-03-03T09:00:00Z"))
    ) == [t["alice_abstained"]]  # until is exclusive
    assert _ids(store.traces.list(TraceFilter(user="bob", failed_citations=False))) == [t["bob_expenses"]]
    assert _ids(store.traces.list(limit=2, offset=1)) == newest_first[1:3]
    assert store.traces.count(TraceFilter(user="bob")) == 2


def test_one_filter_selects_the_same_traces_to_list_count_and_export(
    store: TraceStore, populated: dict[str, dict]
) -> None:
    filters = [
        TraceFilter(),
        TraceFilter(user="alice"),
        TraceFilter(abstained=False, since="2025-03-03"),
        TraceFilter(doc_id="doc-1", until=date(2025, 3, 3)),
        TraceFilter(failed_citations=True),
        TraceFilter(feedback="none", user="bob"),
    ]
    for where in filters:
        listed = set(_ids(store.traces.list(where, limit=100)))
        exported = {trace["trace_id"] for trace in store.traces.export(where, batch_size=2)}
        assert listed == exported, where
        assert store.traces.count(where) == len(listed), where
    assert store.traces.count(TraceFilter(user="nobody")) == 0


def test_a_filter_with_an_unreadable_bound_fails_when_made() -> None:
    with pytest.raises(ValueError, match="Not an ISO date"):
        TraceFilter(since="last tuesday")
    with pytest.raises(ValueError, match="feedback must be"):
        TraceFilter(feedback="sideways")  # type: ignore[arg-type]


def test_list_rows_are_summaries(store: TraceStore, populated: dict[str, dict]) -> None:
    row = store.traces.list(TraceFilter(user="carol"))[0]
    trace = populated["carol_error"]
    assert row == {
        "trace_id": trace["trace_id"],
        "created_at": trace["created_at"],
        "user": "carol",
        "question": trace["question"],
        "answer": "",
        "abstained": False,
        "abstain_reason": None,
        "has_failed_citation": False,
        "error": "rate limited (429)",
        "model": trace["model"],
        "total_ms": trace["timings_ms"]["total"],
        "session_id": None,
        "feedback": None,
        "feedback_reason": None,
    }


def test_export_yields_full_traces_oldest_first(store: TraceStore, populated: dict[str, dict]) -> None:
    exported = list(store.traces.export(batch_size=2))
    assert exported == [roundtrip(trace) for trace in populated.values()]
    assert list(store.traces.export(TraceFilter(user="bob"))) == [
        roundtrip(populated["bob_failed"]),
        roundtrip(populated["bob_expenses"]),
    ]
    assert list(store.traces.export(TraceFilter(since="2025-03-05"))) == [roundtrip(populated["carol_error"])]


def test_uninitialised_database_says_to_run_db_upgrade(store_url: str) -> None:
    with TraceStore(store_url) as store:
        for call in (
            lambda: store.traces.save(make_trace()),
            store.traces.list,
            lambda: store.memory.facts("alice"),
        ):
            with pytest.raises(DatabaseNotInitialised, match="run `rag db upgrade`"):
                call()
    path = sqlite_path(store_url)
    assert path is None or not path.exists()  # asking did not create an empty database


def test_schema_at_another_revision_is_reported(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    engine.dispose()
    with TraceStore(migrated_url) as store, pytest.raises(SchemaOutOfDate, match="0000"):
        store.traces.list()


def test_unreachable_server_is_a_storage_error_without_the_password() -> None:
    store = TraceStore("postgresql+psycopg://rag:s3cret@127.0.0.1:1/nowhere")
    with pytest.raises(StorageError) as info:
        store.traces.list()
    store.close()
    assert "s3cret" not in info.value.user_message()
    assert "127.0.0.1" in str(info.value)


def test_concurrent_writers_lose_nothing(migrated_url: str) -> None:
    """4 processes x 50 traces at once (half of them sharing chunk snapshots): every row lands, no errors."""
    workers, per_worker = 4, 50
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    procs = [
        ctx.Process(target=write_traces_in_child, args=(migrated_url, w, per_worker, barrier))
        for w in range(workers)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * workers
    with TraceStore(migrated_url) as store:
        assert store.traces.count() == workers * per_worker
        for w in range(workers):
            assert store.traces.count(TraceFilter(user=f"user{w}")) == per_worker
        sample = make_trace(
            user="user3",
            seed=3 * 100_000 + 7,
            chunks=[chunk("doc-shared", f"Shared passage {i}.") for i in range(12)],
        )
        assert store.traces.get(sample["trace_id"]) == roundtrip(sample)


def test_concurrent_threads_share_one_store(store: TraceStore) -> None:
    def work(worker: int) -> None:
        for i in range(25):
            store.traces.save(make_trace(user=f"t{worker}", seed=10_000 * (worker + 1) + i))
            store.traces.list(TraceFilter(user=f"t{worker}"), limit=5)

    assert errors_in_threads(work) == []
    assert store.traces.count() == 100


def test_written_dict_is_not_modified(store: TraceStore) -> None:
    trace = make_trace()
    before = copy.deepcopy(trace)
    store.traces.save(trace)
    assert trace == before
