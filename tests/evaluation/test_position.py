"""Position sweeps: variants move only the gold, the sweep recovers a known curve within its intervals (one- and
two-source questions, at a length where depths round), and a 20-run difference is flagged as noise."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.datasets import EvidenceSet, Passage, synthetic_sets
from evaluation.generators import Output, SimulatedGenerator, Trial
from evaluation.position import (
    SweepConfig,
    build_variants,
    depth_to_start,
    distractors_for,
    parse_depths,
    parse_length,
    place,
    render,
    run_sweep,
    spacing_positions,
)
from rag.errors import ConfigurationError
from rag.stages.pack import STRATEGIES
from rag.traces.sweeps import compile_curve, load_sweep, save_sweep, sweep_figure

CURVE = "0.60 + 0.35 * (2*d - 1)**2"


def without_gold(passages: tuple[Passage, ...]) -> list[str]:
    return [p.pid for p in passages if not p.gold]


def without_gold_text(user: str, es: EvidenceSet) -> str:
    gold = es.gold[0]
    text = re.sub(rf"\[\d+\] {re.escape(gold.title)}\n{re.escape(gold.text)}", "", user)
    text = re.sub(r"\[\d+\]", "[n]", text)
    return re.sub(r"\n{2,}", "\n", text)


def config(**kw: object) -> SweepConfig:
    base: dict[str, object] = {
        "generator": "simulated",
        "lengths": ("10",),
        "strategies": (),
        "control": False,
        "spacing": False,
    }
    base.update(kw)
    return SweepConfig(**base)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ variants
def test_place_moves_only_the_gold() -> None:
    d = [Passage(f"d{i}", f"text {i}") for i in range(4)]
    g = [Passage("g", "gold", gold=True)]
    for pos in range(5):
        out = place(d, g, [pos])
        assert out[pos].pid == "g"
        assert without_gold(out) == ["d0", "d1", "d2", "d3"]
    with pytest.raises(ValueError):
        place(d, g, [5])


@given(st.integers(1, 40), st.integers(1, 3), st.data())
@settings(max_examples=60, deadline=None)
def test_place_keeps_distractor_order_for_any_positions(
    n_distractors: int, n_gold: int, data: st.DataObject
) -> None:
    d = [Passage(f"d{i}", "x") for i in range(n_distractors)]
    g = [Passage(f"g{i}", "y", gold=True) for i in range(n_gold)]
    positions = data.draw(
        st.lists(st.integers(0, n_distractors + n_gold - 1), min_size=n_gold, max_size=n_gold, unique=True)
    )
    out = place(d, g, positions)
    assert len(out) == n_distractors + n_gold
    assert without_gold(out) == [p.pid for p in d]
    assert [out[p].pid for p in positions] == [x.pid for x in g]


def test_depth_to_start() -> None:
    assert [depth_to_start(d, 21) for d in (0, 0.25, 0.5, 0.75, 1)] == [0, 5, 10, 15, 20]
    assert [depth_to_start(d, 20) for d in (0, 0.5, 1)] == [0, 10, 19]  # 9.5 rounds half up
    assert depth_to_start(0.5, 1) == 0


def test_variants_are_token_identical_except_for_the_gold_position() -> None:
    es = synthetic_sets(1, 40, seed=3)[0]
    cfg = config(lengths=("20",), depths=(0, 0.25, 0.5, 0.75, 1))
    variants = build_variants(es, "20", cfg)
    assert [v.position for v in variants] == [1, 6, 11, 15, 20]
    assert all(len(v.passages) == 20 for v in variants)
    reference = without_gold(variants[0].passages)
    prompts = [render(es, v)[0] for v in variants]
    for v, prompt in zip(variants, prompts, strict=True):
        # Same distractors, same order; only the gold moved ...
        assert without_gold(v.passages) == reference
        # ... so the rendered prompts hold exactly the same tokens (passage labels [1..20] are positional and
        # the same set in every variant) ...
        assert Counter(prompt.user.split()) == Counter(prompts[0].user.split())
        assert prompt.n_tokens == prompts[0].n_tokens
        assert prompt.system == prompts[0].system
        # ... and removing the gold passage leaves the identical text, up to the positional labels.
        assert without_gold_text(prompt.user, es) == without_gold_text(prompts[0].user, es)
        assert es.gold[0].text in prompt.user and es.gold[0].text not in without_gold_text(prompt.user, es)


def test_paper_prompts_are_token_identical_too() -> None:
    es = synthetic_sets(1, 30, seed=5)[0]
    variants = build_variants(es, "10", config())
    users = [render(es, v, "paper")[0].user for v in variants]
    assert all(u.startswith("Write a high-quality answer") for u in users)
    assert all(Counter(u.split()) == Counter(users[0].split()) for u in users)


def test_strategy_variants_follow_edge_pack() -> None:
    es = synthetic_sets(1, 30, seed=1)[0]
    # Make the gold the 3rd-ranked passage of 10: edges puts rank 3 second (A C E .. D B -> ranks 1,3,5,..,4,2).
    gold = Passage(es.gold[0].pid, es.gold[0].text, es.gold[0].title, gold=True, rank=3)
    ds = tuple(
        Passage(p.pid, p.text, p.title, rank=(i + 1 if i < 2 else i + 2))
        for i, p in enumerate(es.distractors)
    )
    es = EvidenceSet(es.qid, es.question, es.answers, (gold,), ds)
    variants = {
        v.label: v for v in build_variants(es, "10", config(strategies=("edges", "best_first", "best_last")))
    }
    assert variants["best_first"].position == 3
    assert variants["best_last"].position == 8
    assert variants["edges"].position == 2
    assert [p.rank for p in variants["edges"].passages] == [1, 3, 5, 7, 9, 10, 8, 6, 4, 2]


def test_control_spacing_and_lengths() -> None:
    es = synthetic_sets(1, 30, seed=2, n_gold=2)[0]
    vs = build_variants(es, "10", config(control=True, spacing=True, strategies=("edges",)))
    by = {v.label: v for v in vs}
    assert by["control"].gold_positions == () and len(by["control"].passages) == 8
    assert without_gold(by["control"].passages) == without_gold(by["depth 50%"].passages)
    assert by["adjacent"].gold_positions == (0, 1)
    assert by["split"].gold_positions == (0, 9)
    assert by["separated"].gold_positions == (3, 6)
    assert by["depth 50%"].gold_positions == (4, 5)  # the pair stays together when it moves
    assert spacing_positions("separated", 3, 20) == [5, 10, 14]
    # Too few distractors: no variants rather than a shorter context.
    assert build_variants(es, "40", config()) == []
    # Token lengths: the same distractor prefix for every variant, long enough to reach the target.
    ds = distractors_for(es, "300t")
    assert ds is not None and 0 < len(ds) < 30
    token_variants = build_variants(es, "300t", config())
    assert {tuple(without_gold(v.passages)) for v in token_variants} == {tuple(p.pid for p in ds)}


def test_parsers() -> None:
    assert parse_depths("0,25,50,75,100") == (0, 0.25, 0.5, 0.75, 1)
    assert parse_depths("0,0.5,1") == (0, 0.5, 1)
    assert parse_length("20") == ("passages", 20)
    assert parse_length("4k") == ("tokens", 4000) and parse_length("1500t") == ("tokens", 1500)
    with pytest.raises(ConfigurationError):
        parse_length("lots")


# ------------------------------------------------------------------------------------------------ sweeps
def test_sweep_recovers_the_known_curve_at_1000_runs_per_cell() -> None:
    sets = synthetic_sets(20, 30, seed=11)
    cfg = config(
        lengths=("21",), repeats=50, seed=7, curve=CURVE, confidence=0.99
    )  # 20 questions x 50 = 1000
    result = run_sweep(cfg, sets=sets)
    truth = compile_curve(CURVE)
    depth_cells = [c for c in result.cells if c.kind == "depth"]
    assert [c.depth for c in depth_cells] == [0, 0.25, 0.5, 0.75, 1]
    for c in depth_cells:
        assert c.n == 1000
        assert c.realised_depth == pytest.approx(c.depth)
        assert c.expected == pytest.approx(truth(c.depth))
        assert c.ci_low <= truth(c.depth) <= c.ci_high, (c.label, c.accuracy, truth(c.depth))
        assert c.ci_high - c.ci_low < 0.08  # 1000 runs: about +-3 points at 99%
        assert c.citation_accuracy == pytest.approx(
            c.accuracy
        )  # the simulated model cites what it answers from
    # The U shape is resolved: both edges beat the middle, and the paired test says so.
    mid = result.cell("depth 50%")
    assert result.cell("depth 0%").ci_low > mid.ci_high and result.cell("depth 100%").ci_low > mid.ci_high
    edge_vs_mid = next(c for c in result.comparisons if c.b.endswith("depth 50%"))
    assert not edge_vs_mid.within_noise and edge_vs_mid.n_pairs == 1000


def true_accuracy(positions: tuple[int, ...], total: int, curve: str = CURVE) -> float:
    """The simulated model's definition, written out: adjacent gold passages form one block, read at
    start / (L - size) (0 flush with the front, 1 flush with the back); the hardest-placed block limits."""
    f = compile_curve(curve)
    blocks: list[list[int]] = []
    for i in sorted(positions):
        if blocks and blocks[-1][-1] == i - 1:
            blocks[-1].append(i)
        else:
            blocks.append([i])
    if not blocks:
        return 0.0
    return min(f(b[0] / (total - len(b)) if total > len(b) else 0.0) for b in blocks)


def test_a_gold_block_is_at_the_depth_it_was_placed_at() -> None:
    es = synthetic_sets(1, 30, seed=2, n_gold=2)[0]
    by = {
        v.label: v
        for v in build_variants(es, "10", config(spacing=True, control=True, strategies=("best_first",)))
    }
    # A pair flush with the front is at 0% and one flush with the back at 100%, not at 1/9 and 8/9.
    assert by["depth 0%"].block_depths == (0.0,) and by["depth 100%"].block_depths == (1.0,)
    assert by["depth 50%"].gold_positions == (4, 5) and by["depth 50%"].block_depths == (0.5,)
    assert by["split"].gold_blocks == ((0, 1), (9, 1)) and by["split"].block_depths == (0.0, 1.0)
    assert by["separated"].block_depths == (3 / 9, 6 / 9)
    assert by["best_first"].gold_positions == (0, 1) and by["best_first"].realised_depth == 0.0
    gen = SimulatedGenerator(CURVE)
    assert gen.expected_accuracy(by["depth 0%"]) == pytest.approx(0.95)
    assert gen.expected_accuracy(by["split"]) == pytest.approx(0.95)
    assert gen.expected_accuracy(by["separated"]) == pytest.approx(0.6 + 0.35 / 9)  # the deeper-in of the two
    assert gen.expected_accuracy(by["control"]) == 0.0
    one = synthetic_sets(1, 30, seed=2)[0]
    assert [v.block_depths for v in build_variants(one, "10", config())] == [
        (0.0,),
        (2 / 9,),  # 25% of 9 gaps is 2.25: the passage sits at position 3, 22% deep
        (5 / 9,),
        (7 / 9,),
        (1.0,),
    ]


def test_sweep_recovers_the_true_value_of_every_cell_with_one_and_two_source_questions() -> None:
    # Half the questions have two gold passages (like 7 of the sample corpus's 25), at 10 passages, where a
    # requested depth rounds to a slot (25% of one passage's 9 gaps -> slot 2, 22% deep). Every cell's 95%
    # interval must hold its true accuracy: the curve at the depth each run's gold block realised, averaged
    # over the cell's runs (the curve itself at 0% and 100%), and the sweep's own 'expected' must agree.
    L = 10
    sets = synthetic_sets(10, 30, seed=21) + synthetic_sets(10, 30, seed=22, n_gold=2, prefix="pair")
    cfg = config(lengths=(str(L),), repeats=100, seed=3, strategies=STRATEGIES, spacing=True, control=True)
    result = run_sweep(cfg, sets=sets)
    truth = compile_curve(CURVE)
    by_cell: dict[str, list[float]] = {}
    for r in result.runs:
        by_cell.setdefault(r["label"], []).append(true_accuracy(tuple(p - 1 for p in r["gold_positions"]), L))
    assert len(result.cells) == 5 + len(STRATEGIES) + 3 + 1
    for c in result.cells:
        expected = sum(by_cell[c.label]) / len(by_cell[c.label])
        if c.kind == "depth":
            assert c.n == 2000
            # The placement rule, from the requested depth alone: block start round-half-up(d * (L - g)).
            starts = [(math.floor(c.depth * (L - len(es.gold)) + 0.5), len(es.gold)) for es in sets]
            assert expected == pytest.approx(sum(truth(s / (L - g)) for s, g in starts) / len(starts))
            assert c.realised_depth == pytest.approx(sum(s / (L - g) for s, g in starts) / len(starts))
            if c.depth in (0.0, 1.0):
                assert expected == pytest.approx(truth(c.depth))  # the edges are exactly the curve's
        assert c.ci_low <= expected <= c.ci_high, (c.label, c.accuracy, (c.ci_low, c.ci_high), expected)
        assert c.expected == pytest.approx(expected), c.label
    assert result.cell("control").expected == 0.0
    assert result.cell("separated").expected == pytest.approx(0.6 + 0.35 / 9)
    assert not any("expected accuracy" in w for w in result.warnings)


class _Overclaiming:
    """The simulated model, claiming 20 points more than it delivers: the sweep must notice."""

    name = "simulated"
    model = "overclaiming"

    def __init__(self) -> None:
        self.inner = SimulatedGenerator(CURVE, seed=1)

    def expected_accuracy(self, variant: object) -> float:
        return min(1.0, self.inner.expected_accuracy(variant) + 0.2)  # type: ignore[arg-type]

    def generate(self, trial: Trial) -> Output:
        return self.inner.generate(trial)


def test_a_cell_whose_interval_misses_its_expected_accuracy_is_reported() -> None:
    sets = synthetic_sets(10, 30, seed=23)
    result = run_sweep(config(repeats=20, depths=(0.25, 0.5)), sets=sets, generator=_Overclaiming())
    assert all(c.expected is not None and c.expected > c.ci_high for c in result.cells)
    warning = next(w for w in result.warnings if "expected accuracy" in w)
    assert warning.startswith("2 cell(s) exclude") and "L=10 depth 50%" in warning
    assert all(
        c.expected is None
        for c in run_sweep(config(generator="extractive", scorer="lexical"), sets=sets[:2]).cells
    )


def test_twenty_runs_of_a_real_difference_are_flagged_as_noise() -> None:
    # 90% at the edges, 70% in the middle (the mission's example); 20 questions x 1 run per cell.
    sets = synthetic_sets(20, 30, seed=12)
    result = run_sweep(
        config(lengths=("21",), depths=(0, 0.5), curve="0.7 + 0.2*(2*d-1)**2", seed=1), sets=sets
    )
    cmp = result.comparisons[0]
    assert cmp.n_pairs == 20
    assert cmp.within_noise
    assert cmp.runs_needed is not None and cmp.runs_needed > 20
    assert any("within noise" in w for w in result.warnings)
    # The same difference with 50 times the runs is not noise.
    big = run_sweep(
        config(lengths=("21",), depths=(0, 0.5), curve="0.7 + 0.2*(2*d-1)**2", seed=1, repeats=50), sets=sets
    )
    assert not big.comparisons[0].within_noise


def test_control_measures_abstention_and_invention() -> None:
    sets = synthetic_sets(10, 30, seed=13)
    result = run_sweep(config(control=True, repeats=40, abstain_rate=0.75), sets=sets)
    ctl = result.cell("control")
    assert ctl.n == 400 and ctl.accuracy == 0.0  # nothing to answer from: never right
    assert ctl.citation_accuracy is None
    assert 0.68 < ctl.abstention_rate < 0.82
    assert all(c.abstention_rate == 0 for c in result.cells if c.kind == "depth")


def test_sweep_is_reproducible_and_costs_tokens() -> None:
    sets = synthetic_sets(4, 30, seed=14)
    cfg = dict(repeats=3, seed=5, price_prompt=2.0, price_completion=10.0, strategies=("edges", "best_last"))
    one, two = run_sweep(config(**cfg), sets=sets), run_sweep(config(**cfg), sets=sets)
    assert [r["output"] for r in one.runs] == [r["output"] for r in two.runs]
    assert [c.accuracy for c in one.cells] == [c.accuracy for c in two.cells]
    cell = one.cells[0]
    assert cell.prompt_tokens > 100
    assert cell.cost == pytest.approx((cell.prompt_tokens * 2.0 + cell.completion_tokens * 10.0) / 1e6)
    other = run_sweep(config(**{**cfg, "seed": 6}), sets=sets)
    assert [r["output"] for r in other.runs] != [r["output"] for r in one.runs]


def test_json_shape_save_load_and_plot(tmp_path: Path) -> None:
    sets = synthetic_sets(5, 30, seed=15) + synthetic_sets(2, 30, seed=16, n_gold=2, prefix="multi")
    cfg = config(
        lengths=("10", "20"), control=True, spacing=True, strategies=("edges", "best_first"), repeats=2
    )
    result = run_sweep(cfg, sets=sets)
    data = result.to_json()
    required = {
        "depth",
        "position",
        "length",
        "strategy",
        "n",
        "accuracy",
        "ci_low",
        "ci_high",
        "strict_accuracy",
        "citation_accuracy",
        "abstention_rate",
        "prompt_tokens",
        "latency_ms",
        "cost",
    }
    assert all(required <= set(c) for c in data["cells"])
    assert {c["length"] for c in data["cells"]} == {10, 20}
    assert {c["strategy"] for c in data["cells"]} >= {
        "fixed",
        "edges",
        "best_first",
        "control",
        "spacing:split",
    }
    assert all(
        {"a", "b", "n_pairs", "diff", "p_value", "test", "within_noise", "runs_needed"} <= set(c)
        for c in data["comparisons"]
    )
    paths = save_sweep(result, tmp_path / "out")
    for name in ("sweep", "cells", "comparisons", "runs", "plot"):
        assert paths[name].is_file(), name
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    loaded = load_sweep(tmp_path / "out")
    assert loaded.to_json()["cells"] == data["cells"]
    assert len(loaded.runs) == len(result.runs)
    fig = sweep_figure(loaded)
    assert len(fig.axes) == 2
    with pytest.raises(ConfigurationError):
        load_sweep(tmp_path / "nothing-here")


def test_bad_configurations_are_user_errors() -> None:
    sets = synthetic_sets(2, 30)
    with pytest.raises(ConfigurationError):
        run_sweep(config(strategies=("middle_out",)), sets=sets)
    with pytest.raises(ConfigurationError):
        run_sweep(config(repeats=0), sets=sets)
    with pytest.raises(ConfigurationError, match="unique"):
        run_sweep(config(), sets=sets + sets)
    with pytest.raises(ConfigurationError, match="not allowed"):
        run_sweep(config(curve="__import__('os').system('true')"), sets=sets)
