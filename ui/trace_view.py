"""The trace explorer's view of one stored answer: the question, the answer beside the final chunk order, and one
tab per stage of the query path (ui/views/traces.py shows it; ui/components.py holds the shared pieces).

Everything a user typed or a document holds is shown as text: tables (drawn on a canvas, never as Markdown or
links), ``st.code``, or Markdown escaped with ``components.escape_md``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from rag.stages.pack import STRATEGIES
from ui import components

# Three significant digits: a reranker's probabilities run from 0.99 down to 0.0002, which "%.3f" shows as 0.000.
SCORE_FORMAT = "%.3g"
ROW_HEIGHT = 92  # four lines of a wrapped passage (Streamlit wraps text only in rows taller than 4rem)
EVIDENCE_COLUMNS = [
    "passage",
    "source",
    "position",
    "rerank rank",
    "rerank score",
    "BM25 rank",
    "dense rank",
    "bundle",
    "added",
    "cited",
    "chunk id",
]
# Beside the answer: what the model read, in order (the Evidence scores tab has the source and every score).
ORDER_VIEW = ["position", "passage", "rerank rank", "cited"]
TABS = [
    "Evidence scores",
    "Candidates",
    "Dropped",
    "Bundles",
    "Hops",
    "Prompt",
    "Citations",
    "Timing & budgets",
]


# ----------------------------------------------------------------------------- what the numbers mean
def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _stage_details(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(s.get("name")): s.get("detail") or {} for s in trace.get("stages") or []}


def passage_count(trace: dict[str, Any]) -> str:
    """How many passages the prompt held, and how that relates to k: the budget stage chose up to k, bundling
    added passages their chosen ones depend on (a rule's exception, a continued sentence)."""
    evidence = trace.get("evidence") or []
    n = len(evidence)
    k = (trace.get("budgets") or {}).get("evidence_k")
    if n == 0:
        return "No passage reached the prompt" + (f" (k={k})" if k else "")
    details = _stage_details(trace)
    chosen = details.get("budget", {}).get("selected")
    added = details.get("bundle", {}).get("added")
    if chosen is None or added is None:  # a trace without these stage details: count what bundling added
        added = [e for e in evidence if str(e.get("added_by") or "").split(":")[0].endswith("_of")]
        chosen = n - len(added)
    n_added = len(added)
    head = _plural(n, "passage")
    limit = f"k={k}" if k else "k unknown"
    if chosen + n_added == n:
        text = f"{head}: {chosen} chosen ({limit})"
        if n_added:
            text += f" plus {n_added} bundled with them"
        return text
    return f"{head} ({limit}; the budget chose {chosen}, bundling added {n_added} and left out some to fit)"


def budget_sentence(trace: dict[str, Any]) -> str:
    """The budgets and token counts as a sentence, not JSON."""
    b = trace.get("budgets") or {}
    t = trace.get("tokens") or {}
    count = passage_count(trace)
    sentences = [
        f"The evidence took {b.get('evidence_tokens', 0):,} of its {b.get('evidence_token_budget', 0):,} tokens "
        f"({count[:1].lower() + count[1:]})."
    ]
    if b.get("history_tokens"):
        sentences.append(
            f"The conversation so far took {b['history_tokens']:,} of its {b.get('history_token_budget', 0):,} "
            "tokens."
        )
    else:
        sentences.append(
            f"No conversation history was sent (its budget: {b.get('history_token_budget', 0):,})."
        )
    facts = int(b.get("facts") or 0)
    sentences.append(f"{_plural(facts, 'remembered fact')} went with the question." if facts else "")
    if t.get("prompt") or t.get("completion"):
        sentences.append(
            f"The language model read {t.get('prompt', 0):,} prompt tokens and wrote {t.get('completion', 0):,}."
        )
    else:
        sentences.append("No language model was called (the answer quotes the evidence).")
    return " ".join(s for s in sentences if s)


def added_reason(added_by: str | None, position_of: dict[str, int]) -> str:
    """Why a passage joined the evidence without being chosen on its own: 'exception of [3]', 'hop 1: Leave'."""
    if not added_by:
        return ""
    kind, _, ref = added_by.partition(":")
    if kind.startswith("hop_"):
        return f"hop {kind.removeprefix('hop_')}: {ref}"
    what = kind.removesuffix("_of").replace("_", " ")
    if ref in position_of:
        return f"{what} of [{position_of[ref]}]"
    return f"{what} of {ref[:8]}" if ref else what


def evidence_frame(trace: dict[str, Any]) -> pd.DataFrame:
    """The final order with the passage's own text first (whitespace folded), then where it is from and the ranks
    and scores that put it there. Missing ranks stay missing (the table shows them blank)."""
    evidence = trace.get("evidence") or []
    position_of = {str(e["chunk_id"]): int(e["n"]) for e in evidence}
    rows = [
        {
            "passage": " ".join(str(e.get("text") or "").split()),
            "source": components.passage_label(e),
            "position": int(e["n"]),
            "rerank rank": e.get("rerank_rank"),
            "rerank score": e.get("rerank_score"),
            "BM25 rank": e.get("bm25_rank"),
            "dense rank": e.get("dense_rank"),
            "bundle": e.get("bundle"),
            "added": added_reason(e.get("added_by"), position_of),
            "cited": bool(e.get("cited")),
            "chunk id": e.get("chunk_id"),
        }
        for e in evidence
    ]
    frame = pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)
    for col in ("position", "rerank rank", "BM25 rank", "dense rank", "bundle"):
        frame[col] = pd.array(frame[col], dtype="Int64")
    frame["rerank score"] = frame["rerank score"].astype("Float64")
    return frame


EVIDENCE_CONFIG: dict[str, Any] = {
    "passage": st.column_config.TextColumn("passage", width=420, help="Click a cell to read all of it"),
    "source": st.column_config.TextColumn("source", width=180),
    "position": st.column_config.NumberColumn(
        "pos", help="Position n in the prompt: [n] in the answer", width=45
    ),
    "rerank rank": st.column_config.NumberColumn(
        "rerank", help="Rank after reranking (1 = best); blank: added to complete a bundle", width=60
    ),
    "rerank score": st.column_config.NumberColumn("score", format=SCORE_FORMAT, width=65),
    "BM25 rank": st.column_config.NumberColumn("BM25", help="Rank in the lexical (BM25) list", width=55),
    "dense rank": st.column_config.NumberColumn("dense", help="Rank in the dense (embedding) list", width=55),
    "bundle": st.column_config.NumberColumn(
        "bundle", help="Passages of one bundle travel together", width=60
    ),
    "added": st.column_config.TextColumn("added as", help="Why bundling or a hop added it", width=140),
    "cited": st.column_config.CheckboxColumn("cited", width=50),
}


def replay_defaults(trace: dict[str, Any], settings: Any) -> tuple[str, int, int]:
    """Packing, evidence k and token budget the trace ran with (the settings' values where it lacks one), so a
    replay changes only what the admin changes."""
    budgets = trace.get("budgets") or {}
    packing = trace.get("packing") if trace.get("packing") in STRATEGIES else settings.packing
    k = int(budgets.get("evidence_k") or settings.evidence_k)
    budget = int(budgets.get("evidence_token_budget") or settings.evidence_token_budget)
    return str(packing), k, budget


# ----------------------------------------------------------------------------- rendering
def render_order(
    trace: dict[str, Any], *, key: str, title: str = "Final chunk order", chart: bool = False
) -> None:
    """The final order as the model read it: the passages (wrapped) with their rank; ``chart``: and the chart of
    rank by position."""
    st.markdown(f"**{title}**")
    st.caption(f"{passage_count(trace)} \u00b7 packing `{trace.get('packing', '?')}`")
    frame = evidence_frame(trace)
    if frame.empty:
        if trace.get("abstained"):
            st.caption("The bot abstained.")
        return
    st.dataframe(
        frame,
        hide_index=True,
        key=f"order_{key}",
        column_order=ORDER_VIEW,
        column_config={**EVIDENCE_CONFIG, "passage": st.column_config.TextColumn("passage", width=250)},
        row_height=ROW_HEIGHT,
        placeholder="",
    )
    if chart:
        _rank_chart(trace, key)


def _rank_chart(trace: dict[str, Any], key: str) -> None:
    """Rerank rank by position (edge packing hangs as a V), and where the best passage sits."""
    chart = components.chunk_order_frame(trace)
    st.vega_lite_chart(
        components.chart_data(chart),
        components.chunk_order_chart_spec(chart),
        width="stretch",
        key=f"chart_{key}",
    )
    ranks = [None if pd.isna(r) else int(r) for r in chart["rerank rank"]]
    if sum(r is not None for r in ranks) >= 3:
        st.caption(components.shape_note(ranks))


def _header(trace: dict[str, Any]) -> None:
    st.markdown(f"**Question:** {components.escape_md(str(trace.get('question') or ''))}")
    standalone = trace.get("standalone") or {}
    if standalone.get("rewritten") and standalone.get("question"):
        st.markdown(
            f"**Searched as:** {components.escape_md(str(standalone['question']))} "
            f"({components.escape_md(str(standalone.get('method') or ''))})"
        )
    groups = ", ".join(str(g) for g in trace.get("groups") or []) or "none"
    st.caption(
        components.escape_md(
            f"user {trace.get('user')} (groups: {groups}) \u00b7 as of {trace.get('as_of')} \u00b7 "
            f"{str(trace.get('created_at') or '')[:19].replace('T', ' ')} \u00b7 trace {trace.get('trace_id')}"
        )
    )


def _candidates(trace: dict[str, Any], key: str) -> None:
    frame = components.candidates_frame(trace)
    intents = "; ".join(f"{i['index']}: {i['text']}" for i in trace.get("intents") or [])
    st.caption(
        f"{_plural(len(frame), 'candidate')} after retrieval and rerank \u00b7 intents: "
        + components.escape_md(intents or "none")
    )
    first = ["document", "section", "page", "fate", "rerank rank", "rerank score"]
    st.dataframe(
        frame,
        hide_index=True,
        key=f"cand_{key}",
        column_order=[*first, *(c for c in frame.columns if c not in first)] if not frame.empty else None,
        column_config={
            "document": st.column_config.TextColumn(width=180),
            "fate": st.column_config.TextColumn(width=220),
            **{
                c: st.column_config.NumberColumn(format=SCORE_FORMAT)
                for c in ("rerank score", "fused score", "BM25 score", "dense score")
            },
        },
        placeholder="",
    )


def _evidence_scores(trace: dict[str, Any], key: str) -> None:
    frame = evidence_frame(trace)
    st.caption(passage_count(trace))
    if frame.empty:
        return
    st.dataframe(
        frame,
        hide_index=True,
        key=f"evidence_{key}",
        column_config=EVIDENCE_CONFIG,
        row_height=ROW_HEIGHT,
        placeholder="",
    )
    _rank_chart(trace, f"evidence_{key}")


def _table(frame: pd.DataFrame, empty: str, *, key: str, score: str | None = None) -> None:
    """A stage's table (blanks for missing values; ``score``: a column shown to three significant digits), or
    ``empty`` when it has no rows."""
    if frame.empty:
        st.caption(empty)
        return
    config = {score: st.column_config.NumberColumn(format=SCORE_FORMAT)} if score else None
    st.dataframe(frame, hide_index=True, key=key, column_config=config, placeholder="")


def render_trace(trace: dict[str, Any], *, key: str) -> None:
    """Every stage of one stored answer: the answer beside the final chunk order, then one tab per stage."""
    _header(trace)
    left, right = st.columns([2, 3], gap="large")
    with left:
        st.markdown("**Answer**")
        components.render_answer(trace, key=f"{key}_answer")
        st.caption(
            components.escape_md(
                f"model {trace.get('model')} \u00b7 reranker {trace.get('reranker')} \u00b7 generation "
                f"{trace.get('generation_mode')}"
            )
        )
    with right:
        render_order(trace, key=f"{key}_order")
    tabs = st.tabs(TABS)
    with tabs[0]:
        _evidence_scores(trace, key)
    with tabs[1]:
        _candidates(trace, key)
    with tabs[2]:
        _table(components.dropped_frame(trace), "Nothing was dropped.", key=f"drop_{key}")
    with tabs[3]:
        _table(
            components.bundles_frame(trace),
            "No bundles (the bot abstained before packing).",
            key=f"bund_{key}",
            score="score",
        )
    with tabs[4]:
        if not trace.get("hops"):
            st.caption("No follow-up retrieval ran for this answer (multi-hop off, or nothing retrieved).")
        else:
            for line in components.hop_stops(trace):
                st.caption(components.escape_md(line))
            st.dataframe(
                components.hops_frame(trace),
                hide_index=True,
                key=f"hops_{key}",
                column_config={"best score": st.column_config.NumberColumn(format=SCORE_FORMAT)},
                placeholder="",
            )
    with tabs[5]:
        prompt = trace.get("prompt") or {}
        st.caption(f"{_plural(int(prompt.get('tokens') or 0), 'prompt token')}")
        st.markdown("System")
        st.code(prompt.get("system") or "", language=None, wrap_lines=True)
        st.markdown("User")
        st.code(prompt.get("user") or "", language=None, wrap_lines=True)
    with tabs[6]:
        _table(
            components.citations_frame(trace), "The answer cites nothing.", key=f"cit_{key}", score="support"
        )
    with tabs[7]:
        frame = components.timings_frame(trace)
        total = (trace.get("timings_ms") or {}).get("total")
        if isinstance(total, int | float):
            st.caption(f"{total:,.0f} ms in all")
        if not frame.empty:
            st.bar_chart(frame, x="stage", y="ms", height=220, sort=False)
        st.markdown(budget_sentence(trace))
        with st.expander("Stage details (JSON)"):
            st.json(trace.get("stages") or [], expanded=False)
