"""Parse the [n] citations of an answer and check each one: does [n] exist, and does it support the sentence?"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from rag.models.sentences import sentence_units
from rag.request import State
from rag.stages.extractive import shown_sentence
from rag.stages.shared import Scoring
from rag.text import bm25_token_set, split_sentences
from rag.types import Chunk, Citation, Evidence, Generated

_MARKER = re.compile(r"\[\s*\d+\s*(?:[,;\u2013\u2014-]\s*\d+\s*)*\]")
_LEADING_MARKERS = re.compile(rf"^(?:\s*{_MARKER.pattern}\s*[.,;]?)+")
_ID_LIST = rf"(?:{_MARKER.pattern}\s*(?:,|;|and)?\s*)+\.?"  # "[1], [3] and [4]."
_SOURCES_LINE = re.compile(
    rf"^\s*(?:{_MARKER.pattern}\s*)*"  # "[1][3] Sources: [1], [3]": ids in front of the list too
    r"(?:[*_]*(?:sources?|references?|citations?|passages?(?:\s+used)?|evidence(?:\s+used)?|"
    r"ids?\s+used|used)[*_]*\s*:?\s*[*_]*\s*)?"
    rf"{_ID_LIST}\s*$",
    re.IGNORECASE,
)
# "... idle time Sources: [1], [2]": a labelled id list the model ran on at the end of a sentence's line
_TRAILING_SOURCES = re.compile(
    r"(?<=\S)[ \t]+((?:[*_]*(?:sources?|references?|citations?)[*_]*\s*:\s*[*_]*\s*)"
    rf"{_ID_LIST})[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_PREFIX = re.compile(r"^\s*(?:(?:quotes?|answer)\s*:\s*|[-*\u2022]\s+|\d+[.)]\s+)", re.IGNORECASE)
_ENDS_WITH_MARKER = re.compile(rf"{_MARKER.pattern}\s*[.,;]?\s*$")
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


def detach_sources(answer: str) -> str:
    """Put a 'Sources: [1], [2]' list that ends a line of text on a line of its own. Without a full stop
    before it ("- [Mac instructions](...) Sources: [1], [2]") it would read as part of that line's claim, and
    the claim check would judge 'Sources' as a name the passage lacks."""
    return _TRAILING_SOURCES.sub(lambda m: "\n" + m.group(1), answer)


def _sentences(answer: str) -> list[str]:
    """Sentences of the answer. Markers after a full stop on the same line ('45 days. [1] Gift ...') stay with
    the sentence before them; markers that open a line ('[2] Gift cards are excluded.', the list style small
    models write) cite that line's sentence. A line of markers alone belongs to the sentence above it. A line
    that ends with markers ends its sentence there, with or without a full stop (a quoted table row
    "... L4 81,000 112,000 [1]" is not one sentence with the line below it)."""
    out: list[str] = []
    block: list[str] = []
    for line in answer.splitlines() + [""]:
        claim_line = bool(line.strip()) and not is_sources_line(line)
        if claim_line:
            block.append(line)
            if not _ENDS_WITH_MARKER.search(line):
                continue
        prefix = ""
        starts = _line_starts(block)
        for piece in split_sentences("\n".join(block)):
            if _BARE_NUMBER.match(piece):  # "1." split off a numbered list item
                prefix = f"{prefix}{piece} "
                continue
            opens_line = " ".join(piece.split()) in starts
            piece, prefix = f"{prefix}{piece}", ""
            lead = _LEADING_MARKERS.match(piece)
            if lead and out and (not opens_line or not piece[lead.end() :].strip()):
                out[-1] = f"{out[-1]} {lead.group(0).strip()}"
                piece = piece[lead.end() :].strip()
            if piece:
                out.append(piece)
        if prefix.strip():
            out.append(prefix.strip())
        block = []
        if line.strip() and not claim_line:
            out.append(line.strip())
    return out


def _line_starts(block: Sequence[str]) -> set[str]:
    """Every line of the block (whitespace collapsed) and each line's leading text up to its first sentence
    end, so a split piece can be told to open a line."""
    starts: set[str] = set()
    for line in block:
        text = " ".join(line.split())
        if text:
            starts.add(text)
            first = split_sentences(text)
            if first:
                starts.add(" ".join(first[0].split()))
    return starts


def parse_citations(answer: str) -> list[tuple[str, list[int]]]:
    """(sentence, cited ids) for every sentence of ``answer``; uncited sentences come with an empty list.

    Handles [1], [1, 3], [1][2] and ranges [1-3].
    """
    return [(s, cited_ids(s)) for s in _sentences(answer)]


def _claim(sentence: str) -> str:
    """The sentence without its citation markers and leading list or 'Answer:' prefix."""
    without = re.sub(rf"\s*{_MARKER.pattern}", "", sentence)
    return " ".join(_PREFIX.sub("", without).split())


def claim_key(sentence: str) -> str:
    """The form a claim is compared in: an evidence sentence quoted as an answer ("3) Test backups ...") and
    the claim checked ("Test backups ...") meet under the same key."""
    return _claim(sentence)


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


def _passage_text(chunk: Chunk) -> str:
    return f"{chunk.title}\n{chunk.section}\n{chunk.text}"


def lexical_support(claim: str, passage: str) -> float:
    """Share of the claim's content tokens that occur in the passage (0.0 for a claim without any)."""
    tokens = bm25_token_set(claim)
    if not tokens:
        return 0.0
    return len(tokens & bm25_token_set(passage)) / len(tokens)


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
    passage ("30 days" is not supported by a passage that says 45). A 'Sources: [1], [2]' line is not a
    claim and never counts as support by itself: an id it lists is supported only when that passage supports
    one of the answer's sentences (its score is the best of those sentences').
    """
    by_n = {e.n: e.candidate.chunk for e in evidence}
    parsed = parse_citations(answer)
    claims = [
        _claim(s) for s, _ in parsed if not is_sources_line(s) and re.search(r"[^\W\d_]{2,}", _claim(s))
    ]

    def judged(claim: str, chunk: Chunk) -> tuple[float, bool]:
        passage = _passage_text(chunk)
        score = support(claim, chunk.text) if support else lexical_support(claim, passage)
        return score, score >= threshold and _numbers(claim) <= _numbers(passage)

    out: list[Citation] = []
    for sentence, ids in parsed:
        sources = is_sources_line(sentence)
        claim = _claim(sentence)
        for n in ids:
            chunk = by_n.get(n)
            if chunk is None:
                out.append(Citation(n, None, False, False, sentence, 0.0))
            elif sources:
                scores = [judged(c, chunk) for c in claims]
                best = max((sc for sc, _ in scores), default=0.0)
                out.append(Citation(n, chunk.chunk_id, True, any(ok for _, ok in scores), sentence, best))
            else:
                score, ok = judged(claim, chunk)
                out.append(Citation(n, chunk.chunk_id, True, ok, sentence, score))
    return out


def repair_citations(
    answer: str,
    evidence: Sequence[Evidence],
    *,
    support: Callable[[str, str], float] | None = None,
    threshold: float = 0.35,
) -> tuple[str, list[dict[str, object]]]:
    """Re-point citations that the check would reject at a passage that does support the sentence.

    Small models often cite the neighbour of the passage they used, or a number that is not a passage. By the
    same test as ``check_citations`` (score >= ``threshold`` and every number of the claim in the passage):
    a sentence whose cited ids include a supporting one keeps only those; a sentence none of whose ids
    supports it is re-pointed at the best-supporting passage when there is one; otherwise it is left alone
    and the check reports it. A 'Sources:' line is rewritten to the ids the sentences now cite. Returns the
    new answer and one record per change ({"sentence", "from", "to"}; "to" None = the id was dropped).
    """
    by_n = {e.n: e.candidate.chunk for e in evidence}

    def score(claim: str, chunk: Chunk) -> float:
        return (
            support(claim, chunk.text)
            if support is not None
            else lexical_support(claim, _passage_text(chunk))
        )

    def supports(claim: str, chunk: Chunk) -> bool:
        return score(claim, chunk) >= threshold and _numbers(claim) <= _numbers(_passage_text(chunk))

    repairs: list[dict[str, object]] = []
    out = answer
    for sentence, ids in parse_citations(answer):
        if not ids or is_sources_line(sentence) or sentence not in out:
            continue
        claim = _claim(sentence)
        good = [n for n in ids if n in by_n and supports(claim, by_n[n])]
        bad = [n for n in ids if n not in good]
        if not bad:
            continue
        if good:
            keep, to = good, None
        else:
            better = [n for n in by_n if supports(claim, by_n[n])]
            if not better:
                continue
            to = max(better, key=lambda n: (score(claim, by_n[n]), -n))
            keep = [to]
        markers = "".join(f"[{n}]" for n in keep)
        if _LEADING_MARKERS.match(sentence):  # "[2] Gift cards ...": keep the model's layout
            fixed = f"{markers} {_MARKER.sub('', sentence).strip()}"
        else:
            body = _MARKER.sub("", sentence).rstrip()
            stop = len(body) - len(body.rstrip(".!?"))
            fixed = f"{body[: len(body) - stop].rstrip()} {markers}{body[len(body) - stop :]}"
        fixed = " ".join(fixed.split())
        out = out.replace(sentence, fixed, 1)
        repairs += [{"sentence": claim, "from": n, "to": to} for n in bad]
    if repairs:
        claims = [ids for sentence, ids in parse_citations(out) if not is_sources_line(sentence)]
        cited = list(dict.fromkeys(n for ids in claims for n in ids if n in by_n))
        out = "\n".join(
            ("Sources: " + ", ".join(f"[{n}]" for n in cited)) if is_sources_line(line) and cited else line
            for line in out.splitlines()
        )
    return out, repairs


def is_model_answer(generated: Generated, *, use_llm: bool, abstained: bool) -> bool:
    """Whether the answer is the language model's own text: not an abstention, not the extractive answer, not
    the extractive fallback after the model failed. Only such an answer has its citations and claims repaired."""
    return use_llm and not abstained and generated.error is None


def support_scorer(scoring: Scoring, evidence: Sequence[Evidence]) -> Callable[[str, str], float]:
    """How well a passage supports a claim: the mean of lexical coverage and the best cosine between the
    claim and one of the passage's sentences (vectors from the index; claims embedded once each)."""
    vectors: dict[str, np.ndarray] = {}
    # An extractive claim is an evidence sentence: its vector is already in the index.
    claims: dict[str, np.ndarray] = {}
    for e in evidence:
        v = scoring.models.reader.sentence_vectors(e.candidate.chunk_id)
        if v is not None and len(v):
            vectors[e.candidate.chunk.text] = v
            units = sentence_units(e.candidate.chunk.text)
            if len(units) == len(v):
                claims.update((claim_key(u), vec) for u, vec in zip(units, v, strict=True))

    def support(claim: str, passage: str) -> float:
        lexical = lexical_support(claim, passage)
        units = vectors.get(passage)
        if units is None:
            return lexical
        key = claim_key(claim)
        if key not in claims:
            quoted = claims.get(shown_sentence(key))
            claims[key] = quoted if quoted is not None else scoring.queries.vector(claim)
        return 0.5 * lexical + 0.5 * max(0.0, float(np.max(units @ claims[key])))

    return support


# ----------------------------------------------------------------------------- the stage


class Citations:
    """Is each [n] valid, and does its passage support the sentence? With ``repair`` a model's [n] that points
    next to the passage it used is re-pointed, never invented."""

    name = "citations"

    def __init__(self, scoring: Scoring, *, repair: bool) -> None:
        self.scoring, self.repair = scoring, repair

    def run(self, state: State) -> State:
        answer, evidence = state.answer, state.evidence
        with state.recorder.stage(self.name) as d:
            support = support_scorer(self.scoring, evidence)
            if state.model_answer and self.repair:
                answer, repairs = repair_citations(answer, evidence, support=support)
                if repairs:
                    d.update(repairs=repairs, model_answer=state.generated.text)
            citations = check_citations(answer, evidence, support=support)
            d.update(
                total=len(citations),
                invalid=sum(not c.valid for c in citations),
                unsupported=sum(not c.supported for c in citations),
            )
        return replace(state, answer=answer, support=support, citations=citations)
