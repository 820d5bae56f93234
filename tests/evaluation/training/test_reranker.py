"""Reranker training (evaluation/training/reranker.py): metrics and fusion, the pairwise fit, the abstention
threshold, and a full train/save/load on tiny synthetic SciFact and NQ data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag.models.rerankers import FEATURE_NAMES, FeatureModel
from tests.models.fakes import PASSAGES, CountingEmbedder, HashEmbedder, make_chunk


def test_training_metrics_and_fusion() -> None:
    from evaluation.metrics import ndcg_at, recall_at
    from evaluation.opendata import rrf_candidates

    rel = frozenset({"a", "b"})
    assert ndcg_at(["a", "b", "c"], rel) == pytest.approx(1.0)
    assert ndcg_at(["c", "a"], rel) == pytest.approx((1 / np.log2(3)) / (1 + 1 / np.log2(3)))
    assert recall_at(["c", "a"], rel) == 0.5
    assert ndcg_at(["a"], frozenset()) == 0.0
    chunks = [make_chunk(i, *PASSAGES[i]) for i in range(5)]
    cands = rrf_candidates([(0, 5.0), (1, 4.0)], [(1, 0.9), (2, 0.8)], chunks, k=60, top=2)
    assert [c.chunk_id for c in cands] == ["c1", "c0"]
    assert cands[0].fused_score == pytest.approx(1 / 62 + 1 / 61)
    assert (cands[0].bm25_rank, cands[0].dense_rank, cands[1].dense_rank) == (2, 1, None)


def test_pairwise_fit_learns_the_informative_feature() -> None:
    from evaluation.training.reranker import fit_pairwise, fit_platt

    rng = np.random.default_rng(0)
    diffs = rng.normal(size=(400, 3))
    diffs[:, 1] = np.abs(diffs[:, 1]) + 0.1  # feature 1 always favours the positive
    beta = fit_pairwise(diffs, np.ones(400), l2=1e-3)
    assert beta[1] > 5 * max(abs(beta[0]), abs(beta[2]))
    raw = np.concatenate([rng.normal(2, 1, 200), rng.normal(-2, 1, 200)])
    a, b = fit_platt(raw, np.concatenate([np.ones(200), np.zeros(200)]))
    assert a > 0


def _write_tiny_datasets(root: Path) -> None:
    """A synthetic SciFact/NQ pair in the shared-data layout: each query matches one passage best."""
    rng = np.random.default_rng(1)
    vocab = [f"term{i}" for i in range(300)]
    sci = root / "scifact"
    (sci / "qrels").mkdir(parents=True)
    corpus, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    nq = []
    for d in range(120):
        words = rng.choice(vocab, size=40).tolist()
        corpus.append({"_id": str(d), "title": " ".join(words[:3]), "text": " ".join(words)})
        if d < 60:
            q = " ".join(rng.choice(words, size=5).tolist())
            queries.append({"_id": str(d), "text": q})
            qrels.append(f"{d}\t{d}\t1")
            nq.append(
                {
                    "question": q,
                    "answers": ["zzz"],
                    "ctxs": [{"title": corpus[-1]["title"], "text": corpus[-1]["text"], "isgold": True}],
                }
            )
    (sci / "corpus.jsonl").write_text("\n".join(json.dumps(c) for c in corpus) + "\n")
    (sci / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (sci / "qrels" / "train.tsv").write_text("\n".join(qrels) + "\n")
    lim = root / "lost-in-the-middle"
    lim.mkdir()
    with gzip.open(lim / "nq-open-oracle.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(x) for x in nq) + "\n")


class ReadingFake(CountingEmbedder):
    """A second hashed encoder, with another name and its own texts seen: the reading encoder's stand-in."""

    name = "reading-fake"


def _train(tmp_path: Path, reading: ReadingFake, **options: Any) -> Any:
    """``train`` on the tiny datasets under ``tmp_path``, hashed embedders, one L2 value and two folds."""
    from evaluation.training.reranker import train

    options = {"out": None, "log": lambda _: None, **options}
    return train(
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        embedder=HashEmbedder(),
        reading_encoder=reading,
        l2_grid=(1e-2,),
        folds=2,
        **options,
    )


def test_train_end_to_end_on_tiny_synthetic_data(tmp_path: Path) -> None:
    _write_tiny_datasets(tmp_path / "data")
    out = tmp_path / "model.json"
    logs: list[str] = []
    reading = ReadingFake()
    model, report = _train(tmp_path, reading, out=out, log=logs.append)
    loaded = FeatureModel.load(out)
    assert loaded.name == "features-v3" and loaded.uses_sentences and loaded.uses_reading
    assert loaded.features == FEATURE_NAMES and np.allclose(loaded.weights, model.weights, atol=1e-6)
    assert loaded.meta["reading_model"] == "reading-fake"
    assert 0.0 <= loaded.abstain_threshold < 1.0 and loaded.abstain_threshold == model.abstain_threshold
    assert report["abstain_threshold"]["value"] == model.abstain_threshold
    assert set(report["heldout"]) == {"scifact", "nq"}
    for r in report["heldout"].values():
        assert 0.0 <= r["features-v3"]["ndcg@10"] <= 1.0 and r["fused"]["queries"] > 0
        assert {"features-v1", "features-v2"} <= set(
            r
        )  # the earlier models, scored on the same held-out lists
    assert set(report["cv_ablation_ndcg@10"]) == {
        "without reading features",
        "without sentence features (reading kept)",
        "without sentence or reading features",
    }
    assert any("wrote" in line for line in logs)
    assert list((tmp_path / "cache").glob("*.npy"))  # embeddings cached for reruns
    assert list((tmp_path / "cache").glob("scifact-sentences-*.npy"))  # sentence vectors too
    assert list((tmp_path / "cache").glob("scifact-reading-*.npy"))  # and the reading encoder's
    # the reading encoder read each sentence after its passage's title, and the queries
    assert any(": " in t and t.split(": ", 1)[0].startswith("term") for t in reading.seen)
    # rerunning reproduces the weights exactly (from the cache: nothing embedded again)
    reading.seen.clear()
    again, _ = _train(tmp_path, reading)
    assert np.array_equal(again.weights, model.weights) and again.abstain_threshold == model.abstain_threshold
    assert reading.seen == []


def test_train_an_earlier_feature_set_reads_no_reading_vectors(tmp_path: Path) -> None:
    from evaluation.training.reranker import MODEL_FEATURES

    _write_tiny_datasets(tmp_path / "data")
    reading = ReadingFake()
    model, report = _train(tmp_path, reading, features=MODEL_FEATURES["features-v2"], name="features-v2")
    assert model.features == MODEL_FEATURES["features-v2"] and not model.uses_reading
    assert "reading_model" not in model.meta and reading.seen == []
    assert set(report["cv_ablation_ndcg@10"]) == {"without sentence features"}
    assert set(report["heldout"]["scifact"]) == {"fused", "features-v1", "features-v2"}  # v2 is itself


def test_feature_sets_and_their_ablations() -> None:
    from evaluation.training.reranker import MODEL_FEATURES, V1_FEATURES, V2_FEATURES, ablations
    from rag.models.rerankers import READING_FEATURES, SENTENCE_FEATURES

    assert MODEL_FEATURES["features-v3"] == FEATURE_NAMES
    assert set(FEATURE_NAMES) - set(V2_FEATURES) == READING_FEATURES
    assert set(V2_FEATURES) - set(V1_FEATURES) == SENTENCE_FEATURES
    for name in ("features-v1", "features-v2"):  # the committed files weigh exactly these
        assert FeatureModel.load(Path(f"rag/models/{_FILES[name]}")).features == MODEL_FEATURES[name]
    assert ablations(V1_FEATURES) == {}
    assert ablations(V2_FEATURES) == {"without sentence features": V1_FEATURES}
    v3 = ablations(FEATURE_NAMES)
    assert v3["without reading features"] == V2_FEATURES
    assert v3["without sentence or reading features"] == V1_FEATURES


_FILES = {"features-v1": "reranker_features_v1.json", "features-v2": "reranker_features.json"}


def test_abstain_threshold_leaves_under_two_percent_of_gold_below() -> None:
    from evaluation.training.reranker import Group, abstain_threshold_for

    # 200 queries; query i's gold candidate scores (i + 1) / 200, its negative 0.999
    groups = [
        Group(str(i), np.array([[(i + 1) / 200], [0.999]]), np.array([1, 0]), ["g", "n"], frozenset({"g"}))
        for i in range(200)
    ]
    groups.append(Group("nogold", np.array([[0.5]]), np.array([0]), ["n"], frozenset({"g"})))  # not counted
    t, summary = abstain_threshold_for(groups, lambda x: x[:, 0], max_share=0.02)
    assert summary["queries_with_gold_in_pool"] == 200
    assert summary["below"] == 3 and summary["share_below"] < 0.02  # 0.005, 0.010, 0.015 fall below
    assert t == pytest.approx(0.02)


# --------------------------------------------------------------------------------------- shared data
@pytest.mark.shared
def test_shared_datasets_load(shared_dir: Path) -> None:
    from evaluation.opendata import heldout, load_nq, load_scifact

    sci = load_scifact(shared_dir / "data")
    assert len(sci.passages) == 5183 and len(sci.queries) > 800
    dev = [q for q in sci.queries if heldout(q.qid)]
    assert 0.4 < len(dev) / len(sci.queries) < 0.6
    nq = load_nq(shared_dir / "data")
    assert len(nq.queries) == 2655 and all(q.relevant for q in nq.queries)
