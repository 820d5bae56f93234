"""Trace explorer: find past answers, open one to see every stage, replay it with another packing or budget.

A trace holds the text of every passage its user could read. Only the signed-in user's own traces are listed
or opened, unless the user is in the admin group (``RAG_ADMIN_GROUP``), who sees every user's: the
"Abstained" and "Feedback" filters then show everyone's abstentions and down-votes. A user rates their own
answers here too (thumbs up or down, with a reason).
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pandas as pd
import streamlit as st

from rag.pipeline import PipelineOptions, Question
from rag.stages.pack import STRATEGIES
from rag.traces.schema import TraceSchemaError
from rag.tracestore import TraceFilter
from rag.types import DocumentMeta, Principal
from ui import components, services, trace_view
from ui.feedback import feedback_label, feedback_widget

ANY = "any"
OPENED = "trace_opened"
FEEDBACK_LABELS: dict[str, str] = {
    ANY: "any",
    "down": "rated down",
    "up": "rated up",
    "rated": "rated",
    "none": "not rated",
}


def _tri(label: str, key: str) -> bool | None:
    choice = st.selectbox(label, [ANY, "yes", "no"], key=key)
    return None if choice == ANY else choice == "yes"


def _readable_documents(settings: Any, principal: Principal) -> dict[str, str]:
    """doc_id -> title for the documents the viewer may read (admins: all); empty when nothing is indexed."""
    try:
        docs = services.get_reader(settings).documents()
    except Exception:
        return {}
    out = {}
    for doc_id, doc in docs.items():
        meta = DocumentMeta(str(doc.get("title") or doc_id), tuple(doc.get("groups") or ("*",)))
        if services.is_admin(principal, settings) or meta.readable_by(principal):
            out[doc_id] = meta.title
    return out


def _filters(settings: Any, principal: Principal, store: Any) -> dict[str, Any]:
    """Two rows, so every label and value reads at 1280 px: who, when and which document; then the states."""
    admin = services.is_admin(principal, settings)
    who_col, when_col, doc_col = st.columns([1.2, 1.5, 2.3])
    with who_col:
        if admin:
            users = store.analytics.users()  # everyone with a stored answer, whatever the sign-in mode
            who = st.selectbox("User", [ANY, *users], key="trace_f_user")
            user = None if who == ANY else who
        else:
            st.text_input(
                "User",
                principal.user,
                disabled=True,
                key="trace_f_user_self",
                help="You see your own answers only (admins see everyone's).",
            )
            user = principal.user
    with when_col:
        today = date.today()
        span = st.date_input("Date range", (today - timedelta(days=30), today), key="trace_f_dates")
    with doc_col:
        docs = _readable_documents(settings, principal)
        doc = st.selectbox(
            "Document",
            [ANY, *sorted(docs, key=lambda d: docs[d])],
            key="trace_f_doc",
            format_func=lambda d: "any" if d == ANY else f"{docs[d]} ({d})",
        )
    abstained_col, failed_col, feedback_col, _rest = st.columns([1, 1, 1, 2])
    with abstained_col:
        abstained = _tri("Abstained", "trace_f_abstained")
    with failed_col:
        failed = _tri("Failed citations", "trace_f_failed")
    with feedback_col:
        rated = st.selectbox(
            "Feedback",
            list(FEEDBACK_LABELS),
            key="trace_f_feedback",
            format_func=lambda o: FEEDBACK_LABELS[o],
        )
    since = until = None
    if isinstance(span, tuple | list):
        since = span[0] if len(span) > 0 else None
        until = span[1] if len(span) > 1 else None
    elif isinstance(span, date):
        since = until = span
    return {
        "user": user,
        "since": since,
        "until": until,
        "abstained": abstained,
        "failed_citations": failed,
        "doc_id": None if doc == ANY else doc,
        "feedback": None if rated == ANY else ("any" if rated == "rated" else rated),
    }


def may_view(trace: dict[str, Any], principal: Principal) -> bool:
    """A trace shows passage texts its user could read: only that user, or an admin, may open it."""
    return trace.get("user") == principal.user or services.is_admin(principal)


def _summary_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "time": str(r.get("created_at") or "")[:19].replace("T", " "),
                "user": r.get("user"),
                "question": r.get("question"),
                "answer": r.get("answer"),
                "abstained": bool(r.get("abstained")),
                "failed citations": bool(r.get("has_failed_citation")),
                "feedback": feedback_label({"rating": r.get("feedback"), "reason": r.get("feedback_reason")}),
                "error": r.get("error") or "",
                "ms": r.get("total_ms"),
                "trace id": r.get("trace_id"),
            }
            for r in rows
        ],
        columns=[
            "time",
            "user",
            "question",
            "feedback",
            "answer",
            "abstained",
            "failed citations",
            "error",
            "ms",
            "trace id",
        ],
    )


def _replay(settings: Any, trace: dict[str, Any], principal: Principal) -> None:
    st.subheader("Replay with another packing or budget")
    st.caption(
        "Re-runs the same question for the same user, groups and date through today's index, starting from the "
        "settings this answer ran with: change one to compare (conversation history and remembered facts are not "
        "replayed). Replays are not stored."
    )
    packing_now, k_now, budget_now = trace_view.replay_defaults(trace, settings)
    tid = trace["trace_id"]
    with st.form(key=f"replay_form_{tid}"):
        cols = st.columns(3)
        packing = cols[0].selectbox(
            "Packing", STRATEGIES, index=STRATEGIES.index(packing_now), key=f"replay_packing_{tid}"
        )
        k = cols[1].number_input("Evidence k (passages)", 1, 40, min(k_now, 40), key=f"replay_k_{tid}")
        budget = cols[2].number_input(
            "Evidence token budget",
            100,
            32000,
            min(max(budget_now, 100), 32000),
            step=100,
            key=f"replay_budget_{tid}",
        )
        submitted = st.form_submit_button("Replay", icon=":material/replay:")
    if submitted:
        owner = Principal(str(trace["user"]), frozenset(trace.get("groups") or ()))
        as_of = date.fromisoformat(trace["as_of"]) if trace.get("as_of") else None
        question = Question(
            str(trace["question"]), owner, as_of=as_of, tags=frozenset(trace.get("tags") or ())
        )
        options = PipelineOptions(packing=packing, evidence_k=int(k), token_budget=int(budget), use_llm=None)
        with st.spinner("Replaying\u2026"):
            result = services.get_pipeline(settings).ask(question, options)
        st.session_state[f"replay_{tid}"] = result.to_json()
    replay = st.session_state.get(f"replay_{tid}")
    if not replay:
        return
    left, right = st.columns(2, gap="large")
    with left:
        b = trace.get("budgets") or {}
        title = f"Original ({trace.get('packing')}, k={b.get('evidence_k')}, {b.get('evidence_token_budget')} tokens)"
        trace_view.render_order(trace, key=f"orig_{tid}", title=title, chart=True)
        components.render_answer(trace, key=f"orig_ans_{tid}")
    with right:
        b = replay.get("budgets") or {}
        title = f"Replay ({replay.get('packing')}, k={b.get('evidence_k')}, {b.get('evidence_token_budget')} tokens)"
        trace_view.render_order(replay, key=f"replay_{tid}", title=title, chart=True)
        components.render_answer(replay, key=f"replay_ans_{tid}")


def _feedback(settings: Any, principal: Principal, trace: dict[str, Any], store: Any) -> None:
    """The owner rates (or re-rates) the answer; an admin looking at someone else's sees their feedback."""
    tid = trace["trace_id"]
    if trace.get("user") == principal.user:
        st.markdown("**Was this answer helpful?**")
        feedback_widget(settings, principal, tid, key=f"trace_{tid}")
        return
    label = feedback_label(store.feedback.get(tid)) or "none"
    st.caption(components.escape_md(f"Feedback from {trace.get('user')}: {label}"))


def render() -> None:
    settings = services.get_settings()
    principal = services.current_principal(settings)
    st.title("Trace explorer")
    st.caption(
        "Every stored answer with every stage: candidates and their scores, what was dropped and why, bundles, "
        "the final order, the prompt, the answer and its citation verdicts, and the time per stage."
        + (
            " You are an admin: you see every user's answers."
            if services.is_admin(principal, settings)
            else ""
        )
    )
    store = services.get_store(settings)
    filters = _filters(settings, principal, store)
    if not services.is_admin(principal, settings):
        filters["user"] = principal.user  # never list another user's traces to a non-admin
    rows = store.traces.list(TraceFilter(**filters), limit=200)
    rows = [r for r in rows if may_view(r, principal)]
    if not rows:
        st.info("No answers match these filters yet. Ask something on the Chat page.")
        return
    st.dataframe(
        _summary_frame(rows), hide_index=True, key="trace_table", height=min(36 * (len(rows) + 1), 320)
    )
    labels = {
        r["trace_id"]: f"{str(r.get('created_at') or '')[:16].replace('T', ' ')} \u00b7 {r.get('user')} "
        f"\u00b7 {str(r.get('question') or '')[:80]} \u00b7 {r['trace_id'][:8]}"
        for r in rows
    }
    opened = st.session_state.get(OPENED)
    ids = list(labels)
    chosen = st.selectbox(
        "Open a trace",
        ids,
        index=ids.index(opened) if opened in ids else 0,
        format_func=lambda i: labels[i],
        key="trace_open",
    )
    st.session_state[OPENED] = chosen
    try:
        # through the trace schema: keys newer than the trace get their defaults, a mismatch is a message
        trace = store.traces.read(chosen).to_json(defaults=True)
    except TraceSchemaError as exc:
        st.error(exc.user_message())
        return
    if not may_view(trace, principal):
        st.error("You may only open your own answers.")
        return
    st.divider()
    _feedback(settings, principal, trace, store)
    trace_view.render_trace(trace, key=f"trace_{chosen}")
    st.divider()
    _replay(settings, trace, principal)


with services.page_guard():
    render()
