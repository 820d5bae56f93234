"""The chat's first screen: the policies the signed-in user can ask about, grouped by tag, and a few example
questions drawn from those policies' own headings, each asked when clicked.

A policy is listed when retrieval would search it for this user today: ``SearchFilter.allows`` (the Python twin
of the store-side filter: the user's groups and the validity dates) passes one of its chunks. Expired and
not-yet-effective documents, and documents of other groups, are neither listed nor used for examples.
Titles, tags and headings come from documents and are shown as text, never as markup.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import streamlit as st

from rag.errors import RagError
from rag.text import bm25_token_set
from rag.types import Chunk, Principal, SearchFilter
from ui import components, services

UNTAGGED = "other"
EXAMPLES = 4
CACHED = "chat_first_screen"  # (index generation, user, groups, day) -> groups and examples, per session
_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z]\.)\s+")  # "2.1 ", "3. ", "A. "


@dataclass(frozen=True)
class Policy:
    """A document the user can ask about, with the headings of its sections in document order."""

    doc_id: str
    title: str
    label: str  # the title, with the file name when another listed policy has the same title
    tags: tuple[str, ...]
    headings: tuple[str, ...]


def _heading(section: str, title: str) -> str:
    """The last part of a section path without its numbering ("Leave Policy > 2. Annual leave" -> "Annual leave");
    empty for the document's own title (the preamble before the first heading)."""
    leaf = section.split(" > ")[-1].strip()
    leaf = _NUMBERING.sub("", leaf).strip()
    return "" if leaf.casefold() == title.strip().casefold() else leaf


def _file_name(doc_id: str, doc: dict[str, Any]) -> str:
    return Path(str(doc.get("source") or "")).name or doc_id


def askable_policies(
    documents: dict[str, dict[str, Any]],
    chunks_of: Callable[[str], Sequence[Chunk]],
    principal: Principal,
    today: date,
) -> list[Policy]:
    """The documents retrieval would search for ``principal`` on ``today``, sorted by label.

    ``documents`` is the index manifest (``IndexReader.documents()``), ``chunks_of`` the reader's
    ``doc_chunks``. Two listed documents with the same title are told apart by their file names.
    """
    allowed = SearchFilter(principal, today)
    found: list[tuple[str, dict[str, Any], Sequence[Chunk]]] = []
    for doc_id, doc in documents.items():
        chunks = chunks_of(doc_id)
        if any(allowed.allows(c) for c in chunks):
            found.append((doc_id, doc, chunks))
    titles = Counter(" ".join(str(doc.get("title") or d).split()).casefold() for d, doc, _ in found)
    policies = []
    for doc_id, doc, chunks in found:
        title = str(doc.get("title") or doc_id)
        shared = titles[" ".join(title.split()).casefold()] > 1
        headings = [_heading(c.section, title) for c in chunks]
        policies.append(
            Policy(
                doc_id=doc_id,
                title=title,
                label=f"{title} ({_file_name(doc_id, doc)})" if shared else title,
                tags=tuple(str(t) for t in doc.get("tags") or ()),
                headings=tuple(dict.fromkeys(h for h in headings if h)),
            )
        )
    return sorted(policies, key=lambda p: (p.label.casefold(), p.doc_id))


def group_by_tag(policies: Sequence[Policy]) -> list[tuple[str, list[Policy]]]:
    """Each policy under the one of its tags that most listed policies share (ties: the policy's own first tag),
    so related policies meet under one heading and no title is listed twice. Untagged ones go under "other".

    Groups come largest first, then by tag; titles within a group keep the order of ``policies``.
    """
    shared = Counter(t for p in policies for t in dict.fromkeys(p.tags))
    groups: dict[str, list[Policy]] = {}
    for p in policies:
        tag = max(p.tags, key=lambda t: (shared[t], -p.tags.index(t))) if p.tags else UNTAGGED
        groups.setdefault(tag, []).append(p)
    return sorted(groups.items(), key=lambda g: (-len(g[1]), g[0] == UNTAGGED, g[0].casefold()))


def _distinctiveness(policies: Sequence[Policy]) -> Callable[[str], float]:
    """A heading's mean inverse document frequency over the listed policies' headings: "Contact" and "Purpose",
    which every policy has, score near 0; a heading only one policy has scores highest."""
    df = Counter(t for p in policies for t in set().union(*map(bm25_token_set, p.headings)))
    n = len(policies)

    def score(heading: str) -> float:
        tokens = bm25_token_set(heading)
        if not tokens:
            return 0.0
        return round(sum(math.log(n / df[t]) for t in tokens) / len(tokens), 9)

    return score


def example_question(policy: Policy, heading: str) -> str:
    """A question about one section of a policy; a heading that is itself a question is asked as written."""
    if heading.endswith("?"):
        return heading
    # Lower-case the first letter unless the first word is an acronym or a code ("SEV1", "EXP-7").
    first = heading.split()[0]
    topic = (
        heading
        if first[1:2].isupper() or any(ch.isdigit() for ch in first)
        else heading[0].lower() + heading[1:]
    )
    article = "" if policy.title.lower().startswith("the ") else "the "
    return f"What does {article}{policy.title} say about {topic}?"


def example_questions(groups: Sequence[tuple[str, Sequence[Policy]]], n: int = EXAMPLES) -> list[str]:
    """Up to ``n`` questions, one per tag group (largest groups first), each about the most distinctive section
    heading of that group's policies (ties: the earlier policy, then the earlier section)."""
    policies = [p for _, group in groups for p in group]
    score = _distinctiveness(policies)
    questions: list[str] = []
    for _, group in groups:
        best: tuple[float, str] | None = None
        for p in group:
            for h in p.headings:
                s = score(h)
                if s > 0 and (best is None or s > best[0]):
                    best = (s, example_question(p, h))
        if best is not None and best[1] not in questions:
            questions.append(best[1])
        if len(questions) == n:
            break
    return questions


# ----------------------------------------------------------------------------- rendering
CSS = """
<style>
.rag-policies { display: grid; grid-template-columns: repeat(auto-fill, minmax(15rem, 1fr)); gap: .6rem .9rem; }
.rag-policies section { border: 1px solid rgba(49, 51, 63, .15); border-radius: .5rem; padding: .45rem .7rem; }
.rag-policies h4 { margin: 0 0 .2rem 0; padding: 0; font-size: .8rem; font-weight: 600; letter-spacing: .02em;
  text-transform: uppercase; color: #6b6d76; }
.rag-policies ul { margin: 0; padding-left: 1.1rem; }
.rag-policies li { margin: 0; font-size: .92rem; line-height: 1.45; }
</style>
"""


EXAMPLE_KEY = "chat_example_"
# An example's button wraps its question instead of cutting it off with an ellipsis (420 px screens).
EXAMPLE_CSS = f"""
<style>
[class*="st-key-{EXAMPLE_KEY}"] button {{ height: auto; text-align: left; }}
[class*="st-key-{EXAMPLE_KEY}"] button p {{ white-space: normal; overflow: visible; text-overflow: clip; }}
</style>
"""


def policies_html(groups: Sequence[tuple[str, Sequence[Policy]]]) -> str:
    """The grouped list as escaped HTML: a card per tag, a bullet per policy."""
    cards = []
    for tag, group in groups:
        items = "".join(f"<li>{html.escape(p.label)}</li>" for p in group)
        cards.append(
            f'<section><h4>{html.escape(tag)}</h4><ul class="rag-policy-list">{items}</ul></section>'
        )
    return CSS + '<div class="rag-policies" data-testid="ragPolicies">' + "".join(cards) + "</div>"


def render(
    groups: Sequence[tuple[str, Sequence[Policy]]], examples: Sequence[str], ask: Callable[[str], None]
) -> None:
    """The first screen: the grouped policy list, then example questions (clicking one calls ``ask`` with it)."""
    if not groups:
        st.info(
            "There are no policies you can ask about yet: none of the indexed documents is open to your groups "
            "and in force today.",
            icon=":material/info:",
        )
        return
    count = sum(len(g) for _, g in groups)
    st.markdown(f"**Policies you can ask about** ({count})")
    st.html(policies_html(groups))
    if examples:  # last, next to the chat box (a narrow screen scrolls to the box)
        st.markdown("**Try asking**")
        st.html(EXAMPLE_CSS)
        with st.container(horizontal=True, gap="small"):  # as many to a row as fit, in order
            for i, question in enumerate(examples):
                st.button(
                    components.escape_md(question),
                    key=f"{EXAMPLE_KEY}{i}",
                    icon=":material/help:",
                    on_click=ask,
                    args=(question,),
                )


def show(principal: Principal, ask: Callable[[str], None]) -> None:
    """The first screen for ``principal``, worked out once per index generation, user and day in this session.
    Nothing when the index cannot be read (the chat page reports why when it loads the pipeline)."""
    settings = services.get_settings()
    try:
        reader = services.get_reader(settings)
    except RagError:
        return
    today = date.today()
    key = (reader.generation.name, principal.user, tuple(sorted(principal.groups)), today.isoformat())
    cached = st.session_state.get(CACHED)
    if not cached or cached[0] != key:
        groups = group_by_tag(askable_policies(reader.documents(), reader.doc_chunks, principal, today))
        cached = (key, groups, example_questions(groups))
        st.session_state[CACHED] = cached
    render(cached[1], cached[2], ask)


# ----------------------------------------------------------------------------- the question's length
# A live "n / limit" counter under the chat box. The box itself takes any length (a maximum there would refuse a
# longer paste outright, and the text would be gone); the page refuses a question over the limit and puts it
# back into the box. The counter only reads the box's length and writes numbers: it shows nothing the user typed.
_COUNTER_JS = """
export default function ({ data }) {
  const limit = data.limit;
  const fmt = (n) => n.toLocaleString("en-US");
  const counter = document.createElement("div");
  counter.setAttribute("data-testid", "ragCharCounter");
  counter.setAttribute("aria-live", "polite");
  Object.assign(counter.style, {
    textAlign: "right", fontSize: "0.8rem", lineHeight: "1.2", padding: "0.15rem 0.5rem 0 0",
    fontVariantNumeric: "tabular-nums",
  });
  const update = () => {
    const box = document.querySelector('[data-testid="stChatInputTextArea"]');
    const input = box && box.closest('[data-testid="stChatInput"]');
    if (!input) return;
    if (counter.previousElementSibling !== input) input.after(counter);
    const n = box.value.trim().length;  // the page counts the question without surrounding blanks
    const over = n > limit;
    counter.hidden = n === 0;
    counter.style.color = over ? "#c21f1f" : "rgba(49, 51, 63, 0.6)";
    counter.style.fontWeight = over ? "600" : "400";
    counter.textContent = over
      ? `${fmt(n)} / ${fmt(limit)} characters: ${fmt(n - limit)} too many to send`
      : `${fmt(n)} / ${fmt(limit)} characters`;
  };
  document.addEventListener("input", update, true);
  const timer = setInterval(update, 300);  // also after the page puts a refused question back
  update();
  return () => {
    document.removeEventListener("input", update, true);
    clearInterval(timer);
    counter.remove();
  };
}
"""
_counter = st.components.v2.component("rag_char_counter", js=_COUNTER_JS)


def char_counter(limit: int) -> None:
    """Mount the live counter for the chat box (an element of no height)."""
    _counter(key="chat_char_counter", data={"limit": limit})
