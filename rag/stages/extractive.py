"""The offline generator: answer with verbatim evidence sentences, each cited, one or more per intent.

It needs no LLM, so the whole query path runs (and is tested) offline. Retrieved text is evidence, never
instructions: sentences that address an AI ("ignore previous instructions", "you are now ...") are skipped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from rag.lexicon import READER_CARDINALS
from rag.sentences import chunk_heading
from rag.stages.abstention import quote_user_text
from rag.stages.bundling import opens_with_reference
from rag.text import bm25_tokens, collapse_ws, split_sentences
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
_HAS_NUMBER = re.compile(rf"\d|\b(?:{'|'.join(READER_CARDINALS)})\b", re.IGNORECASE)


@dataclass(frozen=True)
class EvidenceSentence:
    """A sentence of the final evidence that an answer may quote, with what the reader reads it in."""

    text: str
    n: int  # the passage it came from
    tokens: frozenset[str]
    table: int | None = None  # rows of one table share a number: one row answers, the others are near-copies
    row: str = ""  # a table row's own text (``text`` is the row read with the table's first line)
    asks: bool = False  # a question ("Does the budget roll over?"): an FAQ's answer is the sentence after it
    position: int = 0  # its place among its passage's quotable sentences (0: the first)
    before: str = ""  # the passage's sentence before it, heading or not ("" for the first): its context
    heading: str = ""  # its passage's title and section path


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


def has_number(text: str) -> bool:
    """A digit or a number word ("five", "thirty")."""
    return bool(_HAS_NUMBER.search(text))


_NUMBERING = re.compile(
    r"^\s*(?:#+\s*)?(?:(?:section|part|chapter)\s+)?(?:\d+(?:\.\d+)*\.?|[a-z]\))?\s*", re.I
)
_ENDS_SENTENCE = re.compile(r"[.!?;:]\s*$")


def _bare(text: str) -> str:
    return " ".join(_NUMBERING.sub("", text).lower().split())


def _is_heading(text: str, headings: set[str]) -> bool:
    """A heading is not an answer: a Markdown heading, or (part of) the title or a section name of its
    passage ("3.5 Form SEC-9: Security Incident Report" splits at its colon)."""
    bare = _bare(text)
    return text.lstrip().startswith("#") or any(bare in heading for heading in headings)


_NUMBER = re.compile(r"^[($€£]?\d[\d,.]*%?\)?$")
_ROW_KEY = re.compile(r"^[A-Z]{1,3}-?\d{1,3}$")  # "L5", "P-2": a row label, not a value


def _table_rows(text: str) -> list[str] | None:
    """The header and rows of a flattened table, or None when ``text`` is not one.

    Three or more lines, none ending a sentence, most holding a number. PDF extraction flattens a table with
    multi-line cells into lines that are not rows: the header runs into the first row ("... Maximum (USD) L1
    Store associate, 38,000 ...") and a wrapped cell's other lines sit above and below its row's line
    ("Senior software" / "L5 engineer, Regional 105,000 126,000 147,000 manager"). Lines holding a number are
    the rows; the lines between two rows are split between them (a wrapped cell is centred on its row), the
    lines before the first row continue the header. Returns ``[header, row, row, ...]``.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 3 or any(_ENDS_SENTENCE.search(line) for line in lines):
        return None
    numeric = [bool(re.search(r"\d", line)) for line in lines]
    if sum(numeric) < 0.5 * len(lines):
        return None
    header, first_row = _split_header(lines[0])
    body = [*([first_row] if first_row else []), *lines[1:]]
    keys = [i for i, line in enumerate(body) if re.search(r"\d", line)]
    if not keys:
        return None
    header = " ".join([header, *body[: keys[0]]]).strip()
    before: dict[int, list[str]] = {k: [] for k in keys}
    after: dict[int, list[str]] = {k: [] for k in keys}
    for prev, nxt in zip(keys, [*keys[1:], len(body)], strict=True):
        between = body[prev + 1 : nxt]
        if nxt == len(body):
            after[prev] += between
            continue
        half = (len(between) + 1) // 2
        after[prev] += between[:half]
        before[nxt] += between[half:]
    rows = [_row(body[k], before[k], after[k]) for k in keys]
    return [header, *rows] if header else rows


def _split_header(line: str) -> tuple[str, str]:
    """("Level ... Maximum (USD)", "L1 Store associate, 38,000 ...") when the header runs into the first row:
    the header ends at its last column unit ("(USD)", "(years)") before the row's first number."""
    words = line.split()
    first_number = next((i for i, w in enumerate(words) if _NUMBER.match(w)), None)
    if first_number is None:
        return line, ""
    ends = [i for i, w in enumerate(words[:first_number]) if w.endswith(")")]
    if not ends or ends[-1] + 1 >= first_number:  # no unit, or no row label after it: the line is the header
        return line, ""
    return " ".join(words[: ends[-1] + 1]), " ".join(words[ends[-1] + 1 :])


def _row(line: str, before: list[str], after: list[str]) -> str:
    """One row's text with its wrapped cell put back together: "L5 Senior software engineer, Regional manager
    105,000 126,000 147,000" from "Senior software" / "L5 engineer, Regional 105,000 ... manager"."""
    words = line.split()
    numbers = [i for i, w in enumerate(words) if _NUMBER.match(w)]
    tail = words[numbers[-1] + 1 :] if numbers else []  # words after the last value belong to the label
    words = words[: numbers[-1] + 1] if numbers else words
    key = [words.pop(0)] if words and _ROW_KEY.match(words[0]) else []
    first_value = next((i for i, w in enumerate(words) if _NUMBER.match(w)), len(words))
    label = [*" ".join(before).split(), *words[:first_value], *tail, *" ".join(after).split()]
    return " ".join([*key, *label, *words[first_value:]])


_UNIT = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]+)\)$")


def _read_row(header: str, row: str) -> str:
    """A row read with its column names: "L5 Senior software engineer, Regional manager: Minimum 105,000 USD;
    Midpoint 126,000 USD; Maximum 147,000 USD". The header's value columns end with their unit in brackets;
    when they do not line up with the row's values the row is read after the whole header."""
    words = row.split()
    start = next((i for i, w in enumerate(words) if _NUMBER.match(w)), None)
    columns = re.findall(r"[^()]*?\([^()]*\)", header)
    if start is None or not columns:
        return f"{header} … {row}"
    values: list[str] = []
    for w in words[start:]:
        if _NUMBER.match(w) or not values or _NUMBER.match(values[-1].split()[-1]):
            values.append(w)
        else:
            values[-1] += f" {w}"
    if len(values) != len(columns):
        return f"{header} … {row}"
    capitalised = [i for i, w in enumerate(columns[0].split()) if w[:1].isupper()]
    columns[0] = " ".join(columns[0].split()[capitalised[-1] if capitalised else 0 :])
    cells = []
    for column, value in zip(columns, values, strict=True):
        m = _UNIT.match(column.strip())
        name, unit = (m.group("name"), m.group("unit")) if m else (column.strip(), "")
        cells.append(f"{name} {value} {unit}".strip() if _NUMBER.match(value) else f"{name} {value}")
    return f"{' '.join(words[:start])}: {'; '.join(cells)}"


def _identifiers(text: str) -> set[str]:
    """Form and control ids a sentence names ("EXP-7", "SEC-9"): a sentence naming the same one completes it."""
    return {m.upper() for m in re.findall(r"\b[A-Za-z]{2,5}-\d{1,4}\b", text)}


def _sentence(
    unit: str,
    n: int,
    context: tuple[int, str, str],
    *,
    table: int | None = None,
    row: str = "",
    asks: bool = False,
) -> EvidenceSentence:
    """``context``: (position, the sentence before, heading)."""
    return EvidenceSentence(unit, n, frozenset(bm25_tokens(unit)), table, row, asks, *context)


def evidence_sentences(evidence: Sequence[Evidence]) -> list[EvidenceSentence]:
    """The sentences an answer may quote, passage by passage in evidence order: no heading, fragment or
    sentence addressed to an AI; a flattened table's rows each read with its header."""
    out = []
    for ev in evidence:
        chunk = ev.candidate.chunk
        headings = {_bare(h) for h in [chunk.title, *chunk.section.split(">")] if h.strip()}
        heading = chunk_heading(chunk.title, chunk.section)
        before, position = "", 0
        for text in split_sentences(chunk.text):
            previous, before = before, text
            if len(re.findall(r"[A-Za-z0-9]+", text)) < 3 or looks_like_injection(text):
                continue
            if _is_heading(text, headings):
                continue
            context = (position, previous, heading)
            position += 1
            rows = _table_rows(text)
            if rows is None:
                out.append(_sentence(text, ev.n, context, asks=text.rstrip().endswith("?")))
                continue
            table = len(out)  # the header alone answers nothing: each row is read with it
            out += [
                _sentence(_read_row(rows[0], row), ev.n, context, table=table, row=row) for row in rows[1:]
            ]
    return out


def _scores(score: ScoreFn, query: str, sents: Sequence[EvidenceSentence]) -> list[float]:
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


def _continuations(evidence: Sequence[Evidence]) -> set[tuple[int, int]]:
    """(n, m) for evidence passages where passage m is the chunk that follows passage n in its document."""
    at = {e.candidate.chunk_id: e.n for e in evidence}
    return {(e.n, at[nxt]) for e in evidence if (nxt := e.candidate.chunk.next_id) is not None and nxt in at}


def _answered_questions(
    scores: Sequence[float], sents: Sequence[EvidenceSentence], continues: set[tuple[int, int]] | None = None
) -> list[float]:
    """A question in the evidence is not an answer: it hands its score to the sentence after it (an FAQ's
    answer, which shares few words with the user's question) when that scores lower, and cannot be quoted
    itself. The sentence after it is in the same passage, or opens the passage that continues it (a chunk can
    end on the question)."""
    out = list(scores)
    for i, sent in enumerate(sents):
        if not sent.asks:
            continue
        nxt = i + 1 if i + 1 < len(sents) and sents[i + 1].n == sent.n else None  # a passage's are contiguous
        if nxt is None and continues:  # the question closes its passage: its answer opens the continuation
            nxt = next((j for j, s in enumerate(sents) if (sent.n, s.n) in continues), None)
        if nxt is not None and not sents[nxt].asks:
            out[nxt] = max(out[nxt], scores[i])
        out[i] = -math.inf
    return out


def _near_duplicate(a: EvidenceSentence, b: EvidenceSentence) -> bool:
    if a.text.strip().lower() == b.text.strip().lower() or (a.table is not None and a.table == b.table):
        return True
    union = a.tokens | b.tokens
    return bool(union) and len(a.tokens & b.tokens) / len(union) >= 0.7


def _ordered(
    scores: Sequence[float],
    sents: Sequence[EvidenceSentence],
    *,
    min_score: float,
    numeric: bool,
    tie_band: float = _TIE_BAND,
) -> list[int]:
    """Indices of sentences that clear ``min_score``, best first; near-ties holding a number first when asked."""
    eligible = [i for i, s in enumerate(scores) if s >= min_score]
    if not eligible:
        return []
    best = max(scores[i] for i in eligible)
    floor = best - tie_band * abs(best)

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
    tie_band: float = _TIE_BAND,
    sentences: Sequence[EvidenceSentence] | None = None,
) -> Generated:
    """Quote the best evidence sentence for each intent (in intent order), each followed by its [n].

    Up to ``max_sentences`` in total: after one per intent, near-ties of an intent's best sentence may follow
    it. ``score(query, sentences)`` returns one score per sentence. An intent with nothing above ``min_score``
    is named as not covered; when no intent is covered the answer says the evidence does not answer.
    ``sentences``: ``evidence_sentences(evidence)`` when the caller has them already.
    """
    sents = list(sentences) if sentences is not None else evidence_sentences(evidence)
    continues = _continuations(evidence)
    intents = list(intents) or [Intent(0, question)]
    chosen: dict[int, list[int]] = {}
    extras: list[tuple[float, int, int]] = []  # (-score, intent position, sentence index)
    uncovered: list[Intent] = []
    for pos, intent in enumerate(intents):
        scores = _answered_questions(_scores(score, intent.text, sents), sents, continues)
        numeric = asks_for_number(intent.text) or (len(intents) == 1 and asks_for_number(question))
        order = _ordered(scores, sents, min_score=min_score, numeric=numeric, tie_band=tie_band)
        taken = [i for ids in chosen.values() for i in ids]
        fresh = [i for i in order if not any(_near_duplicate(sents[i], sents[j]) for j in taken)]
        # a sentence that points back at nothing the evidence holds ("This ..." under a heading) cannot answer
        # alone: the best one that can, when there is one
        pick = next((i for i in fresh if not _dangling(sents, i, continues)), fresh[0] if fresh else None)
        if pick is None:
            uncovered.append(intent)
            continue
        chosen[pos] = [pick]
        floor = scores[pick] - tie_band * abs(scores[pick])
        extras += [(-scores[i], pos, i) for i in order if i != pick and scores[i] >= floor]
    wanted = {pos: frozenset(bm25_tokens(intent.text)) for pos, intent in enumerate(intents)}
    df = Counter(t for sent in sents for t in sent.tokens)
    compound = len(intents) > 1
    for _, pos, i in sorted(extras):
        taken = [j for ids in chosen.values() for j in ids]
        if len(taken) >= max_sentences:
            break
        if sents[chosen[pos][0]].row:
            continue  # the table row the question asks about is the answer; a near-tie beside it is filler
        said = frozenset().union(*(sents[j].tokens for j in chosen[pos]))
        bridge = _identifiers(sents[i].text) & set().union(
            *(_identifiers(sents[j].text) for j in chosen[pos])
        )
        new = (sents[i].tokens & wanted[pos]) - said
        if compound and sum(1 + (df[t] == 1) for t in new) < 2 and not bridge:
            # In an answer to several questions, a near-tie that adds too little of its part of the question
            # to what the answer already says (a word only it holds, "Tokyo", counts twice), and completes no
            # rule the answer names (the deadline of the Form EXP-7 it quotes), is filler. A single question
            # keeps its near-ties: they often carry the rule's detail in other words ("at least quarterly").
            continue
        if not any(_near_duplicate(sents[i], sents[j]) for j in taken):
            chosen[pos].append(i)
    for pos, ids in chosen.items():
        chosen[pos] = _with_steps(sents, ids)
    order = _with_antecedents(sents, [i for pos in sorted(chosen) for i in chosen[pos]], continues)
    return Generated(_compose(sents, order, uncovered, continues), MODEL)


_MAX_STEPS = 8


def _with_steps(sents: Sequence[EvidenceSentence], ids: Sequence[int]) -> list[int]:
    """A quoted sentence that introduces steps or a list ("Follow these steps:") is quoted with them: the list
    items after it in its passage, in order (at most ``_MAX_STEPS``)."""
    out: list[int] = []
    for i in ids:
        if i in out:
            continue
        out.append(i)
        if not sents[i].text.rstrip().endswith(":"):
            continue
        j = i + 1
        while j < len(sents) and sents[j].n == sents[i].n and j - i <= _MAX_STEPS and not sents[j].asks:
            if j not in out:
                out.append(j)
            if sents[j].text.rstrip().endswith((":", "?")):
                break
            j += 1
    return out


_MAX_ANTECEDENTS = 2  # "This ..." after "However, ..." after the rule: at most two sentences back


def _antecedent(sents: Sequence[EvidenceSentence], i: int, continues: set[tuple[int, int]]) -> int | None:
    """The quotable sentence that sentence ``i`` follows in its document: the one before it in its passage, or,
    for the first sentence of a passage, the last one of the passage it continues. None when a heading (or
    nothing in the evidence) comes before it."""
    sent = sents[i]
    if sent.before:  # the passage's previous sentence, quotable or not
        j = i - 1
        return j if j >= 0 and sents[j].n == sent.n and sents[j].text == sent.before else None
    earlier = [j for j, s in enumerate(sents) if (s.n, sent.n) in continues]
    return earlier[-1] if earlier else None


def _dangling(sents: Sequence[EvidenceSentence], i: int, continues: set[tuple[int, int]]) -> bool:
    """Sentence ``i`` opens by pointing back, and the evidence holds nothing it could point to."""
    return opens_with_reference(sents[i].text) and _antecedent(sents, i, continues) is None


def _with_antecedents(
    sents: Sequence[EvidenceSentence], order: Sequence[int], continues: set[tuple[int, int]]
) -> list[int]:
    """The quoted sentences in answer order, each one that opens by pointing back ("However, ...", "This ...";
    ``opens_with_reference``) right after what it points to: the sentence before it in its document, quoted
    first when the answer does not quote it already. One that has nothing to point to in the evidence is not
    quoted first while the answer has a sentence that stands alone."""
    out: list[int] = []
    for i in order:
        if i in out:
            continue
        chain = [i]
        while opens_with_reference(sents[chain[0]].text) and len(chain) <= _MAX_ANTECEDENTS:
            j = _antecedent(sents, chain[0], continues)
            if j is None or j in chain:
                break
            chain.insert(0, j)
        placed = next((k for k, j in enumerate(chain) if j in out), None)
        if placed is not None:  # what it points to is quoted already: it follows that sentence
            at = out.index(chain[placed])
            out[at + 1 : at + 1] = [j for j in chain[placed + 1 :] if j not in out]
        else:
            out += chain
    if out and opens_with_reference(sents[out[0]].text):
        alone = next((k for k, j in enumerate(out) if not opens_with_reference(sents[j].text)), None)
        if alone is not None:
            out.insert(0, out.pop(alone))
    return out


def _quote(sents: Sequence[EvidenceSentence], i: int, continues: set[tuple[int, int]]) -> str:
    """Sentence ``i`` as the answer quotes it, whitespace folded. One that points back at the heading it sits
    under ("Lost laptops" / "This must be reported within 24 hours.") is quoted with it: "Lost laptops — This
    must be reported within 24 hours." The heading is what it points to."""
    sent, text = sents[i], collapse_ws(sents[i].text)
    headings = {_bare(h) for h in sent.heading.split(">") if h.strip()}
    if sent.before and _dangling(sents, i, continues) and _is_heading(sent.before, headings):
        return f"{collapse_ws(sent.before).lstrip('#').strip()} \u2014 {text}"
    return text


def _compose(
    sents: Sequence[EvidenceSentence],
    order: Sequence[int],
    uncovered: Sequence[Intent],
    continues: set[tuple[int, int]],
) -> str:
    if not order:
        return NO_ANSWER
    # one line per quoted sentence: a sentence that spans lines in its passage (a list item, a table cell) is
    # joined, so no answer line is left without its [n]
    lines = [f"{_quote(sents, i, continues)} [{sents[i].n}]" for i in order]
    if uncovered:
        missing = "; ".join(f'"{quote_user_text(intent.text)}"' for intent in uncovered)
        lines.append(f"The provided evidence does not cover: {missing}.")
    cited = sorted({sents[i].n for i in order})
    lines.append("Sources: " + ", ".join(f"[{n}]" for n in cited))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- does the answer answer?
NOT_A_CLAIM = re.compile(
    r"^\s*(?:Sources?:|The provided evidence does not|I can't answer this|I could not find anything about)",
    re.I,
)


@dataclass(frozen=True)
class IntentCheck:
    """Whether one part of the question is answered: the answer sentence that covers most of its words."""

    index: int
    text: str
    addressed: bool
    coverage: float  # share of the intent's words in its best answer sentence
    sentence: str


def check_addresses(answer: str, intents: Sequence[Intent], *, abstained: bool = False) -> list[IntentCheck]:
    """One check per intent: some answer sentence (not a 'Sources:' line, not a note that something is not
    covered, and not named as not covered) names two of the intent's words, or half of them, and holds a number when the
    intent asks for one. An abstained answer addresses nothing. The "Citations checked" badge needs every
    intent addressed (``answer_check.complete`` in the trace)."""
    lines = answer.splitlines()
    claims = [c for line in lines for c in split_sentences(line) if c.strip() and not NOT_A_CLAIM.match(c)]
    declined = " ".join(line for line in lines if NOT_A_CLAIM.match(line))
    out = []
    for intent in intents:
        wanted = set(bm25_tokens(intent.text))
        best, best_sentence = 0.0, ""
        for claim in claims:
            if asks_for_number(intent.text) and not _HAS_NUMBER.search(
                re.sub(r"\[\s*\d+[^\]]*\]", "", claim)
            ):
                continue
            shared = len(wanted & set(bm25_tokens(claim)))
            coverage = shared / len(wanted) if wanted else 0.0
            if (shared >= 2 or coverage >= 0.5) and coverage > best:
                best, best_sentence = coverage, claim
        named_missing = f'"{quote_user_text(intent.text)}"' in declined
        addressed = not abstained and not named_missing and bool(best_sentence)
        out.append(IntentCheck(intent.index, intent.text, addressed, round(best, 3), best_sentence))
    return out


def address_report(checks: Sequence[IntentCheck]) -> dict[str, object]:
    """The trace's ``answer_check``: ``complete`` when there is a check and every intent is addressed."""
    return {
        "complete": bool(checks) and all(c.addressed for c in checks),
        "intents": [asdict(c) for c in checks],
    }
