"""Train the feature reranker (``features-v3``; ``--model`` retrains an earlier one) on open question/passage data.

Reproduce the committed weights with ``python -m evaluation.rerank_train [--model features-v2]`` (or call
:func:`train`). The first run embeds every passage, query and passage sentence (``rag.models.sentences.sentence_units``)
of SciFact and NQ-Open with MiniLM, and for features-v3 every sentence read after its passage's title and every
query with the reading encoder (``rag.models.reading``), and caches them under ``--cache-dir`` (about 55k sentences
per encoder: tens of minutes on 2 busy cores); later runs take minutes. Deterministic: no random sampling,
L-BFGS from zeros.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.metrics import ndcg_at, recall_at
from rag.models.embedder import passage_text
from rag.models.reading import identity
from rag.models.rerankers import (
    DEFAULT_EMBEDDING_MODEL,
    FEATURE_MODELS,
    FEATURE_NAMES,
    READING_FEATURES,
    SENTENCE_FEATURES,
    FeatureModel,
    candidate_features,
)
from rag.models.sentences import reading_text, sentence_units
from rag.stages.retrieve import rrf_fuse
from rag.stores.bm25 import BM25Index
from rag.text import bm25_tokens
from rag.types import PUBLIC_GROUP, Candidate, Chunk

DEFAULT_DATA_DIR = Path("/work/shared/data")
DEFAULT_CACHE_DIR = Path("/tmp/rag-bench")


@dataclass(frozen=True)
class Passage:
    pid: str
    title: str
    text: str

    @property
    def embed_text(self) -> str:
        return passage_text(self.title, "", self.text)


def encoder_identity(embedder: Any) -> str:
    """``rag.models.reading.identity`` of an embedder: its model name, with the shipped reading encoder's weights
    digest, and int8 marked when it runs int8 (``runtime`` 'onnx-int8'; 'torch (why)' counts as float)."""
    return identity(str(embedder.name), str(getattr(embedder, "runtime", "onnx")).split(" ")[0])


def embed_cached(embedder, texts: Sequence[str], cache_dir: Path, label: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Embed ``texts`` once; later calls with the same model and texts load ``<cache_dir>/<label>-<hash>.npy``.

    The model counts by its identity (``encoder_identity``: the shipped reading encoder with its weights' digest,
    so a retrained one never reads an earlier one's vectors; int8 vectors marked)."""
    digest = hashlib.sha256(encoder_identity(embedder).encode())
    for t in texts:
        digest.update(t.encode())
        digest.update(b"\x00")
    path = Path(cache_dir) / f"{label}-{digest.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path)
    vectors = embedder.embed_passages(list(texts))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


def embed_cached_parts(  # type: ignore[no-untyped-def]
    embedder,
    texts: Sequence[str],
    cache_dir: Path,
    label: str,
    *,
    part: int = 4096,
    log: Callable[[str], None] | None = None,
) -> np.ndarray:
    """:func:`embed_cached` in parts of ``part`` texts, so a long embedding job resumes where it stopped."""
    pieces = []
    for start in range(0, len(texts), part):
        pieces.append(
            embed_cached(embedder, texts[start : start + part], cache_dir, f"{label}-{start // part}")
        )
        if log is not None:
            log(f"{label}: {min(start + part, len(texts))}/{len(texts)} embedded")
    return np.concatenate(pieces) if pieces else np.zeros((0, embedder.dim), dtype=np.float32)


def sentence_vectors_of(  # type: ignore[no-untyped-def]
    embedder,
    passages: Sequence[Passage],
    cache_dir: Path,
    label: str,
    log: Callable[[str], None] | None = None,
    *,
    reading: bool = False,
) -> dict[str, np.ndarray]:
    """pid -> vectors of ``sentence_units(passage.text)``: what ingestion stores per chunk (cached on disk); with
    ``reading`` each unit read after the passage's title (``reading_text``), as ingestion gives the reading
    encoder a chunk's units after its heading (a SciFact or NQ passage's heading is its title)."""
    units_of = {
        p.pid: [reading_text(p.title, u) for u in sentence_units(p.text)]
        if reading
        else sentence_units(p.text)
        for p in passages
    }
    texts = sorted({u for us in units_of.values() for u in us})
    vectors = np.asarray(embed_cached_parts(embedder, texts, cache_dir, label, log=log), dtype=np.float32)
    row = {t: i for i, t in enumerate(texts)}
    return {pid: vectors[[row[u] for u in us]] for pid, us in units_of.items()}


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    relevant: frozenset[str]  # passage ids judged relevant
    answers: tuple[str, ...] = ()  # NQ answer strings: other passages holding one are not safe negatives


@dataclass
class Dataset:
    """A passage pool and its queries (the retrieval task the reranker learns and is measured on)."""

    name: str
    passages: list[Passage]
    queries: list[Query]


def load_scifact(data_dir: Path = DEFAULT_DATA_DIR) -> Dataset:
    """SciFact: the full 5,183-abstract corpus and the queries that have train qrels."""
    root = Path(data_dir) / "scifact"
    passages = []
    with open(root / "corpus.jsonl") as f:
        for line in f:
            d = json.loads(line)
            passages.append(Passage(str(d["_id"]), d.get("title", ""), d.get("text", "")))
    texts = {}
    with open(root / "queries.jsonl") as f:
        for line in f:
            d = json.loads(line)
            texts[str(d["_id"])] = d["text"]
    rel: dict[str, set[str]] = {}
    with open(root / "qrels" / "train.tsv") as f:
        next(f)
        for line in f:
            qid, pid, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                rel.setdefault(qid, set()).add(pid)
    queries = [Query(q, texts[q], frozenset(p)) for q, p in sorted(rel.items(), key=lambda kv: int(kv[0]))]
    return Dataset("scifact", passages, queries)


def load_nq(data_dir: Path = DEFAULT_DATA_DIR) -> Dataset:
    """NQ-Open with its gold passages; the pool is the set of distinct gold passages of all questions."""
    path = Path(data_dir) / "lost-in-the-middle" / "nq-open-oracle.jsonl.gz"
    pool: dict[tuple[str, str], str] = {}
    queries = []
    with gzip.open(path, "rt") as f:
        for i, line in enumerate(f):
            d = json.loads(line)
            gold = [c for c in d["ctxs"] if c.get("isgold", True)] or d["ctxs"][:1]
            pids = set()
            for c in gold:
                key = (c["title"], c["text"])
                pids.add(pool.setdefault(key, f"nq{len(pool)}"))
            queries.append(Query(f"nq{i}", d["question"], frozenset(pids), tuple(d.get("answers", ()))))
    passages = [Passage(pid, title, text) for (title, text), pid in pool.items()]
    return Dataset("nq", passages, queries)


# ---------------------------------------------------------------------------------------------------------
# Hybrid retrieval over a pool: the candidate lists the reranker sees in the app
# ---------------------------------------------------------------------------------------------------------


def heldout(qid: str) -> bool:
    """The fixed 50/50 split by query id: True = held out (dev), never trained on."""
    return hashlib.sha256(f"rerank-split:{qid}".encode()).digest()[0] % 2 == 1


def _chunk(p: Passage) -> Chunk:
    return Chunk(
        chunk_id=p.pid,
        doc_id=p.pid,
        text=p.text,
        source=p.pid,
        title=p.title,
        section="",
        page=None,
        page_end=None,
        ordinal=0,
        prev_id=None,
        next_id=None,
        groups=(PUBLIC_GROUP,),
        effective=None,
        expires=None,
        tags=(),
        doc_version="",
        n_tokens=0,
    )


def rrf_candidates(
    lexical: Sequence[tuple[int, float]],
    dense: Sequence[tuple[int, float]],
    chunks: Sequence[Chunk],
    *,
    k: int = 60,
    top: int = 40,
) -> list[Candidate]:
    """RRF of two ranked legs of (passage index, score), best ``top`` first, each with both legs' ranks:
    the query path's own fusion stage, so training sees exactly the candidates the pipeline reranks."""
    by_id = {chunks[i].chunk_id: chunks[i] for i, _ in [*lexical, *dense]}
    fused = rrf_fuse(
        [(chunks[i].chunk_id, s) for i, s in lexical], [(chunks[i].chunk_id, s) for i, s in dense], by_id, k=k
    )
    return fused[:top]


@dataclass
class Retrieval:
    """BM25 + dense (MiniLM) + RRF over one dataset's pool, with embeddings cached on disk.

    ``sentence_vectors`` (pid -> vectors of the passage's ``sentence_units``) is what ingestion stores per
    chunk; None when built with ``sentences=False``. ``reading_vectors`` and ``reading_query_vectors`` are the
    reading encoder's (the units read after the passage's title; the queries), when built with one.
    """

    dataset: Dataset
    bm25: BM25Index
    passage_vectors: np.ndarray
    query_vectors: dict[str, np.ndarray]
    chunks: list[Chunk]
    sentence_vectors: dict[str, np.ndarray] | None = None
    reading_vectors: dict[str, np.ndarray] | None = None
    reading_query_vectors: dict[str, np.ndarray] | None = None

    @classmethod
    def build(
        cls,
        dataset: Dataset,
        embedder: Any,
        cache_dir: Path = DEFAULT_CACHE_DIR,
        *,
        sentences: bool = True,
        reading_encoder: Any | None = None,
        log: Callable[[str], None] | None = None,
    ) -> Retrieval:
        bm25 = BM25Index.build([bm25_tokens(p.embed_text) for p in dataset.passages])
        pv = embed_cached(
            embedder, [p.embed_text for p in dataset.passages], cache_dir, f"{dataset.name}-passages"
        )
        qv = embed_cached(embedder, [q.text for q in dataset.queries], cache_dir, f"{dataset.name}-queries")
        sv = (
            sentence_vectors_of(embedder, dataset.passages, cache_dir, f"{dataset.name}-sentences", log=log)
            if sentences
            else None
        )
        rv = rqv = None
        if reading_encoder is not None:
            rv = sentence_vectors_of(
                reading_encoder, dataset.passages, cache_dir, f"{dataset.name}-reading", log=log, reading=True
            )
            vectors = embed_cached(
                reading_encoder,
                [q.text for q in dataset.queries],
                cache_dir,
                f"{dataset.name}-reading-queries",
            )
            rqv = {q.qid: np.asarray(vectors[i], dtype=np.float32) for i, q in enumerate(dataset.queries)}
        return cls(
            dataset,
            bm25,
            np.asarray(pv, dtype=np.float32),
            {q.qid: np.asarray(qv[i], dtype=np.float32) for i, q in enumerate(dataset.queries)},
            [_chunk(p) for p in dataset.passages],
            sv,
            rv,
            rqv,
        )

    def query_vector_of(self, text: str) -> np.ndarray:
        """The cached vector of a query by its text (what ``Pipeline.query_vector`` is in the app)."""
        if not hasattr(self, "_by_text"):
            self._by_text = {q.text: self.query_vectors[q.qid] for q in self.dataset.queries}
        return self._by_text[text]

    def sentence_vectors_of(self, chunk_id: str) -> np.ndarray | None:
        """chunk_id -> sentence vectors (what ``IndexReader.sentence_vectors`` is in the app)."""
        return None if self.sentence_vectors is None else self.sentence_vectors.get(chunk_id)

    def reading_query_vector_of(self, text: str) -> np.ndarray:
        """The reading encoder's cached vector of a query by its text (``Pipeline.reading_query_vector``)."""
        if not hasattr(self, "_reading_by_text"):
            vectors = self.reading_query_vectors or {}
            self._reading_by_text = {q.text: vectors[q.qid] for q in self.dataset.queries if q.qid in vectors}
        return self._reading_by_text[text]

    def reading_vectors_of(self, chunk_id: str) -> np.ndarray | None:
        """chunk_id -> reading vectors (what ``IndexReader.reading_vectors`` is in the app)."""
        return None if self.reading_vectors is None else self.reading_vectors.get(chunk_id)

    def candidates(self, query: Query, *, top_n: int = 40, k: int = 60) -> list[Candidate]:
        lexical = self.bm25.top(bm25_tokens(query.text), top_n)
        sims = self.passage_vectors @ self.query_vectors[query.qid]
        idx = np.argpartition(-sims, top_n - 1)[:top_n]
        dense = sorted(((int(i), float(sims[i])) for i in idx), key=lambda t: (-t[1], t[0]))
        return rrf_candidates(lexical, dense, self.chunks, k=k, top=top_n)


# ---------------------------------------------------------------------------------------------------------
# Training: pairwise logistic (RankNet with a linear scorer), L2-regularised, fitted with L-BFGS
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Group:
    """One query's candidate list as training/evaluation data."""

    qid: str
    x: np.ndarray  # candidates x FEATURE_NAMES
    labels: np.ndarray  # 1 relevant, 0 not, -1 ambiguous (excluded from training pairs)
    ids: list[str]
    relevant: frozenset[str]


def make_groups(retrieval: Retrieval, queries: Sequence[Query]) -> list[Group]:
    groups = []
    for q in queries:
        cands = retrieval.candidates(q)
        sv = (
            None
            if retrieval.sentence_vectors is None
            else [retrieval.sentence_vectors[c.chunk_id] for c in cands]
        )
        rv, rqv = None, None
        if retrieval.reading_vectors is not None and retrieval.reading_query_vectors is not None:
            rv = [retrieval.reading_vectors[c.chunk_id] for c in cands]
            rqv = retrieval.reading_query_vectors[q.qid]
        x = candidate_features(
            q.text,
            cands,
            query_vector=retrieval.query_vectors[q.qid],
            sentence_vectors=sv,
            reading_query_vector=rqv,
            reading_vectors=rv,
        )
        labels = np.zeros(len(cands))
        for i, c in enumerate(cands):
            if c.chunk_id in q.relevant:
                labels[i] = 1
            elif q.answers and any(a.lower() in c.chunk.text.lower() for a in q.answers if len(a) > 1):
                labels[i] = -1
        groups.append(Group(q.qid, x, labels, [c.chunk_id for c in cands], q.relevant))
    return groups


def _pairs(
    groups: Sequence[Group], cols: Sequence[int], weights: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Feature differences (positive - negative) and a per-pair weight: every query weighs the same."""
    diffs, w = [], []
    for g, gw in zip(groups, weights, strict=True):
        pos, neg = np.flatnonzero(g.labels == 1), np.flatnonzero(g.labels == 0)
        if not len(pos) or not len(neg):
            continue
        d = (g.x[pos][:, None, cols] - g.x[neg][None, :, cols]).reshape(-1, len(cols))
        diffs.append(d)
        w.append(np.full(len(d), gw / len(d)))
    if not diffs:
        raise ValueError("no training pairs: no query has both a relevant and a non-relevant candidate")
    return np.vstack(diffs), np.concatenate(w)


def fit_pairwise(diffs: np.ndarray, w: np.ndarray, l2: float) -> np.ndarray:
    from scipy.optimize import minimize

    w = w / w.sum()

    def loss(beta: np.ndarray) -> tuple[float, np.ndarray]:
        m = diffs @ beta
        # log(1 + exp(-m)), stable
        value = float(w @ np.logaddexp(0.0, -m)) + 0.5 * l2 * float(beta @ beta)
        grad = -(diffs.T @ (w * _sigmoid(-m))) + l2 * beta
        return value, grad

    result = minimize(loss, np.zeros(diffs.shape[1]), jac=True, method="L-BFGS-B")
    return np.asarray(result.x)


def fit_platt(raw: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """sigmoid(a * raw + b) ~ P(relevant), fitted by logistic regression on (raw score, label)."""
    from scipy.optimize import minimize

    y = labels.astype(np.float64)

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        z = p[0] * raw + p[1]
        value = float(np.mean(np.logaddexp(0.0, z) - y * z)) + 1e-6 * float(p @ p)
        r = _sigmoid(z) - y
        return value, np.array([np.mean(r * raw), np.mean(r)]) + 2e-6 * p

    result = minimize(loss, np.array([1.0, 0.0]), jac=True, method="L-BFGS-B")
    return float(result.x[0]), float(result.x[1])


def evaluate(groups: Sequence[Group], score: Callable[[np.ndarray], np.ndarray] | None) -> dict[str, float]:
    """Mean nDCG@10 and recall@10 over the groups; ``score=None`` keeps fused order."""
    ndcg, rec = [], []
    for g in groups:
        if score is None:
            ranked = g.ids
        else:
            s = score(g.x)
            ranked = [g.ids[i] for i in sorted(range(len(g.ids)), key=lambda i: (-s[i], i))]
        ndcg.append(ndcg_at(ranked, g.relevant))
        rec.append(recall_at(ranked, g.relevant))
    return {"ndcg@10": float(np.mean(ndcg)), "recall@10": float(np.mean(rec)), "queries": len(groups)}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0)))


def _fit(
    groups: Sequence[Group], weights: Sequence[float], cols: Sequence[int], l2: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.vstack([g.x[:, cols] for g in groups])
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    standardised = [Group(g.qid, (g.x[:, cols] - mean) / scale, g.labels, g.ids, g.relevant) for g in groups]
    diffs, w = _pairs(standardised, list(range(len(cols))), weights)
    return mean, scale, fit_pairwise(diffs, w, l2)


def _balanced_weights(groups_by_set: dict[str, list[Group]]) -> tuple[list[Group], list[float]]:
    """Every dataset weighs the same in total, every query within a dataset the same."""
    groups, weights = [], []
    for gs in groups_by_set.values():
        groups.extend(gs)
        weights.extend([1.0 / len(gs)] * len(gs))
    return groups, weights


def _score_fn(cols: Sequence[int], mean: np.ndarray, scale: np.ndarray, beta: np.ndarray) -> Callable:
    return lambda x: ((x[:, cols] - mean) / scale) @ beta


def _model_scores(model: FeatureModel) -> Callable[[np.ndarray], np.ndarray]:
    """A saved model's raw scores on full (candidates x FEATURE_NAMES) matrices."""
    idx = [FEATURE_NAMES.index(f) for f in model.features]
    return lambda x: model.raw_scores(x[:, idx])


V2_FEATURES: tuple[str, ...] = tuple(f for f in FEATURE_NAMES if f not in READING_FEATURES)
V1_FEATURES: tuple[str, ...] = tuple(f for f in V2_FEATURES if f not in SENTENCE_FEATURES)
# what each model weighs: every later one adds to the one before
MODEL_FEATURES: dict[str, tuple[str, ...]] = {
    "features-v1": V1_FEATURES,
    "features-v2": V2_FEATURES,
    "features-v3": FEATURE_NAMES,
}


def abstain_threshold_for(
    groups: Sequence[Group], score: Callable[[np.ndarray], np.ndarray], *, max_share: float = 0.02
) -> tuple[float, dict[str, Any]]:
    """The largest probability ``t`` with fewer than ``max_share`` of the queries' best gold score below ``t``.

    Only queries with a gold passage among their candidates count (the others cannot be answered from the
    candidates whatever the threshold). Returns ``t`` (rounded down to 4 decimals) and a summary.
    """
    best = np.sort(
        np.array([float(np.max(score(g.x)[g.labels == 1])) for g in groups if (g.labels == 1).any()])
    )
    if not len(best):
        return 0.0, {"queries": 0}
    k = max(0, math.ceil(max_share * len(best)) - 1)  # best[:k] fall below best[k]: k/n < max_share
    t = math.floor(float(best[k]) * 1e4) / 1e4
    below = int(np.sum(best < t))
    return t, {
        "queries_with_gold_in_pool": len(best),
        "below": below,
        "share_below": below / len(best),
        "best_gold_score_percentiles": {
            str(p): round(float(np.percentile(best, p)), 4) for p in (1, 2, 5, 10, 25, 50)
        },
    }


def app_reading_encoder() -> Any:
    """The reading encoder as the app runs it (``RAG_READING_MODEL``, ``RAG_READING_RUNTIME``): training reads the
    vectors the query path will read."""
    from rag.config import load_settings
    from rag.models.embedder import reading_encoder_for

    return reading_encoder_for(load_settings())


def ablations(features: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The feature sets the CV also scores beside ``features``: each family of sentence-level features left out
    (only the families ``features`` has)."""
    have = set(features)
    out: dict[str, tuple[str, ...]] = {}
    if READING_FEATURES & have:
        out["without reading features"] = tuple(f for f in features if f not in READING_FEATURES)
        if SENTENCE_FEATURES & have:
            out["without sentence features (reading kept)"] = tuple(
                f for f in features if f not in SENTENCE_FEATURES
            )
            out["without sentence or reading features"] = tuple(
                f for f in features if f not in SENTENCE_FEATURES | READING_FEATURES
            )
    elif SENTENCE_FEATURES & have:
        out["without sentence features"] = tuple(f for f in features if f not in SENTENCE_FEATURES)
    return out


def open_data(
    data_dir: Path,
    cache_dir: Path,
    embedder: Any,
    *,
    sentences: bool = True,
    reading_encoder: Any | None = None,
    log: Callable[[str], None] = print,
) -> tuple[dict[str, list[Group]], dict[str, list[Group]]]:
    """SciFact's and NQ-Open's groups: (training halves, held-out halves) by dataset name."""
    train_sets: dict[str, list[Group]] = {}
    dev_sets: dict[str, list[Group]] = {}
    for dataset in (load_scifact(data_dir), load_nq(data_dir)):
        retrieval = Retrieval.build(
            dataset, embedder, cache_dir, sentences=sentences, reading_encoder=reading_encoder, log=log
        )
        groups = make_groups(retrieval, dataset.queries)
        train_sets[dataset.name] = [g for g in groups if not heldout(g.qid)]
        dev_sets[dataset.name] = [g for g in groups if heldout(g.qid)]
        log(
            f"{dataset.name}: {len(train_sets[dataset.name])} train / {len(dev_sets[dataset.name])} held-out queries"
        )
    return train_sets, dev_sets


def train(
    *,
    data_dir: Path = DEFAULT_DATA_DIR,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    out: Path | None = FEATURE_MODELS["features-v3"],
    features: Sequence[str] = FEATURE_NAMES,
    name: str = "features-v3",
    l2_grid: Sequence[float] = (1e-4, 1e-3, 1e-2, 1e-1),
    folds: int = 5,
    abstain_max_share: float = 0.02,
    compare: Sequence[Path] = (FEATURE_MODELS["features-v1"], FEATURE_MODELS["features-v2"]),
    embedder: Any | None = None,
    reading_encoder: Any | None = None,
    log: Callable[[str], None] = print,
) -> tuple[FeatureModel, dict[str, Any]]:
    """Fit ``name`` over ``features`` on the training halves of SciFact (train qrels) and NQ-Open; report
    held-out halves.

    Candidate lists are our own hybrid retrieval (BM25 + MiniLM + RRF k=60, top 40) over each pool, so
    negatives are the hard ones the app would see. L2 strength is chosen by query-grouped cross-validation
    on the training half only (the CV also scores the feature set without each family of sentence-level
    features, as ablations: ``ablations``). The abstention threshold is the probability below which fewer than
    ``abstain_max_share`` of held-out queries' best gold passage score falls (the lower of the two datasets').
    ``compare`` (model JSONs, e.g. features-v1 and features-v2; files that do not exist, of the model being
    trained or weighing features it lacks are skipped) are scored on the same held-out lists. The reading features need ``reading_encoder``
    (default: the shipped reading encoder). Returns the model and a report; writes the model JSON to ``out``.
    """
    t0 = time.perf_counter()
    from rag.models.embedder import load_embedder

    if embedder is None:
        embedder = load_embedder(DEFAULT_EMBEDDING_MODEL)
    cols = [FEATURE_NAMES.index(f) for f in features]
    sentences = bool(SENTENCE_FEATURES & set(features))
    reading = bool(READING_FEATURES & set(features))
    if reading and reading_encoder is None:
        reading_encoder = app_reading_encoder()
    train_sets, dev_sets = open_data(
        data_dir,
        cache_dir,
        embedder,
        sentences=sentences,
        reading_encoder=reading_encoder if reading else None,
        log=log,
    )

    def cv_score(l2: float, feature_cols: Sequence[int]) -> float:
        per_fold = []
        for fold in range(folds):
            fit_sets = {n: [g for i, g in enumerate(gs) if i % folds != fold] for n, gs in train_sets.items()}
            val_sets = {n: [g for i, g in enumerate(gs) if i % folds == fold] for n, gs in train_sets.items()}
            mean, scale, beta = _fit(*_balanced_weights(fit_sets), feature_cols, l2)
            fn = _score_fn(feature_cols, mean, scale, beta)
            per_fold.append(np.mean([evaluate(v, fn)["ndcg@10"] for v in val_sets.values()]))
        return float(np.mean(per_fold))

    # choose the L2 strength by query-grouped CV inside the training halves
    cv: dict[str, float] = {}
    for l2 in l2_grid:
        cv[str(l2)] = cv_score(l2, cols)
        log(f"l2={l2:g}: cv nDCG@10 {cv[str(l2)]:.4f}")
    best_l2 = float(max(cv, key=lambda k: cv[k]))
    ablation: dict[str, float] = {}
    for label, subset in ablations(features).items():
        ablation[label] = cv_score(best_l2, [FEATURE_NAMES.index(f) for f in subset])
        log(f"cv nDCG@10 {label} (l2={best_l2:g}): {ablation[label]:.4f}")

    groups, weights = _balanced_weights(train_sets)
    mean, scale, beta = _fit(groups, weights, cols, best_l2)
    fn = _score_fn(cols, mean, scale, beta)
    raw = np.concatenate([fn(g.x) for g in groups])
    labels = np.concatenate([g.labels for g in groups])
    keep = labels >= 0
    calibration = fit_platt(raw[keep], labels[keep])
    a, b = calibration

    def prob(x: np.ndarray) -> np.ndarray:
        return _sigmoid(a * fn(x) + b)

    thresholds = {
        n: abstain_threshold_for(dev, prob, max_share=abstain_max_share) for n, dev in dev_sets.items()
    }
    threshold = min(t for t, _ in thresholds.values())
    for n, (t, summary) in thresholds.items():
        log(f"abstain threshold on held-out {n}: {t:.4f} ({summary})")

    # a model is compared only on lists that carry its inputs
    compare_models = [
        m
        for m in (FeatureModel.load(p) for p in compare if Path(p).exists())
        if m.name != name and set(m.features) <= set(features)
    ]
    report: dict[str, Any] = {
        "l2": best_l2,
        "cv_ndcg@10": cv,
        "cv_ablation_ndcg@10": ablation,
        "heldout": {},
        "abstain_threshold": {"value": threshold, **{n: s for n, (_, s) in thresholds.items()}},
    }
    for n, dev in dev_sets.items():
        row = {"fused": evaluate(dev, None)}
        for other in compare_models:
            row[other.name] = evaluate(dev, _model_scores(other))
        row[name] = evaluate(dev, fn)
        report["heldout"][n] = row
    model = FeatureModel(
        name=name,
        features=tuple(features),
        mean=mean,
        scale=scale,
        weights=beta,
        calibration=calibration,
        abstain_threshold=threshold,
        meta={
            "trained_by": "python -m evaluation.rerank_train",
            "embedding_model": getattr(embedder, "name", DEFAULT_EMBEDDING_MODEL),
            "training_data": {
                n: {"queries": len(gs), "pairs_from": "hybrid top-40 (BM25 + MiniLM + RRF k=60)"}
                for n, gs in train_sets.items()
            },
            "split": "sha256('rerank-split:'+query_id)[0] % 2 == 1 is held out",
            "idf": "local (candidate list)",
            "sentence_vectors": "MiniLM vectors of rag.models.sentences.sentence_units(passage text), as stored at ingestion"
            if sentences
            else "not used",
            **(
                {
                    "reading_model": str(reading_encoder.name),
                    "reading_runtime": str(getattr(reading_encoder, "runtime", "onnx")).split(" ")[0],
                    "reading_model_identity": encoder_identity(reading_encoder),
                    "reading_vectors": "the reading encoder's vectors of each rag.models.sentences.sentence_units unit "
                    "read after the passage's title (rag.models.sentences.reading_text), as stored at ingestion; the "
                    "question embedded by it",
                }
                if reading and reading_encoder is not None
                else {}
            ),
            "l2": best_l2,
            "cv_ndcg@10": {k: round(v, 4) for k, v in cv.items()},
            "cv_ablation_ndcg@10": {k: round(v, 4) for k, v in ablation.items()},
            "abstain_threshold": (
                f"largest probability with < {abstain_max_share:.0%} of held-out queries' best gold passage "
                f"score below it (the lower of SciFact's and NQ's)"
            ),
            "abstain_calibration": {n: s for n, (_, s) in thresholds.items()},
            "heldout": {
                n: {
                    m: {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
                    for m, r in row.items()
                }
                for n, row in report["heldout"].items()
            },
        },
    )
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(model.to_json(), indent=1) + "\n")
        log(f"wrote {out}")
    for n, row in report["heldout"].items():
        log(
            f"held-out {n}: nDCG@10 "
            + ", ".join(f"{m} {r['ndcg@10']:.4f}" for m, r in row.items())
            + "; recall@10 "
            + ", ".join(f"{m} {r['recall@10']:.4f}" for m, r in row.items())
        )
    log(f"abstain_threshold = {threshold:.4f}")
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return model, report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--out", type=Path, default=None, help="Default: the model's file in rag/models/.")
    parser.add_argument(
        "--model",
        choices=sorted(MODEL_FEATURES),
        default="features-v3",
        help="Which model's feature set to train (and, without --out, into its file in rag/models/).",
    )
    parser.add_argument("--name", default=None, help="The model's name in its file (default: --model).")
    parser.add_argument("--v1", action="store_true", help="The same as --model features-v1.")
    args = parser.parse_args(argv)
    model = "features-v1" if args.v1 else args.model
    train(
        data_dir=args.data_dir,
        cache_dir=args.cache_dir,
        out=args.out or FEATURE_MODELS[model],
        features=MODEL_FEATURES[model],
        name=args.name or model,
        compare=[FEATURE_MODELS[m] for m in MODEL_FEATURES if m != model],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
