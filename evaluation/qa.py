"""End-to-end answer quality: every question through ``Pipeline.ask``, graded per question type.

Evidence metrics follow ``../shared/tools/grade_evidence.py`` exactly (same ``covered()``): retrieval recall (every
gold quote covered by the candidates), evidence recall (covered by the final packed evidence) and best-gold-at-
edge (the passage covering the first quote sits in the first or last bundle). Answers are graded against
``answers`` (any of), ``all_of`` (every group) or, for free-text ``answer`` golds, the quantities of its first
informative sentence (or half its content words when it has none). Unanswerable questions, and questions with no
gold for the asking user (restricted documents), are right when the bot abstains without leaking.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evaluation.datasets import EvalQuestion
from evaluation.graders import (
    at_prompt_edge,
    best_gold_at_edge,
    content_recall,
    covered,
    first_covering,
    grade,
    grade_all_of,
    key_facts,
    normalised_match,
    strict_match,
)
from evaluation.stats import compare_paired, wilson_interval
from rag.errors import RagError

if TYPE_CHECKING:
    from rag.pipeline import Question
    from rag.traces.sweeps import Comparison

CONTENT_RECALL_THRESHOLD = 0.5
METRICS = (
    "accuracy",
    "strict_accuracy",
    "retrieval_recall",
    "evidence_recall",
    "best_gold_at_edge",
    "gold_at_prompt_edge",
    "cites_gold",
    "citation_validity",
    "citation_support",
    "abstention_rate",
    "abstention_precision",
    "abstention_recall",
)


def grade_answer(q: EvalQuestion, answer: str, abstained: bool) -> tuple[bool, bool, str]:
    """(normalised correct, strict correct, how it was graded)."""
    leaked = any(normalised_match(answer, [m]) for m in q.must_not_contain if m)
    if q.expects_abstention:
        ok = abstained and not leaked
        return ok, ok, "abstention"
    if abstained and not answer.strip():
        return False, False, "abstained"
    if q.all_of:
        return (
            grade_all_of(answer, q.all_of, "normalised", q.must_not_contain) and not leaked,
            grade_all_of(answer, q.all_of, "strict", q.must_not_contain),
            "all_of",
        )
    if q.gold_strings:
        return (
            grade(answer, q.gold_strings, "normalised") and not leaked,
            strict_match(answer, q.gold_strings, q.must_not_contain),
            "answers",
        )
    if q.answer:
        facts = key_facts(q.answer)
        if facts:
            return (
                all(normalised_match(answer, [f]) for f in facts) and not leaked,
                all(strict_match(answer, [f], q.must_not_contain) for f in facts),
                "key_facts",
            )
        ok = content_recall(q.answer, answer) >= CONTENT_RECALL_THRESHOLD and not leaked
        return ok, ok and not abstained, "content_recall"
    return False, False, "no_gold"


def grade_question(q: EvalQuestion, result: dict[str, Any]) -> dict[str, Any]:
    """One row from a ``rag ask --json`` result."""
    evidence = sorted(result.get("evidence", []), key=lambda e: e.get("n", 0))
    ev_texts = [e.get("text", "") for e in evidence]
    cand_texts = [c.get("text", "") for c in result.get("candidates", [])]
    quotes = list(q.quotes) if not q.expects_abstention else []
    answer = str(result.get("answer") or "")
    abstained = bool(result.get("abstained"))
    correct, strict, how = grade_answer(q, answer, abstained)
    citations = result.get("citations", [])
    gold_n = first_covering(quotes[0], evidence) if quotes else None
    holds_gold = {e.get("n") for e in evidence if any(covered(g, [e.get("text", "")]) for g in quotes)}
    return {
        "id": q.id,
        "type": q.type,
        "question": q.question,
        "answer": answer,
        "abstained": abstained,
        "expected_abstention": q.expects_abstention,
        "correct": correct,
        "strict_correct": strict,
        "graded_by": how,
        "leaked": any(normalised_match(answer, [m]) for m in q.must_not_contain if m),
        "retrieval_recall": all(covered(g, cand_texts) for g in quotes) if quotes else None,
        "evidence_recall": all(covered(g, ev_texts) for g in quotes) if quotes else None,
        "best_gold_at_edge": best_gold_at_edge(quotes[0], evidence) if quotes else None,
        "gold_position": gold_n,
        "gold_at_prompt_edge": at_prompt_edge(gold_n, evidence) if gold_n is not None else None,
        "cites_gold": any(c.get("valid") and c.get("n") in holds_gold for c in citations)
        if holds_gold
        else None,
        "citations": len(citations),
        "citations_valid": sum(1 for c in citations if c.get("valid")),
        "citations_supported": sum(1 for c in citations if c.get("valid") and c.get("supported")),
        "prompt_tokens": (result.get("tokens") or {}).get("prompt", 0),
        "latency_ms": (result.get("timings_ms") or {}).get("total", 0.0),
        "trace_id": result.get("trace_id"),
        "error": result.get("error"),
    }


def rate(k: int, n: int, confidence: float = 0.95) -> dict[str, Any]:
    lo, hi = wilson_interval(k, n, confidence)
    return {
        "k": k,
        "n": n,
        "rate": (k / n) if n else None,
        "ci_low": lo if n else None,
        "ci_high": hi if n else None,
    }


def summarise(rows: Sequence[dict[str, Any]], confidence: float = 0.95) -> dict[str, Any]:
    def flag(key: str) -> dict[str, Any]:
        vals = [r[key] for r in rows if r[key] is not None]
        return rate(sum(map(bool, vals)), len(vals), confidence)

    abstained = [r for r in rows if r["abstained"]]
    expected = [r for r in rows if r["expected_abstention"]]
    return {
        "n": len(rows),
        "accuracy": flag("correct"),
        "strict_accuracy": flag("strict_correct"),
        "retrieval_recall": flag("retrieval_recall"),
        "evidence_recall": flag("evidence_recall"),
        "best_gold_at_edge": flag("best_gold_at_edge"),
        "gold_at_prompt_edge": flag("gold_at_prompt_edge"),
        "cites_gold": flag("cites_gold"),
        "citation_validity": rate(
            sum(r["citations_valid"] for r in rows), sum(r["citations"] for r in rows), confidence
        ),
        "citation_support": rate(
            sum(r["citations_supported"] for r in rows), sum(r["citations"] for r in rows), confidence
        ),
        "abstention_rate": rate(len(abstained), len(rows), confidence),
        "abstention_precision": rate(
            sum(r["expected_abstention"] for r in abstained), len(abstained), confidence
        ),
        "abstention_recall": rate(sum(r["abstained"] for r in expected), len(expected), confidence),
        "leaks": sum(r["leaked"] for r in rows),
        "errors": sum(1 for r in rows if r["error"]),
        "latency_ms": sum(r["latency_ms"] for r in rows) / len(rows) if rows else 0.0,
    }


@dataclass
class QAReport:
    rows: list[dict[str, Any]]
    confidence: float = 0.95
    meta: dict[str, Any] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)  # raw `rag ask --json` objects, with "id"

    @property
    def types(self) -> dict[str, dict[str, Any]]:
        by: dict[str, list[dict[str, Any]]] = {}
        for r in self.rows:
            by.setdefault(r["type"], []).append(r)
        return {t: summarise(rs, self.confidence) for t, rs in sorted(by.items())}

    @property
    def overall(self) -> dict[str, Any]:
        return summarise(self.rows, self.confidence)

    def to_json(self) -> dict[str, Any]:
        return {"types": self.types, "overall": self.overall, "questions": self.rows, "meta": self.meta}


def as_asked(
    q: EvalQuestion, *, default_user: str = "eval", history: Sequence[tuple[str, str]] = ()
) -> Question:
    """The ``rag.pipeline.Question`` a record is asked as: its own user and groups (else ``default_user`` with
    no groups), its ``as_of`` date and tags, after the conversation ``history`` ((role, content) turns)."""
    from datetime import date

    from rag.pipeline import Question
    from rag.types import Principal

    return Question(
        q.question,
        Principal(q.user or default_user, frozenset(q.groups)),
        date.fromisoformat(q.as_of) if q.as_of else None,
        frozenset(q.tags),
        history=tuple(history),
    )


def ask(pipeline: Any, question: Question, options: Any = None) -> dict[str, Any]:
    """The ``rag ask --json`` object for ``question``; a ``RagError`` becomes an empty answer with its message."""
    start = time.perf_counter()
    try:
        result: dict[str, Any] = pipeline.ask(question, options).to_json()
    except RagError as exc:
        result = {
            "answer": "",
            "abstained": False,
            "error": exc.user_message(),
            "timings_ms": {"total": (time.perf_counter() - start) * 1000},
        }
    return result


def run_qa(
    questions: Sequence[EvalQuestion],
    pipeline: Any,
    *,
    options: Any = None,
    default_user: str = "eval",
    confidence: float = 0.95,
    progress: Callable[[int, int], None] | None = None,
) -> QAReport:
    """Ask every question as its own user (record ``user``/``groups``, else ``default_user`` with no groups)."""
    reports = run_packings(
        questions,
        pipeline,
        ["asked"],
        options=lambda _: options,
        default_user=default_user,
        confidence=confidence,
        progress=progress,
    )
    return reports["asked"]


PAIRED_METRICS = ("correct", "strict_correct", "cites_gold")


def run_packings(
    questions: Sequence[EvalQuestion],
    pipeline: Any,
    packings: Sequence[str],
    *,
    options: Callable[[str], Any],
    default_user: str = "eval",
    confidence: float = 0.95,
    progress: Callable[[int, int], None] | None = None,
    sink: Callable[[str, dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, QAReport]:
    """Each question asked under every packing in turn before the next question (``options(packing)`` gives the
    query-path options), so the reports are paired question by question even when a slow run is cut short, and
    an LLM server's prefix cache serves the prompt opening the packings share. ``sink(packing, row, result)``
    sees each graded row and raw result as it comes (a long run writes as it goes)."""
    if len(set(packings)) != len(packings) or not packings:
        raise ValueError(f"packings must be distinct and at least one: {list(packings)}")
    reports = {p: QAReport([], confidence) for p in packings}
    for i, q in enumerate(questions, 1):
        for packing in packings:
            result = ask(pipeline, as_asked(q, default_user=default_user), options(packing))
            row = grade_question(q, result)
            raw = {"id": q.id, **result}
            reports[packing].rows.append(row)
            reports[packing].results.append(raw)
            if sink is not None:
                sink(packing, row, raw)
        if progress is not None:
            progress(i, len(questions))
    return reports


def compare_packings(reports: dict[str, QAReport], metric: str = "correct") -> list[Comparison]:
    """Every packing against the first on ``metric`` (a row flag), over the questions each expects answered:
    exact McNemar on the discordant pairs, a paired bootstrap interval of the difference."""
    names = list(reports)
    base = [r for r in reports[names[0]].rows if not r["expected_abstention"]]
    base_ids = [r["id"] for r in base]
    out = []
    for name in names[1:]:
        other = [r for r in reports[name].rows if not r["expected_abstention"]]
        if [r["id"] for r in other] != base_ids:
            raise ValueError(f"{name} was not asked the same questions as {names[0]}")
        out.append(
            compare_paired(
                [bool(r[metric]) for r in base],
                [bool(r[metric]) for r in other],
                label_a=names[0],
                label_b=name,
            )
        )
    return out
