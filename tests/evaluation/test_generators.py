"""Generators: the safe curve parser, the simulated model, the extractive baseline and an LLM double."""

from __future__ import annotations

from collections import Counter

import pytest

from evaluation.datasets import synthetic_sets
from evaluation.generators import (
    SIMULATED_ABSTENTION,
    ExtractiveGenerator,
    LLMGenerator,
    SimulatedGenerator,
    Trial,
    compile_curve,
    lexical_scores,
    make_generator,
)
from evaluation.position import SweepConfig, build_variants, render, run_sweep
from rag.errors import ConfigurationError, GenerationError
from rag.types import Generated, Prompt


def test_default_curve_values() -> None:
    f = compile_curve("0.60 + 0.35 * (2*d - 1)**2")
    assert f(0) == pytest.approx(0.95) and f(1) == pytest.approx(0.95) and f(0.5) == pytest.approx(0.60)
    assert compile_curve("1.5")(0.3) == 1.0 and compile_curve("-d")(0.5) == 0.0  # clipped to a probability
    assert compile_curve("max(0.5, exp(-d)) + 0*pi")(0) == 1.0


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('echo hi')",
        "d.real",
        "open('x')",
        "[d]",
        "d if d else 1",
        "lambda: 1",
        "x + 1",
        "2 ** 1000",
        "1/(d-0.5)",
        "d +",
        "True + d",
    ],
)
def test_curve_rejects_anything_but_arithmetic(expr: str) -> None:
    with pytest.raises(ConfigurationError):
        compile_curve(expr)


def trials(n_repeats: int = 200, label: str = "depth 50%"):  # type: ignore[no-untyped-def]
    es = synthetic_sets(1, 30, seed=1)[0]
    cfg = SweepConfig(lengths=("21",), strategies=(), spacing=False)
    v = next(v for v in build_variants(es, "21", cfg) if v.label == label)
    prompt, evidence = render(es, v)
    return es, [Trial(es, v, prompt, evidence, r, 0) for r in range(n_repeats)]


def test_simulated_model_follows_the_curve_and_is_deterministic() -> None:
    gen = SimulatedGenerator("0.25", seed=3)
    es, ts = trials(400)
    outs = [gen.generate(t) for t in ts]
    right = sum(o.text.startswith(es.answers[0]) for o in outs)
    assert 70 <= right <= 130  # 25% of 400, loosely
    assert [o.text for o in outs] == [gen.generate(t).text for t in ts]
    wrong = [o.text for o in outs if not o.text.startswith(es.answers[0])]
    assert all(w.startswith(es.wrong_answers[0]) for w in wrong)
    gold_n = ts[0].variant.position
    assert all(o.text.endswith(f"[{gold_n}].") for o in outs if o.text.startswith(es.answers[0]))
    assert all(o.prompt_tokens == ts[0].prompt.n_tokens for o in outs)


def test_simulated_model_abstains_on_the_control() -> None:
    gen = SimulatedGenerator(abstain_rate=0.5, seed=1)
    _, ts = trials(400, "control")
    texts = Counter(gen.generate(t).text == SIMULATED_ABSTENTION for t in ts)
    assert 160 <= texts[True] <= 240


def test_extractive_generator_quotes_the_gold_wherever_it_is() -> None:
    sets = synthetic_sets(6, 30, seed=2)
    result = run_sweep(
        SweepConfig(generator="extractive", scorer="lexical", lengths=("10",), strategies=(), spacing=False),
        sets=sets,
    )
    depth = [c for c in result.cells if c.kind == "depth"]
    assert all(c.accuracy == 1.0 for c in depth)  # lexical scoring is blind to position
    assert all(c.citation_accuracy == 1.0 for c in depth)
    control = result.cell("control")
    assert control.accuracy == 0.0
    assert lexical_scores("refund window", ["the refund window is 30 days", "badges"]) == [1.0, 0.0]


class FakeLLM:
    """A queue of canned answers, recording the prompts it was sent (no network)."""

    model = "fake-llm"

    def __init__(self, answers: list[str | Exception]) -> None:
        self.answers = list(answers)
        self.prompts: list[Prompt] = []

    def complete(
        self, prompt: Prompt, *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> Generated:
        self.prompts.append(prompt)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Generated(answer, self.model, prompt_tokens=1234, completion_tokens=7)


def test_llm_generator_records_usage_and_errors() -> None:
    es, ts = trials(2)
    fake = FakeLLM(
        [f"It is {es.answers[0]} [{ts[0].variant.position}].", GenerationError("timed out", hint="retry")]
    )
    gen = LLMGenerator(fake, temperature=0.7)
    ok, failed = gen.generate(ts[0]), gen.generate(ts[1])
    assert ok.prompt_tokens == 1234 and ok.completion_tokens == 7 and ok.error is None
    assert failed.error is not None and "timed out" in failed.error and failed.text == ""
    assert fake.prompts[0].user == ts[0].prompt.user


def test_sweep_with_an_llm_double_grades_its_answers() -> None:
    sets = synthetic_sets(2, 30, seed=4)
    answers: list[str | Exception] = []
    for es in sets:
        answers += [f"{es.answers[0]} [1]."] * 5 + ["The provided evidence does not answer this question."]
    cfg = SweepConfig(generator="openai", lengths=("10",), strategies=(), spacing=False, price_prompt=1.0)
    result = run_sweep(cfg, sets=sets, generator=LLMGenerator(FakeLLM(answers)))
    top = result.cell("depth 0%")
    assert top.accuracy == 1.0 and top.citation_accuracy == 1.0
    assert result.cell("depth 50%").citation_accuracy == 0.0  # [1] is not where the gold is
    assert result.cell("control").abstention_rate == 1.0
    assert top.cost == pytest.approx(1234 / 1e6)


def test_make_generator() -> None:
    assert isinstance(make_generator("simulated"), SimulatedGenerator)
    assert isinstance(make_generator("extractive"), ExtractiveGenerator)
    with pytest.raises(ConfigurationError):
        make_generator("gpt-17")

    class NoLLM:
        llm_base_url = None
        llm_model = "m"

    with pytest.raises(GenerationError, match="No LLM"):
        make_generator("openai", settings=NoLLM())
