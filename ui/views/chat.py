"""Chat: the support bot. Employees see the answer first, with citations that open the cited page of the source;
"Show how this answer was built" (always on for admins) adds the final chunk order, scores and chart.

The chat box and a "Loading the models…" banner are drawn before the pipeline loads, so the first paint is never
an empty page. A refusal says where to ask instead; the threshold figures stay in the trace.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import Any

import streamlit as st

from rag.errors import StorageError
from rag.pipeline import Question
from rag.stages.memory import extract_fact, relevant_facts, select_history
from rag.types import Principal
from ui import answer_text, cited_sources, components, first_screen, services, sources, trace_view
from ui.feedback import feedback_widget

MESSAGES = "chat_messages"  # list of {"role", "content", "trace"?, "notice"?}
INPUT = "chat_input"
PENDING = "chat_pending"  # an example question that was clicked, asked on the next run
TOO_LONG = "chat_too_long"  # a question over the limit, refused and put back into the box
SESSION = "chat_session_id"
NOTED = "Noted."
SHOW_HOW = "chat_show_how"
LOADING = "Loading the models\u2026 the first answer after a restart takes about 15 seconds."


def _messages() -> list[dict[str, Any]]:
    return st.session_state.setdefault(MESSAGES, [])


def _plain_refusal(trace: dict[str, Any], contact: str) -> str:
    """What an employee reads under a refusal (``answer_text.refusal_advice``: the API says it too)."""
    return answer_text.refusal_advice(contact)


def _contact(trace: dict[str, Any], principal: Principal) -> str:
    """A contact from the metadata of the documents this answer looked at, else the configured default."""
    settings = services.get_settings()
    try:
        documents = services.get_reader(settings).documents()
    except Exception:
        documents = {}
    return sources.contact_for(documents, principal, answer_text.looked_at(trace)) or settings.support_contact


def _badges(trace: dict[str, Any]) -> str:
    """The answer's label (``components.badges_html``), a refusal in the words an employee reads."""
    return components.badges_html(trace, abstained=answer_text.CHAT_ABSTAINED)


def searched_as_html(trace: dict[str, Any]) -> str:
    """A follow-up's standalone form, as text ("Searched for: ..."), or nothing when it was not rewritten."""
    searched = answer_text.searched_for(trace)
    if searched is None:
        return ""
    question = html.escape(searched)
    return f'<div class="searched-as" style="opacity:0.7;font-size:0.85em">Searched for: {question}</div>'


def render_answer(trace: dict[str, Any], principal: Principal, *, key: str) -> None:
    """The employee view of one answer: the text with its citations, a plain refusal, and each cited source."""
    badges = _badges(trace)
    components.show_answer_html(
        searched_as_html(trace) + (f"<div>{badges}</div>" if badges else "") + components.answer_html(trace)
    )
    if trace.get("abstained"):
        st.info(_plain_refusal(trace, _contact(trace, principal)), icon=":material/contact_support:")
    components.show_failed_citations(trace)
    if trace.get("error"):
        st.warning(
            "The language model failed, so this answer quotes the policies directly: "
            + components.escape_md(str(trace["error"])),
            icon=":material/warning:",
        )
    cited_sources.render_cited_sources(trace, principal, key=key)


def _show_how(principal: Principal) -> bool:
    """Whether the evidence panel shows: a toggle for employees, always on for admins."""
    settings = services.get_settings()
    if services.is_admin(principal, settings):
        st.toggle(
            "Show how this answer was built",
            value=True,
            disabled=True,
            key="chat_show_how_admin",
            help="Always on for administrators.",
        )
        return True
    return st.toggle(
        "Show how this answer was built",
        key=SHOW_HOW,
        help="The passages the answer was built from, in the order the model saw them, with scores.",
    )


def render_assistant(message: dict[str, Any], index: int, show_how: bool = False) -> None:
    trace = message.get("trace")
    if not trace:
        st.markdown(components.escape_md(message["content"]))
        return
    key = f"{trace.get('trace_id')}_{index}"
    settings = services.get_settings()
    principal = services.current_principal(settings)
    render_answer(trace, principal, key=key)
    # The feedback widget (ui/feedback.py, thumbs up/down with a reason) sits right under each answer.
    feedback_widget(settings, principal, trace["trace_id"], key)
    if show_how:
        with st.container(border=True):
            if trace.get("abstained") and trace.get("abstain_reason"):
                st.caption("Why it abstained: " + components.escape_md(str(trace["abstain_reason"])))
            check = trace.get("answer_check") or {}
            missed = [i["text"] for i in check.get("intents") or [] if not i.get("addressed")]
            if missed:
                quoted = "; ".join(f"\u201c{m}\u201d" for m in missed)
                st.caption("Not addressed by the answer: " + components.escape_md(quoted))
            if excerpts := components.excerpt_caption(trace):
                st.caption(excerpts)
            trace_view.render_order(trace, key=key, chart=True)
            # token budgets and the trace id are for administrators
            if services.is_admin(principal, settings):
                st.caption(trace_view.budget_sentence(trace))


def _sidebar(store: Any, principal: Principal) -> None:
    with st.sidebar:
        st.divider()
        st.markdown("**Conversation**")
        if st.button("New conversation", icon=":material/add_comment:", key="chat_new"):
            st.session_state.pop(SESSION, None)
            st.session_state[MESSAGES] = []
            st.session_state["chat_reopen"] = ""
        if _messages():
            exports = [
                ("Markdown", conversation_markdown(_messages()), "md", "text/markdown"),
                (
                    "JSON",
                    json.dumps(conversation_json(_messages()), indent=2, ensure_ascii=False),
                    "json",
                    "application/json",
                ),
            ]
            for col, (label, data, ext, mime) in zip(st.columns(2), exports, strict=True):
                col.download_button(
                    label,
                    data,
                    file_name=f"conversation.{ext}",
                    mime=mime,
                    icon=":material/download:",
                    key=f"chat_export_{ext}",
                    on_click="ignore",
                    help="This conversation with each answer's citations",
                )
        if store is None:
            return
        if not store.sessions.list(principal.user, limit=1):
            return  # nothing to search or reopen yet
        query = st.text_input("Search your conversations", key="chat_search", placeholder="e.g. refund")
        sessions = store.sessions.list(principal.user, limit=200 if query else 20)
        if query:
            sessions = [s for s in sessions if _matches(store, s, query)][:20]
            if not sessions:
                st.caption("No conversation matches.")
        if sessions:
            # Labels must be unique: a selectbox keeps its value by label.
            labels = {
                s[
                    "id"
                ]: f"{(s.get('title') or 'Untitled')[:48]} \u00b7 {str(s.get('created_at') or '')[5:16]} "
                f"({s.get('turns', 0)} turns)"
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


def _matches(store: Any, session: dict[str, Any], query: str) -> bool:
    """A conversation whose title or any turn holds every word of ``query`` (case-insensitive)."""
    words = query.lower().split()
    text = str(session.get("title") or "").lower()
    if all(w in text for w in words):
        return True
    text += " " + " ".join(str(t.get("content") or "").lower() for t in store.sessions.turns(session["id"]))
    return all(w in text for w in words)


def distinct_title(prompt: str, taken: set[str]) -> str:
    """The conversation's title: its first question (shortened), numbered when another one has that title."""
    base = " ".join(prompt.split())
    base = base if len(base) <= 60 else base[:59].rsplit(" ", 1)[0] + "\u2026"
    title, n = base, 2
    while title in taken:
        title, n = f"{base} ({n})", n + 1
    return title


def _citations_of(trace: dict[str, Any]) -> list[dict[str, Any]]:
    ev = components.evidence_by_n(trace)
    out = []
    for n in dict.fromkeys(c["n"] for c in trace.get("citations") or []):
        e = ev.get(n)
        if e is not None:
            out.append(
                {
                    "n": n,
                    "title": e.get("title"),
                    "doc_id": e.get("doc_id"),
                    "page": e.get("page"),
                    "section": e.get("section"),
                    "chunk_id": e.get("chunk_id"),
                    "text": e.get("text"),
                }
            )
    return out


def conversation_json(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The conversation as JSON: each turn, and for answers their citations with the cited passages."""
    turns = []
    for m in messages:
        turn: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m.get("trace"):
            turn.update(
                trace_id=m["trace"].get("trace_id"),
                abstained=bool(m["trace"].get("abstained")),
                citations=_citations_of(m["trace"]),
            )
        turns.append(turn)
    return {"exported_at": datetime.now(UTC).isoformat(timespec="seconds"), "turns": turns}


def conversation_markdown(messages: list[dict[str, Any]]) -> str:
    """The conversation as Markdown: questions, answers, and under each answer its numbered sources."""
    lines = ["# Conversation with the policy support bot", ""]
    for m in messages:
        who = "You" if m["role"] == "user" else "Support bot"
        lines += [f"**{who}:**", "", m["content"], ""]
        for c in _citations_of(m.get("trace") or {}):
            page = f", p. {c['page']}" if c.get("page") else ""
            quote = " ".join(str(c.get("text") or "").split())
            lines.append(
                f"- [{c['n']}] {c.get('title')}{page}, {c.get('section') or ''}: \u201c{quote}\u201d"
            )
        lines.append("")
    return "\n".join(lines)


def _sidebar_memory(store: Any, principal: Principal) -> None:
    """Facts the user confirmed (drawn after the new message is handled, so a new fact shows at once)."""
    if store is None:
        return
    with st.sidebar:
        facts = store.memory.facts(principal.user)
        st.markdown("**What I remember about you**")
        if not facts:
            st.caption('Nothing yet. Say e.g. "Remember that I work part-time".')
        for fact in facts:
            cols = st.columns([5, 1])
            cols[0].caption(components.escape_md(str(fact["value"])))
            if cols[1].button(
                ":material/delete:", key=f"chat_forget_{fact['key']}", help="Forget this", type="tertiary"
            ):
                store.memory.forget(principal.user, fact["key"])
                st.rerun()


def _load_session(store: Any, principal: Principal, session_id: str) -> None:
    """Reopen one of the signed-in user's own conversations, with each answer's stored trace."""
    own = {s["id"] for s in store.sessions.list(principal.user, limit=1000)}
    if session_id not in own:
        return
    messages: list[dict[str, Any]] = []
    for turn in store.sessions.turns(session_id):
        message: dict[str, Any] = {"role": turn["role"], "content": turn["content"]}
        if turn["role"] == "assistant" and not turn.get("trace_id") and turn["content"].startswith(NOTED):
            message["notice"] = True  # a memory acknowledgement, not part of the conversation's history
        if turn.get("trace_id"):
            try:
                # through the trace schema, as the trace explorer reads it (older traces get the new keys' defaults)
                trace = store.traces.read(turn["trace_id"]).to_json(defaults=True)
            except StorageError:  # gone, unreadable or not a trace: the answer's text still shows, without it
                trace = None
            if trace is not None and trace.get("user") == principal.user:
                message["trace"] = trace
        messages.append(message)
    st.session_state[SESSION] = session_id
    st.session_state[MESSAGES] = messages


def _ensure_session(store: Any, principal: Principal, title: str) -> str | None:
    if store is None:
        return None
    if SESSION not in st.session_state:
        taken = {str(x.get("title") or "") for x in store.sessions.list(principal.user, limit=1000)}
        st.session_state[SESSION] = store.sessions.create(principal.user, distinct_title(title, taken))
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


def too_long(prompt: str, limit: int) -> str | None:
    """The message for a question over the length limit, or None."""
    if len(prompt) <= limit:
        return None
    return (
        f"Your question is {len(prompt):,} characters long; questions can be at most {limit:,}. "
        "It is still in the box: shorten it to the question itself (the policies answer one or two questions "
        "at a time) and send it again."
    )


def _keep_too_long(limit: int) -> None:
    """The chat box's on_submit: a question over the limit goes back into the box instead of being lost."""
    text = st.session_state.get(INPUT)
    if isinstance(text, str) and too_long(text.strip(), limit):
        st.session_state[TOO_LONG] = text.strip()
        st.session_state[INPUT] = text  # the box shows it again on this run


def _ask_example(question: str) -> None:
    """An example's on_click: the question is asked on this run, as if typed."""
    st.session_state[PENDING] = question


def handle(prompt: str, pipeline: Any, store: Any, principal: Principal, show_how: bool = False) -> None:
    settings = pipeline.settings
    messages = _messages()
    history = _history(messages, settings.history_token_budget)
    messages.append({"role": "user", "content": prompt})
    with st.chat_message("user"):
        st.markdown(components.escape_md(prompt))
    session_id = _ensure_session(store, principal, prompt)
    if store is not None and session_id:
        store.sessions.add_turn(session_id, "user", prompt)

    fact = extract_fact(prompt)
    notice = ""
    if fact is not None:
        key, value = fact
        if store is not None:
            store.memory.remember(principal.user, key, value)
            notice = f"{NOTED} I'll remember: \u201c{value}\u201d."
        else:
            notice = "I can't remember facts while the trace database is unavailable."
    if notice and "?" not in prompt:
        messages.append({"role": "assistant", "content": notice, "notice": True})
        with st.chat_message("assistant"):
            st.markdown(components.escape_md(notice))
        if store is not None and session_id:
            store.sessions.add_turn(session_id, "assistant", notice)
        return

    facts = relevant_facts(prompt, store.memory.facts(principal.user)) if store is not None else []
    question = Question(
        prompt, principal, session_id=session_id, history=tuple(history), facts=tuple(facts), channel="ui"
    )
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
                store.traces.save(trace)
                if session_id:
                    store.sessions.add_turn(
                        session_id, "assistant", trace["answer"], trace_id=trace["trace_id"]
                    )
            except Exception as exc:
                st.warning(f"This answer was not stored: {services.describe_error(exc)}")
        message = {"role": "assistant", "content": trace["answer"], "trace": trace}
        messages.append(message)
        render_assistant(message, len(messages) - 1, show_how)


def render() -> None:
    settings = services.get_settings()
    principal = services.current_principal(settings)
    limit = settings.question_max_chars
    st.title("Policy support bot")
    st.caption(
        f"Answers come only from the policies **{components.escape_md(principal.user)}** may read. Click a [n] "
        "to see the passage, or a source below an answer to open it at the cited page."
    )
    # Drawn before anything heavy: the chat box and the banner are on the first paint. The box takes any length
    # (see first_screen.char_counter); a question over the limit is refused and put back (_keep_too_long).
    prompt = st.chat_input(
        f"Ask about a policy (up to {limit:,} characters)",
        key=INPUT,
        on_submit=_keep_too_long,
        args=(limit,),
    )
    first_screen.char_counter(limit)
    kept = st.session_state.pop(TOO_LONG, None)
    example = st.session_state.pop(PENDING, None)
    text = "" if kept else (prompt or example or "").strip()
    banner = st.empty()
    show_how = _show_how(principal)
    store, store_error = services.try_store(settings)
    if store_error is not None:
        services.show_error(store_error)
        st.caption("Answers still work, but conversations, traces and remembered facts are not stored.")
    _sidebar(store, principal)
    for i, message in enumerate(_messages()):
        with st.chat_message(message["role"]):
            if message["role"] == "assistant":
                render_assistant(message, i, show_how)
            else:
                st.markdown(components.escape_md(message["content"]))
    if not st.session_state.get("chat_models_ready"):
        banner.info(LOADING, icon=":material/hourglass_top:")
    if not _messages() and not text:
        first_screen.show(principal, ask=_ask_example)
    try:
        pipeline = services.get_pipeline(settings)
        st.session_state["chat_models_ready"] = True
    finally:
        banner.empty()
    refusal = too_long(kept or text, limit)
    if refusal:
        st.warning(refusal, icon=":material/short_text:")
    elif text:
        handle(text, pipeline, store, principal, show_how)
    _sidebar_memory(store, principal)


with services.page_guard():
    render()
