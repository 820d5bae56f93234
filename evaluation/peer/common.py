"""Paths, the Haystack check and the shared grader: what every part of the peer comparison reads."""

from __future__ import annotations

import importlib.util
import os
import platform
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
SCIFACT = SHARED / "data" / "scifact"
DEV_QUESTIONS = SHARED / "data" / "questions" / "dev.jsonl"
DEV_CORPUS = (
    SHARED / "data" / "policies" / "epa-infosec",
    SHARED / "data" / "policies" / "civicactions-handbook" / "markdown" / "docs",
)
GRADER = SHARED / "tools" / "grade_evidence.py"
WORK_DIR = Path("/tmp/peer")
DEFAULT_OUT = REPO / "evaluation" / "results" / "peer.json"

HAYSTACK_MISSING = (
    "evaluation.peer needs Haystack 2.x, which is not installed in this environment (on purpose: it is never a "
    "dependency of the app).\n  Run `bash scripts/peer_venv.sh` once, then "
    "`.venv-peer/bin/python -m evaluation.peer` (or `.venv-peer/bin/rag bench peer`)."
)

Log = Callable[[str], None]
Q = TypeVar("Q")  # a question as a run takes it (text, or a suite question with its asker)
EXCLUDED = ("generate",)  # as benchmarks/query.py: what an LLM would replace
# our stages past the peer's last one (its pipeline ends at its documents; ours at the packed evidence)
AFTER_EVIDENCE = ("answer_type", "prompt", "generate", "citations", "claims", "answer_check")


def machine() -> dict[str, Any]:
    """The machine a run measured on: CPUs, platform, Python, torch and its default thread count."""
    import torch

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads_default": torch.get_num_threads(),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages, to two places: how busy the machine was."""
    return [round(x, 2) for x in os.getloadavg()]


def require_haystack() -> str:
    """Haystack's version, or exit with a message saying how to get the benchmark environment."""
    try:
        from haystack import __version__
    except ImportError:
        raise SystemExit(HAYSTACK_MISSING) from None
    return str(__version__)


def load_grader(path: Path = GRADER) -> ModuleType:
    """The reference evidence grader (its ``covered(quote, passages)`` defines evidence recall)."""
    if not path.is_file():
        raise SystemExit(f"The evidence grader {path} is missing; pass --grader PATH (or --no-dev).")
    spec = importlib.util.spec_from_file_location("grade_evidence", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
