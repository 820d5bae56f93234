"""Graders: evidence coverage (the reference definition), answer matching at three strictness levels, and
abstention detection.

* ``paper``      the "Lost in the Middle" metric: any gold answer is a substring of the output after SQuAD-style
                 normalisation (lower case, no punctuation, no articles). Quick, and fooled both ways.
* ``normalised`` whole-word match after Unicode, number-word ("forty-five" -> 45) and thousands-separator
                 normalisation, so "forty-five days" passes a check for "45 days".
* ``strict``     ``normalised`` plus: a mention that is negated or contradicted ("30 days, not 45 days",
                 "instead of 45 days", "45 days is outdated") does not count, and neither does an answer that
                 contains a ``must_not_contain`` string. A substring grader passes "30 days, not 45 days".
"""

from __future__ import annotations

import difflib
import re
import string
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

from rag.text import normalize
from rag.text.lexicon import SCALES, TENS, UNITS

GRADERS = ("paper", "normalised", "strict")

# ---------------------------------------------------------------------------------------------------------------
# Evidence coverage. Copied from ../shared/tools/grade_evidence.py (norm, covered: same logic and thresholds), the
# reference grader the project is judged by, so our numbers and the reference's agree; keep the two in step.
# One deviation: with no passage text at all the reference raises IndexError; here that is "not covered".
# ---------------------------------------------------------------------------------------------------------------
_MD = re.compile(r"[*_`#>\[\]]")


def norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _MD.sub(" ", text)
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def covered(quote: str, passages: list[str], ratio: float = 0.85) -> bool:
    """At least `ratio` of the quote's words appear in order within a window of at most 1.5x its length."""
    q = norm(quote).split()
    if not q:
        return False
    qs, hays = " ".join(q), [norm(p) for p in passages]
    if any(qs in h for h in hays) or qs in " ".join(hays):
        return True
    words, span, qset = " ".join(hays).split(), max(len(q) + 2, int(len(q) * 1.5)), set(q)
    if not words:
        return False
    for start in range(max(1, len(words) - len(q) // 2)):
        if words[start] in qset:
            m = difflib.SequenceMatcher(None, q, words[start : start + span], autojunk=False)
            if sum(b.size for b in m.get_matching_blocks()) / len(q) >= ratio:
                return True
    return False


def states(sentence: str, quote: str) -> bool:
    """The sentence holds the quote, or lies in it (at least half its words and five in order): whether an
    evidence sentence states a gold quote (the reader's label)."""
    s, q = norm(sentence).split(), norm(quote).split()
    if not s or not q:
        return False
    if covered(quote, [sentence]):
        return True
    blocks = difflib.SequenceMatcher(None, s, q, autojunk=False).get_matching_blocks()
    matched = sum(b.size for b in blocks)
    return matched >= min(5, len(q)) and matched / len(s) >= 0.5


def may_cover(quote: str, passage: str, ratio: float = 0.85) -> bool:
    """Cheap necessary condition for ``covered(quote, [passage])``: enough of the quote's words occur at all.
    Lets callers skip the quadratic check for most chunks of a large index."""
    q = norm(quote).split()
    if not q:
        return False
    have = set(norm(passage).split())
    return sum(1 for w in q if w in have) / len(q) >= ratio


def best_gold_at_edge(first_quote: str, evidence: Sequence[dict]) -> bool:
    """grade_evidence.py's definition: the passage covering the first quote sits in the first or last bundle.

    ``evidence`` is the ``rag ask --json`` evidence list (dicts with ``n``, ``text``, ``bundle``)."""
    ev = sorted(evidence, key=lambda e: e.get("n", 0))
    texts = [e.get("text", "") for e in ev]
    bundles = [e.get("bundle") if e.get("bundle") is not None else f"#{i}" for i, e in enumerate(ev)]
    pos = [i for i, t in enumerate(texts) if covered(first_quote, [t])]
    return bool(pos) and bundles[pos[0]] in (bundles[0], bundles[-1])


def first_covering(quote: str, evidence: Sequence[dict]) -> int | None:
    """The prompt position ``n`` of the first passage that covers ``quote`` on its own, or None."""
    return next(
        (
            e.get("n")
            for e in sorted(evidence, key=lambda e: e.get("n", 0))
            if covered(quote, [e.get("text", "")])
        ),
        None,
    )


def at_prompt_edge(n: int | None, evidence: Sequence[dict]) -> bool:
    """Position ``n`` is the first or the last passage of the prompt: where the model reads best."""
    ns = [e.get("n", 0) for e in evidence]
    return n is not None and bool(ns) and n in (min(ns), max(ns))


def rerank_top(evidence: Sequence[dict]) -> dict | None:
    """The passage of the prompt the reranker scored highest (ties: the better rank, then the earlier position);
    None when no passage has a rerank score."""
    reranked = [e for e in evidence if e.get("rerank_score") is not None]
    if not reranked:
        return None
    return min(reranked, key=lambda e: (-e["rerank_score"], e.get("rerank_rank") or 10**9, e.get("n", 0)))


# ---------------------------------------------------------------------------------------------------------------
# The paper's metric (Liu et al., lost-in-the-middle/src/lost_in_the_middle/metrics.py: best_subspan_em)
# ---------------------------------------------------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def paper_normalize(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation, drop articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def paper_match(output: str, answers: Iterable[str]) -> bool:
    pred = paper_normalize(output)
    return any(paper_normalize(g) in pred for g in answers if paper_normalize(g))


# ---------------------------------------------------------------------------------------------------------------
# Number words
# ---------------------------------------------------------------------------------------------------------------
_NUMBER_WORD = "|".join(sorted([*UNITS, *TENS, *SCALES], key=len, reverse=True))
_NUMBER_RUN = re.compile(rf"\b(?:{_NUMBER_WORD})(?:(?:[\s-]+|\s+and\s+)(?:{_NUMBER_WORD}))*\b")


def _words_to_int(words: list[str]) -> int | None:
    total = current = 0
    seen = False
    for w in words:
        if w in UNITS:
            current += UNITS[w]
        elif w in TENS:
            current += TENS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in SCALES:
            total += max(current, 1) * SCALES[w]
            current = 0
        else:
            return None
        seen = True
    return total + current if seen else None


def numbers_to_digits(text: str) -> str:
    """'forty-five days' -> '45 days'; 'one hundred and twenty' -> '120'. Lower-case input expected."""

    def repl(m: re.Match[str]) -> str:
        words = [w for w in re.split(r"[\s-]+", m.group(0)) if w and w != "and"]
        value = _words_to_int(words)
        return m.group(0) if value is None else str(value)

    return _NUMBER_RUN.sub(repl, text)


# ---------------------------------------------------------------------------------------------------------------
# Answer normalisation with clause boundaries kept (the strict grader needs them)
# ---------------------------------------------------------------------------------------------------------------
BOUNDARY = "|"
_CITATION = re.compile(r"\[\s*\d+(?:\s*[,;\u2013\u2014-]\s*\d+)*\s*\]")
_CONTRACTIONS = [
    (re.compile(r"\bcan't\b"), "can not"),
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"\bcannot\b"), "can not"),
    (re.compile(r"n't\b"), " not"),
]


@lru_cache(maxsize=65_536)
def answer_tokens(text: str) -> tuple[str, ...]:
    """Normalised tokens with clause punctuation kept as ``BOUNDARY`` tokens.

    NFKC, quotes/dashes unified, lower case, contractions expanded, number words to digits, thousands
    separators and currency signs dropped, '%' -> 'percent', articles dropped, decimal points kept (0.70)."""
    t = _CITATION.sub(" ", normalize(text)).lower()  # "[30]" is a passage id, never part of an answer
    for pattern, repl in _CONTRACTIONS:
        t = pattern.sub(repl, t)
    t = numbers_to_digits(t)
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)  # 1,200 -> 1200
    t = re.sub(r"\b(\d+)(?:st|nd|rd|th)\b", r"\1", t)  # the 25th -> 25
    t = t.replace("%", " percent ")
    t = re.sub(r"(?<=\d)\.(?=\d)", "\x00", t)  # protect decimal points
    t = re.sub(r"[,;:.!?\n]+", f" {BOUNDARY} ", t)
    t = re.sub(r"\bbut\b", f" {BOUNDARY} but", t)  # "not 30 but 45": a new clause starts at "but"
    t = re.sub(r"[^0-9a-z\x00|]+", " ", t).replace("\x00", ".")
    return tuple(w for w in t.split() if w not in ("a", "an", "the"))


def _content(tokens: Sequence[str]) -> tuple[tuple[str, ...], list[int]]:
    idx = [i for i, w in enumerate(tokens) if w != BOUNDARY]
    return tuple(tokens[i] for i in idx), idx


def _find_all(hay: Sequence[str], needle: Sequence[str]) -> list[int]:
    n = len(needle)
    if n == 0:
        return []
    first = needle[0]
    return [i for i in range(len(hay) - n + 1) if hay[i] == first and tuple(hay[i : i + n]) == tuple(needle)]


def normalised_match(output: str, answers: Iterable[str]) -> bool:
    hay, _ = _content(answer_tokens(output))
    for gold in answers:
        needle, _ = _content(answer_tokens(gold))
        if needle and _find_all(hay, needle):
            return True
    return False


# A mention preceded (within its clause) by one of these is negated or contradicted: "not 45 days",
# "instead of 45 days", "previously 45 days".
_PRE_NEGATORS = (
    ("not",),
    ("no",),
    ("never",),
    ("nor",),
    ("neither",),
    ("instead", "of"),
    ("rather", "than"),
    ("other", "than"),
    ("no", "longer"),
    ("previously",),
    ("formerly",),
    ("used", "to", "be"),
    ("outdated",),
    ("superseded",),
    ("incorrect",),
    ("wrong",),
)
# ...unless the negation is part of a bound: "no more than 45 days" asserts 45 days.
_BOUNDS = re.compile(
    r"\b(?:not|no) (?:more|less|later|earlier|fewer|longer|sooner) than\b|\bnot (?:to )?exceed(?:ing)?\b"
)
# ...or followed by one of these: "45 days is outdated", "45 days no longer applies".
_POST_NEGATORS = (
    ("is", "wrong"),
    ("is", "incorrect"),
    ("is", "not", "correct"),
    ("is", "not", "right"),
    ("is", "outdated"),
    ("was", "superseded"),
    ("is", "superseded"),
    ("no", "longer"),
    ("was", "old"),
    ("is", "old"),
    ("was", "previous"),
)
_PRE_WINDOW = 3


def _clause_before(tokens: Sequence[str], start: int, window: int) -> list[str]:
    out: list[str] = []
    i = start - 1
    while i >= 0 and tokens[i] != BOUNDARY and len(out) < window:
        out.insert(0, tokens[i])
        i -= 1
    return out


def _clause_after(tokens: Sequence[str], end: int, window: int) -> list[str]:
    out: list[str] = []
    i = end
    while i < len(tokens) and tokens[i] != BOUNDARY and len(out) < window:
        out.append(tokens[i])
        i += 1
    return out


def _has_seq(words: Sequence[str], seqs: Iterable[tuple[str, ...]], *, at_start: bool = False) -> bool:
    for seq in seqs:
        n = len(seq)
        starts = [0] if at_start else range(len(words) - n + 1)
        if any(tuple(words[i : i + n]) == seq for i in starts):
            return True
    return False


def mention_status(output: str, gold: str) -> tuple[int, int]:
    """(asserted mentions, negated or contradicted mentions) of ``gold`` in ``output``."""
    tokens = answer_tokens(output)
    hay, idx = _content(tokens)
    needle, _ = _content(answer_tokens(gold))
    # A gold that itself starts with a negation ("not refundable") owns that word: look before it only.
    asserted = negated = 0
    for pos in _find_all(hay, needle):
        start, end = idx[pos], idx[pos + len(needle) - 1] + 1
        before = _BOUNDS.sub("", " ".join(_clause_before(tokens, start, _PRE_WINDOW + 1))).split()
        after = _clause_after(tokens, end, 3)
        if _has_seq(before, _PRE_NEGATORS) or _has_seq(after, _POST_NEGATORS, at_start=True):
            negated += 1
        else:
            asserted += 1
    return asserted, negated


def strict_match(output: str, answers: Iterable[str], must_not_contain: Iterable[str] = ()) -> bool:
    """Some gold answer is asserted and no gold mention is negated or contradicted; no forbidden string appears."""
    if any(bad and normalised_match(output, [bad]) for bad in must_not_contain):
        return False
    any_asserted = False
    for gold in answers:
        asserted, negated = mention_status(output, gold)
        if negated:
            return False
        any_asserted = any_asserted or asserted > 0
    return any_asserted


def grade(
    output: str, answers: Sequence[str], grader: str = "normalised", must_not_contain: Sequence[str] = ()
) -> bool:
    if grader == "paper":
        return paper_match(output, answers)
    if grader == "normalised":
        return normalised_match(output, answers)
    if grader == "strict":
        return strict_match(output, answers, must_not_contain)
    raise ValueError(f"unknown grader {grader!r}; expected one of {', '.join(GRADERS)}")


def grade_all_of(
    output: str,
    groups: Sequence[Sequence[str]],
    grader: str = "normalised",
    must_not_contain: Sequence[str] = (),
) -> bool:
    """Compound answers: every group of alternatives must be matched."""
    return bool(groups) and all(grade(output, g, grader, must_not_contain) for g in groups)


# ---------------------------------------------------------------------------------------------------------------
# Free-text gold answers (dev.jsonl has one long ``answer`` sentence instead of short ``answers``)
# ---------------------------------------------------------------------------------------------------------------
_QUANTITY = re.compile(
    r"(?:\$\s?)?\d[\d,]*(?:\.\d+)?(?:\s?%|\s?(?:percent|days?|weeks?|months?|years?|hours?|hrs?|minutes?|business days|"
    r"working days|times))?",
    re.IGNORECASE,
)
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "and",
        "or",
        "is",
        "are",
        "be",
        "it",
        "its",
        "by",
        "with",
        "as",
        "that",
        "this",
        "from",
        "if",
        "you",
        "your",
        "any",
        "not",
        "no",
    ]
)


def key_facts(answer: str) -> list[str]:
    """Quantities stated in the answer's first informative sentence, outside parentheses ("90 days", "$1,200",
    "one hour" -> "1 hour"); a heuristic gold for free-text answers. Empty when that sentence holds no number."""
    from rag.text import split_sentences

    for sentence in split_sentences(answer):
        words = [w for w in re.findall(r"[a-z0-9]+", sentence.lower()) if w not in _STOP]
        if len(words) < 3:
            continue  # "Not yet." / "No." carry the verdict but nothing checkable
        main = numbers_to_digits(re.sub(r"\([^)]*\)", " ", sentence).lower())  # parentheticals are details
        return [m.group(0).strip() for m in _QUANTITY.finditer(main) if re.search(r"\d", m.group(0))]
    return []


def content_recall(answer: str, output: str) -> float:
    """Share of the first informative sentence's content words (stemmed) found in the output."""
    from rag.text import bm25_tokens, split_sentences

    out = set(bm25_tokens(output))
    for sentence in split_sentences(answer):
        gold = set(bm25_tokens(sentence))
        if len(gold) >= 3:
            return len(gold & out) / len(gold)
    gold = set(bm25_tokens(answer))
    return len(gold & out) / len(gold) if gold else 0.0


# ---------------------------------------------------------------------------------------------------------------
# Abstention
# ---------------------------------------------------------------------------------------------------------------
_ABSTAIN = re.compile(
    r"\b(?:"
    r"(?:does|do|did|can) not (?:say|state|mention|specify|contain|cover|include|provide|answer|address|find)"
    r"|(?:is|are|was|were) not (?:covered|stated|specified|mentioned|found|addressed|included|answered)"
    r"|not (?:enough|sufficient) (?:information|evidence)"
    r"|(?:insufficient|no relevant) (?:evidence|information|passages?)"
    r"|(?:evidence|information) (?:is|was) (?:insufficient|not sufficient|missing)"
    r"|(?:can not|unable to|could not) (?:find|answer|determine|tell|confirm)"
    r"|i (?:do not|don t) know"
    r"|no (?:information|passages?|evidence) (?:about|on|was|were|is|found|that)"
    r"|(?:evidence|passages|documents|policies) (?:do|does) not"
    r"|not (?:answerable|in the (?:evidence|passages|documents|policies))"
    r")\b"
)


def is_abstention(text: str) -> bool:
    """The output declines to answer ("The evidence does not say ...", "I cannot find ...")."""
    t = " ".join(answer_tokens(text)).replace(f" {BOUNDARY}", "")
    t = re.sub(r"\bcan not\b", "can not", t)
    return bool(text.strip()) and bool(_ABSTAIN.search(t))


# ---------------------------------------------------------------------------------------------------------------
# Answer text that tells the truth (issue 44): counted over every answer of a suite, so none comes back unnoticed
# ---------------------------------------------------------------------------------------------------------------
ANSWER_TEXT_FAULTS = (
    "contradicting_note",  # the partial-answer note names a part that a sentence of the answer addresses
    "mislabelled_partial",  # labelled "partial" with every part answered, or a part unanswered and not so labelled
    "leading_back_reference",  # the answer opens with a sentence that points back ("However", "This") at nothing
    "unplain_reason",  # an abstention reason that does not read as plain English
    "cut_dependency",  # a shown sentence depends on a sentence or heading before it in its passage that is not shown
    "unaccounted_part",  # a part of a compound question neither answered nor named as not found
)
# A unit that is measured, not counted: "a number of amounts" is not English.
_UNCOUNTED = re.compile(
    r"\ba number of (?:amounts|percents|percentages|moneys|dates|numbers|quantities)\b", re.I
)
_REPR_QUOTED = re.compile(r"(?:^|[\s:(\[,])'[^'\n]+'(?=$|[\s;,.)\]])")  # Python's repr() of user text
_IDENTIFIER = re.compile(r"\b[a-z]+_[a-z_]+\b|\\[nt]")  # snake_case names, escaped newlines
_LONG_FLOAT = re.compile(r"\d*\.\d{4,}")  # more digits than a person reads


def plain_reason(reason: str) -> bool:
    """An abstention reason a person reads as English: no measured unit counted ("a number of amounts"), no
    Python-quoted text, no code names or escapes, no number with more than three decimals."""
    return not (
        _UNCOUNTED.search(reason)
        or _REPR_QUOTED.search(reason)
        or _IDENTIFIER.search(reason)
        or _LONG_FLOAT.search(reason)
    )


def _named_in_note(answer: str, intents: Sequence[dict]) -> list[dict]:
    """The intents the answer's partial-answer note ("I could not find anything about: ...") names."""
    from rag.stages.abstention import PARTIAL, quote_user_text

    notes = " ".join(line for line in answer.splitlines() if line.startswith(PARTIAL))
    return [i for i in intents if notes and f'"{quote_user_text(str(i.get("text", "")))}"' in notes]


def _claim_lines(answer: str) -> list[str]:
    """The answer's own sentences: not its notes ("I could not find ...") nor its Sources line."""
    from rag.stages.extractive import NOT_A_CLAIM

    return [line for line in answer.splitlines() if line.strip() and not NOT_A_CLAIM.match(line)]


def answer_text_faults(result: dict) -> dict[str, bool]:
    """Which of ``ANSWER_TEXT_FAULTS`` one ``rag ask --json`` answer has.

    "Addresses" is the answer check's measure (``rag.stages.extractive.check_addresses``); the label is the one
    the chat and the trace explorer show (``rag.traces.status.answer_status``); "points back" is the bundler's
    (``rag.stages.bundle.opens_with_reference``)."""
    from rag.stages.bundle import opens_with_reference
    from rag.stages.extractive import check_addresses
    from rag.text import split_sentences
    from rag.traces.status import answer_status, unanswered_parts
    from rag.types import Intent

    answer = str(result.get("answer") or "")
    abstained = bool(result.get("abstained"))
    intents = [i for i in result.get("intents") or [] if isinstance(i, dict)]
    faults = dict.fromkeys(ANSWER_TEXT_FAULTS, False)
    if abstained:
        faults["unplain_reason"] = not plain_reason(str(result.get("abstain_reason") or ""))
        return faults
    named = _named_in_note(answer, intents)
    body = "\n".join(_claim_lines(answer))
    if named:
        checks = check_addresses(
            body, [Intent(int(i.get("index", 0)), str(i.get("text", ""))) for i in named]
        )
        faults["contradicting_note"] = any(c.addressed for c in checks)
    status = answer_status(result)
    unanswered = bool(named) or bool(unanswered_parts(result))
    if status == "partial":
        faults["mislabelled_partial"] = not unanswered
    elif status in ("checked", "unconfirmed", "unchecked"):  # the other labels outrank "partial" by design
        faults["mislabelled_partial"] = unanswered
    first = next((s for line in _claim_lines(answer) for s in split_sentences(line)), "")
    faults["leading_back_reference"] = bool(first) and opens_with_reference(first)
    faults["cut_dependency"] = bool(cut_dependencies(result))
    faults["unaccounted_part"] = bool(unaccounted_parts(result))
    return faults


def repeats_previous(previous: str, result: dict) -> bool:
    """A follow-up's answer that quotes nothing the previous answer (``previous``, its text) did not quote already:
    every sentence that carried the choice (``excerpts[].key``; for an answer without excerpts, every answer line)
    lies in the previous answer."""
    if result.get("abstained"):
        return False
    said = norm(previous)
    quoted = [k for x in result.get("excerpts") or [] for k in x.get("key", [])]
    if not quoted:
        quoted = [
            re.sub(r"\[\s*\d+[^\]]*\]", " ", line) for line in _claim_lines(str(result.get("answer") or ""))
        ]
    return bool(quoted) and bool(said) and all(norm(q) in said for q in quoted)


def answer_words(result: dict) -> int:
    """The words an answer shows: its text without its Sources line and its [n] markers (0 when it abstains)."""
    from rag.stages.citations import is_sources_line

    if result.get("abstained"):
        return 0
    lines = [line for line in str(result.get("answer") or "").splitlines() if not is_sources_line(line)]
    return len(re.sub(r"\[\s*\d+[^\]]*\]", " ", " ".join(lines)).split())


def unaccounted_parts(result: dict) -> list[str]:
    """The parts of a compound question (two intents or more) that a non-abstained answer neither answers (an
    excerpt answers it, ``excerpts[].intents``, or the answer check finds a sentence addressing it) nor names as
    not found ("I could not find anything about ...")."""
    intents = [i for i in result.get("intents") or [] if isinstance(i, dict)]
    if result.get("abstained") or len(intents) < 2:
        return []
    answered = {int(i) for x in result.get("excerpts") or [] for i in x.get("intents", [])}
    checks = (result.get("answer_check") or {}).get("intents") or []
    answered |= {int(c.get("index", -1)) for c in checks if c.get("addressed")}
    named = {int(i.get("index", 0)) for i in _named_in_note(str(result.get("answer") or ""), intents)}
    return [str(i.get("text", "")) for i in intents if int(i.get("index", 0)) not in answered | named]


def cut_dependencies(result: dict, model: object = None) -> list[dict[str, str]]:
    """The sentences an answer shows whose meaning depends on the sentence or heading before them in their passage
    when the answer does not show that one too: ``[{"n", "sentence", "before"}]``.

    A sentence is shown when its words (the reference grader's normalisation) lie in an answer line citing its
    passage; the sentence before it is shown when its words lie anywhere in the answer, a heading when its first
    words do. Whether the meaning depends on it is the sentence-dependency model's verdict
    (``rag.models.dependency.DependencyModel``, validated against hand labels: docs/reader.md). Table rows are read
    with their table's header, and are not checked."""
    from rag.models.dependency import DependencyModel
    from rag.stages.citations import cited_ids
    from rag.stages.extractive import evidence_sentences, strip_numbering
    from rag.types import Candidate, Chunk, Evidence

    if result.get("abstained"):
        return []
    dependency = model if isinstance(model, DependencyModel) else DependencyModel.load()
    answer = str(result.get("answer") or "")
    said = norm(answer)
    passages = {int(e["n"]): e for e in result.get("evidence") or [] if "n" in e}
    out: list[dict[str, str]] = []
    for line in _claim_lines(answer):
        shown = norm(line)
        for n in cited_ids(line):
            e = passages.get(n)
            if e is None:
                continue
            chunk = Chunk(
                str(e.get("chunk_id", "")),
                str(e.get("doc_id", "")),
                str(e.get("text") or ""),
                "",
                str(e.get("title") or ""),
                str(e.get("section") or ""),
            )
            for s in evidence_sentences([Evidence(n, Candidate(chunk), 0)]):
                own = norm(s.text)
                if s.table is not None or not s.before or not own or own not in shown:
                    continue
                if s.after_heading:
                    head = " ".join(norm(strip_numbering(s.before)).split()[:5])
                    if head and head in shown:
                        continue
                    depends = dependency.depends(s.before, s.text, kind="heading")
                else:
                    before = norm(s.before)
                    if before and before in said:
                        continue
                    depends = dependency.depends(s.before, s.text)
                if depends:
                    out.append({"n": str(n), "sentence": s.text, "before": s.before})
    return out
