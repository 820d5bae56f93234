"""Ingestion speed: pages/s and chunks/s on a cold run, the embedding model's share of the time, and the cost
of re-ingesting the unchanged corpus (which must be at least 50x faster than the first run).

    python -m benchmarks.ingest [PATH ...] [--json] [--keep DIR]

With no PATH it ingests the EPA policy PDFs from ../shared (25 files, 297 pages), or the sample corpus when
../shared is absent. Runs in a fresh temporary data directory, so nothing is cached.
"""

from __future__ import annotations

import argparse
import json
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


def run(paths: list[str], data_dir: Path) -> dict[str, Any]:
    from ingest.indexer import ingest
    from rag.config import load_settings
    from rag.embedder import load_embedder

    settings = load_settings(data_dir=data_dir)
    embedder = load_embedder(settings.embedding_model, settings.embed_batch_size)  # loading is not ingestion
    cold = ingest(paths, settings, embedder=embedder)
    started = time.perf_counter()
    warm = ingest(paths, settings, embedder=embedder)
    warm_s = time.perf_counter() - started
    embed_s = cold.timings.get("embed", 0.0) + cold.timings.get("embed_sentences", 0.0)
    return {
        "date": date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores",
        "files": len(cold.files),
        "failed": cold.totals["failed"],
        "pages": cold.pages,
        "chunks": cold.index_chunks,
        "cold_s": round(cold.seconds, 2),
        "pages_per_s": round(cold.pages / cold.seconds, 2) if cold.seconds else None,
        "chunks_per_s": round(cold.index_chunks / cold.seconds, 2) if cold.seconds else None,
        "embedding_share": round(embed_s / cold.seconds, 3) if cold.seconds else None,
        "timings_s": {k: round(v, 2) for k, v in cold.timings.items()},
        "reingest_unchanged_s": round(warm_s, 3),
        "reingest_embedded": warm.embedded,
        "reingest_speedup": round(cold.seconds / warm_s, 1) if warm_s else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", type=Path, help="Ingest into this directory and keep it.")
    args = parser.parse_args()
    paths = args.paths or [str(EPA if EPA.is_dir() else SAMPLE)]
    data_dir = args.keep or Path(tempfile.mkdtemp(prefix="rag-bench-ingest-"))
    try:
        result = {"paths": paths, **run(paths, data_dir)}
    finally:
        if args.keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Ingestion ({', '.join(paths)})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in (
        "files",
        "pages",
        "chunks",
        "cold_s",
        "pages_per_s",
        "chunks_per_s",
        "embedding_share",
        "reingest_unchanged_s",
        "reingest_embedded",
        "reingest_speedup",
    ):
        table.add_row(key, str(result[key]))
    Console().print(table)
    print("stage seconds:", result["timings_s"])


if __name__ == "__main__":
    main()
