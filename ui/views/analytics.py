"""Analytics (admins only): how the bot is used and where the policies leave people without an answer.

Questions per day, abstention and failed-citation rates, feedback; the abstained and down-voted questions
grouped by topic (their embeddings clustered, see ui/analytics.py) with counts and examples; the documents
cited most and never; each table downloadable as CSV. Traces quote restricted documents, so only the admin
group (``RAG_ADMIN_GROUP``) may open this page.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pandas as pd
import streamlit as st

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
    )


@st.cache_data(show_spinner="Grouping questions by topic\u2026", max_entries=16)
def _topics(rows: tuple[tuple[Any, ...], ...], model_key: str, _embedder: Any) -> list[analytics.Topic]:
    """Topics for these gap rows (cached per rows and embedding model: embedding is the slow part)."""
    gaps = [
        dict(zip(("trace_id", "question", "abstained", "feedback", "feedback_reason"), r, strict=True))
        for r in rows
    ]
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


def _feedback(store: Any, since: date | None, until: date | None) -> None:
    reasons = store.feedback_reasons(since, until)
    st.subheader("Why answers were rated down", anchor=False)
    if not reasons:
        st.caption("No down-votes in this period.")
        return
    frame = pd.DataFrame(
        [{"reason": REASONS.get(r, "(no reason given)"), "down-votes": n} for r, n in sorted(reasons.items())]
    )
    st.bar_chart(frame.set_index("reason"), horizontal=True, height=90 + 36 * len(frame))


def _gaps(settings: Any, store: Any, since: date | None, until: date | None) -> None:
    st.subheader("Knowledge gaps: questions without a good answer, by topic", anchor=False)
    st.caption(
        "Questions the bot abstained on, or whose asker rated the answer down, grouped by meaning. A big topic "
        "is a policy that is missing, unclear, or not indexed."
    )
    gaps = store.gap_questions(since, until)
    if not gaps:
        st.success("No abstained or down-voted questions in this period.", icon=":material/check_circle:")
        return
    rows = tuple(
        (g["trace_id"], g["question"], g["abstained"], g["feedback"], g["feedback_reason"]) for g in gaps
    )
    try:
        embedder = services.get_pipeline(settings).embedder
    except Exception as exc:  # no index yet: still list the questions, ungrouped
        services.show_error(exc)
        embedder = None
    topics = [] if embedder is None else _topics(rows, settings.embedding_model, embedder)
    if topics:
        frame = analytics.topics_frame(topics)
        st.bar_chart(
            frame.head(10).set_index("topic")[["abstained", "down-voted"]],
            horizontal=True,
            stack=True,
            height=110 + 34 * min(10, len(frame)),
        )
        st.dataframe(frame, hide_index=True, key="analytics_topics")
        for topic in topics[:8]:
            with st.expander(f"{topic.count} \u00d7 {topic.label}"):
                st.caption(
                    f"{topic.abstained} abstained, {topic.down_votes} rated down"
                    + (f" \u00b7 words: {', '.join(topic.terms)}" if topic.terms else "")
                )
                for example in topic.examples:
                    st.markdown("- " + components.escape_md(example))
        _csv(frame, "Topics (CSV)", "knowledge-gaps.csv", "analytics_csv_topics")
    questions = pd.DataFrame(gaps)[
        [
            "created_at",
            "user",
            "question",
            "abstained",
            "feedback",
            "feedback_reason",
            "feedback_comment",
            "trace_id",
        ]
    ]
    _csv(questions, "Every such question (CSV)", "gap-questions.csv", "analytics_csv_questions")


def _documents(settings: Any, store: Any, since: date | None, until: date | None) -> None:
    st.subheader("Documents: cited most, and never", anchor=False)
    try:
        indexed = services.get_reader(settings).documents()
    except Exception as exc:
        services.show_error(exc)
        indexed = {}
    frame = analytics.documents_frame(indexed, store.cited_documents(since, until))
    if frame.empty:
        st.caption("No documents indexed yet.")
        return
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.markdown("**Most cited** (answers citing a passage of the document)")
        top = frame[frame["answers citing it"] > 0].head(10)
        if top.empty:
            st.caption("No answer in this period cites a document.")
        else:
            st.bar_chart(
                top.set_index("document")[["answers citing it"]], horizontal=True, height=90 + 34 * len(top)
            )
    with right:
        never = frame[(frame["answers citing it"] == 0) & frame["indexed"]]
        st.markdown(f"**Never cited in this period** ({len(never)})")
        st.dataframe(never[["document", "doc id"]], hide_index=True, key="analytics_never_cited")
    _csv(frame, "Documents (CSV)", "documents.csv", "analytics_csv_documents")


def render() -> None:
    settings = services.get_settings()
    services.require_admin(settings, "Analytics")
    st.title("Analytics")
    st.caption("Every user's questions in the period. Traces quote restricted documents: admins only.")
    store = services.get_store(settings)
    since, until = _window()
    days = store.daily_stats(since, until)
    _overview(days)
    if not days:
        st.info("No questions in this period yet.", icon=":material/info:")
        return
    _per_day(days)
    _gaps(settings, store, since, until)
    _feedback(store, since, until)
    _documents(settings, store, since, until)


with services.page_guard():
    render()
