"""Parse the [n] citations of an answer and check each one: does [n] exist, and does it support the sentence?"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from rag.text import bm25_tokens, split_sentences
from rag.types import Chunk, Citation, Evidence

_MARKER = re.compile(r"\[\s*\d+\s*(?:[,;\u2013\u2014-]\s*\d+\s*)*\]")
_LEADING_MARKERS = re.compile(rf"^(?:\s*{_MARKER.pattern}\s*[.,;]?)+")
_SOURCES_LINE = re.compile(
    r"^\s*(?:[*_]*(?:sources?|references?|citations?|passages?(?:\s+used)?|evidence(?:\s+used)?|"
    r"ids?\s+used|used)[*_]*\s*:?\s*[*_]*\s*)?"
    rf"(?:{_MARKER.pattern}\s*(?:,|;|and)?\s*)+\.?\s*$",
    re.IGNORECASE,
)
_PREFIX = re.compile(r"^\s*(?:(?:quotes?|answer)\s*:\s*|[-*\u2022]\s+|\d+[.)]\s+)", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"^\s*(?:\d+|[a-zA-Z])[.)]\s*$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_MAX_RANGE = 50  # "[1-3]" expands; a runaway "[1-9999]" keeps only its ends


def _ids(marker: str) -> list[int]:
    ids: list[int] = []
    for part in re.split(r"[,;]", marker.strip("[] ")):
        ends = [int(x) for x in re.split(r"[\u2013\u2014-]", part) if x.strip()]
        lo, hi = min(ends), max(ends)
        ids += list(range(lo, hi + 1)) if hi - lo <= _MAX_RANGE else [lo, hi]
    return ids


def cited_ids(text: str) -> list[int]:
    """Every passage id cited in ``text``, in order of appearance, without repeats."""
    out: list[int] = []
    for marker in _MARKER.findall(text):
        out += [n for n in _ids(marker) if n not in out]
    return out


def is_sources_line(sentence: str) -> bool:
    """'Sources: [1], [2]' (or a line of bare markers): a list of ids, not a claim to check."""
    return bool(_SOURCES_LINE.match(sentence))


def _sentences(answer: str) -> list[str]:
    """Sentences of the answer; markers after a full stop ('45 days. [1]') stay with their sentence."""
    out: list[str] = []
    block: list[str] = []
    for line in answer.splitlines() + [""]:
        if line.strip() and not is_sources_line(line):
            block.append(line)
            continue
        prefix = ""
        for piece in split_sentences("\n".join(block)):
            if _BARE_NUMBER.match(piece):  # "1." split off a numbered list item
                prefix = f"{prefix}{piece} "
                continue
            piece, prefix = f"{prefix}{piece}", ""
            lead = _LEADING_MARKERS.match(piece)
            if lead and out:
                out[-1] = f"{out[-1]} {lead.group(0).strip()}"
                piece = piece[lead.end() :].strip()
            if piece:
                out.append(piece)
        if prefix.strip():
            out.append(prefix.strip())
        block = []
        if line.strip():
            out.append(line.strip())
    return out


def parse_citations(answer: str) -> list[tuple[str, list[int]]]:
    """(sentence, cited ids) for every sentence of ``answer``; uncited sentences come with an empty list.

    Handles [1], [1, 3], [1][2] and ranges [1-3].
    """
    return [(s, cited_ids(s)) for s in _sentences(answer)]


def _claim(sentence: str) -> str:
    """The sentence without its citation markers and leading list or 'Answer:' prefix."""
    without = re.sub(rf"\s*{_MARKER.pattern}", "", sentence)
    return " ".join(_PREFIX.sub("", without).split())


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


def _passage_text(chunk: Chunk) -> str:
    return f"{chunk.title}\n{chunk.section}\n{chunk.text}"


def lexical_support(claim: str, passage: str) -> float:
    """Share of the claim's content tokens that occur in the passage (0.0 for a claim without any)."""
    tokens = set(bm25_tokens(claim))
    if not tokens:
        return 0.0
    return len(tokens & set(bm25_tokens(passage))) / len(tokens)


def check_citations(
    answer: str,
    evidence: Sequence[Evidence],
    *,
    support: Callable[[str, str], float] | None = None,
    threshold: float = 0.35,
) -> list[Citation]:
    """One Citation per cited id per sentence.

    valid: [n] exists in the evidence. supported: the support score (``support(claim, passage_text)`` when
    given, else lexical token overlap) reaches ``threshold`` and every number in the claim appears in the
    passage ("30 days" is not supported by a passage that says 45). A trailing 'Sources: [1], [2]' line is
    not a claim: its valid ids count as supported (score 1.0).
    """
    by_n = {e.n: e.candidate.chunk for e in evidence}
    out: list[Citation] = []
    for sentence, ids in parse_citations(answer):
        sources = is_sources_line(sentence)
        claim = _claim(sentence)
        for n in ids:
            chunk = by_n.get(n)
            if chunk is None:
                out.append(Citation(n, None, False, False, sentence, 0.0))
            elif sources:
                out.append(Citation(n, chunk.chunk_id, True, True, sentence, 1.0))
            else:
                passage = _passage_text(chunk)
                score = support(claim, chunk.text) if support else lexical_support(claim, passage)
                numbers_ok = _numbers(claim) <= _numbers(passage)
                out.append(
                    Citation(n, chunk.chunk_id, True, score >= threshold and numbers_ok, sentence, score)
                )
    return out
