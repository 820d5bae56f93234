"""Evaluation inputs: our questions JSONL, the "Lost in the Middle" paper's formats, and frozen evidence sets.

An ``EvidenceSet`` is one question with its retrieval frozen: the gold passage(s) and an ordered list of
distractors. Position sweeps only ever move the gold inside it, so a frozen file makes a sweep reproducible.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rag.errors import ConfigurationError

FROZEN_FORMAT = "rag-eval-frozen/1"
FORMATS = ("auto", "ours", "paper-qa", "paper-kv", "frozen")


# ---------------------------------------------------------------------------------------------------- questions
@dataclass(frozen=True)
class EvalQuestion:
    """One question of our JSONL format (``ingest/sample/questions.jsonl``, ``../shared/data/questions``)."""

    id: str
    question: str
    type: str = "single"
    answers: tuple[str, ...] = ()  # short gold strings, any of which is right
    answer: str | None = None  # free-text gold (dev.jsonl)
    all_of: tuple[tuple[str, ...], ...] = ()  # compound questions: every group must be matched
    quotes: tuple[str, ...] = ()  # gold evidence quotes
    chunk_ids: tuple[str, ...] = ()  # gold evidence given as chunk ids
    user: str | None = None
    groups: tuple[str, ...] = ()
    as_of: str | None = None
    tags: tuple[str, ...] = ()
    must_not_contain: tuple[str, ...] = ()

    @property
    def expects_abstention(self) -> bool:
        """Unanswerable, or (restricted) with no gold at all for this user: the bot should decline."""
        return self.type == "unanswerable" or (
            not self.answers
            and not self.answer
            and not self.quotes
            and not self.chunk_ids
            and not self.all_of
        )

    @property
    def gold_strings(self) -> tuple[str, ...]:
        return self.answers or ((self.answer,) if self.answer and len(self.answer.split()) <= 6 else ())


def _evidence_fields(items: Iterable[Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    quotes: list[str] = []
    ids: list[str] = []
    for item in items or ():
        if isinstance(item, str):
            # A bare string is a chunk id when it looks like one (24 hex digits), else a quote.
            (ids if len(item) == 24 and all(c in "0123456789abcdef" for c in item) else quotes).append(item)
        elif isinstance(item, dict):
            if item.get("chunk_id"):
                ids.append(str(item["chunk_id"]))
            if item.get("quote"):
                quotes.append(str(item["quote"]))
    return tuple(quotes), tuple(ids)


def question_from_dict(data: dict[str, Any], line: int = 0) -> EvalQuestion:
    try:
        quotes, ids = _evidence_fields(data.get("evidence") or ())
        answers = data.get("answers")
        if isinstance(answers, str):
            answers = [answers]
        groups = data.get("groups") or ()
        return EvalQuestion(
            id=str(data.get("id") or f"q{line}"),
            question=str(data["question"]),
            type=str(data.get("type") or "single"),
            answers=tuple(str(a) for a in answers or ()),
            answer=data.get("answer"),
            all_of=tuple(tuple(str(x) for x in g) for g in data.get("all_of") or ()),
            quotes=quotes,
            chunk_ids=ids,
            user=data.get("user"),
            groups=tuple(groups if isinstance(groups, list) else [g for g in str(groups).split(",") if g]),
            as_of=data.get("as_of"),
            tags=tuple(data.get("tags") or ()),
            must_not_contain=tuple(str(x) for x in data.get("must_not_contain") or ()),
        )
    except (KeyError, TypeError) as exc:
        raise ConfigurationError(f"Bad question record on line {line}: {exc!r}") from exc


def _open_text(path: Path) -> Iterator[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            yield from fh
    except FileNotFoundError:
        raise ConfigurationError(f"File not found: {path}") from None


def read_jsonl(path: Path, limit: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    count = 0
    for line_no, line in enumerate(_open_text(Path(path)), 1):
        if not line.strip():
            continue
        try:
            yield line_no, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{path}:{line_no}: not JSON ({exc.msg}).") from None
        count += 1
        if limit is not None and count >= limit:
            return


def load_questions(path: Path, limit: int | None = None) -> list[EvalQuestion]:
    return [question_from_dict(d, n) for n, d in read_jsonl(path, limit)]


# The sample corpus's questions: a data file of ingest/sample/, installed beside rag/ (package data). Found by its
# path, never by importing ingest (rag/ imports neither ingest/ nor ui/; .importlinter).
SAMPLE_QUESTIONS = Path(__file__).resolve().parents[1] / "ingest" / "sample" / "questions.jsonl"


def default_questions_path() -> Path:
    """The sample corpus's questions, shipped with the package."""
    return SAMPLE_QUESTIONS


# ---------------------------------------------------------------------------------------------------- evidence
@dataclass(frozen=True)
class Passage:
    """A passage as a prompt shows it. ``pid`` is the chunk id for passages taken from our index."""

    pid: str
    text: str
    title: str = ""
    gold: bool = False
    source: str = ""
    doc_id: str = ""
    ordinal: int = 0
    section: str = ""
    page: int | None = None
    rank: int | None = None  # 1-based rank in the frozen retrieval order (strategies pack by it)
    score: float | None = None
    origin: str = "dataset"  # "retrieved", "pool", "dataset", "synthetic"
    n_tokens: int | None = None


@dataclass(frozen=True)
class EvidenceSet:
    """One question with its retrieval frozen: gold passages (in reading order) and ordered distractors."""

    qid: str
    question: str
    answers: tuple[str, ...]
    gold: tuple[Passage, ...]
    distractors: tuple[Passage, ...]
    type: str = "single"
    kind: str = "qa"  # "qa" (passages) or "kv" (key-value retrieval)
    all_of: tuple[tuple[str, ...], ...] = ()
    must_not_contain: tuple[str, ...] = ()
    wrong_answers: tuple[str, ...] = ()  # plausible wrong answers (the simulated model's mistakes)
    notes: dict[str, Any] = field(default_factory=dict)
    # gold quotes of a policy question with no short answer: its output is graded by them instead
    quotes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gold"] = [_passage_json(p) for p in self.gold]
        data["distractors"] = [_passage_json(p) for p in self.distractors]
        return data


@dataclass(frozen=True)
class Variant:
    """One arrangement of a question's evidence as the model will see it."""

    qid: str
    kind: str  # "depth", "position", "strategy", "spacing", "control"
    label: str  # the cell: "depth 50%", "position 5", "edges", "split", "control"
    length: str  # "20" (passages) or "2000t" (tokens)
    strategy: str  # "fixed" for placed gold, a packing strategy, "spacing:<name>" or "control"
    depth: float | None  # requested depth for depth variants, else None
    passages: tuple[Passage, ...]

    @property
    def gold_positions(self) -> tuple[int, ...]:
        return tuple(i for i, p in enumerate(self.passages) if p.gold)

    @property
    def gold_blocks(self) -> tuple[tuple[int, int], ...]:
        """Runs of adjacent gold passages as (0-based start, size), front to back."""
        blocks: list[tuple[int, int]] = []
        for i in self.gold_positions:
            if blocks and sum(blocks[-1]) == i:
                blocks[-1] = (blocks[-1][0], blocks[-1][1] + 1)
            else:
                blocks.append((i, 1))
        return tuple(blocks)

    @property
    def block_depths(self) -> tuple[float, ...]:
        """Each gold block's depth on the scale the depth cells place it (``depth_to_start``): start / (L - size).

        A block flush with the front is at 0 and one flush with the back at 1, whatever its size; a single
        passage at 0-based position i is at i / (L - 1). Measuring a pair at the front by its second passage
        (1 / (L - 1)) would put the "depth 0%" cell of every two-source question inside the context."""
        total = len(self.passages)
        return tuple(start / (total - size) if total > size else 0.0 for start, size in self.gold_blocks)

    @property
    def position(self) -> int | None:
        """1-based position of the first gold passage."""
        return self.gold_positions[0] + 1 if self.gold_positions else None

    @property
    def realised_depth(self) -> float | None:
        """Depth of the first gold block (of the gold passage, for one-source questions)."""
        depths = self.block_depths
        return depths[0] if depths else None


def _passage_json(p: Passage) -> dict[str, Any]:
    return {k: v for k, v in asdict(p).items() if v not in (None, "", 0) or k in ("pid", "text", "gold")}


def passage_from_json(d: dict[str, Any]) -> Passage:
    return Passage(**{k: d[k] for k in Passage.__dataclass_fields__ if k in d})


def evidence_set_from_json(d: dict[str, Any]) -> EvidenceSet:
    return EvidenceSet(
        qid=str(d["qid"]),
        question=str(d["question"]),
        answers=tuple(d.get("answers") or ()),
        gold=tuple(passage_from_json({**p, "gold": True}) for p in d.get("gold") or ()),
        distractors=tuple(passage_from_json({**p, "gold": False}) for p in d.get("distractors") or ()),
        type=str(d.get("type") or "single"),
        kind=str(d.get("kind") or "qa"),
        all_of=tuple(tuple(g) for g in d.get("all_of") or ()),
        must_not_contain=tuple(d.get("must_not_contain") or ()),
        wrong_answers=tuple(d.get("wrong_answers") or ()),
        notes=dict(d.get("notes") or {}),
        quotes=tuple(d.get("quotes") or ()),
    )


def save_frozen(sets: Sequence[EvidenceSet], path: Path, source: dict[str, Any] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FROZEN_FORMAT,
        "created_at": datetime.now(UTC).isoformat(),
        "source": source or {},
        "sets": [s.to_json() for s in sets],
    }
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1))
    tmp.replace(path)
    return path


def load_frozen(path: Path) -> tuple[list[EvidenceSet], dict[str, Any]]:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigurationError(f"Frozen evidence file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path} is not a frozen evidence file ({exc.msg}).") from None
    if not isinstance(doc, dict) or doc.get("format") != FROZEN_FORMAT:
        raise ConfigurationError(
            f"{path} is not a frozen evidence file (format {doc.get('format') if isinstance(doc, dict) else None!r}).",
            hint="Create one with `rag eval position --freeze-out FILE`.",
        )
    return [evidence_set_from_json(d) for d in doc.get("sets") or []], dict(doc.get("source") or {})


# ------------------------------------------------------------------------------------ "Lost in the Middle" formats
@dataclass(frozen=True)
class PaperQARecord:
    """Multi-document QA: ``question``, ``answers``, ``ctxs[{title, text, isgold}]`` (nq-open-*.jsonl.gz)."""

    question: str
    answers: tuple[str, ...]
    ctxs: tuple[Passage, ...]


@dataclass(frozen=True)
class KVRecord:
    """Key-value retrieval: ``ordered_kv_records`` [[key, value], ...], ``key``, ``value``."""

    ordered_kv_records: tuple[tuple[str, str], ...]
    key: str
    value: str

    @property
    def gold_index(self) -> int:
        for i, (k, _) in enumerate(self.ordered_kv_records):
            if k == self.key:
                return i
        raise ConfigurationError(f"key {self.key} is not among its record's pairs")


def detect_format(path: Path) -> str:
    """'frozen', 'paper-kv', 'paper-qa' or 'ours', from the file's first record."""
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError(f"File not found: {path}")
    if not str(path).endswith(".gz"):
        with open(path, encoding="utf-8", errors="replace") as fh:
            if FROZEN_FORMAT in fh.read(400):
                return "frozen"
    for _, first in read_jsonl(path, limit=1):
        if "ordered_kv_records" in first:
            return "paper-kv"
        if "ctxs" in first:
            return "paper-qa"
        if "question" in first:
            return "ours"
    raise ConfigurationError(
        f"Could not tell the format of {path}.", hint="Pass --format ours|paper-qa|paper-kv."
    )


def load_paper_qa(path: Path, limit: int | None = None) -> list[PaperQARecord]:
    out = []
    for n, d in read_jsonl(Path(path), limit):
        try:
            ctxs = tuple(
                Passage(
                    pid=str(c.get("id") or f"{n}-{i}"),
                    text=str(c["text"]),
                    title=str(c.get("title") or ""),
                    gold=bool(c.get("isgold")),
                    rank=i + 1,
                    origin="dataset",
                )
                for i, c in enumerate(d["ctxs"])
            )
            out.append(PaperQARecord(str(d["question"]), tuple(str(a) for a in d["answers"]), ctxs))
        except (KeyError, TypeError) as exc:
            raise ConfigurationError(f"{path}:{n}: not a multi-document QA record ({exc!r}).") from None
    return out


def load_paper_kv(path: Path, limit: int | None = None) -> list[KVRecord]:
    out = []
    for n, d in read_jsonl(Path(path), limit):
        try:
            pairs = tuple((str(k), str(v)) for k, v in d["ordered_kv_records"])
            out.append(KVRecord(pairs, str(d["key"]), str(d["value"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"{path}:{n}: not a key-value retrieval record ({exc!r}).") from None
    return out


def paper_qa_sets(
    records: Sequence[PaperQARecord], *, n_distractors: int = 29, seed: int = 0, limit: int | None = None
) -> list[EvidenceSet]:
    """Evidence sets from multi-document QA records. Records with their own distractors keep them, in order;
    oracle records (gold only, like nq-open-oracle) draw distractors from the other questions' gold passages,
    skipping any that contain one of this question's answers (a distractor must not answer the question)."""
    from evaluation.graders import paper_match

    pool = [(i, c) for i, r in enumerate(records) for c in r.ctxs if c.gold]
    out = []
    for i, rec in enumerate(records[:limit] if limit else records):
        gold = tuple(replace(c, gold=True, rank=1) for c in rec.ctxs if c.gold)
        if not gold:
            continue
        own = [c for c in rec.ctxs if not c.gold]
        if own:
            distractors = own
        else:
            rng = random.Random(f"{seed}:{i}")
            picks = rng.sample(range(len(pool)), k=min(len(pool), n_distractors * 3 + 10))
            distractors = []
            for j in picks:
                owner, c = pool[j]
                if owner == i or paper_match(c.text, rec.answers):
                    continue
                distractors.append(replace(c, gold=False, pid=f"pool-{owner}", origin="pool"))
                if len(distractors) >= n_distractors:
                    break
        distractors = [replace(c, gold=False, rank=k + 2) for k, c in enumerate(distractors)]
        others = [a for r in records[i + 1 : i + 4] for a in r.answers[:1]]
        out.append(
            EvidenceSet(
                qid=f"nq-{i}",
                question=rec.question,
                answers=rec.answers,
                gold=gold,
                distractors=tuple(distractors),
                type="paper-qa",
                wrong_answers=tuple(others),
            )
        )
    return out


def kv_sets(records: Sequence[KVRecord], limit: int | None = None) -> list[EvidenceSet]:
    """Evidence sets from key-value records: each pair is a passage; the gold is the queried pair; the other pairs
    keep their record order as distractors."""
    out = []
    for i, rec in enumerate(records[:limit] if limit else records):
        g = rec.gold_index
        passages = [
            Passage(pid=k, text=v, title=k, gold=(j == g), rank=j + 1, origin="dataset")
            for j, (k, v) in enumerate(rec.ordered_kv_records)
        ]
        others = [v for k, v in rec.ordered_kv_records if k != rec.key][:3]
        out.append(
            EvidenceSet(
                qid=f"kv-{i}",
                question=rec.key,
                answers=(rec.value,),
                gold=tuple(p for p in passages if p.gold),
                distractors=tuple(p for p in passages if not p.gold),
                type="paper-kv",
                kind="kv",
                wrong_answers=tuple(others),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------- synthetic
_TOPICS = [
    ("refund window", "Customers may return items within {n} days of delivery for a full refund.", "days"),
    ("meal per-diem", "Meals are reimbursed up to a per-diem of ${n} per day.", "dollars"),
    ("password length", "Passwords must be at least {n} characters long.", "characters"),
    ("carry-over", "Employees may carry over up to {n} days of unused leave into the next year.", "days"),
    ("laptop refresh", "Laptops are replaced every {n} months.", "months"),
    ("claim deadline", "Expense claims must be filed within {n} days of the trip.", "days"),
]
_FILLER = [
    "The office is closed on public holidays and the first Monday of August.",
    "Badges must be worn visibly at all times inside the warehouse.",
    "The intranet news page announces every change to this policy.",
    "Managers review team schedules at the start of each quarter.",
    "Printed documents marked confidential go into the locked shredding bins.",
    "Visitors sign in at reception and are accompanied at all times.",
    "Parking permits are renewed every January through the facilities portal.",
    "The cafeteria offers a vegetarian option every working day.",
]


def synthetic_sets(
    n_questions: int = 10, n_distractors: int = 30, *, seed: int = 0, n_gold: int = 1, prefix: str = "syn"
) -> list[EvidenceSet]:
    """Self-contained evidence sets for tests and demos: a numeric policy fact per question, distractors that
    share the vocabulary but never the answer."""
    rng = random.Random(seed)
    out = []
    for q in range(n_questions):
        topic, template, unit = _TOPICS[q % len(_TOPICS)]
        value = 10 + rng.randrange(80)
        gold = [
            Passage(
                pid=f"{prefix}{q}-g0",
                text=template.format(n=value),
                title=f"Policy {q} ({topic})",
                gold=True,
                rank=1,
                origin="synthetic",
            )
        ]
        for g in range(1, n_gold):
            gold.append(
                Passage(
                    pid=f"{prefix}{q}-g{g}",
                    text=f"Section {g + 1}: this rule applies to every {topic} request.",
                    title=f"Policy {q} ({topic})",
                    gold=True,
                    rank=g + 1,
                    origin="synthetic",
                )
            )
        distractors = []
        for d in range(n_distractors):
            other = 100 + rng.randrange(900)  # never a gold value (those are < 90)
            text = f"{_FILLER[(q + d) % len(_FILLER)]} See form HB{other}x{d} in the appendix."
            distractors.append(
                Passage(
                    pid=f"{prefix}{q}-d{d}",
                    text=text,
                    title=f"Handbook {d}",
                    rank=n_gold + d + 1,
                    origin="synthetic",
                )
            )
        wrong = value + 15
        answers = (f"{value} {unit}",) if unit != "dollars" else (f"${value}", f"{value} dollars")
        out.append(
            EvidenceSet(
                qid=f"{prefix}-{q}",
                question=f"What is the {topic} limit?",
                answers=answers,
                gold=tuple(gold),
                distractors=tuple(distractors),
                type="synthetic" if n_gold == 1 else "synthetic-multi",
                wrong_answers=(f"{wrong} {unit}",),
            )
        )
    return out
