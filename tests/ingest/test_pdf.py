"""PDF reading: hostile files fail with the right reason inside the limits; cleaning repairs real damage."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.pdf import clean_pdf_pages, extract_pdf, looks_tabular, remove_running_lines, repair_line
from rag.config import Settings
from rag.errors import IngestFileError
from tests.ingest.hostile import (
    bomb_pdf,
    encrypted_pdf,
    make_hostile_files,
    many_pages_pdf,
    raw_pdf,
    text_pdf,
)

# Small limits keep every hostile case quick; none of the assertions below depends on wall-clock time.
LIMITS = Settings(pdf_timeout_s=60, pdf_max_memory_mb=768, pdf_max_pages=1000, max_file_mb=5)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    folder = tmp_path_factory.mktemp("hostile")
    return {f.path.name: (f.path, f.reason) for f in make_hostile_files(folder)}


@pytest.mark.parametrize(
    "name",
    [
        "truncated.pdf",
        "encrypted.pdf",
        "empty.pdf",
        "not-a-pdf.pdf",
        "scanned.pdf",
        "bomb.pdf",
        "many-pages.pdf",
    ],
)
def test_hostile_file_fails_with_its_reason(hostile: dict[str, tuple[Path, str]], name: str) -> None:
    path, reason = hostile[name]
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, LIMITS)
    assert caught.value.reason == reason, caught.value
    assert str(path) in str(caught.value)  # the message names the file
    assert caught.value.reason in IngestFileError.REASONS


def test_messages_say_what_to_do(hostile: dict[str, tuple[Path, str]]) -> None:
    def failure(name: str) -> IngestFileError:
        with pytest.raises(IngestFileError) as caught:
            extract_pdf(hostile[name][0], LIMITS)
        return caught.value

    assert "no text layer (scanned?), not read: no OCR engine was given" in str(failure("scanned.pdf"))
    assert "RAG_OCR_ENGINE" in (failure("scanned.pdf").hint or "")
    assert "password" in str(failure("encrypted.pdf"))
    assert "qpdf" in (failure("encrypted.pdf").hint or "")
    assert "1000-page limit" in str(failure("many-pages.pdf"))
    assert "no %PDF header" in str(failure("not-a-pdf.pdf"))
    assert "decompression bomb" in str(failure("bomb.pdf"))


def test_child_is_stopped_at_the_timeout(hostile: dict[str, tuple[Path, str]]) -> None:
    limits = Settings(pdf_timeout_s=0.01, pdf_max_pages=10_000)  # 5,000 pages cannot be read in 10 ms
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(hostile["many-pages.pdf"][0], limits)
    assert caught.value.reason == "timed_out"
    assert "RAG_PDF_TIMEOUT_S" in (caught.value.hint or "")


def test_memory_limit_stops_a_stream_below_pypdfs_own_limit(tmp_path: Path) -> None:
    path = tmp_path / "inflates-70mb.pdf"
    path.write_bytes(bomb_pdf(70 * 2**20))  # pypdf allows 75 MB per stream: only our limit can stop this
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, Settings(pdf_max_memory_mb=128, pdf_timeout_s=60))
    assert caught.value.reason == "out_of_memory"
    assert "128 MB" in str(caught.value)


def test_too_large_is_checked_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.pdf"
    path.write_bytes(b"%PDF-1.7\n" + b"0" * (2 * 2**20))
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, Settings(max_file_mb=1))
    assert caught.value.reason == "too_large"
    assert "1 MB limit" in str(caught.value)


def test_page_limit_is_inclusive(tmp_path: Path) -> None:
    path = tmp_path / "three.pdf"
    path.write_bytes(text_pdf([["First page text here."], ["Second page text."], ["Third page text."]]))
    assert len(extract_pdf(path, Settings(pdf_max_pages=3)).pages) == 3
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, Settings(pdf_max_pages=2))
    assert caught.value.reason == "too_many_pages"


def test_blank_pages_count_but_read_fine_under_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "blank.pdf"
    path.write_bytes(many_pages_pdf(5))
    with pytest.raises(IngestFileError) as caught:  # blank pages: nothing to index
        extract_pdf(path, LIMITS)
    assert caught.value.reason == "no_text"


def test_owner_password_only_pdf_opens(tmp_path: Path) -> None:
    from io import BytesIO

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(BytesIO(text_pdf([["Travel policy: book economy class."]]))))
    writer.encrypt(user_password="", owner_password="owner-only")
    buffer = BytesIO()
    writer.write(buffer)
    path = tmp_path / "owner.pdf"
    path.write_bytes(buffer.getvalue())
    assert "book economy class" in extract_pdf(path, LIMITS).pages[0]


def test_user_password_pdf_is_encrypted(tmp_path: Path) -> None:
    path = tmp_path / "locked.pdf"
    path.write_bytes(encrypted_pdf("hunter2"))
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, LIMITS)
    assert caught.value.reason == "encrypted"


def test_garbage_after_header_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pdf"
    path.write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 40)
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, LIMITS)
    assert caught.value.reason == "corrupt"


def test_a_normal_pdf_reads_under_a_small_memory_limit(tmp_path: Path) -> None:
    path = tmp_path / "ok.pdf"
    path.write_bytes(text_pdf([["Refunds are issued within 14 days of the request."]]))
    pdf = extract_pdf(path, Settings(pdf_max_memory_mb=256, pdf_timeout_s=60))
    assert pdf.pages == ("Refunds are issued within 14 days of the request.",)


def test_pdf_title_metadata_is_used_when_sensible(tmp_path: Path) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Travel and Expense Policy")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.cell(0, 6, "Book economy class for flights under six hours.")
    path = tmp_path / "titled.pdf"
    path.write_bytes(bytes(pdf.output()))
    assert extract_pdf(path, LIMITS).title == "Travel and Expense Policy"

    untitled = FPDF()
    untitled.set_title("Microsoft Word - draft3.docx")
    untitled.add_page()
    untitled.set_font("Helvetica", size=11)
    untitled.cell(0, 6, "Book economy class for flights under six hours.")
    path.write_bytes(bytes(untitled.output()))
    assert extract_pdf(path, LIMITS).title is None


# --- running headers and footers --------------------------------------------------------------------------

BODY = [
    ["1. PURPOSE", "This policy explains how refunds work.", "Customers may ask for a refund by email."],
    ["2. SCOPE", "It covers every store and the online shop.", "Gift cards are covered in section 4.2."],
    ["3. TIMELINES", "Refunds are paid within 14 days.", "Page numbers in the body stay: see page 3 of 12."],
    ["4. EXCEPTIONS", "4.2 Gift cards", "Gift cards cannot be refunded."],
]


def test_running_header_and_footer_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "policy.pdf"
    path.write_bytes(
        text_pdf(
            BODY,
            header="ACME Corp - Refund Policy - Directive No. 2150-P-09",
            footer="Page {page} of {pages}",
        )
    )
    pages = extract_pdf(path, LIMITS).pages
    assert len(pages) == 4
    for number, page in enumerate(pages, start=1):
        assert "ACME Corp" not in page
        assert f"Page {number} of 4" not in page
        for line in BODY[number - 1]:
            assert line in page
    assert "see page 3 of 12" in pages[2]  # a look-alike inside the body is content


def test_header_rules_need_enough_pages() -> None:
    one = [["Annual Report", "Revenue grew."]]
    assert remove_running_lines(one) == one
    two = [["Annual Report", "Revenue grew.", "Page 1"], ["Annual Report", "Costs fell.", "Page 2"]]
    assert remove_running_lines(two) == [["Revenue grew."], ["Costs fell."]]
    two_partial = [["Annual Report", "Revenue grew."], ["Costs fell.", "Profit rose."]]
    assert remove_running_lines(two_partial) == two_partial


def test_line_on_most_pages_is_removed_but_not_on_few() -> None:
    bodies = [
        "Refunds take a week.",
        "Gift cards are final.",
        "Ask the help desk.",
        "Keep receipts.",
        "Thanks.",
    ]
    pages = [["Header text", body, f"Page {i} of 5"] for i, body in enumerate(bodies, start=1)]
    pages[2] = [bodies[2], "Page 3 of 5"]  # one page without the header: 4 of 5 pages is still "most"
    pages[4].append("Thanks for reading.")  # a line on a single page is content
    cleaned = remove_running_lines(pages)
    assert cleaned == [[b] for b in bodies[:4]] + [["Thanks.", "Thanks for reading."]]


# --- character and word repair ----------------------------------------------------------------------------


def test_ligatures_and_private_use_bullets() -> None:
    [page] = clean_pdf_pages(
        ["The e\ufb00ective date of the o\ufb03ce \ufb01le.\n\uf0b7 First item\n\uf0a7 Second item"]
    )
    assert page == "The effective date of the office file.\n\u2022 First item\n\u2022 Second item"


def _vocab(*texts: str) -> Counter[str]:
    import re

    return Counter(w.lower() for t in texts for w in re.findall(r"[A-Za-z]+", t))


@pytest.mark.parametrize(
    ("broken", "fixed", "context"),
    [
        (
            "a) D isable information system access",
            "a) Disable information system access",
            "Disable accounts.",
        ),
        ("Dif fering information sensitivity", "Differing information sensitivity", ""),
        ("ii) T he same day of departure", "ii) The same day of departure", "the the the"),
        (
            "management of the system thr ough a contractor",
            "management of the system through a contractor",
            "",
        ),
        ("APPENDIX A: ACRONYMS & A BBREVIATIONS", "APPENDIX A: ACRONYMS & ABBREVIATIONS", ""),
        ("OAS Office of Acquisition So lutions", "OAS Office of Acquisition Solutions", ""),
        ("If c ounterfeiting is suspected", "If counterfeiting is suspected", "counterfeiting"),
        ("PL-10 - Baseline S election", "PL-10 - Baseline Selection", ""),
        ("EP A is responsible", "EPA is responsible", "EPA EPA EPA"),
    ],
)
def test_broken_words_are_rejoined(broken: str, fixed: str, context: str) -> None:
    assert repair_line(broken, _vocab(broken, context)) == fixed


@pytest.mark.parametrize(
    "text",
    [
        "Section 4.2 applies to FIPS 140-2 and NIST SP 800-53 Rev. 5 (72) hours.",
        "The SIO, ISO and CISO review it in formation with the AO.",  # "in formation": both real words
        "Vitamin D is required; Plan B applies.",  # a lone capital before a common word stays
        "Use SHA256 or AES128 keys with TLS 1.2 on port 443.",
        "Version 2.0 replaces 1.9 as of 2023-06-09.",
        "Post Office boxes and Data Base rows.",  # a capital inside a word is never a split
    ],
)
def test_real_content_is_left_alone(text: str) -> None:
    assert repair_line(text, _vocab(text, "information post office database")) == text


def test_footnote_digits_are_detached_only_when_safe() -> None:
    vocab = _vocab("networked devices are scanned")
    assert repair_line("a) Networked devices1 every seventy two (72) hours;", vocab) == (
        "a) Networked devices[1] every seventy two (72) hours;"
    )
    assert repair_line("Use SHA256 and ipv6 with Win10.", vocab) == "Use SHA256 and ipv6 with Win10."
    assert repair_line("See step2 and table4b.", vocab) == "See step2 and table4b."


def test_end_of_line_hyphenation() -> None:
    [page] = clean_pdf_pages(
        [
            "The informa-\ntion owner decides. Risk-based decisions use a risk-\nbased approach.\n"
            "Publication 800-\n53 applies. Multi-\nfactor login; multi-factor always."
        ]
    )
    flat = " ".join(page.split())
    assert "The information owner decides." in flat
    assert "a risk-based approach." in flat
    assert "Publication 800-53 applies." in flat
    assert "Multi-factor login;" in flat


def test_layout_gaps_are_closed() -> None:
    [page] = clean_pdf_pages(
        [
            "The \u201cPS\u201d designator (e.g., PS-     2, PS-  3) for EPA  -operated systems , and NIST 800-      53B ."
        ]
    )
    assert page == 'The "PS" designator (e.g., PS-2, PS-3) for EPA-operated systems, and NIST 800-53B.'


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["the", "T", "he", "in", "formation", "Dis", "able", "x1", "A", "4.2", "EPA", "-", "."]
        ),
        max_size=30,
    )
)
def test_repair_only_removes_spaces_or_marks_footnotes(words: list[str]) -> None:
    line = " ".join(words)
    out = repair_line(line, _vocab(line, "the information disable"))
    assert out.replace(" ", "").replace("[", "").replace("]", "") == line.replace(" ", "")


def test_raw_pdf_helper_is_valid(tmp_path: Path) -> None:
    from pypdf import PdfReader

    path = tmp_path / "raw.pdf"
    path.write_bytes(raw_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]))
    assert len(PdfReader(str(path)).pages) == 0
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, LIMITS)
    assert caught.value.reason == "corrupt"


SETTINGS_SMALL = Settings(chunk_target_tokens=80, chunk_max_tokens=120, chunk_min_tokens=10)


def ruled_table_pdf(rows: int) -> bytes:
    """A born-digital PDF: a paragraph, then a ruled table long enough to run over several chunks."""
    from fpdf import FPDF

    pdf = FPDF(format="letter")
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.multi_cell(
        0, 5, "Meal allowances. The daily allowance depends on the city; receipts are required above $25."
    )
    pdf.ln(4)
    with pdf.table(col_widths=(60, 40, 60)) as table:
        for cells in [("City", "Daily allowance", "Notes")] + [
            (f"City number {i}", f"${40 + i} a day", "hotel breakfast counts as a meal") for i in range(rows)
        ]:
            row = table.row()
            for text in cells:
                row.cell(text)
    return bytes(pdf.output())


def test_looks_tabular_finds_aligned_columns_not_prose() -> None:
    table = "City        Allowance      Notes\nParis       $70            breakfast\n\nLyon        $55            none\n"
    prose = "This paragraph has ordinary text.\nIt wraps   over a few lines   but has no columns.\nThe end."
    assert looks_tabular(table) and not looks_tabular(prose)


def test_a_ruled_table_becomes_rows_whose_header_every_chunk_repeats(tmp_path: Path) -> None:
    from ingest.chunking import chunk_document
    from ingest.sources import load_file

    path = tmp_path / "allowances.pdf"
    path.write_bytes(ruled_table_pdf(rows=45))
    [doc] = load_file(path, Settings(pdf_timeout_s=60))
    text = "\n".join(p.text for p in doc.pages)
    assert "| City | Daily allowance | Notes |" in text
    assert "| City number 7 | $47 a day | hotel breakfast counts as a meal |" in text
    assert "receipts are required above $25" in text  # the text around the table is kept
    chunks = [c for c in chunk_document(doc, SETTINGS_SMALL) if "City number" in c.text]
    assert len(chunks) >= 3
    assert all(c.text.count("| City | Daily allowance | Notes |") == 1 for c in chunks)
    rows = [line for c in chunks for line in c.text.splitlines() if line.startswith("| City number")]
    assert len(rows) == len(set(rows)) == 45
