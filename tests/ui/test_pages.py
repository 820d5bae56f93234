"""Every page of the Streamlit app, driven with Streamlit's AppTest against the indexed sample corpus."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from rag.config import load_settings
from rag.tracestore import TraceFilter
from tests.ui.conftest import APP, CANARY_HR, CANARY_SEC
from ui.components import CITATIONS_FAILED

REFUND_Q = "How many days does a customer have to return an item for a full refund?"
SALARY_Q = "What are the salary bands?"
TIMEOUT = 300  # the first run in a process loads the embedding model


# ----------------------------------------------------------------------------- helpers
def open_app(monkeypatch: pytest.MonkeyPatch, data_dir: Path, user: str | None = "alice") -> AppTest:
    monkeypatch.setenv("RAG_DATA_DIR", str(data_dir))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    if user is not None and at.selectbox(key="user_select").value != user:
        at.selectbox(key="user_select").select(user).run()
    return at


def goto(at: AppTest, page: str) -> AppTest:
    return at.switch_page(f"views/{page}.py").run()


def ask(at: AppTest, text: str) -> AppTest:
    return at.chat_input(key="chat_input").set_value(text).run()


def answered(monkeypatch: pytest.MonkeyPatch, data_dir: Path, user: str, question: str) -> AppTest:
    """The app opened as ``user`` once the chat has answered ``question``, with no exception or error shown."""
    at = open_app(monkeypatch, data_dir, user)
    ask(at, question)
    assert_clean(at)
    return at


def sent(at: AppTest) -> bytes:
    """Everything the script sent to the browser (texts, HTML, tables, popovers, tabs): the protobuf bytes."""
    return b"".join(
        node.proto.SerializeToString() for node in at._tree if getattr(node, "proto", None) is not None
    )


def nodes(at: AppTest, kind: str) -> list:  # type: ignore[type-arg]
    """Elements and containers of one kind (e.g. "popover", "vega_lite_chart") anywhere on the page."""
    return [n for n in at._tree if getattr(n, "type", None) == kind]


def html_bodies(at: AppTest) -> str:
    return "\n".join(h.proto.body for h in at.get("html"))


def errors(at: AppTest) -> list[str]:
    """Error boxes, except the verdict on an answer's citations (an answer's state, not a failure of the app)."""
    return [e.value for e in at.error if not e.value.startswith(CITATIONS_FAILED)]


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not errors(at), errors(at)


def store_for(data_dir: Path):  # type: ignore[no-untyped-def]
    from rag.tracestore import TraceStore

    return TraceStore.from_settings(load_settings(data_dir=data_dir))


def frames(at: AppTest, column: str) -> list[pd.DataFrame]:
    """The tables on the page that have ``column``, in page order (AppTest keeps no key for a dataframe)."""
    return [d.value for d in at.dataframe if column in d.value.columns]


def frame(at: AppTest, column: str) -> pd.DataFrame:
    found = frames(at, column)
    assert len(found) == 1, f"expected one table with column {column!r}, found {len(found)}"
    return found[0]


# ----------------------------------------------------------------------------- sign-in
def test_sign_in_lists_users_from_users_json(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    at = open_app(monkeypatch, ui_data_dir, user=None)
    assert_clean(at)
    assert at.selectbox(key="user_select").options == ["alice", "hana", "olga", "sam", "tom"]
    at.selectbox(key="user_select").select("hana").run()
    assert any("Groups: hr, staff" in c.value for c in at.sidebar.caption)


def test_demo_users_without_users_json_and_clear_message_without_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ui_data_dir: Path
) -> None:
    """No index: a message that says what to run; no database: ditto; both recover once the cause is gone."""
    at = open_app(monkeypatch, tmp_path, user=None)
    assert not at.exception
    assert at.selectbox(key="user_select").options == ["alice", "hana", "olga", "sam"]
    assert any("Nothing indexed yet" in e and "rag ingest" in e for e in errors(at)), errors(at)
    goto(at, "traces")
    assert not at.exception
    assert any("rag db upgrade" in e for e in errors(at)), errors(at)
    goto(at, "documents")
    assert any("Nothing indexed yet" in e for e in errors(at)), errors(at)

    # The cause goes away (index built, database migrated): the same session recovers without a restart.
    for item in ui_data_dir.iterdir():
        if item.name != "users.json":
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp_path / item.name)
    goto(at, "documents")
    assert_clean(at)
    goto(at, "traces")
    assert_clean(at)
    goto(at, "chat")
    assert_clean(at)


def test_broken_user_list_is_a_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "users.json").write_text("{not json")
    at = open_app(monkeypatch, tmp_path, user=None)
    assert not at.exception
    assert any("users.json" in e for e in errors(at)), errors(at)


# ----------------------------------------------------------------------------- chat
def test_chat_answer_with_citations_beside_the_final_chunk_order(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = answered(monkeypatch, ui_data_dir, "alice", REFUND_Q)
    body = html_bodies(at)
    assert "45 days" in body
    assert 'class="rag-cite' in body and "rag-tip" in body  # [n] reveals the passage on hover or click
    assert "Customer Refunds and Returns Policy" in body  # the tooltip names the cited document
    # One button per cited passage, opening it in a dialog at the passage (ui/cited_sources.py); the label, a
    # document's title, is escaped Markdown.
    sources = [b for b in at.button if str(b.key or "").startswith("src_")]
    assert sources and all(b.label.startswith("\\[") for b in sources), [b.label for b in sources]

    # The employee view: the answer alone; the evidence panel is behind "Show how this answer was built".
    assert not frames(at, "position") and not nodes(at, "vega_lite_chart")
    at.toggle(key="chat_show_how").set_value(True).run()
    assert_clean(at)
    order = frame(at, "position")
    assert list(order["position"]) == list(range(1, len(order) + 1))
    # the same view of the order as the trace explorer's (ui/trace_view.py): the passage's text, where it is
    # from, and the ranks and scores that put it there
    for column in (
        "passage",
        "source",
        "rerank rank",
        "rerank score",
        "BM25 rank",
        "dense rank",
        "bundle",
        "cited",
    ):
        assert column in order.columns
    assert order["cited"].any()
    assert all(order["passage"].str.len() > 0)
    charts = nodes(at, "vega_lite_chart")  # rerank rank by position, best rank at the top
    assert len(charts) == 1
    spec = charts[0].proto.spec
    assert '"position"' in spec and '"rerank rank"' in spec and '"reverse": true' in spec

    rows = store_for(ui_data_dir).traces.list(TraceFilter(user="alice"), limit=5)
    assert rows and rows[0]["question"] == REFUND_Q
    trace = store_for(ui_data_dir).traces.get(rows[0]["trace_id"])
    assert [e["chunk_id"] for e in trace["evidence"]] == list(order["chunk id"])
    sessions = store_for(ui_data_dir).sessions.list("alice")
    turns = store_for(ui_data_dir).sessions.turns(sessions[0]["id"])
    assert [t["role"] for t in turns[-2:]] == ["user", "assistant"]
    assert turns[-1]["trace_id"] == trace["trace_id"]


def test_chat_never_shows_a_restricted_canary(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    at = open_app(monkeypatch, ui_data_dir, "alice")
    ask(at, SALARY_Q)
    assert not at.exception
    payload = sent(at)
    assert CANARY_HR.encode() not in payload and CANARY_SEC.encode() not in payload
    assert "Salary Bands" not in html_bodies(at)

    # Positive control: hana (group hr) may read the salary bands, and the same check sees them.
    at = answered(monkeypatch, ui_data_dir, "hana", SALARY_Q)
    assert b"Salary Bands" in sent(at)


def test_switching_user_clears_the_conversation(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    at = open_app(monkeypatch, ui_data_dir, "hana")
    ask(at, SALARY_Q)
    assert b"Salary Bands" in sent(at)
    at.selectbox(key="user_select").select("alice").run()
    assert_clean(at)
    assert not at.chat_message
    assert b"Salary Bands" not in sent(at) and CANARY_HR.encode() not in sent(at)


def test_abstention_is_marked(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    at = open_app(monkeypatch, ui_data_dir, "alice")
    ask(at, "What is the airspeed velocity of an unladen swallow on Jupiter?")
    assert not at.exception
    trace = store_for(ui_data_dir).traces.get(
        store_for(ui_data_dir).traces.list(TraceFilter(user="alice"), limit=1)[0]["trace_id"]
    )
    assert trace["abstained"], trace["answer"]
    assert "rag-badge abstain" in html_bodies(at)
    # In plain words, with where to ask instead; the threshold and scores stay in the trace.
    assert any("You can ask" in i.value for i in at.info), [i.value for i in at.info]
    assert b"threshold" not in sent(at)
    detail = next(s["detail"] for s in trace["stages"] if s["name"] == "abstention")
    assert {"threshold", "best_score"} <= set(detail)


def test_memory_facts_are_stored_replaced_and_used(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    store = store_for(ui_data_dir)
    at = answered(monkeypatch, ui_data_dir, "tom", "Remember that I work part-time")
    assert any("I'll remember" in m.value for m in at.markdown)
    assert [(f["key"], f["value"]) for f in store.memory.facts("tom")] == [("employment", "I work part-time")]

    ask(at, "How many days of annual leave do I get?")
    assert_clean(at)
    trace = store.traces.get(store.traces.list(TraceFilter(user="tom"), limit=1)[0]["trace_id"])
    assert trace["budgets"]["facts"] == 1
    assert "I work part-time" in trace["prompt"]["user"]
    assert 0 < trace["budgets"]["history_tokens"] <= trace["budgets"]["history_token_budget"]

    ask(at, "Actually, I work full-time now")
    assert [(f["key"], f["value"]) for f in store.memory.facts("tom")] == [
        ("employment", "I work full-time now")
    ]
    assert any("I work full-time now" in c.value.replace("\\", "") for c in at.sidebar.caption)


def test_history_budget_is_separate_and_recorded(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    monkeypatch.setenv("RAG_HISTORY_TOKEN_BUDGET", "30")
    at = open_app(monkeypatch, ui_data_dir, "sam")
    ask(at, REFUND_Q)
    ask(at, "And what about gift cards?")
    assert_clean(at)
    store = store_for(ui_data_dir)
    trace = store.traces.get(store.traces.list(TraceFilter(user="sam"), limit=1)[0]["trace_id"])
    budgets = trace["budgets"]
    assert budgets["history_token_budget"] == 30
    assert 0 < budgets["history_tokens"] <= 30
    assert budgets["evidence_token_budget"] == load_settings().evidence_token_budget  # evidence keeps its own


# ----------------------------------------------------------------------------- trace explorer
def test_trace_explorer_shows_only_own_traces_to_non_admins(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    hana = open_app(monkeypatch, ui_data_dir, "hana")
    ask(hana, SALARY_Q)
    alice = open_app(monkeypatch, ui_data_dir, "alice")
    ask(alice, REFUND_Q)
    goto(alice, "traces")
    assert_clean(alice)
    table = frame(alice, "trace id")
    assert set(table["user"]) == {"alice"}
    hana_ids = {r["trace_id"] for r in store_for(ui_data_dir).traces.list(TraceFilter(user="hana"))}
    assert not hana_ids & set(alice.selectbox(key="trace_open").options)
    assert CANARY_HR.encode() not in sent(alice)

    olga = open_app(monkeypatch, ui_data_dir, "olga")  # group admin
    goto(olga, "traces")
    assert_clean(olga)
    assert {"alice", "hana"} <= set(frame(olga, "trace id")["user"])
    olga.selectbox(key="trace_f_user").select("hana").run()
    assert set(frame(olga, "trace id")["user"]) == {"hana"}


def test_trace_explorer_filters(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    at = open_app(monkeypatch, ui_data_dir, "alice")
    ask(at, REFUND_Q)
    goto(at, "traces")
    at.selectbox(key="trace_f_abstained").select("no").run()
    assert_clean(at)
    assert not frame(at, "trace id")["abstained"].any()
    at.selectbox(key="trace_f_doc").select(
        next(o for o in at.selectbox(key="trace_f_doc").options if o != "any" and "refund" in o)
    ).run()
    assert_clean(at)
    questions = set(frame(at, "trace id")["question"])
    assert REFUND_Q in questions
    assert "salary" not in " ".join(at.selectbox(key="trace_f_doc").options)  # alice cannot filter on it


def test_trace_stage_views_and_replay_side_by_side(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = open_app(monkeypatch, ui_data_dir, "alice")
    ask(at, REFUND_Q)
    goto(at, "traces")
    assert_clean(at)
    tid = at.selectbox(key="trace_open").value
    trace = store_for(ui_data_dir).traces.get(tid)
    labels = [t.label for t in at.tabs]
    for label in (
        "Evidence scores",
        "Candidates",
        "Dropped",
        "Bundles",
        "Hops",
        "Prompt",
        "Citations",
        "Timing & budgets",
    ):
        assert label in labels
    # the answer and the final chunk order side by side (two columns of one row), above the tabs
    answer = next(c for c in at.columns if any(m.value == "**Answer**" for m in c.markdown))
    order = next(c for c in at.columns if any(m.value == "**Final chunk order**" for m in c.markdown))
    assert not any(m.value == "**Answer**" for m in order.markdown) and answer.html
    assert list(order.dataframe[0].value["chunk id"]) == [e["chunk_id"] for e in trace["evidence"]]
    if trace["hops"]:  # every follow-up query of the answer is listed with what it found
        hops = frame(at, "follow-up query")
        assert list(hops["follow-up query"]) == [q["query"] for h in trace["hops"] for q in h["queries"]]
    candidates = frame(at, "fate")
    for column in ("rerank score", "fused score", "BM25 score", "dense score", "fate"):
        assert column in candidates.columns
    assert any(f.startswith("in prompt at position") for f in candidates["fate"])
    assert any(trace["prompt"]["user"][:60] in c.value for c in at.code)

    at.selectbox(key=f"replay_packing_{tid}").select("best_first")
    next(b for b in at.button if b.label == "Replay").click().run()
    assert at.selectbox(key="trace_open").value == tid
    assert_clean(at)
    *_, original, replay = frames(at, "position")  # the "Final order" tab, then the two replay columns
    assert list(original["chunk id"]) == [e["chunk_id"] for e in trace["evidence"]]
    # best_first: bundles in rank order, so the best passage opens the prompt and ranks rise overall.
    ranks = [int(r) for r in replay["rerank rank"].dropna()]
    assert ranks[0] == min(ranks)
    assert sorted(replay["chunk id"]) == sorted(original["chunk id"])
    assert any("best_first" in m.value for m in at.markdown)


def test_trace_of_another_user_cannot_be_opened(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    hana = open_app(monkeypatch, ui_data_dir, "hana")
    ask(hana, SALARY_Q)
    hana_trace = store_for(ui_data_dir).traces.list(TraceFilter(user="hana"), limit=1)[0]["trace_id"]
    alice = open_app(monkeypatch, ui_data_dir, "alice")
    ask(alice, REFUND_Q)
    alice.session_state["trace_opened"] = hana_trace  # e.g. a stale or forged selection
    goto(alice, "traces")
    assert alice.selectbox(key="trace_open").value != hana_trace
    assert CANARY_HR.encode() not in sent(alice)


# ----------------------------------------------------------------------------- documents
def test_documents_only_readable_with_hidden_count(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = open_app(monkeypatch, ui_data_dir, "alice")
    goto(at, "documents")
    assert_clean(at)
    metrics = {m.label: m.value for m in at.metric}
    docs = frame(at, "access groups")
    assert metrics["Hidden from you"] == "2"
    assert metrics["Documents you may read"] == str(len(docs)) == "11"
    assert "Salary Bands" not in set(docs["title"])
    assert "Security Incident Escalation Runbook" not in set(docs["title"])
    for column in ("version", "chunks", "access groups", "effective", "expires", "status today"):
        assert column in docs.columns
    assert "expired" in set(docs["status today"])  # the 2021 COVID remote-work policy
    assert any("No files failed" in s.value for s in at.success)
    assert CANARY_HR.encode() not in sent(at) and b"salary-bands" not in sent(at)

    at.selectbox(key="user_select").select("hana").run()
    docs = frame(at, "access groups")
    assert "Salary Bands" in set(docs["title"])
    assert {m.label: m.value for m in at.metric}["Hidden from you"] == "1"


def test_documents_show_deployment_details_to_admins_only(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = open_app(monkeypatch, ui_data_dir, "alice")
    goto(at, "documents")
    assert not at.exception
    assert "Index generation" not in {m.label for m in at.metric}
    assert not any("embedding model" in c.value for c in at.caption)
    at.selectbox(key="user_select").select("olga").run()
    assert "Index generation" in {m.label for m in at.metric}
    assert any("embedding model" in c.value for c in at.caption)


def test_documents_show_last_ingestion_failures(
    monkeypatch: pytest.MonkeyPatch, data_dir_with_failures: Path
) -> None:
    at = open_app(monkeypatch, data_dir_with_failures, "alice")
    goto(at, "documents")
    assert not at.exception
    assert any("could not be ingested" in e for e in errors(at)), errors(at)
    failures = frame(at, "reason")
    assert len(failures) == 1
    assert failures["file"].iloc[0].endswith("broken.pdf")
    assert failures["reason"].iloc[0]


# ----------------------------------------------------------------------------- evaluation
def test_evaluation_page_runs_saves_and_loads_a_sweep(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    """The run tab starts `rag eval position` in a child process; both tabs read the sweep through rag.traces.sweeps."""
    at = open_app(monkeypatch, ui_data_dir, "olga")  # the Evaluation page is for admins
    goto(at, "evaluation")
    assert not at.exception
    assert [t.value for t in at.title] == ["Evaluation"]
    assert_clean(at)
    assert [t.label for t in at.tabs][:2] == ["Load a saved sweep", "Run a sweep"]
    at.selectbox(key="eval_generator").select("simulated")
    at.selectbox(key="eval_retrieval").select("lexical")
    at.number_input(key="eval_repeats").set_value(3)
    at.multiselect(key="eval_lengths").set_value(["10"])
    at.number_input(key="eval_limit").set_value(4)
    next(b for b in at.button if b.label == "Run sweep").click().run()
    assert_clean(at)
    assert nodes(at, "image"), "the sweep is plotted"
    cells = frame(at, "accuracy")
    assert {"depth", "strategy", "control"} <= set(cells["kind"])
    saved = sorted((ui_data_dir / "sweeps").glob("*/sweep.json"))
    assert saved

    at = open_app(monkeypatch, ui_data_dir, "olga")
    goto(at, "evaluation")
    assert at.selectbox(key="eval_saved").options
    at.button(key="eval_load").click().run()
    assert_clean(at)
    assert nodes(at, "image")
    assert len(frame(at, "accuracy")) == len(cells)


def test_a_reopened_conversation_brings_each_answers_trace(
    monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path
) -> None:
    at = answered(monkeypatch, ui_data_dir, "sam", REFUND_Q)
    session = at.session_state["chat_session_id"]
    at.button(key="chat_new").click().run()
    assert not at.chat_message
    options = at.selectbox(key="chat_reopen").options
    assert len(options) >= 2
    at.selectbox(key="chat_reopen").select(session).run()
    assert_clean(at)
    reopened = [m for m in at.session_state["chat_messages"] if m["role"] == "assistant"]
    assert reopened and reopened[-1]["trace"]["question"] == REFUND_Q
    assert reopened[-1]["trace"]["user"] == "sam" and "45 days" in reopened[-1]["content"]
    assert at.session_state["chat_session_id"] == session
