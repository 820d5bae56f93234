"""The Evaluation page's sweep runner: the form's choices become `rag eval position` arguments, and a failed run
is a RagError carrying the command's last line (the page shows it as text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.config import load_settings
from rag.errors import RagError
from ui.services import SweepRequest, run_sweep, sweep_runner_available

REQUEST = SweepRequest(
    generator="simulated",
    retrieval="lexical",
    repeats=3,
    lengths=("10", "20"),
    strategies=("edges",),
    limit=4,
    control=False,
    spacing=True,
)


def test_the_form_becomes_the_commands_arguments(tmp_path: Path) -> None:
    argv = REQUEST.argv(tmp_path / "data", tmp_path / "out")
    assert argv[:4] == ["--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")]
    pairs = dict(zip(argv[4:-2:2], argv[5:-2:2], strict=True))
    assert pairs == {
        "--generator": "simulated",
        "--retrieval": "lexical",
        "--repeats": "3",
        "--lengths": "10,20",
        "--strategies": "edges",
        "--limit": "4",
    }
    assert argv[-2:] == ["--no-control", "--spacing"]
    unlimited = SweepRequest(**{**REQUEST.__dict__, "limit": None, "control": True})
    assert "--limit" not in unlimited.argv(tmp_path, tmp_path) and "--control" in unlimited.argv(
        tmp_path, tmp_path
    )


def test_a_failed_sweep_is_a_rag_error_with_the_commands_last_line(tmp_path: Path) -> None:
    assert sweep_runner_available()
    settings = load_settings(data_dir=tmp_path)  # nothing ingested: the sweep has no questions' evidence
    bad = SweepRequest(**{**REQUEST.__dict__, "lengths": ("zero",)})
    with pytest.raises(RagError, match="The sweep failed") as caught:
        run_sweep(settings, bad, tmp_path / "out")
    assert "zero" in str(caught.value)  # the command's own message: a bad context length
    assert not (tmp_path / "out" / "sweep.json").exists()
