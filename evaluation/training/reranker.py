"""Train the feature reranker (``features-v3``; ``--model`` retrains an earlier one) on open question/passage data.

Reproduce the committed weights with ``python -m evaluation.training.reranker [--model features-v2]`` (or call
:func:`train`). The first run embeds every passage, query and passage sentence (``rag.models.sentences.sentence_units``)
of SciFact and NQ-Open with MiniLM, and for features-v3 every sentence read after its passage's title and every
query with the reading encoder (``rag.models.reading``), and caches them under ``--cache-dir`` (about 55k sentences
per encoder: tens of minutes on 2 busy cores); later runs take minutes. Deterministic: no random sampling,
L-BFGS from zeros.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.metrics import ndcg_at, recall_at
from evaluation.opendata import (
    DEFAULT_CACHE_DIR,
    DEFAULT_DATA_DIR,
    Query,
    Retrieval,
    app_reading_encoder,
    encoder_identity,
    heldout,
    load_nq,
    load_scifact,
)
from rag.models.rerankers import (
    DEFAULT_EMBEDDING_MODEL,
    FEATURE_MODELS,
    FEATURE_NAMES,
    READING_FEATURES,
    SENTENCE_FEATURES,
    FeatureModel,
    candidate_features,
)

# ---------------------------------------------------------------------------------------------------------
# Hybrid retrieval over a pool: the candidate lists the reranker sees in the app
# ---------------------------------------------------------------------------------------------------------


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
            "trained_by": "python -m evaluation.training.reranker",
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
