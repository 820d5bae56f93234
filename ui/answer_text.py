"""What an employee reads around an answer, in plain words (no markup): the answer's label, where to ask after a
refusal, what a follow-up was searched for, and which passages it cites. The chat page (ui/views/chat.py, and the
badges of ui/components.py) and the API (ui/api) say the same things with these, so an answer reads alike in the
browser and in any chat tool.

Pure functions over a trace dict (the ``rag ask --json`` shape); no Streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rag.traces import status

ABSTAINED = "Abstained: the evidence does not answer this"  # the trace explorer's words for a refusal
CHAT_ABSTAINED = "No answer in your policies"  # the chat's (and the API's) words for a refusal


@dataclass(frozen=True)
class Label:
    """An answer's label: ``kind`` (abstain, fail, ok, unconfirmed: how a page colours it), the words, and a
    longer explanation where the words need one."""

    kind: str
    text: str
    title: str | None = None


def status_label(trace: Mapping[str, Any], *, abstained: str = ABSTAINED) -> Label | None:
    """The answer's label, one per status (``rag.traces.status.answer_status``); None for an answer with nothing to
    check. ``abstained``: the words for a refusal."""
    match status.answer_status(trace):
        case "abstained":
            return Label("abstain", abstained)
        case "failed_citations":
            failed = status.failed_citations(trace)
            ids = ", ".join(f"[{c['n']}]" for c in failed)
            return Label("fail", f"{len(failed)} citation(s) failed the check: {ids}")
        case "checked":
            if status.llm_confirmed_parts(trace):  # a part vouched for by the configured LLM, not the reader
                return Label(
                    "ok",
                    "Citations checked (confirmed by the language model)",
                    "The language model confirmed a quote the reader did not vouch for",
                )
            return Label("ok", "Citations checked")
        case "unsupported_claims":
            return Label(
                "fail", f"{len(status.unsupported_claims(trace))} claim(s) not supported by the evidence"
            )
        case "partial":  # a part of the question is left unanswered
            return Label("abstain", "Answers only part of the question")
        case (
            "unconfirmed"
        ):  # every quote is in its passage, but the reader does not vouch it states what was asked
            return Label("unconfirmed", "Quoted from the sources; not confirmed as the answer")
    return None


def refusal_advice(contact: str) -> str:
    """What an employee reads under a refusal: where to ask instead, and no scores. The answer above it already
    says that it cannot answer, so this does not say it again."""
    return (
        f"You can ask {contact}, or rephrase the question with the policy's own words (for example the name "
        "of a form, a role or a place)."
    )


def looked_at(trace: Mapping[str, Any]) -> list[str]:
    """The documents this answer looked at (its evidence, then its candidates), each once: where to look for a
    contact to name under a refusal (``ui.sources.contact_for``)."""
    doc_ids = [
        str(e.get("doc_id")) for e in [*(trace.get("evidence") or []), *(trace.get("candidates") or [])]
    ]
    return list(dict.fromkeys(doc_ids))


def searched_for(trace: Mapping[str, Any]) -> str | None:
    """A follow-up's standalone form, the question that was searched and answered; None when it was not
    rewritten."""
    standalone = trace.get("standalone") or {}
    if not standalone.get("rewritten"):
        return None
    return str(standalone.get("question") or "") or None


def cited_evidence(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The evidence passages the answer cites, in the order the answer first cites them (none for a refusal)."""
    if trace.get("abstained"):
        return []
    by_n = {int(e["n"]): e for e in trace.get("evidence") or []}
    cited = dict.fromkeys(int(c["n"]) for c in trace.get("citations") or [])
    return [by_n[n] for n in cited if n in by_n]
