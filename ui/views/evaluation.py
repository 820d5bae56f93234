"""Evaluation: run or load a position sweep (accuracy by where the needed passage sits) and plot it.

A sweep is read through ``rag.traces.sweeps`` (its files and plot); running one starts ``rag eval position`` (the
``evaluation`` package) in a child process that writes those files, so the page imports nothing but rag/.

The page shows aggregates only (accuracy, intervals, tokens, comparisons), never the passages of a sweep: a
sweep's evidence sets are frozen for each question's own user, who may read more than the viewer.

Admins only (a sweep is CPU-heavy, and runs as every sample question's user). Saved sweeps are loaded only
from the configured locations, ``<data_dir>/sweeps`` and ``RAG_EVAL_SWEEP_DIRS``: no path typed in the page
reaches the server's file system.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pandas as pd
import streamlit as st

from rag.errors import RagError
from rag.traces.sweeps import SweepResult, load_sweep, sweep_figure
from ui import components, services

RESULT = "eval_result"
# The rates (shown to three decimals) and the columns of a sweep's cells the page shows, label first.
RATE_COLUMNS = ("accuracy", "ci_low", "ci_high", "strict_accuracy", "citation_accuracy", "abstention_rate")
CELL_COLUMNS = [
    "label",
    "kind",
    "length",
    "strategy",
    "depth",
    "position",
    "n",
    *RATE_COLUMNS,
    "prompt_tokens",
    "latency_ms",
    "errors",
]


def sweep_roots(settings: Any) -> list[Path]:
    """The configured folders saved sweeps are read from: ``<data_dir>/sweeps``, then RAG_EVAL_SWEEP_DIRS."""
    roots = [Path(settings.data_dir) / "sweeps", *(Path(p) for p in settings.eval_sweep_dirs)]
    return list(dict.fromkeys(roots))


def sweep_dirs(data_dir: Path, extra_roots: list[Path] | None = None) -> list[Path]:
    """Saved sweeps (folders holding a sweep.json, or a root that is one) under ``<data_dir>/sweeps`` and
    ``extra_roots``, newest first."""
    found: list[Path] = []
    for root in [data_dir / "sweeps", *(extra_roots or [])]:
        if (root / "sweep.json").is_file():
            found.append(root)
        if root.is_dir():
            found.extend(p.parent for p in root.glob("*/sweep.json"))
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda p: p.stat().st_mtime, reverse=True)


def _show(result: SweepResult) -> None:
    st.caption(
        f"generator `{result.generator}`"
        + (f" \u00b7 model `{result.model}`" if result.model else "")
        + f" \u00b7 {result.n_questions} question(s) \u00b7 {len(result.runs) or 'saved'} run(s)"
    )
    st.pyplot(sweep_figure(result), clear_figure=False)
    cells = pd.DataFrame([c.to_json() for c in result.cells])
    st.markdown("**Cells** (accuracy with its confidence interval, per length and variant)")
    st.dataframe(
        cells[[c for c in CELL_COLUMNS if c in cells.columns]],
        hide_index=True,
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in (*RATE_COLUMNS, "depth")},
    )
    if result.comparisons:
        st.markdown("**Paired comparisons** (same questions and repeats)")
        st.dataframe(pd.DataFrame([c.to_json() for c in result.comparisons]), hide_index=True)
    for warning in result.warnings[:8]:  # may quote a question or a passage: text, not Markdown
        st.warning(components.escape_md(str(warning)), icon=":material/info:")
    if len(result.warnings) > 8:
        st.caption(f"\u2026 and {len(result.warnings) - 8} more warning(s).")


def _run_form(settings: Any) -> SweepResult | None:
    from rag.stages.pack import SINGLE_PASSAGE_STRATEGIES, STRATEGIES

    generators = ["simulated", "extractive"] + (["openai"] if settings.llm_configured else [])
    with st.form("eval_run"):
        st.caption(
            "Freezes each sample question's evidence from the index (as that question's user), then moves only the "
            "needed passage. The simulated model follows a known curve and runs in seconds; an LLM sweep takes as "
            "long as its calls."
        )
        cols = st.columns(3)
        generator = cols[0].selectbox("Generator", generators, key="eval_generator")
        retrieval = cols[1].selectbox(
            "Distractors ranked by",
            ["lexical", "pipeline"],
            key="eval_retrieval",
            help="lexical: BM25 only (fast); pipeline: the full query path",
        )
        repeats = cols[2].number_input("Repeats per variant", 1, 500, 20, key="eval_repeats")
        cols = st.columns(3)
        lengths = cols[0].multiselect(
            "Context lengths (passages)", ["10", "20", "30"], ["10", "20"], key="eval_lengths"
        )
        strategies = cols[1].multiselect(
            "Packing strategies", list(STRATEGIES), list(SINGLE_PASSAGE_STRATEGIES), key="eval_strategies"
        )
        limit = cols[2].number_input("Questions (0 = all)", 0, 1000, 10, key="eval_limit")
        cols = st.columns(3)
        control = cols[0].checkbox("Control (needed passage removed)", True, key="eval_control")
        spacing = cols[1].checkbox("Spacing of multi-source evidence", True, key="eval_spacing")
        save = cols[2].checkbox("Save under data dir / sweeps", True, key="eval_save")
        submitted = st.form_submit_button("Run sweep", icon=":material/play_arrow:")
    if not submitted:
        return None
    request = services.SweepRequest(
        generator=generator,
        retrieval=retrieval,
        repeats=int(repeats),
        lengths=tuple(lengths) or ("10",),
        strategies=tuple(strategies) or ("edges",),
        limit=int(limit) or None,
        control=control,
        spacing=spacing,
    )
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with TemporaryDirectory(prefix="sweep-") as scratch:
        out = Path(settings.data_dir) / "sweeps" / stamp if save else Path(scratch) / stamp
        try:
            with st.spinner("Running the sweep\u2026"):
                result = services.run_sweep(settings, request, out)
        except RagError as exc:  # its last line may quote a question: text, not Markdown
            st.error(components.escape_md(exc.user_message()), icon=":material/error:")
            return None
    if save:
        st.success(f"Saved to `{out}`", icon=":material/save:")
    return result


def render() -> None:
    settings = services.get_settings()
    services.require_admin(settings, "Evaluation")
    st.title("Evaluation")
    st.caption(
        "Position sweeps freeze retrieval and move only the needed passage (start, middle, end): accuracy that "
        "dips in the middle is the lost-in-the-middle effect that edge packing works around."
    )
    load_tab, run_tab = st.tabs(["Load a saved sweep", "Run a sweep"])
    with load_tab:
        roots = sweep_roots(settings)
        saved = sweep_dirs(Path(settings.data_dir), roots[1:])
        options = [str(p) for p in saved]  # the only paths the page may load: found under the roots
        if options:
            chosen = st.selectbox(
                "Saved sweeps",
                options,
                key="eval_saved",
                format_func=lambda p: f"{Path(p).name} ({Path(p).parent})",
            )
        else:
            st.caption("No saved sweeps yet in " + ", ".join(f"`{r}`" for r in roots) + ".")
            chosen = None
        st.caption(
            "Sweeps are read from `<data dir>/sweeps` and the folders in `RAG_EVAL_SWEEP_DIRS` "
            "(`rag eval position --out DIR` into one of them)."
        )
        load = st.button("Load", key="eval_load", icon=":material/folder_open:", disabled=not chosen)
        if load and chosen in options:
            try:
                st.session_state[RESULT] = load_sweep(Path(chosen))
            except Exception as exc:  # a half-written or foreign sweep.json: say so, keep the page
                services.show_error(exc)
    with run_tab, services.page_guard():  # a failed run is a message in its tab; the rest still renders
        if not services.sweep_runner_available():
            st.warning(services.SWEEP_RUNNER_MISSING, icon=":material/extension_off:")
            result = None
        else:
            result = _run_form(settings)
        if result is not None:
            st.session_state[RESULT] = result
    if st.session_state.get(RESULT) is not None:
        st.divider()
        _show(st.session_state[RESULT])


with services.page_guard():
    render()
