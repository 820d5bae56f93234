"""Word and HTML documents: structure kept for chunking, boilerplate dropped, bad files refused by name.

The Word files are written with python-docx (real styles: Title, Heading 1-2, List Bullet, a table), the pages
by hand as an intranet exports them.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from ingest.chunking import chunk_document
from ingest.sources import load_file
from rag.config import Settings
from rag.errors import IngestFileError

SETTINGS = Settings(chunk_target_tokens=60, chunk_max_tokens=90, chunk_min_tokens=10)


def word_file(path: Path, rows: int = 3) -> Path:
    import docx

    document = docx.Document()
    document.core_properties.title = "Expenses Policy"
    document.add_paragraph("Expenses Policy", style="Title")
    document.add_heading("1. Hotels", level=1)
    document.add_paragraph("Book hotels through the travel portal. Personal costs are never reimbursed.")
    document.add_paragraph("Examples of personal costs include:")
    for item in ("in-room films", "minibar items", "gym fees"):
        document.add_paragraph(item, style="List Bullet")
    document.add_heading("2. Meal allowances", level=1)
    document.add_paragraph("The daily allowance depends on the trip:")
    table = document.add_table(rows=rows + 1, cols=3)
    for cell, text in zip(table.rows[0].cells, ("Trip", "Daily allowance", "Receipts"), strict=True):
        cell.text = text
    for r in range(rows):
        for cell, text in zip(
            table.rows[r + 1].cells, (f"Region {r + 1} domestic", f"${40 + r} a day", "over $25"), strict=True
        ):
            cell.text = text
    document.save(str(path))
    return path


PAGE = """<!doctype html><html><head><title>Leave | People | Acme Intranet</title>
<script>var tracking = "should never be indexed";</script></head><body>
<div class="cookie-banner">We use cookies to improve your experience. <button>Accept all cookies</button></div>
<header><a href="/">Acme Intranet</a><nav><ul><li><a href="/hr">HR home</a></li><li><a href="/it">IT help desk</a></li>
<li><a href="/finance">Finance portal</a></li></ul></nav></header>
<main><article>
<h1>Parental Leave Policy</h1>
<p>All employees who become parents are eligible for paid parental leave from their first day of employment.</p>
<h2>How much leave</h2>
<p>Birth parents receive 16 weeks of fully paid leave. Other parents receive 12 weeks of fully paid leave, to be
taken within one year of the birth or adoption.</p>
<h2>Requesting leave</h2>
<p>Tell your manager at least eight weeks before your leave starts, then:</p>
<ul><li>log the leave in Workday under Parental Leave;</li><li>send the certificate to the People team.</li></ul>
<table><tr><th>Leave type</th><th>Weeks paid</th></tr><tr><td>Birth parent</td><td>16</td></tr>
<tr><td>Other parent</td><td>12</td></tr></table>
</article></main>
<footer><p>Copyright 2026 Acme Corp. All rights reserved.</p><a href="/privacy">Privacy notice</a></footer>
<script src="/static/app.js"></script></body></html>"""


def test_word_headings_lists_and_tables_become_structure(tmp_path: Path) -> None:
    [doc] = load_file(word_file(tmp_path / "expenses.docx"), SETTINGS)
    assert doc.fmt == "docx" and doc.meta.title == "Expenses Policy"
    text = doc.pages[0].text
    assert "# 1. Hotels" in text and "- minibar items" in text
    assert "| Trip | Daily allowance | Receipts |" in text
    assert doc.extraction is not None and doc.extraction.view_text == text
    chunks = chunk_document(doc, SETTINGS)
    hotels = next(c for c in chunks if "minibar" in c.text)
    assert hotels.section.endswith("1. Hotels")
    assert "never reimbursed" in hotels.text  # the list stays with the sentence that introduces it


def test_a_table_cut_across_chunks_repeats_its_header_row(tmp_path: Path) -> None:
    [doc] = load_file(word_file(tmp_path / "expenses.docx", rows=30), SETTINGS)
    chunks = [c for c in chunk_document(doc, SETTINGS) if "domestic" in c.text]
    assert len(chunks) >= 3
    for chunk in chunks:
        assert "| Trip | Daily allowance | Receipts |" in chunk.text, chunk.text
        assert chunk.n_tokens <= SETTINGS.chunk_max_tokens
    rows = [line for c in chunks for line in c.text.splitlines() if "domestic" in line]
    assert len(rows) == 30 == len(set(rows))  # every row once


def test_markdown_tables_repeat_their_header_too(tmp_path: Path) -> None:
    rows = "\n".join(f"| Grade {i} | ${50 + i},000 | {i % 3 + 1} weeks |" for i in range(40))
    path = tmp_path / "bands.md"
    path.write_text(f"# Salary bands\n\n| Grade | Base salary | Notice |\n|---|---|---|\n{rows}\n")
    chunks = chunk_document(load_file(path, SETTINGS)[0], SETTINGS)
    assert len(chunks) >= 3
    assert all(c.text.count("| Grade | Base salary | Notice |") == 1 for c in chunks)


def test_an_intranet_page_keeps_its_content_and_drops_the_site_around_it(tmp_path: Path) -> None:
    path = tmp_path / "leave.html"
    path.write_text(PAGE)
    [doc] = load_file(path, SETTINGS)
    text = doc.pages[0].text
    assert doc.fmt == "html" and doc.meta.title == "Parental Leave Policy"
    for kept in (
        "16 weeks of fully paid leave",
        "## Requesting leave",
        "- log the leave in Workday",
        "| Other parent | 12 |",
    ):
        assert kept in text, text
    for dropped in (
        "cookies",
        "IT help desk",
        "Finance portal",
        "All rights reserved",
        "tracking",
        "Privacy notice",
    ):
        assert dropped not in text, text
    chunks = chunk_document(doc, SETTINGS)
    assert any(c.section.endswith("How much leave") and "16 weeks" in c.text for c in chunks)


def test_sidecar_metadata_applies_to_word_and_html(tmp_path: Path) -> None:
    word = word_file(tmp_path / "pay.docx")
    (tmp_path / "pay.docx.meta.json").write_text(json.dumps({"groups": ["payroll"], "title": "Pay rules"}))
    page = tmp_path / "leave.htm"
    page.write_text(PAGE)
    (tmp_path / "_meta.json").write_text(json.dumps({"*.htm": {"groups": ["hr"], "expires": "2030-01-01"}}))
    assert load_file(word, SETTINGS)[0].meta.groups == ("payroll",)
    assert load_file(word, SETTINGS)[0].meta.title == "Pay rules"
    meta = load_file(page, SETTINGS)[0].meta
    assert meta.groups == ("hr",) and str(meta.expires) == "2030-01-01"


def reason(path: Path) -> IngestFileError:
    with pytest.raises(IngestFileError) as caught:
        load_file(path, SETTINGS)
    return caught.value


def test_a_sign_in_page_saved_as_html_is_refused_as_such(tmp_path: Path) -> None:
    path = tmp_path / "policy.html"
    path.write_text(
        "<html><head><title>Sign in | Acme</title></head><body><main><h1>Sign in to continue</h1>"
        "<form action='/login' method='post'><label>Email <input type='email' name='u'></label>"
        "<label>Password <input type='PASSWORD' name='p'></label><button>Sign in</button></form>"
        "<p>Forgot your password? Contact the IT help desk.</p></main></body></html>"
    )
    error = reason(path)
    assert error.reason == "login_page" and "sign-in page" in str(error) and "signed in" in (error.hint or "")


def test_a_page_with_no_content_fails_specifically(tmp_path: Path) -> None:
    path = tmp_path / "shell.html"
    path.write_text("<html><head><script>app.load()</script></head><body><div id='root'></div></body></html>")
    assert reason(path).reason == "no_text"


@pytest.mark.parametrize(
    ("name", "data", "expected", "says"),
    [
        ("corrupt.docx", b"PK\x03\x04 this zip was cut short", "corrupt", "not a Word document"),
        ("text.docx", b"Dear team, the policy changed.", "corrupt", "zip archive"),
        ("old.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, "unsupported", "Word 97-2003"),
        (
            "locked.docx",
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
            + b"\0" * 100
            + "EncryptedPackage".encode("utf-16-le")
            + b"\0" * 100,
            "encrypted",
            "password-protected",
        ),
        ("empty.html", b"", "empty", "empty"),
    ],
)
def test_bad_word_and_html_files_fail_with_their_reason(
    tmp_path: Path, name: str, data: bytes, expected: str, says: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    error = reason(path)
    assert error.reason == expected and says in str(error) and str(path) in str(error)


def test_a_zip_without_a_document_is_not_a_word_file(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "not a Word document")
    path = tmp_path / "archive.docx"
    path.write_bytes(buffer.getvalue())
    error = reason(path)
    assert error.reason == "corrupt" and "word/document.xml" in str(error)


def test_a_word_file_with_no_text_is_empty(tmp_path: Path) -> None:
    import docx

    path = tmp_path / "blank.docx"
    docx.Document().save(str(path))
    assert reason(path).reason == "empty"
