"""What the configured LLM's yes does to the "Citations checked" badge (rag/stages/confirm.py), measured.

The policy suites' questions of a split, near misses included, are answered as ``rag eval suite`` answers them
(offline, the extractive answer). Each answer whose badge is within reach is put through
``rag.stages.confirm.worth_asking`` and ``ask_parts`` exactly as the query path's ``confirm`` stage does, with the LLM at
``RAG_LLM_BASE_URL``, asking about every part whose quote clears ``--bar`` (0: every addressed part, so that
higher bars are read off the same replies). The report gives, per confirmation bar, the badge's precision (its
answers hold a gold quote) and recall as ``evaluation.suite`` grades them, near misses given the badge, and what
the calls cost::

    RAG_LLM_BASE_URL=http://127.0.0.1:8765/v1 python -m evaluation.confirm_measure \\
        --suites dev,gitlab,sample,moj,hypha --split tune --work-dir /work/cache/suite --out confirm.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.suite import POLICY_SUITES, Paths, grade_policy, policy_questions, run_suites
from rag.models.sentences import chunk_heading
from rag.stages.confirm import ask, ask_parts, worth_asking
from rag.text import collapse_ws
from rag.traces.status import failed_citations

BARS = (0.0, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


def heading_of(quote: str, evidence: Sequence[Mapping[str, Any]]) -> str:
    """The heading (title and section path) of the evidence passage the quote comes from."""
    said = collapse_ws(quote)
    for e in evidence:
        if said in collapse_ws(str(e.get("text", ""))):
            return chunk_heading(str(e.get("title") or ""), str(e.get("section") or ""))
    return ""


def answer_bar(result: Mapping[str, Any]) -> float | None:
    """The reader's answer bar, as its stage recorded it (None: the reader did not run)."""
    read = next((s["detail"] for s in result.get("stages", []) if s["name"] == "read"), None)
    return None if read is None else float(read["answer_bar"])


def badge_in_reach(result: Mapping[str, Any]) -> bool:
    """Every citation valid and supported, every claim supported: what the confirm stage requires."""
    return (
        not result.get("abstained")
        and bool(result.get("citations"))
        and not failed_citations(result)
        and bool((result.get("verification") or {}).get("verified"))
    )


def confirm_result(result: dict[str, Any], llm: Any, bar: float) -> dict[str, Any]:
    """``result`` with the confirm stage's work on it: ``asked`` (each part put to the LLM, with its reader
    support and the seconds the call took) and the answer check it leaves; nothing asked, nothing changed."""
    evidence = result.get("evidence") or []

    def ask_part(check: Mapping[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        reply = ask(
            llm, str(check["text"]), str(check["quote"]), section=heading_of(str(check["quote"]), evidence)
        )
        return {
            **reply,
            "support": float(check.get("support") or 0.0),
            "s": round(time.perf_counter() - started, 3),
        }

    if not worth_asking(result["answer_check"], badge_in_reach=badge_in_reach(result), bar=bar):
        return {**result, "asked": []}
    answer_check, asked = ask_parts(result["answer_check"], ask_part)
    return {**result, "asked": asked, "answer_check_confirmed": answer_check}


def at_bar(result: dict[str, Any], bar: float) -> dict[str, Any]:
    """The result as the query path serves it at confirmation bar ``bar``: the badge shown when every part
    asked about was confirmed and its quote's reader support reaches ``bar``."""
    asked = result.get("asked") or []
    granted = bool(asked) and all(a["confirmed"] and a["support"] >= bar for a in asked)
    if not granted:
        return result
    return {**result, "verified": True, "answer_check": result["answer_check_confirmed"]}


def summarise(
    rows_by_bar: Mapping[float, Sequence[dict[str, Any]]], asked: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": len(asked), "yes": sum(bool(a["confirmed"]) for a in asked)}
    out["unclear"] = sum(a["confirmed"] is None for a in asked)
    out["seconds_per_call"] = round(sum(a["s"] for a in asked) / max(len(asked), 1), 2)
    for bar, rows in rows_by_bar.items():
        answered = [r for r in rows if "all_gold" in r and not r["abstained"]]
        badged = [r for r in answered if r["badge"]]
        near = [r for r in rows if r["unanswerable"] and r.get("badge_shown")]
        out[f"bar {bar:g}"] = {
            "answered": len(answered),
            "badged": len(badged),
            "badged_hold_gold": sum(r["answer_any_gold"] for r in badged),
            "precision": round(sum(r["answer_any_gold"] for r in badged) / len(badged), 3)
            if badged
            else None,
            "share_badged": round(len(badged) / len(answered), 3) if answered else None,
            "near_misses_badged": len(near),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from rag.config import load_settings
    from rag.llm.client import LLMClient

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default=",".join(s for s in POLICY_SUITES))
    parser.add_argument("--split", default="tune", choices=("tune", "test"))
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--bar", type=float, default=0.0, help="ask about every part whose quote clears it")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    llm = LLMClient.from_settings(load_settings())
    if llm is None:
        print("Set RAG_LLM_BASE_URL (e.g. `rag llm serve`) first.", file=sys.stderr)
        return 2
    suites = [s for s in args.suites.split(",") if s]
    paths = Paths(args.shared, args.work_dir)
    results: dict[tuple[str, str], dict[str, Any]] = {}
    run_suites(suites, args.split, paths, results=lambda s, qid, r: results.__setitem__((s, qid), r))
    report: dict[str, Any] = {"split": args.split, "bar_asked": args.bar, "model": llm.model, "suites": {}}
    pooled: dict[float, list[dict[str, Any]]] = {b: [] for b in BARS}
    pooled_asked: list[dict[str, Any]] = []
    for suite in suites:
        by_bar: dict[float, list[dict[str, Any]]] = {b: [] for b in BARS}
        suite_asked: list[dict[str, Any]] = []
        for q in policy_questions(paths, suite, args.split):
            result = results[(suite, q.id)]
            bar = answer_bar(result)
            confirmed = confirm_result(result, llm, args.bar) if bar is not None else {**result, "asked": []}
            suite_asked += confirmed["asked"]
            for b in BARS:
                served = at_bar(confirmed, b)
                row = grade_policy(q, served)
                row["badge_shown"] = bool(served.get("verified")) and not served.get("abstained")
                by_bar[b].append(row)
            print(f"{suite} {len(by_bar[BARS[0]])}: asked {len(confirmed['asked'])}", file=sys.stderr)
        report["suites"][suite] = summarise(by_bar, suite_asked)
        for b in BARS:
            pooled[b] += by_bar[b]
        pooled_asked += suite_asked
    report["pooled"] = summarise(pooled, pooled_asked)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["pooled"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
