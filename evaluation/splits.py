"""Fixed, seeded tune/test splits for every quality suite, written to disk (``evaluation/suites/splits.json``).

Tuning reads only ``tune``; docs report ``test``. A split is stratified: within each stratum (question type for the
policy sets, bridge/comparison for HotpotQA, corpus for the follow-up pairs) questions are ordered by a seeded hash
of their id and dealt alternately, so both halves keep every type. SciFact keeps the reranker's own split
(``evaluation.opendata.heldout``: features-v2 was trained on the other half), so its test half was never trained on.

``python -m evaluation.splits --write`` rebuilds the file from the question files; ``--check`` fails when
the committed file differs from what the seed gives (new questions get a split only by an explicit rebuild).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import unicodedata
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from rag.errors import ConfigurationError

SEED = "rag-suite-split-2026-12-01"
SPLITS = ("tune", "test")
SPLITS_PATH = Path(__file__).parent / "suites" / "splits.json"
FOLLOWUPS_PATH = SPLITS_PATH.parent / "followups.jsonl"  # (first question, follow-up) pairs over every corpus
# (first question, near-miss follow-up) pairs: the follow-up asks what the corpus does not say
NEAR_MISS_FOLLOWUPS_PATH = SPLITS_PATH.parent / "followups_near_miss.jsonl"
STRATA = {"hotpotqa": "bridge/comparison", "followup": "corpus", "followup_near_miss": "corpus"}


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text).split())


def hotpot_kind(record: dict[str, Any]) -> str:
    """``comparison`` or ``bridge`` for a HotpotQA-style record (the files carry no type field).

    A comparison names both supporting subjects and answers yes/no or with one of them ("Who is older, A or B?");
    a bridge question names at most one, and its answer sits in a paragraph the question never names.
    """
    answers = [_norm(s) for obj in record.get("answers_objects", []) for s in obj.get("spans", [])]
    if any(a in ("yes", "no") for a in answers):
        return "comparison"
    question = _norm(record.get("question_text", ""))
    titles = [
        _norm(re.sub(r"\s*\(.*?\)", "", c.get("title", "")))
        for c in record.get("contexts", [])
        if c.get("is_supporting")
    ]
    named = [t for t in titles if t and t in question]
    if len(named) >= 2 and (
        any(a and (a in t or t in a) for a in answers for t in named) or re.search(r"\b(or|both)\b", question)
    ):
        return "comparison"
    return "bridge"


def _rank(qid: str, seed: str) -> bytes:
    return hashlib.sha256(f"{seed}:{qid}".encode()).digest()


def stratified(items: Iterable[tuple[str, str]], seed: str = SEED) -> dict[str, list[str]]:
    """(id, stratum) pairs -> {"tune": ids, "test": ids}; within a stratum, seeded order, dealt test/tune."""
    by: dict[str, list[str]] = {}
    for qid, stratum in items:
        by.setdefault(stratum, []).append(qid)
    out: dict[str, list[str]] = {"tune": [], "test": []}
    for stratum in sorted(by):
        for i, qid in enumerate(sorted(by[stratum], key=lambda q: _rank(q, seed + stratum))):
            out["test" if i % 2 == 0 else "tune"].append(qid)
    return {k: sorted(v) for k, v in out.items()}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def build(sources: dict[str, list[Path]], scifact_qrels: Path | None = None) -> dict[str, Any]:
    """Split every suite's question files (suite name -> JSONL files, pooled) and SciFact's train-qrels queries."""
    splits: dict[str, Any] = {"seed": SEED, "suites": {}}
    for name, paths in sorted(sources.items()):
        records = [r for path in paths for r in _jsonl(path)]
        if name == "hotpotqa":
            items = [(str(r["question_id"]), hotpot_kind(r)) for r in records]
        elif name in ("followup", "followup_near_miss"):
            items = [(str(r["id"]), str(r["corpus"])) for r in records]
        else:
            items = [(str(r["id"]), str(r.get("type", "single"))) for r in records]
        splits["suites"][name] = {
            "source": "+".join(p.name for p in paths),
            "strata": STRATA.get(name, "type"),
            **stratified(items),
        }
    if scifact_qrels is not None:
        from evaluation.opendata import heldout

        qids = sorted(
            {line.split("\t")[0] for line in scifact_qrels.read_text().splitlines()[1:] if line.strip()}
        )
        splits["suites"]["scifact"] = {
            "source": scifact_qrels.name,
            "strata": "evaluation.opendata.heldout (test = held out from reranker training)",
            "tune": [q for q in qids if not heldout(q)],
            "test": [q for q in qids if heldout(q)],
        }
    return splits


@cache
def _load(path: Path = SPLITS_PATH) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigurationError(
            f"No suite splits at {path}.", hint="Rebuild them: python -m evaluation.splits --write."
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def split_ids(suite: str, split: str) -> frozenset[str]:
    """The question ids of ``suite`` in ``split`` (``tune``, ``test`` or ``all``)."""
    suites = _load()["suites"]
    if suite not in suites:
        raise ConfigurationError(
            f"No split for suite {suite!r}.", hint=f"Known: {', '.join(sorted(suites))}."
        )
    if split == "all":
        return frozenset(suites[suite]["tune"]) | frozenset(suites[suite]["test"])
    if split not in SPLITS:
        raise ConfigurationError(f"Unknown split {split!r}.", hint="Use tune, test or all.")
    return frozenset(suites[suite][split])


def default_sources(shared: Path) -> dict[str, list[Path]]:
    """Every question file the suites split (the near-miss unanswerables live beside the splits)."""
    from evaluation.datasets import default_questions_path

    here = SPLITS_PATH.parent / "near_miss"
    sources = {
        "dev": [shared / "data/questions/dev.jsonl"],
        "gitlab": [shared / "data/questions/gitlab-dev.jsonl"],
        "moj": [shared / "data/questions/moj-dev.jsonl"],
        "hypha": [shared / "data/questions/hypha-dev.jsonl"],
        "sample": [default_questions_path()],
        "hotpotqa": [shared / "data/hotpotqa/dev-multihop.jsonl", shared / "data/hotpotqa/dev-mixed.jsonl"],
    }
    for name in ("dev", "gitlab", "sample"):
        if (here / f"{name}.jsonl").is_file():
            sources[f"near_miss_{name}"] = [here / f"{name}.jsonl"]
    if FOLLOWUPS_PATH.is_file():
        sources["followup"] = [FOLLOWUPS_PATH]
    if NEAR_MISS_FOLLOWUPS_PATH.is_file():
        sources["followup_near_miss"] = [NEAR_MISS_FOLLOWUPS_PATH]
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    data = build(default_sources(args.shared), args.shared / "data/scifact/qrels/train.tsv")
    text = json.dumps(data, indent=1) + "\n"
    if args.write:
        SPLITS_PATH.parent.mkdir(parents=True, exist_ok=True)
        SPLITS_PATH.write_text(text)
        for name, s in data["suites"].items():
            print(f"{name}: tune {len(s['tune'])}, test {len(s['test'])}")
        return 0
    same = SPLITS_PATH.is_file() and SPLITS_PATH.read_text() == text
    print("splits match the seed" if same else f"{SPLITS_PATH} differs from what the seed gives")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
