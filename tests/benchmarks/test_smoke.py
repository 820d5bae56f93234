"""Smoke runs of the benchmarks on tiny inputs: they must keep working (their figures are not checked here)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from benchmarks import ingest as ingest_bench
from benchmarks import query as query_bench


def test_ingest_benchmark_reports_speed_and_reingest(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(
        "# Leave\n\nEmployees receive 25 days of paid annual leave per calendar year.\n"
    )
    result = ingest_bench.run([str(docs)], tmp_path / "data")
    assert result["files"] == 1 and result["failed"] == 0 and result["chunks"] >= 1
    assert result["reingest_embedded"] == 0
    for key in ("pages_per_s", "pdfs_per_s", "chunks_per_s", "embedding_share", "reingest_speedup"):
        assert key in result


def test_query_benchmark_reports_every_stage(sample_data_dir: Path) -> None:
    questions = [
        {
            "question": "How many days does a customer have to return an item?",
            "user": "a",
            "groups": ["staff"],
        }
    ]
    result = query_bench.run(sample_data_dir, questions, repeats=1)
    assert result["queries"] == 1
    assert {"retrieve", "rerank", "pack", "generate"} <= set(result["stages_ms"])
    assert set(result["end_to_end_ms_without_generator"]) == {"p50", "p95"}


def test_api_benchmark_loads_a_running_server_and_measures_its_overhead(
    sample_data_dir: Path, tmp_path: Path
) -> None:
    from benchmarks import api as api_bench

    data_dir = tmp_path / "data"
    shutil.copytree(sample_data_dir, data_dir)
    questions = [{"question": "How many days does a customer have to return an item?"}]
    result = api_bench.run(data_dir, questions, clients=2, seconds=2.0, overhead_repeats=1)
    assert result["load"]["errors"] == 0 and result["load"]["answers"] >= 2, result["load"]
    assert result["load"]["stream_first_byte_ms"]["n"] >= 1
    assert result["overhead"]["overhead_ms"]["n"] == 1


def test_rag_bench_lists_benchmarks_and_passes_help_through() -> None:
    from typer.testing import CliRunner

    from supportbot.cli import BENCH_MODULES, app

    listing = CliRunner().invoke(app, ["bench", "--help"])
    assert listing.exit_code == 0
    for name, module in BENCH_MODULES.items():
        assert name in listing.output
        assert importlib.util.find_spec(module) is not None, module
    assert CliRunner().invoke(app, ["bench", "no_such_bench"]).exit_code == 2


def test_ocr_benchmark_reports_pages_and_the_cached_reingest(tmp_path: Path) -> None:
    if shutil.which("tesseract") is None:
        if os.environ.get("RAG_REQUIRE_OCR"):
            pytest.fail("tesseract is not installed; RAG_REQUIRE_OCR=1 requires it (scripts/ocr.sh)")
        pytest.skip("tesseract is not installed (bash scripts/setup.sh installs it: scripts/ocr.sh)")
    from benchmarks import ocr as ocr_bench
    from evaluation.format_copies import render_pages, scan_image, write_image_pdf
    from tests.ingest.hostile import text_pdf

    scans = tmp_path / "scans"
    lines = [["Remote Work", "", "Staff may work remotely two days a week with their manager's approval."]]
    write_image_pdf([scan_image(render_pages(text_pdf(lines))[0], skew=0.5)], scans / "remote.pdf")
    result = ocr_bench.run([str(scans)], tmp_path / "data")
    assert result["files"] == 1 and result["failed"] == 0 and result["ocr_pages"] == 1
    assert result["ocr_page_p50_s"] is not None and not result["noop_read_anything"]
    assert result["edited_ocr_pages"] == 0  # read again after the sidecar changed, from the OCR cache
