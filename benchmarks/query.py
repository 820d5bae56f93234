"""Query-path latency per stage, generator excluded: p50/p95 of every traced stage and end to end.

    python -m benchmarks.query [--data-dir DIR] [--questions FILE.jsonl] [--repeats N] [--json]

With no --data-dir it ingests the sample corpus into a temporary directory first. Questions default to the
sample corpus questions (``ingest/sample/questions.jsonl``); each record needs ``question`` and may carry
``user``/``groups``. The offline extractive generator runs (it is part of the answer) but is reported on its
own line and left out of the end-to-end figure, which is what an LLM would replace.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import data_dir_or_sample, query_options

EXCLUDED = ("generate",)


def percentiles(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    return {"p50": round(float(np.percentile(arr, 50)), 2), "p95": round(float(np.percentile(arr, 95)), 2)}


def run(data_dir: Path, questions: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from rag.pipeline import Question
    from rag.types import Principal

    pipeline = build_pipeline(load_settings(data_dir=data_dir))
    asks = [
        Question(q["question"], Principal(q.get("user") or "bench", frozenset(q.get("groups") or ())))
        for q in questions
    ]
    pipeline.ask(asks[0])  # warm-up: first-call costs (model graph, caches) are not per-query latency
    stages: dict[str, list[float]] = {}
    end_to_end: list[float] = []
    wall: list[float] = []
    for _ in range(repeats):
        pipeline.clear_caches()  # cached query vectors would spare a repeat the embedding a new question pays for
        for q in asks:
            t = time.perf_counter()
            result = pipeline.ask(q)
            wall.append((time.perf_counter() - t) * 1000)
            total = 0.0
            for s in result.stages:
                stages.setdefault(s.name, []).append(s.ms)
                if s.name not in EXCLUDED:
                    total += s.ms
            end_to_end.append(total)
    return {
        "queries": len(end_to_end),
        "index_chunks": pipeline.reader.generation.manifest.n_chunks,
        "reranker": pipeline.reranker.name,
        "stages_ms": {name: percentiles(v) for name, v in stages.items()},
        "end_to_end_ms_without_generator": percentiles(end_to_end),
        "wall_ms_with_extractive_generator": percentiles(wall),
    }


def main() -> None:
    args = query_options(__doc__)
    questions = [json.loads(line) for line in args.questions.read_text().splitlines() if line.strip()]
    with data_dir_or_sample(args.data_dir, "rag-bench-query-") as data_dir:
        result = run(data_dir, questions, args.repeats)
    if args.json:
        print(json.dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"Query path, {result['queries']} queries over {result['index_chunks']} chunks "
        f"(reranker {result['reranker']})"
    )
    for col in ("stage", "p50 ms", "p95 ms"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    for name, p in result["stages_ms"].items():
        table.add_row(name + (" (excluded)" if name in EXCLUDED else ""), str(p["p50"]), str(p["p95"]))
    e2e = result["end_to_end_ms_without_generator"]
    table.add_row("end to end (no generator)", str(e2e["p50"]), str(e2e["p95"]))
    Console().print(table)


if __name__ == "__main__":
    main()
