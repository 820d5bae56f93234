"""Generation: the prompt, and the answer: the model's (rag/stages/generate.py) when the request has an LLM, else
(and when the model fails) quoted evidence (rag/stages/extractive.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from rag.components.scoring import Scoring
from rag.config import Settings
from rag.errors import GenerationError
from rag.protocols import LLM
from rag.request import State
from rag.stages.abstention import abstain, final_answer, partial_notice
from rag.stages.answer_check import unanswered
from rag.stages.citations import is_model_answer
from rag.stages.extractive import extractive_answer
from rag.stages.prompt import build_prompt
from rag.types import Evidence, Generated, Intent, Reading, covered_intents

# The weight of a sentence's passage in choosing the quote that answers (dev + sample accuracy 44/70 at 0,
# 45/70 at 0.3, 46/70 at 0.5; docs/evaluation.md). The abstention checks score sentences alone.
QUOTE_CONTEXT = 0.5

QUOTES_PER_INTENT = 3  # the reader's answer quotes at most this many sentences for each part of the question


class Extractive:
    """The answer quoted from the evidence: the sentences the reader vouches for, else the ones the sentence
    scorer ranks highest, for each covered part of the question."""

    def __init__(self, scoring: Scoring) -> None:
        self.scoring = scoring

    def answer(
        self,
        question: str,
        intents: Sequence[Intent],
        evidence: Sequence[Evidence],
        uncovered: Sequence[Intent],
        reading: Reading | None = None,
    ) -> Generated:
        covered = covered_intents(intents, uncovered)
        if reading is not None:
            # the reader's probabilities, looked up by (intent, sentence); a sentence it did not read scores 0
            rows = {i.text: row for row, i in enumerate(intents)}
            sentences = reading.sentences

            def probability(query: str, texts: Sequence[str]) -> list[float]:
                p = reading.probabilities[rows[query]] if query in rows else np.zeros(len(sentences))
                by_text: dict[str, float] = {}
                for s, value in zip(sentences, p, strict=True):
                    by_text[s.text] = max(by_text.get(s.text, 0.0), float(value))
                    if s.row:
                        by_text[s.row] = max(by_text.get(s.row, 0.0), float(value))
                return [by_text.get(t, 0.0) for t in texts]

            return extractive_answer(
                question,
                covered,
                evidence,
                score=probability,
                min_score=reading.answer_bar,
                tie_band=1.0 - reading.keep_ratio,
                sentences=sentences,
                max_sentences=QUOTES_PER_INTENT * len(covered),
                dependency=self.scoring.models.dependency_model,
            )
        scorer = self.scoring.sentence_scorer(evidence, context=QUOTE_CONTEXT)
        return extractive_answer(
            question, covered, evidence, score=scorer, dependency=self.scoring.models.dependency_model
        )

    def of(self, state: State) -> Generated:
        """The extractive answer to the request as its stages left it."""
        return self.answer(
            state.question.text, state.intents, state.evidence, state.coverage.uncovered, state.reading
        )


class BuildPrompt:
    name = "prompt"

    def __init__(self, *, repeat_question: bool, mode: str) -> None:
        self.repeat_question, self.mode = repeat_question, mode

    def run(self, state: State) -> State:
        q = state.question
        with state.recorder.stage(self.name) as d:
            prompt = build_prompt(
                q.text,
                state.evidence,
                history=q.history,
                facts=q.facts,
                repeat_question=self.repeat_question,
                mode=self.mode,
            )
            d["tokens"] = prompt.n_tokens
        return replace(state, prompt=prompt)


class Generate:
    """Nothing when the answer abstains; the model's answer when the request has an LLM (quoted evidence, with
    the model's failure in the trace, when it fails); else quoted evidence."""

    name = "generate"

    def __init__(self, settings: Settings, extractive: Extractive) -> None:
        self.settings, self.extractive = settings, extractive

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            abstention = abstain(state.coverage, has_evidence=bool(state.evidence))
            state = replace(state, abstention=abstention)
            generated = self.generate(state, state.llm)
            missing = unanswered(generated.text, state.intents, state.coverage.uncovered, state.reading)
            answer = final_answer(
                state.question.text, state.intents, state.coverage, generated, abstention, unanswered=missing
            )
            notice = "" if abstention else answer.removeprefix(generated.text)
            model_answer = is_model_answer(generated, use_llm=state.plan.use_llm, abstained=state.abstained)
            d.update(model=generated.model, error=generated.error)
        excerpts = () if abstention else generated.excerpts
        return replace(
            state,
            generated=generated,
            answer=answer,
            excerpts=excerpts,
            notice=notice,
            model_answer=model_answer,
        )

    @staticmethod
    def notice_for(state: State, generated: Generated) -> str:
        """The note that follows ``generated`` (another answer to the same request, e.g. the extractive fallback)
        in the answer: the parts it leaves unanswered."""
        missing = unanswered(generated.text, state.intents, state.coverage.uncovered, state.reading)
        return partial_notice(state.question.text, state.intents, missing, generated)

    def generate(self, state: State, llm: LLM | None) -> Generated:
        if state.abstention is not None:
            return Generated(text="", model="none")
        if llm is not None:
            from rag.stages.generate import generate

            assert state.prompt is not None
            s = self.settings
            try:
                return generate(state.prompt, state.evidence, state.question.text, llm, s.generation_mode, s)
            except GenerationError as exc:
                # The user still gets an answer (quoted evidence); the trace keeps the LLM's failure.
                fallback = self.extractive.of(state)
                return Generated(
                    text=fallback.text,
                    model=f"extractive (fallback; {s.llm_model} failed)",
                    error=str(exc),
                    excerpts=fallback.excerpts,
                )
        return self.extractive.of(state)
