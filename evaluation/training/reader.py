"""Train the reader (``rag/models/reader.json``): which evidence sentence states what a question asks.

    python -m evaluation.training.reader --shared ../shared --work-dir /work/cache/suite [--write]

Examples are read off the query path itself: every tune-split question of the policy suites (dev, GitLab, MoJ,
Hypha, sample) and HotpotQA is asked through the pipeline the app builds, and each sentence of its final
evidence becomes one (intent, sentence) example with ``rag.stages.read``'s features. Labels: a sentence is
positive when it lies in a gold quote or holds one (the grader's normalisation); a compound question's quotes
go to the intent they share most words with; every sentence of an unanswerable question's evidence (the near
misses) is negative. HotpotQA: a sentence holding the answer span. Test splits are never read.

It always reports each policy corpus held out (trained on the others and HotpotQA): the gold sentence first / in
the top three, and abstention against false abstention at the bar. ``--write`` trains on everything and
writes the model with its bars: ``answer_bar`` is the highest bar whose false abstentions on the pooled
out-of-corpus predictions stay at or below ``FALSE_ABSTENTION``; ``support_bar`` the lowest at which what an
answer would quote (up to three sentences within ``KEEP_RATIO`` of the best) states a gold quote for at least
``BADGE_PRECISION`` of the answerable intents whose best sentence reaches it (gold in the evidence or not), or
``WITHHELD`` when no bar does on ``MIN_SHOWN`` answers or more: then no answer carries "Citations checked".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.graders import norm, states
from rag.models.reader import DEFAULT_READER_MODEL, FEATURES, ReaderModel
from rag.stages.read import intent_features

POLICY = ("dev", "gitlab", "moj", "hypha", "sample")
FALSE_ABSTENTION = 0.04
BADGE_PRECISION = 0.9
MIN_SHOWN = 10  # a support bar is calibrated on at least this many held-out answers
# the support bar when no bar reaches BADGE_PRECISION: the badge is withheld (no probability is 1)
WITHHELD = 1.0
KEEP_RATIO = 0.3  # a further sentence joins an intent's answer at this share of the best one's probability
C = 1.0


def _assign(quotes: Sequence[str], intents: Sequence[str]) -> list[int]:
    """Each quote's intent: the one whose words it holds most of."""
    from rag.text import bm25_tokens

    if len(intents) <= 1:
        return [0] * len(quotes)
    sets = [set(bm25_tokens(i)) for i in intents]
    out = []
    for q in quotes:
        words = set(bm25_tokens(q))
        out.append(int(np.argmax([len(words & s) / (len(s) or 1) for s in sets])))
    return out


def examples(
    pipeline: Any,
    result: Any,
    *,
    quotes: Sequence[str] = (),
    spans: Sequence[str] = (),
) -> list[dict]:
    """One example group per intent: features and labels of every evidence sentence."""
    from rag.stages.budget import score_of
    from rag.stages.extractive import evidence_sentences

    evidence = result.evidence
    sents = evidence_sentences(evidence)
    if not sents:
        return []
    lookup = pipeline.reading_vector_lookup(evidence)
    intents = [i.text for i in result.intents] or [result.question.text]
    qvs = pipeline.reading_query_vectors(intents)
    features = intent_features(
        intents,
        sents,
        query_vectors=qvs,
        vectors=lookup,
        passage_scores={e.n: score_of(e.candidate) for e in evidence},
    )
    owner = _assign(quotes, intents)
    groups = []
    for j, x in enumerate(features):
        mine = [q for q, o in zip(quotes, owner, strict=True) if o == j]
        if spans:
            wanted = [norm(a) for a in spans]
            y = [any(w and f" {w} " in f" {norm(s.text)} " for w in wanted) for s in sents]
        else:
            y = [any(states(s.text, q) for q in mine) for s in sents]
        groups.append(
            {
                "x": x,
                "y": np.array(y, dtype=bool),
                "intent": j,
            }
        )
    return groups


def collect(shared: Path, work_dir: Path, corpora: Sequence[str], split: str = "tune") -> list[dict]:
    """Every example group of ``corpora``'s ``split`` questions (policy suites and ``hotpotqa``)."""
    from evaluation.qa import as_asked
    from evaluation.splits import hotpot_kind, split_ids
    from evaluation.suite import Paths, hotpot_records, ingest_corpus, policy_questions
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions, Question
    from rag.types import Principal

    paths = Paths(shared, work_dir)
    options = PipelineOptions(use_llm=False)
    out: list[dict] = []
    for corpus in corpora:
        data_dir = ingest_corpus(paths, corpus, lambda m: print(m, file=sys.stderr))
        # the examples are the evidence the query path selects before reading it
        pipeline = build_pipeline(load_settings(data_dir=data_dir, ablate="reader"))
        try:
            if corpus == "hotpotqa":
                keep = split_ids("hotpotqa", split)
                for r in hotpot_records(paths):
                    if str(r["question_id"]) not in keep or hotpot_kind(r) != "bridge":
                        continue
                    spans = [s for o in r.get("answers_objects", []) for s in o.get("spans", []) if s]
                    result = pipeline.ask(Question(r["question_text"], Principal("eval")), options)
                    for g in examples(pipeline, result, spans=spans):
                        out.append({**g, "corpus": corpus, "qid": str(r["question_id"]), "answerable": True})
                continue
            for q in policy_questions(paths, corpus, split):
                result = pipeline.ask(as_asked(q, default_user="eval"), options)
                answerable = not q.expects_abstention
                if not answerable and q.type != "unanswerable":
                    continue  # a restricted question: the access filter answers it, not the reader
                for g in examples(pipeline, result, quotes=q.quotes if answerable else ()):
                    out.append({**g, "corpus": corpus, "qid": q.id, "answerable": answerable})
        finally:
            pipeline.reader.close()
        print(f"{corpus}: {sum(1 for g in out if g['corpus'] == corpus)} example groups", file=sys.stderr)
    return out


# ------------------------------------------------------------------------------------------------ training
def fit(groups: Sequence[dict], c: float = C) -> ReaderModel:
    from sklearn.linear_model import LogisticRegression

    x = np.vstack([g["x"] for g in groups])
    y = np.concatenate([g["y"] for g in groups])
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=c, max_iter=2000)
    lr.fit((x - mean) / scale, y)
    return ReaderModel(FEATURES, mean, scale, lr.coef_[0], float(lr.intercept_[0]), 0.5, 0.5)


def question_scores(model: ReaderModel, groups: Sequence[dict]) -> dict[str, dict]:
    """Per question: the best probability over its intents' sentences, and per intent whether the top sentence
    (and the top three) is gold."""
    out: dict[str, dict] = {}
    for g in groups:
        p = model.probabilities(g["x"])
        key = f"{g['corpus']}:{g['qid']}"
        row = out.setdefault(
            key,
            {
                "answerable": g["answerable"],
                "corpus": g["corpus"],
                "best": [],
                "top1": [],
                "top3": [],
                "answer_p": [],
                "answer_hit": [],
            },
        )
        row["best"].append(float(p.max()) if len(p) else 0.0)
        order = np.argsort(-p, kind="stable")
        if g["answerable"] and len(p):
            # what an answer quotes: up to three sentences within KEEP_RATIO of the best; does it state a gold quote?
            quoted = [i for i in order[:3] if p[i] >= KEEP_RATIO * p[order[0]]]
            row["answer_p"].append(float(p[order[0]]))
            row["answer_hit"].append(bool(g["y"][quoted].any()))
        if g["y"].any():
            row["top1"].append(bool(g["y"][order[0]]))
            row["top3"].append(bool(g["y"][order[:3]].any()))
    return out


def baseline_top1(groups: Sequence[dict], feature: str) -> tuple[int, int]:
    col = FEATURES.index(feature)
    hits = [bool(g["y"][int(np.argmax(g["x"][:, col]))]) for g in groups if g["y"].any()]
    return sum(hits), len(hits)


def summary(rows: dict[str, dict], bar: float) -> dict[str, Any]:
    ans = [r for r in rows.values() if r["answerable"] and r["corpus"] != "hotpotqa"]
    una = [r for r in rows.values() if not r["answerable"]]
    gold = [r for r in ans if r["top1"]]
    return {
        "top1": f"{sum(all(r['top1']) for r in gold)}/{len(gold)}",
        "top3": f"{sum(all(r['top3']) for r in gold)}/{len(gold)}",
        "intents_top1": f"{sum(sum(r['top1']) for r in gold)}/{sum(len(r['top1']) for r in gold)}",
        "intents_top3": f"{sum(sum(r['top3']) for r in gold)}/{sum(len(r['top3']) for r in gold)}",
        "abstained": f"{sum(max(r['best']) < bar for r in una)}/{len(una)}",
        "false_abstention": f"{sum(max(r['best']) < bar for r in ans)}/{len(ans)}",
        "auc": round(_auc([max(r["best"]) for r in ans], [max(r["best"]) for r in una]), 3),
    }


def _auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    if not pos or not neg:
        return float("nan")
    return float(np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg]))


def calibrate(rows: dict[str, dict]) -> tuple[float, float]:
    """(answer_bar, support_bar) from out-of-corpus predictions (see the module docstring)."""
    ans = [max(r["best"]) for r in rows.values() if r["answerable"] and r["corpus"] != "hotpotqa"]
    grid = np.round(np.arange(0.01, 0.9, 0.005), 4)
    answer_bar = max(
        (b for b in grid if sum(s < b for s in ans) <= FALSE_ABSTENTION * len(ans)), default=float(grid[0])
    )
    tops = [
        (p, t)
        for r in rows.values()
        if r["corpus"] != "hotpotqa"
        for p, t in zip(r["answer_p"], r["answer_hit"], strict=True)
    ]
    support_bar = next(
        (
            float(b)
            for b in grid
            if len(sel := [t for p, t in tops if p >= b]) >= MIN_SHOWN and np.mean(sel) >= BADGE_PRECISION
        ),
        WITHHELD,
    )
    return float(answer_bar), support_bar


def loco(groups: Sequence[dict], c: float = C) -> tuple[dict[str, dict], dict[str, Any]]:
    """Each policy corpus held out in turn: the predictions pooled, and each corpus's figures."""
    pooled: dict[str, dict] = {}
    report: dict[str, Any] = {}
    for held in POLICY:
        test = [g for g in groups if g["corpus"] == held]
        if not test:
            continue
        model = fit([g for g in groups if g["corpus"] != held], c)
        rows = question_scores(model, test)
        pooled.update(rows)
        report[held] = rows
    return pooled, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--cache", type=Path, help="Examples collected before (the pickle --save wrote).")
    parser.add_argument("--save", type=Path, help="Write the collected examples here.")
    parser.add_argument("--write", action="store_true", help=f"Write {DEFAULT_READER_MODEL}.")
    parser.add_argument("--c", type=float, default=C)
    parser.add_argument("--corpora", default=",".join([*POLICY, "hotpotqa"]), help="Collect from these only.")
    args = parser.parse_args(argv)
    if args.cache and args.cache.is_file():
        import pickle

        groups = pickle.loads(args.cache.read_bytes())
    else:
        groups = collect(args.shared, args.work_dir, args.corpora.split(","))
        if args.save:
            import pickle

            args.save.write_bytes(pickle.dumps(groups))
    policy = [g for g in groups if g["corpus"] != "hotpotqa"]
    for feature in ("cos", "coverage_idf"):
        k, n = baseline_top1(policy, feature)
        print(f"baseline top-1 by {feature}: {k}/{n}")
    pooled, per = loco(groups, args.c)
    answer_bar, support_bar = calibrate(pooled)
    print(f"leave-one-corpus-out bars: answer {answer_bar}, support {support_bar}")
    for name, rows in [*per.items(), ("pooled", pooled)]:
        print(name, json.dumps(summary(rows, answer_bar)))
    if args.write:
        fitted = fit(groups, args.c)
        final = ReaderModel(
            fitted.features,
            fitted.mean,
            fitted.scale,
            fitted.coef,
            fitted.intercept,
            answer_bar,
            support_bar,
            KEEP_RATIO,
            meta={
                "trained_on": "tune splits of " + ", ".join([*POLICY, "hotpotqa (bridge)"]),
                "examples": int(sum(len(g["y"]) for g in groups)),
                "positives": int(sum(g["y"].sum() for g in groups)),
                "c": args.c,
                "loco": summary(pooled, answer_bar),
            },
        )
        DEFAULT_READER_MODEL.write_text(json.dumps(final.to_json(), indent=1) + "\n")
        print(f"wrote {DEFAULT_READER_MODEL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
