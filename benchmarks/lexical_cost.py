"""Lexical backends compared for cost: p50 query latency, build time and memory of in-process BM25
(``rag.stores.bm25.BM25Index``) and BM25 as Qdrant sparse vectors at 10k and 100k synthetic chunks (SciFact abstracts
cut into overlapping sentence windows; random unit vectors for the dense part, so nothing needs embedding), with
the overlap@10 of the two. Each (backend, size) runs in a fresh process so memory figures do not mix. Their
agreement on a real corpus is ``evaluation.lexical_parity``.

    python -m benchmarks.lexical_cost --sizes 10000 100000 [--out FILE.json]

Embedded Qdrant is the only Qdrant available here: its sparse search is a Python loop over every point, so its
latency says nothing about a Qdrant server (an inverted index in Rust). The figures show why ``auto`` keeps
in-process BM25 for embedded mode.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.lexical_parity import TODAY, TOP_N, overlap_at

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
DIM = 384


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _p50(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


# ----------------------------------------------------------------------------- synthetic chunks
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


def synthetic_chunks(n: int) -> list[str]:
    """``n`` chunk texts: windows of 3, 2, 4 and 5 consecutive sentences over SciFact abstracts, in that order
    (each window size is another variation of the same corpus), until ``n`` are made."""
    abstracts = []
    with open(SCIFACT / "corpus.jsonl") as fh:
        for line in fh:
            doc = json.loads(line)
            sentences = [s for s in _SENT.split(doc.get("text") or "") if s.strip()]
            if sentences:
                abstracts.append((doc.get("title") or "", sentences))
    out: list[str] = []
    for width in (3, 2, 4, 5, 1, 6):
        for title, sentences in abstracts:
            for start in range(0, max(1, len(sentences) - width + 1)):
                out.append(f"{title}\n" + " ".join(sentences[start : start + width]))
                if len(out) >= n:
                    return out
    raise SystemExit(f"SciFact yields only {len(out)} chunks; asked for {n}")


def synthetic_queries(k: int) -> list[str]:
    with open(SCIFACT / "queries.jsonl") as fh:
        return [json.loads(line)["text"] for _, line in zip(range(k), fh, strict=False)]


def _payload_fields(i: int) -> tuple[tuple[str, ...], int, int]:
    """Access columns like real chunks: most readable by everyone, some restricted, a few expired."""
    groups = ("*",) if i % 10 else ("hr",)
    effective = date(2020, 1, 1).toordinal()
    expires = date(2025, 1, 1).toordinal() if i % 50 == 0 else date(9999, 12, 31).toordinal()
    return groups, effective, expires


def cost_child(backend: str, size: int, n_queries: int, persist: bool = False) -> dict[str, Any]:
    """One backend at one size, in this (fresh) process: build time, memory, p50 latency (wall and CPU).

    ``persist``: write the embedded Qdrant store to disk as ingestion does (its SQLite writes are I/O-bound here:
    about 10 ms per point of wall time against 1 ms of CPU) and measure only the build; otherwise it is built in
    memory, which holds the same data structures for searching.
    """
    from rag.stores.bm25 import BM25Index
    from rag.stores.memory import FilterArrays
    from rag.text import bm25_tokens
    from rag.types import Chunk, Principal, SearchFilter

    texts = synthetic_chunks(size)
    t = time.perf_counter()
    tokens = [bm25_tokens(x) for x in texts]
    tokenize_s = time.perf_counter() - t
    queries = [bm25_tokens(q) for q in synthetic_queries(n_queries)]
    filt = SearchFilter(Principal("bench", frozenset({"staff"})), TODAY)
    rng = np.random.default_rng(0)
    qvecs = rng.normal(size=(len(queries), DIM)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    chunks = []
    for i, x in enumerate(texts):
        groups, eff, exp = _payload_fields(i)
        chunks.append(
            Chunk(
                chunk_id=f"{i:024x}",
                doc_id=f"d{i // 20}",
                text=x,
                source=f"scifact#{i}",
                title="",
                ordinal=i % 20,
                groups=groups,
                effective=date.fromordinal(eff),
                expires=date.fromordinal(exp),
                doc_version="v",
                n_tokens=len(x.split()),
            )
        )
    del texts
    if backend == "qdrant":  # imported before the baseline, so the figure is the index's, not the library's
        import qdrant_client  # noqa: F401

        import rag.stores.qdrant  # noqa: F401
    gc.collect()
    base = _rss_mb()
    out: dict[str, Any] = {
        "backend": backend,
        "size": size,
        "tokenize_s": tokenize_s,
        "avgdl": sum(map(len, tokens)) / len(tokens),
        "queries": len(queries),
    }
    workdir = Path(tempfile.mkdtemp(prefix=f"lexcost-{backend}-{size}-"))
    try:
        if backend == "bm25":
            t, c = time.perf_counter(), time.process_time()
            index = BM25Index.build(tokens)
            index.save(workdir)
            masks = FilterArrays(chunks)
            out["build_s"], out["build_cpu_s"] = time.perf_counter() - t, time.process_time() - c
            gc.collect()
            out["memory_mb"] = _rss_mb() - base
            out["peak_mb"] = _peak_mb() - base
            out["disk_mb"] = sum(p.stat().st_size for p in workdir.iterdir()) / 2**20
            lat, cpu = [], []
            for q in queries:
                t, c = time.perf_counter(), time.process_time()
                index.top(q, TOP_N, mask=masks.mask(filt))
                lat.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
            out["p50_ms"], out["p50_cpu_ms"] = _p50(lat), _p50(cpu)
        else:
            from qdrant_client import QdrantClient, models

            from rag.stores import LegsQuery
            from rag.stores.bm25 import average_length
            from rag.stores.qdrant import (
                COLLECTION,
                DENSE,
                SPARSE,
                chunk_payload,
                hybrid_search,
                lexical_search,
                point_id,
                sparse_document,
            )

            t, c = time.perf_counter(), time.process_time()
            client = QdrantClient(path=str(workdir / "qdrant")) if persist else QdrantClient(":memory:")
            out["storage"] = "disk" if persist else "memory"
            client.create_collection(
                COLLECTION,
                vectors_config={DENSE: models.VectorParams(size=DIM, distance=models.Distance.COSINE)},
                sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            )
            avgdl = average_length(tokens)
            for start in range(0, len(chunks), 256):
                part = range(start, min(start + 256, len(chunks)))
                dense = rng.normal(size=(len(part), DIM)).astype(np.float32)
                dense /= np.linalg.norm(dense, axis=1, keepdims=True)
                client.upsert(
                    COLLECTION,
                    wait=True,
                    points=[
                        models.PointStruct(
                            id=point_id(chunks[i].chunk_id),
                            payload=chunk_payload(chunks[i]),
                            vector={DENSE: dense[j].tolist(), SPARSE: sparse_document(tokens[i], avgdl)},
                        )
                        for j, i in enumerate(part)
                    ],
                )
            out["build_s"], out["build_cpu_s"] = time.perf_counter() - t, time.process_time() - c
            gc.collect()
            out["memory_mb"] = _rss_mb() - base
            out["peak_mb"] = _peak_mb() - base
            if persist:  # only the build was asked for
                client.close()
                return out
            out["dense_share_mb"] = size * DIM * 4 / 2**20
            lat, cpu, hyb, hyb_cpu = [], [], [], []
            for q, v in zip(queries, qvecs, strict=True):
                t, c = time.perf_counter(), time.process_time()
                got = lexical_search(client, COLLECTION, q, filt, TOP_N)
                lat.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
                t, c = time.perf_counter(), time.process_time()
                hybrid_search(client, COLLECTION, LegsQuery(q, v, filt, TOP_N, TOP_N, 60))
                hyb.append((time.perf_counter() - t) * 1000)
                hyb_cpu.append((time.process_time() - c) * 1000)
                out.setdefault("_hits", []).append([cid for cid, _ in got[:10]])
            out["p50_ms"], out["p50_cpu_ms"] = _p50(lat), _p50(cpu)
            out["hybrid_p50_ms"], out["hybrid_p50_cpu_ms"] = _p50(hyb), _p50(hyb_cpu)
            client.close()
            # parity at this scale, against the in-process index (built after the memory reading)
            index = BM25Index.build(tokens)
            masks = FilterArrays(chunks)
            overlaps = []
            for q, got in zip(queries, out.pop("_hits"), strict=True):
                ref = [chunks[i].chunk_id for i, _ in index.top(q, 10, mask=masks.mask(filt))]
                o = overlap_at(ref, got)
                if o is not None:
                    overlaps.append(o)
            out["overlap_at_10_mean"] = statistics.fmean(overlaps) if overlaps else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def run_cost(sizes: list[int], n_queries: dict[int, int], persist_sizes: list[int]) -> list[dict[str, Any]]:
    results = []
    jobs = [(size, backend, False) for size in sizes for backend in ("bm25", "qdrant")]
    jobs += [(size, "qdrant", True) for size in persist_sizes]
    for size, backend, persist in jobs:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.lexical_cost",
            "_cost_child",
            backend,
            str(size),
            str(n_queries.get(size, 20)),
        ]
        cmd += ["--persist"] if persist else []
        t = time.perf_counter()
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "TQDM_DISABLE": "1"}
        )
        if proc.returncode != 0:
            raise SystemExit(f"{backend} at {size}: {proc.stderr[-2000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["wall_s"] = time.perf_counter() - t
        print(json.dumps(row), file=sys.stderr)
        results.append(row)
    return results


# ----------------------------------------------------------------------------- report
def markdown(cost: list[dict[str, Any]]) -> str:
    lines = [
        "| chunks | backend | build s wall (CPU) | memory MB (peak) | lexical p50 ms wall (CPU) "
        "| hybrid call p50 ms wall (CPU) | overlap@10 vs BM25 |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in cost:
        if r["backend"] == "bm25":
            name = "in-process BM25"
        else:
            name = f"Qdrant sparse, embedded ({'on disk, build only' if r.get('storage') == 'disk' else 'in memory'})"
        lex = f"{r['p50_ms']:.1f} ({r['p50_cpu_ms']:.1f})" if "p50_ms" in r else ""
        hyb = f"{r['hybrid_p50_ms']:.0f} ({r['hybrid_p50_cpu_ms']:.0f})" if "hybrid_p50_ms" in r else ""
        ov = f"{r['overlap_at_10_mean']:.3f}" if r.get("overlap_at_10_mean") is not None else ""
        lines.append(
            f"| {r['size']:,} | {name} | {r['build_s']:.1f} ({r['build_cpu_s']:.1f}) | "
            f"{r['memory_mb']:.0f} ({r['peak_mb']:.0f}) | {lex} | {hyb} | {ov} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.lexical_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--persist-sizes", type=int, nargs="*", default=[10_000])
    parser.add_argument("--out", type=Path, help="Write the JSON report here.")
    child = sub.add_parser("_cost_child")
    child.add_argument("backend", choices=["bm25", "qdrant"])
    child.add_argument("size", type=int)
    child.add_argument("queries", type=int)
    child.add_argument("--persist", action="store_true")
    args = parser.parse_args(argv)

    if args.cmd == "_cost_child":
        print(json.dumps(cost_child(args.backend, args.size, args.queries, args.persist)))
        return
    queries = {10_000: 30, 100_000: 5}  # embedded Qdrant's sparse search costs seconds per query at 100k
    cost = run_cost(args.sizes, queries, args.persist_sizes)
    if args.out:
        args.out.write_text(json.dumps({"cost": cost}, indent=1))
    print(markdown(cost))


if __name__ == "__main__":
    main()
