"""Verification: every citation and every claim of the answer against the evidence, and whether the answer
addresses every part of the question. An LLM answer whose claims fail is repaired once, then answered
extractively (rag/stages/claims.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from rag.components.generation import Extractive, Generate
from rag.components.scoring import Scoring
from rag.config import Settings
from rag.errors import GenerationError
from rag.protocols import LLM
from rag.request import State
from rag.stages.answer_check import check_answer
from rag.stages.citations import check_citations, repair_citations
from rag.stages.claims import add_missing_markers, check_claims, failed, fallback_notice, summary, verified
from rag.stages.confirm import ask, ask_parts, worth_asking
from rag.text import collapse_ws
from rag.types import ClaimCheck, Excerpt


class Citations:
    """Is each [n] valid, and does its passage support the sentence? With ``repair`` a model's [n] that points
    next to the passage it used is re-pointed, never invented."""

    name = "citations"

    def __init__(self, scoring: Scoring, *, repair: bool) -> None:
        self.scoring, self.repair = scoring, repair

    def run(self, state: State) -> State:
        answer, evidence = state.answer, state.evidence
        with state.recorder.stage(self.name) as d:
            support = self.scoring.support_scorer(evidence)
            if state.model_answer and self.repair:
                answer, repairs = repair_citations(answer, evidence, support=support)
                if repairs:
                    d.update(repairs=repairs, model_answer=state.generated.text)
            citations = check_citations(answer, evidence, support=support)
            d.update(
                total=len(citations),
                invalid=sum(not c.valid for c in citations),
                unsupported=sum(not c.supported for c in citations),
            )
        return replace(state, answer=answer, support=support, citations=citations)


class Claims:
    """Every claim, cited or not, against the evidence sentence that best matches it."""

    name = "claims"

    def __init__(self, settings: Settings, scoring: Scoring, extractive: Extractive) -> None:
        self.settings, self.scoring, self.extractive = settings, scoring, extractive

    def run(self, state: State) -> State:
        assert state.support is not None, "the citations stage scores support before the claims are checked"
        answer, citations = state.answer, state.citations
        with state.recorder.stage(self.name) as d:
            checked, claims, verification, excerpts = self.verify(
                state, state.llm if state.model_answer else None
            )
            if checked != answer:
                answer = checked
                citations = check_citations(checked, state.evidence, support=state.support)
            d.update(verification)
        return replace(
            state,
            answer=answer,
            citations=citations,
            claims=claims,
            excerpts=excerpts,
            verification={key: v for key, v in verification.items() if key != "claims"},
        )

    def verify(
        self, state: State, llm: LLM | None
    ) -> tuple[str, list[ClaimCheck], dict[str, Any], tuple[Excerpt, ...]]:
        """Check every claim of the answer. With ``llm`` (an LLM answer): uncited claims a passage holds get
        its marker, and an answer with a failed claim gets one repair call naming the failed claims; if the
        repair fails too, the answer is the extractive one with a notice saying why. Returns the answer, the
        verdicts, the trace record (the model's text, every verdict, the repair) and the excerpts the answer
        shows (the extractive fallback's)."""
        evidence, answer, repair_on = state.evidence, state.answer, self.settings.citation_repair
        support: Callable[[str, str], float] | None = state.support
        assert support is not None
        if state.abstained or not evidence:
            return answer, [], {"checked": False, "reason": "abstained: no claim to check"}, state.excerpts
        notice = state.notice
        body = answer[: -len(notice)] if notice and answer.endswith(notice) else answer
        cosine = self.scoring.claim_cosine(evidence)
        checks = check_claims(body, evidence, support=support, cosine=cosine)
        record: dict[str, Any] = {
            "model_answer": body,
            "claims": [c.to_json() for c in checks],
            "verdicts": summary(checks),
        }
        if llm is not None and repair_on:
            marked, added = add_missing_markers(body, checks)
            if added:  # a claim the model left unmarked gets the passage that holds it
                body, checks = marked, check_claims(marked, evidence, support=support, cosine=cosine)
                record["markers_added"] = added
        if llm is None or not failed(checks):
            record["verified"] = verified(checks)
            return body + notice, checks, record, state.excerpts
        from rag.stages.generate import repair_claims

        assert state.prompt is not None
        bad = failed(checks)
        repair: dict[str, Any] = {
            "failed": [{"text": c.claim.text, "verdict": c.verdict, "reason": c.reason} for c in bad]
        }
        record["repair"] = repair
        try:
            repaired = repair_claims(state.prompt, evidence, body, bad, llm, self.settings)
            text = repaired.text
            repair["model_answer"] = text
            if repair_on:
                text, moved = repair_citations(text, evidence, support=support)
                again = check_claims(text, evidence, support=support, cosine=cosine)
                text, added = add_missing_markers(text, again)
                if moved or added:
                    again = check_claims(text, evidence, support=support, cosine=cosine)
                    repair.update(citation_repairs=moved, markers_added=added)
            else:
                again = check_claims(text, evidence, support=support, cosine=cosine)
            repair.update(
                claims=[c.to_json() for c in again], verdicts=summary(again), verified=verified(again)
            )
        except GenerationError as exc:
            again, repair["error"] = [], str(exc)
        if again and verified(again):
            record.update(repaired=True, verified=True)
            return text + notice, again, record, state.excerpts
        # Neither answer holds: quote the evidence, and say why the model's answer is not shown.
        why = fallback_notice(failed(again) or bad)
        quoted = self.extractive.of(state)
        fallback, notice = quoted.text, Generate.notice_for(state, quoted)
        final = check_claims(fallback, evidence, support=support, cosine=cosine)
        record.update(
            repaired=False,
            fallback="extractive",
            notice=why,
            verified=verified(final),
            fallback_claims=[c.to_json() for c in final],
        )
        return f"{fallback}\n\n{why}{notice}", final, record, quoted.excerpts


class AnswerCheck:
    """Does the answer address every part of the question? ("Citations checked" needs it, and with the reader
    every part answered by a quoted sentence it vouches for.)"""

    name = "answer_check"

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            grounds = [c.evidence_sentence for c in state.claims if c.evidence_sentence]
            answer_check = check_answer(
                state.answer, state.intents, state.reading, abstained=state.abstained, grounds=grounds
            )
            d.update(answer_check)
        return replace(state, answer_check=answer_check)


class Confirm:
    """With an LLM in use: each part of the question whose quote the reader does not vouch for is put to the
    LLM (rag/stages/confirm.py), and its yes counts as the reader's. Asked only when its word could grant the
    badge: every citation valid, every claim supported, every part addressed, and each unvouched quote's reader
    probability at or above ``bar`` (None: the reader's answer bar)."""

    name = "confirm"

    def __init__(self, *, enabled: bool, bar: float | None) -> None:
        self.enabled, self.bar = enabled, bar

    def run(self, state: State) -> State:
        llm, reading = state.llm, state.reading
        if not self.enabled or llm is None or reading is None or state.abstained:
            return state
        citations_hold = bool(state.citations) and all(c.valid and c.supported for c in state.citations)
        bar = reading.answer_bar if self.bar is None else self.bar
        headings = {collapse_ws(s.text): s.heading for s in reading.sentences}

        def ask_part(check: Mapping[str, Any]) -> dict[str, Any]:
            quote = str(check["quote"])
            return ask(llm, str(check["text"]), quote, section=headings.get(collapse_ws(quote), ""))

        in_reach = citations_hold and verified(state.claims)
        if not worth_asking(state.answer_check, badge_in_reach=in_reach, bar=bar):
            return state
        with state.recorder.stage(self.name) as d:
            answer_check, asked = ask_parts(state.answer_check, ask_part)
            d.update(model=llm.model, bar=bar, asked=asked, complete=answer_check["complete"])
        return replace(state, answer_check=answer_check)
