"""Multi-hop evidence evaluation on HotpotQA-style questions (``rag eval multihop``).

Every question's paragraphs are pooled into one corpus (a BEIR-style JSONL, one record per distinct
paragraph), ingested once, and each question is asked twice through the query path: with the configured
follow-up hops and with none. Per configuration it reports, at the default evidence budget: both supporting
paragraphs in the final evidence, at least one, the two adjacent (consecutive positions) when both are there,
the gold answer string inside the answer, and time per query (end to end without the generator, and the hop
stages alone), with Wilson 95% intervals for the rates.

Input records (``../shared/data/hotpotqa/dev-multihop.jsonl``): ``question_id``, ``question_text``,
``answers_objects`` (``spans``), ``contexts`` (``title``, ``paragraph_text``, ``is_supporting``).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.stats import wilson_interval
from rag.errors import ConfigurationError

EXCLUDED_STAGES = ("generate",)


@dataclass(frozen=True)
class MultiHopQuestion:
    qid: str
    question: str
    answers: tuple[str, ...]
    supporting: tuple[str, ...]  # corpus record ids of the supporting paragraphs


def paragraph_id(title: str, text: str) -> str:
    """Content-derived record id: the same paragraph under several questions is one corpus record."""
    return "hp-" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:12]


def load_multihop(path: Path) -> tuple[list[MultiHopQuestion], list[dict[str, str]]]:
    """Questions and the pooled corpus records (``_id``, ``title``, ``text``) of a HotpotQA-style file."""
    if not path.is_file():
        raise ConfigurationError(f"No multi-hop questions at {path}.", hint="Pass --questions FILE.jsonl.")
    questions: list[MultiHopQuestion] = []
    corpus: dict[str, dict[str, str]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            contexts = record["contexts"]
            supporting = []
            for ctx in contexts:
                pid = paragraph_id(ctx["title"], ctx["paragraph_text"])
                corpus.setdefault(pid, {"_id": pid, "title": ctx["title"], "text": ctx["paragraph_text"]})
                if ctx.get("is_supporting"):
                    supporting.append(pid)
            answers = tuple(
                span for obj in record.get("answers_objects", []) for span in obj.get("spans", []) if span
            )
            questions.append(
                MultiHopQuestion(
                    str(record["question_id"]), record["question_text"], answers, tuple(supporting)
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(
                f"{path} line {n} is not a HotpotQA-style record ({exc}).",
                hint="Each line needs question_id, question_text, answers_objects and contexts.",
            ) from exc
    return questions, list(corpus.values())


def write_corpus(records: Sequence[dict[str, str]], path: Path) -> Path:
    """Write the pooled corpus JSONL (unchanged content keeps the file, so re-ingestion stays a no-op)."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text).split())


def answer_present(answers: Sequence[str], answer: str) -> bool:
    """A gold span (normalised: case, punctuation, spacing) occurs in the answer text."""
    text = f" {_norm(answer)} "
    return any(_norm(a) and f" {_norm(a)} " in text for a in answers)


def grade(q: MultiHopQuestion, result: dict[str, Any]) -> dict[str, Any]:
    """One question's evidence facts from a ``rag ask --json`` result."""
    evidence = sorted(result.get("evidence", []), key=lambda e: e["n"])
    positions: dict[str, list[int]] = {}
    for e in evidence:
        positions.setdefault(e["doc_id"], []).append(e["n"])
    found = [pid for pid in q.supporting if pid in positions]
    both = len(found) == len(q.supporting) and len(q.supporting) >= 2
    adjacent = both and any(
        abs(a - b) == 1 for a in positions[q.supporting[0]] for b in positions[q.supporting[1]]
    )
    timings = result.get("timings_ms", {})
    hop_ms = sum(v for name, v in timings.items() if name.startswith("hop_"))
    end_to_end = sum(v for name, v in timings.items() if name not in (*EXCLUDED_STAGES, "total"))
    linked = sum(len(h.get("linked", [])) for h in result.get("hops", []))
    return {
        "id": q.qid,
        "question": q.question,
        "supporting_found": len(found),
        "both": both,
        "at_least_one": bool(found),
        "adjacent": adjacent,
        "answer_present": answer_present(q.answers, result.get("answer", "")),
        "abstained": bool(result.get("abstained")),
        "evidence": len(evidence),
        "hop_links": linked,
        "ms_end_to_end": round(end_to_end, 3),
        "ms_hops": round(hop_ms, 3),
    }


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": (k / n) if n else None, "ci95": [round(lo, 4), round(hi, 4)]}


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    both = sum(r["both"] for r in rows)
    e2e = [r["ms_end_to_end"] for r in rows] or [0.0]
    hops = [r["ms_hops"] for r in rows] or [0.0]
    return {
        "questions": n,
        "both_in_evidence": _rate(both, n),
        "at_least_one": _rate(sum(r["at_least_one"] for r in rows), n),
        "adjacent_when_both": _rate(sum(r["adjacent"] for r in rows), both),
        "answer_present": _rate(sum(r["answer_present"] for r in rows), n),
        "abstained": sum(r["abstained"] for r in rows),
        "with_hop_links": sum(r["hop_links"] > 0 for r in rows),
        "ms_end_to_end": {
            "p50": round(float(np.percentile(e2e, 50)), 2),
            "p95": round(float(np.percentile(e2e, 95)), 2),
        },
        "ms_hops": {
            "p50": round(float(np.percentile(hops, 50)), 2),
            "p95": round(float(np.percentile(hops, 95)), 2),
        },
    }


@dataclass
class MultiHopReport:
    configs: dict[str, dict[str, Any]]  # name -> summary
    rows: dict[str, list[dict[str, Any]]]  # name -> graded rows
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name -> raw results
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "configs": self.configs}


def run_multihop(
    questions: Sequence[MultiHopQuestion],
    pipeline: Any,
    configs: dict[str, Any],
    *,
    user: str = "eval",
    progress: Callable[[int, int], None] | None = None,
) -> MultiHopReport:
    """Ask every question under each named ``PipelineOptions`` and grade the evidence."""
    from rag.pipeline import Question
    from rag.types import Principal

    principal = Principal(user, frozenset())
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    total, done = len(questions) * len(configs), 0
    if questions:  # first-call costs (model graphs, caches) are not per-query latency
        pipeline.ask(Question(questions[0].question, principal), next(iter(configs.values())))
    for q in questions:
        for name, options in configs.items():
            if hasattr(pipeline, "clear_caches"):
                pipeline.clear_caches()  # each configuration embeds its own queries: fair timings
            result = pipeline.ask(Question(q.question, principal), options).to_json()
            result["id"] = q.qid
            results[name].append(result)
            rows[name].append(grade(q, result))
            done += 1
            if progress is not None:
                progress(done, total)
    return MultiHopReport({name: summarise(r) for name, r in rows.items()}, rows, results)
