"""Generators of hostile input files for ingestion tests: each must fail with a clear reason, never hang.

``make_hostile_files(folder)`` writes one file per case and returns what each should fail with. The PDFs are
written byte by byte (or with fpdf2 / pypdf) so that nothing here depends on the code under test.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostileFile:
    path: Path
    reason: str  # the IngestFileError.reason ingestion must report


def raw_pdf(objects: list[bytes]) -> bytes:
    """A syntactically complete PDF from object bodies; object 1 must be the catalog."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def text_pdf(pages: list[list[str]], *, header: str | None = None, footer: str | None = None) -> bytes:
    """A text PDF (fpdf2, Helvetica): one list of lines per page, optional running header and footer.

    ``{page}`` and ``{pages}`` in the header or footer are replaced by the page number and the page count.
    """
    from fpdf import FPDF

    pdf = FPDF(format="letter")
    pdf.set_auto_page_break(False)
    for number, lines in enumerate(pages, start=1):
        pdf.add_page()
        pdf.set_font("Helvetica", size=10)
        if header:
            pdf.set_xy(20, 10)
            pdf.cell(0, 5, header.format(page=number, pages=len(pages)))
        pdf.set_font("Helvetica", size=11)
        y = 25.0
        for line in lines:
            pdf.set_xy(20, y)
            if line:
                pdf.cell(0, 6, line)
            y += 6
        if footer:
            pdf.set_font("Helvetica", size=9)
            pdf.set_xy(20, 265)
            pdf.cell(0, 5, footer.format(page=number, pages=len(pages)))
    return bytes(pdf.output())


def png_bytes(width: int = 64, height: int = 64) -> bytes:
    """A grey-gradient PNG written by hand (no imaging library needed)."""
    rows = b"".join(b"\x00" + bytes((x * 4 + y) % 256 for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def scanned_pdf() -> bytes:
    """Pages that carry only an image and vector shapes, no text layer: what a scanner produces."""
    from fpdf import FPDF

    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.image(io.BytesIO(png_bytes()), x=20, y=20, w=170)
        pdf.set_line_width(1)
        pdf.rect(15, 15, 180, 260)
        pdf.line(20, 200, 190, 200)
    return bytes(pdf.output())


def encrypted_pdf(password: str = "s3cret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf([["Confidential salary table."]]))))
    writer.encrypt(user_password=password, owner_password=password + "-owner")  # RC4: needs no extra package
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def inflating_stream(total: int, piece: int = 2**22) -> bytes:
    """zlib data that inflates to ``total`` blanks, made of one compressed piece repeated (fast, low memory).

    A full flush makes the piece self-contained, so copies of it can follow each other in one stream.
    """
    blanks = b" " * piece
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = packer.compress(blanks) + packer.flush(zlib.Z_FULL_FLUSH)
    count, rest = divmod(total, piece)
    closer = zlib.compressobj(9, zlib.DEFLATED, -15)
    last = closer.compress(blanks[:rest]) + closer.flush(zlib.Z_FINISH)
    checksum = 1
    for _ in range(count):
        checksum = zlib.adler32(blanks, checksum)
    checksum = zlib.adler32(blanks[:rest], checksum)
    return b"\x78\xda" + block * count + last + struct.pack(">I", checksum)


def bomb_pdf(inflated_bytes: int = 2**30 + 2**20) -> bytes:
    """One page whose FlateDecode content stream inflates to ``inflated_bytes`` of blanks (~1 MB on disk)."""
    stream = inflating_stream(inflated_bytes)
    return raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << >> >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        ]
    )


def many_pages_pdf(pages: int = 5000) -> bytes:
    """``pages`` blank pages sharing one page tree (written directly: fpdf2 would take far longer)."""
    kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
    ]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages
    return raw_pdf(objects)


def make_hostile_files(
    folder: Path, *, many_pages: int = 5000, bomb_bytes: int = 2**30 + 2**20
) -> list[HostileFile]:
    """Write every hostile case into ``folder`` and say which failure reason each must produce."""
    folder.mkdir(parents=True, exist_ok=True)
    good = text_pdf([["Remote work policy.", "Employees may work remotely two days a week."]] * 3)
    cases = {
        "truncated.pdf": (good[: len(good) * 2 // 5], "corrupt"),
        "encrypted.pdf": (encrypted_pdf(), "encrypted"),
        "empty.pdf": (b"", "empty"),
        "not-a-pdf.pdf": (
            b"Quarterly report\n\nThis is plain text that someone saved with a .pdf name.\n",
            "not_a_pdf",
        ),
        "scanned.pdf": (scanned_pdf(), "no_text"),
        "bomb.pdf": (bomb_pdf(bomb_bytes), "out_of_memory"),
        "many-pages.pdf": (many_pages_pdf(many_pages), "too_many_pages"),
    }
    made = []
    for name, (data, reason) in cases.items():
        path = folder / name
        path.write_bytes(data)
        made.append(HostileFile(path, reason))
    return made
