"""The UI's query path against the CLI's, for the same questions: wall time per pass and their ratio.

    python -m benchmarks.ui_vs_cli [--data-dir DIR] [--questions FILE.jsonl] [--repeats N] [--json]

The CLI's pipeline is what ``rag ask`` builds (``rag.factory.build_pipeline``); the UI's is the one its pages
use (``ui.services.get_pipeline``: cached per settings and index generation). Each pass asks every question
once after a warm-up question, with the query-vector cache cleared first; passes alternate between the two so
machine load hits both alike. With no --data-dir the sample corpus is ingested into a temporary directory.
The target (issue 21) is UI/CLI <= 1.1.
"""

from __future__ import annotations

import json
import time
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks import data_dir_or_sample, query_options


def _questions(path: Path) -> list[Any]:
    from rag.pipeline import Question
    from rag.types import Principal

    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            q = json.loads(line)
            as_of = date.fromisoformat(q["as_of"]) if q.get("as_of") else None
            principal = Principal(q.get("user") or "bench", frozenset(q.get("groups") or ()))
            out.append(Question(q["question"], principal, as_of, frozenset(q.get("tags") or ())))
    return out


def _pass(pipeline: Any, questions: list[Any]) -> float:
    pipeline.clear_caches()
    start = time.perf_counter()
    for q in questions:
        pipeline.ask(q)
    return time.perf_counter() - start


def run(data_dir: Path, questions_path: Path, repeats: int) -> dict[str, Any]:
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from ui import services

    settings = load_settings(data_dir=data_dir)
    questions = _questions(questions_path)
    cli = build_pipeline(settings)
    ui = services.get_pipeline(settings)
    for pipeline in (cli, ui):
        pipeline.ask(questions[0])  # warm-up: first-call costs are not per-question latency
    times: dict[str, list[float]] = {"cli": [], "ui": []}
    for i in range(repeats):
        order = [("cli", cli), ("ui", ui)] if i % 2 == 0 else [("ui", ui), ("cli", cli)]
        for name, pipeline in order:
            times[name].append(_pass(pipeline, questions))
    best = {name: min(v) for name, v in times.items()}
    return {
        "questions": len(questions),
        "repeats": repeats,
        "cli_s": round(best["cli"], 3),
        "ui_s": round(best["ui"], 3),
        "ui_over_cli": round(best["ui"] / best["cli"], 3),
        "passes_s": {name: [round(t, 3) for t in v] for name, v in times.items()},
        "reranker": {"cli": cli.reranker.name, "ui": ui.reranker.name},
    }


def main() -> None:
    args = query_options(__doc__)
    with data_dir_or_sample(args.data_dir, "rag-bench-ui-cli-") as data_dir:
        result = run(data_dir, args.questions, args.repeats)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['questions']} questions, best of {result['repeats']} passes: CLI {result['cli_s']:.2f} s, "
        f"UI {result['ui_s']:.2f} s, UI/CLI {result['ui_over_cli']:.2f}x (target <= 1.1x)"
    )


if __name__ == "__main__":
    main()
