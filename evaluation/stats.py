"""Statistics that decide what a sweep shows: intervals per cell, paired tests between two orderings, and how
many runs a difference needs before it stops being noise.

With n runs the standard error of an accuracy p is sqrt(p(1-p)/n): at p = 0.7 and n = 20 it is about 10 points,
so a 70% middle against a 90% edge is not yet a difference. Every function here is pure and deterministic
(the bootstrap takes a seed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from rag.traces.sweeps import Comparison

PAIRED_TESTS = ("mcnemar", "midp", "bootstrap")


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(sps.norm.ppf(1.0 - (1.0 - confidence) / 2.0))


def standard_error(p: float, n: int) -> float:
    """sqrt(p(1-p)/n); 0 runs have no error estimate (inf)."""
    return math.inf if n <= 0 else math.sqrt(p * (1.0 - p) / n)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion; well-behaved at 0/n, n/n and small n (unlike the Wald interval).

    ``n == 0`` gives the uninformative (0, 1).
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Clamp rounding noise only; the interval of 0/n starts exactly at 0 and n/n ends exactly at 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def discordant_counts(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """(a right & b wrong, a wrong & b right) over paired outcomes."""
    if len(a) != len(b):
        raise ValueError("paired outcomes need the same length")
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return a_only, b_only


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of b successes in b + c discordant pairs at p = 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * sps.binom.cdf(min(b, c), n, 0.5)))


def mcnemar_midp(b: int, c: int) -> float:
    """Mid-p McNemar: the exact p-value minus the probability of the observed table (less conservative, and
    closer to nominal size in small samples; Fagerland, Lydersen & Laake 2013)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    return float(min(1.0, 2.0 * sps.binom.cdf(k, n, 0.5) - sps.binom.pmf(k, n, 0.5)))


@dataclass(frozen=True)
class BootstrapResult:
    diff: float
    ci_low: float
    ci_high: float
    p_value: float


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> BootstrapResult:
    """Resample pairs with replacement; CI of mean(a) - mean(b) by percentiles; two-sided p-value as twice the
    share of resampled differences on the far side of zero (the percentile-inversion p-value)."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError("paired outcomes need the same length")
    n = len(x)
    if n == 0:
        return BootstrapResult(0.0, 0.0, 0.0, 1.0)
    d = x - y
    diff = float(d.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    step = max(1, 2_000_000 // n)  # bound memory: at most ~2M indices at once
    for start in range(0, n_boot, step):
        stop = min(n_boot, start + step)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = d[idx].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    tail = min(float(np.mean(means <= 0.0)), float(np.mean(means >= 0.0)))
    p = 1.0 if np.all(d == 0) else float(min(1.0, 2.0 * tail))
    return BootstrapResult(diff, float(low), float(high), p)


def runs_needed(p1: float, p2: float, *, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Runs per arm for a two-sided test of two proportions to detect p1 vs p2 (normal approximation,
    Fleiss without continuity correction). None when p1 == p2: no number of runs separates equal rates."""
    if abs(p1 - p2) < 1e-12:
        return None
    z_a = float(sps.norm.ppf(1 - alpha / 2))
    z_b = float(sps.norm.ppf(power))
    pbar = (p1 + p2) / 2
    num = z_a * math.sqrt(2 * pbar * (1 - pbar)) + z_b * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return int(math.ceil((num / (p1 - p2)) ** 2))


def compare_paired(
    a: Sequence[bool],
    b: Sequence[bool],
    *,
    label_a: str = "a",
    label_b: str = "b",
    test: str = "mcnemar",
    alpha: float = 0.05,
    power: float = 0.8,
    n_boot: int = 2_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Comparison:
    """Compare two variants on the same pairs; ``within_noise`` when the chosen test does not reject at ``alpha``."""
    if test not in PAIRED_TESTS:
        raise ValueError(f"unknown paired test {test!r}; expected one of {', '.join(PAIRED_TESTS)}")
    n = len(a)
    a_only, b_only = discordant_counts(a, b)
    boot = paired_bootstrap(
        [float(x) for x in a], [float(y) for y in b], n_boot=n_boot, seed=seed, confidence=confidence
    )
    if test == "mcnemar":
        p = mcnemar_exact(a_only, b_only)
    elif test == "midp":
        p = mcnemar_midp(a_only, b_only)
    else:
        p = boot.p_value
    acc_a = sum(map(bool, a)) / n if n else 0.0
    acc_b = sum(map(bool, b)) / n if n else 0.0
    return Comparison(
        a=label_a,
        b=label_b,
        n_pairs=n,
        acc_a=acc_a,
        acc_b=acc_b,
        diff=acc_a - acc_b,
        p_value=p,
        test=test,
        within_noise=p >= alpha,
        runs_needed=runs_needed(acc_a, acc_b, alpha=alpha, power=power),
        a_only=a_only,
        b_only=b_only,
        ci_low=boot.ci_low,
        ci_high=boot.ci_high,
    )
