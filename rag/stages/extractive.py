"""The offline generator: answer with verbatim evidence sentences, each cited, one or more per intent.

It needs no LLM, so the whole query path runs (and is tested) offline. Retrieved text is evidence, never
instructions: sentences that address an AI ("ignore previous instructions", "you are now ...") are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag.text import bm25_tokens, split_sentences
from rag.types import Evidence, Generated, Intent

MODEL = "extractive"
NO_ANSWER = "The provided evidence does not answer this question."
_TIE_BAND = 0.15  # a sentence within 15% of the best score counts as a near-tie

ScoreFn = Callable[[str, Sequence[str]], Sequence[float]]

_INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+(?:(?:all|any|of|the|your|my|these)\s+){0,3}"
    r"(?:(?:previous|prior|above|earlier|preceding|former|system|other)\s+)?(?:instructions|prompts?|directions)\b"
    r"|(?:^|[.!:]\s*)you are now\b|\b(?:reply|respond|answer|output) only with\b|\bsystem prompt\b"
    r"|\bas an? (?:ai|assistant|language model)\b|\b(?:new|updated) instructions\s*:"
    r"|\b(?:dear|attention|note to (?:the )?)\s*(?:ai|assistant|chatbot|llm|language model)\b",
    re.IGNORECASE,
)
_INJECTION_QUALIFIER = re.compile(
    r"\b(?:all|any|your|my|previous|prior|above|earlier|preceding|former|system)\b", re.IGNORECASE
)
_ASKS_NUMBER = re.compile(
    r"\b(?:how (?:many|long|much|often|soon|far|late|early)|when|what date|what time|by what|deadline|"
    r"what (?:is|are) the (?:[\w-]+ ){0,2}(?:limit|maximum|minimum|window|amount|rate|period|cap|deadline))\b",
    re.IGNORECASE,
)
_HAS_NUMBER = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|"
    r"fifty|sixty|ninety|hundred)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Sentence:
    text: str
    n: int  # the passage it came from
    tokens: frozenset[str]
    table: int | None = None  # rows of one table share a number: one row answers, the others are near-copies
    row: str = ""  # a table row's own text (``text`` is the row read with the table's first line)


def looks_like_injection(sentence: str) -> bool:
    """A sentence addressed to an AI rather than to employees ('Ignore all previous instructions ...')."""
    for match in _INJECTION.finditer(sentence):
        verb = match.group(0).split()[0].lower()
        if verb not in {"ignore", "disregard", "forget", "override"} or _INJECTION_QUALIFIER.search(
            match.group(0)
        ):
            return True
    return False


def asks_for_number(question: str) -> bool:
    return bool(_ASKS_NUMBER.search(question))


_NUMBERING = re.compile(r"^\s*(?:#+\s*)?(?:(?:section|part|chapter)\s+)?(?:\d+(?:\.\d+)*\.?|[a-z]\))?\s*", re.I)
_ENDS_SENTENCE = re.compile(r"[.!?;:]\s*$")


def _bare(text: str) -> str:
    return " ".join(_NUMBERING.sub("", text).lower().split())


def _is_heading(text: str, headings: set[str]) -> bool:
    """A heading is not an answer: a Markdown heading, or (part of) the title or a section name of its
    passage ("3.5 Form SEC-9: Security Incident Report" splits at its colon)."""
    bare = _bare(text)
    return text.lstrip().startswith("#") or any(bare in heading for heading in headings)


def _table_rows(text: str) -> list[str] | None:
    """The lines of a flattened table ("Role Laptop refresh (years) ... / Designer 3 no phone 4"), or None.

    Three or more lines, none ending a sentence, most holding a number: each row is its own answer unit,
    read with the table's first line (its column names), not the whole table at once.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 3 or any(_ENDS_SENTENCE.search(line) for line in lines):
        return None
    numeric = sum(bool(re.search(r"\d", line)) for line in lines)
    return lines if numeric >= 0.6 * len(lines) else None


def _sentences(evidence: Sequence[Evidence]) -> list[_Sentence]:
    out = []
    for ev in evidence:
        chunk = ev.candidate.chunk
        headings = {_bare(h) for h in [chunk.title, *chunk.section.split(">")] if h.strip()}
        for text in split_sentences(chunk.text):
            if len(re.findall(r"[A-Za-z0-9]+", text)) < 3 or looks_like_injection(text):
                continue
            if _is_heading(text, headings):
                continue
            rows = _table_rows(text)
            if rows is None:
                out.append(_Sentence(text, ev.n, frozenset(bm25_tokens(text))))
                continue
            table = len(out)
            out.append(_Sentence(rows[0], ev.n, frozenset(bm25_tokens(rows[0])), table=table))
            for row in rows[1:]:
                unit = f"{rows[0]} … {row}"
                out.append(_Sentence(unit, ev.n, frozenset(bm25_tokens(unit)), table=table, row=row))
    return out


def _scores(score: ScoreFn, query: str, sents: Sequence[_Sentence]) -> list[float]:
    """One score per sentence; a table row scores as the mean of the row alone and the row read with the
    table's first line, so the first line's own words (and first row) do not make every row look alike."""
    if not sents:
        return []
    texts = [s.text for s in sents]
    rows = [i for i, s in enumerate(sents) if s.row]
    scores = list(score(query, texts + [sents[i].row for i in rows]))
    if len(scores) != len(texts) + len(rows):
        raise ValueError(f"score() returned {len(scores)} scores for {len(texts) + len(rows)} sentences")
    for j, i in enumerate(rows):
        scores[i] = 0.5 * (scores[i] + scores[len(texts) + j])
    return scores[: len(texts)]


def _near_duplicate(a: _Sentence, b: _Sentence) -> bool:
    if a.text.strip().lower() == b.text.strip().lower() or (a.table is not None and a.table == b.table):
        return True
    union = a.tokens | b.tokens
    return bool(union) and len(a.tokens & b.tokens) / len(union) >= 0.7


def _ordered(
    scores: Sequence[float], sents: Sequence[_Sentence], *, min_score: float, numeric: bool
) -> list[int]:
    """Indices of sentences that clear ``min_score``, best first; near-ties holding a number first when asked."""
    eligible = [i for i, s in enumerate(scores) if s >= min_score]
    if not eligible:
        return []
    best = max(scores[i] for i in eligible)
    floor = best - _TIE_BAND * abs(best)

    def key(i: int) -> tuple[bool, bool, float, int]:
        near = scores[i] >= floor
        return (not near, not (near and numeric and bool(_HAS_NUMBER.search(sents[i].text))), -scores[i], i)

    return sorted(eligible, key=key)


def extractive_answer(
    question: str,
    intents: Sequence[Intent],
    evidence: Sequence[Evidence],
    *,
    score: ScoreFn,
    max_sentences: int = 3,
    min_score: float = 0.0,
) -> Generated:
    """Quote the best evidence sentence for each intent (in intent order), each followed by its [n].

    Up to ``max_sentences`` in total: after one per intent, near-ties of an intent's best sentence may follow
    it. ``score(query, sentences)`` returns one score per sentence. An intent with nothing above ``min_score``
    is named as not covered; when no intent is covered the answer says the evidence does not answer.
    """
    sents = _sentences(evidence)
    intents = list(intents) or [Intent(0, question)]
    chosen: dict[int, list[int]] = {}
    extras: list[tuple[float, int, int]] = []  # (-score, intent position, sentence index)
    uncovered: list[Intent] = []
    for pos, intent in enumerate(intents):
        scores = _scores(score, intent.text, sents)
        numeric = asks_for_number(intent.text) or (len(intents) == 1 and asks_for_number(question))
        order = _ordered(scores, sents, min_score=min_score, numeric=numeric)
        taken = [i for ids in chosen.values() for i in ids]
        pick = next((i for i in order if not any(_near_duplicate(sents[i], sents[j]) for j in taken)), None)
        if pick is None:
            uncovered.append(intent)
            continue
        chosen[pos] = [pick]
        floor = scores[pick] - _TIE_BAND * abs(scores[pick])
        extras += [(-scores[i], pos, i) for i in order if i != pick and scores[i] >= floor]
    for _, pos, i in sorted(extras):
        taken = [j for ids in chosen.values() for j in ids]
        if len(taken) >= max_sentences:
            break
        if not any(_near_duplicate(sents[i], sents[j]) for j in taken):
            chosen[pos].append(i)
    return Generated(_compose(sents, chosen, uncovered), MODEL)


def _compose(sents: Sequence[_Sentence], chosen: dict[int, list[int]], uncovered: Sequence[Intent]) -> str:
    if not chosen:
        return NO_ANSWER
    lines = [f"{sents[i].text} [{sents[i].n}]" for pos in sorted(chosen) for i in chosen[pos]]
    if uncovered:
        missing = "; ".join(f'"{intent.text}"' for intent in uncovered)
        lines.append(f"The provided evidence does not cover: {missing}.")
    cited = sorted({sents[i].n for ids in chosen.values() for i in ids})
    lines.append("Sources: " + ", ".join(f"[{n}]" for n in cited))
    return "\n".join(lines)
