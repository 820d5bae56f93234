"""A policy library as it really is, ingested through `rag ingest`: a scanned PDF, a Word file, an intranet page, a
born-digital PDF, files of types it does not read and hidden files. Every file appears in the summary with what
became of it; a second run reads nothing again (OCR included)."""

from __future__ import annotations

import json
import os
import shutil
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evaluation.format_copies import render_pages, scan_image, write_image_pdf
from rag.stores.index import IndexReader
from rag.text import bm25_tokens
from rag.types import Principal, SearchFilter
from supportbot.cli import app
from tests.ingest.hostile import text_pdf
from tests.ingest.test_formats import PAGE, word_file


def library(folder: Path) -> Path:
    folder.mkdir(parents=True)
    scan = [["Records Retention", "", "Signed contracts are kept for seven years after they end."]]
    write_image_pdf([scan_image(render_pages(text_pdf(scan))[0], skew=0.7)], folder / "retention-memo.pdf")
    (folder / "retention-memo.pdf.meta.json").write_text(json.dumps({"groups": ["legal"]}))
    word_file(folder / "expenses.docx")
    (folder / "leave.html").write_text(PAGE)
    (folder / "travel.pdf").write_bytes(text_pdf([["Travel", "", "Book economy class for short flights."]]))
    (folder / "rates.xlsx").write_bytes(b"PK\x03\x04 a spreadsheet")
    (folder / "old-memo.doc").write_bytes(b"\xd0\xcf\x11\xe0 binary word")
    (folder / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (folder / "login.html").write_text(
        "<html><body><form><input type='text'><input type='password'><button>Sign in</button></form></body></html>"
    )
    return folder


def test_every_file_of_a_mixed_library_appears_in_the_summary(tmp_path: Path) -> None:
    if shutil.which("tesseract") is None:
        if os.environ.get("RAG_REQUIRE_OCR"):
            pytest.fail("tesseract is not installed; RAG_REQUIRE_OCR=1 requires it (scripts/ocr.sh)")
        pytest.skip("tesseract is not installed (bash scripts/setup.sh installs it: scripts/ocr.sh)")
    docs, data = library(tmp_path / "policies"), tmp_path / "data"
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", str(docs), "--data-dir", str(data), "--json"])
    assert result.exit_code == 1, result.output  # the sign-in page failed
    summary = json.loads(result.stdout)
    by_name = {Path(f["path"]).name: f for f in summary["files"]}
    assert set(by_name) == {p.name for p in docs.iterdir() if not p.name.endswith(".meta.json")}
    status = {name: (f["status"], f["reason"]) for name, f in by_name.items()}
    assert status == {
        "retention-memo.pdf": ("indexed", None),
        "expenses.docx": ("indexed", None),
        "leave.html": ("indexed", None),
        "travel.pdf": ("indexed", None),
        "rates.xlsx": ("skipped", "unsupported"),
        "old-memo.doc": ("skipped", "unsupported"),
        ".DS_Store": ("skipped", "hidden"),
        "login.html": ("failed", "login_page"),
    }
    assert by_name["retention-memo.pdf"]["ocr_pages"] == 1
    assert (
        "Excel workbook" in by_name["rates.xlsx"]["message"]
        and "Word 97-2003" in by_name["old-memo.doc"]["message"]
    )
    assert summary["totals"] | {"chunks": 0} == {
        "indexed": 4,
        "unchanged": 0,
        "removed": 0,
        "failed": 1,
        "skipped": 3,
        "chunks": 0,
        "ocr_pages": 1,
        "with_warnings": 0,
    }

    # the scan is searchable, and only for its group
    reader = IndexReader(data)
    tokens = bm25_tokens("signed contracts kept seven years")
    legal = SearchFilter(Principal("lee", frozenset({"legal"})), date.today())
    staff = SearchFilter(Principal("sam", frozenset({"staff"})), date.today())
    hits = reader.lexical.search(tokens, legal, 3)
    assert hits and "seven years" in reader.get(hits[0][0]).text  # type: ignore[union-attr]
    assert all(
        "seven years" not in reader.get(cid).text for cid, _ in reader.lexical.search(tokens, staff, 5)
    )  # type: ignore[union-attr]
    reader.close()

    # the console names each file with what became of it; nothing is read again
    shown = runner.invoke(app, ["ingest", str(docs), "--data-dir", str(data)])
    assert "unchanged" in shown.output and "skipped" in shown.output and "login_page" in shown.output
    assert "an Excel workbook (.xlsx)" in " ".join(shown.output.split())
    assert "4 unchanged" in shown.output.replace("\n", " ")
