"""A position sweep as the running app sees it: its results (``Cell``, ``Comparison``, ``SweepResult``), the files
``save_sweep`` writes and ``load_sweep`` reads back (sweep.json, cells.csv, comparisons.csv, runs.jsonl) and its
plot (``sweep_figure``, ``save_figure``).

The sweep itself runs in ``evaluation.position`` (``rag eval position --out DIR``); the UI's Evaluation page
reads what it wrote through this module, the one piece of evaluation in the answering layer. The plot is built
on ``matplotlib.figure.Figure`` directly (no pyplot, no GUI backend, safe in threads), so the UI can hand the
Figure to ``st.pyplot`` and the CLI can save a PNG.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from rag.errors import ConfigurationError


def length_json(label: str) -> int | str:
    return int(label) if label.isdigit() else label


# ------------------------------------------------------------------------------------------------ results
@dataclass
class Cell:
    """Aggregated runs of one (length, variant) cell."""

    label: str
    kind: str
    length: str
    strategy: str
    depth: float | None  # requested depth (depth cells) or mean realised depth of the first gold block
    position: float | None  # mean 1-based position of the first gold passage
    n: int
    correct: int
    accuracy: float
    ci_low: float
    ci_high: float
    strict_correct: int
    strict_accuracy: float
    strict_ci_low: float
    strict_ci_high: float
    citation_n: int
    citation_accuracy: float | None
    abstention_rate: float
    prompt_tokens: float
    completion_tokens: float
    latency_ms: float
    cost: float  # mean per run
    cost_total: float
    errors: int
    questions: int
    realised_depth: float | None
    # The true accuracy of the cell when the generator knows it (the simulated model): the mean over its runs
    # of the probability of a right answer at the placement each run realised. None for a real model.
    expected: float | None = None

    @property
    def name(self) -> str:
        unit = "" if self.length.isdigit() else " tokens"
        size = self.length[:-1] if unit else self.length
        return f"L={size}{unit} {self.label}"

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 4) -> float | None:
            return None if x is None else round(float(x), nd)

        return {
            "depth": r(self.depth),
            "position": r(self.position, 2),
            "length": length_json(self.length),
            "strategy": self.strategy,
            "n": self.n,
            "accuracy": r(self.accuracy),
            "ci_low": r(self.ci_low),
            "ci_high": r(self.ci_high),
            "strict_accuracy": r(self.strict_accuracy),
            "citation_accuracy": r(self.citation_accuracy),
            "abstention_rate": r(self.abstention_rate),
            "prompt_tokens": r(self.prompt_tokens, 1),
            "latency_ms": r(self.latency_ms, 3),
            "cost": r(self.cost, 8),
            # beyond the contract
            "label": self.label,
            "kind": self.kind,
            "correct": self.correct,
            "strict_correct": self.strict_correct,
            "strict_ci_low": r(self.strict_ci_low),
            "strict_ci_high": r(self.strict_ci_high),
            "citation_n": self.citation_n,
            "completion_tokens": r(self.completion_tokens, 1),
            "cost_total": r(self.cost_total, 8),
            "errors": self.errors,
            "questions": self.questions,
            "realised_depth": r(self.realised_depth),
            "expected": r(self.expected),
        }


def cell_from_json(d: dict[str, Any]) -> Cell:
    names = {f.name for f in fields(Cell)}
    data = {k: v for k, v in d.items() if k in names}
    data["length"] = str(d["length"])
    return Cell(**data)


@dataclass
class SweepResult:
    config: dict[str, Any]
    cells: list[Cell]
    comparisons: list[Comparison]
    runs: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    generator: str = ""
    model: str = ""
    n_questions: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "cells": [c.to_json() for c in self.cells],
            "comparisons": [c.to_json() for c in self.comparisons],
            "generator": self.generator,
            "model": self.model,
            "questions": self.n_questions,
            "warnings": self.warnings,
            "config": self.config,
        }

    def cell(self, label: str, length: str | int | None = None) -> Cell:
        for c in self.cells:
            if c.label == label and (length is None or c.length == str(length)):
                return c
        raise KeyError(f"no cell {label!r} at length {length!r}")


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of two variants over the same (question, repeat) pairs."""

    a: str
    b: str
    n_pairs: int
    acc_a: float
    acc_b: float
    diff: float  # acc_a - acc_b
    p_value: float
    test: str
    within_noise: bool
    runs_needed: int | None  # runs per variant that would resolve the observed difference (80% power)
    a_only: int  # pairs where only a was right
    b_only: int
    ci_low: float  # bootstrap interval of the difference
    ci_high: float

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @property
    def message(self) -> str:
        verdict = (
            f"within noise (p = {self.p_value:.3g}); about {self.runs_needed} runs per variant would resolve it"
            if self.within_noise and self.runs_needed
            else ("within noise (no difference observed)" if self.within_noise else f"p = {self.p_value:.3g}")
        )
        return f"{self.a} vs {self.b}: {self.diff:+.1%} over {self.n_pairs} pairs, {verdict}"


# ------------------------------------------------------------------------------------------------ curve parsing
_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS: dict[str, Callable[..., float]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "sin": math.sin,
    "cos": math.cos,
    "tanh": math.tanh,
}
_CONSTS = {"pi": math.pi, "e": math.e}


def compile_curve(expr: str) -> Callable[[float], float]:
    """A safe ``f(d)`` from an expression in ``d`` (depth, 0..1): numbers, + - * / ** %, unary minus,
    abs/min/max/exp/log/sqrt/sin/cos/tanh, pi and e. Anything else (names, attributes, calls of other
    functions) is refused. The result is clipped to [0, 1]: it is a probability."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigurationError(
            f"Curve {expr!r} is not an expression: {exc.msg}.", hint="e.g. --curve '0.6 + 0.35*(2*d-1)**2'"
        ) from None

    def check(node: ast.AST) -> None:
        number = isinstance(node, ast.Constant) and type(node.value) in (int, float)
        variable = isinstance(node, ast.Name) and (node.id == "d" or node.id in _CONSTS)
        if isinstance(node, ast.Expression):
            check(node.body)
        elif number or variable:
            return
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            check(node.left)
            check(node.right)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            check(node.operand)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS
            and not node.keywords
        ):
            for arg in node.args:
                check(arg)
        else:
            raise ConfigurationError(
                f"Curve {expr!r} uses {type(node).__name__}, which is not allowed.",
                hint="Use numbers, d, + - * / ** %, and abs/min/max/exp/log/sqrt/sin/cos/tanh.",
            )

    check(tree)

    def ev(node: ast.AST, d: float) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body, d)
        if isinstance(node, ast.Constant):
            return float(node.value)  # type: ignore[arg-type]  # check() admitted only int and float
        if isinstance(node, ast.Name):
            return d if node.id == "d" else _CONSTS[node.id]
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left, d), ev(node.right, d)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ConfigurationError(f"Curve {expr!r}: exponent {right} is too large.")
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](ev(node.operand, d))
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        return float(_FUNCS[node.func.id](*[ev(a, d) for a in node.args]))

    def curve(d: float) -> float:
        try:
            value = float(ev(tree, float(d)))
        except (ZeroDivisionError, ValueError, OverflowError) as exc:
            raise ConfigurationError(f"Curve {expr!r} fails at d={d}: {exc}.") from None
        return min(1.0, max(0.0, value))

    for probe in (0.0, 0.5, 1.0):  # fail at start-up, not in the middle of a sweep
        curve(probe)
    return curve


# ------------------------------------------------------------------------------------------------ files
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


# ------------------------------------------------------------------------------------------------ plot
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]


def _length_name(length: str) -> str:
    return f"{length} passages" if length.isdigit() else f"{length[:-1]} tokens"


def _yerr(cells: Sequence[Cell]) -> list[list[float]]:
    return [[c.accuracy - c.ci_low for c in cells], [c.ci_high - c.accuracy for c in cells]]


def sweep_figure(result: SweepResult, *, title: str | None = None, show_curve: bool = True) -> Figure:
    """Accuracy by gold depth (one line per length, control as a dashed line, the simulated model's true curve
    dotted), plus accuracy per strategy (and spacing) when the sweep has those cells."""
    placed = [c for c in result.cells if c.kind in ("depth", "position")]
    others = [c for c in result.cells if c.kind in ("strategy", "spacing")]
    controls = {c.length: c for c in result.cells if c.kind == "control"}
    lengths = list(dict.fromkeys(c.length for c in result.cells))
    conf = float(result.config.get("confidence", 0.95))

    fig = Figure(figsize=(11, 4.6) if others else (7, 4.6), layout="constrained")
    axes = fig.subplots(1, 2 if others else 1, squeeze=False)[0]
    ax = axes[0]
    for i, length in enumerate(lengths):
        color = _COLORS[i % len(_COLORS)]
        cells = sorted((c for c in placed if c.length == length), key=lambda c: c.depth or 0.0)
        if cells:
            xs = [100 * ((c.depth if c.kind == "depth" else c.realised_depth) or 0.0) for c in cells]
            ax.errorbar(
                xs,
                [c.accuracy for c in cells],
                yerr=_yerr(cells),
                color=color,
                marker="o",
                capsize=4,
                label=f"{_length_name(length)} (n={cells[0].n}/point)",
            )
        if length in controls:
            ax.axhline(
                controls[length].accuracy,
                color=color,
                linestyle="--",
                linewidth=1,
                label=f"control, gold removed ({_length_name(length)}): "
                f"{controls[length].accuracy:.0%} right, {controls[length].abstention_rate:.0%} abstained",
            )
    curve = result.config.get("curve") if result.generator == "simulated" else None
    if show_curve and curve:
        f = compile_curve(str(curve))
        xs = [i / 100 for i in range(101)]
        ax.plot(
            [100 * x for x in xs],
            [f(x) for x in xs],
            color="black",
            linestyle=":",
            linewidth=1.2,
            label=f"true curve: {curve}",
        )
    ax.set_xlabel("Depth of the gold passage in the context (%)")
    ax.set_ylabel("Answer accuracy")
    ax.set_xlim(-5, 105)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.grid(alpha=0.3)
    ax.set_title(f"Accuracy by position ({conf:.0%} Wilson intervals)", fontsize=10)
    ax.legend(fontsize=7, loc="lower center")

    if others:
        bx = axes[1]
        labels = list(dict.fromkeys(c.label for c in others))
        width = 0.8 / max(1, len(lengths))
        for i, length in enumerate(lengths):
            by_label = {c.label: c for c in others if c.length == length}
            xs = [j + (i - (len(lengths) - 1) / 2) * width for j, lab in enumerate(labels) if lab in by_label]
            cells = [by_label[lab] for lab in labels if lab in by_label]
            if not cells:
                continue
            bx.bar(
                xs,
                [c.accuracy for c in cells],
                width=width * 0.9,
                color=_COLORS[i % len(_COLORS)],
                alpha=0.75,
                yerr=_yerr(cells),
                capsize=3,
                label=_length_name(length),
            )
        bx.set_xticks(range(len(labels)))
        bx.set_xticklabels(labels, rotation=20, fontsize=8)
        bx.set_ylim(0, 1.15)
        bx.set_ylabel("Answer accuracy")
        bx.set_title("Packing strategy / spacing (gold placed by the strategy)", fontsize=10)
        bx.grid(axis="y", alpha=0.3)
        bx.legend(fontsize=7, loc="upper center", ncol=max(1, len(lengths)))
    model = result.model or result.generator
    fig.suptitle(title or f"Position sweep: {model}, {result.n_questions} question(s)", fontsize=11)
    return fig


def save_figure(result: SweepResult, path: Path, *, dpi: int = 150) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_figure(result).savefig(path, dpi=dpi)
    return path
