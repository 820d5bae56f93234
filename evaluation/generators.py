"""Generators a sweep can run: any OpenAI-compatible model, the offline extractive generator, and a simulated
model whose accuracy by depth follows a known curve (so tests can prove the harness recovers it).

A generator sees one ``Trial`` (the evidence set, the variant, its rendered prompt and the repeat index) and
returns an ``Output``; grading happens in the sweep, never here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from rag.errors import ConfigurationError, GenerationError, RagError
from rag.text import bm25_tokens, count_tokens
from rag.traces.sweeps import compile_curve
from rag.types import Evidence, Prompt

if TYPE_CHECKING:
    from evaluation.datasets import EvidenceSet, Variant

GENERATORS = ("openai", "extractive", "simulated")
DEFAULT_CURVE = "0.60 + 0.35 * (2*d - 1)**2"
SIMULATED_ABSTENTION = "The provided evidence does not answer this question."


@dataclass(frozen=True)
class Trial:
    es: EvidenceSet
    variant: Variant
    prompt: Prompt
    evidence: tuple[
        Evidence, ...
    ]  # the variant's passages as numbered Evidence (empty for non-passage prompts)
    repeat: int
    seed: int


@dataclass(frozen=True)
class Output:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    error: str | None = None


class Generator(Protocol):
    name: str

    def generate(self, trial: Trial) -> Output: ...


@lru_cache(maxsize=4096)
def _tokens(text: str) -> int:
    return count_tokens(text)


# ------------------------------------------------------------------------------------------------ simulated
class SimulatedGenerator:
    """Answers correctly with probability ``curve(depth)`` of the gold, otherwise gives a wrong answer citing a
    distractor. Adjacent gold passages are read as one block at the block's depth (``Variant.block_depths``,
    the scale the depth cells place it on), and with several separate blocks the hardest-placed one limits the
    answer (the lowest). With the gold absent (the control) it abstains with probability ``abstain_rate``,
    else invents a wrong answer. Draws are seeded by (seed, question, cell, repeat): a sweep is reproducible
    run for run, and ``expected_accuracy`` is the true accuracy a sweep should recover for each variant."""

    name = "simulated"

    def __init__(self, curve: str = DEFAULT_CURVE, *, abstain_rate: float = 0.8, seed: int = 0) -> None:
        self.expr = curve
        self.curve = compile_curve(curve)
        if not 0.0 <= abstain_rate <= 1.0:
            raise ConfigurationError(f"abstain rate must be in [0, 1], got {abstain_rate}")
        self.abstain_rate = abstain_rate
        self.seed = seed

    @property
    def model(self) -> str:
        return f"simulated({self.expr})"

    def expected_accuracy(self, variant: Variant) -> float:
        """The probability of a right answer to ``variant`` (0 on the control): what a sound grader scores."""
        depths = variant.block_depths
        return min(self.curve(d) for d in depths) if depths else 0.0

    def generate(self, trial: Trial) -> Output:
        start = time.perf_counter()
        v, es = trial.variant, trial.es
        rng = random.Random(f"{self.seed}:{trial.seed}:{es.qid}:{v.length}:{v.label}:{trial.repeat}")
        u = rng.random()
        gold_n = [i + 1 for i in v.gold_positions]
        other_n = [i + 1 for i, p in enumerate(v.passages) if not p.gold]
        if not gold_n and u < self.abstain_rate:
            text = SIMULATED_ABSTENTION
        elif gold_n and u < self.expected_accuracy(v):
            text = _say(es, gold_answer(es), gold_n[0])
        else:
            text = _say(es, _wrong_answer(es, rng), other_n[0] if other_n else None)
        return Output(
            text, self.model, trial.prompt.n_tokens, _tokens(text), (time.perf_counter() - start) * 1000
        )


def gold_answer(es: EvidenceSet) -> str:
    """A right answer: the first gold string, or one alternative of every group for compound questions."""
    if es.all_of:
        return " and ".join(group[0] for group in es.all_of if group)
    return es.answers[0] if es.answers else ""


def _say(es: EvidenceSet, answer: str, n: int | None) -> str:
    if es.kind == "kv":
        return answer
    return f"{answer} [{n}]." if n is not None else f"{answer}."


def _wrong_answer(es: EvidenceSet, rng: random.Random) -> str:
    from evaluation.graders import normalised_match

    options = [w for w in es.wrong_answers if not normalised_match(w, es.answers)]
    return rng.choice(options) if options else "It is 1,000 units"


# ------------------------------------------------------------------------------------------------ extractive
ScoreFn = Callable[[str, Sequence[str]], Sequence[float]]


def lexical_scores(query: str, sentences: Sequence[str]) -> list[float]:
    """Share of the query's content tokens each sentence holds: a sentence scorer with no model."""
    q = set(bm25_tokens(query))
    return [len(q & set(bm25_tokens(s))) / len(q) if q else 0.0 for s in sentences]


class EmbeddingScorer:
    """Sentence relevance as ``Pipeline.sentence_scores`` computes it (0.7 x dense cosine + 0.3 x lexical
    coverage), with sentence vectors cached: a sweep shows the same passages in many variants."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self._vectors: dict[str, Any] = {}

    def _embed(self, texts: Sequence[str]) -> list[Any]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            for text, vector in zip(missing, self.embedder.embed_queries(missing), strict=True):
                self._vectors[text] = vector
        return [self._vectors[t] for t in texts]

    def __call__(self, query: str, sentences: Sequence[str]) -> list[float]:
        if not sentences:
            return []
        q, *vs = self._embed([query, *sentences])
        lexical = lexical_scores(query, sentences)
        return [float(0.7 * float(v @ q) + 0.3 * lex) for v, lex in zip(vs, lexical, strict=True)]


class ExtractiveGenerator:
    """The offline generator of the query path (``rag.stages.extractive``): quotes the best-scoring evidence
    sentences with their [n]. Position-insensitive by construction, so it is a baseline, not a model test."""

    name = "extractive"

    def __init__(self, score: ScoreFn | None = None, *, max_sentences: int = 3) -> None:
        self.score = score or lexical_scores
        self.max_sentences = max_sentences
        self.model = "extractive"

    def generate(self, trial: Trial) -> Output:
        from rag.stages.extractive import extractive_answer
        from rag.stages.intents import split_intents

        if trial.es.kind != "qa":
            raise ConfigurationError(
                "The extractive generator answers passage questions, not key-value lookups."
            )
        start = time.perf_counter()
        question = trial.es.question
        generated = extractive_answer(
            question,
            split_intents(question),
            trial.evidence,
            score=self.score,
            max_sentences=self.max_sentences,
        )
        return Output(
            generated.text,
            generated.model,
            trial.prompt.n_tokens,
            _tokens(generated.text),
            (time.perf_counter() - start) * 1000,
        )


# ------------------------------------------------------------------------------------------------ LLM
class LLMGenerator:
    """Any OpenAI-compatible chat model through ``rag.llm.client.LLMClient``. Failures become an ``Output`` with
    ``error`` set (graded as wrong and counted per cell), so one timeout does not end a long sweep."""

    name = "openai"

    def __init__(self, client: Any, *, max_tokens: int | None = None, temperature: float = 0.0) -> None:
        self.client = client
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.model = str(getattr(client, "model", "llm"))

    def generate(self, trial: Trial) -> Output:
        start = time.perf_counter()
        try:
            g = self.client.complete(trial.prompt, max_tokens=self.max_tokens, temperature=self.temperature)
        except RagError as exc:
            return Output(
                "",
                self.model,
                trial.prompt.n_tokens,
                0,
                (time.perf_counter() - start) * 1000,
                error=exc.user_message(),
            )
        ms = (time.perf_counter() - start) * 1000
        return Output(
            g.text, g.model, g.prompt_tokens or trial.prompt.n_tokens, g.completion_tokens, ms, g.error
        )


def make_generator(
    name: str,
    *,
    settings: Any = None,
    curve: str = DEFAULT_CURVE,
    abstain_rate: float = 0.8,
    seed: int = 0,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    score: ScoreFn | None = None,
    client: Any = None,
) -> Generator:
    if name == "simulated":
        return SimulatedGenerator(curve, abstain_rate=abstain_rate, seed=seed)
    if name == "extractive":
        return ExtractiveGenerator(score)
    if name == "openai":
        if client is None:
            from rag.llm.client import LLMClient

            if settings is None:
                from rag.config import load_settings

                settings = load_settings()
            client = LLMClient.from_settings(settings)
            if client is None:
                raise GenerationError(
                    "No LLM is configured for --generator openai.",
                    hint="Set RAG_LLM_BASE_URL (and RAG_LLM_MODEL), or use --generator extractive|simulated.",
                )
        return LLMGenerator(client, max_tokens=max_tokens, temperature=temperature)
    raise ConfigurationError(f"Unknown generator {name!r}; expected one of {', '.join(GENERATORS)}.")
