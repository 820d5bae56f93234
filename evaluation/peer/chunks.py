"""``--mode chunks``: the peer fed our chunks, on SciFact (nDCG@10) and the dev questions (evidence recall)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from evaluation.peer.common import Log
from evaluation.peer.measure import latency_block, ndcg_at_10, paired_ci, side_by_side
from evaluation.peer.systems import Answer, Ours, Peer, ingest_ours, our_vectors

# ---------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SciFactQuery:
    qid: str
    text: str
    relevant: frozenset[str]


def scifact_queries(root: Path, limit: int | None) -> list[SciFactQuery]:
    """The held-out half of the train-qrels queries (the reranker never trained on them), by query id."""
    from evaluation.opendata import heldout

    texts = {}
    for line in (root / "queries.jsonl").read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            texts[str(d["_id"])] = d["text"]
    rel: dict[str, set[str]] = {}
    lines = (root / "qrels" / "train.tsv").read_text().splitlines()
    for line in lines[1:]:
        qid, pid, score = line.split("\t")
        if int(score) > 0:
            rel.setdefault(qid, set()).add(pid)
    queries = [
        SciFactQuery(q, texts[q], frozenset(p))
        for q, p in sorted(rel.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else kv[0])
        if heldout(q)
    ]
    return queries[:limit] if limit else queries


def scifact_corpus(root: Path, queries: Sequence[SciFactQuery], docs: int | None, work_dir: Path) -> Path:
    """The corpus file to index: the full corpus, or (``docs``) the queries' relevant documents plus the first
    others in corpus order up to ``docs`` in all (a smaller, easier corpus: numbers are not comparable to full)."""
    corpus = root / "corpus.jsonl"
    if not docs:
        return corpus
    keep = {p for q in queries for p in q.relevant}
    lines = [line for line in corpus.read_text().splitlines() if line.strip()]
    chosen = [line for line in lines if str(json.loads(line)["_id"]) in keep]
    for line in lines:
        if len(chosen) >= docs:
            break
        if str(json.loads(line)["_id"]) not in keep:
            chosen.append(line)
    path = work_dir / f"scifact-corpus-{docs}" / "corpus.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(chosen) + "\n"
    if not path.exists() or path.read_text() != text:  # rewriting an unchanged file would re-ingest it
        path.write_text(text)
    return path


def run_scifact(
    root: Path,
    work_dir: Path,
    *,
    limit: int | None,
    docs: int | None,
    peer_threads: Sequence[int | None],
    peer_vectors: str,
    log: Log,
) -> dict[str, Any]:
    from rag.config import default_settings
    from rag.models.embedder import resolve_model_dir

    s = default_settings()
    queries = scifact_queries(root, limit)
    corpus = scifact_corpus(root, queries, docs, work_dir)
    data_dir = work_dir / (f"scifact-{docs}" if docs else "scifact")
    ours_indexing = ingest_ours([str(corpus)], data_dir, log)
    ours = Ours(data_dir)
    chunks = ours.chunks()
    peer = Peer(
        chunks,
        model_dir=resolve_model_dir(s.embedding_model),
        cache_dir=work_dir / "haystack-cache",
        top_n=s.lexical_top_n,
        evidence_k=s.evidence_k,
        vectors=our_vectors(data_dir, chunks) if peer_vectors == "ours" else None,
        log=log,
    )
    log(f"scifact: {len(queries)} held-out queries over {len(chunks)} chunks of {corpus}")
    mine, theirs, ms = side_by_side(ours, peer, [q.text for q in queries], peer_threads=peer_threads, log=log)
    ours_ndcg = [ndcg_at_10(a.ranked_docs, q.relevant) for a, q in zip(mine, queries, strict=True)]
    peer_ndcg = [ndcg_at_10(a.ranked_docs, q.relevant) for a, q in zip(theirs, queries, strict=True)]
    ours_mean, peer_mean = float(np.mean(ours_ndcg)), float(np.mean(peer_ndcg))
    return {
        "corpus": str(corpus),
        "full_corpus": not docs,
        "queries": len(queries),
        "chunks": len(chunks),
        "reranker": ours.reranker,
        "indexing": {"ours": ours_indexing, "haystack": peer.indexing},
        "quality": {
            "metric": "nDCG@10 (documents by best chunk)",
            "ours": round(ours_mean, 4),
            "haystack": round(peer_mean, 4),
            "ratio_ours_over_theirs": round(ours_mean / peer_mean, 3) if peer_mean else None,
            "delta": round(ours_mean - peer_mean, 4),
            "delta_ci95": paired_ci(ours_ndcg, peer_ndcg),
        },
        "latency": latency_block(ms, mine),
    }


def run_dev(
    questions_path: Path,
    corpus: Sequence[Path],
    work_dir: Path,
    grader: ModuleType,
    *,
    peer_threads: Sequence[int | None],
    peer_vectors: str,
    cross_encoder_queries: int,
    log: Log,
) -> dict[str, Any]:
    from rag.config import default_settings
    from rag.models.embedder import resolve_model_dir
    from rag.text import count_tokens

    s = default_settings()
    questions = [json.loads(line) for line in questions_path.read_text().splitlines() if line.strip()]
    data_dir = work_dir / "dev"
    ours_indexing = ingest_ours([str(p) for p in corpus], data_dir, log)
    ours = Ours(data_dir)
    chunks = ours.chunks()
    model_dir = resolve_model_dir(s.embedding_model)
    cache_dir = work_dir / "haystack-cache"
    peer = Peer(
        chunks,
        model_dir=model_dir,
        cache_dir=cache_dir,
        top_n=s.lexical_top_n,
        evidence_k=s.evidence_k,
        vectors=our_vectors(data_dir, chunks) if peer_vectors == "ours" else None,
        log=log,
    )
    log(f"dev: {len(questions)} questions over {len(chunks)} chunks")
    mine, theirs, ms = side_by_side(
        ours, peer, [q["question"] for q in questions], peer_threads=peer_threads, log=log
    )

    out_dir = work_dir / "graded"
    out_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[int]] = {"ours": [], "haystack": []}
    by_type: dict[str, dict[str, list[int]]] = {}
    per_question = []
    for side, answers in (("ours", mine), ("haystack", theirs)):
        with open(out_dir / f"dev-{side}.jsonl", "w") as fh:  # for ../shared/tools/grade_evidence.py as is
            for q, a in zip(questions, answers, strict=True):
                fh.write(json.dumps({"id": q["id"], **a.record}) + "\n")
    for q, a, b in zip(questions, mine, theirs, strict=True):
        if q["type"] == "unanswerable":
            continue
        row = {"id": q["id"], "type": q["type"]}
        for side, ans in (("ours", a), ("haystack", b)):
            texts = [t for _, t in ans.evidence]
            ok = int(all(grader.covered(g["quote"], texts) for g in q["evidence"]))
            found[side].append(ok)
            by_type.setdefault(q["type"], {"ours": [], "haystack": []})[side].append(ok)
            row[side] = ok
        per_question.append(row)

    def evidence_size(answers: Sequence[Answer]) -> dict[str, float]:
        return {
            "chunks": round(float(np.mean([len(a.evidence) for a in answers])), 2),
            "tokens": round(
                float(np.mean([sum(count_tokens(t) for _, t in a.evidence) for a in answers])), 1
            ),
        }

    ours_recall = float(np.mean(found["ours"])) if found["ours"] else float("nan")
    peer_recall = float(np.mean(found["haystack"])) if found["haystack"] else float("nan")
    unanswerable = [a for q, a in zip(questions, mine, strict=True) if q["type"] == "unanswerable"]
    result: dict[str, Any] = {
        "questions": len(questions),
        "answerable": len(found["ours"]),
        "chunks": len(chunks),
        "reranker": ours.reranker,
        "indexing": {"ours": ours_indexing, "haystack": peer.indexing},
        "quality": {
            "metric": "evidence recall (every gold quote covered by the final evidence; grade_evidence.covered)",
            "ours": round(ours_recall, 4),
            "haystack": round(peer_recall, 4),
            "ours_found": f"{sum(found['ours'])}/{len(found['ours'])}",
            "haystack_found": f"{sum(found['haystack'])}/{len(found['haystack'])}",
            "ratio_ours_over_theirs": round(ours_recall / peer_recall, 3) if peer_recall else None,
            "delta_ci95": paired_ci(found["ours"], found["haystack"]),
            "by_type": {
                t: {k: f"{sum(v)}/{len(v)}" for k, v in d.items()} for t, d in sorted(by_type.items())
            },
            "ours_abstained_on_unanswerable": f"{sum(a.record.get('abstained', False) for a in unanswerable)}/"
            f"{len(unanswerable)} (the peer has no abstention)",
        },
        "evidence_size": {"ours": evidence_size(mine), "haystack": evidence_size(theirs)},
        "latency": latency_block(ms, mine),
        "graded_files": [str(out_dir / "dev-ours.jsonl"), str(out_dir / "dev-haystack.jsonl")],
        "per_question": per_question,
    }
    if cross_encoder_queries > 0:
        result["cross_encoder_time_only"] = time_cross_encoders(
            data_dir,
            chunks,
            [q["question"] for q in questions][:cross_encoder_queries],
            model_dir,
            cache_dir,
            s.lexical_top_n,
            s.evidence_k,
            peer.vectors,
            log,
        )
    return result


def time_cross_encoders(
    data_dir: Path,
    chunks: Sequence[Any],
    questions: Sequence[str],
    model_dir: Path,
    cache_dir: Path,
    top_n: int,
    evidence_k: int,
    vectors: np.ndarray,
    log: Log,
) -> dict[str, Any]:
    """Both sides with the same MiniLM-L6-sized cross-encoder over their fused candidates (time only)."""
    from evaluation.rerankers import _minilm_cross_encoder

    folder = _minilm_cross_encoder(cache_dir.parent / "minilm-l6-cross-encoder-random-head")
    ours = Ours(data_dir, reranker="cross-encoder", reranker_path=str(folder))
    peer = Peer(
        chunks,
        model_dir=model_dir,
        cache_dir=cache_dir,
        top_n=top_n,
        evidence_k=evidence_k,
        cross_encoder=folder,
        vectors=vectors,
        log=log,
    )
    log(f"cross-encoder timing: {len(questions)} dev questions per side")
    mine, _, ms = side_by_side(ours, peer, questions, peer_threads=[None], log=log)
    return {
        "model": "MiniLM-L6 weights + random 1-logit head (evaluation.rerankers._minilm_cross_encoder)",
        "ours_reranker": ours.reranker,
        "haystack_ranker": "SentenceTransformersSimilarityRanker",
        **latency_block(ms, mine),
    }
