"""OCR of scanned pages with the real Tesseract: text, orientation, word boxes, the cache, resuming, bad scans.

The scans are made here from text PDFs (rasterised at 200 dpi, skewed, turned, with noise), so every expected word
is known. Tesseract is installed by scripts/setup.sh (scripts/ocr.sh); where it is missing these tests skip with
a clear message, and fail under CI (RAG_REQUIRE_OCR=1).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from evaluation.format_copies import render_pages, scan_image, write_image_pdf
from ingest.ocr import Recogniser, engine_identity
from ingest.pdf import extract_pdf
from rag.config import Settings
from rag.errors import IngestFileError
from rag.stores.extracted import ExtractedStore, RecognisedPage, content_key
from tests.ingest.hostile import text_pdf

PAGES = [
    [
        "Travel Policy",
        "",
        "Employees book economy class for flights under six hours.",
        "Business class needs written approval from a vice president.",
    ],
    [
        "Meals and Allowances",
        "",
        "The domestic meal allowance is sixty dollars a day.",
        "Receipts are required for every expense above twenty five dollars.",
    ],
    [
        "Personal Costs",
        "",
        "Personal costs are never reimbursed.",
        "Examples include in-room films, minibar items and gym fees.",
    ],
]


@pytest.fixture(scope="module")
def tesseract() -> str:
    found = shutil.which("tesseract")
    if found is None:
        message = "tesseract is not installed (bash scripts/setup.sh installs it: scripts/ocr.sh)"
        if os.environ.get("RAG_REQUIRE_OCR"):
            pytest.fail(message + "; RAG_REQUIRE_OCR=1 requires it")
        pytest.skip(message)
    return found


def scanned(tmp_path: Path, pages: list[list[str]], turns: list[int], name: str = "scan.pdf") -> Path:
    images = [
        scan_image(image, turn=turn, skew=0.8 if i % 2 == 0 else -1.1, noise_seed=i)
        for i, (image, turn) in enumerate(zip(render_pages(text_pdf(pages)), turns, strict=True))
    ]
    path = tmp_path / name
    write_image_pdf(images, path)
    return path


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def recogniser(data: Path, settings: Settings, **kw: object) -> Recogniser:
    return Recogniser(settings, ExtractedStore(data), **kw)  # type: ignore[arg-type]


def test_a_scan_is_read_page_by_page_upright_or_turned(tesseract: str, tmp_path: Path) -> None:
    """Skewed, upside-down and quarter-turned pages all come back as their text, at their page numbers."""
    path = scanned(tmp_path, PAGES, [0, 180, 90])
    settings = Settings(data_dir=tmp_path / "data")
    progress: list[tuple[int, int]] = []
    pdf = extract_pdf(
        path, settings, recogniser(tmp_path / "data", settings, progress=lambda d, t: progress.append((d, t)))
    )
    assert pdf.ocr_pages == (1, 2, 3) and pdf.ocr_engine and pdf.ocr_engine.startswith("tesseract")
    for lines, text in zip(PAGES, pdf.pages, strict=True):
        expected = words(" ".join(lines))
        assert len(expected & words(text)) / len(expected) >= 0.95, text
    assert "never reimbursed" in pdf.pages[2]
    assert progress[-1] == (3, 3)  # progress by page


def test_recognised_words_keep_their_boxes(tesseract: str, tmp_path: Path) -> None:
    path = scanned(tmp_path, PAGES[:1], [0])
    settings = Settings(data_dir=tmp_path / "data")
    pdf = extract_pdf(path, settings, recogniser(tmp_path / "data", settings))
    page = ExtractedStore(tmp_path / "data").page(content_key(path), pdf.ocr_engine or "", 1)
    assert page is not None and page.status == "ok" and page.confidence > 80
    economy = [w for w in page.words if w.text.lower().startswith("economy")]
    assert economy, [w.text for w in page.words]
    left, top, right, bottom = economy[0].box
    assert 0 <= left < right <= 1 and 0 <= top < bottom <= 1
    # the third line of the page sits below the title line
    title = next(w for w in page.words if w.text == "Travel")
    assert top > title.box[3]


def test_a_reingest_reads_from_the_cache_and_a_new_engine_reads_again(tesseract: str, tmp_path: Path) -> None:
    path = scanned(tmp_path, PAGES[:2], [0, 0])
    data = tmp_path / "data"
    settings = Settings(data_dir=data)
    first = extract_pdf(path, settings, recogniser(data, settings))

    again = recogniser(data, settings)
    again._read_page = lambda *a: pytest.fail("a cached page was recognised again")  # type: ignore[method-assign]
    assert extract_pdf(path, settings, again).pages == first.pages
    assert again.total == 0

    # the same pages, recognised by "another version" of the engine: recognised afresh, with a notice
    store = ExtractedStore(data)
    key, engine = content_key(path), first.ocr_engine or ""
    for page in store.pages(key, engine).values():
        store.put_page(key, "tesseract 4.1.1 eng 200dpi p0", page)
    with store._db() as conn:
        conn.execute("DELETE FROM pages WHERE engine = ?", (engine,))
    store.close()
    renewed = extract_pdf(path, settings, recogniser(data, settings))
    assert renewed.pages == first.pages
    assert any("OCR engine changed" in n and "tesseract 4.1.1" in n for n in renewed.notices)


def test_an_interrupted_ocr_resumes_at_the_pages_it_had_not_finished(tesseract: str, tmp_path: Path) -> None:
    path = scanned(tmp_path, PAGES, [0, 0, 0])
    data = tmp_path / "data"
    settings = Settings(data_dir=data)
    broken = recogniser(data, settings, workers=1)
    real = broken._read_page

    def read_until_page_3(p: Path, n: int) -> RecognisedPage:
        if n == 3:
            raise KeyboardInterrupt  # the user pressed Ctrl-C while page 3 was being read
        return real(p, n)

    broken._read_page = read_until_page_3  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        extract_pdf(path, settings, broken)

    resumed = recogniser(data, settings)
    read: list[int] = []
    inner = resumed._read_page

    def counting(p: Path, n: int) -> RecognisedPage:
        read.append(n)
        return inner(p, n)

    resumed._read_page = counting  # type: ignore[method-assign]
    pdf = extract_pdf(path, settings, resumed)
    assert read == [3] and pdf.ocr_pages == (1, 2, 3)


def test_a_blank_scan_fails_with_its_own_reason(tesseract: str, tmp_path: Path) -> None:
    blank = scan_image(render_pages(text_pdf([[""]]))[0], skew=0.5)
    path = tmp_path / "blank.pdf"
    write_image_pdf([blank], path)
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, settings, recogniser(tmp_path / "data", settings))
    assert caught.value.reason == "no_text"
    assert "OCR found no readable text" in str(caught.value) and "page 1" in str(caught.value)


def test_a_noise_page_is_named_and_left_out(tesseract: str, tmp_path: Path) -> None:
    """A page of speckle is not indexed as noise: the file's result names it."""
    pages = [scan_image(image, noise_seed=1) for image in render_pages(text_pdf(PAGES[:1]))]
    speckle = scan_image(render_pages(text_pdf([[""]]))[0], noise=90.0, noise_seed=2)
    path = tmp_path / "mixed.pdf"
    write_image_pdf([*pages, speckle], path)
    settings = Settings(data_dir=tmp_path / "data")
    pdf = extract_pdf(path, settings, recogniser(tmp_path / "data", settings))
    assert pdf.ocr_pages == (1,)
    assert pdf.pages[1].strip() == ""
    assert any("page 2" in w for w in pdf.warnings), pdf.warnings


def test_a_scanned_page_inside_a_born_digital_pdf_is_read(tesseract: str, tmp_path: Path) -> None:
    """Page 2 is an image (a signed memo pasted in); pages 1 and 3 keep their text layer."""
    from fpdf import FPDF

    memo = scan_image(render_pages(text_pdf(PAGES[1:2]))[0], skew=0.6)
    memo_png = tmp_path / "memo.png"
    memo.save(memo_png)
    pdf = FPDF(format="letter")
    for number in range(3):
        pdf.add_page()
        if number == 1:
            pdf.image(str(memo_png), x=0, y=0, w=215.9, h=279.4)
        else:
            pdf.set_font("Helvetica", size=11)
            for i, line in enumerate(PAGES[number]):
                pdf.set_xy(20, 25 + 6 * i)
                pdf.cell(0, 6, line)
    path = tmp_path / "handbook.pdf"
    path.write_bytes(bytes(pdf.output()))
    settings = Settings(data_dir=tmp_path / "data")
    read = extract_pdf(path, settings, recogniser(tmp_path / "data", settings))
    assert read.ocr_pages == (2,)
    assert "sixty dollars a day" in read.pages[1]
    assert "economy class" in read.pages[0] and "never reimbursed" in read.pages[2]


def test_without_the_engine_the_error_names_the_install_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "scan.pdf"
    write_image_pdf([scan_image(render_pages(text_pdf(PAGES[:1]))[0])], path)
    engine_identity.cache_clear()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    settings = Settings(data_dir=tmp_path / "data")
    try:
        with pytest.raises(IngestFileError) as caught:
            extract_pdf(path, settings, recogniser(tmp_path / "data", settings))
    finally:
        engine_identity.cache_clear()
    assert caught.value.reason == "ocr_unavailable"
    assert "tesseract" in str(caught.value) and "scripts/setup.sh" in (caught.value.hint or "")


def test_ocr_off_reports_the_scan_instead_of_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    write_image_pdf([scan_image(render_pages(text_pdf(PAGES[:1]))[0])], path)
    settings = Settings(data_dir=tmp_path / "data", ocr_engine="off")
    with pytest.raises(IngestFileError) as caught:
        extract_pdf(path, settings, recogniser(tmp_path / "data", settings))
    assert caught.value.reason == "no_text" and "RAG_OCR_ENGINE=off" in str(caught.value)


@pytest.mark.slow
def test_a_300_page_scan_reports_progress_and_stays_within_its_memory_limit(
    tesseract: str, tmp_path: Path
) -> None:
    """Pages are rendered and read one at a time, each in a child under the memory limit; progress by page."""
    from fpdf import FPDF

    small = FPDF(format=(110, 30))  # small pages (mm), so 300 of them are read in about a minute
    small.set_auto_page_break(False)
    for n in range(300):
        small.add_page()
        small.set_font("Helvetica", size=12)
        small.set_xy(5, 10)
        kept = ["invoices", "contracts", "payslips", "timesheets", "receipts"][n % 5]
        small.cell(0, 8, f"Record {n + 1}: keep {kept} for {n % 7 + 2} years")
    images = [
        scan_image(image, skew=0.5, noise_seed=i)
        for i, image in enumerate(render_pages(bytes(small.output())))
    ]
    path = tmp_path / "archive.pdf"
    write_image_pdf(images, path)
    settings = Settings(data_dir=tmp_path / "data", pdf_max_memory_mb=300)
    progress: list[tuple[int, int]] = []
    pdf = extract_pdf(
        path, settings, recogniser(tmp_path / "data", settings, progress=lambda d, t: progress.append((d, t)))
    )
    assert len(pdf.pages) == 300 and len(pdf.ocr_pages) >= 295
    assert progress[-1] == (300, 300) and len(progress) >= 300
    assert "record 153: keep payslips" in pdf.pages[152].lower()
