"""A sweep on disk: ``save_sweep`` writes sweep.json, cells.csv, comparisons.csv, runs.jsonl and the plot;
``load_sweep`` reads a saved sweep back (the UI's Evaluation page, ``rag eval position --out DIR``).

Kept apart from ``position`` so that the sweep does not import its plots (``plot`` reads the sweep's types).
"""

from __future__ import annotations

import csv
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from rag.errors import ConfigurationError
from rag.evaluation.position import SweepResult, cell_from_json
from rag.evaluation.stats import Comparison

CELL_COLUMNS = [
    "length",
    "label",
    "kind",
    "strategy",
    "depth",
    "position",
    "n",
    "accuracy",
    "ci_low",
    "ci_high",
    "strict_accuracy",
    "strict_ci_low",
    "strict_ci_high",
    "citation_accuracy",
    "abstention_rate",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "cost",
    "cost_total",
    "errors",
    "questions",
    "realised_depth",
    "correct",
    "expected",
]
COMPARISON_COLUMNS = [
    "a",
    "b",
    "n_pairs",
    "acc_a",
    "acc_b",
    "diff",
    "p_value",
    "test",
    "within_noise",
    "runs_needed",
    "a_only",
    "b_only",
    "ci_low",
    "ci_high",
]


def save_sweep(result: SweepResult, out_dir: Path, *, plot: bool = True) -> dict[str, Path]:
    """Write sweep.json, cells.csv, comparisons.csv, runs.jsonl and position-sweep.png into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "sweep": out / "sweep.json",
        "cells": out / "cells.csv",
        "comparisons": out / "comparisons.csv",
        "runs": out / "runs.jsonl",
    }
    paths["sweep"].write_text(json.dumps(result.to_json(), indent=1, ensure_ascii=False))
    with open(paths["cells"], "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CELL_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for c in result.cells:
            w.writerow(c.to_json())
    with open(paths["comparisons"], "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COMPARISON_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for cmp in result.comparisons:
            w.writerow(cmp.to_json())
    with open(paths["runs"], "w") as fh:
        for r in result.runs:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    if plot:
        from rag.evaluation.plot import save_figure

        paths["plot"] = save_figure(result, out / "position-sweep.png")
    return paths


def load_sweep(path: Path) -> SweepResult:
    """A saved sweep (a directory written by ``save_sweep`` or its sweep.json)."""
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    sweep_file = p if p.is_file() else p / "sweep.json"
    try:
        doc = json.loads(sweep_file.read_text())
    except FileNotFoundError:
        raise ConfigurationError(
            f"No sweep found at {path}.", hint="Run `rag eval position --out DIR` first."
        ) from None
    runs: list[dict[str, Any]] = []
    runs_file = folder / "runs.jsonl"
    if runs_file.is_file():
        runs = [json.loads(line) for line in runs_file.read_text().splitlines() if line.strip()]
    comparisons = [
        Comparison(**{f.name: c[f.name] for f in fields(Comparison) if f.name in c})
        for c in doc["comparisons"]
    ]
    return SweepResult(
        config=doc.get("config", {}),
        cells=[cell_from_json(c) for c in doc["cells"]],
        comparisons=comparisons,
        runs=runs,
        warnings=doc.get("warnings", []),
        generator=doc.get("generator", ""),
        model=doc.get("model", ""),
        n_questions=doc.get("questions", 0),
    )


__all__ = ["CELL_COLUMNS", "COMPARISON_COLUMNS", "load_sweep", "save_sweep"]
