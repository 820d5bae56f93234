"""From paths on disk to ``SourceDocument``s: discovery, versions, ids, and one loader per format.

Formats: PDF (text per page, read in a sandboxed child, see ``ingest.pdf``; pages without a text layer read by
OCR, ``ingest.ocr``), Word (.docx) and HTML (converted to Markdown in a sandboxed child, ``ingest.formats``),
Markdown (front matter and HTML comments dropped, headings kept), plain text, and JSONL (BEIR style: one document
per record with ``_id``, ``title``, ``text`` and an optional ``metadata`` object). A file's metadata comes from its
sidecar ``<file>.meta.json`` or its folder's ``_meta.json`` manifest (see ``ingest.metadata``), for every format.

Discovery returns every file it finds, supported or not, and hidden ones too (a hidden folder as one entry, not
walked): the ingestion report names each file with what became of it, so nothing is skipped silently.
"""

from __future__ import annotations

import glob
import hashlib
import json
import mimetypes
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.metadata import (
    build_meta,
    file_overrides,
    is_metadata_file,
    metadata_bytes,
    parse_fields,
    prettify_stem,
)
from ingest.pdf import extract_pdf
from rag.config import Settings
from rag.errors import IngestFileError
from rag.stores.extracted import content_key
from rag.text import normalize
from rag.types import DocumentMeta

if TYPE_CHECKING:
    from ingest.ocr import Recogniser

FORMATS = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".jsonl": "jsonl",
}
MARKUP_FORMATS = frozenset({"markdown", "docx", "html"})  # chunked as Markdown (``ingest.chunking``)
SUPPORTED = " ".join(sorted(FORMATS))
# what the report calls a file it does not read, and what to do about it
_KNOWN_TYPES = {
    ".doc": ("a Word 97-2003 document", "Open it in Word or LibreOffice and save it as .docx."),
    ".rtf": ("a Rich Text document", "Save it as .docx or PDF."),
    ".odt": ("an OpenDocument text", "Save it as .docx or PDF."),
    ".pages": ("an Apple Pages document", "Export it as .docx or PDF."),
    ".xls": ("an Excel workbook", "Export the sheet as PDF."),
    ".xlsx": ("an Excel workbook", "Export the sheet as PDF."),
    ".csv": ("a CSV table", "Export it as PDF, or save the rows as Markdown."),
    ".ppt": ("a PowerPoint presentation", "Export it as PDF."),
    ".pptx": ("a PowerPoint presentation", "Export it as PDF."),
    ".png": ("an image", "Put scans into a PDF (one page per image) to have them read by OCR."),
    ".jpg": ("an image", "Put scans into a PDF (one page per image) to have them read by OCR."),
    ".jpeg": ("an image", "Put scans into a PDF (one page per image) to have them read by OCR."),
    ".tif": ("an image", "Put scans into a PDF (one page per image) to have them read by OCR."),
    ".tiff": ("an image", "Put scans into a PDF (one page per image) to have them read by OCR."),
    ".zip": ("a zip archive", "Unpack it and ingest the folder."),
    ".msg": ("an Outlook message", "Save the message as PDF."),
    ".eml": ("an e-mail message", "Save the message as PDF."),
}
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class PageText:
    number: int | None  # 1-based page number for PDFs, None otherwise
    text: str


@dataclass(frozen=True)
class Extraction:
    """How a document's text was read, beyond a text layer or a text file: for the index manifest, the file's
    result and the source viewer (``rag.stores.extracted`` keeps the recognised words and the converted text)."""

    content_key: str  # sha256 of the file's bytes: where ``rag.stores.extracted`` keeps what was read
    engine: str  # the OCR engine, or the converter ("mammoth+markdownify", "trafilatura")
    ocr_pages: tuple[int, ...] = ()  # pages whose text OCR gave
    view_text: str | None = None  # a converted document's Markdown: what the viewer shows
    warnings: tuple[str, ...] = ()  # pages too poor to index, images not read
    notices: tuple[str, ...] = ()  # a new OCR engine recognised the pages again


@dataclass(frozen=True)
class SourceDocument:
    doc_id: str
    source: str  # the file path, or "path#_id" for a JSONL record
    fmt: str  # "pdf", "docx", "html", "markdown", "text" or "jsonl"
    meta: DocumentMeta
    version: str  # sha256 of the file bytes (+ metadata files), or of the record JSON
    pages: tuple[PageText, ...]
    extraction: Extraction | None = None


# ---------------------------------------------------------------------------------------------------------
# Discovery, versions and ids


def discover(paths: Sequence[str]) -> list[Path]:
    """Every file under files, folders (recursive) and globs; sorted and without duplicates.

    Metadata files (sidecars, ``_meta.json``) are not documents and are left out. Unsupported and hidden files are
    returned too, and a hidden folder as itself (it is not walked), so each gets its own line in the report
    (``skip_reason``). A file named explicitly is returned even when missing, so that it gets its own 'failed'
    line.
    """
    found: dict[str, Path] = {}

    def add(path: Path) -> None:
        found.setdefault(os.path.realpath(path), path)

    for raw in paths:
        path = Path(raw).expanduser()
        if _GLOB_CHARS.search(str(raw)) and not path.exists():
            for match in sorted(glob.glob(str(path), recursive=True)):
                hit = Path(match)
                if hit.is_dir():
                    for inner in _walk(hit):
                        add(inner)
                elif _wanted(hit):
                    add(hit)
        elif path.is_dir():
            for inner in _walk(path):
                add(inner)
        elif not is_metadata_file(path):
            add(path)
    return sorted(found.values(), key=str)


def _walk(root: Path) -> list[Path]:
    out: list[Path] = []
    for folder, dirs, files in os.walk(root):  # does not follow symlinked folders: no cycles
        out.extend(Path(folder) / d for d in sorted(dirs) if d.startswith("."))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.extend(Path(folder) / name for name in sorted(files) if _wanted(Path(folder) / name))
    return out


def _wanted(path: Path) -> bool:
    return not is_metadata_file(path)


def skip_reason(path: Path) -> tuple[str, str, str | None] | None:
    """Why ``path`` is listed but not read, as (reason, message, hint): a hidden file or folder, or a type this
    does not read (named); None for a file to read."""
    if path.name.startswith(".") or path.name.startswith("~$"):
        what = "hidden folder" if path.is_dir() else "hidden or temporary file"
        return "hidden", f"{what}, not read.", None
    if path.suffix.lower() in FORMATS or path.is_dir() or not path.exists():
        return None
    return "unsupported", *unsupported_type(path)


def unsupported_type(path: Path) -> tuple[str, str | None]:
    """(message, hint) for a file of a type ingestion does not read."""
    suffix = path.suffix.lower()
    if suffix in _KNOWN_TYPES:
        kind, hint = _KNOWN_TYPES[suffix]
        return f"{kind} ({suffix}): not a type this reads (reads {SUPPORTED}).", hint
    mime = mimetypes.guess_type(path.name)[0]
    kind = (
        f"a {suffix} file ({mime})" if mime else f"a {suffix} file" if suffix else "a file with no extension"
    )
    return (
        f"{kind}: not a type this reads (reads {SUPPORTED}).",
        "Convert it to PDF, Word (.docx), HTML, Markdown or plain text.",
    )


def file_version(path: Path | str) -> str:
    """sha256 of the file's bytes plus its sidecar and folder manifest: a metadata edit re-indexes the file."""
    path = Path(path)
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    digest.update(metadata_bytes(path))
    return digest.hexdigest()


def doc_id_for_file(path: Path | str) -> str:
    """Stable per absolute path: ``<slug-of-stem>-<8 hex of sha256(absolute path)>``."""
    path = Path(path)
    absolute = os.path.realpath(path)
    slug = re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-")[:48].strip("-") or "doc"
    return f"{slug}-{hashlib.sha256(absolute.encode()).hexdigest()[:8]}"


# ---------------------------------------------------------------------------------------------------------
# Loading


def load_file(path: Path, settings: Settings, recogniser: Recogniser | None = None) -> list[SourceDocument]:
    """Read one file into documents (one per file; one per record for JSONL); pages without a text layer are
    read by ``recogniser`` (OCR). Raises ``IngestFileError``."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if path.is_dir():
        raise IngestFileError("unsupported", f"{path}: is a folder, not a file.")
    if fmt is None:
        message, hint = unsupported_type(path)
        raise IngestFileError("unsupported", f"{path}: {message}", hint=hint)
    _check_size(path, settings)
    overrides = file_overrides(path)
    if fmt == "jsonl":
        return _load_jsonl(path, overrides)
    version = file_version(path)
    extraction = None
    if fmt == "pdf":
        pdf = extract_pdf(path, settings, recogniser)
        pages = tuple(PageText(i + 1, text) for i, text in enumerate(pdf.pages))
        # a /Title that only repeats the file's name (what scanners and image tools write) says less than a heading
        own = pdf.title if pdf.title and _key(pdf.title) != _key(path.stem) else None
        title = own or _first_heading(pdf.pages[0] if pdf.pages else "") or prettify_stem(path.stem)
        if pdf.ocr_engine or pdf.warnings:
            extraction = Extraction(
                content_key=pdf.content_key or content_key(path),
                engine=pdf.ocr_engine or "",
                ocr_pages=pdf.ocr_pages,
                warnings=pdf.warnings,
                notices=pdf.notices,
            )
    elif fmt in ("docx", "html"):
        from ingest.formats import convert

        converted = convert(path, fmt, settings)
        text, front_title = strip_front_matter(converted.text)
        pages = (PageText(None, text),)
        title = front_title or _first_markdown_heading(text) or converted.title or prettify_stem(path.stem)
        extraction = Extraction(content_key(path), converted.converter, view_text=text)
    else:
        text = _read_text(path)
        front_title = None
        if fmt == "markdown":
            text, front_title = strip_front_matter(text)
            text = _HTML_COMMENT.sub("", text)
        if not text.strip():
            raise IngestFileError("empty", f"{path}: contains no text.")
        pages = (PageText(None, text),)
        heading = _first_markdown_heading(text) if fmt == "markdown" else _first_heading(text)
        title = front_title or heading or prettify_stem(path.stem)
    meta = build_meta(overrides, title, path)
    return [SourceDocument(doc_id_for_file(path), str(path), fmt, meta, version, pages, extraction)]


def _key(name: str) -> str:
    return re.sub(r"[\W_]+", "", name).casefold()


def _check_size(path: Path, settings: Settings) -> None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise IngestFileError("unreadable", f"{path}: no such file.", hint="Check the path.") from None
    except OSError as exc:
        raise IngestFileError("unreadable", f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    if size == 0:
        raise IngestFileError("empty", f"{path}: the file is empty (0 bytes).")
    if size > settings.max_file_mb * 1024 * 1024:
        raise IngestFileError(
            "too_large",
            f"{path}: {size / 2**20:.1f} MB is over the {settings.max_file_mb} MB limit.",
            hint="Split the file, or raise RAG_MAX_FILE_MB.",
        )


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestFileError("unreadable", f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    if b"\x00" in data[:8192]:
        raise IngestFileError(
            "unreadable",
            f"{path}: holds binary data, not text.",
            hint="Check the file type; only UTF-8 (or Windows-1252) text is read as text.",
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    return normalize(text.replace("\r\n", "\n").replace("\r", "\n"))


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def strip_front_matter(text: str) -> tuple[str, str | None]:
    """Remove a leading YAML front-matter block; return the text and the block's ``title``, if any."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return text, None
    title = re.search(r"^title:[ \t]*(.+?)[ \t]*$", match.group(1) or "", re.MULTILINE)
    value = title.group(1).strip("\"'") if title else None
    return text[match.end() :], value or None


_MD_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def _first_markdown_heading(text: str) -> str | None:
    headings = [(len(m.group(1)), m.group(2)) for m in _MD_HEADING.finditer(_without_code(text))]
    if not headings:
        return None
    top = min(level for level, _ in headings)
    return _plain(next(title for level, title in headings if level == top))


def _without_code(text: str) -> str:
    return re.sub(r"^ {0,3}(```|~~~).*?^ {0,3}\1", "", text, flags=re.MULTILINE | re.DOTALL)


def _plain(heading: str) -> str | None:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](link) -> text
    text = " ".join(re.sub(r"[*_`]+", "", text).split())
    return text or None


def _first_heading(text: str) -> str | None:
    """A title for text without markup: the first non-blank line when it is short and not a sentence."""
    for line in text.split("\n"):
        line = " ".join(line.split())
        if not line:
            continue
        words = line.split()
        if len(words) <= 12 and not line.endswith((".", ",", ";")) and sum(c.isalpha() for c in line) >= 3:
            return line
        return None
    return None


def _load_jsonl(path: Path, overrides: dict[str, Any]) -> list[SourceDocument]:
    """One document per record; the file's sidecar/manifest give defaults that a record's metadata overrides."""
    extra = metadata_bytes(path)
    docs: list[SourceDocument] = []
    first_line: dict[str, int] = {}
    texts: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")  # not splitlines(): JSON may hold U+2028
    except UnicodeDecodeError as exc:
        raise IngestFileError("corrupt", f"{path}: not UTF-8 text ({exc.reason}).") from exc
    except OSError as exc:
        raise IngestFileError("unreadable", f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _corrupt(path, n, f"not valid JSON ({exc.msg}, column {exc.colno})") from exc
        if not isinstance(record, dict):
            raise _corrupt(path, n, f"expected a JSON object, got {type(record).__name__}")
        rid = record.get("_id")
        if not isinstance(rid, str | int) or isinstance(rid, bool) or not str(rid).strip():
            raise _corrupt(path, n, "the record has no '_id' (string)")
        rid = str(rid).strip()
        text, title = record.get("text", ""), record.get("title") or ""
        if not isinstance(text, str) or not isinstance(title, str):
            raise _corrupt(path, n, "'text' and 'title' must be strings")
        if rid in first_line:
            if texts[rid] == text:
                continue  # the same record twice: keep one
            raise _corrupt(
                path, n, f"duplicate _id {rid!r} (first on line {first_line[rid]}) with different text"
            )
        first_line[rid], texts[rid] = n, text
        if not text.strip():
            continue
        fields = dict(overrides)
        raw_meta = record.get("metadata")
        if isinstance(raw_meta, dict):
            fields.update(parse_fields(raw_meta, f"{path} line {n} metadata", strict=False))
        meta = build_meta(fields, " ".join(normalize(title).split()) or rid, f"{path} line {n}")
        canonical = json.dumps(record, sort_keys=True, ensure_ascii=False).encode()
        version = hashlib.sha256(canonical + extra).hexdigest()
        docs.append(
            SourceDocument(rid, f"{path}#{rid}", "jsonl", meta, version, (PageText(None, normalize(text)),))
        )
    return docs


def _corrupt(path: Path, line: int, problem: str) -> IngestFileError:
    return IngestFileError(
        "corrupt",
        f"{path}: line {line}: {problem}.",
        hint='Each line must be one JSON object like {"_id": "...", "title": "...", "text": "..."}.',
    )
