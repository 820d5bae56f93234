"""Plots of a sweep: accuracy by depth of the gold passage with Wilson interval bars, one line per context
length, and accuracy per packing strategy. Built on ``matplotlib.figure.Figure`` directly (no pyplot, no GUI
backend, safe in threads), so the UI can hand the Figure to ``st.pyplot`` and the CLI can save a PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

if TYPE_CHECKING:
    from rag.evaluation.position import Cell, SweepResult

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
        from rag.evaluation.generators import compile_curve

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
