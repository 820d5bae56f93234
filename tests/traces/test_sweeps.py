"""rag/traces/sweeps.py, what the running app keeps of a position sweep: its files round-trip, its plot draws, a
missing sweep is a user error, and the simulated curve is a safe expression (the sweep itself: tests/evaluation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rag.errors import ConfigurationError
from rag.traces.sweeps import (
    Cell,
    Comparison,
    SweepResult,
    compile_curve,
    load_sweep,
    save_sweep,
    sweep_figure,
)


def cell(label: str, kind: str, length: str, depth: float | None, correct: int, n: int = 10) -> Cell:
    rate = correct / n
    return Cell(
        label=label,
        kind=kind,
        length=length,
        strategy="fixed" if kind == "depth" else kind,
        depth=depth,
        position=None if depth is None else 1 + depth * 9,
        n=n,
        correct=correct,
        accuracy=rate,
        ci_low=max(0.0, rate - 0.2),
        ci_high=min(1.0, rate + 0.2),
        strict_correct=correct,
        strict_accuracy=rate,
        strict_ci_low=max(0.0, rate - 0.2),
        strict_ci_high=min(1.0, rate + 0.2),
        citation_n=n,
        citation_accuracy=rate,
        abstention_rate=0.0 if kind != "control" else 0.8,
        prompt_tokens=812.5,
        completion_tokens=20.0,
        latency_ms=1.25,
        cost=0.0,
        cost_total=0.0,
        errors=0,
        questions=5,
        realised_depth=depth,
        expected=None,
    )


@pytest.fixture
def result() -> SweepResult:
    cells = [
        cell("depth 0%", "depth", "10", 0.0, 9),
        cell("depth 50%", "depth", "10", 0.5, 6),
        cell("depth 100%", "depth", "10", 1.0, 9),
        cell("edges", "strategy", "10", None, 9),
        cell("control", "control", "10", None, 1),
        cell("depth 0%", "depth", "2000t", 0.0, 8),
        cell("depth 100%", "depth", "2000t", 1.0, 7),
    ]
    comparison = Comparison(
        a="L=10 depth 0%",
        b="L=10 depth 50%",
        n_pairs=10,
        acc_a=0.9,
        acc_b=0.6,
        diff=0.3,
        p_value=0.25,
        test="mcnemar",
        within_noise=True,
        runs_needed=40,
        a_only=3,
        b_only=0,
        ci_low=0.0,
        ci_high=0.6,
    )
    return SweepResult(
        config={"generator": "simulated", "curve": "0.6 + 0.35*(2*d-1)**2"},
        cells=cells,
        comparisons=[comparison],
        runs=[{"question": "q1", "label": "depth 0%", "correct": True}],
        warnings=["one question had no distractors"],
        generator="simulated",
        n_questions=5,
    )


def test_a_saved_sweep_loads_back_as_written(result: SweepResult, tmp_path: Path) -> None:
    paths = save_sweep(result, tmp_path / "sweep")
    assert {p.name for p in paths.values()} == {
        "sweep.json",
        "cells.csv",
        "comparisons.csv",
        "runs.jsonl",
        "position-sweep.png",
    }
    loaded = load_sweep(tmp_path / "sweep")
    assert loaded.to_json() == result.to_json()
    assert loaded.runs == result.runs and loaded.comparisons == result.comparisons
    assert loaded.cell("depth 100%", "2000t").accuracy == pytest.approx(0.7)
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text())["cells"][0]["length"] == 10  # a number
    assert load_sweep(tmp_path / "sweep" / "sweep.json").to_json() == result.to_json()  # the file itself
    assert "within noise" in loaded.comparisons[0].message


def test_the_plot_has_depth_and_strategy_panels(result: SweepResult) -> None:
    fig = sweep_figure(result)
    depth_axis, strategy_axis = fig.axes
    labels = depth_axis.get_legend_handles_labels()[1]
    assert any(label.startswith("10 passages") for label in labels)
    assert any(label.startswith("2000 tokens") for label in labels)
    assert any(label.startswith("true curve") for label in labels)  # the simulated model's own curve
    assert any(label.startswith("control, gold removed") for label in labels)
    assert strategy_axis.get_xticklabels()


def test_a_missing_sweep_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="No sweep found"):
        load_sweep(tmp_path / "nothing-here")


def test_the_curve_is_a_clipped_expression_in_d_and_nothing_else() -> None:
    f = compile_curve("0.6 + 0.35*(2*d-1)**2")
    assert f(0.0) == pytest.approx(0.95) and f(0.5) == pytest.approx(0.6) and f(1.0) == pytest.approx(0.95)
    assert compile_curve("2")(0.3) == 1.0 and compile_curve("-d")(0.5) == 0.0  # a probability
    assert compile_curve("sqrt(d) * cos(pi*0)")(0.25) == pytest.approx(0.5)
    assert math.isclose(compile_curve("exp(-d) / e")(0.0), 1 / math.e)
    for bad in ("__import__('os').system('true')", "d.real", "open('x')", "x + 1", "d if d else 1"):
        with pytest.raises(ConfigurationError):
            compile_curve(bad)
    with pytest.raises(ConfigurationError, match="too large"):
        compile_curve("2 ** 100")(0.5)
