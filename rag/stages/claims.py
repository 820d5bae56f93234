"""Claim-level verification: split an answer into claims and judge every claim against the evidence.

A citation check that compares words and cosines calls "Yes, we can refund the gift card [2]" supported by
"Gift cards are not refundable" (same words, high cosine). Here each claim is compared with the passage
sentence that best matches it, and the comparison looks for what flips meaning while keeping the words:
polarity (not, no, never, cannot, non-...), numbers and their units (dates, durations, amounts), comparators
and quantifiers (at least / at most, before / after, all / none, ...), and swapped names or form ids.

Verdicts:
- ``supported``: a passage (the cited one, or for an uncited claim the one found for it) holds the claim and
  its best-matching sentence does not conflict with it;
- ``contradicted``: the sentence that best matches the claim says otherwise (a conflict above);
- ``unsupported``: the claim cites passages, none of which holds it (and none contradicts it);
- ``uncited``: the claim cites nothing and no passage holds it.

A 'Sources: [1], [2]' line is not a claim and never counts as support. The functions here are pure: similarity
from sentence vectors is passed in (``cosine``), so the same code runs in the pipeline and in the measurement
over the perturbed-claim set (``rag.evaluation.claimset``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rag.config import Settings
from rag.errors import GenerationError
from rag.models.sentences import sentence_units
from rag.protocols import LLM
from rag.request import State
from rag.stages.citations import (
    check_citations,
    claim_key,
    is_sources_line,
    lexical_support,
    parse_citations,
    repair_citations,
)
from rag.stages.extractive import shown_sentence
from rag.stages.generate import Extractive, Generate
from rag.stages.shared import Scoring
from rag.text import bm25_tokens, normalize
from rag.text.lexicon import CARDINALS, MODALS, MONTHS, NEGATIONS
from rag.types import Claim, ClaimCheck, Evidence, Excerpt, Verdict

VERDICTS: tuple[Verdict, ...] = ("supported", "unsupported", "contradicted", "uncited")

# (claim, passage sentences) -> cosine of the claim with each sentence, in order. None: lexical only.
Cosine = Callable[[str, Sequence[str]], Sequence[float]]

SUPPORT_THRESHOLD = 0.35  # the citation check's support threshold (passage-level score), kept
MATCH_THRESHOLD = (
    0.45  # a sentence this similar to a claim is about the same thing: a conflict with it counts (tune split)
)


# ------------------------------------------------------------------------------------------ splitting
_ANSWER_PARTICLE = re.compile(
    r"^\s*(?:yes|no|not yet|correct|right|sure)\b\s*[,.;:!\u2014-]\s*", re.IGNORECASE
)
_HAS_WORDS = re.compile(r"[^\W\d_]{2,}")
_HEADINGS = re.compile(r"^\s*(?:quotes?|answer|sources?)\s*:?\s*$", re.IGNORECASE)


def split_claims(answer: str) -> list[Claim]:
    """The answer's claims: its sentences, without 'Sources:' lines, bare ids or headings. A bare 'Yes.' or
    'No.' is kept: it is the answer, and the sentence after it says what it affirms or denies."""
    out: list[Claim] = []
    for sentence, ids in parse_citations(answer):
        if is_sources_line(sentence):
            continue
        text = claim_key(sentence)
        if not _HAS_WORDS.search(text) or _HEADINGS.match(text):
            continue
        out.append(Claim(len(out), sentence, text, tuple(ids)))
    return out


# ------------------------------------------------------------------------------------------ comparison
_NEG_WORDS = NEGATIONS | frozenset(
    "never cannot none nothing nobody neither without nowhere "
    "excluded prohibited forbidden ineligible unavailable disallowed non".split()
)
_NEG_PREFIX = re.compile(
    r"^(?:non|un|in|ir|im|il)-?(refundable|returnable|reimbursable|eligible|paid|allowed|"
    r"permitted|available|acceptable|transferable|required|necessary|approved)$"
)
_EXCEPTION = re.compile(r"\b(?:except|unless|other than|apart from|excluding|but)\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?(?:-[a-z]+)*")

# Pairs whose members flip a rule when swapped. Each side is a tuple of patterns (word-bounded, lowercase).
OPPOSITES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (
        ("at least", "minimum", "no less than", "or more", "no fewer than"),
        ("at most", "maximum", "no more than", "or less", "up to", "or fewer"),
    ),
    (
        ("more than", "over", "above", "exceeds?", "exceeding", "longer than", "greater than"),
        ("less than", "under", "below", "fewer than", "shorter than"),
    ),
    (("before", "prior to", "in advance", "ahead of"), ("after",)),
    (("earliest",), ("latest",)),
    (("always",), ("never",)),
    (("every", "all", "any"), ("no", "none")),
    (("full-time", "full time"), ("part-time", "part time")),
    (("international", "abroad"), ("domestic", "within the country")),
    (("required", "mandatory"), ("optional", "voluntary")),
    (("paid",), ("unpaid",)),
    (("increase[sd]?",), ("decrease[sd]?", "reduce[sd]?")),
    (("higher",), ("lower",)),
    (("earlier",), ("later",)),
    (("first",), ("last",)),
    (("business days?",), ("calendar days?",)),
    (("approve[sd]?", "approval"), ("reject(?:s|ed)?", "rejection")),
    (("allowed", "permitted"), ("prohibited", "forbidden")),
    (("inside",), ("outside",)),
)
_OPPOSITE_RES = tuple(
    (re.compile(r"\b(?:" + "|".join(a) + r")\b"), re.compile(r"\b(?:" + "|".join(b) + r")\b"))
    for a, b in OPPOSITES
)

# Multiplicatives and fractions count too ("twice a year", "half a day").
_NUMBER_WORDS: dict[str, float] = {**CARDINALS, "once": 1, "twice": 2, "half": 0.5, "single": 1, "double": 2}
_UNIT_ALIASES = {
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
    "yr": "year",
    "yrs": "year",
    "hour": "hour",
    "hours": "hour",
    "hr": "hour",
    "hrs": "hour",
    "minute": "minute",
    "minutes": "minute",
    "min": "minute",
    "mins": "minute",
    "second": "second",
    "seconds": "second",
    "mile": "mile",
    "miles": "mile",
    "km": "km",
    "kilometre": "km",
    "kilometres": "km",
    "kilometer": "km",
    "kilometers": "km",
    "percent": "%",
    "per cent": "%",
    "%": "%",
    "people": "person",
    "persons": "person",
    "person": "person",
    "employees": "person",
    "members": "person",
    "times": "times",
    "characters": "character",
    "character": "character",
    "digits": "character",
    "gb": "gb",
    "mb": "mb",
    "nights": "night",
    "night": "night",
    "segments": "segment",
    "usd": "$",
    "dollars": "$",
    "eur": "eur",
    "euros": "eur",
    "euro": "eur",
    "€": "eur",
    "£": "gbp",
    "$": "$",
}
_QUANTITY = re.compile(
    r"(?P<cur>[$€£])?\s?(?P<num>(?<![\d.,])\d+(?:[,.]\d+)*(?![\d])|\b(?:"
    + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
    + r")\b)(?P<ord>st|nd|rd|th\b)?",
    re.IGNORECASE,
)
_QUALIFIERS = {
    "business",
    "calendar",
    "working",
    "consecutive",
    "full",
    "paid",
    "unpaid",
    "unused",
    "more",
    "additional",
    "extra",
    "whole",
    "of",
    "annual",
}
_PER = {"per", "a", "an", "each", "every"}


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str  # '' when the number stands alone ('2024', a list count); 'day/week' for '3 days per week'
    text: str


def _unit(word: str) -> str:
    return _UNIT_ALIASES.get(word, word if word in MONTHS else "")


def quantities(text: str) -> list[Quantity]:
    """Numbers with the unit that follows (or the currency before) them: '$1,200' -> (1200, '$'),
    '45 days' -> (45, 'day'), 'forty-five days' -> (45, 'day'), '15%' -> (15, '%'), '1 March' -> (1, 'march'),
    '$0.70 per mile' -> (0.7, '$/mile'). Ids ('EXP-7', 'L4') are names, not numbers."""
    text = normalize(text).lower()
    text = re.sub(
        r"\b(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)-(one|two|three|four|five|six|"
        r"seven|eight|nine)\b",
        lambda m: str(_NUMBER_WORDS[m.group(1)] + _NUMBER_WORDS[m.group(2)]),
        text,
    )
    out: list[Quantity] = []
    for m in _QUANTITY.finditer(text):
        raw = m.group("num")
        tail = re.match(r"(am|pm|x\d+)\b", text[m.end() : m.end() + 6])
        if re.search(r"[a-z]-?$", text[: m.start("num")]) or (
            not tail and re.match(r"[a-z]", text[m.end() : m.end() + 1])
        ):
            continue  # 'EXP-7', 'L4', 'sev1'
        if raw in _NUMBER_WORDS:
            value = float(_NUMBER_WORDS[raw])
        else:
            digits = raw.replace(",", "")
            try:
                value = float(digits) if digits.count(".") <= 1 else float(int(digits.replace(".", "")))
            except ValueError:
                continue
        follow = re.match(r"(?:\s*-?\s*(?:%|[a-z€£$]+))*", text[m.end() : m.end() + 60])
        rest = re.findall(r"%|[a-z€£$]+", follow.group(0) if follow else "")
        i = 0
        while i < len(rest) - 1 and rest[i] in _QUALIFIERS:
            i += 1
        cur = m.group("cur")
        unit = _UNIT_ALIASES.get(cur, "") if cur else ""
        before = re.search(r"\b(usd|eur|euros?|gbp|dollars?)\s*$", text[: m.start("num")])
        if before and not cur:
            unit = {"usd": "$", "dollar": "$", "dollars": "$", "gbp": "gbp"}.get(before.group(1), "eur")
        if tail:
            out.append(
                Quantity(value, tail.group(1) if tail.group(1) in ("am", "pm") else "x", m.group(0).strip())
            )
            if tail.group(1).startswith("x"):
                out.append(Quantity(float(tail.group(1)[1:]), "x", tail.group(0)))
            continue
        if not unit and rest and (_unit(rest[i]) or rest[0] == "%"):
            unit = "%" if rest[0] == "%" else _unit(rest[i])
            i += 1
        elif not unit and rest and rest[0] in MONTHS:
            unit = rest[0]
        if unit and i + 1 < len(rest) and rest[i] in _PER and _unit(rest[i + 1]):
            unit = f"{unit}/{_unit(rest[i + 1])}"
        out.append(Quantity(value, unit, " ".join([text[m.start() : m.end()].strip(), *rest[:i]])))
    return out


def _words(text: str) -> list[str]:
    return _WORD.findall(normalize(text).lower())


# "no later than 30 days", "not more than 5": a bound, not a denial (its direction is the OPPOSITES check's job)
_BOUND = re.compile(
    r"\b(?:no|not)\s+(?:later|earlier|sooner|more|less|fewer|longer|shorter|greater|higher|lower)\s+than\b"
)


def negated(text: str) -> bool:
    """Does the text deny (not, no, never, cannot, n't, non-refundable, excluded, ...)? By parity: 'are not
    prohibited' and 'is not unavailable' affirm. A bound ('no later than', 'not more than') denies nothing."""
    words = _BOUND.sub(" ", " ".join(_words(text))).split()
    cues = sum(w in _NEG_WORDS or w.endswith("n't") or bool(_NEG_PREFIX.match(w)) for w in words)
    return cues % 2 == 1


def _main_and_exception(sentence: str) -> tuple[str, str]:
    m = _EXCEPTION.search(sentence)
    return (sentence[: m.start()], sentence[m.start() :]) if m else (sentence, "")


_ENTITY = re.compile(r"\b(?:[A-Z]{2,}[A-Z0-9]*-\d+[A-Z]?|[A-Z]{2,}\d*|[A-Z][a-z]+(?:\s[A-Z][a-z]+)*)\b")
COMMON_CAPS = {
    "The",
    "A",
    "An",
    "If",
    "In",
    "On",
    "For",
    "Yes",
    "No",
    "You",
    "Your",
    "We",
    "Our",
    "It",
    "This",
    "That",
    "They",
    "Each",
    "Every",
    "All",
    "Any",
    "After",
    "Before",
    "When",
    "Within",
    "Employees",
    "Customers",
    "Items",
    "Staff",
    "Team",
    "Only",
    "Not",
    "To",
    "As",
    "At",
    "By",
    "From",
    "Of",
    "With",
    "There",
    "Also",
    "Then",
    "So",
    "Claims",
    "Meals",
    "Using",
    "Unused",
    "Book",
    "Submit",
    "Call",
    "Ask",
    "Questions",
    "Form",
    "Forms",
    "Sick",
    "Office",
    "New",
    "I",
    "Do",
    "Does",
    "Can",
    "May",
    "Must",
    "Is",
    "Are",
    "Be",
    "Until",
}


def entities(text: str) -> set[str]:
    """Names and ids a claim could swap: form and control ids ('EXP-7', 'SEC-9'), acronyms, capitalised names
    not opening a sentence and not common sentence openers."""
    out: set[str] = set()
    text = normalize(text)
    for m in _ENTITY.finditer(text):
        name = m.group(0)
        first = name.split()[0]
        opener = not re.search(r"\S", text[: m.start()]) or re.search(r"[.!?:;,]\s*$", text[: m.start()])
        if first in COMMON_CAPS or (opener and not first.isupper()):
            name = " ".join(name.split()[1:])
        if not name or name in COMMON_CAPS or name.lower() in MONTHS:
            continue
        out.add(name)
    return out


def _same(a: Quantity, b: Quantity) -> bool:
    return abs(a.value - b.value) < 1e-9 and (a.unit == b.unit or not a.unit or not b.unit)


@dataclass(frozen=True)
class _Facts:
    """What ``conflicts`` reads from one side of a comparison, computed once per text (an answer's claims are
    compared with every sentence of every passage, and the same sentences recur across questions)."""

    exception: str  # from the first 'except' / 'unless' / 'but' on, '' when none
    exception_tokens: frozenset[str]
    tokens: frozenset[str]
    main_negated: bool
    quantities: tuple[Quantity, ...]
    words: str  # lower-cased words joined by spaces
    opposite_counts: tuple[tuple[int, int], ...]  # matches of each _OPPOSITE_RES pair in ``words``
    entities: frozenset[str]


@functools.lru_cache(maxsize=20_000)
def _facts(text: str) -> _Facts:
    main, exception = _main_and_exception(text)
    words = " ".join(_words(text))
    return _Facts(
        exception,
        frozenset(bm25_tokens(exception)) if exception else frozenset(),
        frozenset(bm25_tokens(text)),
        negated(main),
        tuple(quantities(text)),
        words,
        tuple((len(a.findall(words)), len(b.findall(words))) for a, b in _OPPOSITE_RES),
        frozenset(entities(text)),
    )


def conflicts(claim: str, sentence: str, *, context: str = "") -> tuple[str, ...]:
    """What in ``claim`` says otherwise than ``sentence`` (the evidence sentence that best matches it).

    ``context`` is all the evidence text: a name the best sentence lacks but another passage mentions is not
    invented. Numbers are compared with the best sentence only: "90 days" against "45 days" conflicts even
    when "90 days" occurs elsewhere in the passage."""
    out: list[str] = []
    body = _ANSWER_PARTICLE.sub("", claim)
    c, s = _facts(body), _facts(sentence)
    # Polarity: the claim denies what the sentence's rule affirms, or affirms what it denies. A claim that
    # speaks about the exception ("... where the law requires it") may take either side.
    about_exception = False
    if s.exception and not c.exception:  # a claim that states the exception too is compared rule to rule
        ex = s.exception_tokens - {"except", "unless", "but"}
        about_exception = bool(ex) and len(ex & c.tokens) / len(ex) >= 0.5
    if not about_exception and c.main_negated != s.main_negated:
        out.append(
            f"polarity: the claim {'denies' if c.main_negated else 'affirms'} what the passage "
            f"{'denies' if s.main_negated else 'affirms'}"
        )
    # Numbers and units.
    cq, sq = c.quantities, s.quantities
    for q in cq:
        if any(_same(q, x) for x in sq):
            continue
        same_unit = [x for x in sq if x.unit and x.unit == q.unit]
        same_value = [
            x for x in sq if abs(x.value - q.value) < 1e-9 and x.unit != q.unit and x.unit and q.unit
        ]
        if same_value:
            out.append(
                f"unit: the claim says '{q.text}' ({q.unit}), the passage '{same_value[0].text}' "
                f"({same_value[0].unit})"
            )
        elif same_unit:
            out.append(f"number: the claim says '{q.text}', the passage '{same_unit[0].text}'")
        elif not q.unit and sq:
            unitless = [x for x in sq if not x.unit]
            if unitless:
                out.append(f"number: the claim says '{q.text}', the passage '{unitless[0].text}'")
    # Comparators and quantifiers.
    for (a, b), (ca, cb), (sa, sb) in zip(_OPPOSITE_RES, c.opposite_counts, s.opposite_counts, strict=True):
        # by counts: 'at most two days ... up to 3 days' against 'at least 2 days ... up to 3 days' swaps one
        if (ca > sa and cb < sb) or (cb > sb and ca < sa):
            claim_re, passage_re = (a, b) if ca > sa else (b, a)
            cx, sy = claim_re.search(c.words), passage_re.search(s.words)
            out.append(
                f"condition: the claim says '{cx.group(0) if cx else ''}', the passage "
                f"'{sy.group(0) if sy else ''}'"
            )
    # Swapped names and ids: the claim names one the sentence lacks, where the sentence names another.
    missing = sorted(e for e in c.entities if e not in sentence and e not in context)  # names keep capitals
    other = sorted(e for e in s.entities if e not in body) or sorted(s.entities)
    if missing and other:  # a name no passage mentions, in a sentence about named things
        out.append(f"entity: the claim names '{missing[0]}', the passage '{other[0]}'")
    return tuple(dict.fromkeys(out))


# ------------------------------------------------------------------------------------------ matching
_NOT_CONTENT = _NEG_WORDS | MODALS | {"yes", "also", "only"}


@functools.lru_cache(maxsize=20_000)
def _content(text: str) -> frozenset[str]:
    return frozenset(t for t in bm25_tokens(text) if not t[0].isdigit() and t not in _NOT_CONTENT)


def sentence_similarity(
    claim: str, sentences: Sequence[str], cosine: Sequence[float] | None = None
) -> list[float]:
    """How much each sentence is about what the claim says: content-word overlap (numbers and negations left out,
    so '90 days' and 'not' do not decide which sentence to compare with), blended with the cosine when given."""
    c = _content(claim)
    out = []
    for i, s in enumerate(sentences):
        st = _content(s)
        lex = (len(c & st) / len(c) * 0.7 + len(c & st) / len(st) * 0.3) if c and st else 0.0
        out.append(0.5 * lex + 0.5 * max(0.0, float(cosine[i])) if cosine is not None else lex)
    return out


@dataclass(frozen=True)
class _Match:
    n: int
    chunk_id: str
    sentence: str
    similarity: float
    support: float
    conflicts: tuple[str, ...] = field(default=())


def _passage(e: Evidence) -> str:
    c = e.candidate.chunk
    return f"{c.title}\n{c.section}\n{c.text}"


def _best_match(
    claim: str, e: Evidence, context: str, cosine: Cosine | None, support: Callable[[str, str], float] | None
) -> _Match:
    chunk = e.candidate.chunk
    units = sentence_units(chunk.text) or [chunk.text]
    cos = cosine(claim, units) if cosine is not None else None
    sims = sentence_similarity(claim, units, cos)
    i = max(range(len(units)), key=lambda j: sims[j])
    score = support(claim, chunk.text) if support is not None else lexical_support(claim, _passage(e))
    return _Match(e.n, chunk.chunk_id, units[i], sims[i], score, conflicts(claim, units[i], context=context))


def check_claims(
    answer: str,
    evidence: Sequence[Evidence],
    *,
    support: Callable[[str, str], float] | None = None,
    cosine: Cosine | None = None,
    threshold: float = SUPPORT_THRESHOLD,
    match_threshold: float = MATCH_THRESHOLD,
) -> list[ClaimCheck]:
    """A verdict for every claim of ``answer`` (see the module docstring).

    ``support(claim, passage_text)`` is the citation check's passage-level score (default: lexical coverage);
    ``cosine`` gives sentence similarities. A passage supports a claim when its score reaches ``threshold``
    and the claim's best-matching sentence in it does not conflict with the claim. A conflict with the
    sentence that matches the claim best across all the evidence (similarity >= ``match_threshold``, and at
    least as close as the supporting sentence) makes the claim contradicted, cited or not."""
    by_n = {e.n: e for e in evidence}
    all_text = "\n".join(e.candidate.chunk.text for e in evidence)
    out: list[ClaimCheck] = []
    for claim in split_claims(answer):
        matches = {e.n: _best_match(claim.text, e, all_text, cosine, support) for e in evidence}
        cited = [n for n in claim.cited if n in by_n]

        def holds(m: _Match) -> bool:
            return m.support >= threshold and m.similarity >= match_threshold * 0.5 and not m.conflicts

        closest = max(matches.values(), key=lambda m: (m.similarity, -m.n), default=None)
        pool = [matches[n] for n in cited] if claim.cited else list(matches.values())
        holding = [m for m in pool if holds(m)]
        best_hold = max(holding, key=lambda m: (m.similarity, m.support, -m.n), default=None)
        if (
            closest is not None
            and closest.conflicts
            and closest.similarity >= match_threshold
            and (best_hold is None or closest.similarity >= best_hold.similarity)
        ):
            out.append(
                ClaimCheck(
                    claim,
                    "contradicted",
                    closest.n,
                    closest.chunk_id,
                    closest.sentence,
                    closest.support,
                    "; ".join(closest.conflicts),
                    closest.conflicts,
                )
            )
            continue
        if best_hold is not None:
            why = f"[{best_hold.n}] holds it" if cited else f"no marker; [{best_hold.n}] holds it"
            out.append(
                ClaimCheck(
                    claim,
                    "supported",
                    best_hold.n,
                    best_hold.chunk_id,
                    best_hold.sentence,
                    best_hold.support,
                    why,
                    attributed=not cited,
                )
            )
            continue
        conflicting = [m for m in pool if m.conflicts and m.similarity >= match_threshold]
        if conflicting:
            m = max(conflicting, key=lambda m: m.similarity)
            out.append(
                ClaimCheck(
                    claim,
                    "contradicted",
                    m.n,
                    m.chunk_id,
                    m.sentence,
                    m.support,
                    "; ".join(m.conflicts),
                    m.conflicts,
                )
            )
            continue
        verdict: Verdict = "unsupported" if claim.cited else "uncited"
        near = max(pool, key=lambda m: (m.support, -m.n), default=None)
        if near is None:
            reason = "no evidence" if not cited else "cites no passage in the evidence"
            out.append(
                ClaimCheck(
                    claim,
                    verdict,
                    None,
                    None,
                    None,
                    0.0,
                    reason if not claim.cited else "cites no passage in the evidence",
                )
            )
            continue
        reason = (
            f"[{near.n}] does not hold it (support {near.support:.2f})"
            if cited
            else "no marker, and no passage holds it"
        )
        if claim.cited and not cited:
            reason = "cites no passage in the evidence"
        out.append(
            ClaimCheck(
                claim,
                verdict,
                near.n if cited else None,
                near.chunk_id if cited else None,
                near.sentence,
                near.support,
                reason,
            )
        )
    return out


def verified(checks: Sequence[ClaimCheck]) -> bool:
    """Every claim supported (and at least one claim): the only state the UI calls 'Citations checked'."""
    return bool(checks) and all(c.verdict == "supported" for c in checks)


def failed(checks: Sequence[ClaimCheck]) -> list[ClaimCheck]:
    return [c for c in checks if c.verdict != "supported"]


def summary(checks: Sequence[ClaimCheck]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in checks) for v in VERDICTS}


def add_missing_markers(answer: str, checks: Sequence[ClaimCheck]) -> tuple[str, list[dict[str, object]]]:
    """Write the marker of the passage found for each uncited claim after its sentence ('... 45 days [1].').

    Only claims judged ``supported`` with an attributed passage get one: a marker is never invented for a
    claim no passage holds. Returns the new answer and one record per marker added ({"sentence", "to"})."""
    out, added = answer, []
    for c in checks:
        if not (c.attributed and c.verdict == "supported" and c.n is not None) or c.claim.sentence not in out:
            continue
        body = c.claim.sentence.rstrip()
        stop = len(body) - len(body.rstrip(".!?"))
        fixed = f"{body[: len(body) - stop].rstrip()} [{c.n}]{body[len(body) - stop :]}"
        out = out.replace(c.claim.sentence, fixed, 1)
        added.append({"sentence": c.claim.text, "to": c.n})
    return out, added


def fallback_notice(failures: Sequence[ClaimCheck]) -> str:
    """Why an LLM answer whose claims still fail after one repair is replaced by quoted evidence: how many
    claims fail, and how (the first contradiction and its reason, else "not supported"). ``failures``: the
    repaired answer's failed claims, or the first answer's when the repair produced none."""
    worst = next((c for c in failures if c.verdict == "contradicted"), failures[0])
    contradicted = worst.verdict == "contradicted"
    return (
        f"Note: the language model's answer was not shown: {len(failures)} of its claims "
        f"{'contradict' if contradicted else 'are not supported by'} the evidence"
        f"{f' ({worst.reason})' if contradicted else ''}, also after one repair. "
        "The sentences above are quoted from the evidence instead."
    )


def claim_cosine(
    scoring: Scoring, evidence: Sequence[Evidence]
) -> Callable[[str, Sequence[str]], list[float]]:
    """Cosines between a claim and passage sentences, from the sentence vectors stored at ingestion (a claim
    that quotes an evidence sentence reuses its vector; other claims are embedded once each)."""
    known = scoring.stored_sentence_vectors(evidence)
    by_key = {claim_key(u): v for u, v in known.items()}

    def cosine(claim: str, sentences: Sequence[str]) -> list[float]:
        missing = [x for x in dict.fromkeys(sentences) if x not in known]
        if missing:
            known.update(zip(missing, scoring.embed(missing), strict=True))
        key = claim_key(claim)
        vector = by_key.get(key)
        if vector is None:
            vector = by_key.get(shown_sentence(key))
        if vector is None:
            vector = scoring.queries.vector(claim)
        return [float(known[x] @ vector) for x in sentences]

    return cosine


# ----------------------------------------------------------------------------- the stage


class Claims:
    """Every claim, cited or not, against the evidence sentence that best matches it."""

    name = "claims"

    def __init__(self, settings: Settings, scoring: Scoring, extractive: Extractive) -> None:
        self.settings, self.scoring, self.extractive = settings, scoring, extractive

    def run(self, state: State) -> State:
        assert state.support is not None, "the citations stage scores support before the claims are checked"
        answer, citations = state.answer, state.citations
        with state.recorder.stage(self.name) as d:
            checked, claims, verification, excerpts = self.verify(
                state, state.llm if state.model_answer else None
            )
            if checked != answer:
                answer = checked
                citations = check_citations(checked, state.evidence, support=state.support)
            d.update(verification)
        return replace(
            state,
            answer=answer,
            citations=citations,
            claims=claims,
            excerpts=excerpts,
            verification={key: v for key, v in verification.items() if key != "claims"},
        )

    def verify(
        self, state: State, llm: LLM | None
    ) -> tuple[str, list[ClaimCheck], dict[str, Any], tuple[Excerpt, ...]]:
        """Check every claim of the answer. With ``llm`` (an LLM answer): uncited claims a passage holds get
        its marker, and an answer with a failed claim gets one repair call naming the failed claims; if the
        repair fails too, the answer is the extractive one with a notice saying why. Returns the answer, the
        verdicts, the trace record (the model's text, every verdict, the repair) and the excerpts the answer
        shows (the extractive fallback's)."""
        evidence, answer, repair_on = state.evidence, state.answer, self.settings.citation_repair
        support: Callable[[str, str], float] | None = state.support
        assert support is not None
        if state.abstained or not evidence:
            return answer, [], {"checked": False, "reason": "abstained: no claim to check"}, state.excerpts
        notice = state.notice
        body = answer[: -len(notice)] if notice and answer.endswith(notice) else answer
        cosine = claim_cosine(self.scoring, evidence)
        checks = check_claims(body, evidence, support=support, cosine=cosine)
        record: dict[str, Any] = {
            "model_answer": body,
            "claims": [c.to_json() for c in checks],
            "verdicts": summary(checks),
        }
        if llm is not None and repair_on:
            marked, added = add_missing_markers(body, checks)
            if added:  # a claim the model left unmarked gets the passage that holds it
                body, checks = marked, check_claims(marked, evidence, support=support, cosine=cosine)
                record["markers_added"] = added
        if llm is None or not failed(checks):
            record["verified"] = verified(checks)
            return body + notice, checks, record, state.excerpts
        from rag.stages.generate import repair_claims

        assert state.prompt is not None
        bad = failed(checks)
        repair: dict[str, Any] = {
            "failed": [{"text": c.claim.text, "verdict": c.verdict, "reason": c.reason} for c in bad]
        }
        record["repair"] = repair
        try:
            repaired = repair_claims(state.prompt, evidence, body, bad, llm, self.settings)
            text = repaired.text
            repair["model_answer"] = text
            if repair_on:
                text, moved = repair_citations(text, evidence, support=support)
                again = check_claims(text, evidence, support=support, cosine=cosine)
                text, added = add_missing_markers(text, again)
                if moved or added:
                    again = check_claims(text, evidence, support=support, cosine=cosine)
                    repair.update(citation_repairs=moved, markers_added=added)
            else:
                again = check_claims(text, evidence, support=support, cosine=cosine)
            repair.update(
                claims=[c.to_json() for c in again], verdicts=summary(again), verified=verified(again)
            )
        except GenerationError as exc:
            again, repair["error"] = [], str(exc)
        if again and verified(again):
            record.update(repaired=True, verified=True)
            return text + notice, again, record, state.excerpts
        # Neither answer holds: quote the evidence, and say why the model's answer is not shown.
        why = fallback_notice(failed(again) or bad)
        quoted = self.extractive.of(state)
        fallback, notice = quoted.text, Generate.notice_for(state, quoted)
        final = check_claims(fallback, evidence, support=support, cosine=cosine)
        record.update(
            repaired=False,
            fallback="extractive",
            notice=why,
            verified=verified(final),
            fallback_claims=[c.to_json() for c in final],
        )
        return f"{fallback}\n\n{why}{notice}", final, record, quoted.excerpts
