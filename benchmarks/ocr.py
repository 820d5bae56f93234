"""Ingesting scans: seconds per page of OCR (p50, p95), pages per second on this machine's cores, and what a
re-ingest costs once the pages are recognised.

    python -m benchmarks.ocr [PATH ...] [--json]

With no PATH it makes scanned copies (``evaluation.format_copies``: 200 dpi, skewed, noisy, some pages turned) of
the first 8 EPA policy PDFs from ../shared (the sample corpus when ../shared is absent) in a temporary folder.
Three runs in one fresh data directory:

1. **cold**: every page rendered and recognised (the OCR engine of the settings, pages in parallel up to the
   cores), then chunked, embedded and indexed;
2. **no-op**: the same folder again: nothing changed, nothing is read;
3. **metadata edit**: every file's sidecar changed, so every file is read again: its pages come from the OCR
   cache (``rag.stores.extracted``), none is recognised twice.

The embedding model is loaded before the clock starts. Per-page times are wall seconds of one page's child
(render + recognise), so they include waiting for a core when other work runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EPA = REPO.parent / "shared" / "data" / "policies" / "epa-infosec"
SAMPLE = REPO / "ingest" / "sample" / "pdfs"


def make_scans(folder: Path, n_files: int = 8) -> list[str]:
    from evaluation.format_copies import scan_pdf

    source = EPA if EPA.is_dir() else SAMPLE
    for pdf in sorted(source.glob("*.pdf"))[:n_files]:
        scan_pdf(pdf, folder / pdf.name, seed=f"bench:{pdf.name}")
    return [str(folder)]


def run(paths: list[str], data_dir: Path) -> dict[str, Any]:
    from ingest.indexer import ingest
    from ingest.sources import discover
    from rag.config import load_settings
    from rag.models.embedder import load_embedder, reading_encoder_for

    settings = load_settings(data_dir=data_dir)
    embedder = load_embedder(settings.embedding_model, settings.embed_batch_size)
    reading = reading_encoder_for(settings)
    reading.embed_queries(["load"])
    kw: dict[str, Any] = {"embedder": embedder, "reading_encoder": reading}
    cold = ingest(paths, settings, **kw)
    started = time.perf_counter()
    noop = ingest(paths, settings, **kw)
    noop_s = time.perf_counter() - started
    for path in discover(paths):
        if path.suffix.lower() == ".pdf":
            Path(f"{path}.meta.json").write_text(json.dumps({"tags": ["benchmark"]}))
    started = time.perf_counter()
    edited = ingest(paths, settings, **kw)
    edited_s = time.perf_counter() - started
    ocr = cold.to_json()["ocr"]
    read_s = cold.timings.get("read_chunk", 0.0)
    return {
        "date": date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "engine": settings.ocr_engine,
        "dpi": settings.ocr_dpi,
        "files": cold.totals["indexed"],
        "failed": cold.totals["failed"],
        "pages": cold.pages,
        "ocr_pages": ocr.get("pages", 0),
        "ocr_page_p50_s": ocr.get("p50_s"),
        "ocr_page_p95_s": ocr.get("p95_s"),
        "read_s": round(read_s, 2),
        "pages_per_s": round(ocr.get("pages", 0) / read_s, 3) if read_s else None,
        "cold_s": round(cold.seconds, 2),
        "noop_s": round(noop_s, 3),
        "noop_speedup": round(cold.seconds / noop_s, 1) if noop_s else None,
        "noop_read_anything": noop.totals["indexed"] > 0,
        "edited_s": round(edited_s, 2),
        "edited_ocr_pages": edited.to_json()["ocr"].get("pages", 0),
        "warnings": [w for f in cold.files for w in f.warnings],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "paths", nargs="*", help="Folders or files of scanned PDFs (default: scans of EPA PDFs)"
    )
    parser.add_argument(
        "--files", type=int, default=8, help="How many EPA PDFs to scan when no PATH is given"
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rag-bench-ocr-") as tmp:
        work = Path(tmp)
        if args.paths:  # copied: the metadata-edit run writes sidecars beside the files
            scans = work / "scans"
            for p in args.paths:
                src = Path(p)
                if src.is_dir():
                    shutil.copytree(src, scans / src.name)
                else:
                    (scans).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, scans / src.name)
            paths = [str(scans)]
        else:
            paths = make_scans(work / "scans", args.files)
        result = run(paths, work / "data")
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:22s} {value}")


if __name__ == "__main__":
    main()
