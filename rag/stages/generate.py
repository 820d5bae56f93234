"""Generation modes over an LLM client: ``standard``, ``quote_then_answer`` and ``map_reduce``.

``generate`` dispatches by mode and returns a ``GenerationResult``: a ``Generated`` (so callers that only know
``Generated`` keep working) that also carries what the mode produced on the side for the trace: the quotes of
quote-then-answer, the notes of map-reduce, and how many LLM calls were made.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rag.errors import ConfigurationError, GenerationError
from rag.protocols import ChatModel
from rag.types import Evidence, Generated, Prompt

if TYPE_CHECKING:
    from rag.config import Settings
import numpy as np

from rag.config import Settings
from rag.protocols import LLM
from rag.request import State
from rag.stages.abstention import abstain, final_answer, partial_notice
from rag.stages.answer_check import unanswered
from rag.stages.citations import is_model_answer
from rag.stages.extractive import extractive_answer
from rag.stages.shared import Scoring
from rag.types import Intent, Reading, covered_intents

MODES = ("standard", "quote_then_answer", "map_reduce")

# Map-reduce answers this without a reduce call when no group yielded a relevant fact.
NOTHING_FOUND = "The provided passages do not contain the information needed to answer this question."


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
        result = _with_mode(client.complete(prompt, max_tokens=max_tokens), "standard")
    elif mode == "quote_then_answer":
        result = split_quotes(client.complete(prompt, max_tokens=max_tokens), evidence)
    elif mode == "map_reduce":
        result = map_reduce(question, evidence, client, max_tokens=max_tokens, prompt=prompt)
    else:
        raise ConfigurationError(
            f"Unknown generation mode {mode!r}.",
            hint=f"Set RAG_GENERATION_MODE to one of: {', '.join(MODES)}.",
        )
    return _answer_or_raise(result, evidence)


def _answer_or_raise(result: GenerationResult, evidence: Sequence[Evidence]) -> GenerationResult:
    """Drop lines that only copy a passage's header ("[1] Expenses — Expense guidelines") and put a 'Sources:'
    list the model ran on at the end of a sentence on its own line; an answer left with
    no sentence of its own (nothing but ids and 'Sources:' lines) is a failed generation, so the caller
    answers from the evidence instead of showing the user a list of ids."""
    from rag.stages.citations import claim_key, detach_sources, is_sources_line, parse_citations
    from rag.stages.prompt import passage_header

    def bare(line: str) -> str:
        return re.sub(r"\s*\(pp?\.[^)]*\)\s*$", "", claim_key(line)).casefold()

    headers = {bare(passage_header(e.n, e.candidate.chunk)) for e in evidence}
    lines = detach_sources(result.text).splitlines()
    kept = [line for line in lines if not line.strip() or bare(line) not in headers]
    text = "\n".join(kept).strip()
    claims = [
        s
        for s, _ in parse_citations(text)
        if not is_sources_line(s) and re.search(r"[^\W\d_]{2,}", claim_key(s))
    ]
    if not claims:
        raise GenerationError(
            "The model's answer held no sentence of its own, only passage ids or copied headings.",
            hint="A stronger model, or RAG_GENERATION_MODE=quote_then_answer, may do better.",
        )
    return replace(result, text=text) if text != result.text else result


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
_ANSWER_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?:final[ \t]+)?answer(?:\*\*|__)?[ \t]*:?(?:\*\*|__)?[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
_QUOTES_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?:relevant[ \t]+)?quot(?:es|ations?)(?:\*\*|__)?[ \t]*:?(?:\*\*|__)?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_QUOTES_PREFIX = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?:relevant[ \t]+)?quot(?:es|ations?)(?:\*\*|__)?[ \t]*:(?:\*\*|__)?[ \t]*",
    re.IGNORECASE,
)
_ONLY_IDS = re.compile(r"[\s\[\](),;.\d]*")  # "[1] [2]": ids without any quoted text
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
        line = _QUOTES_PREFIX.sub("", line.strip()).strip()
        if not line:
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
        if _ONLY_IDS.fullmatch(text) or text.lower() in {
            "none",
            "n/a",
            "no relevant quotes",
            "no relevant quotes.",
        }:
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
    s = re.sub(
        r"^\s*(?:[-*\u2022]|\d+[.)])?\s*(?:\[\d+\]\s*[:\-\u2013\u2014]?\s*)?",
        "",
        _QUOTES_PREFIX.sub("", line),
    )
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
# The map step asks each group of passages the question with the project's own prompt (so the layout, the
# untrusted-evidence fence and the citation instructions are the ones measured for `standard`), and keeps from
# each partial answer only the statements its passages support: with the packaged 1.5B model a dedicated
# "extract the facts" prompt produced bare ids or NONE, while a partial answer over passages that do not hold
# the answer invented one ("30 days [4]"). The support check drops such lines. The reduce step then writes the
# cited answer from the notes (telling that model to leave out unhelpful notes made it answer with bare ids).
MIN_SUPPORT = 0.5  # share of a note's content words found in the passage it cites
REDUCE_INSTRUCTIONS = (
    "The evidence above is notes taken from numbered policy passages; each note ends with its passage id. "
    "Answer the question using only these notes; do not use outside knowledge. Be concise. "
    "End each sentence with the ids of the passages it relies on, e.g. [2] or [1][3]. "
    "If the notes disagree, say so and cite both. "
    "If the notes do not answer the question, say that the policies provided do not cover it."
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
_SOURCES_LINE = re.compile(r"^\W*(sources?|references?|citations?|passages? used)\W*:", re.IGNORECASE)
_SOURCES_TAIL = re.compile(r"\b(?:sources?|references?)\s*:", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


def _statements(line: str) -> list[tuple[str, list[int]]]:
    """Split a line into (statement, cited ids). "[1] text [2] text" cites before; "text [1][2]. text [3]" after."""
    parts = [p for p in _CITE.split(line)]  # text, id, text, id, ...
    texts, ids = parts[0::2], [int(n) for n in parts[1::2]]
    out: list[tuple[str, list[int]]] = []
    if not texts[0].strip() and ids:  # ids first
        pending: list[int] = []
        for i, n in enumerate(ids):
            pending.append(n)
            following = texts[i + 1]
            if following.strip(" .,;:"):
                out.append((following, pending))
                pending = []
        return out
    current, cited = texts[0], []
    for i, n in enumerate(ids):
        cited.append(n)
        following = texts[i + 1]
        if following.strip(" .,;:"):
            out.append((current, cited))
            current, cited = following, []
    out.append((current, cited))
    return out


def support(statement: str, passage: str) -> float:
    """How well a passage supports a statement: the share of its content words found there, and 0 when a number
    in the statement is missing from the passage (a wrong figure is the failure that matters most)."""
    from rag.text import bm25_tokens

    if any(num not in passage for num in _NUMBER.findall(statement)):
        return 0.0
    words = set(bm25_tokens(statement))
    if not words:
        return 0.0
    return len(words & set(bm25_tokens(passage))) / len(words)


def clean_notes(output: str, group: Sequence[Evidence], *, min_support: float = MIN_SUPPORT) -> str:
    """A map output as "- statement [n]" lines, keeping only statements a passage of the group supports.

    A statement keeps the ids it cites when they support it; otherwise (uncited, or citing a passage outside
    the group or one that does not hold it) it is attributed to the group's best-supporting passage, or dropped.
    NONE, "Sources: ..." lines and bare ids are dropped."""
    texts = {e.n: e.candidate.chunk.text for e in group}
    kept: list[str] = []
    for raw in output.splitlines():
        line = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s+", "", raw.strip())
        if not line or _NONE.match(line) or _SOURCES_LINE.match(line) or line.endswith(":"):
            continue
        for statement, ids in _statements(line):
            statement = _SOURCES_TAIL.split(statement)[0]
            fact = (
                re.sub(r"\s+", " ", statement)
                .strip(" :;,-\u2013\u2014")
                .strip()
                .strip(_OPEN + _CLOSE)
                .strip()
            )
            if _ONLY_IDS.fullmatch(fact) or _NONE.match(fact):
                continue
            cited = [n for n in dict.fromkeys(ids) if n in texts]
            if not cited or support(fact, " ".join(texts[n] for n in cited)) < min_support:
                best = max(texts, key=lambda n: support(fact, texts[n]))
                if support(fact, texts[best]) < min_support:
                    continue
                cited = [best]
            note = f"- {fact} {''.join(f'[{n}]' for n in cited)}"
            if note not in kept:
                kept.append(note)
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
    """Answer over many passages in two steps. Map: each group of ``group_size`` passages (in [n] order, global
    numbering kept) is asked the question with ``build_prompt(question, group)`` (default: the project's prompt
    builder) and its statements a passage supports become notes. Reduce: one call writes the cited answer from
    all notes. Without any note it answers NOTHING_FOUND, without a reduce call.

    When every passage fits in one group there is nothing to reduce: one call answers, with ``prompt`` if given.
    """
    if group_size < 1:
        raise ConfigurationError("map_reduce needs group_size >= 1.", hint="Pass group_size=3 (the default).")
    if build_prompt is None:
        from rag.stages.prompt import build_prompt as project_builder

        build_prompt = project_builder
    ordered = sorted(evidence, key=lambda e: e.n)
    if len(ordered) <= group_size:
        single = prompt if prompt is not None else build_prompt(question, ordered)
        return _with_mode(client.complete(single, max_tokens=max_tokens), "map_reduce")
    groups = [ordered[i : i + group_size] for i in range(0, len(ordered), group_size)]
    notes: list[str] = []
    prompt_tokens = completion_tokens = 0
    model = client.model
    for group in groups:
        out = client.complete(build_prompt(question, group), max_tokens=max_tokens)
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


# ---------------------------------------------------------------------- claim repair
# One more call when the claim check fails: the model sees its own answer and, for each failed claim, why it
# failed and the passage sentence it was compared with. Bounded by the caller (one repair, then extractive).
REPAIR_INSTRUCTIONS = (
    "Your previous answer (below) has sentences that the evidence does not support. Write the answer again "
    "from the evidence only: correct or leave out each sentence listed, keep what the evidence supports, and "
    "write the id of the passage each sentence comes from in square brackets after it."
)


def repair_prompt(prompt: Prompt, answer: str, failures: Sequence[Any]) -> Prompt:
    """``prompt`` with the previous answer and its failed claims (``rag.stages.claims.ClaimCheck``) named."""
    from rag.stages.prompt import neutralise

    lines = []
    for c in failures:
        said = (
            f' The passage [{c.n}] says: "{neutralise(c.evidence_sentence)}"'
            if c.n and c.evidence_sentence
            else ""
        )
        lines.append(f'- "{neutralise(c.claim.text)}": {c.verdict} ({neutralise(c.reason)}).{said}')
    user = (
        f"{prompt.user}\n\nPrevious answer:\n{neutralise(answer.strip())}\n\n"
        f"Sentences that failed the check:\n" + "\n".join(lines) + f"\n\n{REPAIR_INSTRUCTIONS}"
    )
    return Prompt(
        prompt.system, user, prompt.evidence_map, prompt.n_tokens + _approx_tokens(user[len(prompt.user) :])
    )


def repair_claims(
    prompt: Prompt,
    evidence: Sequence[Evidence],
    answer: str,
    failures: Sequence[Any],
    client: ChatModel,
    settings: Settings | None = None,
) -> GenerationResult:
    """One repair call (standard mode) for an answer whose claims failed the check; raises GenerationError
    like ``generate`` when the call fails or returns no sentence of its own."""
    max_tokens = settings.llm_max_tokens if settings is not None else None
    generated = client.complete(repair_prompt(prompt, answer, failures), max_tokens=max_tokens)
    if settings is not None and settings.generation_mode == "quote_then_answer":
        return _answer_or_raise(split_quotes(generated, evidence), evidence)
    return _answer_or_raise(_with_mode(generated, "repair"), evidence)


# ----------------------------------------------------------------------------- the stage


# The weight of a sentence's passage in choosing the quote that answers (dev + sample accuracy 44/70 at 0,
# 45/70 at 0.3, 46/70 at 0.5; docs/evaluation.md). The abstention checks score sentences alone.
QUOTE_CONTEXT = 0.5


QUOTES_PER_INTENT = 3  # the reader's answer quotes at most this many sentences for each part of the question


class Extractive:
    """The answer quoted from the evidence: the sentences the reader vouches for, else the ones the sentence
    scorer ranks highest, for each covered part of the question."""

    def __init__(self, scoring: Scoring) -> None:
        self.scoring = scoring

    def answer(
        self,
        question: str,
        intents: Sequence[Intent],
        evidence: Sequence[Evidence],
        uncovered: Sequence[Intent],
        reading: Reading | None = None,
    ) -> Generated:
        covered = covered_intents(intents, uncovered)
        if reading is not None:
            # the reader's probabilities, looked up by (intent, sentence); a sentence it did not read scores 0
            rows = {i.text: row for row, i in enumerate(intents)}
            sentences = reading.sentences

            def probability(query: str, texts: Sequence[str]) -> list[float]:
                p = reading.probabilities[rows[query]] if query in rows else np.zeros(len(sentences))
                by_text: dict[str, float] = {}
                for s, value in zip(sentences, p, strict=True):
                    by_text[s.text] = max(by_text.get(s.text, 0.0), float(value))
                    if s.row:
                        by_text[s.row] = max(by_text.get(s.row, 0.0), float(value))
                return [by_text.get(t, 0.0) for t in texts]

            return extractive_answer(
                question,
                covered,
                evidence,
                score=probability,
                min_score=reading.answer_bar,
                tie_band=1.0 - reading.keep_ratio,
                sentences=sentences,
                max_sentences=QUOTES_PER_INTENT * len(covered),
                dependency=self.scoring.models.dependency_model,
            )
        scorer = self.scoring.sentence_scorer(evidence, context=QUOTE_CONTEXT)
        return extractive_answer(
            question, covered, evidence, score=scorer, dependency=self.scoring.models.dependency_model
        )

    def of(self, state: State) -> Generated:
        """The extractive answer to the request as its stages left it."""
        return self.answer(
            state.question.text, state.intents, state.evidence, state.coverage.uncovered, state.reading
        )


class Generate:
    """Nothing when the answer abstains; the model's answer when the request has an LLM (quoted evidence, with
    the model's failure in the trace, when it fails); else quoted evidence."""

    name = "generate"

    def __init__(self, settings: Settings, extractive: Extractive) -> None:
        self.settings, self.extractive = settings, extractive

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            abstention = abstain(state.coverage, has_evidence=bool(state.evidence))
            state = replace(state, abstention=abstention)
            generated = self.generate(state, state.llm)
            missing = unanswered(generated.text, state.intents, state.coverage.uncovered, state.reading)
            answer = final_answer(
                state.question.text, state.intents, state.coverage, generated, abstention, unanswered=missing
            )
            notice = "" if abstention else answer.removeprefix(generated.text)
            model_answer = is_model_answer(generated, use_llm=state.plan.use_llm, abstained=state.abstained)
            d.update(model=generated.model, error=generated.error)
        excerpts = () if abstention else generated.excerpts
        return replace(
            state,
            generated=generated,
            answer=answer,
            excerpts=excerpts,
            notice=notice,
            model_answer=model_answer,
        )

    @staticmethod
    def notice_for(state: State, generated: Generated) -> str:
        """The note that follows ``generated`` (another answer to the same request, e.g. the extractive fallback)
        in the answer: the parts it leaves unanswered."""
        missing = unanswered(generated.text, state.intents, state.coverage.uncovered, state.reading)
        return partial_notice(state.question.text, state.intents, missing, generated)

    def generate(self, state: State, llm: LLM | None) -> Generated:
        if state.abstention is not None:
            return Generated(text="", model="none")
        if llm is not None:
            from rag.stages.generate import generate

            assert state.prompt is not None
            s = self.settings
            try:
                return generate(state.prompt, state.evidence, state.question.text, llm, s.generation_mode, s)
            except GenerationError as exc:
                # The user still gets an answer (quoted evidence); the trace keeps the LLM's failure.
                fallback = self.extractive.of(state)
                return Generated(
                    text=fallback.text,
                    model=f"extractive (fallback; {s.llm_model} failed)",
                    error=str(exc),
                    excerpts=fallback.excerpts,
                )
        return self.extractive.of(state)
