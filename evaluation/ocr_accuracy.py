"""How well OCR reads the scanned copies of the corpora, against the born-digital PDFs' own text layer.

``python -m evaluation.ocr_accuracy stored --copies DIR --work-dir DIR`` scores what ingestion recognised and stored
(``rag.stores.extracted``, in each corpus's data folder under the suite work dir) page by page against the original
PDF's text layer; ``python -m evaluation.ocr_accuracy engines --copies DIR --pages N`` recognises a fixed sample of
N pages with each engine here and now, timing each page (wall and CPU seconds).

Measures, pooled over pages (``docs/models.md`` records them):

* **character error rate**: edit distance over characters of the text layer. Reading order differs between a
  text layer and OCR (columns, headers, table cells), so each line of the text layer is aligned to the stretch of
  the recognised page that matches it best (``rapidfuzz``'s partial alignment) and its errors are counted
  there; a line OCR missed counts all its characters.
* **word recall**: the share of the text layer's words (lower-cased, with repeats) found among the recognised
  page's words.

Both sides are normalised as ingestion normalises text (``rag.text.normalize``: NFKC, quotes, dashes) and their
whitespace collapsed.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from evaluation.format_copies import pdf_sources
from rag.text import normalize

SAMPLE_SEED = 20261207


@dataclass
class Score:
    """Errors and words over the pages scored so far."""

    errors: int = 0
    chars: int = 0
    found: int = 0
    words: int = 0
    pages: int = 0
    statuses: Counter[str] = field(default_factory=Counter)

    def add(self, truth: str, recognised: str, status: str = "ok") -> None:
        errors, chars = aligned_errors(truth, recognised)
        found, words = word_hits(truth, recognised)
        self.errors += errors
        self.chars += chars
        self.found += found
        self.words += words
        self.pages += 1
        self.statuses[status] += 1

    def row(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "cer": round(self.errors / self.chars, 4) if self.chars else None,
            "word_recall": round(self.found / self.words, 4) if self.words else None,
            "statuses": dict(self.statuses),
        }


def _clean(text: str) -> str:
    return " ".join(normalize(text).split())


def aligned_errors(truth: str, recognised: str) -> tuple[int, int]:
    """(character errors, characters) of ``truth``, each of its lines aligned to its best match in ``recognised``."""
    from rapidfuzz import fuzz
    from rapidfuzz.distance import Levenshtein

    page = _clean(recognised)
    errors = chars = 0
    for raw in truth.splitlines():
        line = _clean(raw)
        if not line:
            continue
        chars += len(line)
        found = fuzz.partial_ratio_alignment(line, page) if page else None
        stretch = page[found.dest_start : found.dest_end] if found else ""
        errors += min(len(line), Levenshtein.distance(line, stretch))
    return errors, chars


def word_hits(truth: str, recognised: str) -> tuple[int, int]:
    want = Counter(re.findall(r"\w+", normalize(truth).lower()))
    have = Counter(re.findall(r"\w+", normalize(recognised).lower()))
    return sum(min(n, have[w]) for w, n in want.items()), sum(want.values())


def text_layer(path: Path) -> list[str]:
    """The text layer of every page of a born-digital PDF (pdfium's reading)."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        return [pdf[n].get_textpage().get_text_range() for n in range(len(pdf))]
    finally:
        pdf.close()


def pairs(shared: Path, copies: Path, corpora: Sequence[str]) -> Iterator[tuple[str, Path, Path]]:
    """(corpus, scanned copy, original) for every scanned PDF of the corpora."""
    for corpus in corpora:
        for folder in pdf_sources(shared, corpus):
            for original in sorted(folder.glob("*.pdf")):
                copy = copies / corpus / original.name
                if copy.is_file():
                    yield corpus, copy, original


def score_stored(shared: Path, copies: Path, work_dir: Path, corpora: Sequence[str]) -> dict[str, Any]:
    """Score what ingestion stored for the scanned copies (the engine found in each corpus's store)."""
    from rag.stores.extracted import ExtractedStore, content_key

    scores: dict[str, Score] = {}
    engines: set[str] = set()
    for corpus, copy, original in pairs(shared, copies, corpora):
        store = ExtractedStore(work_dir / corpus)
        if not store.exists():
            continue
        key = content_key(copy)
        found = store.engines(key)
        if not found:
            store.close()
            continue
        engine = found[-1]
        engines.add(engine)
        recognised = store.pages(key, engine)
        store.close()
        score = scores.setdefault(corpus, Score())
        for number, truth in enumerate(text_layer(original), start=1):
            page = recognised.get(number)
            score.add(truth, page.text if page else "", page.status if page else "missing")
    return _report(scores, {"engines": sorted(engines)})


def score_engines(
    shared: Path, copies: Path, corpora: Sequence[str], engines: Sequence[str], n_pages: int, dpi: int
) -> dict[str, Any]:
    """Recognise the same sample of pages with each engine, in this process, one page at a time."""
    from ingest.ocr import recognise_page

    every = [
        (corpus, copy, original, number)
        for corpus, copy, original in pairs(shared, copies, corpora)
        for number in range(1, len(text_layer(original)) + 1)
    ]
    sample = sorted(random.Random(SAMPLE_SEED).sample(every, min(n_pages, len(every))), key=str)
    truths = {(str(o), n): text_layer(o)[n - 1] for _, _, o, n in sample}
    out: dict[str, Any] = {}
    for engine in engines:
        score = Score()
        wall: list[float] = []
        cpu: list[float] = []
        for _, copy, original, number in sample:
            started, clock = time.perf_counter(), _cpu()
            page = recognise_page(copy, number, engine=engine, languages="eng", dpi=dpi)
            wall.append(time.perf_counter() - started)
            cpu.append(_cpu() - clock)
            score.add(truths[(str(original), number)], page.text, page.status)
        out[engine] = score.row() | {
            "wall_s_p50": round(statistics.median(wall), 3),
            "wall_s_p95": round(_p95(wall), 3),
            "cpu_s_p50": round(statistics.median(cpu), 3),
            "cpu_s_p95": round(_p95(cpu), 3),
        }
    return {"sample_pages": len(sample), "dpi": dpi, "engines": out}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _report(scores: dict[str, Score], meta: dict[str, Any]) -> dict[str, Any]:
    pooled = Score()
    for s in scores.values():
        pooled.errors += s.errors
        pooled.chars += s.chars
        pooled.found += s.found
        pooled.words += s.words
        pooled.pages += s.pages
        pooled.statuses.update(s.statuses)
    return meta | {"corpora": {c: s.row() for c, s in scores.items()}, "pooled": pooled.row()}


app = typer.Typer(add_completion=False, help=__doc__)
Copies = Annotated[Path, typer.Option("--copies", help="The scanned copies (format_copies scanned --out).")]
Shared = Annotated[Path, typer.Option("--shared", help="The shared data folder.")]
Which = Annotated[str, typer.Option("--corpora", help="Comma-separated corpora.")]
ALL = "dev,gitlab,moj,hypha,sample"


@app.command()
def stored(
    copies: Copies,
    work_dir: Annotated[
        Path, typer.Option("--work-dir", help="The suite work dir that ingested the copies.")
    ],
    shared: Shared = Path("../shared"),
    corpora: Which = ALL,
) -> None:
    """Score the pages ingestion recognised and stored."""
    print(json.dumps(score_stored(shared, copies, work_dir, corpora.split(",")), indent=1))


@app.command()
def engines(
    copies: Copies,
    shared: Shared = Path("../shared"),
    corpora: Which = ALL,
    names: Annotated[str, typer.Option("--engines", help="Comma-separated engines.")] = "tesseract,rapidocr",
    pages: Annotated[int, typer.Option("--pages", help="Pages in the fixed sample.")] = 40,
    dpi: Annotated[int, typer.Option("--dpi", help="Rendering resolution.")] = 200,
) -> None:
    """Recognise a fixed sample of pages with each engine, timed."""
    print(
        json.dumps(score_engines(shared, copies, corpora.split(","), names.split(","), pages, dpi), indent=1)
    )


if __name__ == "__main__":
    app()
