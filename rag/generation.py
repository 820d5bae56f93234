"""Generation modes over an LLM client: ``standard``, ``quote_then_answer`` and ``map_reduce``.

``generate`` dispatches by mode and returns a ``GenerationResult``: a ``Generated`` (so callers that only know
``Generated`` keep working) that also carries what the mode produced on the side for the trace: the quotes of
quote-then-answer, the notes of map-reduce, and how many LLM calls were made.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from rag.errors import ConfigurationError
from rag.types import Evidence, Generated, Prompt

if TYPE_CHECKING:
    from rag.config import Settings

MODES = ("standard", "quote_then_answer", "map_reduce")

# Map-reduce answers this without a reduce call when no group yielded a relevant fact.
NOTHING_FOUND = "The provided passages do not contain the information needed to answer this question."


class ChatModel(Protocol):
    """What the generation modes need from an LLM client (``rag.llm.LLMClient`` or a test double)."""

    model: str
    max_tokens: int

    def complete(
        self, prompt: Prompt, *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> Generated: ...


@dataclass(frozen=True)
class Quote:
    """One quotation from the quote block of a quote-then-answer output."""

    n: int | None  # the passage id it cites; None when the model gave none
    text: str
    verbatim: bool  # found word for word (ignoring case, spacing and quote marks) in passage n


@dataclass(frozen=True)
class GenerationResult(Generated):
    """A Generated plus the side products of its mode, for the trace."""

    mode: str = "standard"
    quotes: tuple[Quote, ...] = ()
    notes: tuple[str, ...] = ()  # map step outputs, one per group, each line "fact [n]"
    calls: int = 1
    raw: str | None = None  # the model's full output when the answer text is a part of it

    def trace_detail(self) -> dict[str, object]:
        """A JSON-able summary for the generate stage of a trace."""
        detail: dict[str, object] = {"mode": self.mode, "calls": self.calls}
        if self.mode == "quote_then_answer":
            detail["quotes"] = [{"n": q.n, "text": q.text, "verbatim": q.verbatim} for q in self.quotes]
        if self.mode == "map_reduce":
            detail["notes"] = list(self.notes)
        return detail


def generate(
    prompt: Prompt,
    evidence: Sequence[Evidence],
    question: str,
    client: ChatModel,
    mode: str,
    settings: Settings | None = None,
) -> GenerationResult:
    """Generate an answer in the given mode. ``prompt`` is the prompt builder's output for this mode."""
    max_tokens = settings.llm_max_tokens if settings is not None else None
    if mode == "standard":
        return _with_mode(client.complete(prompt, max_tokens=max_tokens), "standard")
    if mode == "quote_then_answer":
        generated = client.complete(prompt, max_tokens=max_tokens)
        return split_quotes(generated, evidence)
    if mode == "map_reduce":
        return map_reduce(question, evidence, client, max_tokens=max_tokens, prompt=prompt)
    raise ConfigurationError(
        f"Unknown generation mode {mode!r}.", hint=f"Set RAG_GENERATION_MODE to one of: {', '.join(MODES)}."
    )


def _with_mode(generated: Generated, mode: str, **extra: Any) -> GenerationResult:
    return GenerationResult(
        text=generated.text,
        model=generated.model,
        prompt_tokens=generated.prompt_tokens,
        completion_tokens=generated.completion_tokens,
        error=generated.error,
        mode=mode,
        **extra,
    )


# ---------------------------------------------------------------------- quote-then-answer
# The output layout ``split_quote_answer`` expects; the prompt builder may use this text as its instruction.
QUOTE_THEN_ANSWER_FORMAT = (
    "First write 'Quotes:' and below it copy, word for word, the sentences from the passages that answer the "
    'question, one per line, each starting with its passage id, like: [2] "exact sentence". '
    "Then write 'Answer:' and below it the answer, using only the quoted sentences, ending each sentence with "
    "the ids of the passages it relies on, like [2]."
)
_ANSWER_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?:final[ \t]+)?answer(?:\*\*|__)?[ \t]*:?(?:\*\*|__)?[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
_QUOTES_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?:relevant[ \t]+)?quot(?:es|ations?)(?:\*\*|__)?[ \t]*:?(?:\*\*|__)?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_OPEN = "\"\u201c\u201e\u00ab'"
_CLOSE = "\"\u201d\u00bb'"
# [n] "quote"  |  [n]: quote  |  "quote" [n]  |  "quote" (passage n)
_QUOTE_CITED_FIRST = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])?\s*\[(\d+)\]\s*[:\-\u2013\u2014]?\s*(.+?)\s*$")
_QUOTE_CITED_LAST = re.compile(
    r"^\s*(?:[-*\u2022]|\d+[.)])?\s*(.+?)\s*(?:\[(\d+)\]|\((?:passage|source)\s*(\d+)\))\s*[.;]?\s*$",
    re.IGNORECASE,
)


def _norm(text: str) -> str:
    text = text.strip().strip(_OPEN + _CLOSE).replace("\u2019", "'")
    text = re.sub(r"\.{3}|\u2026", " ", text)
    return re.sub(r"\s+", " ", text).strip().lower()


def parse_quotes(block: str, evidence: Sequence[Evidence]) -> tuple[Quote, ...]:
    """Quotes from a quote block, each checked word for word against the passage it cites."""
    by_n = {e.n: _norm(e.candidate.chunk.text) for e in evidence}
    quotes = []
    for line in block.splitlines():
        line = line.strip()
        if not line or _QUOTES_HEADING.fullmatch(line):
            continue
        n: int | None = None
        m = _QUOTE_CITED_FIRST.match(line)
        if m:
            n, text = int(m.group(1)), m.group(2)
        else:
            m = _QUOTE_CITED_LAST.match(line)
            if m:
                n, text = int(m.group(2) or m.group(3)), m.group(1)
            else:
                text = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line)
        text = text.strip().strip(_OPEN + _CLOSE).strip()
        if not text or text.lower() in {"none", "n/a", "no relevant quotes", "no relevant quotes."}:
            continue
        pieces = [p for p in re.split(r"\.{3}|\u2026", _norm(text)) if p.strip()]
        verbatim = n in by_n and all(p.strip() in by_n[n] for p in pieces)
        quotes.append(Quote(n=n, text=text, verbatim=verbatim))
    return tuple(quotes)


def split_quote_answer(output: str) -> tuple[str, str]:
    """Split a quote-then-answer output into (quote block, answer text).

    The answer is what follows the last "Answer:" heading. Without one, a leading block of quote lines (under an
    optional "Quotes:" heading) is taken off and the rest is the answer; when nothing is left the whole output is
    the answer, so a model that ignored the format still gets its answer through.
    """
    headings = list(_ANSWER_HEADING.finditer(output))
    headings = [h for h in headings if _is_heading(output, h)]
    if headings:
        last = headings[-1]
        return output[: last.start()].strip(), output[last.end() :].strip()
    lines = output.strip().splitlines()
    i = 0
    if lines and _QUOTES_HEADING.fullmatch(lines[0].strip()):
        i = 1
    start = i
    while i < len(lines) and (not lines[i].strip() or _looks_like_quote(lines[i])):
        i += 1
    if i == start or i >= len(lines):
        return "", output.strip()
    return "\n".join(lines[:i]).strip(), "\n".join(lines[i:]).strip()


def _is_heading(text: str, match: re.Match[str]) -> bool:
    """'Answer:' at the start of a line, not a sentence that happens to begin with the word 'answer'."""
    return ":" in match.group(0) or text[match.end() : match.end() + 1] in ("\n", "") or "#" in match.group(0)


def _looks_like_quote(line: str) -> bool:
    s = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])?\s*(?:\[\d+\]\s*[:\-\u2013\u2014]?\s*)?", "", line)
    return (
        bool(s)
        and s[0] in _OPEN
        and (s.rstrip(" .;")[-1] in _CLOSE or bool(re.search(r"[\u201d\"]\s*\[\d+\]", s)))
    )


def split_quotes(generated: Generated, evidence: Sequence[Evidence]) -> GenerationResult:
    """Post-process a quote-then-answer output: the answer text without the quote block; quotes on the side."""
    block, answer = split_quote_answer(generated.text)
    result = _with_mode(
        generated, "quote_then_answer", quotes=parse_quotes(block, evidence), raw=generated.text
    )
    return replace(result, text=answer or generated.text)


# ---------------------------------------------------------------------- map-reduce
# Both steps reuse the prompt builder's fence and passage headers (rag.stages.prompt), so retrieved text and the
# notes drawn from it stay marked as untrusted evidence, with fence markers inside them neutralised.
MAP_INSTRUCTIONS = (
    "List every fact from the evidence above that helps answer the question, one per line, starting with '- ', "
    "copying numbers, dates, amounts and conditions exactly, and ending each line with the id of its passage "
    "in square brackets, like [{example}]. Include exceptions and conditions that limit a rule. "
    "Do not answer the question yet. If no passage helps, write only: NONE"
)
REDUCE_INSTRUCTIONS = (
    "The evidence above is notes taken from numbered policy passages; each note ends with its passage id. "
    "Answer the question using only these notes; do not use outside knowledge. Be concise. "
    "End each sentence with the ids of the passages it relies on, e.g. [2] or [1][3]. "
    "If the notes disagree, say so and cite both. "
    "If the notes do not answer the question, say that the policies provided do not cover it."
)


def map_prompt(question: str, group: Sequence[Evidence]) -> Prompt:
    """The map step's prompt: question first, the group's passages (global [n]), instructions, question again."""
    from rag.stages.prompt import EVIDENCE_END, EVIDENCE_START, SYSTEM, neutralise, passage_header

    q = neutralise(question.strip())
    passages = "\n\n".join(
        f"{passage_header(e.n, e.candidate.chunk)}\n{neutralise(e.candidate.chunk.text.strip())}"
        for e in group
    )
    user = (
        f"Question: {q}\n\n{EVIDENCE_START}\n{passages}\n{EVIDENCE_END}\n\n"
        f"Instructions:\n{MAP_INSTRUCTIONS.format(example=group[0].n)}\n\nQuestion (repeated): {q}"
    )
    return Prompt(
        system=SYSTEM,
        user=user,
        evidence_map=tuple((e.n, e.candidate.chunk_id) for e in group),
        n_tokens=_approx_tokens(SYSTEM) + _approx_tokens(user),
    )


def reduce_prompt(question: str, notes: Sequence[str], evidence: Sequence[Evidence]) -> Prompt:
    """The reduce step's prompt: the question, every group's cited notes (fenced as evidence), instructions."""
    from rag.stages.prompt import EVIDENCE_END, EVIDENCE_START, SYSTEM, neutralise

    q = neutralise(question.strip())
    body = neutralise("\n".join(n for n in notes if n))
    user = (
        f"Question: {q}\n\n{EVIDENCE_START}\n{body}\n{EVIDENCE_END}\n\n"
        f"Instructions:\n{REDUCE_INSTRUCTIONS}\n\nQuestion (repeated): {q}"
    )
    return Prompt(
        system=SYSTEM,
        user=user,
        evidence_map=tuple((e.n, e.candidate.chunk_id) for e in evidence),
        n_tokens=_approx_tokens(SYSTEM) + _approx_tokens(user),
    )


_CITE = re.compile(r"\[(\d+)\]")
_NONE = re.compile(r"^\W*(none|n/?a|no relevant (facts?|information))\W*$", re.IGNORECASE)


def clean_notes(output: str, group: Sequence[Evidence]) -> str:
    """Keep the map output's fact lines; drop citations of passages outside the group (the model cannot have
    read them) and a line that is only NONE. A one-passage group's uncited facts get that passage's id."""
    allowed = {e.n for e in group}
    kept = []
    for raw in output.splitlines():
        line = raw.strip()
        if not line or _NONE.match(line) or line.endswith(":"):
            continue
        line = re.sub(r"^(?:[-*\u2022]|\d+[.)])\s*", "", line)
        line = _CITE.sub(lambda m: m.group(0) if int(m.group(1)) in allowed else "", line).strip()
        if not _CITE.search(line) and len(allowed) == 1:
            line = f"{line} [{next(iter(allowed))}]"
        if line and not _NONE.match(line):
            kept.append(f"- {line}")
    return "\n".join(kept)


def map_reduce(
    question: str,
    evidence: Sequence[Evidence],
    client: ChatModel,
    *,
    group_size: int = 3,
    build_prompt: Callable[..., Prompt] | None = None,
    max_tokens: int | None = None,
    prompt: Prompt | None = None,
) -> GenerationResult:
    """Answer over many passages in two steps: map (facts with their [n] from each group of ``group_size``
    passages, global numbering kept) and reduce (the cited answer from all notes).

    When every passage fits in one group there is nothing to reduce: one standard call answers, with ``prompt``
    if given, else ``build_prompt(question, evidence)`` (default: the project's prompt builder).
    """
    if group_size < 1:
        raise ConfigurationError("map_reduce needs group_size >= 1.", hint="Pass group_size=3 (the default).")
    ordered = sorted(evidence, key=lambda e: e.n)
    if len(ordered) <= group_size:
        if prompt is None:
            if build_prompt is None:
                from rag.stages.prompt import build_prompt as project_builder

                build_prompt = project_builder
            prompt = build_prompt(question, ordered)
        return _with_mode(client.complete(prompt, max_tokens=max_tokens), "map_reduce")
    groups = [ordered[i : i + group_size] for i in range(0, len(ordered), group_size)]
    notes: list[str] = []
    prompt_tokens = completion_tokens = 0
    model = client.model
    for group in groups:
        out = client.complete(map_prompt(question, group), max_tokens=max_tokens)
        prompt_tokens += out.prompt_tokens
        completion_tokens += out.completion_tokens
        model = out.model
        notes.append(clean_notes(out.text, group))
    if not any(notes):
        return GenerationResult(
            text=NOTHING_FOUND,
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            mode="map_reduce",
            notes=tuple(notes),
            calls=len(groups),
        )
    final = client.complete(reduce_prompt(question, notes, ordered), max_tokens=max_tokens)
    return GenerationResult(
        text=final.text,
        model=final.model,
        prompt_tokens=prompt_tokens + final.prompt_tokens,
        completion_tokens=completion_tokens + final.completion_tokens,
        mode="map_reduce",
        notes=tuple(notes),
        calls=len(groups) + 1,
    )


def _approx_tokens(text: str) -> int:
    """Token count for a prompt built here (the embedding tokenizer when loaded, else a word estimate)."""
    from rag.text import count_tokens

    return count_tokens(text)
