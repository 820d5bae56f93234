"""OCR for pages without a usable text layer: a scanned PDF, or an image-only page inside a born-digital one.

Each page is rendered and recognised in a sandboxed child (``ingest.sandbox``: a hostile PDF costs at most
``ocr_page_timeout_s`` and ``pdf_max_memory_mb``), pages of a file in parallel up to the machine's cores, and
every result is stored in ``rag.stores.extracted.ExtractedStore`` as soon as it is read: a re-ingest recognises nothing
twice, an interrupted one resumes at the pages it had not finished, and a new engine (another version, language
or resolution) recognises afresh with a notice. The words keep their boxes, so the source viewer marks a cited
passage on the scanned page itself.

Engines (``RAG_OCR_ENGINE``): ``tesseract`` (the default: Debian's ``tesseract-ocr`` through ``pytesseract``;
page segmentation with orientation detection, so pages turned 90 or 180 degrees and small skews read as
upright ones) and ``rapidocr`` (PP-OCR models shipped in the ``rapidocr-onnxruntime`` wheel, installed with
``pip install -e '.[rapidocr]'``). docs/models.md records both, measured here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from rag.config import Settings, library_defaults
from rag.errors import IngestFileError
from rag.stores.extracted import ExtractedStore, RecognisedPage, Word

SANDBOX_PRELOAD = ("pypdfium2", "PIL.Image", "pytesseract")
PIPELINE_VERSION = 2  # bump when rendering or page assembly changes: cached pages are then recognised again
ENGINES = ("tesseract", "rapidocr")
MIN_WORD_CONFIDENCE = 10.0  # below this a "word" is a speck, a rule or a logo fragment
OK_CONFIDENCE = 55.0  # a page whose words average less (weighted by length) is noise, not text
OK_WORDS = 3  # ... or that has fewer confident words than this
CONFIDENT = 60.0
# Page segmentation with orientation and script detection (pages turned 90 or 180 degrees read upright), and
# Sauvola's local thresholding instead of one global (Otsu) threshold: light grey print (footers, form labels)
# survives binarisation. On 12 EPA pages, word recall 0.925 -> 0.973; on 12 of the other corpora 0.993 -> 0.986
# (docs/models.md, "OCR engines").
TESSERACT_CONFIG = "--psm 1 -c thresholding_method=2 -c thresholding_kfactor=0.2"
# what engines read a list's bullet glyph as when it stands alone at the start of a line ("¢ For more ...")
BULLET_MISREADS = frozenset("¢«»©®°*+•·►▪■□◦‣-–—~>")
INSTALL_HINT = (
    "Install Debian's tesseract-ocr: `bash scripts/setup.sh` does it, or `sudo apt-get install tesseract-ocr`; "
    "or set RAG_OCR_ENGINE=rapidocr after `pip install -e '.[rapidocr]'`."
)


class OcrUnavailable(IngestFileError):
    """The configured OCR engine is not installed here."""

    def __init__(self, message: str) -> None:
        super().__init__("ocr_unavailable", message, hint=INSTALL_HINT)


# ---------------------------------------------------------------------------------------------------------
# Which engine, and its identity (part of the cache key)


@lru_cache(maxsize=4)
def engine_identity(engine: str, languages: str, dpi: int) -> str:
    """``tesseract 5.3.0 eng 200dpi p1``: what recognised a page, so a change recognises it again.
    Raises ``OcrUnavailable`` when the engine is not installed."""
    if engine == "tesseract":
        binary = shutil.which("tesseract")
        if binary is None:
            raise OcrUnavailable("this file needs OCR, and the tesseract program is not installed.")
        try:
            out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
            listed = subprocess.run([binary, "--list-langs"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise OcrUnavailable(f"this file needs OCR, and tesseract does not run ({exc}).") from exc
        version = (out.stdout or out.stderr).split()[1] if (out.stdout or out.stderr).split()[1:] else "?"
        have = set(listed.stdout.split()[1:])
        missing = [lang for lang in languages.split("+") if lang not in have]
        if missing:
            raise OcrUnavailable(
                f"this file needs OCR in {'+'.join(missing)}, and tesseract has no data for it "
                f"(installed: {', '.join(sorted(have)) or 'none'}; install tesseract-ocr-{missing[0]})."
            )
        return f"tesseract {version} {languages} {dpi}dpi p{PIPELINE_VERSION}"
    if engine == "rapidocr":
        try:
            from importlib.metadata import version as package_version

            found = package_version("rapidocr-onnxruntime")
        except Exception as exc:
            raise OcrUnavailable("this file needs OCR, and rapidocr-onnxruntime is not installed.") from exc
        return f"rapidocr {found} ppocrv4 {dpi}dpi p{PIPELINE_VERSION}"
    raise IngestFileError("ocr_unavailable", f"unknown OCR engine {engine!r}; known: {', '.join(ENGINES)}.")


# ---------------------------------------------------------------------------------------------------------
# The parent side: which pages to read, the cache, the children, progress


@dataclass(frozen=True)
class OcrResult:
    """The recognised pages of one file (by 1-based number), the engine that read them, and what to tell the
    user: pages that were poor, empty or failed, and a changed engine."""

    pages: dict[int, RecognisedPage]
    engine: str
    warnings: tuple[str, ...]
    notices: tuple[str, ...]


ProgressFn = Callable[[int, int], None]  # (pages recognised so far, pages to recognise), over the whole run


class Recogniser:
    """Recognises pages of PDFs for one ingestion run: through the cache, in parallel, with progress."""

    def __init__(
        self,
        settings: Settings,
        store: ExtractedStore,
        *,
        progress: ProgressFn | None = None,
        workers: int | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.progress = progress
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._slots = threading.BoundedSemaphore(self.workers)  # pages read at once, over every file
        self._count = threading.Lock()
        self.done = 0
        self.total = 0
        self.page_seconds: list[float] = []  # wall time of each page recognised this run (render + OCR)

    @property
    def enabled(self) -> bool:
        return self.settings.ocr_engine != "off"

    def identity(self) -> str:
        s = self.settings
        return engine_identity(s.ocr_engine, s.ocr_languages, s.ocr_dpi)

    def recognise(self, path: Path, key: str, numbers: Sequence[int]) -> OcrResult:
        """Pages ``numbers`` (1-based) of the PDF at ``path``, whose bytes hash to ``key``."""
        engine = self.identity()
        found = self.store.pages(key, engine, numbers)
        todo = [n for n in numbers if n not in found]
        notices: list[str] = []
        if todo:
            older = self.store.other_engines(key, engine)
            if older:
                notices.append(
                    f"OCR engine changed ({older[-1]} -> {engine}): recognising {len(todo)} page(s) again."
                )
            self._add_total(len(todo))
        failures: dict[int, str] = {}

        def one(n: int) -> None:
            with self._slots:
                started = time.perf_counter()
                try:
                    page = self._read_page(path, n)
                except IngestFileError as exc:
                    failures[n] = str(exc)
                else:
                    self.store.put_page(key, engine, page)
                    found[n] = page
                seconds = time.perf_counter() - started
            self._tick(seconds)

        if todo:
            with ThreadPoolExecutor(min(self.workers, len(todo))) as pool:
                list(pool.map(one, todo))
        warnings = _page_warnings(found, failures)
        return OcrResult({n: found[n] for n in numbers if n in found}, engine, warnings, tuple(notices))

    def _read_page(self, path: Path, number: int) -> RecognisedPage:
        from ingest.sandbox import OUT_OF_MEMORY, run_isolated

        s = self.settings
        outcome = run_isolated(
            __name__,
            "_child_recognise",
            [str(path), number, s.ocr_engine, s.ocr_languages, s.ocr_dpi],
            timeout_s=s.ocr_page_timeout_s,
            max_memory_mb=s.pdf_max_memory_mb,
        )
        if outcome.timed_out:
            raise IngestFileError(
                "timed_out",
                f"page {number}: OCR took longer than {s.ocr_page_timeout_s:g} s and was stopped.",
            )
        if outcome.answer is None:
            how = "out of memory" if outcome.code in (OUT_OF_MEMORY, -9) else f"exit status {outcome.code}"
            raise IngestFileError("corrupt", f"page {number}: the OCR reader stopped ({how}).")
        message = json.loads(outcome.answer)
        if not message.get("ok"):
            raise IngestFileError(message.get("reason", "corrupt"), f"page {number}: {message['message']}")
        return RecognisedPage.from_json(message["page"])

    def _add_total(self, n: int) -> None:
        with self._count:
            self.total += n
            done, total = self.done, self.total
        if self.progress:
            self.progress(done, total)

    def _tick(self, seconds: float) -> None:
        with self._count:
            self.done += 1
            self.page_seconds.append(seconds)
            done, total = self.done, self.total
        if self.progress:
            self.progress(done, total)


def _page_warnings(pages: dict[int, RecognisedPage], failures: dict[int, str]) -> tuple[str, ...]:
    """One line per kind of trouble, naming its pages: what the file's result shows the user."""
    out = []
    poor = sorted(n for n, p in pages.items() if p.status == "poor")
    empty = sorted(n for n, p in pages.items() if p.status == "empty")
    if poor:
        worst = min(pages[n].confidence for n in poor)
        out.append(
            f"{pages_named(poor)}: recognition too poor to index (confidence as low as {worst:.0f}%); check the scan."
        )
    if empty:
        out.append(f"{pages_named(empty)}: no text recognised (blank?); not indexed.")
    out.extend(f"{why} Not indexed." for _, why in sorted(failures.items()))
    return tuple(out)


def pages_named(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:12]) + (
        f" and {len(numbers) - 12} more" if len(numbers) > 12 else ""
    )
    return f"page {shown}" if len(numbers) == 1 else f"pages {shown}"


# ---------------------------------------------------------------------------------------------------------
# The child: render one page, recognise it, assemble lines and paragraphs


def _child_recognise(path: str, number: int, engine: str, languages: str, dpi: int) -> bytes:
    try:
        page = recognise_page(Path(path), number, engine=engine, languages=languages, dpi=dpi)
        return json.dumps({"ok": True, "page": page.to_json()}).encode()
    except IngestFileError as exc:
        return json.dumps({"ok": False, "reason": exc.reason, "message": str(exc)}).encode()
    except MemoryError:
        raise
    except Exception as exc:
        text = str(exc).strip() or type(exc).__name__
        return json.dumps(
            {"ok": False, "reason": "corrupt", "message": f"OCR failed ({text[:200]})."}
        ).encode()


def render_page(path: Path, number: int, dpi: int) -> Any:
    """The 1-based page ``number`` as a greyscale PIL image at ``dpi``."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        page = pdf[number - 1]
        return page.render(scale=dpi / 72).to_pil().convert("L")
    finally:
        pdf.close()


def recognise_page(path: Path, number: int, *, engine: str, languages: str, dpi: int) -> RecognisedPage:
    """Render and recognise one page in this process (the child calls it; tests may too)."""
    image = render_page(path, number, dpi)
    return recognise_image(image, number, engine=engine, languages=languages)


def recognise_image(image: Any, number: int, *, engine: str, languages: str = "eng") -> RecognisedPage:
    if engine == "tesseract":
        lines = _tesseract_lines(image, languages)
    elif engine == "rapidocr":
        lines = _rapidocr_lines(image)
    else:
        raise IngestFileError("ocr_unavailable", f"unknown OCR engine {engine!r}.")
    return assemble_page(number, lines)


Line = tuple[tuple[int, int], list[Word]]  # (paragraph id, line's words)


def _tesseract_lines(image: Any, languages: str) -> list[Line]:
    import pytesseract

    # pages run in parallel, one core each: tesseract's OpenMP threads would oversubscribe the cores
    library_defaults({"OMP_THREAD_LIMIT": "1"})
    # handed over as an uncompressed PGM file: given the image, pytesseract writes a zlib-compressed PNG first,
    # 0.4 s of a page's 2.4 s here, for the same pixels and the same words
    with tempfile.TemporaryDirectory(prefix="rag-ocr-") as folder:
        page_file = Path(folder) / "page.pgm"
        image.convert("L").save(page_file)
        try:
            data = pytesseract.image_to_data(
                str(page_file), lang=languages, config=TESSERACT_CONFIG, output_type=pytesseract.Output.DICT
            )
        except pytesseract.TesseractNotFoundError as exc:
            raise OcrUnavailable("the tesseract program is not installed.") from exc
    width, height = image.size
    lines: dict[tuple[int, int, int], list[Word]] = {}
    for i, text in enumerate(data["text"]):
        text = str(text).strip()
        confidence = float(data["conf"][i])
        if not text or confidence < MIN_WORD_CONFIDENCE:
            continue
        left, top = int(data["left"][i]), int(data["top"][i])
        box = (
            left / width,
            top / height,
            (left + int(data["width"][i])) / width,
            (top + int(data["height"][i])) / height,
        )
        key = (int(data["block_num"][i]), int(data["par_num"][i]), int(data["line_num"][i]))
        lines.setdefault(key, []).append(Word(text, box, confidence))
    return [((block, par), words) for (block, par, _), words in lines.items()]


def _rapidocr_lines(image: Any) -> list[Line]:
    import numpy as np

    engine = _rapidocr()
    result, _ = engine(np.asarray(image.convert("RGB")))
    width, height = image.size
    out: list[Line] = []
    for n, (quad, text, score) in enumerate(result or []):
        xs = [p[0] for p in quad]
        ys = [p[1] for p in quad]
        left, right, top, bottom = min(xs), max(xs), min(ys), max(ys)
        tokens = str(text).split()
        total = max(1, sum(len(t) for t in tokens) + len(tokens) - 1)
        words, at = [], 0
        for token in tokens:  # the line's box shared out by characters: the engine reads lines, not words
            x0 = left + (right - left) * at / total
            at += len(token)
            x1 = left + (right - left) * at / total
            at += 1
            words.append(
                Word(token, (x0 / width, top / height, x1 / width, bottom / height), 100 * float(score))
            )
        out.append(((n, 0), words))
    return out


@lru_cache(maxsize=1)
def _rapidocr() -> Any:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as exc:
        raise OcrUnavailable("rapidocr-onnxruntime is not installed.") from exc
    return RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)


def assemble_page(number: int, lines: Sequence[Line]) -> RecognisedPage:
    """Lines in the engine's reading order, a blank line between paragraphs; the page's status from its words'
    confidence (a blank page, noise or a photo is never indexed as text)."""
    words = [w for _, line in lines for w in line]
    text_parts: list[str] = []
    last: tuple[int, int] | None = None
    for paragraph, line in lines:
        if not line:
            continue
        if last is not None and paragraph != last:
            text_parts.append("")
        tokens = [w.text for w in line]
        if len(tokens) > 1 and tokens[0] in BULLET_MISREADS:
            tokens[0] = "\u2022"
        text_parts.append(" ".join(tokens))
        last = paragraph
    weight = sum(len(w.text) for w in words)
    confidence = sum(w.confidence * len(w.text) for w in words) / weight if weight else 0.0
    readable = [w for w in words if any(ch.isalnum() for ch in w.text)]
    if not readable:
        status = "empty"
    elif confidence < OK_CONFIDENCE or sum(w.confidence >= CONFIDENT for w in readable) < OK_WORDS:
        status = "poor"
    else:
        status = "ok"
    return RecognisedPage(number, "\n".join(text_parts), tuple(words), confidence, status)
