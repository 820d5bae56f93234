"""An answer as a chat tool shows it, and a chat tool's conversation as the query path reads it.

The reply text is the answer with its [n] citations, then, under a rule (``---``), what the chat page shows
around it in words (ui/answer_text.py): what a follow-up was searched for, the answer's label, where to ask
after a refusal, a failed language model; and a Sources block, one line per cited passage with its title,
page and section, the sentence the answer rests on, and (as a Markdown link on the title) the address that opens
the source at that page for this asker. A plain chat front end shows all of it as text.

A conversation comes back with those replies in it. :func:`conversation` takes each earlier assistant message
back to the answer alone (the rule and what follows it are this module's own, and are recognised line by line),
so the history a follow-up is rewritten with is the one the chat page would have kept
(``rag.stages.memory.select_history`` does the rest, as for the chat page).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rag.stages.citations import is_sources_line
from rag.traces import status
from ui import answer_text
from ui.api.errors import ApiError
from ui.api.schemas import ChatMessage, RagAnswer, Source
from ui.components import passage_label

RULE = "---"
SOURCES = "Sources:"
SEARCHED = "Searched for: "
LLM_FAILED = "The language model failed, so this answer quotes the policies directly: "
QUOTE_CHARS = 300
_SOURCE_LINE = re.compile(r"^\[\d+\] ")
_COUNT_LABEL = re.compile(r"^\d+ (?:citation|claim)\(s\) ")
# The first words of every note line a reply's footer may hold (labels from ui/answer_text.py).
_NOTE_STARTS = (
    SEARCHED,
    LLM_FAILED,
    answer_text.CHAT_ABSTAINED,
    "Citations checked",
    "Answers only part of the question",
    "Quoted from the sources",
)


# ----------------------------------------------------------------------------- the reply
def display_answer(trace: Mapping[str, Any]) -> str:
    """The answer without the id list it may end with ("Sources: [1], [2]"): the reply lists its sources
    itself."""
    lines = str(trace.get("answer") or "").rstrip().splitlines()
    while lines and is_sources_line(lines[-1]):
        lines.pop()
    return "\n".join(lines).rstrip()


def _quote(trace: Mapping[str, Any], n: int) -> str | None:
    """The evidence sentence the answer's claims citing [n] rest on (the first one)."""
    for claim in trace.get("claims") or []:
        if claim.get("n") == n and claim.get("evidence_sentence"):
            text = " ".join(str(claim["evidence_sentence"]).split())
            return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rsplit(" ", 1)[0] + "\u2026"
    return None


def _locator(e: Mapping[str, Any]) -> str:
    """Where in the document: the passage label (ui/components.py) without the title, which it and the section
    path both start with ("p. 2, 4. Refund exceptions > 4.2 Gift cards")."""
    title = str(e.get("title") or e.get("doc_id") or "?")
    section = str(e.get("section") or "")
    if section.startswith(title + " > "):
        section = section[len(title) + 3 :]
    label = passage_label({**e, "section": section})
    return label[len(title) + 2 :] if label.startswith(title + ", ") else ""


def sources(trace: Mapping[str, Any], link: Callable[[str, int | None], str | None]) -> list[Source]:
    """The cited passages, in the order the answer first cites them (none for a refusal). ``link(doc_id,
    page)``: the address that opens the document at the page for this asker, or None (a document the asker may
    not read gets none: it cannot be cited for them anyway, retrieval filters it out first)."""
    verdicts: dict[int, bool] = {}
    for c in trace.get("citations") or []:  # a passage cited for one sentence it does not support is marked
        verdicts[int(c["n"])] = verdicts.get(int(c["n"]), True) and bool(
            c.get("valid") and c.get("supported")
        )
    out = []
    for e in answer_text.cited_evidence(trace):
        n = int(e["n"])
        out.append(
            Source(
                n=n,
                title=str(e.get("title") or e.get("doc_id") or ""),
                doc_id=str(e["doc_id"]),
                page=e.get("page"),
                page_end=e.get("page_end"),
                section=str(e.get("section") or ""),
                locator=_locator(e),
                quote=_quote(trace, n),
                passage=str(e.get("text") or ""),
                url=link(str(e["doc_id"]), e.get("page")),
                chunk_id=str(e["chunk_id"]),
                supported=verdicts.get(n, True),
            )
        )
    return out


def _source_line(s: Source) -> str:
    title = s.title.replace("[", "(").replace("]", ")")
    head = f"[{title}]({s.url})" if s.url else title
    where = f", {s.locator}" if s.locator else ""
    quote = f": \u201c{s.quote}\u201d" if s.quote else ""
    return f"[{s.n}] {head}{where}{quote}"


def notes(trace: Mapping[str, Any], contact: str | None) -> list[str]:
    """What the chat page shows around the answer, as lines of text: what a follow-up was searched for, the
    label (with where to ask after a refusal), a failed language model."""
    out = []
    searched = answer_text.searched_for(trace)
    if searched:
        out.append(SEARCHED + " ".join(searched.split()))
    label = answer_text.status_label(trace, abstained=answer_text.CHAT_ABSTAINED)
    if label is not None:
        advice = f" {answer_text.refusal_advice(contact)}" if trace.get("abstained") and contact else ""
        out.append(f"{label.text}.{advice}" if advice else label.text)
    if trace.get("error"):
        out.append(LLM_FAILED + " ".join(str(trace["error"]).split()))
    return out


def reply(
    trace: Mapping[str, Any], cited: Sequence[Source], contact: str | None, *, stored: bool
) -> tuple[str, RagAnswer]:
    """The reply text and the ``rag`` extension that carries the same in structure."""
    answer = display_answer(trace)
    footer = notes(trace, contact)
    if cited:
        footer += ["", SOURCES, *(_source_line(s) for s in cited)]
    text = f"{answer}\n\n{RULE}\n" + "\n".join(footer) if footer else answer
    label = answer_text.status_label(trace, abstained=answer_text.CHAT_ABSTAINED)
    extension = RagAnswer(
        trace_id=str(trace["trace_id"]),
        status=status.answer_status(trace),
        label=label.text if label else None,
        abstained=bool(trace.get("abstained")),
        verified=status.citations_checked(trace),
        answer=answer,
        searched_for=answer_text.searched_for(trace),
        sources=list(cited),
        contact=contact if trace.get("abstained") else None,
        stored=stored,
    )
    return text, extension


# ----------------------------------------------------------------------------- the conversation
def _is_footer(tail: str) -> bool:
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return bool(lines) and all(
        line == SOURCES
        or _SOURCE_LINE.match(line)
        or _COUNT_LABEL.match(line)
        or line.startswith(_NOTE_STARTS)
        for line in lines
    )


def strip_footer(content: str) -> str:
    """An assistant message without the footer a reply of this API ends with (any other text is kept)."""
    head, rule, tail = content.rpartition(f"\n\n{RULE}\n")
    return head if rule and _is_footer(tail) else content


def message_text(message: ChatMessage, index: int) -> str:
    """A message's text: its content, or the text parts of a content list (anything else is refused)."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.type not in ("text", "input_text"):
            raise ApiError(
                400,
                f"Message {index} has a {part.type!r} part: this model reads text only.",
                code="unsupported_content",
                param=f"messages.{index}.content",
            )
        texts.append(part.text or "")
    return "\n".join(texts)


def conversation(messages: Sequence[ChatMessage]) -> tuple[str, list[tuple[str, str]]]:
    """The question (the last message, a user's) and the earlier user and assistant turns, oldest first, with
    this API's footers taken off its earlier replies. System, developer and tool messages are not part of the
    conversation the policies are searched with."""
    if not messages:
        raise ApiError(
            400,
            "`messages` is empty: send at least the question, as a user message.",
            code="empty_messages",
            param="messages",
        )
    last = len(messages) - 1
    if messages[last].role != "user":
        raise ApiError(
            400,
            f"The last message is the question and must have role 'user', not {messages[last].role!r}.",
            code="invalid_request",
            param=f"messages.{last}.role",
        )
    question = message_text(messages[last], last).strip()
    if not question:
        raise ApiError(
            400,
            "The question (the last message) is empty.",
            code="empty_question",
            param=f"messages.{last}.content",
        )
    turns: list[tuple[str, str]] = []
    for i, m in enumerate(messages[:last]):
        if m.role in ("user", "assistant"):
            text = message_text(m, i)
            turns.append((m.role, strip_footer(text) if m.role == "assistant" else text))
    return question, turns
