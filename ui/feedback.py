"""Thumbs up or down under an answer, with an optional reason, stored with the answer's trace.

``feedback_widget`` is called under each of the signed-in user's own answers (the chat page, the trace
explorer). The rating can be changed or withdrawn (click the same thumb again); the trace store refuses
feedback on another user's trace whatever the page does.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from rag.config import Settings
from rag.errors import RagError
from rag.types import Principal
from ui import components, services

REASONS = {
    "wrong": "Wrong",
    "incomplete": "Incomplete",
    "outdated": "Outdated",
    "did_not_answer": "Did not answer",
    "other": "Other",
}
RATING_OF = {1: "up", 0: "down"}  # st.feedback("thumbs"): 1 is thumbs up, 0 thumbs down
VALUE_OF = {v: k for k, v in RATING_OF.items()}
COMMENT_CHARS = 2000
SAVED = "Thanks: your feedback is saved with this answer."

Wanted = tuple[str | None, str | None, str | None]


def _stored_state(stored: dict[str, Any] | None) -> Wanted:
    if not stored:
        return (None, None, None)
    return (stored.get("rating"), stored.get("reason"), stored.get("comment"))


def feedback_label(stored: dict[str, Any] | None) -> str:
    """'up', 'down: outdated', 'down: other, "text"' or '' (no feedback), for tables and read-only views.
    Words, not emoji: a browser without an emoji font draws those as boxes."""
    if not stored or not stored.get("rating"):
        return ""
    text = str(stored["rating"])
    details = []
    if stored.get("reason"):
        details.append(REASONS.get(stored["reason"], stored["reason"]).lower())
    if stored.get("comment"):
        details.append(f"\u201c{stored['comment']}\u201d")
    return text + (": " + ", ".join(details) if details else "")


def feedback_widget(
    settings: Settings, principal: Principal, trace_id: str, key: str
) -> dict[str, Any] | None:
    """Thumbs up/down for one of ``principal``'s answers; on thumbs down, an optional reason (and text for
    "other"). Saves whenever the choice changes; returns the stored feedback (None when there is none)."""
    store, _error = services.try_store(settings)
    if store is None or not trace_id:
        return None  # the chat page already says the trace store is unavailable
    base = f"feedback_{key}"
    thumbs, reason_key, comment_key, saved_key = (f"{base}_thumbs", f"{base}_reason", f"{base}_comment", base)
    if saved_key not in st.session_state:
        try:
            stored = store.feedback.get(trace_id)
        except RagError as exc:
            services.show_error(exc)
            return None
        if stored and stored.get("user") != principal.user:
            # not theirs to change (the store checks too); the comment is the user's words: text, not Markdown
            st.caption(components.escape_md("Feedback: " + feedback_label(stored)))
            return stored
        was = _stored_state(stored)
        st.session_state[saved_key] = was
        st.session_state[thumbs] = VALUE_OF.get(was[0]) if was[0] else None
        st.session_state[reason_key] = was[1]
        st.session_state[comment_key] = was[2] or ""
    value = st.feedback("thumbs", key=thumbs)
    rating = RATING_OF.get(value) if value is not None else None
    reason: str | None = None
    comment: str | None = None
    if rating == "down":
        reason = st.pills(
            "What was wrong? (optional)", list(REASONS), format_func=lambda r: REASONS[r], key=reason_key
        )
        if reason == "other":
            comment = (
                st.text_input(
                    "Tell us more (optional)",
                    key=comment_key,
                    max_chars=COMMENT_CHARS,
                    placeholder="What did you need?",
                ).strip()
                or None
            )
    wanted: Wanted = (rating, reason, comment)
    if st.session_state.pop(f"{base}_flash", False):
        st.caption(SAVED)
    if wanted == st.session_state[saved_key]:
        return None if rating is None else {"rating": rating, "reason": reason, "comment": comment}
    try:
        if rating is None:
            store.feedback.clear(trace_id, principal.user)
            saved = None
        else:
            saved = store.feedback.set(trace_id, principal.user, rating, reason=reason, comment=comment)
    except RagError as exc:
        services.show_error(exc)
        return None
    st.session_state[saved_key] = wanted
    if saved is not None:
        st.session_state[f"{base}_flash"] = True
    # Rerun, so whatever the page drew above this widget (the trace table's feedback column) shows the change.
    st.rerun()
    return saved  # not reached: st.rerun() raises
