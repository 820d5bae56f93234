"""Word (.docx) files and HTML pages as Markdown, so structure-aware chunking reads their headings, lists and tables
exactly as it reads a Markdown file (section paths, lists kept with their lead-in, table rows with their header).

* Word: ``mammoth`` turns the document's styles into semantic HTML (Heading 1-6 and Title as headings, numbered
  and bulleted paragraphs as lists, tables as tables), ``markdownify`` that HTML into Markdown.
* HTML: ``trafilatura`` extracts the page's main content as Markdown, leaving out navigation, header, footer,
  sidebars, scripts and cookie banners (a maintained extractor, not rules of ours). A sign-in page saved instead of
  the policy (a password field and almost no content) is refused as such.

Both run in a sandboxed child (``ingest.sandbox``): a .docx is a zip archive, so a decompression bomb costs at most
the memory limit; a hostile page at most the timeout. Links keep their text and lose their address, images are
dropped: what a PDF of the same page would show as text.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.sandbox import OUT_OF_MEMORY, run_isolated
from rag.errors import IngestFileError
from rag.text import normalize

if TYPE_CHECKING:
    from rag.config import Settings

SANDBOX_PRELOAD = ("mammoth", "markdownify", "trafilatura", "lxml.html")
CONVERTERS = {"docx": "mammoth+markdownify", "html": "trafilatura"}
LOGIN_MAX_WORDS = 150  # a page with a password field and less main content than this is a sign-in page
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~])")


@dataclass(frozen=True)
class Converted:
    """The document as Markdown, its own title when it names one, and what converted it."""

    text: str
    title: str | None
    converter: str


def convert(path: Path, fmt: str, settings: Settings) -> Converted:
    """``path`` (a "docx" or "html" file) as Markdown. Raises ``IngestFileError`` with a specific reason."""
    outcome = run_isolated(
        __name__,
        "_child_convert",
        [str(path), fmt],
        timeout_s=settings.pdf_timeout_s,
        max_memory_mb=settings.pdf_max_memory_mb,
    )
    if outcome.timed_out:
        raise IngestFileError(
            "timed_out",
            f"{path}: converting it took longer than {settings.pdf_timeout_s:g} s and was stopped.",
            hint="Open and re-save it; or raise RAG_PDF_TIMEOUT_S.",
        )
    if outcome.answer is None:
        if outcome.code < 0 or outcome.code == OUT_OF_MEMORY:
            raise IngestFileError(
                "out_of_memory",
                f"{path}: reading it needs more than the {settings.pdf_max_memory_mb} MB memory limit "
                "(a decompression bomb?).",
                hint="Do not ingest this file; if it is genuine, re-save it, or raise RAG_PDF_MAX_MEMORY_MB.",
            )
        raise IngestFileError("corrupt", f"{path}: the converter crashed on it (exit status {outcome.code}).")
    message = json.loads(outcome.answer)
    if not message.get("ok"):
        raise IngestFileError(message["reason"], f"{path}: {message['message']}", hint=message.get("hint"))
    return Converted(message["text"], message.get("title"), CONVERTERS[fmt])


def _child_convert(path: str, fmt: str) -> bytes:
    try:
        converted = docx_to_markdown(Path(path)) if fmt == "docx" else html_to_markdown(Path(path))
        message: dict[str, Any] = {"ok": True, "text": converted.text, "title": converted.title}
    except IngestFileError as exc:
        message = {"ok": False, "reason": exc.reason, "message": str(exc), "hint": exc.hint}
    except MemoryError:
        raise
    except Exception as exc:  # the libraries raise many kinds of error on malformed input
        text = str(exc).strip() or type(exc).__name__
        message = {
            "ok": False,
            "reason": "corrupt",
            "message": f"the file is damaged or not what its name says ({text[:200]}).",
            "hint": "Open it in the program that made it and save it again.",
        }
    return json.dumps(message).encode()


# ---------------------------------------------------------------------------------------------------------
# Word


_STYLE_MAP = "\n".join(
    [
        "p[style-name='Title'] => h1:fresh",
        "p[style-name='Subtitle'] => h2:fresh",
    ]
)


def docx_to_markdown(path: Path) -> Converted:
    """A .docx file as Markdown (in this process; ``convert`` runs it in a child)."""
    import mammoth

    _check_docx(path)
    with open(path, "rb") as fh:
        result = mammoth.convert_to_html(fh, style_map=_STYLE_MAP)
    text = html_fragment_to_markdown(result.value)
    if not any(ch.isalnum() for ch in text):
        raise IngestFileError(
            "empty", "the Word document holds no text.", hint="Check that it is the right file."
        )
    return Converted(text, _docx_title(path), CONVERTERS["docx"])


def _check_docx(path: Path) -> None:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head == _OLE_MAGIC:  # a compound file: an encrypted OOXML package, or an old binary .doc renamed
        data = path.read_bytes()
        if _ENCRYPTED_PACKAGE in data:
            raise IngestFileError(
                "encrypted",
                "the Word document is password-protected.",
                hint="Open it in Word, remove the password (File > Info > Protect Document), save and ingest.",
            )
        raise IngestFileError(
            "unsupported",
            "this is a Word 97-2003 document (.doc) named .docx.",
            hint="Open it in Word or LibreOffice and save it as .docx.",
        )
    if not zipfile.is_zipfile(path):
        raise IngestFileError(
            "corrupt",
            "not a Word document: a .docx is a zip archive, and this file is not one (damaged or truncated?).",
            hint="Open it in Word; if it opens, save it again, else fetch a fresh copy.",
        )
    with zipfile.ZipFile(path) as archive:
        if "word/document.xml" not in archive.namelist():
            raise IngestFileError(
                "corrupt",
                "the archive holds no word/document.xml: not a Word document (or a damaged one).",
                hint="Open it in Word; if it opens, save it again, else fetch a fresh copy.",
            )


def _docx_title(path: Path) -> str | None:
    """The title in the document's properties (docProps/core.xml), when it has a real one."""
    try:
        with zipfile.ZipFile(path) as archive:
            core = archive.read("docProps/core.xml").decode("utf-8", errors="replace")
    except (KeyError, zipfile.BadZipFile, OSError):
        return None
    match = re.search(r"<dc:title>([^<]*)</dc:title>", core)
    title = " ".join(normalize(match.group(1)).split()) if match else ""
    return title if len(title) >= 3 and any(ch.isalpha() for ch in title) else None


def html_fragment_to_markdown(html: str) -> str:
    """HTML (a converter's output, not a web page) as Markdown: ATX headings, '-' bullets, pipe tables (a table's
    first row is its header when no row is marked as one, as in most Word tables); links keep their text, images
    go."""
    import markdownify

    text = markdownify.markdownify(
        html, heading_style="ATX", bullets="-", strip=["a", "img"], table_infer_header=True
    )
    return tidy_markdown(text)


def tidy_markdown(text: str) -> str:
    """Undo Markdown escapes (``\\*`` -> ``*``), normalise characters, squeeze blank lines."""
    text = normalize(_MD_ESCAPE.sub(r"\1", text)).replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


# ---------------------------------------------------------------------------------------------------------
# HTML


def html_to_markdown(path: Path) -> Converted:
    """An HTML page's main content as Markdown (in this process; ``convert`` runs it in a child)."""
    import lxml.html
    import trafilatura

    data = path.read_bytes()
    if not data.strip():
        raise IngestFileError("empty", "the page is empty.")
    try:
        tree = lxml.html.fromstring(data)
    except Exception as exc:
        raise IngestFileError("corrupt", f"not readable as HTML ({exc}).") from exc
    text = trafilatura.extract(
        data,
        output_format="markdown",
        include_tables=True,
        include_formatting=True,
        include_links=False,
        include_images=False,
        include_comments=False,
        favor_recall=True,
        deduplicate=False,
    )
    text = tidy_markdown(text or "")
    words = len(re.findall(r"\w+", text))
    if tree.xpath("//input[translate(@type, 'PASWORD', 'pasword')='password']") and words < LOGIN_MAX_WORDS:
        raise IngestFileError(
            "login_page",
            "this is a sign-in page saved as HTML, not the policy (a password field and almost no content).",
            hint="Open the policy while signed in, save that page (or print it to PDF) and ingest it.",
        )
    if not any(ch.isalnum() for ch in text):
        raise IngestFileError(
            "no_text",
            "no main content found on the page (only navigation, scripts or an empty template?).",
            hint="Save the page after it has loaded (File > Save page as, 'complete'), or print it to PDF.",
        )
    titles = tree.xpath("//title/text()")
    title = " ".join(normalize(str(titles[0])).split()) if titles else ""
    return Converted(text, title or None, CONVERTERS["html"])
