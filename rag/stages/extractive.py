"""The offline generator: answer with verbatim evidence sentences, each cited, one or more per intent.

It needs no LLM, so the whole query path runs (and is tested) offline. Retrieved text is evidence, never
instructions: sentences that address an AI ("ignore previous instructions", "you are now ...") are skipped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from rag.models.dependency import DependencyModel
from rag.models.sentences import chunk_heading, heading_parts
from rag.stages.abstention import quote_user_text
from rag.text import bm25_tokens, collapse_ws, split_sentences
from rag.text.lexicon import READER_CARDINALS
from rag.types import Chunk, Evidence, EvidenceSentence, Excerpt, Generated, Intent

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
    """The header and rows of a table, or None when ``text`` is not one: a Markdown table whose rows mostly hold a
    number (its cells joined), or a flattened one.

    A flattened table: three or more lines, none ending a sentence, most holding a number. PDF extraction flattens a table with
    multi-line cells into lines that are not rows: the header runs into the first row ("... Maximum (USD) L1
    Store associate, 38,000 ...") and a wrapped cell's other lines sit above and below its row's line
    ("Senior software" / "L5 engineer, Regional 105,000 126,000 147,000 manager"). Lines holding a number are
    the rows; the lines between two rows are split between them (a wrapped cell is centred on its row), the
    lines before the first row continue the header. Returns ``[header, row, row, ...]``.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if (cells := _pipe_table(lines)) is not None:
        names, *cell_rows = cells
        if sum(bool(re.search(r"\d", " ".join(row))) for row in cell_rows) < 0.5 * len(cell_rows):
            return None
        return [" ".join(names), *(" ".join(cell for cell in row if cell) for row in cell_rows)]
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


_PIPE_SEPARATOR = re.compile(r"^\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*$")


def _pipe_table(lines: Sequence[str]) -> list[list[str]] | None:
    """The cells of a Markdown table (what ingestion makes of a PDF's ruled table, a Word or HTML table and a
    Markdown source's): ``[header cells, row cells, ...]``, or None when ``lines`` are not one."""
    if (
        len(lines) < 3
        or not _PIPE_SEPARATOR.match(lines[1])
        or not all(line.startswith("|") for line in lines)
    ):
        return None
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for i, line in enumerate(lines)
        if i != 1
    ]


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
    context: tuple[int, str, str, bool, str, tuple[int, int]],
    *,
    table: int | None = None,
    row: str = "",
    asks: bool = False,
) -> EvidenceSentence:
    """``context``: (position, the sentence before, heading, after a heading, nearest heading, span)."""
    return EvidenceSentence(unit, n, frozenset(bm25_tokens(unit)), table, row, asks, *context)


def _spans(text: str, units: Sequence[str]) -> list[tuple[int, int]]:
    """Where each of ``units`` (``split_sentences(text)``, in order) lies in ``text``."""
    out, at = [], 0
    for unit in units:
        start = text.find(unit, at)
        if start < 0:  # split_sentences joined an abbreviation's parts with one space: find its first part
            start = max(at, text.find(unit.split(" ", 1)[0], at))
            end = start + len(unit)
        else:
            end = start + len(unit)
        out.append((start, min(end, len(text))))
        at = max(at, min(end, len(text)))
    return out


def evidence_sentences(evidence: Sequence[Evidence]) -> list[EvidenceSentence]:
    """The sentences an answer may quote, passage by passage in evidence order: no heading, fragment or
    sentence addressed to an AI; a flattened table's rows each read with its header."""
    out = []
    for ev in evidence:
        chunk = ev.candidate.chunk
        headings = {_bare(h) for h in [chunk.title, *chunk.section.split(">")] if h.strip()}
        heading = chunk_heading(chunk.title, chunk.section)
        before, position, after_heading, section = "", 0, False, ""
        units = split_sentences(chunk.text)
        for text, span in zip(units, _spans(chunk.text, units), strict=True):
            previous, before = before, text
            if _is_heading(text, headings):
                after_heading, section = True, text
                continue
            if len(re.findall(r"[A-Za-z0-9]+", text)) < 3 or looks_like_injection(text):
                after_heading = False
                continue
            context = (position, previous, heading, after_heading, section, span)
            position, after_heading = position + 1, False
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
    dependency: DependencyModel | None = None,
) -> Generated:
    """Quote, for each intent (in intent order), an excerpt of the passage holding its best evidence sentence, under
    the passage's heading and followed by its [n]: the sentence with the sentences its meaning depends on
    (``dependency``, ``rag.models.dependency``; without one, the sentence alone).

    Up to ``max_sentences`` chosen sentences in total: after one per intent, near-ties of an intent's best sentence
    may follow it. ``score(query, sentences)`` returns one score per sentence. An intent with nothing above
    ``min_score`` is named as not covered; when no intent is covered the answer says the evidence does not answer.
    ``sentences``: ``evidence_sentences(evidence)`` when the caller has them already.
    """
    sents = list(sentences) if sentences is not None else evidence_sentences(evidence)
    continues = _continuations(evidence)
    intents = list(intents) or [Intent(0, question)]
    dep = _dependencies(sents, dependency)
    bar = dependency.bar if dependency is not None else 1.0
    chosen: dict[int, list[int]] = {}
    also: dict[int, int] = {}  # intent position -> the sentence another intent chose that answers it too
    scored: dict[int, list[float]] = {}
    extras: list[tuple[float, int, int]] = []  # (-score, intent position, sentence index)
    uncovered: list[Intent] = []
    for pos, intent in enumerate(intents):
        scores = _answered_questions(_scores(score, intent.text, sents), sents, continues)
        numeric = asks_for_number(intent.text) or (len(intents) == 1 and asks_for_number(question))
        order = _ordered(scores, sents, min_score=min_score, numeric=numeric, tie_band=tie_band)
        taken = [i for ids in chosen.values() for i in ids]
        fresh = [i for i in order if not any(_near_duplicate(sents[i], sents[j]) for j in taken)]
        # a sentence whose meaning lies before it, in a passage the evidence does not hold, cannot answer alone:
        # the best one that can, when there is one
        pick = next(
            (i for i in fresh if not _dangling(sents, i, continues, dep, bar)), fresh[0] if fresh else None
        )
        if pick is None:
            # its best sentence is one another part of the question quotes already: that excerpt answers both
            same = next((j for i in order[:1] for j in taken if _near_duplicate(sents[i], sents[j])), None)
            if same is None:
                uncovered.append(intent)
            else:
                also[pos] = same
            continue
        chosen[pos], scored[pos] = [pick], scores
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
            # In an answer to several questions, a near-tie that adds too little of its part of the question to
            # what the answer already says (a word only it holds, "Tokyo", counts twice), and completes no rule
            # the answer names (the deadline of the Form EXP-7 it quotes), is filler. A single question keeps its
            # near-ties: they often carry the rule's detail in other words ("at least quarterly").
            continue
        if not any(_near_duplicate(sents[i], sents[j]) for j in taken):
            chosen[pos].append(i)
    # chosen sentence -> (the intents it answers, its best score)
    keys: dict[int, tuple[set[int], float]] = {}
    for pos, ids in chosen.items():
        for i in ids:
            answers, best = keys.setdefault(i, (set(), -math.inf))
            keys[i] = (answers | {intents[pos].index}, max(best, scored[pos][i]))
    for pos, i in also.items():
        keys[i][0].add(intents[pos].index)
    points = _points(sents, keys, dep, bar, continues, evidence)
    return Generated(_compose(points, uncovered), MODEL, excerpts=tuple(points))


# ----------------------------------------------------------------------------------------------- excerpts
_MAX_BACK = 8  # sentences an excerpt reaches back for what the chosen one depends on (a list's lead-in)
_MAX_FORWARD = 8  # ... and forward for what depends on it (the items a lead-in introduces, its exception)
_MAX_WORDS = 90  # an excerpt grows forward only while it stays within this many words
_MAX_GAP = 2  # two excerpts of one passage this few sentences apart are joined with the sentences between
_GAP_WORDS = 40  # ... when those hold at most this many words; else they are one excerpt with an ellipsis
_HEADING_WORDS = 10  # of the heading an excerpt is shown under
ELLIPSIS = "\u2026"


def _dependencies(sents: Sequence[EvidenceSentence], model: DependencyModel | None) -> list[float]:
    """For each sentence, the probability that its meaning depends on the sentence before it in its passage (0
    where none is in the evidence, and without a model); the first sentence of a passage that continues another is
    judged by its own words (``kind="hidden"``)."""
    if model is None:
        return [0.0] * len(sents)
    out = []
    for i, s in enumerate(sents):
        if _pred(sents, i) is not None or _lead(sents, i):
            out.append(model.probability(s.before, s.row or s.text))
        elif not s.before and s.table is None:
            out.append(model.probability("", s.text, kind="hidden"))
        else:
            out.append(0.0)
    return out


def _pred(sents: Sequence[EvidenceSentence], i: int) -> int | None:
    """The quotable sentence right before sentence ``i`` in its passage (no heading or fragment between); for a
    table row, the sentence right before its table (the statement its rows belong to)."""
    s = sents[i]
    j = (s.table if s.table is not None else i) - 1  # a table's rows follow its first row's index
    if j < 0 or s.after_heading or not s.before:
        return None
    p = sents[j]
    return j if p.n == s.n and p.table is None and p.text == s.before else None


def _lead(sents: Sequence[EvidenceSentence], i: int) -> str:
    """The fragment right before sentence ``i`` in its passage when it is not a sentence an answer quotes on its own
    ("Note:", "For example:", "2."): an excerpt that starts at ``i`` shows it when ``i`` depends on it. "" when the
    unit before is a heading, a sentence, a table or text addressed to an AI."""
    s = sents[i]
    before = s.before
    if not before or s.after_heading or s.table is not None or _pred(sents, i) is not None:
        return ""
    if i > 0 and sents[i - 1].n == s.n and sents[i - 1].text == before:
        return ""
    if len(re.findall(r"[A-Za-z0-9]+", before)) >= 3 or looks_like_injection(before):
        return ""
    return collapse_ws(before)


def _succ(sents: Sequence[EvidenceSentence], i: int) -> int | None:
    """The sentence right after sentence ``i`` in its passage; none for a table: its rows each stand with their
    header, so an excerpt never runs on into one."""
    if i + 1 >= len(sents) or sents[i + 1].table is not None:
        return None
    return i + 1 if _pred(sents, i + 1) == i else None


def _words(sents: Sequence[EvidenceSentence], ids: Sequence[int]) -> int:
    return sum(len(sents[i].text.split()) for i in ids)


def _excerpt(sents: Sequence[EvidenceSentence], i: int, dep: Sequence[float], bar: float) -> list[int]:
    """Sentence ``i`` with what its meaning depends on before it (while a sentence depends on the one before it:
    the rule its example or exception belongs to, the lead-in of its list) and what depends on it after it (the
    items it introduces, the exception that qualifies it), within ``_MAX_WORDS`` going forward."""
    ids, j, k = [i], i, i
    while len(ids) <= _MAX_BACK and dep[j] >= bar and (p := _pred(sents, j)) is not None:
        ids.insert(0, p)
        j = p
    forward = 0
    while forward < _MAX_FORWARD and (q := _succ(sents, k)) is not None and dep[q] >= bar:
        if _words(sents, [*ids, q]) > _MAX_WORDS:
            break
        ids.append(q)
        k, forward = q, forward + 1
    return ids


def _chain(sents: Sequence[EvidenceSentence], a: int, b: int) -> list[int] | None:
    """The sentences strictly between ``a`` and ``b`` when they are one contiguous run of a passage."""
    between, k = [], a
    while (q := _succ(sents, k)) is not None and q < b:
        between.append(q)
        k = q
    return between if _succ(sents, k) == b else None


def strip_numbering(heading: str) -> str:
    """A heading without its Markdown marks and its numbering ("## 5.1 International travel" -> "International
    travel"); the heading as it was when nothing else is left."""
    return collapse_ws(_NUMBERING.sub("", heading.lstrip("#").strip(), count=1)) or collapse_ws(heading)


def shown_heading(s: EvidenceSentence) -> str:
    """The heading an excerpt is shown under: the nearest heading above its first sentence in the passage, else the
    passage's section (its last part), else its title; without its numbering ("5.1 "), at most
    ``_HEADING_WORDS`` words."""
    parts = heading_parts(s.heading)
    words = strip_numbering(s.section or (parts[-1] if parts else "")).split()
    return " ".join(words[:_HEADING_WORDS]) + (f" {ELLIPSIS}" if len(words) > _HEADING_WORDS else "")


_Keys = Mapping[int, tuple[set[int], float]]  # chosen sentence -> (the intents it answers, its score)


def _points(
    sents: Sequence[EvidenceSentence],
    keys: _Keys,
    dep: Sequence[float],
    bar: float,
    continues: set[tuple[int, int]],
    evidence: Sequence[Evidence],
) -> list[Excerpt]:
    """The answer's points: each chosen sentence's excerpt, excerpts of one passage merged, in answer order.

    Order: by the first part of the question a point answers; within it, the passages of one document together
    and in the document's order (a policy states its general rule before its special cases), documents by their
    best sentence. A point whose first sentence opens its passage and depends on what comes before it gets the
    last sentences of the passage it continues (when the evidence holds it) as a point right before it.
    """
    runs: dict[int, list[list[int]]] = {}  # passage n -> its sentence runs
    for i in keys:
        runs.setdefault(sents[i].n, []).append(_excerpt(sents, i, dep, bar))
    chunks = {e.n: e.candidate.chunk for e in evidence}
    points = [_merged(sents, found, keys, chunks, dep, bar) for found in runs.values()]
    best: dict[tuple[int, str], float] = {}  # (intent position, document) -> the score of its best point
    for _, ex in points:
        key = (min(ex.intents), _doc(chunks, ex.n))
        best[key] = max(best.get(key, -math.inf), ex.score)

    def order(point: tuple[list[int], Excerpt]) -> tuple[int, float, str, int, int]:
        ids, ex = point
        pos, doc = min(ex.intents), _doc(chunks, ex.n)
        ordinal = chunks[ex.n].ordinal if ex.n in chunks else 0
        return pos, -best[(pos, doc)], doc, ordinal, sents[ids[0]].position

    out: list[Excerpt] = []
    shown = {ex.n for _, ex in points}
    for ids, ex in sorted(points, key=order):
        first = ids[0]
        if not sents[first].before and sents[first].table is None and dep[first] >= bar:
            earlier = [j for j, s in enumerate(sents) if (s.n, ex.n) in continues]
            if earlier and sents[earlier[-1]].n not in shown:  # what it depends on ends the passage before it
                j = earlier[-1]
                lead = _merged(sents, [_excerpt(sents, j, dep, bar)], {}, chunks, dep, bar)[1]
                out.append(replace(lead, intents=ex.intents, score=ex.score))  # context: no key sentence
                shown.add(sents[j].n)
        out.append(ex)
    return out


def _doc(chunks: Mapping[int, Chunk], n: int) -> str:
    return chunks[n].doc_id if n in chunks else ""


def _merged(
    sents: Sequence[EvidenceSentence],
    runs: Sequence[Sequence[int]],
    keys: _Keys,
    chunks: Mapping[int, Chunk],
    dep: Sequence[float],
    bar: float,
) -> tuple[list[int], Excerpt]:
    """One passage's runs as one excerpt: overlapping or adjacent runs joined, runs a few short sentences apart
    joined with the sentences between, runs farther apart shown with an ellipsis between; a run whose first
    sentence depends on the fragment before it ("Examples include:") shows that fragment first."""
    pieces: list[list[int]] = []
    for run in sorted(runs, key=lambda r: (r[0], r[-1])):
        last = pieces[-1][-1] if pieces else -2
        # overlapping, or next to each other in the passage (at most a fragment between, shown with them)
        if pieces and (
            run[0] <= last or (run[0] == last + 1 and (_succ(sents, last) == run[0] or _lead(sents, run[0])))
        ):
            pieces[-1] = sorted(set(pieces[-1]) | set(run))
            continue
        between = _chain(sents, pieces[-1][-1], run[0]) if pieces else None
        if between is not None and len(between) <= _MAX_GAP and _words(sents, between) <= _GAP_WORDS:
            pieces[-1] = [*pieces[-1], *between, *run]
        else:
            pieces.append(list(run))
    ids = [i for piece in pieces for i in piece]
    chosen = [i for i in ids if i in keys]
    shown: list[str] = []
    # a fragment between two shown sentences is shown; one before a piece, when its first sentence depends on it
    leads = {i: _lead(sents, i) for piece in pieces for i in piece if i != piece[0] or dep[i] >= bar}
    for k, piece in enumerate(pieces):
        shown += [ELLIPSIS] if k else []
        for i in piece:
            shown += ([leads[i]] if leads.get(i) else []) + [collapse_ws(sents[i].text)]
    first, n = sents[ids[0]], sents[ids[0]].n
    start = first.span[0]
    if leads.get(ids[0]) and n in chunks:
        start = max(0, chunks[n].text.rfind(first.before, 0, start))
    return ids, Excerpt(
        n=n,
        chunk_id=chunks[n].chunk_id if n in chunks else "",
        heading=shown_heading(first),
        sentences=tuple(shown),
        key=tuple(collapse_ws(sents[i].text) for i in chosen),
        intents=tuple(sorted({k for i in chosen for k in keys[i][0]})),
        span=(start, sents[ids[-1]].span[1]),
        score=round(max((keys[i][1] for i in chosen), default=0.0), 4),
    )


def _dangling(
    sents: Sequence[EvidenceSentence],
    i: int,
    continues: set[tuple[int, int]],
    dep: Sequence[float],
    bar: float,
) -> bool:
    """Sentence ``i`` depends on what comes before it, and the evidence holds none of it: it opens its passage (no
    heading above it), and the passage before it in the document is not in the evidence."""
    s = sents[i]
    if s.before or s.table is not None or dep[i] < bar:
        return False
    return not any((t.n, s.n) in continues for t in sents)


HEADED = " \u2014 "  # between the heading an extractive point is shown under and its excerpt


def shown_sentence(claim: str) -> str:
    """A claim of an extractive answer without the heading its point is shown under ("General principles \u2014
    Personal costs are ..." -> "Personal costs are ..."): the evidence sentence it quotes, whose vector the index
    holds, so the checks need not embed it again. Other text is returned as it is."""
    head, sep, rest = claim.partition(HEADED)
    return rest if sep and head and len(head.split()) <= _HEADING_WORDS + 1 else claim


def _compose(points: Sequence[Excerpt], uncovered: Sequence[Intent]) -> str:
    if not points:
        return NO_ANSWER
    # one line per point: its heading, its sentences (a sentence that spans lines in its passage, a list item or a
    # table cell, joined), its [n]: no answer line is left without its [n]
    lines = [
        f"{ex.heading}{HEADED}{ex.text} [{ex.n}]" if ex.heading else f"{ex.text} [{ex.n}]" for ex in points
    ]
    if uncovered:
        missing = "; ".join(f'"{quote_user_text(intent.text)}"' for intent in uncovered)
        lines.append(f"The provided evidence does not cover: {missing}.")
    cited = sorted({ex.n for ex in points})
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
