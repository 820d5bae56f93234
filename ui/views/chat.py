"""Chat: the support bot. Each answer shows its citations and, beside it, the final chunk order the model saw."""

from __future__ import annotations

from typing import Any

import streamlit as st

from rag.memory import extract_fact, relevant_facts, select_history
from rag.pipeline import Question
from rag.types import Principal
from ui import components, services
from ui.feedback import feedback_widget

MESSAGES = "chat_messages"  # list of {"role", "content", "trace"?, "notice"?}
SESSION = "chat_session_id"
NOTED = "Noted."


def _messages() -> list[dict[str, Any]]:
    return st.session_state.setdefault(MESSAGES, [])


def _budget_caption(trace: dict[str, Any]) -> str:
    b = trace.get("budgets") or {}
    t = trace.get("timings_ms") or {}
    parts = [
        f"evidence {b.get('evidence_tokens', 0)}/{b.get('evidence_token_budget', '?')} tokens, "
        f"k={b.get('evidence_k', '?')}",
        f"history {b.get('history_tokens', 0)}/{b.get('history_token_budget', '?')} tokens",
        f"{b.get('facts', 0)} remembered fact(s)",
        f"{t.get('total', 0):.0f} ms",
        f"trace `{trace.get('trace_id')}`",
    ]
    return " \u00b7 ".join(parts)


def render_assistant(message: dict[str, Any], index: int) -> None:
    trace = message.get("trace")
    if not trace:
        st.markdown(components.escape_md(message["content"]))
        return
    key = f"{trace.get('trace_id')}_{index}"
    left, right = st.columns([1, 1], gap="large")
    with left:
        components.render_answer(trace, key=key)
        st.caption(_budget_caption(trace))
        settings = services.get_settings()
        feedback_widget(settings, services.current_principal(settings), trace["trace_id"], key)
    with right:
        components.render_chunk_order(trace, key=key)


def _sidebar(store: Any, principal: Principal) -> None:
    with st.sidebar:
        st.divider()
        st.markdown("**Conversation**")
        if st.button("New conversation", icon=":material/add_comment:", key="chat_new"):
            st.session_state.pop(SESSION, None)
            st.session_state[MESSAGES] = []
            st.session_state["chat_reopen"] = ""
        if store is None:
            return
        sessions = store.list_sessions(principal.user, limit=20)
        if sessions:
            # Labels must be unique: a selectbox keeps its value by label.
            labels = {
                s[
                    "id"
                ]: f"{(s.get('title') or 'Untitled')[:40]} \u00b7 {str(s.get('created_at') or '')[5:16]} "
                f"({s.get('turns', 0)} turns) \u00b7 {s['id'][:6]}"
                for s in sessions
            }
            options = ["", *labels]
            chosen = st.selectbox(
                "Reopen a conversation",
                options,
                format_func=lambda i: labels.get(i, "\u2014"),
                key="chat_reopen",
            )
            if chosen and chosen != st.session_state.get(SESSION):
                _load_session(store, principal, chosen)


def _sidebar_memory(store: Any, principal: Principal) -> None:
    """Facts the user confirmed (drawn after the new message is handled, so a new fact shows at once)."""
    if store is None:
        return
    with st.sidebar:
        facts = store.facts(principal.user)
        st.markdown("**What I remember about you**")
        if not facts:
            st.caption('Nothing yet. Say e.g. "Remember that I work part-time".')
        for fact in facts:
            cols = st.columns([5, 1])
            cols[0].caption(components.escape_md(str(fact["value"])))
            if cols[1].button(
                ":material/delete:", key=f"chat_forget_{fact['key']}", help="Forget this", type="tertiary"
            ):
                store.forget_fact(principal.user, fact["key"])
                st.rerun()


def _load_session(store: Any, principal: Principal, session_id: str) -> None:
    """Reopen one of the signed-in user's own conversations, with each answer's stored trace."""
    own = {s["id"] for s in store.list_sessions(principal.user, limit=1000)}
    if session_id not in own:
        return
    messages: list[dict[str, Any]] = []
    for turn in store.get_turns(session_id):
        message: dict[str, Any] = {"role": turn["role"], "content": turn["content"]}
        if turn["role"] == "assistant" and not turn.get("trace_id") and turn["content"].startswith(NOTED):
            message["notice"] = True  # a memory acknowledgement, not part of the conversation's history
        if turn.get("trace_id"):
            try:
                trace = store.get_trace(turn["trace_id"])
                if trace.get("user") == principal.user:
                    message["trace"] = trace
            except Exception:
                pass
        messages.append(message)
    st.session_state[SESSION] = session_id
    st.session_state[MESSAGES] = messages


def _ensure_session(store: Any, principal: Principal, title: str) -> str | None:
    if store is None:
        return None
    if SESSION not in st.session_state:
        st.session_state[SESSION] = store.create_session(principal.user, title[:80])
    return st.session_state[SESSION]


def _history(messages: list[dict[str, Any]], budget: int) -> list[tuple[str, str]]:
    turns = [(m["role"], m["content"]) for m in messages if not m.get("notice")]
    return select_history(turns, budget)


def _answer(pipeline: Any, question: Question) -> Any:
    if pipeline.llm is not None:
        running = services.ask_streaming(pipeline, question)
        placeholder = st.empty()
        with placeholder.container():
            st.write_stream(running.deltas())
        result = running.result()
        placeholder.empty()
        return result
    with st.spinner("Searching the policies you may read\u2026"):
        return pipeline.ask(question)


def handle(prompt: str, pipeline: Any, store: Any, principal: Principal) -> None:
    settings = pipeline.settings
    messages = _messages()
    history = _history(messages, settings.history_token_budget)
    messages.append({"role": "user", "content": prompt})
    with st.chat_message("user"):
        st.markdown(components.escape_md(prompt))
    session_id = _ensure_session(store, principal, prompt)
    if store is not None and session_id:
        store.add_turn(session_id, "user", prompt)

    fact = extract_fact(prompt)
    notice = None
    if fact is not None:
        key, value = fact
        if store is not None:
            store.remember_fact(principal.user, key, value)
            notice = f"{NOTED} I'll remember: \u201c{value}\u201d."
        else:
            notice = "I can't remember facts while the trace database is unavailable."
    if fact is not None and "?" not in prompt:
        messages.append({"role": "assistant", "content": notice, "notice": True})
        with st.chat_message("assistant"):
            st.markdown(components.escape_md(notice))
        if store is not None and session_id:
            store.add_turn(session_id, "assistant", notice)
        return

    facts = relevant_facts(prompt, store.facts(principal.user)) if store is not None else []
    question = Question(prompt, principal, session_id=session_id, history=tuple(history), facts=tuple(facts))
    with st.chat_message("assistant"):
        if notice:
            st.caption(notice)
        try:
            result = _answer(pipeline, question)
        except Exception as exc:
            services.show_error(exc)
            return
        trace = result.to_json()
        if store is not None:
            try:
                store.save_trace(trace)
                if session_id:
                    store.add_turn(session_id, "assistant", trace["answer"], trace_id=trace["trace_id"])
            except Exception as exc:
                st.warning(f"This answer was not stored: {services.describe_error(exc)}")
        message = {"role": "assistant", "content": trace["answer"], "trace": trace}
        messages.append(message)
        render_assistant(message, len(messages) - 1)


def render() -> None:
    settings = services.get_settings()
    principal = services.current_principal(settings)
    st.title("Policy support bot")
    st.caption(
        f"Answers come only from the policies **{principal.user}** may read, with citations: hover or click a "
        "[n] to see the passage. Beside each answer: the passages in the order the model saw them."
    )
    store, store_error = services.try_store(settings)
    if store_error is not None:
        services.show_error(store_error)
        st.caption("Answers still work, but conversations, traces and remembered facts are not stored.")
    pipeline = services.get_pipeline(settings)
    _sidebar(store, principal)
    for i, message in enumerate(_messages()):
        with st.chat_message(message["role"]):
            if message["role"] == "assistant":
                render_assistant(message, i)
            else:
                st.markdown(components.escape_md(message["content"]))
    prompt = st.chat_input(
        "Ask about a policy, e.g. How many days do I have to return an item?", key="chat_input"
    )
    if prompt and prompt.strip():
        handle(prompt.strip(), pipeline, store, principal)
    _sidebar_memory(store, principal)


with services.page_guard():
    render()
