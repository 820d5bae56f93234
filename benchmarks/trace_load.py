"""Load test for the trace store: N processes x M trace writes at once, on SQLite and on PostgreSQL.

    python benchmarks/trace_load.py                                  # SQLite (temporary file) only
    python benchmarks/trace_load.py --postgres "$(scripts/postgres.sh)" --json
    python benchmarks/trace_load.py --processes 8 --writes 500 --sqlite /tmp/load.sqlite

Every process writes realistic traces (20 candidates, 6 evidence passages, chunk snapshots drawn partly from a
pool all processes share) as fast as it can, all starting together. Reported: rows written (must equal rows
attempted), errors (must be 0), write latency percentiles and throughput. Exit status 1 when a row is missing
or a write failed. PostgreSQL runs in a throwaway schema, dropped afterwards unless --keep.

Not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SHARED_CHUNKS = 400  # chunk ids every process draws from: concurrent insert-if-absent on the same snapshots


def _chunk(doc: int, ordinal: int, version: str = "v1") -> dict[str, Any]:
    text = f"Policy {doc}, clause {ordinal}: " + " ".join(
        f"employees may claim item {ordinal}.{i} within {i + 3} days of travel." for i in range(9)
    )
    return {
        "chunk_id": hashlib.sha256(f"policy-{doc}\x000\x00{text}".encode()).hexdigest()[:24],
        "doc_id": f"policy-{doc}",
        "source": f"policies/policy-{doc}.pdf",
        "title": f"Policy {doc}",
        "page": ordinal // 3 + 1,
        "page_end": ordinal // 3 + 1,
        "section": f"Policy {doc} > Section {ordinal // 5}",
        "text": text,
        "doc_version": version,
    }


def make_trace(worker: int, i: int, rng: random.Random) -> dict[str, Any]:
    chunks = [_chunk(rng.randrange(20), rng.randrange(SHARED_CHUNKS // 20)) for _ in range(14)]
    chunks += [_chunk(1000 + worker, i * 6 + k, version=f"w{worker}") for k in range(6)]  # never seen before
    chunks = list({c["chunk_id"]: c for c in chunks}.values())
    candidates = []
    for rank, c in enumerate(chunks):
        candidates.append(
            {
                **c,
                "rerank_rank": rank,
                "rerank_score": 1.0 - rank / 25,
                "bm25_rank": rank + 1,
                "bm25_score": 15.0 - rank / 3,
                "dense_rank": (rank * 7) % len(chunks) + 1,
                "dense_score": rng.random(),
                "fused_score": 1 / (61 + rank),
                "fused_rank": rank + 1,
                "hop": 0,
                "added_by": None,
                "intents": [0],
            }
        )
    evidence = [
        {"n": n, **{k: v for k, v in c.items() if k != "intents"}, "bundle": n - 1, "cited": n <= 2}
        for n, c in enumerate(candidates[:6], start=1)
    ]
    question = f"Worker {worker} question {i}: how long do I have to file a travel claim?"
    timings = {
        "retrieve": rng.uniform(5, 30),
        "rerank": rng.uniform(20, 90),
        "generate": rng.uniform(300, 2000),
    }
    timings["total"] = sum(timings.values())
    return {
        "trace_id": uuid.uuid4().hex,
        "created_at": datetime.now(UTC).isoformat(),
        "question": question,
        "user": f"user{worker}",
        "groups": ["staff"],
        "as_of": "2025-03-01",
        "tags": [],
        "session_id": None,
        "answer": "You have 30 days to file a travel claim [1][2].",
        "abstained": False,
        "abstain_reason": None,
        "intents": [{"index": 0, "text": question}],
        "citations": [
            {
                "n": n,
                "chunk_id": evidence[n - 1]["chunk_id"],
                "valid": True,
                "supported": True,
                "sentence": "You have 30 days.",
                "support_score": 0.8,
            }
            for n in (1, 2)
        ],
        "evidence": evidence,
        "candidates": candidates,
        "dropped": [{"chunk_id": candidates[-1]["chunk_id"], "reason": "over_budget", "stage": "pack"}],
        "bundles": [
            {"bundle_id": n - 1, "chunk_ids": [e["chunk_id"]], "reason": "single", "score": e["rerank_score"]}
            for n, e in enumerate(evidence, start=1)
        ],
        "hops": [],
        "budgets": {"evidence_tokens": 1800, "used": 1500},
        "prompt": {
            "system": "Answer from the evidence only.",
            "user": "\n\n".join(e["text"] for e in evidence),
            "tokens": 1500,
        },
        "model": "qwen2.5-1.5b-instruct",
        "reranker": "cross-encoder",
        "packing": "edges",
        "generation_mode": "standard",
        "tokens": {"prompt": 1500, "completion": 40, "evidence": 1400, "history": 0},
        "timings_ms": timings,
        "stages": [{"name": k, "ms": v, "detail": {}} for k, v in timings.items() if k != "total"],
        "error": None,
    }


def worker_main(url: str, worker: int, writes: int, barrier: Any, results: Any) -> None:
    from rag.tracestore import TraceStore

    rng = random.Random(worker)
    traces = [make_trace(worker, i, rng) for i in range(writes)]
    store = TraceStore(url)
    store.traces.list(limit=1)  # connect and check the schema before the clock starts
    latencies: list[float] = []
    errors: list[str] = []
    barrier.wait()
    started = time.perf_counter()
    for trace in traces:
        t0 = time.perf_counter()
        try:
            store.traces.save(trace)
        except Exception as exc:  # counted and reported, not raised: the run must finish
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
        latencies.append((time.perf_counter() - t0) * 1000)
    finished = time.perf_counter()
    # One trace per worker read back, to check what was stored is what was written.
    sample = json.loads(json.dumps(traces[len(traces) // 2]))
    try:
        verified = store.traces.get(sample["trace_id"]) == sample
    except Exception:
        verified = False
    store.close()
    results.put(
        {
            "worker": worker,
            "latencies": latencies,
            "errors": errors,
            "started": started,
            "finished": finished,
            "verified": verified,
        }
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def run(backend: str, url: str, processes: int, writes: int) -> dict[str, Any]:
    from rag.tracestore import TraceStore, upgrade
    from rag.tracestore.db import display_url

    upgrade(url)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker_main, args=(url, w, writes, barrier, results)) for w in range(processes)
    ]
    for proc in procs:
        proc.start()
    reports = [results.get(timeout=1800) for _ in procs]
    for proc in procs:
        proc.join()
    latencies = [ms for r in reports for ms in r["latencies"]]
    errors = [e for r in reports for e in r["errors"]]
    wall = max(r["finished"] for r in reports) - min(r["started"] for r in reports)
    with TraceStore(url) as store:
        written = store.traces.count()
    attempted = processes * writes
    return {
        "backend": backend,
        "url": display_url(url),
        "processes": processes,
        "writes_per_process": writes,
        "attempted": attempted,
        "written": written,
        "errors": len(errors),
        "error_samples": errors[:5],
        "crashed_workers": sum(p.exitcode != 0 for p in procs),
        "read_back_equal": all(r["verified"] for r in reports),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies), 2),
        "mean_ms": round(statistics.fmean(latencies), 2),
        "wall_s": round(wall, 2),
        "writes_per_s": round(attempted / wall, 1),
        "ok": written == attempted and not errors and all(r["verified"] for r in reports),
    }


def postgres_schema(base_url: str) -> tuple[str, str]:
    """A fresh schema on the server; returns (schema, URL whose connections use it)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from rag.tracestore.db import resolve_url

    base_url = resolve_url(base_url)
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    engine = create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return schema, url.render_as_string(hide_password=False)


def drop_schema(base_url: str, schema: str) -> None:
    from sqlalchemy import create_engine, text

    from rag.tracestore.db import resolve_url

    engine = create_engine(resolve_url(base_url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Trace store load test")
    columns = (
        ("backend", "backend"),
        ("processes", "procs"),
        ("writes_per_process", "writes/proc"),
        ("attempted", "attempted"),
        ("written", "written"),
        ("errors", "errors"),
        ("p50_ms", "p50 ms"),
        ("p95_ms", "p95 ms"),
        ("p99_ms", "p99 ms"),
        ("max_ms", "max ms"),
        ("writes_per_s", "writes/s"),
        ("read_back_equal", "read back"),
    )
    for _, header in columns:
        table.add_column(header, justify="left" if header == "backend" else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(str(row[key]) for key, _ in columns))
    console = Console()
    console.print(table)
    for row in rows:
        for sample in row["error_samples"]:
            console.print(f"[red]{row['backend']} error:[/red] {sample}")


def main(argv: list[str] | None = None) -> int:
    from rag.config import load_settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--writes", type=int, default=500, help="Trace writes per process.")
    parser.add_argument(
        "--sqlite", default="auto", help="SQLite file to use ('auto': a temporary file; 'skip')."
    )
    parser.add_argument(
        "--postgres",
        default=load_settings().test_postgres_url,
        help="PostgreSQL URL (default: $RAG_TEST_POSTGRES_URL; unset: skip PostgreSQL).",
    )
    parser.add_argument("--keep", action="store_true", help="Keep the PostgreSQL schema / SQLite file.")
    parser.add_argument("--json", action="store_true", help="Print results as JSON.")
    args = parser.parse_args(argv)

    rows = []
    if args.sqlite != "skip":
        with tempfile.TemporaryDirectory(prefix="trace-load-") as tmp:
            path = Path(tmp) / "traces.sqlite" if args.sqlite == "auto" else Path(args.sqlite)
            if path.exists() and not args.keep:
                sys.exit(f"{path} exists; pass another --sqlite path (or --keep to add to it)")
            rows.append(run("sqlite", f"sqlite:///{path.resolve()}", args.processes, args.writes))
    if args.postgres:
        schema, url = postgres_schema(args.postgres)
        try:
            rows.append(run("postgresql", url, args.processes, args.writes))
        finally:
            if not args.keep:
                drop_schema(args.postgres, schema)

    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows)
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
