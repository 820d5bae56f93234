"""Analytics (admins only): how the bot is used and where the policies leave people without an answer.

Questions per day and by channel (chat page, `rag ask`, API), abstention and failed-citation rates, feedback; the
abstained and down-voted questions grouped by topic (their embeddings clustered, see ui/analytics.py) with counts,
channels and examples; apart from them,
the abstentions a restricted document would have answered (refused for access); the documents cited most and
never, told apart by file and validity; each table downloadable as CSV. Traces quote restricted documents, so
only the admin group (``RAG_ADMIN_GROUP``) may open this page. Questions are shown as text: tables, ``st.text``
or escaped Markdown.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pandas as pd
import streamlit as st

from rag.pipeline import PipelineOptions, Question
from rag.types import Principal
from ui import analytics, components, services
from ui.feedback import REASONS


def _window() -> tuple[date | None, date | None]:
    today = date.today()
    span = st.date_input("Period", (today - timedelta(days=30), today), key="analytics_dates")
    if isinstance(span, tuple | list):
        return (span[0] if span else None, span[1] if len(span) > 1 else None)
    return (span, span) if isinstance(span, date) else (None, None)


def _csv(frame: pd.DataFrame, label: str, name: str, key: str) -> None:
    st.download_button(
        label,
        frame.to_csv(index=False).encode("utf-8"),
        file_name=name,
        mime="text/csv",
        key=key,
        icon=":material/download:",
        on_click="ignore",  # a download needs no rerun (which would ask the refusal check again)
    )


@st.cache_data(show_spinner="Grouping questions by topic\u2026", max_entries=16)
def _topics(rows: tuple[tuple[Any, ...], ...], model_key: str, _embedder: Any) -> list[analytics.Topic]:
    """Topics for these gap rows (cached per rows and embedding model: embedding is the slow part)."""
    keys = ("trace_id", "question", "abstained", "feedback", "feedback_reason", "channel")
    gaps = [dict(zip(keys, r, strict=True)) for r in rows]
    return analytics.group_gaps(gaps, _embedder.embed_queries)


def _overview(days: list[dict[str, Any]]) -> None:
    t = analytics.totals(days)
    cols = st.columns(5)
    cols[0].metric("Questions", int(t["questions"]))
    cols[1].metric(
        "Abstention rate", f"{t['abstention_rate']:.0%}", help="Questions the bot declined to answer."
    )
    cols[2].metric(
        "Failed-citation rate",
        f"{t['failed_citation_rate']:.0%}",
        help="Answers with a citation that was invalid or did not support its sentence.",
    )
    cols[3].metric(":material/thumb_up: Helpful", int(t["thumbs_up"]))
    cols[4].metric(":material/thumb_down: Not helpful", int(t["thumbs_down"]))


def _per_day(days: list[dict[str, Any]]) -> None:
    frame = analytics.daily_frame(days)
    left, right = st.columns(2, gap="large")
    with left:
        st.markdown("**Questions per day**")
        st.bar_chart(frame.set_index("day")[["questions"]], height=240, color="#1c83e1")
    with right:
        st.markdown("**Abstention and failed-citation rate per day**")
        rates = frame.set_index("day")[["abstention_rate", "failed_citation_rate"]].rename(
            columns={"abstention_rate": "abstained", "failed_citation_rate": "failed citations"}
        )
        if len(rates) > 1:
            st.line_chart(rates, height=240)
        else:  # one day is one point: a line chart would draw nothing
            st.bar_chart(rates, stack=False, height=240)
    _csv(frame, "Daily figures (CSV)", "daily.csv", "analytics_csv_daily")


def _channels(store: Any, since: date | None, until: date | None) -> None:
    """Where the questions came from: the chat page, `rag ask`, the API (chat tools and bots)."""
    frame = analytics.channels_frame(store.analytics.channel_stats(since, until))
    if frame.empty:
        return
    st.markdown("**Questions by channel**")
    st.dataframe(
        frame,
        hide_index=True,
        key="analytics_channels",
        column_config={"abstention rate": st.column_config.NumberColumn(format="percent")},
    )


def _feedback(store: Any, since: date | None, until: date | None) -> None:
    reasons = store.analytics.feedback_reasons(since, until)
    st.subheader("Why answers were rated down", anchor=False)
    if not reasons:
        st.caption("No down-votes in this period.")
        return
    frame = pd.DataFrame(
        [{"reason": REASONS.get(r, "(no reason given)"), "down-votes": n} for r, n in sorted(reasons.items())]
    )
    st.bar_chart(frame.set_index("reason"), horizontal=True, height=90 + 36 * len(frame))


MAX_ACCESS_CHECKS = 100  # abstentions asked again per view (cached per trace and index generation)


@st.cache_data(show_spinner=False, max_entries=4096)
def _needed(
    gap: tuple[str, str, str, tuple[str, ...], str | None, tuple[str, ...]],
    generation: str,
    _documents: dict[str, Any],
    _pipeline: Any,
) -> tuple[str, ...]:
    """``analytics.needed_documents`` for one abstained question (trace id, question, user, groups, as of,
    tags), cached per question and index generation: each is asked again once."""
    trace_id, question, user, groups, as_of, tags = gap

    def ask(text: str, principal: Principal, day: date | None, tagged: frozenset[str]) -> dict[str, Any]:
        result = _pipeline.ask(
            Question(text, principal, as_of=day, tags=tagged), PipelineOptions(use_llm=False)
        )
        return dict(result.to_json())

    row = {"trace_id": trace_id, "question": question, "user": user, "groups": list(groups), "as_of": as_of}
    return analytics.needed_documents({**row, "tags": list(tags), "abstained": True}, _documents, ask)


def _refused_for_access(
    settings: Any, gaps: list[dict[str, Any]], documents: dict[str, Any]
) -> tuple[dict[str, tuple[str, ...]], int]:
    """trace id -> the restricted documents that answer it, for the abstained questions; and how many were
    left unchecked (over ``MAX_ACCESS_CHECKS``, or the pipeline could not load)."""
    abstained = [g for g in gaps if g.get("abstained")]
    if not abstained or not documents:
        return {}, 0
    try:
        pipeline = services.get_pipeline(settings)
        generation = str(pipeline.reader.generation.name)
    except Exception as exc:
        services.show_error(exc)
        return {}, len(abstained)
    needed: dict[str, tuple[str, ...]] = {}
    with st.spinner("Asking the unanswered questions again with every access group\u2026"):
        for g in abstained[:MAX_ACCESS_CHECKS]:
            key = (
                str(g["trace_id"]),
                str(g["question"]),
                str(g.get("user") or ""),
                tuple(str(x) for x in g.get("groups") or ()),
                g.get("as_of"),
                tuple(str(x) for x in g.get("tags") or ()),
            )
            needed[str(g["trace_id"])] = _needed(key, generation, documents, pipeline)
    return {t: d for t, d in needed.items() if d}, max(0, len(abstained) - MAX_ACCESS_CHECKS)


def _gaps(
    settings: Any, gaps: list[dict[str, Any]], refused: dict[str, tuple[str, ...]], unchecked: int
) -> None:
    st.subheader("Knowledge gaps: questions without a good answer, by topic", anchor=False)
    st.caption(
        "Questions the bot abstained on, or whose asker rated the answer down, grouped by meaning. A big topic "
        "is a policy that is missing, unclear, or not indexed. Questions only a document the asker may not "
        "read answers are not gaps: they are counted apart, under Refused for access."
        + (f" {unchecked} abstention(s) were not checked for that." if unchecked else "")
    )
    knowledge = [g for g in gaps if str(g["trace_id"]) not in refused]
    if not knowledge:
        st.success(
            "No abstained or down-voted questions in this period, apart from refusals for access.",
            icon=":material/check_circle:",
        )
    else:
        _topics_section(settings, knowledge)
    questions = pd.DataFrame(gaps)
    if not questions.empty:
        questions["kind"] = [
            "refused for access" if str(t) in refused else ("abstained" if a else "rated down")
            for t, a in zip(questions["trace_id"], questions["abstained"], strict=True)
        ]
        questions = questions[
            [
                "created_at",
                "user",
                "channel",
                "question",
                "kind",
                "abstained",
                "feedback",
                "feedback_reason",
                "feedback_comment",
                "trace_id",
            ]
        ]
        _csv(questions, "Every such question (CSV)", "gap-questions.csv", "analytics_csv_questions")


def _topics_section(settings: Any, gaps: list[dict[str, Any]]) -> None:
    rows = tuple(
        (g["trace_id"], g["question"], g["abstained"], g["feedback"], g["feedback_reason"], g.get("channel"))
        for g in gaps
    )
    try:
        embedder = services.get_pipeline(settings).embedder
    except Exception as exc:  # no index yet: still list the questions, ungrouped
        services.show_error(exc)
        embedder = None
    topics = [] if embedder is None else _topics(rows, settings.embedding_model, embedder)
    if not topics:
        return
    frame = analytics.topics_frame(topics)
    st.bar_chart(
        frame.head(10).set_index("topic")[["abstained", "down-voted"]],
        horizontal=True,
        stack=True,
        height=110 + 34 * min(10, len(frame)),
    )
    st.dataframe(frame, hide_index=True, key="analytics_topics")
    for topic in topics[:8]:
        with st.expander(f"{topic.count} \u00d7 {components.escape_md(topic.label)}"):
            st.caption(
                f"{topic.abstained} abstained, {topic.down_votes} rated down"
                + (f" \u00b7 words: {components.escape_md(', '.join(topic.terms))}" if topic.terms else "")
            )
            for example in topic.examples:
                st.text("\u2022 " + example)
    _csv(frame, "Topics (CSV)", "knowledge-gaps.csv", "analytics_csv_topics")


def _refusals(
    gaps: list[dict[str, Any]], refused: dict[str, tuple[str, ...]], documents: dict[str, Any]
) -> None:
    st.subheader("Refused for access", anchor=False)
    st.caption(
        "Abstained questions that a document the asker may not read answers: asked again by the same user on "
        "the same date with every access group added (no language model), the answer cites a restricted "
        "document. A matter of access rights, not a missing policy."
    )
    frame = analytics.refusals_frame(gaps, refused, documents)
    if frame.empty:
        st.caption("None in this period.")
        return
    st.metric("Questions refused for access", len(frame))
    st.dataframe(
        frame,
        hide_index=True,
        key="analytics_refusals",
        column_config={
            "question": st.column_config.TextColumn(width=320),
            "answered by": st.column_config.TextColumn(width=300),
        },
    )
    _csv(frame, "Refused for access (CSV)", "refused-for-access.csv", "analytics_csv_refusals")


def _documents(store: Any, since: date | None, until: date | None, indexed: dict[str, Any]) -> None:
    st.subheader("Documents: cited most, and never", anchor=False)
    st.caption(
        "Each document by title, file and, when not in force today, its state: two versions of a policy share a "
        "title, never a file."
    )
    frame = analytics.documents_frame(indexed, store.analytics.cited_documents(since, until))
    if frame.empty:
        st.caption("No documents indexed yet.")
        return
    cited = frame[frame["answers citing it"] > 0].head(10)
    st.markdown("**Most cited** (answers citing a passage of the document)")
    if cited.empty:
        st.caption("No answer in this period cites a document.")
    else:
        st.dataframe(
            cited[["title", "status", "file", "valid", "answers citing it"]],
            hide_index=True,
            key="analytics_most_cited",
            column_config={
                "title": st.column_config.TextColumn(width=240),
                "answers citing it": st.column_config.ProgressColumn(
                    "answers citing it",
                    format="%d",
                    min_value=0,
                    max_value=int(cited["answers citing it"].max()),
                ),
            },
        )
    never = frame[(frame["answers citing it"] == 0) & frame["indexed"]]
    st.markdown(f"**Never cited in this period** ({len(never)})")
    st.dataframe(
        never[["title", "status", "file", "valid", "doc id"]],
        hide_index=True,
        key="analytics_never_cited",
        height=min(36 * (len(never) + 1) + 2, 640),  # every row, up to ~17
        column_config={"title": st.column_config.TextColumn(width=240)},
    )
    _csv(frame, "Documents (CSV)", "documents.csv", "analytics_csv_documents")


def render() -> None:
    settings = services.get_settings()
    services.require_admin(settings, "Analytics")
    st.title("Analytics")
    st.caption("Every user's questions in the period. Traces quote restricted documents: admins only.")
    store = services.get_store(settings)
    since, until = _window()
    days = store.analytics.daily_stats(since, until)
    _overview(days)
    if not days:
        st.info("No questions in this period yet.", icon=":material/info:")
        return
    _per_day(days)
    _channels(store, since, until)
    try:
        documents = services.get_reader(settings).documents()
    except Exception as exc:
        services.show_error(exc)
        documents = {}
    gaps = [dict(g) for g in store.analytics.gap_questions(since, until)]
    refused, unchecked = _refused_for_access(settings, gaps, documents)
    _gaps(settings, gaps, refused, unchecked)
    _refusals(gaps, refused, documents)
    _feedback(store, since, until)
    _documents(store, since, until, documents)


with services.page_guard():
    render()
