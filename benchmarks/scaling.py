"""Speed at scale: per-stage latency, throughput with concurrent clients, the model-forward floor, and peak memory
of ingestion and of the query process, at several index sizes.

    python -m benchmarks.scaling build --sizes 1000 10000 100000 --base DATA_DIR [--work DIR]
    python -m benchmarks.scaling query --sizes 1000 10000 100000 [--work DIR] [--queries 40] [--clients 4]
    python -m benchmarks.scaling floor --size 10000 [--work DIR] [--no-cross-encoder]
    python -m benchmarks.scaling floor --size 10000 --queries 10 --repeats 3 --rerank-with-cross-encoder
    python -m benchmarks.scaling report [--work DIR]          # the tables, from WORK/results.json

``--base`` is a data directory holding the SciFact corpus ingested by the app (``rag ingest
../shared/data/scifact/corpus.jsonl --data-dir DATA_DIR``: 5,183 abstracts, 9,994 chunks, embedded for real).
An index of N chunks is built by the app's own ingestion from real SciFact documents (in corpus order, until N
chunks) and, beyond the 9,994 real chunks, synthetic one-chunk documents: 2-4 real sentences drawn from random
SciFact chunks under a real title. Vectors are cheap instead of embedded: the N-chunk data directory starts
with a copy of the base's embedding cache (real vectors of every real chunk and sentence), and each synthetic
chunk gets the normalised mean of its sentences' real vectors plus noise (cosine ~0.98 to that mean); a
sentence the cache lacks gets a perturbed copy of a real sentence vector. Ingestion itself then runs unchanged,
embedding model loaded, and finds every vector in its cache: the build figures are ingestion without the
embedding forward passes (those cost ~13 chunks/s here; see ``rag bench ingest``).

Each size is one cold ingestion of its whole corpus (the 100k build took 22 minutes while embedded generations
lived in qdrant-client's local mode, one commit per point; the memory-mapped files and the Qdrant Edge shard
take a few minutes). ``build`` checks ``--budget-min`` before each size (estimated from the last size it built)
and stops rather than overrun; run the same command again and built sizes are reused. ``--step N`` builds an
index in ingestions of at most N chunks each (the app's incremental path: unchanged files skipped, the
previous generation's shard copied, only new points written), resumable the same way; its peak RSS is then
that of the largest step, not of a cold ingestion.

Each build and each query measurement runs in a fresh child process, so peak RSS (``ru_maxrss``) is that
process's own. Query texts are SciFact claims, each asked once per process (the pipeline caches query vectors
by text); the generator is excluded from end to end as in ``benchmarks/query.py``. Throughput: ``--clients``
threads calling ``Pipeline.ask`` on one shared Pipeline. The floor: the query-embedding forward and the
reranker's scoring of the same candidates, each in a tight loop, against the end-to-end p50 on the same
questions, and every model call each request made replayed in a tight loop (the forward time of the same pairs);
a MiniLM-L6-sized cross-encoder over 40 pairs is timed as a reference (random head: latency only).
``--rerank-with-cross-encoder`` runs the pipeline itself with that cross-encoder as its reranker (the floor as
a cross-encoder pipeline has it; saved under ``SIZE-cross-encoder``). Every command adds its figures to ``WORK/results.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.query import EXCLUDED, percentiles

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
DEFAULT_WORK = Path("/tmp/rag-bench-scaling")
SYNTHETIC_MAX_TOKENS = 150  # under chunk_target_tokens: every synthetic document is exactly one chunk
SYNTHETIC_FILE_DOCS = 100_000  # synthetic documents per corpus file when building without --step
STEP_CHUNKS = 0  # chunks one ingestion adds; 0 = one cold ingestion per index (see build)
BUDGET_S = 25 * 60  # a build command stops before a size or step that would end after this (rerun to resume)
NOISE = 0.2  # norm of the noise added to a synthetic vector: cosine ~0.98 to the vector it perturbs


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return _peak_rss_mb()


def _settings(data_dir: Path, **overrides: Any) -> Any:
    from rag.config import load_settings

    return load_settings(data_dir=data_dir, **overrides)


# ----------------------------------------------------------------------------------------- building indexes
def _base_generation(base: Path) -> tuple[Any, list[Any]]:
    from rag.stores.index import Manifest, current_generation, generation_dir, load_chunks

    name = current_generation(base)
    if name is None:
        raise SystemExit(f"{base} holds no published index: ingest the SciFact corpus into it first")
    folder = generation_dir(base, name)
    return Manifest.load(folder), load_chunks(folder)[0]


def plan_corpus(base: Path, n_chunks: int, out: Path, *, step: int = 0, seed: int = 0) -> dict[str, Any]:
    """Write ``out/real.jsonl`` (base documents in source order until ``n_chunks``) and ``out/synthetic-NNN.jsonl``
    (one-chunk documents recombined from real sentences, for the chunks the base lacks). With ``step`` > 0 the
    synthetic files are cut so that ingesting one more file at a time adds at most ``step`` chunks."""
    from rag.models.sentences import sentence_units
    from rag.text import count_tokens

    manifest, chunks = _base_generation(base)
    out.mkdir(parents=True, exist_ok=True)
    real, total = 0, 0
    with open(out / "real.jsonl", "w", encoding="utf-8") as dst:
        for source in manifest.sources:
            with open(source, encoding="utf-8") as src:
                for line in src:
                    if total >= n_chunks or not line.strip():
                        continue
                    entry = manifest.documents.get(str(json.loads(line)["_id"]))
                    if entry is None:
                        continue
                    dst.write(line if line.endswith("\n") else line + "\n")
                    real += 1
                    total += len(entry["chunk_ids"])
    files = {"real.jsonl": total}
    synthetic = max(0, n_chunks - total)
    plan = {"real_documents": real, "real_chunks": total, "synthetic_documents": synthetic, "files": files}
    if not synthetic:
        return plan
    rng = random.Random(seed)
    titles = sorted({c.title for c in chunks if c.title})
    sentences = sorted({u for c in chunks for u in sentence_units(c.text) if len(u.split()) >= 5})
    size = {s: count_tokens(s) for s in sentences}
    sentences = [s for s in sentences if size[s] <= SYNTHETIC_MAX_TOKENS // 2]
    # what the first file may add beside the real chunks; without steps, files of SYNTHETIC_FILE_DOCS documents
    # (ingestion refuses a file over its size limit: 100k documents are ~55 MB)
    room = (step - total) if step > 0 else min(synthetic, SYNTHETIC_FILE_DOCS)
    room = room if room > 0 else step
    i = 0
    while i < synthetic:
        name = f"synthetic-{len(files) - 1:03d}.jsonl"
        count = min(room, synthetic - i)
        with open(out / name, "w", encoding="utf-8") as dst:
            for j in range(i, i + count):
                picked: list[str] = []
                used = 0
                for _ in range(rng.randint(2, 4)):
                    s = rng.choice(sentences)
                    if s in picked:
                        continue
                    if used + size[s] > SYNTHETIC_MAX_TOKENS:
                        break
                    picked.append(s)
                    used += size[s]
                record = {"_id": f"synthetic-{j:06d}", "title": rng.choice(titles), "text": " ".join(picked)}
                dst.write(json.dumps(record) + "\n")
        files[name] = count
        i += count
        room = step if step > 0 else SYNTHETIC_FILE_DOCS
    return plan


def seed_vectors(base: Path, data_dir: Path, corpus: Path, *, seed: int = 0) -> dict[str, Any]:
    """Give ``data_dir`` the base's embedding cache plus cheap vectors for every synthetic chunk and sentence.

    Keys are what ingestion will look up: the synthetic files are read and chunked by ingestion's own code.
    """
    from ingest.chunking import chunk_document
    from ingest.indexer import EmbeddingCache
    from ingest.sources import load_file
    from rag.models.embedder import passage_text
    from rag.models.sentences import sentence_units

    data_dir.mkdir(parents=True, exist_ok=True)
    target = data_dir / "embeddings.sqlite"
    if not target.exists():  # a consistent copy of the base's cache (its WAL included)
        src = sqlite3.connect(f"file:{base / 'embeddings.sqlite'}?mode=ro", uri=True)
        dst = sqlite3.connect(target)
        src.backup(dst)
        dst.close()
        src.close()
    settings = _settings(data_dir)
    docs = [d for path in sorted(corpus.glob("synthetic-*.jsonl")) for d in load_file(path, settings)]
    chunks = [c for d in docs for c in chunk_document(d, settings)]
    if not chunks:
        return {"synthetic_chunks": 0, "vectors_added": 0}
    cache = EmbeddingCache(data_dir, settings.embedding_model)
    try:
        _, base_chunks = _base_generation(base)
        real_units = sorted({u for c in base_chunks for u in sentence_units(c.text)})
        found = cache.get_many([cache.key(u) for u in real_units])
        unit_vec = {u: found[cache.key(u)] for u in real_units if cache.key(u) in found}
        pool = np.stack(list(unit_vec.values())) if unit_vec else None
        dim = pool.shape[1] if pool is not None else 384
        rng = np.random.default_rng(seed)

        def perturb(v: np.ndarray) -> np.ndarray:
            v = v / (np.linalg.norm(v) or 1.0)
            noisy = v + rng.normal(scale=NOISE / math.sqrt(dim), size=dim)
            return (noisy / np.linalg.norm(noisy)).astype(np.float32)

        def random_real() -> np.ndarray:
            if pool is None:
                return rng.normal(size=dim)
            return pool[rng.integers(len(pool))]

        items: dict[str, np.ndarray] = {}
        missing_units = 0
        for c in chunks:
            units = sentence_units(c.text)
            known = [unit_vec[u] for u in units if u in unit_vec]
            for u in units:
                if u not in unit_vec and cache.key(u) not in items:
                    items[cache.key(u)] = perturb(random_real())
                    missing_units += 1
            base_vec = np.mean(known, axis=0) if known else random_real()
            items[cache.key(passage_text(c.title, c.section, c.text))] = perturb(base_vec)
        pairs = list(items.items())
        for start in range(0, len(pairs), 5000):
            cache.put_many(pairs[start : start + 5000])
    finally:
        cache.close()
    return {
        "synthetic_chunks": len(chunks),
        "vectors_added": len(items),
        "sentences_without_real_vector": missing_units,
    }


def measure_ingest(paths: Sequence[str], data_dir: Path) -> dict[str, Any]:
    """Run the app's ingestion over ``paths`` in this process; its time, what it embedded, and peak RSS."""
    from ingest.indexer import ingest

    started = time.perf_counter()
    report = ingest(list(paths), _settings(data_dir))
    if not report.ok:
        raise SystemExit(f"ingestion failed: {json.dumps(report.to_json()['files'])[:2000]}")
    return {
        "chunks": report.index_chunks,
        "seconds": round(time.perf_counter() - started, 2),
        "timings_s": {k: round(v, 2) for k, v in report.timings.items()},
        "embedded": report.embedded,
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def build(
    base: Path,
    size: int,
    work: Path,
    *,
    step: int = STEP_CHUNKS,
    deadline: float | None = None,
    child: bool = True,
) -> dict[str, Any]:
    """The index of ``size`` chunks under ``work/<size>``, reused when built and resumed when a step is left.

    One ingestion per corpus file, each adding at most ``step`` chunks to the index (``step`` 0: one ingestion
    of everything). A step whose estimated time (the last step's seconds per chunk) would end after
    ``deadline`` (``time.monotonic()``) is left for the next run: the result then has ``"incomplete": True``.
    """
    folder = work / str(size)
    data_dir = folder / "data"
    corpus = folder / "corpus"
    done = folder / "build.json"
    progress_file = folder / "progress.json"
    if done.exists():
        return dict(json.loads(done.read_text()))
    if progress_file.exists():
        progress = json.loads(progress_file.read_text())
    else:
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        plan = plan_corpus(base, size, corpus, step=step)
        seeded = seed_vectors(base, data_dir, corpus)
        progress = {
            "size": size,
            **plan,
            **seeded,
            "prep_s": round(time.perf_counter() - t, 1),
            "step": step,
            "steps": [],
        }
        progress_file.write_text(json.dumps(progress, indent=1))
    names = list(progress["files"])  # real.jsonl, then synthetic-000.jsonl ...: the first step takes both
    groups = [names[:2], *([n] for n in names[2:])] if progress["step"] > 0 else [names]
    while len(progress["steps"]) < len(groups):
        k = len(progress["steps"])
        if progress["steps"] and deadline is not None:
            last = progress["steps"][-1]
            adding = sum(progress["files"][n] for n in groups[k])
            estimate = last["seconds"] / max(1, last["added_chunks"]) * adding
            if time.monotonic() + estimate > deadline:
                return {**progress, "incomplete": True, "next_step_estimate_s": round(estimate)}
        paths = [str(corpus / n) for g in groups[: k + 1] for n in g]
        if child:
            step_result = _child("ingest", paths=paths, data_dir=str(data_dir))
        else:
            step_result = measure_ingest(paths, data_dir)
        before = progress["steps"][-1]["chunks"] if progress["steps"] else 0
        progress["steps"].append({**step_result, "added_chunks": step_result["chunks"] - before})
        progress_file.write_text(json.dumps(progress, indent=1))
    steps = progress["steps"]
    result = {
        **progress,
        "ingest": {
            "chunks": steps[-1]["chunks"],
            "steps": len(steps),
            "seconds": round(sum(x["seconds"] for x in steps), 2),
            "embedded": sum(x["embedded"] for x in steps),
            "peak_rss_mb": max(x["peak_rss_mb"] for x in steps),
            "timings_s": steps[0]["timings_s"] if len(steps) == 1 else [x["timings_s"] for x in steps],
        },
    }
    done.write_text(json.dumps(result, indent=1))
    return result


# ----------------------------------------------------------------------------------------- querying
def scifact_claims(path: Path = SCIFACT / "queries.jsonl") -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]


def _e2e(result: Any) -> float:
    return sum(s.ms for s in result.stages if s.name not in EXCLUDED)


def measure_query(
    data_dir: Path,
    questions: Sequence[str],
    *,
    n_sequential: int,
    n_concurrent: int,
    clients: int,
    legs: int = 10,
) -> dict[str, Any]:
    """In this process: open the pipeline, time ``n_sequential`` questions stage by stage, then ``n_concurrent``
    further questions from ``clients`` threads sharing the pipeline; also each retrieval leg alone."""
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions, Question
    from rag.text import bm25_tokens
    from rag.types import Principal, SearchFilter

    if len(questions) < 1 + n_sequential + n_concurrent:
        raise SystemExit(f"need {1 + n_sequential + n_concurrent} distinct questions, have {len(questions)}")
    rss_start = _rss_mb()
    t = time.perf_counter()
    pipeline = build_pipeline(_settings(data_dir))
    open_s = time.perf_counter() - t
    principal = Principal("bench", frozenset())
    options = PipelineOptions(use_llm=False)
    pipeline.ask(Question(questions[0], principal), options)  # warm-up: first-call costs are not per-query
    rss_open = _rss_mb()

    seq = questions[1 : 1 + n_sequential]
    stages: dict[str, list[float]] = {}
    e2e, wall, candidates = [], [], []
    t0 = time.perf_counter()
    for q in seq:
        t = time.perf_counter()
        result = pipeline.ask(Question(q, principal), options)
        wall.append((time.perf_counter() - t) * 1000)
        for s in result.stages:
            stages.setdefault(s.name, []).append(s.ms)
        e2e.append(_e2e(result))
        candidates.append(len(result.candidates))
    sequential_s = time.perf_counter() - t0

    # each leg alone, on the first questions (their vectors are cached now, so the dense leg is the search only)
    filt = SearchFilter(principal, date.today())
    leg_ms: dict[str, list[float]] = {"lexical": [], "dense": []}
    settings = pipeline.settings
    for q in seq[:legs]:
        t = time.perf_counter()
        pipeline.reader.lexical.search(bm25_tokens(q), filt, settings.lexical_top_n)
        leg_ms["lexical"].append((time.perf_counter() - t) * 1000)
        vector = pipeline.query_vector(q)
        t = time.perf_counter()
        pipeline.reader.dense.search(vector, filt, settings.dense_top_n)
        leg_ms["dense"].append((time.perf_counter() - t) * 1000)

    conc = questions[1 + n_sequential : 1 + n_sequential + n_concurrent]
    lock = threading.Lock()
    conc_e2e: list[float] = []
    errors: list[str] = []

    def client(k: int) -> None:
        for q in conc[k::clients]:
            try:
                r = pipeline.ask(Question(q, principal), options)
            except Exception as exc:  # counted and reported: a shared pipeline must not fail under threads
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                conc_e2e.append(_e2e(r))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    concurrent_s = time.perf_counter() - t0
    n_chunks = len(pipeline.reader.generation.chunks)
    pipeline.reader.close()
    return {
        "chunks": n_chunks,
        "reranker": pipeline.reranker.name,
        "open_s": round(open_s, 2),
        "queries": len(seq),
        "candidates_mean": round(statistics.fmean(candidates), 1) if candidates else 0,
        "stages_ms": {name: percentiles(v) for name, v in stages.items()},
        "legs_ms": {name: percentiles(v) for name, v in leg_ms.items() if v},
        "end_to_end_ms_without_generator": percentiles(e2e),
        "wall_ms_with_extractive_generator": percentiles(wall),
        "sequential_qps": round(len(seq) / sequential_s, 2),
        "concurrent": {
            "clients": clients,
            "queries": len(conc),
            "answered": len(conc_e2e),
            "errors": len(errors),
            "error_examples": sorted(set(errors))[:3],
            "qps": round(len(conc_e2e) / concurrent_s, 2),
            "end_to_end_ms_without_generator": percentiles(conc_e2e) if conc_e2e else {},
        },
        "rss_mb": {
            "start": round(rss_start, 1),
            "after_open": round(rss_open, 1),
            "peak": round(_peak_rss_mb(), 1),
        },
        "torch_threads": _torch_threads(),
    }


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


class _Timed:
    """Delegates to ``inner``, adding the wall time and number of calls of the named methods (not thread-safe);
    ``log`` keeps each call's method name and arguments, so the same calls can be replayed in a tight loop."""

    def __init__(self, inner: Any, methods: Sequence[str]) -> None:
        self._inner = inner
        self._methods = frozenset(methods)
        self.ms = 0.0
        self.calls = 0
        self.log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._methods:
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.log.append((name, args, kwargs))
            t = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.ms += (time.perf_counter() - t) * 1000
                self.calls += 1

        return timed


def _replay(target: Any, log: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> float:
    """Milliseconds ``target`` takes to make the logged calls again, back to back."""
    t = time.perf_counter()
    for name, args, kwargs in log:
        getattr(target, name)(*args, **kwargs)
    return (time.perf_counter() - t) * 1000


def measure_floor(
    data_dir: Path,
    questions: Sequence[str],
    *,
    repeats: int,
    cross_encoder: Path | None,
    ce_queries: int = 3,
    rerank_with: Path | None = None,
) -> dict[str, Any]:
    """End to end vs the model work it cannot avoid, on the same questions: the query-embedding forward and the
    reranker scoring the pipeline's own first-retrieval candidates, each repeated in a tight loop (p50 per
    question). Also the model time inside each request (every embedder and reranker call ``ask`` made) and those
    same calls replayed in a tight loop: ``floor_all_calls``, the model forward time for exactly the pairs the
    request scored. ``rerank_with`` runs the pipeline with that cross-encoder folder as its reranker."""
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions, Question
    from rag.types import Principal

    overrides = (
        {"reranker": "cross-encoder", "reranker_path": str(rerank_with)} if rerank_with is not None else {}
    )
    pipeline = build_pipeline(_settings(data_dir, **overrides))
    embedder, reranker = pipeline.embedder, pipeline.reranker
    timed_embedder = _Timed(embedder, ("embed_queries", "embed_passages"))
    timed_reranker = _Timed(reranker, ("rerank",))
    pipeline.embedder, pipeline.reranker = timed_embedder, timed_reranker  # type: ignore[assignment]
    principal = Principal("bench", frozenset())
    options = PipelineOptions(use_llm=False)
    pipeline.ask(Question(questions[0], principal), options)
    rows = []
    cands_of: dict[str, list[Any]] = {}
    for q in questions[1:]:
        for timed in (timed_embedder, timed_reranker):
            timed.ms, timed.calls, timed.log = 0.0, 0, []
        result = pipeline.ask(Question(q, principal), options)
        inside = {
            "embed_ms": timed_embedder.ms,
            "embed_calls": timed_embedder.calls,
            "rerank_ms": timed_reranker.ms,
            "rerank_calls": timed_reranker.calls,
            "pairs": sum(len(args[1]) for _, args, _ in timed_reranker.log),
        }
        cands = [c for c in result.candidates if c.hop == 0]  # what the rerank stage scored (hops add more)
        cands_of[q] = cands
        embed, rerank, every = [], [], []
        for _ in range(repeats):
            t = time.perf_counter()
            embedder.embed_queries([q])
            embed.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            reranker.rerank(q, cands)
            rerank.append((time.perf_counter() - t) * 1000)
            every.append(_replay(embedder, timed_embedder.log) + _replay(reranker, timed_reranker.log))
        rows.append(
            {
                "e2e": _e2e(result),
                "embed": statistics.median(embed),
                "rerank": statistics.median(rerank),
                "every": statistics.median(every),
                "candidates": len(cands),
                **inside,
            }
        )
    e2e = statistics.median(r["e2e"] for r in rows)
    floor = statistics.median(r["embed"] + r["rerank"] for r in rows)
    floor_all = statistics.median(r["every"] for r in rows)
    ratio_all = statistics.median(r["e2e"] / r["every"] for r in rows if r["every"])
    model_inside = statistics.median(r["embed_ms"] + r["rerank_ms"] for r in rows)

    def p50(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 2)

    out: dict[str, Any] = {
        "chunks": len(pipeline.reader.generation.chunks),
        "queries": len(rows),
        "repeats": repeats,
        "reranker": reranker.name,
        "candidates_mean": round(statistics.fmean(r["candidates"] for r in rows), 1),
        "query_embedding_ms_p50": p50("embed"),
        "rerank_ms_p50": p50("rerank"),
        "floor_ms_p50": round(floor, 2),
        "end_to_end_ms_p50": round(e2e, 2),
        "ratio": round(e2e / floor, 2) if floor else None,
        "floor_all_calls_ms_p50": round(floor_all, 2),
        "ratio_to_all_calls": round(ratio_all, 3),  # median over questions of e2e / that question's replay
        "reranked_pairs_p50": p50("pairs"),
        "inside_request": {
            "embedder_calls_p50": p50("embed_calls"),
            "embedder_ms_p50": p50("embed_ms"),
            "reranker_calls_p50": p50("rerank_calls"),
            "reranker_ms_p50": p50("rerank_ms"),
            "model_ms_p50": round(model_inside, 2),
            "ratio_end_to_end_to_model": round(e2e / model_inside, 2) if model_inside else None,
        },
        "torch_threads": _torch_threads(),
    }
    if cross_encoder is not None:
        from rag.models.rerankers import CrossEncoderReranker

        def forty(cands: list[Any]) -> list[Any]:  # 40 pairs even when the index returned fewer candidates
            return [cands[i % len(cands)] for i in range(40)] if cands else []

        ce = CrossEncoderReranker(str(cross_encoder))
        asked = [q for q in cands_of if cands_of[q]][:ce_queries]
        ce.rerank(asked[0], forty(cands_of[asked[0]]))  # warm-up
        ms = []
        for q in asked:
            for _ in range(max(1, repeats // 2)):
                t = time.perf_counter()
                ce.rerank(q, forty(cands_of[q]))
                ms.append((time.perf_counter() - t) * 1000)
        out["cross_encoder_minilm_40_pairs_ms_p50"] = round(statistics.median(ms), 1)
        out["cross_encoder_samples"] = len(ms)
        ce_floor = out["query_embedding_ms_p50"] + out["cross_encoder_minilm_40_pairs_ms_p50"]
        out["floor_with_cross_encoder_ms_p50"] = round(ce_floor, 1)
    pipeline.reader.close()
    return out


# ----------------------------------------------------------------------------------------- stores alone, to 1M
STORE_TOKENS = 60  # BM25 tokens per synthetic chunk (SciFact's 100k corpus: ~100)
STORE_VOCAB = 200_000


def build_stores(size: int, folder: Path, *, seed: int = 0) -> dict[str, Any]:
    """One generation of ``size`` synthetic chunks written by the embedded writers themselves (the dense
    matrix, the BM25 files and token ids, the Qdrant Edge shard, the chunk file), without ingestion's reading,
    chunking and sentence vectors: what the store costs at sizes whose ingestion outgrows this machine's
    memory. Chunks get Zipf-distributed tokens (their text is the tokens), random unit vectors, and the
    access, validity and tag fields the filters read."""
    from rag.stores import GenerationBuild
    from rag.stores.bm25 import average_length
    from rag.stores.edge import EdgeWriter
    from rag.stores.index import Manifest, save_chunks
    from rag.stores.memory import Bm25Writer, MatrixWriter
    from rag.types import Chunk

    shutil.rmtree(folder, ignore_errors=True)
    gen = folder / "index" / "generations" / "gen-000001"
    gen.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    ranks = np.minimum(rng.zipf(1.3, size=size * STORE_TOKENS), STORE_VOCAB).astype(np.int64) - 1
    terms = [f"t{i}" for i in range(STORE_VOCAB)]
    tokens = [
        [terms[j] for j in ranks[i * STORE_TOKENS : (i + 1) * STORE_TOKENS].tolist()] for i in range(size)
    ]
    del ranks
    groups = (("staff",), ("staff",), ("hr",), ("*",))
    chunks = [
        Chunk(
            chunk_id=f"{i:024x}",
            doc_id=f"doc-{i // 4:07d}",
            text=" ".join(tokens[i]),
            source=f"/synthetic/doc-{i // 4:07d}.md",
            title=f"Synthetic document {i // 4}",
            ordinal=i % 4,
            groups=groups[i % 4],
            expires=date(2020, 1, 1) if i % 50 == 0 else None,
            tags=("emea",) if i % 10 == 0 else (),
            doc_version="v1",
            n_tokens=STORE_TOKENS,
        )
        for i in range(size)
    ]
    dim = 384
    matrix = np.empty((size, dim), dtype=np.float32)
    for start in range(0, size, 100_000):
        block = rng.normal(size=(min(size, start + 100_000) - start, dim)).astype(np.float32)
        matrix[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    prepared_s = time.perf_counter() - t
    build = GenerationBuild(
        name="gen-000001",
        folder=gen,
        chunks=chunks,
        tokens=tokens,
        dim=dim,
        fresh=[],
        dropped=[],
        all_vectors=lambda: matrix,
    )
    seconds: dict[str, float] = {}
    for name, writer in (
        ("dense_matrix", MatrixWriter()),
        ("bm25", Bm25Writer()),
        ("edge_shard", EdgeWriter(lambda _: gen)),
    ):
        t = time.perf_counter()
        writer.write(build)
        seconds[name] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    save_chunks(gen, chunks)
    documents: dict[str, dict[str, Any]] = {}
    for c in chunks:
        documents.setdefault(c.doc_id, {"title": c.title, "chunk_ids": []})["chunk_ids"].append(c.chunk_id)
    manifest = Manifest("gen-000001", "", "synthetic", dim, documents, {}, bm25_avgdl=average_length(tokens))
    (gen / "manifest.json").write_text(manifest.to_json())
    (folder / "index" / "CURRENT").write_text("gen-000001\n")
    seconds["chunks_manifest"] = round(time.perf_counter() - t, 1)
    disk = {p.name: round(_disk_mb(p), 1) for p in sorted(gen.iterdir())}
    return {
        "chunks": size,
        "prepare_s": round(prepared_s, 1),
        "write_s": seconds,
        "write_total_s": round(sum(seconds.values()), 1),
        "disk_mb": disk,
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def _disk_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def measure_stores(data_dir: Path, *, queries: int = 30, seed: int = 1) -> dict[str, Any]:
    """Open the generation with each embedded backend (in this process) and time each leg alone and the
    in-store hybrid call, under a filter; RSS after opening and after the queries."""
    from rag.stores import LegsQuery
    from rag.stores.index import EmbeddedBackend, IndexReader
    from rag.types import Principal, SearchFilter

    rng = np.random.default_rng(seed)
    filt = SearchFilter(Principal("bench", frozenset({"staff"})), date(2026, 6, 1), frozenset({"emea"}))
    vectors = rng.normal(size=(queries, 384)).astype(np.float32)
    words = [[f"t{int(j)}" for j in rng.integers(1, 3000, size=6)] for _ in range(queries)]
    out: dict[str, Any] = {"rss_mb": {"start": round(_rss_mb(), 1)}}
    t = time.perf_counter()
    reader = IndexReader(data_dir, EmbeddedBackend("bm25"))
    out["open_s"] = round(time.perf_counter() - t, 2)
    out["rss_mb"]["after_open"] = round(_rss_mb(), 1)
    legs: dict[str, list[float]] = {"bm25": [], "dense_matrix": []}
    for v, w in zip(vectors, words, strict=True):
        t = time.perf_counter()
        reader.lexical.search(w, filt, 40)
        legs["bm25"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        reader.dense.search(v, filt, 40)
        legs["dense_matrix"].append((time.perf_counter() - t) * 1000)
    out["rss_mb"]["after_queries"] = round(_rss_mb(), 1)
    t = time.perf_counter()
    edge = IndexReader(data_dir, EmbeddedBackend("qdrant"))
    out["edge_open_s"] = round(time.perf_counter() - t, 2)
    legs.update({"edge_sparse": [], "edge_dense": [], "edge_hybrid": []})
    for v, w in zip(vectors, words, strict=True):
        t = time.perf_counter()
        edge.lexical.search(w, filt, 40)
        legs["edge_sparse"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        edge.dense.search(v, filt, 40)
        legs["edge_dense"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        edge.search(LegsQuery(w, v, filt, n_lexical=40, n_dense=40, rrf_k=60))
        legs["edge_hybrid"].append((time.perf_counter() - t) * 1000)
    out["rss_mb"]["with_both_open"] = round(_rss_mb(), 1)
    out["legs_ms"] = {name: percentiles(ms) for name, ms in legs.items()}
    out["chunks"] = len(reader.generation.chunks)
    edge.close()
    reader.close()
    out["rss_mb"]["peak"] = round(_peak_rss_mb(), 1)
    return out


# ----------------------------------------------------------------------------------------- processes, results
def _child(task: str, **kwargs: Any) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (its own peak RSS); its last stdout line is the JSON result."""
    cmd = [sys.executable, "-m", "benchmarks.scaling", "_child", task, json.dumps(kwargs)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{task} child failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_child(task: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    if task == "ingest":
        return measure_ingest(kwargs["paths"], Path(kwargs["data_dir"]))
    if task == "query":
        return measure_query(
            Path(kwargs["data_dir"]),
            scifact_claims(Path(kwargs["questions"])),
            n_sequential=kwargs["n_sequential"],
            n_concurrent=kwargs["n_concurrent"],
            clients=kwargs["clients"],
        )
    if task == "build_stores":
        return build_stores(kwargs["size"], Path(kwargs["folder"]))
    if task == "stores":
        return measure_stores(Path(kwargs["data_dir"]))
    if task == "floor":
        ce = kwargs.get("cross_encoder")
        return measure_floor(
            Path(kwargs["data_dir"]),
            scifact_claims(Path(kwargs["questions"]))[: kwargs["queries"] + 1],
            repeats=kwargs["repeats"],
            cross_encoder=Path(ce) if ce else None,
            rerank_with=Path(kwargs["rerank_with"]) if kwargs.get("rerank_with") else None,
        )
    raise SystemExit(f"unknown child task {task!r}")


def _machine() -> dict[str, Any]:
    return {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _save(work: Path, section: str, key: str, value: dict[str, Any]) -> None:
    path = work / "results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault(section, {})[key] = {**value, **_machine()}
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def report(work: Path) -> str:
    """Markdown tables from ``work/results.json``."""
    data = json.loads((work / "results.json").read_text())
    lines = []
    builds = data.get("build", {})
    queries = data.get("query", {})
    sizes = sorted({int(k) for k in (*builds, *queries)})
    if queries:
        names = [
            n for n in dict.fromkeys(n for k in queries for n in queries[k]["stages_ms"]) if n not in EXCLUDED
        ]
        lines += [
            "| stage | "
            + " | ".join(f"{s:,} chunks p50 / p95 ms" for s in sizes if str(s) in queries)
            + " |",
            "|---|" + "---:|" * sum(str(s) in queries for s in sizes),
        ]
        for name in [*names, "end to end (no generator)", "lexical leg alone", "dense leg alone"]:
            cells = []
            for s in sizes:
                q = queries.get(str(s))
                if q is None:
                    continue
                p = (
                    q["end_to_end_ms_without_generator"]
                    if name.startswith("end to end")
                    else q["legs_ms"].get(name.split()[0])
                    if name.endswith("alone")
                    else q["stages_ms"].get(name)
                )
                cells.append(f"{p['p50']} / {p['p95']}" if p else "")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "| chunks | queries/s, 1 client | queries/s, N clients | failed asks | e2e p50 ms under N clients "
            "| pipeline open s | query RSS after open MB | query peak RSS MB |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in sizes:
            q = queries.get(str(s))
            if q:
                c = q["concurrent"]
                lines.append(
                    f"| {s:,} | {q['sequential_qps']} | {c['qps']} ({c['clients']}) "
                    f"| {c.get('errors', 0)} of {c['queries']} "
                    f"| {c['end_to_end_ms_without_generator'].get('p50', '')} "
                    f"| {q['open_s']} | {q['rss_mb']['after_open']} | {q['rss_mb']['peak']} |"
                )
    if builds:
        lines += [
            "",
            "| chunks | real / synthetic documents | ingestions | ingestion s (no embedding) | embedded "
            "| ingestion peak RSS MB | stage seconds |",
            "|---:|---|---:|---:|---:|---:|---|",
        ]
        for s in sizes:
            b = builds.get(str(s))
            if b:
                i = b["ingest"]
                lines.append(
                    f"| {i['chunks']:,} | {b['real_documents']:,} / {b['synthetic_documents']:,} "
                    f"| {i.get('steps', 1)} | {i['seconds']} | {i['embedded']} | {i['peak_rss_mb']} "
                    f"| {i['timings_s']} |"
                )
    stores = data.get("stores", {})
    if stores:
        legs = ("bm25", "dense_matrix", "edge_sparse", "edge_dense", "edge_hybrid")
        lines += [
            "",
            "| chunks | write s (matrix / BM25 / Edge / chunks) | write peak RSS MB | disk MB (dense.npy / edge / BM25+tokens / chunks) "
            "| open s (bm25 / Edge) | RSS after open / after queries MB | "
            + " | ".join(f"{leg} p50 / p95 ms" for leg in legs)
            + " |",
            "|---:|---|---:|---|---|---|" + "---:|" * len(legs),
        ]
        for size in sorted(stores, key=int):
            r = stores[size]
            w, d = r["write_s"], r["disk_mb"]
            lexical = sum(v for k, v in d.items() if k.startswith(("bm25", "token")))
            lines.append(
                f"| {int(size):,} | {w['dense_matrix']} / {w['bm25']} / {w['edge_shard']} / {w['chunks_manifest']} "
                f"| {r['peak_rss_mb']} | {d.get('dense.npy')} / {d.get('edge')} / {round(lexical, 1)} / {d.get('chunks.pkl')} "
                f"| {r['open_s']} / {r['edge_open_s']} | {r['rss_mb']['after_open']} / {r['rss_mb']['after_queries']} | "
                + " | ".join(f"{r['legs_ms'][leg]['p50']} / {r['legs_ms'][leg]['p95']}" for leg in legs)
                + " |"
            )
    for f in data.get("floor", {}).values():
        lines += [
            "",
            f"Floor at {f['chunks']:,} chunks ({f['queries']} questions, {f['repeats']} repeats): "
            f"query embedding {f['query_embedding_ms_p50']} ms + {f['reranker']} on {f['candidates_mean']} "
            f"candidates {f['rerank_ms_p50']} ms = {f['floor_ms_p50']} ms; end to end {f['end_to_end_ms_p50']} ms; "
            f"ratio {f['ratio']}x",
        ]
        if "floor_all_calls_ms_p50" in f:
            lines.append(
                f"Every model call of the request replayed in a tight loop ({f['reranked_pairs_p50']} reranked "
                f"pairs p50): {f['floor_all_calls_ms_p50']} ms; end to end / that, per question, p50 "
                f"{f['ratio_to_all_calls']}x"
            )
        i = f.get("inside_request")
        if i:
            lines.append(
                f"Inside each request (p50): {i['embedder_calls_p50']} embedder calls {i['embedder_ms_p50']} ms, "
                f"{i['reranker_calls_p50']} reranker calls {i['reranker_ms_p50']} ms; end to end / model time "
                f"{i['ratio_end_to_end_to_model']}x"
            )
        if "cross_encoder_minilm_40_pairs_ms_p50" in f:
            lines.append(f"MiniLM-L6 cross-encoder, 40 pairs: {f['cross_encoder_minilm_40_pairs_ms_p50']} ms")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser(
        "build", help="Build (or reuse) the index of each size; ingestion time and peak RSS."
    )
    p_build.add_argument("--base", type=Path, required=True, help="Data directory with SciFact ingested.")
    p_build.add_argument(
        "--step",
        type=int,
        default=STEP_CHUNKS,
        help="Build in ingestions of at most this many chunks each (default 0: one cold ingestion).",
    )
    p_build.add_argument(
        "--budget-min",
        type=float,
        default=BUDGET_S / 60,
        help="Stop before a step that would end later than this (0: no limit); rerun to resume.",
    )
    p_query = sub.add_parser(
        "query", help="Per-stage latency, throughput and query-process RSS at each size."
    )
    p_query.add_argument("--queries", type=int, default=40, help="Sequential questions per size.")
    p_query.add_argument("--concurrent-queries", type=int, default=40)
    p_query.add_argument("--clients", type=int, default=4)
    p_floor = sub.add_parser("floor", help="End to end vs the model-forward floor, at one size.")
    p_floor.add_argument("--size", type=int, default=10000)
    p_floor.add_argument("--queries", type=int, default=20)
    p_floor.add_argument("--repeats", type=int, default=5)
    p_floor.add_argument(
        "--no-cross-encoder", action="store_true", help="Skip the MiniLM cross-encoder reference."
    )
    p_floor.add_argument(
        "--rerank-with-cross-encoder",
        action="store_true",
        help="Run the pipeline itself with the MiniLM-L6-sized cross-encoder as its reranker "
        "(random head: latency only) and compare it with that model's forward time.",
    )
    p_stores = sub.add_parser(
        "stores",
        help="The embedded stores alone at each size (to 1M): write time, disk, open, RSS, each leg's latency.",
    )
    p_stores.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    sub.add_parser("report", help="Print the Markdown tables of WORK/results.json.")
    for p in (p_build, p_query):
        p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    for p in (p_build, p_query, p_floor, p_stores, sub.choices["report"]):
        p.add_argument("--work", type=Path, default=DEFAULT_WORK, help="Where indexes and results.json live.")
    for p in (p_query, p_floor):
        p.add_argument("--questions", type=Path, default=SCIFACT / "queries.jsonl", help="BEIR queries.jsonl")
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "_child":
        print(json.dumps(_run_child(sys.argv[2], json.loads(sys.argv[3]))))
        return
    args = parser.parse_args(argv)
    from rag.config import library_defaults

    library_defaults({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"})
    if args.command == "build":
        deadline = time.monotonic() + args.budget_min * 60 if args.budget_min > 0 else None
        rate = None  # seconds per chunk of the last size built by this command
        for size in args.sizes:
            fresh = not (args.work / str(size) / "build.json").exists()
            if fresh and rate and deadline is not None and time.monotonic() + rate * size > deadline:
                print(
                    f"{size:,} chunks: building would take ~{rate * size / 60:.0f} min, past --budget-min: "
                    "run the same command again (built sizes are reused).",
                    flush=True,
                )
                return
            t = time.monotonic()
            result = build(args.base, size, args.work, step=args.step, deadline=deadline)
            if fresh:  # a reused build keeps the figures (and the machine load) recorded when it was built
                rate = (time.monotonic() - t) / size
            if result.get("incomplete"):
                print(
                    f"{size:,} chunks: {len(result['steps'])} of {max(1, len(result['files']) - 1)} ingestions done; "
                    f"the next (~{result['next_step_estimate_s']} s) would overrun --budget-min: run the same "
                    "command again to continue.",
                    flush=True,
                )
                return
            if fresh:
                _save(args.work, "build", str(size), result)
            print(json.dumps(result), flush=True)
    elif args.command == "query":
        for size in args.sizes:
            result = _child(
                "query",
                data_dir=str(args.work / str(size) / "data"),
                questions=str(args.questions),
                n_sequential=args.queries,
                n_concurrent=args.concurrent_queries,
                clients=args.clients,
            )
            _save(args.work, "query", str(size), result)
            print(json.dumps(result), flush=True)
    elif args.command == "stores":
        for size in args.sizes:
            folder = args.work / f"stores-{size}"
            written = _child("build_stores", size=size, folder=str(folder))
            measured = _child("stores", data_dir=str(folder))
            result = {**written, **measured}
            _save(args.work, "stores", str(size), result)
            print(json.dumps(result), flush=True)
    elif args.command == "floor":
        ce = None
        if not args.no_cross_encoder or args.rerank_with_cross_encoder:
            from evaluation.rerankers import _minilm_cross_encoder

            ce = str(_minilm_cross_encoder(args.work / "minilm-l6-cross-encoder-random-head"))
        result = _child(
            "floor",
            data_dir=str(args.work / str(args.size) / "data"),
            questions=str(args.questions),
            queries=args.queries,
            repeats=args.repeats,
            cross_encoder=None if args.rerank_with_cross_encoder or args.no_cross_encoder else ce,
            rerank_with=ce if args.rerank_with_cross_encoder else None,
        )
        key = f"{args.size}-cross-encoder" if args.rerank_with_cross_encoder else str(args.size)
        _save(args.work, "floor", key, result)
        print(json.dumps(result), flush=True)
    print(report(args.work))


if __name__ == "__main__":
    main()
