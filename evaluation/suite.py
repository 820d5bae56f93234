"""Every quality suite in one run (``rag eval suite``): policy QA, SciFact, HotpotQA and unanswerables, per split.

Each corpus is ingested by the project's own ingestion into ``<work_dir>/<corpus>`` (incremental: an unchanged
corpus is reused in milliseconds) and asked through one pipeline per corpus, corpus by corpus, so at most one
index is open at a time. Suites, each on the tune or test half of its fixed split (``evaluation.splits``):

* ``dev``, ``gitlab``, ``sample`` (policy QA): the question file plus the near-miss unanswerables written for its
  corpus (``evaluation/suites/near_miss/``), through ``run_qa``. Figures as ``../shared/tools/grade_evidence.py``
  defines them (the same ``covered()``): all gold quotes in the final evidence, quotes covered, best gold at an
  edge, unanswerable abstained, false abstention (an answerable question declined), invalid citations, evidence
  tokens per answer, answer accuracy (answer strings, or the reference answer's key facts), latency without the
  generator.
* ``scifact``: nDCG@10 and recall@100 of the query path's ranking on the train-qrels queries of the split
  (``evaluation.retrieval``'s definitions; the test half is the half the reranker never saw).
* ``hotpotqa``: ``dev-multihop.jsonl`` and ``dev-mixed.jsonl`` pooled into one corpus; both supporting paragraphs
  in the final evidence and the answer span in the answer, separately for bridge and comparison questions.
* ``followup``: conversations of two turns (``evaluation/suites/followups.jsonl``) over the policy corpora. The
  first question is asked, then the follow-up with the conversation as its history (the chat's
  ``rag.stages.memory.select_history`` within the history budget), then the standalone question the follow-up stands for,
  alone. The follow-up and the standalone question are graded against the same gold: all gold in the evidence,
  answer holds a gold quote, best gold at an edge, their differences, and how many follow-ups were rewritten.
* ``unanswerable``: questions of one suite asked against another suite's corpus, which cannot answer them (policy
  questions against Wikipedia paragraphs and scientific abstracts, HotpotQA questions and SciFact claims against the
  policy handbooks): every one must abstain. Pairs whose domains overlap (two employee handbooks) are not used.

Rates carry Wilson 95% intervals; SciFact's means a bootstrap interval over queries.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import (
    EvalQuestion,
    default_questions_path,
    load_questions,
    question_from_dict,
    read_jsonl,
)
from evaluation.graders import covered
from evaluation.splits import (
    FOLLOWUPS_PATH,
    NEAR_MISS_FOLLOWUPS_PATH,
    SPLITS_PATH,
    hotpot_kind,
    split_ids,
)
from evaluation.stats import wilson_interval
from rag.errors import ConfigurationError

POLICY_SUITES = ("dev", "gitlab", "moj", "hypha", "sample")
SUITES = (*POLICY_SUITES, "followup", "scifact", "hotpotqa", "unanswerable")
NEAR_MISS_DIR = SPLITS_PATH.parent / "near_miss"
CROSS_PER_PAIR = 40  # questions per (question suite, foreign corpus) pair, drawn with a fixed seed
CROSS_SEED = 20261201
# (questions of suite, asked against corpus): domains that cannot answer each other
CROSS_PAIRS = (
    *((handbook, "hotpotqa") for handbook in POLICY_SUITES),
    *((handbook, "scifact") for handbook in POLICY_SUITES),
    *(("hotpotqa", handbook) for handbook in POLICY_SUITES),
    *(("scifact", handbook) for handbook in POLICY_SUITES),
)
Log = Callable[[str], None]
Sink = Callable[[str, dict[str, Any]], None]  # (question id, the rag ask --json object)


@dataclass(frozen=True)
class Paths:
    """Where the suites' data lives: ``shared`` is the team's read-only data folder. With ``copies``, the policy
    corpora found there (``evaluation.format_copies``: scans, Word or HTML copies, one folder per corpus) are
    ingested instead of their originals."""

    shared: Path
    work_dir: Path
    copies: Path | None = None

    @property
    def data(self) -> Path:
        return self.shared / "data"

    def corpus_inputs(self, corpus: str) -> list[Path]:
        d = self.data
        if self.copies is not None and (self.copies / corpus).is_dir():
            return [self.copies / corpus]
        if corpus == "dev":
            return [d / "policies/civicactions-handbook/markdown", d / "policies/epa-infosec"]
        if corpus == "gitlab":
            return [d / "policies/gitlab-people"]
        if corpus == "moj":
            return [d / "policies/moj-handbook/pdf"]
        if corpus == "hypha":
            return [d / "policies/hypha-handbook/pdf"]
        if corpus == "sample":
            return [default_questions_path().parent / "pdfs"]
        if corpus == "scifact":
            return [d / "scifact/corpus.jsonl"]
        if corpus == "hotpotqa":
            return [self.work_dir / "hotpotqa-corpus.jsonl"]
        raise ConfigurationError(f"No corpus {corpus!r}.")

    def questions(self, suite: str) -> Path:
        if suite == "dev":
            return self.data / "questions/dev.jsonl"
        if suite == "gitlab":
            return self.data / "questions/gitlab-dev.jsonl"
        if suite in ("moj", "hypha"):
            return self.data / f"questions/{suite}-dev.jsonl"
        if suite == "sample":
            return default_questions_path()
        raise ConfigurationError(f"No policy question file for {suite!r}.")

    def hotpot_files(self) -> list[Path]:
        return [self.data / "hotpotqa/dev-multihop.jsonl", self.data / "hotpotqa/dev-mixed.jsonl"]


def needs_shared(suite: str) -> bool:
    """Whether the suite cannot run at all without the shared data (``followup`` then asks only its sample pairs)."""
    return suite not in ("sample", "followup")


def corpora_for(suites: Sequence[str]) -> list[str]:
    """Corpora the chosen suites ask, in a fixed order (each ingested and opened once)."""
    wanted = {s for s in suites if s != "unanswerable"}
    if "followup" in suites:
        wanted |= {p.corpus for p in load_followups()}
    if "unanswerable" in suites:
        # the foreign corpora questions are asked against: those of the chosen suites, or every one when the
        # unanswerables run alone (SciFact's 10k chunks are then the only costly one)
        alone = not wanted
        wanted |= {c for _, c in CROSS_PAIRS if alone or c in wanted}
    return [c for c in ("sample", "dev", "gitlab", "moj", "hypha", "hotpotqa", "scifact") if c in wanted]


# ------------------------------------------------------------------------------------------------ questions
def policy_questions(paths: Paths, suite: str, split: str) -> list[EvalQuestion]:
    """The suite's questions and its near-miss unanswerables, restricted to ``split``."""
    keep = split_ids(suite, split)
    qs = [q for q in load_questions(paths.questions(suite)) if q.id in keep]
    near = NEAR_MISS_DIR / f"{suite}.jsonl"
    if near.is_file():
        near_keep = split_ids(f"near_miss_{suite}", split)
        qs += [q for q in load_questions(near) if q.id in near_keep]
    return qs


def hotpot_records(paths: Paths) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in paths.hotpot_files()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def scifact_queries(paths: Paths, split: str) -> list[Any]:
    from evaluation.retrieval import load_queries

    keep = split_ids("scifact", split)
    qs = load_queries(paths.data / "scifact/queries.jsonl", paths.data / "scifact/qrels/train.tsv")
    return [q for q in qs if q.qid in keep]


def cross_questions(paths: Paths, source: str, split: str) -> list[EvalQuestion]:
    """``source``'s answerable questions as unanswerables (asked elsewhere), a fixed sample of the split."""
    if source in POLICY_SUITES:
        pool = [
            EvalQuestion(f"x-{source}-{q.id}", q.question, "unanswerable", user=q.user, groups=q.groups)
            for q in policy_questions(paths, source, split)
            if not q.expects_abstention
        ]
    elif source == "hotpotqa":
        keep = split_ids("hotpotqa", split)
        pool = [
            EvalQuestion(f"x-hotpotqa-{r['question_id']}", r["question_text"], "unanswerable")
            for r in hotpot_records(paths)
            if str(r["question_id"]) in keep
        ]
    elif source == "scifact":
        pool = [
            EvalQuestion(f"x-scifact-{q.qid}", q.text, "unanswerable") for q in scifact_queries(paths, split)
        ]
    else:
        raise ConfigurationError(f"No questions for {source!r}.")
    pool.sort(key=lambda q: q.id)
    random.Random(f"{CROSS_SEED}:{source}:{split}").shuffle(pool)
    return pool[:CROSS_PER_PAIR]


@dataclass(frozen=True)
class FollowupPair:
    """One two-turn conversation: a first question, a follow-up that only makes sense after it, and the standalone
    question the follow-up stands for. The follow-up and the standalone question share one gold."""

    id: str
    corpus: str
    first: EvalQuestion  # graded against the first question's own gold (``first_evidence``)
    followup: EvalQuestion
    standalone: EvalQuestion

    @property
    def near_miss(self) -> bool:
        """The follow-up asks what the corpus does not say (``followups_near_miss.jsonl``): it should abstain."""
        return self.followup.type == "unanswerable"


def load_followups(path: Path = FOLLOWUPS_PATH) -> list[FollowupPair]:
    pairs = []
    for line, r in read_jsonl(path):
        asker: dict[str, Any] = {k: r[k] for k in ("user", "groups", "as_of", "tags") if k in r}
        kind = {"type": r["type"]} if r.get("type") else {}
        gold: dict[str, Any] = {
            "answer": r.get("answer"),
            "evidence": r.get("evidence") or [],
            **kind,
            **asker,
        }
        first: dict[str, Any] = {"evidence": r.get("first_evidence") or [], **asker}
        pairs.append(
            FollowupPair(
                str(r["id"]),
                str(r["corpus"]),
                question_from_dict({"id": f"{r['id']}:first", "question": r["first"], **first}, line),
                question_from_dict({"id": str(r["id"]), "question": r["followup"], **gold}, line),
                question_from_dict(
                    {"id": f"{r['id']}:standalone", "question": r["standalone"], **gold}, line
                ),
            )
        )
    return pairs


def followup_pairs(split: str) -> list[FollowupPair]:
    """The split's follow-up pairs, then its near-miss follow-up pairs."""
    keep = split_ids("followup", split)
    pairs = [p for p in load_followups() if p.id in keep]
    if NEAR_MISS_FOLLOWUPS_PATH.is_file():
        near = split_ids("followup_near_miss", split)
        pairs += [p for p in load_followups(NEAR_MISS_FOLLOWUPS_PATH) if p.id in near]
    return pairs


# ------------------------------------------------------------------------------------------------ figures
def rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 4) if n else None, "ci95": [round(lo, 4), round(hi, 4)]}


def percentile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2) if values else 0.0


def bootstrap_mean(values: Sequence[float], n: int = 2000, seed: int = 0) -> list[float]:
    if not values:
        return [0.0, 0.0]
    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, len(arr), size=(n, len(arr)))].mean(axis=1)
    return [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)]


def no_generator_ms(result: dict[str, Any]) -> float:
    timings = result.get("timings_ms") or {}
    return sum(v for k, v in timings.items() if k not in ("generate", "total"))


def grade_policy(q: EvalQuestion, result: dict[str, Any]) -> dict[str, Any]:
    """The grader's per-question facts (``grade_evidence.py``), plus answer accuracy and cost."""
    from evaluation.graders import (
        answer_text_faults,
        answer_words,
        at_prompt_edge,
        best_gold_at_edge,
        first_covering,
        rerank_top,
    )
    from evaluation.qa import grade_answer

    evidence = sorted(result.get("evidence", []), key=lambda e: e.get("n", 0))
    texts = [e.get("text", "") for e in evidence]
    answer = str(result.get("answer") or "")
    abstained = bool(result.get("abstained"))
    citations = result.get("citations", [])
    correct = grade_answer(q, answer, abstained)[0]
    row: dict[str, Any] = {
        "id": q.id,
        "type": q.type,
        "question": q.question,
        "answerable": not q.expects_abstention,
        "unanswerable": q.type == "unanswerable",
        "abstained": abstained,
        "correct": correct,
        "has_gold_answer": bool(q.answers or q.answer or q.all_of),
        "citations": len(citations),
        "invalid_citations": sum(1 for c in citations if not c.get("valid", False)),
        "evidence_tokens": (result.get("tokens") or {}).get("evidence", 0),
        "evidence_words": sum(len(t.split()) for t in texts),
        "answer_words": answer_words(result),
        "ms": round(no_generator_ms(result), 3),
        "error": result.get("error"),
        **answer_text_faults(result),
    }
    top = rerank_top(evidence)
    if top is not None and not abstained:
        # the passage the reranker scored highest, first or last in the prompt (its own place, not its bundle's)
        row["top_first_or_last"] = at_prompt_edge(top.get("n"), evidence)
    if q.quotes and not q.expects_abstention:
        hits = [covered(g, texts) for g in q.quotes]
        # what the user reads (grade_evidence.py): the answer text holds a gold quote, or every one; the badge
        # ("Citations checked") is shown on verified answers that did not abstain
        said = [covered(g, [answer]) for g in q.quotes] if answer and not abstained else [False]
        if not abstained:  # the passage holding the first gold quote is first or last in the prompt
            row["gold_first_or_last"] = at_prompt_edge(first_covering(q.quotes[0], evidence), evidence)
        row.update(
            quotes=len(hits),
            quotes_covered=sum(hits),
            all_gold=all(hits),
            best_gold_at_edge=best_gold_at_edge(q.quotes[0], evidence),
            gold_position=first_covering(q.quotes[0], evidence),
            evidence_passages=len(evidence),
            answer_any_gold=any(said),
            answer_all_gold=all(said),
            badge=bool(result.get("verified")) and not abstained,
        )
    return row


def summarise_policy(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    graded = [r for r in rows if "all_gold" in r]
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if r["unanswerable"]]
    with_answer = [r for r in answerable if r["has_gold_answer"]]
    restricted = [r for r in rows if not r["answerable"] and not r["unanswerable"]]
    by_type: dict[str, Any] = {}
    for t in sorted({r["type"] for r in graded}):
        sub = [r for r in graded if r["type"] == t]
        by_type[t] = rate(sum(r["all_gold"] for r in sub), len(sub))
    answered = [r for r in answerable if not r["abstained"]] or answerable
    placed = [r for r in graded if "gold_first_or_last" in r]
    topped = [r for r in rows if "top_first_or_last" in r]
    badged = [r for r in graded if r["badge"]]
    complete = [r for r in graded if r["answer_all_gold"]]
    return {
        "questions": len(rows),
        "all_gold": rate(sum(r["all_gold"] for r in graded), len(graded)),
        "quotes_covered": rate(sum(r["quotes_covered"] for r in graded), sum(r["quotes"] for r in graded)),
        "best_gold_at_edge": rate(sum(r["best_gold_at_edge"] for r in graded), len(graded)),
        # passage level, over answered questions: the passage holding the first gold quote, and the passage the
        # reranker scored highest, first or last in the prompt (a missing gold passage counts as neither)
        "gold_first_or_last": rate(sum(r["gold_first_or_last"] for r in placed), len(placed)),
        "top_first_or_last": rate(sum(r["top_first_or_last"] for r in topped), len(topped)),
        "answer_text": answer_text_counts(rows),
        "answer_any_gold": rate(sum(r["answer_any_gold"] for r in graded), len(graded)),
        "answer_all_gold": rate(sum(r["answer_all_gold"] for r in graded), len(graded)),
        # of the answers shown with "Citations checked", how many hold a gold quote; and how many of the answers
        # that hold every gold quote show it
        "badge_precision": rate(sum(r["answer_any_gold"] for r in badged), len(badged)),
        "badge_recall": rate(sum(r["badge"] for r in complete), len(complete)),
        "all_gold_by_type": by_type,
        "unanswerable_abstained": rate(sum(r["abstained"] for r in unanswerable), len(unanswerable)),
        "false_abstention": rate(sum(r["abstained"] for r in answerable), len(answerable)),
        "restricted_declined": rate(sum(r["abstained"] for r in restricted), len(restricted)),
        "answer_accuracy": rate(sum(r["correct"] for r in with_answer), len(with_answer)),
        "invalid_citations": sum(r["invalid_citations"] for r in rows),
        "citations": sum(r["citations"] for r in rows),
        "evidence_tokens_mean": round(statistics.fmean(r["evidence_tokens"] for r in answered), 1)
        if answered
        else 0.0,
        "evidence_words_mean": round(statistics.fmean(r["evidence_words"] for r in answered), 1)
        if answered
        else 0.0,
        # what the user reads: the answer's words (no Sources line, no markers) over the answerable questions it
        # answered
        "answer_words": _mean_of([r.get("answer_words", 0) for r in answerable if not r["abstained"]]),
        "ms_p50": percentile([r["ms"] for r in rows], 50),
        "ms_p95": percentile([r["ms"] for r in rows], 95),
        "errors": sum(1 for r in rows if r["error"]),
    }


def _mean_of(values: Sequence[float]) -> dict[str, Any]:
    return {"mean": round(statistics.fmean(values), 1) if values else None, "n": len(values)}


def answer_text_counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many answers have each answer-text fault (``evaluation.graders.ANSWER_TEXT_FAULTS``), of how many."""
    from evaluation.graders import ANSWER_TEXT_FAULTS

    return {"answers": len(rows), **{f: sum(bool(r.get(f)) for r in rows) for f in ANSWER_TEXT_FAULTS}}


def _difference(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    return None if a["rate"] is None or b["rate"] is None else round(a["rate"] - b["rate"], 4)


def summarise_followups(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The follow-ups against the same questions asked standalone (differences: follow-up minus standalone); the
    near-miss follow-ups (their follow-up asks what the corpus does not say) apart: how often the follow-up, and the
    same question asked standalone, abstain."""
    near = [r for r in rows if r["followup"]["unanswerable"]]
    rows = [r for r in rows if not r["followup"]["unanswerable"]]
    followup = summarise_policy([r["followup"] for r in rows])
    standalone = summarise_policy([r["standalone"] for r in rows])
    first = [r["first"] for r in rows if "all_gold" in r["first"]]
    both = [r for r in rows if "all_gold" in r["followup"] and "all_gold" in r["standalone"]]
    by_corpus = {}
    for corpus in sorted({r["corpus"] for r in rows}):
        sub = [r for r in rows if r["corpus"] == corpus]
        by_corpus[corpus] = {
            "pairs": len(sub),
            "followup_all_gold": summarise_policy([r["followup"] for r in sub])["all_gold"],
            "standalone_all_gold": summarise_policy([r["standalone"] for r in sub])["all_gold"],
        }
    return {
        "pairs": len(rows),
        "followup": followup,
        "standalone": standalone,
        "all_gold_difference": _difference(followup["all_gold"], standalone["all_gold"]),
        "answer_any_gold_difference": _difference(followup["answer_any_gold"], standalone["answer_any_gold"]),
        "best_gold_at_edge_difference": _difference(
            followup["best_gold_at_edge"], standalone["best_gold_at_edge"]
        ),
        # all gold, pair by pair: how often the conversation loses what the standalone question finds
        "all_gold_pairs": {
            "both": sum(r["followup"]["all_gold"] and r["standalone"]["all_gold"] for r in both),
            "standalone_only": sum(
                r["standalone"]["all_gold"] and not r["followup"]["all_gold"] for r in both
            ),
            "followup_only": sum(r["followup"]["all_gold"] and not r["standalone"]["all_gold"] for r in both),
            "neither": sum(not (r["followup"]["all_gold"] or r["standalone"]["all_gold"]) for r in both),
        },
        "first_all_gold": rate(sum(r["all_gold"] for r in first), len(first)),
        "rewritten": rate(sum(r["rewritten"] for r in rows), len(rows)),
        "by_corpus": by_corpus,
        "near_miss": {
            "pairs": len(near),
            "first_answered": rate(sum(not r["first"]["abstained"] for r in near), len(near)),
            "followup_abstained": rate(sum(r["followup"]["abstained"] for r in near), len(near)),
            "standalone_abstained": rate(sum(r["standalone"]["abstained"] for r in near), len(near)),
            # a near-miss follow-up that answers, quoting only what the first answer quoted already
            "followup_repeats_first": sum(bool(r.get("repeats_first")) for r in near),
        },
    }


# ------------------------------------------------------------------------------------------------ running
def ask_all(pipeline: Any, questions: Sequence[EvalQuestion], options: Any) -> list[dict[str, Any]]:
    """``rag ask --json`` objects, one per question, asked as each record's user (default ``eval``)."""
    from evaluation.qa import run_qa

    return run_qa(questions, pipeline, options=options).results


def run_policy(
    pipeline: Any, questions: Sequence[EvalQuestion], options: Any, sink: Sink | None = None
) -> dict[str, Any]:
    results = ask_all(pipeline, questions, options)
    if sink is not None:
        for q, r in zip(questions, results, strict=True):
            sink(q.id, r)
    rows = [grade_policy(q, r) for q, r in zip(questions, results, strict=True)]
    return {**summarise_policy(rows), "rows": rows}


def run_followups(
    pipeline: Any, pairs: Sequence[FollowupPair], options: Any, sink: Sink | None = None
) -> list[dict[str, Any]]:
    """Each pair as the chat asks it: the first question, then the follow-up after it (the chat's history: the
    turns ``rag.stages.memory.select_history`` keeps within the history budget, ``ui/views/chat.py``), then the
    standalone question alone. One row per pair, each question graded by ``grade_policy``."""
    from evaluation.qa import as_asked, ask
    from rag.stages.memory import select_history

    rows = []
    for p in pairs:
        first = ask(pipeline, as_asked(p.first), options)
        turns = [("user", p.first.question), ("assistant", str(first.get("answer") or ""))]
        history = select_history(turns, pipeline.settings.history_token_budget)
        followup = ask(pipeline, as_asked(p.followup, history=history), options)
        standalone = ask(pipeline, as_asked(p.standalone), options)
        if sink is not None:
            for q, r in ((p.first, first), (p.followup, followup), (p.standalone, standalone)):
                sink(q.id, r)
        rows.append(grade_followup(p, first, followup, standalone))
    return rows


def grade_followup(
    p: FollowupPair, first: dict[str, Any], followup: dict[str, Any], standalone: dict[str, Any]
) -> dict[str, Any]:
    """One pair's row: each of its three answers graded by ``grade_policy``, and how the follow-up was searched."""
    from evaluation.graders import repeats_previous

    # the rewrite stage's record (rag/stages/standalone.py); absent before it, hence .get
    searched = followup.get("standalone") or {}
    return {
        "id": p.id,
        "corpus": p.corpus,
        "first": grade_policy(p.first, first),
        "followup": grade_policy(p.followup, followup),
        "standalone": grade_policy(p.standalone, standalone),
        "rewritten": bool(searched.get("rewritten")),
        "repeats_first": repeats_previous(str(first.get("answer") or ""), followup),
        "searched_as": searched.get("question"),
        "rewrite_method": searched.get("method"),
    }


def run_hotpot(
    pipeline: Any, records: Sequence[dict[str, Any]], options: Any, sink: Sink | None = None
) -> dict[str, Any]:
    from evaluation.graders import answer_text_faults
    from evaluation.multihop import MultiHopQuestion, paragraph_id, run_multihop, summarise

    kinds = {str(r["question_id"]): hotpot_kind(r) for r in records}
    qs = [
        MultiHopQuestion(
            str(r["question_id"]),
            r["question_text"],
            tuple(s for o in r.get("answers_objects", []) for s in o.get("spans", []) if s),
            tuple(
                paragraph_id(c["title"], c["paragraph_text"]) for c in r["contexts"] if c.get("is_supporting")
            ),
        )
        for r in records
    ]
    report = run_multihop(qs, pipeline, {"default": options})
    if sink is not None:
        for result in report.results["default"]:
            sink(str(result["id"]), result)
    rows = [{**row, "kind": kinds[row["id"]]} for row in report.rows["default"]]
    out: dict[str, Any] = {"overall": summarise(rows)}
    out["answer_text"] = answer_text_counts([answer_text_faults(r) for r in report.results["default"]])
    for kind in ("bridge", "comparison"):
        out[kind] = summarise([r for r in rows if r["kind"] == kind])
    out["rows"] = rows
    return out


def run_scifact(
    data_dir: Path, queries: Sequence[Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    from evaluation.retrieval import run

    result = run(data_dir, queries, per_query=True, overrides=overrides)
    rows = result["per_query"]["pipeline"]
    out = {"queries": len(rows), "index": result["index"]}
    for metric in ("ndcg@10", "recall@100"):
        vals = [r[metric] for r in rows]
        out[metric] = {
            "mean": round(statistics.fmean(vals), 4) if vals else 0.0,
            "ci95": bootstrap_mean(vals),
        }
    out["ms_p50"] = result["systems"]["pipeline"].get("ms_p50")
    return out


def ingest_corpus(paths: Paths, corpus: str, log: Log) -> Path:
    from ingest.indexer import ingest
    from rag.config import load_settings

    data_dir = paths.work_dir / corpus
    if corpus == "hotpotqa":
        from evaluation.multihop import load_multihop, write_corpus

        records: dict[str, dict[str, str]] = {}
        for f in paths.hotpot_files():
            for r in load_multihop(f)[1]:
                records.setdefault(r["_id"], r)
        write_corpus(list(records.values()), paths.work_dir / "hotpotqa-corpus.jsonl")
    inputs = paths.corpus_inputs(corpus)
    missing = [p for p in inputs if not p.exists()]
    if missing:
        raise ConfigurationError(
            f"Suite corpus {corpus!r} is missing {missing[0]}.", hint="Pass --shared DIR."
        )
    started = time.perf_counter()
    # exact: the work dir holds exactly the suite corpus (the sample corpus read from another checkout, whose
    # documents get other ids, replaces the old copy instead of joining it)
    report = ingest([str(p) for p in inputs], load_settings(data_dir=data_dir), exact=True)
    if not report.ok:
        raise ConfigurationError(
            f"Ingesting the {corpus} corpus failed; run `rag ingest` on {inputs} to see why."
        )
    log(f"{corpus}: {report.index_chunks} chunks ready in {time.perf_counter() - started:.1f} s")
    return data_dir


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _sink(results: Callable[[str, str, dict[str, Any]], None] | None, suite: str) -> Sink | None:
    return None if results is None else (lambda qid, result: results(suite, qid, result))


def run_suites(
    suites: Sequence[str],
    split: str,
    paths: Paths,
    *,
    options: Any = None,
    settings_overrides: dict[str, Any] | None = None,
    log: Log = lambda _msg: None,
    results: Callable[[str, str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run ``suites`` on ``split``; returns ``{meta, suites, combined}`` (the ``rag eval suite --json`` shape).

    ``results(suite, question_id, result)`` receives every ``rag ask --json`` object the run produced (the
    unanswerables under ``unanswerable:SOURCE->TARGET``): ``evaluation/parity.py`` compares two runs with it."""
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions

    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ConfigurationError(f"Unknown suite {unknown[0]!r}.", hint=f"Suites: {', '.join(SUITES)}.")
    if any(needs_shared(s) for s in suites) and not paths.data.is_dir():
        raise ConfigurationError(
            f"The suites {', '.join(s for s in suites if needs_shared(s))} need the shared data at {paths.shared}.",
            hint="Pass --shared DIR, or run only --suites sample.",
        )
    options = options or PipelineOptions(use_llm=False)
    overrides = settings_overrides or {}
    out: dict[str, Any] = {}
    cross_rows: dict[str, list[dict[str, Any]]] = {}
    followups = followup_pairs(split) if "followup" in suites else []
    followup_rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    settings_seen: dict[str, Any] = {}
    for corpus in corpora_for(suites):
        if needs_shared(corpus) and not paths.data.is_dir():
            if any(p.corpus == corpus for p in followups):
                log(f"followup: no shared data at {paths.shared}, the {corpus} pairs are not asked")
            continue
        data_dir = ingest_corpus(paths, corpus, log)
        if corpus == "scifact" and "scifact" in suites:
            log("scifact: ranking the split's queries")
            out["scifact"] = run_scifact(data_dir, scifact_queries(paths, split), overrides)
        pipeline = build_pipeline(load_settings(data_dir=data_dir, **overrides))
        settings_seen = {
            "reranker": pipeline.reranker.name,
            "evidence_k": pipeline.settings.evidence_k,
            "evidence_token_budget": pipeline.settings.evidence_token_budget,
        }
        try:
            if corpus in POLICY_SUITES and corpus in suites:
                log(f"{corpus}: asking the {split} questions")
                out[corpus] = run_policy(
                    pipeline, policy_questions(paths, corpus, split), options, _sink(results, corpus)
                )
            asked_here = [p for p in followups if p.corpus == corpus]
            if asked_here:
                log(f"followup: {len(asked_here)} {corpus} conversations of the {split} split")
                followup_rows += run_followups(pipeline, asked_here, options, _sink(results, "followup"))
            if corpus == "hotpotqa" and "hotpotqa" in suites:
                keep = split_ids("hotpotqa", split)
                log("hotpotqa: asking the split's questions")
                records = [r for r in hotpot_records(paths) if str(r["question_id"]) in keep]
                out["hotpotqa"] = run_hotpot(pipeline, records, options, _sink(results, "hotpotqa"))
            if "unanswerable" in suites:
                for source, target in CROSS_PAIRS:
                    if target != corpus or (needs_shared(source) and not paths.data.is_dir()):
                        continue
                    qs = cross_questions(paths, source, split)
                    log(f"unanswerable: {len(qs)} {source} questions against the {corpus} corpus")
                    answers = ask_all(pipeline, qs, options)
                    if results is not None:
                        for q, r in zip(qs, answers, strict=True):
                            results(f"unanswerable:{source}->{target}", q.id, r)
                    cross_rows[f"{source}->{target}"] = [
                        grade_policy(q, r) for q, r in zip(qs, answers, strict=True)
                    ]
        finally:
            pipeline.reader.close()
    if "followup" in suites:
        out["followup"] = {**summarise_followups(followup_rows), "rows": followup_rows}
    if "unanswerable" in suites:
        pairs = {
            name: {
                "abstained": rate(sum(r["abstained"] for r in rows), len(rows)),
                "invalid_citations": sum(r["invalid_citations"] for r in rows),
            }
            for name, rows in cross_rows.items()
        }
        near = [r for s in POLICY_SUITES if s in out for r in out[s]["rows"] if r["id"].startswith("nm-")]
        every = [r for rows in cross_rows.values() for r in rows]
        out["unanswerable"] = {
            "cross_corpus": rate(sum(r["abstained"] for r in every), len(every)),
            "near_miss": rate(sum(r["abstained"] for r in near), len(near)),
            "answer_text": answer_text_counts(every),
            "pairs": pairs,
            "rows": every,
        }
    return {
        "meta": {
            "split": split,
            "suites": list(suites),
            "commit": git_commit(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "seconds": round(time.perf_counter() - started, 1),
            "work_dir": str(paths.work_dir),
            "settings": {**settings_seen, **overrides},
        },
        "suites": out,
        "combined": combined(out),
    }


def combined(suites: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per suite with its headline figures (the table docs/evaluation.md keeps)."""
    rows: list[dict[str, Any]] = []
    for name in POLICY_SUITES:
        if name in suites:
            s = suites[name]
            rows.append(
                {
                    "suite": name,
                    "all_gold": s["all_gold"],
                    "best_gold_at_edge": s["best_gold_at_edge"],
                    "gold_first_or_last": s["gold_first_or_last"],
                    "top_first_or_last": s["top_first_or_last"],
                    "answer_any_gold": s["answer_any_gold"],
                    "answer_all_gold": s["answer_all_gold"],
                    "badge_precision": s["badge_precision"],
                    "badge_recall": s["badge_recall"],
                    "unanswerable_abstained": s["unanswerable_abstained"],
                    "false_abstention": s["false_abstention"],
                    "answer_accuracy": s["answer_accuracy"],
                    "invalid_citations": s["invalid_citations"],
                    "evidence_tokens_mean": s["evidence_tokens_mean"],
                    "answer_words": s["answer_words"],
                    "ms_p50": s["ms_p50"],
                    "answer_text": s["answer_text"],
                }
            )
    policy = [suites[n] for n in POLICY_SUITES if n in suites]
    if len(policy) > 1:

        def pooled(key: str) -> dict[str, Any]:
            return rate(sum(s[key]["k"] for s in policy), sum(s[key]["n"] for s in policy))

        rows.append(
            {
                "suite": "policy (pooled)",
                **{
                    k: pooled(k)
                    for k in (
                        "all_gold",
                        "best_gold_at_edge",
                        "gold_first_or_last",
                        "top_first_or_last",
                        "answer_any_gold",
                        "answer_all_gold",
                        "badge_precision",
                        "badge_recall",
                        "unanswerable_abstained",
                        "false_abstention",
                        "answer_accuracy",
                    )
                },
                "invalid_citations": sum(s["invalid_citations"] for s in policy),
                "answer_words": _pooled_mean([s["answer_words"] for s in policy]),
                "answer_text": _summed([s["answer_text"] for s in policy]),
            }
        )
    if "followup" in suites:
        f = suites["followup"]
        rows.append(
            {
                "suite": "followup",
                "pairs": f["pairs"],
                "followup_all_gold": f["followup"]["all_gold"],
                "standalone_all_gold": f["standalone"]["all_gold"],
                "all_gold_difference": f["all_gold_difference"],
                "followup_answer_any_gold": f["followup"]["answer_any_gold"],
                "standalone_answer_any_gold": f["standalone"]["answer_any_gold"],
                "followup_best_gold_at_edge": f["followup"]["best_gold_at_edge"],
                "rewritten": f["rewritten"],
                "near_miss_followup_abstained": f["near_miss"]["followup_abstained"],
                "near_miss_standalone_abstained": f["near_miss"]["standalone_abstained"],
            }
        )
    if "hotpotqa" in suites:
        h = suites["hotpotqa"]
        rows.append(
            {
                "suite": "hotpotqa",
                "both_supporting": h["overall"]["both_in_evidence"],
                "bridge_both": h["bridge"]["both_in_evidence"],
                "comparison_both": h["comparison"]["both_in_evidence"],
                "answer_present": h["overall"]["answer_present"],
                "ms_p50": h["overall"]["ms_end_to_end"]["p50"],
            }
        )
    if "scifact" in suites:
        rows.append({"suite": "scifact", **{k: suites["scifact"][k] for k in ("ndcg@10", "recall@100")}})
    if "unanswerable" in suites:
        u = suites["unanswerable"]
        rows.append({"suite": "unanswerable", "cross_corpus": u["cross_corpus"], "near_miss": u["near_miss"]})
    # every answer the run gave: the policy suites' (near misses included), the cross-corpus unanswerables' and
    # HotpotQA's; follow-ups are asked again standalone, so their answers are not counted twice
    counted = [suites[n]["answer_text"] for n in (*POLICY_SUITES, "unanswerable", "hotpotqa") if n in suites]
    if counted:
        rows.append({"suite": "answer text (every answer)", "answer_text": _summed(counted)})
    return rows


def _pooled_mean(means: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = sum(m["n"] for m in means)
    total = sum(m["mean"] * m["n"] for m in means if m["mean"] is not None)
    return {"mean": round(total / n, 1) if n else None, "n": n}


def _summed(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    return {key: sum(c.get(key, 0) for c in counts) for key in counts[0]} if counts else {}


def strip_rows(report: dict[str, Any]) -> dict[str, Any]:
    """The report without per-question rows (what ``--json`` prints unless ``--rows``)."""
    suites = {name: {k: v for k, v in s.items() if k != "rows"} for name, s in report["suites"].items()}
    return {**report, "suites": suites}
