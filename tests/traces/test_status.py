"""An answer's status (rag/traces/status.py): the label says what happened."""

from __future__ import annotations

from typing import Any

from rag.traces.status import STATUSES, answer_status


def trace(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "abstained": False,
        "citations": [{"n": 1, "valid": True, "supported": True}],
        "claims": [{"verdict": "supported"}],
        "verified": True,
        "answer_check": {
            "complete": True,
            "intents": [{"index": 0, "text": "q", "addressed": True, "supported": True}],
        },
    }
    return {**base, **changes}


def check(addressed: bool, supported: bool) -> dict[str, Any]:
    return {
        "complete": addressed and supported,
        "intents": [{"index": 0, "text": "q", "addressed": addressed, "supported": supported}],
    }


def test_each_status() -> None:
    assert answer_status(trace()) == "checked"
    assert answer_status(trace(abstained=True)) == "abstained"
    assert (
        answer_status(trace(citations=[{"n": 2, "valid": False, "supported": False}])) == "failed_citations"
    )
    assert answer_status(trace(verified=False, claims=[{"verdict": "uncited"}])) == "unsupported_claims"
    assert answer_status(trace(verified=False, answer_check=check(False, False))) == "partial"
    assert answer_status(trace(verified=False, answer_check=check(True, False))) == "unconfirmed"
    assert answer_status(trace(citations=[], claims=[], verified=None, answer_check={})) == "unchecked"
    assert set(STATUSES) == {
        "abstained",
        "failed_citations",
        "checked",
        "unsupported_claims",
        "partial",
        "unconfirmed",
        "unchecked",
    }


def test_a_withheld_badge_is_not_a_partial_answer() -> None:
    # issue 44: one part, answered; the badge withheld because the reader does not vouch for the quote
    assert answer_status(trace(verified=False, answer_check=check(True, False))) != "partial"
