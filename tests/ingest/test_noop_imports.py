"""A re-ingest that changes nothing is cheap as a whole process (`rag ingest`, the console command): the heavy
libraries (torch, sentence-transformers, qdrant-client) load only once something is known to have changed, and
the other command groups' libraries (evaluation's matplotlib and scipy.stats, the trace store's SQLAlchemy,
Streamlit) not at all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

HEAVY = (
    "torch",
    "sentence_transformers",
    "transformers",
    "qdrant_client",
    "matplotlib",
    "sqlalchemy",
    "streamlit",
)
# `rag` as its console script runs it: supportbot.cli.main() with the arguments after the program name
RAG = "import sys; from supportbot.cli import main; main()"
ROOT = Path(__file__).resolve().parents[2]


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output ("import time: self | cumulative | name")."""
    names = set()
    for line in importtime_stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", line)
        if match:
            names.add(match.group(1))
    return names


def test_a_noop_reingest_imports_no_model_or_vector_store_library(
    tmp_path: Path, sample_data_dir: Path, sample_pdfs: Path
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(sample_data_dir, data_dir)  # the sample corpus, already ingested
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            RAG,
            "ingest",
            str(sample_pdfs),
            "--data-dir",
            str(data_dir),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["published"] is False and report["totals"]["unchanged"] == len(report["files"]) > 0, report
    modules = imported_modules(proc.stderr)
    assert "ingest.indexer" in modules  # the parse saw the process's imports
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith("scipy.stats"))
    assert heavy == [], heavy


def test_importtime_lines_are_parsed() -> None:
    sample = "import time:       224 |      15279 |         importlib.resources._common\nimport time: 5 | 9 | torch\n"
    assert imported_modules(sample) == {"importlib.resources._common", "torch"}
