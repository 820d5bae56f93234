"""Reranker training groups from the suites (evaluation/rerank_groups.py): storage, scoring, loading for training."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evaluation.rerank_groups import figures, load, save
from evaluation.rerank_train import load_extra_groups


def _record(
    name: str, qid: str, labels: list[int], quotes: list[list[int]], n_quotes: int
) -> dict[str, object]:
    n = len(labels)
    return {
        "set": name,
        "qid": qid,
        "x": np.arange(n * 2, dtype=float).reshape(n, 2),
        "labels": np.asarray(labels, dtype=float),
        "ids": [f"{qid}-{i}" for i in range(n)],
        "quotes": quotes,
        "n_quotes": n_quotes,
        "tokens": [600] * n,
    }


def test_groups_round_trip_and_load_as_training_sets(tmp_path: Path) -> None:
    records = [
        _record("dev", "d1", [1, 0, -1], [[0], [], []], 1),
        _record("gitlab", "g1", [0, 1], [[], [0]], 1),
        _record("hotpotqa", "h1", [1, 1, 0], [[0], [0], []], 2),
    ]
    path = tmp_path / "groups.npz"
    save(records, path)
    back = load(path)
    assert [r["qid"] for r in back] == ["d1", "g1", "h1"]
    np.testing.assert_array_equal(back[0]["x"], records[0]["x"])
    sets = load_extra_groups(path, exclude=["gitlab"], merge={"dev": "policy", "gitlab": "policy"})
    assert sorted(sets) == ["hotpotqa", "policy"]
    (dev,) = sets["policy"]
    assert dev.qid == "dev:d1" and dev.relevant == frozenset({"d1-0"})  # -1 (part of a quote) is not relevant


def test_figures_count_every_quote_in_the_first_six_and_within_the_token_budget() -> None:
    # two quotes, covered by candidates 0 and 3; a score that ranks 3 first and 0 last
    rec = _record("dev", "d1", [1, 0, 0, 1, 0, 0, 0, 0], [[0], [], [], [1], [], [], [], []], 2)
    first_and_last = figures([rec], lambda x: x[:, 0] + 100 * (x[:, 0] == 6))  # candidate 3 first, 0 last
    assert first_and_last["dev"] == {"n": 1, "top6": 0, "tok1500": 0}  # 600-token passages: two fit in 1,500
    by_index = figures([rec], lambda x: -x[:, 0])
    assert by_index["dev"]["top6"] == 1 and by_index["dev"]["tok1500"] == 0  # 0 and 1 fit; 3 does not
    hot = _record("hotpotqa", "h1", [1, 0, 1], [[0], [], [0]], 2)
    golds_first = figures([hot], lambda x: (x[:, 0] != 2).astype(float))  # both paragraphs, then the other
    assert golds_first["hotpotqa"] == {"n": 1, "top6": 1, "tok1500": 1}
    gold_last = figures([hot], lambda x: x[:, 0])  # 2, 1, then 0 does not fit the 1,500 tokens
    assert gold_last["hotpotqa"] == {"n": 1, "top6": 1, "tok1500": 0}
