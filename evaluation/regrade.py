"""Grade a run again with today's graders: the policy suites' figures from a ``rag eval suite --results`` file.

    python -m evaluation.regrade RESULTS.jsonl --split tune [--shared ../shared]

A run made before a grader existed (the baseline of a change, run at the branch's start) is graded with the same
definitions as the change itself, so the two compare: every policy suite's figures (``evaluation.suite``'s
``summarise_policy``: answers holding gold, answer words, the answer-text faults ...), pooled, the follow-ups'
(``summarise_followups``) and the answer-text faults of every other answer in the file (cross-corpus
unanswerables, HotpotQA). Prints aggregates only, as ``rag eval suite --json`` does without ``--rows``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evaluation.parity import load
from evaluation.suite import (
    POLICY_SUITES,
    Paths,
    answer_text_counts,
    combined,
    followup_pairs,
    grade_followup,
    grade_policy,
    policy_questions,
    summarise_followups,
)


def regrade(results: Path, split: str, shared: Path) -> dict[str, Any]:
    from evaluation.graders import answer_text_faults

    answers = load(results)
    paths = Paths(shared, Path("."))
    suites: dict[str, Any] = {}
    for suite in POLICY_SUITES:
        asked = [(q, answers.get((suite, q.id))) for q in policy_questions(paths, suite, split)]
        rows = [grade_policy(q, r) for q, r in asked if r is not None]
        if rows:
            from evaluation.suite import summarise_policy

            suites[suite] = summarise_policy(rows)
    pairs = []
    for p in followup_pairs(split):
        got = [answers.get(("followup", q.id)) for q in (p.first, p.followup, p.standalone)]
        if all(r is not None for r in got):
            first, followup, standalone = got
            assert first is not None and followup is not None and standalone is not None
            pairs.append(grade_followup(p, first, followup, standalone))
    if pairs:
        suites["followup"] = summarise_followups(pairs)
    others = [r for (suite, _), r in answers.items() if suite.startswith("unanswerable:")]
    if others:
        suites["unanswerable"] = {"answer_text": answer_text_counts([answer_text_faults(r) for r in others])}
    hotpot = [r for (suite, _), r in answers.items() if suite == "hotpotqa"]
    if hotpot:
        suites["hotpotqa_answer_text"] = answer_text_counts([answer_text_faults(r) for r in hotpot])
    pooled = [row for row in combined({k: v for k, v in suites.items() if k in POLICY_SUITES})]
    return {"meta": {"results": str(results), "split": split}, "suites": suites, "combined": pooled}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.regrade", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--split", required=True, choices=("tune", "test"))
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = parser.parse_args(argv)
    print(json.dumps(regrade(args.results, args.split, args.shared), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
