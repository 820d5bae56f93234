"""Statistics: Wilson intervals against published values, McNemar against scipy, power, paired comparisons."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from evaluation.stats import (
    compare_paired,
    discordant_counts,
    mcnemar_exact,
    mcnemar_midp,
    paired_bootstrap,
    runs_needed,
    standard_error,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3 (Wilson).
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        # Symmetric case worked by hand: centre 0.5, half-width 0.2634.
        (5, 10, 0.2366, 0.7634),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=5e-5)
    assert hi == pytest.approx(high, abs=5e-5)


def test_wilson_edges_and_confidence() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(20, 20)
    assert hi == 1.0 and 0.8 < lo < 0.9
    narrow, wide = wilson_interval(50, 100, 0.90), wilson_interval(50, 100, 0.99)
    assert wide[0] < narrow[0] and wide[1] > narrow[1]
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


@given(st.integers(0, 300), st.integers(1, 300))
def test_wilson_contains_the_estimate(k: int, n: int) -> None:
    k = min(k, n)
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_standard_error_matches_the_mission_figures() -> None:
    assert standard_error(0.7, 20) == pytest.approx(0.1025, abs=1e-4)  # "about 10 points"
    assert standard_error(0.7, 100) == pytest.approx(0.0458, abs=1e-4)  # "4.6 points"


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (5, 1), (7, 0), (10, 10), (3, 12), (40, 25), (0, 9)])
def test_mcnemar_exact_equals_scipy_binomtest(b: int, c: int) -> None:
    expected = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_mcnemar_midp_is_exact_minus_half_the_observed_table() -> None:
    from scipy.stats import binom

    b, c = 7, 2
    assert mcnemar_midp(b, c) == pytest.approx(mcnemar_exact(b, c) - binom.pmf(2, 9, 0.5))
    assert mcnemar_midp(b, c) < mcnemar_exact(b, c)
    assert mcnemar_midp(0, 0) == 1.0


def test_discordant_counts() -> None:
    assert discordant_counts([1, 1, 0, 0, 1], [1, 0, 1, 0, 0]) == (2, 1)
    with pytest.raises(ValueError):
        discordant_counts([1], [1, 0])


def test_runs_needed_for_the_mission_example() -> None:
    # 70% middle vs 90% edge: ~62 runs per arm for 80% power at alpha 0.05 (Fleiss, no continuity correction).
    assert runs_needed(0.9, 0.7) == 62
    assert runs_needed(0.7, 0.9) == 62
    assert runs_needed(0.5, 0.5) is None
    assert runs_needed(0.9, 0.7, power=0.9) > 62


def test_paired_bootstrap_is_seeded_and_centred() -> None:
    a = [1] * 18 + [0] * 2
    b = [1] * 14 + [0] * 6
    one, two = paired_bootstrap(a, b, seed=3), paired_bootstrap(a, b, seed=3)
    assert one == two
    assert one.diff == pytest.approx(0.2)
    assert one.ci_low <= 0.2 <= one.ci_high
    same = paired_bootstrap(a, a)
    assert same.p_value == 1.0 and same.diff == 0.0


def test_twenty_runs_of_70_vs_90_percent_are_within_noise() -> None:
    # 12 pairs both right, 6 only at the edge, 2 only in the middle: 90% vs 70% over 20 paired runs.
    edge = [True] * 12 + [True] * 6 + [False] * 2
    middle = [True] * 12 + [False] * 6 + [True] * 2
    for test in ("mcnemar", "midp", "bootstrap"):
        cmp = compare_paired(edge, middle, label_a="edge", label_b="middle", test=test)
        assert cmp.within_noise, test
        assert cmp.diff == pytest.approx(0.2)
        assert cmp.runs_needed == 62
        assert "within noise" in cmp.message


def test_exact_mcnemar_is_conservative_where_the_bootstrap_is_not() -> None:
    # Four discordant pairs, all one way: the bootstrap (which cannot resample what it never saw) calls this
    # significant; the exact test does not. That is why McNemar exact is the default.
    edge = [True] * 18 + [False] * 2
    middle = [True] * 14 + [False] * 6
    assert compare_paired(edge, middle, test="mcnemar").within_noise
    assert compare_paired(edge, middle, test="mcnemar").p_value == pytest.approx(0.125)


def test_a_large_difference_is_not_noise() -> None:
    a = [True] * 95 + [False] * 5
    b = [True] * 60 + [False] * 40
    cmp = compare_paired(a, b)
    assert not cmp.within_noise and cmp.p_value < 1e-6
    assert cmp.a_only == 35 and cmp.b_only == 0
    with pytest.raises(ValueError):
        compare_paired(a, b, test="t-test")
