"""The fixed local-LLM subset (issue 20): claim checking measured on a real model's answers.

    rag eval llm-subset --shared ../shared --work-dir W --out DIR        (RAG_LLM_BASE_URL must be set)

Every question of ``evaluation/suites/llm_subset.json`` (answerable TEST-split questions of the policy
suites, dealt round-robin over question types: :func:`deal`) is asked once with the configured LLM through the
pipeline ``rag ask`` uses, as its own asker, against the suite's corpus ingested under ``W``. For each answer the
model's own text and the served answer are graded (``evaluation.qa.grade_answer``), and two checks are read
from the same result on the **same model text**:

- before, the citation check: the answer has at least one citation and every one is valid and supported (the
  ``citations`` stage, after the citation re-pointing);
- after, the claim check: every claim of the model's first answer is supported (``verification.verified``
  without a repair call).

A wrong answer is *caught* when a check does not pass it; a right answer that a check does not pass is a
*false flag*. Rates carry 95% Wilson intervals. ``--out`` keeps every ``rag ask --json`` object and the rows.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evaluation.datasets import EvalQuestion, load_questions
from evaluation.splits import SPLITS_PATH
from evaluation.suite import Paths, ingest_corpus, rate
from rag.errors import ConfigurationError

SUBSET_PATH = SPLITS_PATH.parent / "llm_subset.json"
SUITES = ("dev", "gitlab", "sample")
Log = Callable[[str], None]


def deal(questions: Sequence[EvalQuestion], keep: set[str]) -> list[str]:
    """Answerable questions in ``keep``, dealt round-robin over their types (types in order of first appearance,
    questions in file order): the order the fixed subset was drawn in, so a longer subset extends a shorter."""
    by_type: dict[str, list[str]] = {}
    for q in questions:
        if q.id in keep and not q.expects_abstention:
            by_type.setdefault(q.type, []).append(q.id)
    dealt: list[str] = []
    while any(by_type.values()):
        for ids in by_type.values():
            if ids:
                dealt.append(ids.pop(0))
    return dealt


def subset(paths: Paths, path: Path = SUBSET_PATH) -> dict[str, list[EvalQuestion]]:
    """The subset's questions per suite, in the file's order."""
    spec = json.loads(path.read_text())
    out: dict[str, list[EvalQuestion]] = {}
    for suite, ids in spec["suites"].items():
        by_id = {q.id: q for q in load_questions(paths.questions(suite))}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ConfigurationError(f"The LLM subset names {missing[0]!r}, which {suite}'s questions lack.")
        out[suite] = [by_id[i] for i in ids]
    return out


def _stage(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next((s["detail"] for s in result.get("stages", []) if s["name"] == name), {})


def row(suite: str, q: EvalQuestion, result: dict[str, Any]) -> dict[str, Any]:
    """One answer: both gradings, both checks, the claim verdicts and the times (``rag ask --json`` in)."""
    from evaluation.qa import grade_answer

    # the claims stage's record: the model's first text, its claims' verdicts, any repair and fallback
    verification = {**(result.get("verification") or {}), **_stage(result, "claims")}
    model_text = verification.get("model_answer", result.get("answer", ""))
    cited = _stage(result, "citations")
    first_claims = verification.get("claims", [])
    timings = result.get("timings_ms", {})
    return {
        "suite": suite,
        "id": q.id,
        "type": q.type,
        "error": result.get("error"),
        "abstained": bool(result.get("abstained")),
        "model_correct": grade_answer(q, model_text, False)[0],
        "served_correct": grade_answer(q, result.get("answer", ""), bool(result.get("abstained")))[0],
        "citation_check_passed": cited.get("total", 0) > 0
        and cited.get("invalid", 1) == 0
        and cited.get("unsupported", 1) == 0,
        "claim_check_passed": bool(verification.get("verified")) and "repair" not in verification,
        "served_verified": bool(result.get("verified")),
        "repaired": bool(verification.get("repaired")),
        "fallback": verification.get("fallback") == "extractive",
        "claims": len(first_claims),
        "claims_inline_marker": sum(1 for c in first_claims if c.get("cited")),
        "verdicts": {v: sum(1 for c in first_claims if c.get("verdict") == v) for v in _VERDICTS},
        "citations": cited.get("total", 0),
        "citations_invalid": cited.get("invalid", 0),
        "citations_unsupported": cited.get("unsupported", 0),
        "ms_total": float(timings.get("total", 0.0)),
        "ms_generate": float(timings.get("generate", 0.0)),
        "ms_claims": float(timings.get("claims", 0.0)),
    }


_VERDICTS = ("supported", "unsupported", "contradicted", "uncited")


def _check(rows: Sequence[dict[str, Any]], passed: str) -> dict[str, Any]:
    wrong = [r for r in rows if not r["model_correct"]]
    right = [r for r in rows if r["model_correct"]]
    return {
        "passed": rate(sum(r[passed] for r in rows), len(rows)),
        "wrong_caught": rate(sum(not r[passed] for r in wrong), len(wrong)),
        "wrong_passed": sorted(f"{r['id']}" for r in wrong if r[passed]),
        "false_flags": rate(sum(not r[passed] for r in right), len(right)),
    }


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The subset's table: accuracy, each check's catches and false flags, claims, markers and times."""
    answered = [r for r in rows if not r["error"] and not r["abstained"]]
    claims = sum(r["claims"] for r in answered)
    ms = [r["ms_total"] for r in answered] or [0.0]
    return {
        "questions": len(rows),
        "answered": len(answered),
        "abstained": sum(r["abstained"] for r in rows),
        "errors": sum(1 for r in rows if r["error"]),
        "model_accuracy": rate(sum(r["model_correct"] for r in answered), len(answered)),
        "served_accuracy": rate(sum(r["served_correct"] for r in rows), len(rows)),
        "served_verified": rate(sum(r["served_verified"] for r in answered), len(answered)),
        "before_citation_check": _check(answered, "citation_check_passed"),
        "after_claim_check": _check(answered, "claim_check_passed"),
        "repair_calls": sum(not r["claim_check_passed"] for r in answered),
        "repaired": sum(r["repaired"] for r in answered),
        "fallbacks": sum(r["fallback"] for r in answered),
        "claims": claims,
        "verdicts": {v: sum(r["verdicts"][v] for r in answered) for v in _VERDICTS},
        "inline_markers": rate(sum(r["claims_inline_marker"] for r in answered), claims),
        "answers_without_inline_marker": sum(1 for r in answered if r["claims_inline_marker"] == 0),
        "citations": sum(r["citations"] for r in answered),
        "citations_invalid": sum(r["citations_invalid"] for r in answered),
        "citations_unsupported": sum(r["citations_unsupported"] for r in answered),
        "ms_total": {"p50": statistics.median(ms), "mean": statistics.fmean(ms), "max": max(ms)},
        "ms_generate_p50": statistics.median([r["ms_generate"] for r in answered] or [0.0]),
        "ms_claims_p50": statistics.median([r["ms_claims"] for r in answered] or [0.0]),
    }


def run(paths: Paths, *, out: Path | None, log: Log, limit_per_suite: int | None = None) -> dict[str, Any]:
    """Ask the subset with the configured LLM; returns ``{meta, summary, per_suite, rows}``."""
    from evaluation.suite import ask_all, git_commit
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions

    questions = subset(paths)
    rows: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    model = ""
    for suite in SUITES:
        qs = questions.get(suite, [])[:limit_per_suite]
        if not qs:
            continue
        data_dir = ingest_corpus(paths, suite, log)
        settings = load_settings(data_dir=data_dir)
        if not settings.llm_base_url:
            raise ConfigurationError(
                "The LLM subset needs an LLM.", hint="Set RAG_LLM_BASE_URL (for example: rag llm serve)."
            )
        model = settings.llm_model
        pipeline = build_pipeline(settings)
        log(f"{suite}: asking {len(qs)} questions with {model}")
        answers = ask_all(pipeline, qs, PipelineOptions(use_llm=True))
        for q, result in zip(qs, answers, strict=True):
            rows.append(row(suite, q, result))
            results.append({"suite": suite, "id": q.id, "result": result})
            log(
                f"  {q.id}: model {'right' if rows[-1]['model_correct'] else 'wrong'}, "
                f"claim check {'passed' if rows[-1]['claim_check_passed'] else 'failed'}"
            )
    report = {
        "meta": {"commit": git_commit(), "model": model, "subset": str(SUBSET_PATH.name)},
        "summary": summarise(rows),
        "per_suite": {s: summarise([r for r in rows if r["suite"] == s]) for s in SUITES},
        "rows": rows,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=1))
        with open(out / "results.jsonl", "w") as fh:
            for r in results:
                fh.write(json.dumps(r) + "\n")
    return report
