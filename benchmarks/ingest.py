"""Ingestion speed: pages/s, PDFs/s and chunks/s on a cold run, the embedding model's share of the time, and
the cost of re-ingesting the unchanged corpus (which must be at least 50x faster than the first run).

    python -m benchmarks.ingest [PATH ...] [--json] [--keep DIR]
    .venv-peer/bin/python -m benchmarks.ingest [PATH ...] --peer [--rounds 2]     # beside Haystack's indexing

With no PATH it ingests the EPA policy PDFs from ../shared (25 files, 297 pages), or the sample corpus when
../shared is absent. Runs in a fresh temporary data directory, so nothing is cached; each side's embedding
model is loaded before its clock starts.

``--peer`` (in the benchmark environment of ``evaluation.peer``: ``bash scripts/peer_venv.sh``) also indexes
the same files the way Haystack's users do (``evaluation/peer/users.py``: ``PyPDFToDocument``,
``DocumentCleaner``, ``DocumentSplitter`` of 200 words with 20 of overlap, ``SentenceTransformersDocumentEmbedder``
on the same MiniLM, ``InMemoryDocumentStore.write_documents``), cold, in the same process; ``--rounds`` runs
both sides that many times, alternating which goes first. Ours does more per file (section-aware chunks,
a vector per sentence besides each chunk's, BM25, the Qdrant Edge shard); the comparison is per PDF.
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
    from rag.models.embedder import load_embedder, reading_encoder_for

    settings = load_settings(data_dir=data_dir)
    embedder = load_embedder(settings.embedding_model, settings.embed_batch_size)  # loading is not ingestion
    reading = reading_encoder_for(settings)
    reading.embed_queries(["load"])  # nor is the first use's loading (or export) of the reading encoder
    cold = ingest(paths, settings, embedder=embedder, reading_encoder=reading)
    started = time.perf_counter()
    warm = ingest(paths, settings, embedder=embedder, reading_encoder=reading)
    warm_s = time.perf_counter() - started
    embed_s = sum(cold.timings.get(k, 0.0) for k in ("embed", "embed_sentences", "embed_reading"))
    pdfs = sum(1 for f in cold.files if f.path.lower().endswith(".pdf"))
    return {
        "date": date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores",
        "files": len(cold.files),
        "pdfs": pdfs,
        "failed": cold.totals["failed"],
        "pages": cold.pages,
        "chunks": cold.index_chunks,
        "embedded": cold.embedded,
        "cold_s": round(cold.seconds, 2),
        "pages_per_s": round(cold.pages / cold.seconds, 2) if cold.seconds else None,
        "pdfs_per_s": round(pdfs / cold.seconds, 3) if cold.seconds else None,
        "chunks_per_s": round(cold.index_chunks / cold.seconds, 2) if cold.seconds else None,
        "embedding_share": round(embed_s / cold.seconds, 3) if cold.seconds else None,
        "timings_s": {k: round(v, 2) for k, v in cold.timings.items()},
        "reingest_unchanged_s": round(warm_s, 3),
        "reingest_embedded": warm.embedded,
        "reingest_speedup": round(cold.seconds / warm_s, 1) if warm_s else None,
    }


def run_peer(paths: list[str]) -> dict[str, Any]:
    """Haystack's default indexing of the same files (its users' pipeline in ``evaluation.peer``), cold."""
    from evaluation.peer.common import require_haystack
    from evaluation.peer.users import SPLIT_OVERLAP, SPLIT_WORDS

    version = require_haystack()
    from haystack.components.converters import PyPDFToDocument, TextFileToDocument
    from haystack.components.embedders import SentenceTransformersDocumentEmbedder
    from haystack.components.preprocessors import DocumentCleaner, DocumentSplitter
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils import ComponentDevice

    from ingest.sources import discover
    from rag.config import load_settings
    from rag.models.embedder import resolve_model_dir

    files = discover(paths)
    pdfs = [f for f in files if f.suffix.lower() == ".pdf"]
    texts = [f for f in files if f.suffix.lower() in (".md", ".txt")]
    embedder = SentenceTransformersDocumentEmbedder(
        model=str(resolve_model_dir(load_settings().embedding_model)),
        device=ComponentDevice.from_str("cpu"),
        progress_bar=False,
    )
    embedder.warm_up()  # loading is not indexing (as for ours)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    docs = PyPDFToDocument().run(sources=pdfs)["documents"] if pdfs else []
    if texts:
        docs += TextFileToDocument().run(sources=texts)["documents"]
    timings["convert"] = time.perf_counter() - started
    t = time.perf_counter()
    docs = DocumentCleaner().run(documents=docs)["documents"]
    splitter = DocumentSplitter(split_by="word", split_length=SPLIT_WORDS, split_overlap=SPLIT_OVERLAP)
    if hasattr(splitter, "warm_up"):
        splitter.warm_up()
    docs = splitter.run(documents=docs)["documents"]
    timings["clean_split"] = time.perf_counter() - t
    t = time.perf_counter()
    docs = embedder.run(documents=docs)["documents"]
    timings["embed"] = time.perf_counter() - t
    t = time.perf_counter()
    store = InMemoryDocumentStore()
    store.write_documents(docs)
    timings["write"] = time.perf_counter() - t
    seconds = time.perf_counter() - started
    return {
        "haystack": version,
        "files": len(files),
        "pdfs": len(pdfs),
        "chunks": store.count_documents(),
        "cold_s": round(seconds, 2),
        "pdfs_per_s": round(len(pdfs) / seconds, 3) if seconds else None,
        "chunks_per_s": round(store.count_documents() / seconds, 2) if seconds else None,
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
    }


def side_by_side(paths: list[str], rounds: int) -> dict[str, Any]:
    """Ours and the peer on the same files, ``rounds`` times each, alternating which goes first."""
    import os

    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for k in range(rounds):
        for side in ("ours", "peer") if k % 2 == 0 else ("peer", "ours"):
            load = [round(x, 2) for x in os.getloadavg()]
            if side == "peer":
                theirs.append({**run_peer(paths), "load_average": load})
                continue
            data_dir = Path(tempfile.mkdtemp(prefix="rag-bench-ingest-"))
            try:
                ours.append({**run(paths, data_dir), "load_average": load})
            finally:
                shutil.rmtree(data_dir, ignore_errors=True)
    best_ours = min(ours, key=lambda r: r["cold_s"])
    best_theirs = min(theirs, key=lambda r: r["cold_s"])
    return {
        "paths": paths,
        "ours": ours,
        "peer": theirs,
        "seconds_per_pdf": {
            "ours_best": round(best_ours["cold_s"] / max(1, best_ours["pdfs"]), 3),
            "peer_best": round(best_theirs["cold_s"] / max(1, best_theirs["pdfs"]), 3),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", type=Path, help="Ingest into this directory and keep it.")
    parser.add_argument("--peer", action="store_true", help="Also index the files as Haystack's users do.")
    parser.add_argument("--rounds", type=int, default=1, help="--peer: runs per side, alternating the order.")
    args = parser.parse_args()
    paths = args.paths or [str(EPA if EPA.is_dir() else SAMPLE)]
    if args.peer:
        print(json.dumps(side_by_side(paths, max(1, args.rounds)), indent=None if args.json else 1))
        return
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
        "pdfs",
        "pages",
        "chunks",
        "cold_s",
        "pages_per_s",
        "pdfs_per_s",
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
