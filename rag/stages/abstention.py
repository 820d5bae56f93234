"""Abstention: say so when the evidence does not answer, and name the part of the question left uncovered."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from rag.request import State
from rag.stages.budget import intents_of, score_of
from rag.types import Abstention, Candidate, Coverage, Generated, Intent

NOT_ANSWERABLE = "I can't answer this from the policies you have access to"
PARTIAL = "I could not find anything about"
NOTHING_SELECTED = "no passage was retrieved"  # the reason when no evidence was selected and none was given


def decide_abstention(
    reranked: Sequence[Candidate], intents: Sequence[Intent], *, threshold: float
) -> Coverage:
    """The coverage the scores allow.

    Abstain when no candidate's score (rerank, else fused) reaches ``threshold``. An intent is uncovered when
    none of the candidates retrieved for it reaches the threshold (an untagged candidate counts for intent 0).
    ``reason`` is None when every intent is covered; it is words for a person, the scores are not in it.
    """
    clearing = [c for c in reranked if score_of(c) >= threshold]
    covered = {i for c in clearing for i in intents_of(c)}
    uncovered = tuple(intent for intent in intents if intent.index not in covered)
    if not clearing:
        if not reranked:
            return Coverage(True, tuple(intents), "no passages were retrieved")
        # the scores themselves stay in the trace (the abstention stage's threshold and best score)
        return Coverage(True, tuple(intents), "no passage scored high enough to answer it")
    if uncovered:
        return Coverage(False, uncovered, f"no passage scored high enough to answer {_listing(uncovered)}")
    return Coverage(False)


def abstain(coverage: Coverage, *, has_evidence: bool) -> Abstention | None:
    """Whether the answer abstains, and the reason the user reads: when the coverage says so, or when no
    evidence was selected (then the coverage's reason if it has one, else ``NOTHING_SELECTED``)."""
    if coverage.abstain or not has_evidence:
        return Abstention(coverage.reason or NOTHING_SELECTED)
    return None


def final_answer(
    question: str,
    intents: Sequence[Intent],
    coverage: Coverage,
    generated: Generated,
    abstention: Abstention | None,
    *,
    unanswered: Sequence[Intent] | None = None,
) -> str:
    """What the user reads: the abstention text when abstaining; else the generated text, followed by the note
    naming the parts it leaves unanswered (``unanswered``, by default the parts left uncovered; not after a
    failed generation: its extractive fallback text stands as it is)."""
    if abstention is not None:
        return abstention_text(question, coverage.uncovered or intents, intents)
    return generated.text + partial_notice(
        question, intents, coverage.uncovered if unanswered is None else unanswered, generated
    )


def partial_notice(
    question: str, intents: Sequence[Intent], unanswered: Sequence[Intent], generated: Generated
) -> str:
    """What follows an answer that leaves parts of the question unanswered ("\\n\\nI could not find anything
    about: ..."); "" when it leaves none, or when generation failed."""
    if not unanswered or generated.error is not None:
        return ""
    return f"\n\n{abstention_text(question, unanswered, intents)}"


_MARKER_LIKE = re.compile(r"\[(\s*\d[\d\s,;\u2013\u2014-]*)\]")


def quote_user_text(text: str) -> str:
    """The user's words as an answer may repeat them: a "[3]" they typed becomes "(3)", so the citation check
    never reads user text as a citation."""
    return _MARKER_LIKE.sub(r"(\1)", text.strip())


def _listing(intents: Sequence[Intent]) -> str:
    return "; ".join(f'"{quote_user_text(i.text)}"' for i in intents)


def abstention_text(question: str, uncovered: Sequence[Intent], all_intents: Sequence[Intent]) -> str:
    """What the user reads: a full abstention when nothing is covered, else the parts that are missing.

    Says "the policies you have access to", never whether a restricted document exists.
    """
    if not uncovered:
        return ""
    if {i.index for i in uncovered} >= {i.index for i in all_intents}:
        about = _listing(uncovered) if len(uncovered) > 1 else f'"{quote_user_text(question)}"'
        return f"{NOT_ANSWERABLE}: I found no passage that answers {about}."
    return f"{PARTIAL}: {_listing(uncovered)}."


# ----------------------------------------------------------------------------- the stage


class DecideAbstention:
    """Whether any passage's score reaches the threshold, for each part of the question."""

    name = "abstention"

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            coverage = decide_abstention(state.ranked, state.intents, threshold=state.threshold)
            d.update(
                abstain=coverage.abstain,
                uncovered=[i.text for i in coverage.uncovered],
                threshold=state.threshold,
                best_score=max((score_of(c) for c in state.ranked), default=None),
            )
        return replace(state, coverage=coverage)
