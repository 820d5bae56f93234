"""Evaluation: position-sensitivity sweeps (``position``) and end-to-end answer quality (``qa``).

For the UI's Evaluation page::

    from rag.evaluation import SweepConfig, run_sweep, load_sweep, sweep_figure
    result = run_sweep(SweepConfig(generator="simulated", lengths=("20",), repeats=50))
    fig = sweep_figure(result)          # a matplotlib Figure (st.pyplot(fig))
    result = load_sweep("out/sweep")    # a directory written by `rag eval position --out DIR`
"""

from rag.evaluation.plot import save_figure, sweep_figure
from rag.evaluation.position import Cell, SweepConfig, SweepResult, run_sweep
from rag.evaluation.stats import Comparison
from rag.evaluation.sweep_files import load_sweep, save_sweep

__all__ = [
    "Cell",
    "Comparison",
    "SweepConfig",
    "SweepResult",
    "load_sweep",
    "run_sweep",
    "save_figure",
    "save_sweep",
    "sweep_figure",
]
