"""Measurement shared by both modes: nDCG@10, paired intervals, latency percentiles, alternating loops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evaluation.peer.common import AFTER_EVIDENCE, Log, Q
from evaluation.peer.systems import Answer, Ours, Peer, torch_threads

# ---------------------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------------------


def ndcg_at_10(ranked: Sequence[str], relevant: frozenset[str]) -> float:
    from evaluation.metrics import ndcg_at

    return ndcg_at(list(ranked), relevant, 10)


def paired_ci(ours: Sequence[float], theirs: Sequence[float], n: int = 2000) -> list[float]:
    """95% bootstrap interval of mean(ours - theirs) over questions."""
    diff = np.asarray(ours, dtype=float) - np.asarray(theirs, dtype=float)
    if len(diff) == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, len(diff), size=(n, len(diff)))].mean(axis=1)
    return [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)]


def latency(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(arr, 50)), 2),
        "p95": round(float(np.percentile(arr, 95)), 2),
        "mean": round(float(arr.mean()), 2),
        "n": len(arr),
    }


def side_by_side(
    ours: Ours, peer: Peer, questions: Sequence[str], *, peer_threads: Sequence[int | None], log: Log
) -> tuple[list[Answer], list[Answer], dict[str, list[float]]]:
    """Each question through both systems, the order rotating per question; the peer once per thread setting
    (its answers are the same whatever the threads: the first setting's are kept)."""

    def with_threads(n: int | None) -> Callable[[str], Answer]:
        def ask(q: str) -> Answer:
            with torch_threads(n):
                return peer.ask(q)

        return ask

    runs: list[tuple[str, Callable[[str], Answer]]] = [("ours", ours.ask)]
    runs += [(peer_label(n), with_threads(n)) for n in peer_threads]
    # first-call costs (graphs, caches) are not per-query latency
    return rotate(runs, questions, "What is this about?", peer_label(peer_threads[0]), log=log, every=50)


def rotate(
    runs: Sequence[tuple[str, Callable[[Q], Answer]]],
    questions: Sequence[Q],
    warm: Q,
    peer: str,
    *,
    log: Log,
    every: int,
) -> tuple[list[Answer], list[Answer], dict[str, list[float]]]:
    """Every question through every run (label, ask), who goes first rotating per question, after one warm-up
    call each; returns ours' answers, the ``peer`` run's answers and each run's milliseconds."""
    for _, first in runs:
        first(warm)
    ms: dict[str, list[float]] = {label: [] for label, _ in runs}
    mine: list[Answer] = []
    theirs: list[Answer] = []
    for i, q in enumerate(questions):
        got: dict[str, Answer] = {}
        for j in range(len(runs)):
            label, ask = runs[(i + j) % len(runs)]
            got[label] = ask(q)
            ms[label].append(got[label].ms)
        mine.append(got["ours"])
        theirs.append(got[peer])
        if (i + 1) % every == 0:
            log(f"  {i + 1}/{len(questions)} questions")
    return mine, theirs, ms


def peer_label(threads: int | None) -> str:
    import torch

    return (
        f"haystack, {threads} torch thread"
        if threads
        else f"haystack, {torch.get_num_threads()} torch threads"
    )


def latency_block(ms: dict[str, list[float]], mine: Sequence[Answer]) -> dict[str, Any]:
    """p50/p95 per system, and ours/theirs against the peer's faster thread setting (by p50). Also ours up to
    its evidence (the peer's last step) and each of our stages, to show where the time goes."""
    table = {label: latency(v) for label, v in ms.items()}
    peers = [label for label in table if label != "ours"]
    best = min(peers, key=lambda label: table[label]["p50"])
    ours, theirs = table["ours"], table[best]
    to_evidence = through_evidence(mine)
    return {
        "ms": table,
        "peer_compared": best,
        "ratio_ours_over_theirs": {p: round(ours[p] / theirs[p], 3) for p in ("p50", "p95")},
        "speedup_p50": round(theirs["p50"] / ours["p50"], 2),
        "ours_through_evidence_ms": to_evidence,
        "ours_through_evidence_ratio": {p: round(to_evidence[p] / theirs[p], 3) for p in ("p50", "p95")},
        "ours_stages_ms": stage_latencies(mine),
    }


def through_evidence(mine: Sequence[Answer]) -> dict[str, float]:
    """Latency of our stages up to the packed evidence (the peer's last step)."""
    return latency([sum(v for k, v in a.stages_ms.items() if k not in AFTER_EVIDENCE) for a in mine])


def stage_latencies(mine: Sequence[Answer]) -> dict[str, dict[str, float]]:
    """Latency of each of our traced stages, in the order they run."""
    names = dict.fromkeys(k for a in mine for k in a.stages_ms)
    return {k: latency([a.stages_ms[k] for a in mine if k in a.stages_ms]) for k in names}
