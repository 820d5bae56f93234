"""What an answer's label says, read from its ``rag ask --json`` object (a stored trace included): one status per
answer, so the chat, the trace explorer and the evaluation suite's answer-text check name the same thing.

The label says what happened. "Answers only part of the question" (``partial``) means a part of the question is
left unanswered: the answer check found no sentence of the answer that addresses it, or the answer says it found
nothing about it. A withheld "Citations checked" badge on an answer that addresses every part is ``unconfirmed``
(the reader does not vouch that the quotes state what was asked), not ``partial``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Status = Literal[
    "abstained", "failed_citations", "checked", "unsupported_claims", "partial", "unconfirmed", "unchecked"
]
STATUSES: tuple[Status, ...] = (
    "abstained",  # the answer declines: the evidence does not answer the question
    "failed_citations",  # a citation points at no passage, or at one that does not support its sentence
    "checked",  # "Citations checked": every citation and claim holds, every part answered and vouched for
    "unsupported_claims",  # a claim of the answer is not supported by the evidence
    "partial",  # a part of the question is left unanswered
    "unconfirmed",  # every part is answered, but the reader does not vouch for a part's quotes
    "unchecked",  # nothing to check: an answer that cites nothing
)


def failed_citations(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Citations that point at no passage or at one that does not support their sentence."""
    return [c for c in trace.get("citations") or [] if not (c.get("valid") and c.get("supported"))]


def unsupported_claims(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Claims of the answer that the claim check did not find supported (contradicted, unsupported, uncited)."""
    return [c for c in trace.get("claims") or [] if c.get("verdict") != "supported"]


def _intent_checks(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((trace.get("answer_check") or {}).get("intents") or [])


def unanswered_parts(trace: Mapping[str, Any]) -> list[str]:
    """The parts of the question no sentence of the answer addresses (``addressed`` False in the answer check,
    which also counts a part the answer says it found nothing about)."""
    if trace.get("abstained"):
        return []
    return [str(c.get("text", "")) for c in _intent_checks(trace) if c.get("addressed") is False]


def unconfirmed_parts(trace: Mapping[str, Any]) -> list[str]:
    """The parts of the question whose quoted sentence the reader did not vouch for (``supported`` False)."""
    if trace.get("abstained"):
        return []
    return [str(c.get("text", "")) for c in _intent_checks(trace) if c.get("supported") is False]


def llm_confirmed_parts(trace: Mapping[str, Any]) -> list[str]:
    """The parts of the question the configured LLM vouched for (rag/stages/confirm.py) in the reader's stead."""
    return [str(c.get("text", "")) for c in _intent_checks(trace) if c.get("confirmed") is True]


def citations_checked(trace: Mapping[str, Any]) -> bool:
    """The one condition for the "Citations checked" badge: every citation valid, every claim of the answer
    supported by the evidence (rag/stages/claims.py), and every part of the question addressed."""
    return bool(
        trace.get("citations")
        and not failed_citations(trace)
        and trace.get("verified")
        and (trace.get("answer_check") or {}).get("complete", True)
    )


def answer_status(trace: Mapping[str, Any]) -> Status:
    """The answer's status, the first that holds in the order of ``STATUSES``."""
    if trace.get("abstained"):
        return "abstained"
    if failed_citations(trace):
        return "failed_citations"
    if citations_checked(trace):
        return "checked"
    if unsupported_claims(trace):
        return "unsupported_claims"
    if unanswered_parts(trace):
        return "partial"
    if unconfirmed_parts(trace):
        return "unconfirmed"
    return "unchecked"
