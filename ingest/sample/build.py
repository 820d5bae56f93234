"""Build the sample policy corpus: Markdown sources -> reproducible PDFs + metadata sidecars.

    python -m ingest.sample.build            # writes ingest/sample/pdfs/
    python -m ingest.sample.build --out DIR  # writes somewhere else (tests)

The sources in ``sources/`` use a deliberately small Markdown subset: ``#``/``##``/``###``
headings, paragraphs, ``- `` bullets, ``1. `` numbered steps and pipe tables. No inline markup.

Output is byte-for-byte reproducible: fixed creation date and metadata, core fonts only, and the
fpdf2 file id is a hash of the content. Every page carries a running header (company + title) and a
footer (document code + "Page X of Y") that ingestion is expected to strip.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fpdf import FPDF
from fpdf.enums import XPos, YPos
from fpdf.fonts import FontFace

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"
PDFS = HERE / "pdfs"

COMPANY = "Northwind Outfitters"
CREATION_DATE = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)
PRODUCER = "Northwind Outfitters sample corpus builder"
FONT = "Helvetica"


@dataclass(frozen=True)
class DocSpec:
    """One document of the corpus. ``name`` is the source stem and the PDF stem."""

    name: str
    code: str  # printed in every page footer
    groups: tuple[str, ...] = ()  # empty: readable by everyone (key omitted from the sidecar)
    effective: str | None = None
    expires: str | None = None
    tags: tuple[str, ...] = ()


DOCS: tuple[DocSpec, ...] = (
    DocSpec("refunds", "POL-CUS-004 rev 2", effective="2024-03-01", tags=("customers", "refunds")),
    DocSpec("travel-policy", "POL-TRV-002 rev 3", effective="2025-01-01", tags=("travel", "finance")),
    DocSpec(
        "travel-policy-2022",
        "POL-TRV-002 rev 2",
        effective="2022-01-01",
        expires="2024-12-31",
        tags=("travel", "finance"),
    ),
    DocSpec("expenses", "POL-FIN-003 rev 4", effective="2024-07-01", tags=("expenses", "finance")),
    DocSpec("leave", "POL-HR-001 rev 5", effective="2024-01-01", tags=("leave", "hr")),
    DocSpec("security", "POL-SEC-001 rev 6", effective="2024-09-01", tags=("security", "it")),
    DocSpec("equipment", "POL-IT-005 rev 2", effective="2024-05-01", tags=("equipment", "it")),
    DocSpec("glossary-forms", "REF-GEN-001 rev 7", effective="2025-02-01", tags=("glossary", "forms")),
    DocSpec("remote-work", "POL-HR-006 rev 1", effective="2023-07-01", tags=("remote work", "hr")),
    DocSpec(
        "covid-remote-work-2021",
        "POL-HR-099 rev 2",
        effective="2020-03-15",
        expires="2022-06-30",
        tags=("remote work", "hr"),
    ),
    DocSpec(
        "salary-bands",
        "HR-CONF-010 rev 4",
        groups=("hr",),
        effective="2025-04-01",
        tags=("pay", "hr", "confidential"),
    ),
    DocSpec(
        "incident-escalation",
        "SEC-RB-003 rev 2",
        groups=("security",),
        effective="2024-10-01",
        tags=("security", "runbook", "restricted"),
    ),
    DocSpec("it-faq", "IT-FAQ-001 rev 9", effective="2025-03-01", tags=("it", "faq")),
)

# --- Markdown subset -------------------------------------------------------------------------

_ASCII_MAP = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2022": "-",
        "\u2026": "...",
        "\u00a0": " ",
        "\u2212": "-",
    }
)


def latin1(text: str) -> str:
    """Core PDF fonts only cover latin-1: map typographic punctuation to ASCII, replace the rest."""
    return text.translate(_ASCII_MAP).encode("latin-1", "replace").decode("latin-1")


@dataclass(frozen=True)
class Block:
    kind: str  # "h1" | "h2" | "h3" | "para" | "bullet" | "step" | "table"
    text: str = ""
    number: str = ""  # for "step"
    rows: tuple[tuple[str, ...], ...] = ()  # for "table"


_STEP = re.compile(r"^(\d+)\.\s+(.*)$")


def parse(markdown: str) -> list[Block]:
    blocks: list[Block] = []
    para: list[str] = []
    table: list[tuple[str, ...]] = []

    def flush() -> None:
        if para:
            blocks.append(Block("para", " ".join(para)))
            para.clear()
        if table:
            blocks.append(Block("table", rows=tuple(table)))
            table.clear()

    for raw in markdown.splitlines():
        line = raw.strip()
        if not line:
            flush()
            continue
        if line.startswith("|"):
            if para:
                flush()
            cells = tuple(c.strip() for c in line.strip("|").split("|"))
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):  # skip |---| separator
                table.append(cells)
            continue
        if table:
            flush()
        heading = re.match(r"^(#{1,3})\s+(.*)$", line)
        step = _STEP.match(line)
        if heading:
            flush()
            blocks.append(Block(f"h{len(heading.group(1))}", heading.group(2)))
        elif line.startswith("- "):
            flush()
            blocks.append(Block("bullet", line[2:].strip()))
        elif step:
            flush()
            blocks.append(Block("step", step.group(2), number=step.group(1)))
        else:
            para.append(line)
    flush()
    return blocks


# --- PDF rendering ---------------------------------------------------------------------------


class PolicyPDF(FPDF):
    def __init__(self, title: str, code: str) -> None:
        super().__init__(orientation="P", unit="mm", format="A4")
        self.doc_title = title
        self.doc_code = code
        self.set_margins(20, 22, 20)
        self.set_auto_page_break(auto=True, margin=20)

    def header(self) -> None:
        self.set_font(FONT, "", 8)
        self.set_text_color(110, 110, 110)
        self.set_y(10)
        half = (self.w - self.l_margin - self.r_margin) / 2
        self.cell(half, 5, latin1(COMPANY), align="L")
        self.cell(half, 5, latin1(self.doc_title), align="R", new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        self.set_draw_color(180, 180, 180)
        self.line(self.l_margin, 16, self.w - self.r_margin, 16)
        self.set_text_color(0, 0, 0)
        self.set_y(self.t_margin)

    def footer(self) -> None:
        self.set_y(-14)
        self.set_font(FONT, "", 8)
        self.set_text_color(110, 110, 110)
        half = (self.w - self.l_margin - self.r_margin) / 2
        self.cell(half, 5, latin1(self.doc_code), align="L")
        self.cell(half, 5, f"Page {self.page_no()} of {{nb}}", align="R")
        self.set_text_color(0, 0, 0)


_HEADING_STYLE = {"h1": (17, 4.0, 3.0), "h2": (13.5, 5.0, 1.5), "h3": (11.5, 3.0, 1.0)}  # size, before, after
BODY_SIZE = 10.5
LINE_H = 5.2


def render(blocks: list[Block], spec: DocSpec, title: str) -> PolicyPDF:
    pdf = PolicyPDF(title, spec.code)
    pdf.set_creation_date(CREATION_DATE)
    pdf.set_producer(PRODUCER)
    pdf.set_creator(PRODUCER)
    pdf.set_author(COMPANY)
    pdf.set_title(latin1(title))
    pdf.set_subject(latin1(spec.code))
    pdf.set_lang("en")
    pdf.add_page()
    width = pdf.w - pdf.l_margin - pdf.r_margin

    for block in blocks:
        if block.kind in _HEADING_STYLE:
            size, before, after = _HEADING_STYLE[block.kind]
            if block.kind != "h1":
                # keep a heading with at least a couple of lines of what follows it
                if pdf.get_y() + before + size * 0.5 + 3 * LINE_H > pdf.page_break_trigger:
                    pdf.add_page()
                else:
                    pdf.ln(before)
            pdf.set_font(FONT, "B", size)
            pdf.multi_cell(width, size * 0.5, latin1(block.text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
            pdf.ln(after)
        elif block.kind == "para":
            pdf.set_font(FONT, "", BODY_SIZE)
            pdf.multi_cell(width, LINE_H, latin1(block.text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
            pdf.ln(2.4)
        elif block.kind in ("bullet", "step"):
            pdf.set_font(FONT, "", BODY_SIZE)
            label = "-" if block.kind == "bullet" else f"{block.number}."
            pdf.set_x(pdf.l_margin + 3)
            pdf.cell(6, LINE_H, label)
            pdf.multi_cell(width - 9, LINE_H, latin1(block.text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
            pdf.ln(1.2)
        elif block.kind == "table":
            pdf.ln(1)
            pdf.set_font(FONT, "", 9.5)
            headings = FontFace(emphasis="BOLD", fill_color=(225, 225, 225))
            with pdf.table(
                width=width,
                line_height=5.5,
                text_align="LEFT",
                first_row_as_headings=True,
                headings_style=headings,
                borders_layout="ALL",
            ) as table:
                for cells in block.rows:
                    row = table.row()
                    for cell in cells:
                        row.cell(latin1(cell))
            pdf.ln(3)
        else:  # pragma: no cover - parse() only yields the kinds above
            raise ValueError(f"unknown block kind {block.kind!r}")
    return pdf


# --- corpus ----------------------------------------------------------------------------------


def sidecar(spec: DocSpec, title: str) -> dict[str, object]:
    meta: dict[str, object] = {"title": title}
    if spec.groups:
        meta["groups"] = list(spec.groups)
    if spec.effective:
        meta["effective"] = spec.effective
    if spec.expires:
        meta["expires"] = spec.expires
    if spec.tags:
        meta["tags"] = list(spec.tags)
    return meta


def build_one(spec: DocSpec, out_dir: Path) -> Path:
    blocks = parse((SOURCES / f"{spec.name}.md").read_text(encoding="utf-8"))
    if not blocks or blocks[0].kind != "h1":
        raise ValueError(f"{spec.name}.md must start with a '# Title' heading")
    title = blocks[0].text
    pdf_path = out_dir / f"{spec.name}.pdf"
    pdf_path.write_bytes(bytes(render(blocks, spec, title).output()))
    meta_path = out_dir / f"{spec.name}.pdf.meta.json"
    meta_path.write_text(json.dumps(sidecar(spec, title), indent=2) + "\n", encoding="utf-8")
    return pdf_path


def build(out_dir: Path = PDFS) -> list[Path]:
    """Regenerate every PDF and sidecar into ``out_dir``; returns the PDF paths."""
    names = {s.name for s in DOCS}
    sources = {p.stem for p in SOURCES.glob("*.md")}
    if names != sources:
        raise ValueError(f"DOCS and sources/ disagree: {sorted(names ^ sources)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    return [build_one(spec, out_dir) for spec in DOCS]


def check_questions(path: Path = HERE / "questions.jsonl") -> list[str]:
    """Problems with ``questions.jsonl``: every evidence quote (and table row) must occur in its source."""
    texts = {
        f"{s.name}.pdf": " ".join((SOURCES / f"{s.name}.md").read_text(encoding="utf-8").split())
        for s in DOCS
    }
    problems = []
    for line in path.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        for ev in q["evidence"]:
            text = texts.get(ev["file"])
            if text is None:
                problems.append(f"{q['id']}: unknown file {ev['file']}")
                continue
            if " ".join(ev["quote"].split()) not in text:
                problems.append(f"{q['id']}: quote not in {ev['file']}: {ev['quote'][:60]}")
            if "table_row" in ev and "| " + " | ".join(ev["table_row"]) + " |" not in text:
                problems.append(f"{q['id']}: table row not in {ev['file']}: {ev['table_row']}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PDFS, help="output folder (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="only check questions.jsonl against the sources")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_questions()
        print("\n".join(problems) or "questions.jsonl: all evidence quotes found in the sources")
        return 1 if problems else 0
    for path in build(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
