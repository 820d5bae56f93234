"""Evaluation: run or load a position sweep (accuracy by where the answer sits in the context) and plot it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from ui import services

RESULT = "eval_result"


def _sweep_dirs(data_dir: Path) -> list[Path]:
    """Folders under the data directory that look like saved sweeps (newest first)."""
    found: list[Path] = []
    for pattern in ("sweeps/*", "eval/*", "evaluation/*", "sweep*"):
        found += [p for p in data_dir.glob(pattern) if p.is_dir()]
    return sorted(set(found), key=lambda p: p.stat().st_mtime, reverse=True)


def _show(evaluation: Any, result: Any) -> None:
    figure = evaluation.sweep_figure(result)
    st.pyplot(figure, clear_figure=True)
    table = getattr(result, "table", None) or getattr(result, "to_frame", None)
    if callable(table):
        table = table()
    if table is not None:
        st.dataframe(table, hide_index=True, key="eval_table")
    summary = getattr(result, "summary", None)
    if callable(summary):
        summary = summary()
    if isinstance(summary, dict | list):
        st.json(summary, expanded=False)


def _run_form(evaluation: Any, settings: Any) -> Any | None:
    config_type = getattr(evaluation, "SweepConfig", None)
    with st.form("eval_run"):
        st.caption("A small sweep over the packaged questions with the simulated or extractive generator runs "
                   "in seconds; an LLM sweep takes as long as its calls.")
        generator = st.selectbox("Generator", ["simulated", "extractive", "openai"], key="eval_generator")
        repeats = st.number_input("Repeats per variant", 1, 200, 5, key="eval_repeats")
        out_dir = st.text_input("Save to", str(Path(settings.data_dir) / "sweeps" / "ui"), key="eval_out")
        submitted = st.form_submit_button("Run sweep", icon=":material/play_arrow:")
    if not submitted:
        return None
    options = {"generator": generator, "repeats": int(repeats), "out_dir": out_dir}
    config: Any = options
    if config_type is not None:
        fields = getattr(config_type, "__dataclass_fields__", None) or getattr(config_type, "model_fields", {})
        config = config_type(**{k: v for k, v in options.items() if k in fields})
    with st.spinner("Running the sweep\u2026"):
        return evaluation.run_sweep(config)


def render() -> None:
    settings = services.get_settings()
    services.current_principal(settings)
    st.title("Evaluation")
    st.caption(
        "Position sweeps freeze retrieval and move only the needed passage (start, middle, end): accuracy that "
        "dips in the middle is the lost-in-the-middle effect that edge packing works around."
    )
    evaluation = services.evaluation_api()
    if evaluation is None:
        st.warning(services.EVALUATION_NOT_INSTALLED, icon=":material/extension_off:")
        st.caption("Run sweeps from the command line meanwhile, once the evaluation module is available.")
        return
    load_tab, run_tab = st.tabs(["Load a saved sweep", "Run a sweep"])
    with load_tab:
        dirs = _sweep_dirs(Path(settings.data_dir))
        default = str(dirs[0]) if dirs else str(Path(settings.data_dir) / "sweeps")
        folder = st.text_input("Sweep folder", default, key="eval_folder")
        if st.button("Load", key="eval_load", icon=":material/folder_open:"):
            st.session_state[RESULT] = evaluation.load_sweep(Path(folder))
    with run_tab:
        result = _run_form(evaluation, settings)
        if result is not None:
            st.session_state[RESULT] = result
    if st.session_state.get(RESULT) is not None:
        st.divider()
        _show(evaluation, st.session_state[RESULT])


with services.page_guard():
    render()
