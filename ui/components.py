"""Rendering helpers over a trace dict (the ``rag ask --json`` shape): the answer with its citations, the final
chunk order as the model saw it, and one table per stage of the query path (the trace explorer lays them out:
ui/trace_view.py).

Every text that came from a document or a model is escaped before it is shown: a passage is evidence, never
markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from rag.stages.citations import cited_ids
from rag.traces import status
from ui import answer_text

_MARKER = re.compile(r"\[\s*\d+\s*(?:[,;\u2013\u2014-]\s*\d+\s*)*\]")
CITATIONS_FAILED = "Some citations failed the check"
TIP_CHARS = 900  # a tooltip shows at most this much of a passage; the popover shows all of it

CSS = """
<style>
.rag-answer { line-height: 1.6; font-size: 1rem; }
.rag-answer p { margin: 0 0 .6em 0; }
.rag-cite { position: relative; display: inline-block; cursor: help; text-decoration: none; border-bottom: none;
  font-size: .8em; font-weight: 600; padding: 0 .25em; margin: 0 .05em; border-radius: .35em;
  background: rgba(28, 131, 225, .12); color: #1c6fd1; vertical-align: super; line-height: 1; outline: none; }
.rag-cite.bad { background: rgba(255, 43, 43, .14); color: #c21f1f; text-decoration: line-through; }
.rag-cite.weak { background: rgba(255, 164, 33, .18); color: #a15c00; }
.rag-cite .rag-tip { display: none; position: absolute; z-index: 1000; left: 0; top: 1.5em; width: 26rem;
  max-width: min(70vw, calc(100vw - 1rem)); max-height: 60vh; overflow-y: auto; padding: .6em .75em;
  border-radius: .5em; background: #ffffff; color: #262730;
  border: 1px solid #d6d6d9; box-shadow: 0 4px 16px rgba(0,0,0,.18); font-size: .85rem; font-weight: 400;
  line-height: 1.4; white-space: normal; text-decoration: none; vertical-align: baseline; text-align: left;
  overflow-wrap: anywhere; }
.rag-cite:hover .rag-tip, .rag-cite:focus .rag-tip, .rag-cite:focus-within .rag-tip { display: block; }
@media (max-width: 640px) {
  /* without the placing script: a pop-up as wide as the screen, below its line */
  .rag-cite .rag-tip { position: fixed; left: .5rem; right: .5rem; width: auto; max-width: none; top: auto;
    margin-top: 1.4em; max-height: 45vh; }
}
.rag-tip b { display: block; margin-bottom: .25em; }
.rag-tip i { display: block; color: #6b6d76; margin-bottom: .35em; font-style: normal; font-size: .8rem; }
.rag-badge { display: inline-block; font-size: .75rem; font-weight: 600; padding: .1em .55em; border-radius: .6em;
  margin-right: .35em; }
.rag-badge.abstain { background: #fff3d6; color: #8a5a00; }
.rag-badge.fail { background: #ffe0e0; color: #b01c1c; }
.rag-badge.ok { background: #dcf5e3; color: #1b7a3a; }
.rag-badge.unconfirmed { background: #eceff3; color: #3d4a5c; }
.rag-answer .rag-heading { color: #6b6d76; font-weight: 600; }
.rag-answer mark.rag-key { background: rgba(255, 214, 10, .32); color: inherit; padding: 0 .1em; border-radius: .2em; }
</style>
"""
# Places a [n] preview inside the window when it shows (hover, focus, tap): below its citation, or above it when
# it fits there and not below, shifted left to stay clear of the right edge, and never under Streamlit's header or
# the chat box; taller than the room it gets, it scrolls. Installed once per page; it reads no text of the page.
TIP_SCRIPT = """
<script>
(() => {
  if (window.ragTipsPlaced) return;
  window.ragTipsPlaced = true;
  const EDGE = 8;
  let shown = null;
  const place = (cite) => {
    const tip = cite.querySelector(".rag-tip");
    if (!tip) return;
    const doc = document.documentElement;
    const width = doc.clientWidth;
    // Streamlit's header at the top and the chat box at the bottom stay over the page: keep clear of both.
    const head = document.querySelector('[data-testid="stHeader"]');
    const headBottom = head ? head.getBoundingClientRect().bottom : 0;
    const ceiling = headBottom > 0 && headBottom < window.innerHeight / 3 ? headBottom : 0;
    const bar = document.querySelector('[data-testid="stBottom"]');
    const barTop = bar ? bar.getBoundingClientRect().top : window.innerHeight;
    const floor = barTop > window.innerHeight / 2 ? Math.min(barTop, window.innerHeight) : window.innerHeight;
    Object.assign(tip.style, {
      position: "fixed", left: "0px", top: "0px", right: "auto", bottom: "auto", margin: "0",
      boxSizing: "border-box", width: Math.min(416, width - 2 * EDGE) + "px", maxWidth: "none",
      maxHeight: "none",
    });
    const c = cite.getBoundingClientRect();
    const below = floor - EDGE - c.bottom;
    const above = c.top - ceiling - EDGE;
    let height = tip.getBoundingClientRect().height;
    let top;
    if (height <= below) top = c.bottom;
    else if (height <= above) top = c.top - height;
    else {
      const room = Math.max(below, above, 120);
      tip.style.maxHeight = Math.min(room, floor - ceiling - 2 * EDGE) + "px";
      height = tip.getBoundingClientRect().height;
      top = below >= above ? c.bottom : c.top - height;
      top = Math.min(Math.max(top, ceiling + EDGE), floor - EDGE - height);
    }
    const tipWidth = tip.getBoundingClientRect().width || Math.min(416, width - 2 * EDGE);
    const left = Math.min(Math.max(c.left, EDGE), width - EDGE - tipWidth);
    tip.style.left = left + "px";
    tip.style.top = top + "px";
    shown = cite;
  };
  const show = (event) => {
    const cite = event.target && event.target.closest ? event.target.closest(".rag-cite") : null;
    if (!cite || cite === shown) return;
    place(cite);
    requestAnimationFrame(() => place(cite));  // once the hover or focus style has shown it
  };
  for (const name of ["mouseover", "focusin", "click"]) document.addEventListener(name, show, true);
  const again = () => { if (shown && shown.isConnected) place(shown); };
  window.addEventListener("scroll", again, true);
  window.addEventListener("resize", again);
  document.addEventListener("mouseout", (event) => {
    if (shown && !shown.contains(event.relatedTarget)) shown = null;
  }, true);
})();
</script>
"""


def show_answer_html(body: str) -> None:
    """Answer HTML (``badges_html`` / ``answer_html``, every text escaped) with the shared CSS and the script that
    keeps each [n] preview inside the window."""
    st.html(CSS + body + TIP_SCRIPT, unsafe_allow_javascript=True)


# ----------------------------------------------------------------------------- small helpers
def evidence_by_n(trace: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(e["n"]): e for e in trace.get("evidence") or []}


def passage_label(e: dict[str, Any]) -> str:
    """'Customer Refunds and Returns Policy, p. 2, Returns > Full refunds'."""
    parts = [str(e.get("title") or e.get("doc_id") or "?")]
    if e.get("page"):
        end = e.get("page_end")
        parts.append(f"pp. {e['page']}-{end}" if end and end != e["page"] else f"p. {e['page']}")
    section = str(e.get("section") or "")
    if section and section != e.get("title"):
        parts.append(section)
    return ", ".join(parts)


def citation_verdicts(trace: dict[str, Any]) -> dict[int, str]:
    """Per cited passage id: 'ok', 'unsupported' (exists, does not support its sentence) or 'invalid'."""
    out: dict[int, str] = {}
    for c in trace.get("citations") or []:
        n = int(c["n"])
        verdict = "invalid" if not c.get("valid") else ("ok" if c.get("supported") else "unsupported")
        rank = {"ok": 0, "unsupported": 1, "invalid": 2}
        if rank[verdict] >= rank.get(out.get(n, "ok"), 0):
            out[n] = verdict
    return out


def failed_citations(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return status.failed_citations(trace)


def _cite_html(n: int, e: dict[str, Any] | None, verdict: str) -> str:
    if e is None:
        tip = f"<b>[{n}] does not exist</b>The answer cites a passage the model was never given."
        return f'<span class="rag-cite bad" tabindex="0" role="note" aria-label="[{n}] does not exist">[{n}]<span class="rag-tip">{tip}</span></span>'
    text = str(e.get("text") or "")
    short = text if len(text) <= TIP_CHARS else text[:TIP_CHARS].rsplit(" ", 1)[0] + " \u2026"
    label = passage_label(e)
    note = {"ok": "", "unsupported": " \u2014 does not support this sentence", "invalid": " \u2014 invalid"}[
        verdict
    ]
    tip = (
        f"<b>[{n}] {html.escape(str(e.get('title') or ''))}{html.escape(note)}</b>"
        f"<i>{html.escape(label)}</i>{_tip_text(short)}"
    )
    cls = {"ok": "", "unsupported": " weak", "invalid": " bad"}[verdict]
    aria = html.escape(f"[{n}] {label}: {short}", quote=True)
    return f'<span class="rag-cite{cls}" tabindex="0" role="note" aria-label="{aria}">[{n}]<span class="rag-tip">{tip}</span></span>'


def _tip_text(text: str) -> str:
    return "<br>".join(html.escape(line) for line in text.splitlines() if line.strip())


def excerpt_marks(trace: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the headings the answer's excerpts are shown under, the sentences that carried the choice), from the trace's
    ``excerpts`` (an extractive answer's points; none for a model's answer or an older trace)."""
    excerpts = [x for x in trace.get("excerpts") or [] if isinstance(x, dict)]
    headings = [str(x.get("heading") or "") for x in excerpts if x.get("heading")]
    keys = [str(k) for x in excerpts for k in x.get("key") or [] if str(k).strip()]
    return list(dict.fromkeys(headings)), list(dict.fromkeys(keys))


def _marked(text: str, headings: Sequence[str], keys: Sequence[str]) -> str:
    """``text`` escaped, with each key sentence in it highlighted and a line's leading "<heading> — " set apart.
    Every piece is escaped on its own: a sentence or heading is never markup, whatever it holds."""
    out: list[str] = []
    for k, line in enumerate(text.split("\n")):
        out.append("<br>" if k else "")
        head = next((h for h in headings if line.startswith(f"{h} \u2014 ")), None)
        if head is not None:
            out.append(f'<span class="rag-heading">{html.escape(head)}</span> \u2014 ')
            line = line[len(head) + 3 :]
        spans = sorted(
            {(m.start(), m.end()) for key in keys for m in re.finditer(re.escape(key), line)},
            key=lambda span: (span[0], -span[1]),
        )
        at = 0
        for start, end in spans:
            if start < at:  # overlapping: the longer one, already marked, covers it
                continue
            out.append(html.escape(line[at:start]))
            out.append(f'<mark class="rag-key">{html.escape(line[start:end])}</mark>')
            at = end
        out.append(html.escape(line[at:]))
    return "".join(out)


def answer_html(trace: dict[str, Any]) -> str:
    """The answer as HTML: text escaped, each [n] a hover/click tooltip with the cited passage; in an extractive
    answer, each excerpt's heading set apart and the sentences that carried the choice highlighted (the rest of
    the excerpt is what their meaning depends on)."""
    answer = str(trace.get("answer") or "")
    ev = evidence_by_n(trace)
    verdicts = citation_verdicts(trace)
    headings, keys = excerpt_marks(trace)
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", answer):
        if not paragraph.strip():
            continue
        pieces: list[str] = []
        last = 0
        for m in _MARKER.finditer(paragraph):
            pieces.append(_marked(paragraph[last : m.start()], headings, keys))
            pieces.append(
                "".join(
                    _cite_html(n, ev.get(n), verdicts.get(n, "ok" if n in ev else "invalid"))
                    for n in cited_ids(m.group(0))
                )
            )
            last = m.end()
        pieces.append(_marked(paragraph[last:], headings, keys))
        paragraphs.append("".join(pieces))
    return '<div class="rag-answer">' + "".join(f"<p>{p}</p>" for p in paragraphs) + "</div>"


def excerpt_caption(trace: dict[str, Any]) -> str:
    """Where each point of an extractive answer was quoted from, in words (Markdown-escaped): "Quoted from [10]
    General principles, characters 120-290 of the passage, the highlighted sentence chosen by the reader"; "" for
    an answer without excerpts."""
    parts = []
    for x in trace.get("excerpts") or []:
        chosen = len(x.get("key") or [])
        what = f"{chosen} highlighted sentence{'s' if chosen != 1 else ''}" if chosen else "context only"
        parts.append(
            f"[{x.get('n')}] {escape_md(str(x.get('heading') or ''))} (characters {x.get('start')}\u2013"
            f"{x.get('end')} of the passage; {what})"
        )
    return ("Quoted from " + "; ".join(parts) + ".") if parts else ""


def show_failed_citations(trace: dict[str, Any]) -> None:
    """One error line naming every citation that failed the check and the sentence it was meant to support."""
    failed = failed_citations(trace)
    if failed:
        st.error(
            f"{CITATIONS_FAILED}: "
            + "; ".join(
                f"[{c['n']}] {'does not exist' if not c.get('valid') else 'does not support'}: "
                f"\u201c{escape_md(str(c.get('sentence') or '')[:120])}\u201d"
                for c in failed
            ),
            icon=":material/report:",
        )


def citations_checked(trace: dict[str, Any]) -> bool:
    """The one condition for the green "Citations checked" badge (``rag.traces.status.citations_checked``)."""
    return status.citations_checked(trace)


ABSTAINED = answer_text.ABSTAINED


def badges_html(trace: dict[str, Any], *, abstained: str = ABSTAINED) -> str:
    """The answer's label, one per status (``ui.answer_text.status_label``): what happened, in words.
    ``abstained``: the words for a refusal (the chat says it to employees its own way)."""
    label = answer_text.status_label(trace, abstained=abstained)
    if label is None:
        return ""
    title = f' title="{html.escape(label.title)}"' if label.title else ""
    return f'<span class="rag-badge {label.kind}"{title}>{html.escape(label.text)}</span>'


def unconfirmed_intents(trace: dict[str, Any]) -> list[str]:
    """The parts of the question whose quoted sentence the reader did not vouch for (``supported`` False)."""
    return status.unconfirmed_parts(trace)


# ----------------------------------------------------------------------------- the answer
def render_answer(trace: dict[str, Any], *, key: str) -> None:
    """The answer with inline citations (hover or click [n]), status badges and one popover per passage."""
    badges = badges_html(trace)
    show_answer_html((f"<div>{badges}</div>" if badges else "") + answer_html(trace))
    if trace.get("abstained"):
        st.warning(
            f"Abstained: {escape_md(str(trace.get('abstain_reason') or 'the evidence does not answer the question.'))}",
            icon=":material/help:",
        )
    show_failed_citations(trace)
    if trace.get("error"):
        st.warning(
            f"The language model failed, so the answer quotes the evidence instead: {escape_md(str(trace['error']))}",
            icon=":material/warning:",
        )
    cited = [
        n for n in dict.fromkeys(c["n"] for c in trace.get("citations") or []) if n in evidence_by_n(trace)
    ]
    if cited:
        ev = evidence_by_n(trace)
        cols = st.columns(min(len(cited), 4))
        for i, n in enumerate(cited):
            e = ev[n]
            label = f"[{n}] {escape_md(str(e.get('title') or '')[:28])}"
            with cols[i % len(cols)].popover(label, key=f"pop_{key}_{n}"):
                render_passage(e)


def render_passage(e: dict[str, Any]) -> None:
    st.markdown(f"**[{e['n']}] {escape_md(str(e.get('title') or ''))}**")
    st.caption(
        f"{escape_md(passage_label(e))} \u00b7 document `{e.get('doc_id')}` \u00b7 chunk `{e.get('chunk_id')}`"
    )
    st.text(str(e.get("text") or ""))


# Streamlit's Markdown links bare URLs, www. names and e-mail addresses, and draws :emoji: and :material/icon:
# shortcodes, after backslash escapes are resolved, so no escape stops them: an invisible word joiner (U+2060)
# after a colon, inside "www." and before an "@" keeps the text as written while no such pattern matches.
_JOINER = "\u2060"
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|$<>~&=])")
_MD_AUTOLINK = re.compile(r":(?=[^\s])|(?<=[\w.+-])@|(?i:\bwww)(?=\\\.)")


def escape_md(text: str) -> str:
    """Escape Markdown so user and document text shows as written: no emphasis, link, image, HTML, heading,
    entity, autolinked URL or e-mail address, or shortcode."""
    escaped = _MD_SPECIAL.sub(r"\\\1", text)
    return _MD_AUTOLINK.sub(lambda m: m.group(0) + _JOINER if m.group(0) != "@" else _JOINER + "@", escaped)


# ----------------------------------------------------------------------------- the final chunk order
ORDER_COLUMNS = [
    "position",
    "rerank rank",
    "rerank score",
    "lexical rank",
    "dense rank",
    "bundle",
    "document",
    "page",
    "section",
    "cited",
]


def chunk_order_frame(trace: dict[str, Any]) -> pd.DataFrame:
    """Positions 1..n as the model saw them, with the ranks and scores that put each passage there."""
    rows = []
    for e in trace.get("evidence") or []:
        rows.append(
            {
                "position": int(e["n"]),
                "rerank rank": e.get("rerank_rank"),
                "rerank score": e.get("rerank_score"),
                "lexical rank": e.get("bm25_rank"),
                "dense rank": e.get("dense_rank"),
                "bundle": e.get("bundle"),
                "document": e.get("title") or e.get("doc_id"),
                "page": e.get("page"),
                "section": e.get("section"),
                "cited": bool(e.get("cited")),
                "added by": e.get("added_by") or "",
                "chunk id": e.get("chunk_id"),
            }
        )
    frame = pd.DataFrame(rows, columns=[*ORDER_COLUMNS, "added by", "chunk id"])
    for col in ("rerank rank", "lexical rank", "dense rank", "page", "bundle"):
        frame[col] = pd.array(frame[col], dtype="Int64")
    frame["rerank score"] = frame["rerank score"].astype("Float64")
    return frame


def chunk_order_chart_spec(frame: pd.DataFrame, *, title: str | None = None) -> dict[str, Any]:
    """Bars of rerank rank by position, best rank at the top: edge packing hangs as a V (best at both ends)."""
    spec: dict[str, Any] = {
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            # Every position gets a slot, also one whose passage has no rank of its own (no bar there).
            "x": {
                "field": "position",
                "type": "ordinal",
                "title": "position in prompt",
                "axis": {"labelAngle": 0},
                "scale": {"domain": [int(p) for p in frame["position"]]},
            },
            "y": {
                "field": "rerank rank",
                "type": "quantitative",
                "title": "rank after rerank",
                "scale": {"reverse": True, "zero": True},
                "axis": {"tickMinStep": 1},
            },
            "color": {
                "field": "cited",
                "type": "nominal",
                "title": "cited",
                "scale": {"domain": [True, False], "range": ["#1c83e1", "#a3b8cc"]},
            },
            "tooltip": [
                {"field": f, "type": "nominal" if f in ("document", "section", "cited") else "quantitative"}
                for f in ("position", "rerank rank", "rerank score", "document", "section", "cited")
            ],
        },
        "height": 180,
    }
    if title:
        spec["title"] = title
    return spec


def chart_data(frame: pd.DataFrame) -> pd.DataFrame:
    data = frame[["position", "rerank rank", "rerank score", "document", "section", "cited"]].copy()
    # Vega wants plain floats; a passage added by bundling has no rank of its own and shows no bar.
    data["rerank rank"] = data["rerank rank"].astype("float64")
    data["rerank score"] = data["rerank score"].astype("float64")
    return data


def shape_note(ranks: Sequence[int | None]) -> str:
    """Where the best-ranked passage sits in the prompt, as it is: first, last, or how far in from the nearer end.
    ``ranks`` by position (None = no rank of its own). Only the first and the last place are edges: position 3
    of 13 is not "near an edge" to a model that reads the middle worst."""
    ranked = [r for r in ranks if r is not None]
    best = min(ranked)
    where, n = ranks.index(best), len(ranks)
    if where == 0:
        return f"Best passage (rank {best}) is first of {n} in the prompt, where models use context best."
    if where == n - 1:
        return f"Best passage (rank {best}) is last of {n} in the prompt, where models use context best."
    inside = min(where, n - 1 - where)
    end = "start" if where <= n - 1 - where else "end"
    return (
        f"Best passage (rank {best}) is at position {where + 1} of {n}, {inside} "
        f"{'passage' if inside == 1 else 'passages'} in from the {end}: not at an edge, where models use context best."
    )


# ----------------------------------------------------------------------------- trace stages
def _title_of(trace: dict[str, Any]) -> dict[str, str]:
    out = {}
    for c in [*(trace.get("candidates") or []), *(trace.get("evidence") or [])]:
        out[c["chunk_id"]] = passage_label(c)
    return out


def candidates_frame(trace: dict[str, Any]) -> pd.DataFrame:
    """Every candidate with all its scores and what became of it."""
    final = {e["chunk_id"]: e["n"] for e in trace.get("evidence") or []}
    dropped = {d["chunk_id"]: f"{d['stage']}: {d['reason']}" for d in trace.get("dropped") or []}
    # the budget fills in section-context order: a passage a better one of its section lifted says so
    raised = {
        r["chunk_id"]: r
        for s in trace.get("stages") or []
        if s.get("name") == "context"
        for r in (s.get("detail") or {}).get("raised") or []
    }
    rows = []
    for c in trace.get("candidates") or []:
        cid = c["chunk_id"]
        if cid in final:
            fate = f"in prompt at position {final[cid]}"
        elif cid in dropped:
            fate = f"dropped ({dropped[cid]})"
        else:
            fate = "not selected"
        if cid in raised:
            fate += f"; raised by its section: budget order {raised[cid]['from']} -> {raised[cid]['to']}"
        rows.append(
            {
                "rerank rank": c.get("rerank_rank"),
                "rerank score": c.get("rerank_score"),
                "fused rank": c.get("fused_rank"),
                "fused score": c.get("fused_score"),
                "BM25 rank": c.get("bm25_rank"),
                "BM25 score": c.get("bm25_score"),
                "dense rank": c.get("dense_rank"),
                "dense score": c.get("dense_score"),
                "intents": ", ".join(str(i) for i in c.get("intents") or []),
                "fate": fate,
                "document": c.get("title"),
                "page": c.get("page"),
                "section": c.get("section"),
                "chunk id": cid,
            }
        )
    frame = pd.DataFrame(rows)
    for col in ("rerank rank", "fused rank", "BM25 rank", "dense rank", "page"):
        if col in frame:
            frame[col] = pd.array(frame[col], dtype="Int64")
    return frame


def dropped_frame(trace: dict[str, Any]) -> pd.DataFrame:
    titles = _title_of(trace)
    return pd.DataFrame(
        [
            {
                "stage": d.get("stage"),
                "reason": d.get("reason"),
                "passage": titles.get(d["chunk_id"], ""),
                "chunk id": d["chunk_id"],
            }
            for d in trace.get("dropped") or []
        ],
        columns=["stage", "reason", "passage", "chunk id"],
    )


def bundles_frame(trace: dict[str, Any]) -> pd.DataFrame:
    """One row per bundle: its members in document order, and where each of them is in the prompt (edge packing
    puts the best passage of an edge bundle at the edge, so a member's place is its own, not its bundle's)."""
    titles = _title_of(trace)
    position = {e["chunk_id"]: int(e["n"]) for e in trace.get("evidence") or []}
    return pd.DataFrame(
        [
            {
                "bundle": b.get("bundle_id"),
                "reason": b.get("reason"),
                "score": b.get("score"),
                "members": len(b.get("chunk_ids") or []),
                "positions": ", ".join(
                    f"[{position[c]}]" if c in position else "-" for c in b.get("chunk_ids") or []
                ),
                "passages": " | ".join(titles.get(c, c) for c in b.get("chunk_ids") or []),
            }
            for b in trace.get("bundles") or []
        ],
        columns=["bundle", "reason", "score", "members", "positions", "passages"],
    )


HOP_COLUMNS = ["hop", "term", "follow-up query", "from", "found", "best score", "linked"]


def hops_frame(trace: dict[str, Any]) -> pd.DataFrame:
    """One row per follow-up query: the term it followed, from which passage, what it found and linked."""
    titles = _title_of(trace)
    rows = []
    for hop in trace.get("hops") or []:
        linked = {(lk.get("from"), lk.get("term")): lk for lk in hop.get("linked") or []}
        for q in hop.get("queries") or []:
            link = linked.get((q.get("from"), q.get("term")))
            rows.append(
                {
                    "hop": hop.get("hop"),
                    "term": q.get("term"),
                    "follow-up query": q.get("query"),
                    "from": titles.get(q.get("from") or "", q.get("from")),
                    "found": " | ".join(titles.get(c, c) for c in q.get("found") or []),
                    "best score": q.get("best_score"),
                    "linked": (
                        f"{titles.get(link['chunk_id'], link['chunk_id'])} "
                        f"({'moved behind its source' if link.get('moved') else 'already in the evidence'})"
                        if link
                        else ""
                    ),
                }
            )
    return pd.DataFrame(rows, columns=HOP_COLUMNS)


def hop_stops(trace: dict[str, Any]) -> list[str]:
    """Why each hop stopped, as one line per hop."""
    return [
        f"Hop {h.get('hop')}: {h.get('stopped') or 'linked passages; next hop ran'}"
        for h in trace.get("hops") or []
    ]


def citations_frame(trace: dict[str, Any]) -> pd.DataFrame:
    titles = _title_of(trace)
    rows = []
    for c in trace.get("citations") or []:
        verdict = (
            "ok"
            if c.get("valid") and c.get("supported")
            else ("does not exist" if not c.get("valid") else "does not support the sentence")
        )
        rows.append(
            {
                "n": c["n"],
                "verdict": verdict,
                "support": c.get("support_score"),
                "sentence": c.get("sentence"),
                "passage": titles.get(c.get("chunk_id") or "", ""),
            }
        )
    return pd.DataFrame(rows, columns=["n", "verdict", "support", "sentence", "passage"])


def timings_frame(trace: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"stage": s["name"], "ms": s["ms"]} for s in trace.get("stages") or []], columns=["stage", "ms"]
    )
