"""Abstention: say so when the evidence does not answer, and name the part of the question left uncovered."""

from __future__ import annotations

from collections.abc import Sequence

from rag.stages.budget import intents_of, score_of
from rag.types import Candidate, Intent

NOT_ANSWERABLE = "I can't answer this from the policies you have access to"
PARTIAL = "I could not find anything about"


def decide_abstention(
    reranked: Sequence[Candidate], intents: Sequence[Intent], *, threshold: float
) -> tuple[bool, list[Intent], str | None]:
    """(abstain, uncovered intents, reason).

    Abstain when no candidate's score (rerank, else fused) reaches ``threshold``. An intent is uncovered when
    none of the candidates retrieved for it reaches the threshold (an untagged candidate counts for intent 0).
    ``reason`` is None when every intent is covered.
    """
    clearing = [c for c in reranked if score_of(c) >= threshold]
    covered = {i for c in clearing for i in intents_of(c)}
    uncovered = [intent for intent in intents if intent.index not in covered]
    if not clearing:
        if not reranked:
            return True, list(intents), "no passages were retrieved"
        best = max(score_of(c) for c in reranked)
        return (
            True,
            list(intents),
            f"no passage reached the threshold {threshold:.3g} (best score {best:.3g})",
        )
    if uncovered:
        missing = "; ".join(repr(i.text) for i in uncovered)
        return False, uncovered, f"no passage reached the threshold {threshold:.3g} for: {missing}"
    return False, [], None


def _listing(intents: Sequence[Intent]) -> str:
    return "; ".join(f'"{i.text.strip()}"' for i in intents)


def abstention_text(question: str, uncovered: Sequence[Intent], all_intents: Sequence[Intent]) -> str:
    """What the user reads: a full abstention when nothing is covered, else the parts that are missing.

    Says "the policies you have access to", never whether a restricted document exists.
    """
    if not uncovered:
        return ""
    if {i.index for i in uncovered} >= {i.index for i in all_intents}:
        about = _listing(uncovered) if len(uncovered) > 1 else f'"{question.strip()}"'
        return f"{NOT_ANSWERABLE}: I found no passage that answers {about}."
    return f"{PARTIAL}: {_listing(uncovered)}."
