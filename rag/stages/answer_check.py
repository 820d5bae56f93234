"""Does the answer address each part of the question? One check for the trace's ``answer_check``, the note that
names the parts left unanswered, and so the label ("Answers only part of the question": rag/traces/status.py).

A part is addressed when a sentence of the answer names its words (``rag.stages.extractive.check_addresses``),
or, with the reader, when a sentence the answer quotes clears the reader's answer bar for it: the reader is what
chose the quote, and "lost" answers "lose" whatever the words say. ``complete`` (the "Citations checked" badge)
needs every part addressed and every part's quotes vouched for (the support bar, ``reader_support``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rag.request import State
from rag.stages.extractive import address_report, check_addresses
from rag.stages.read import reader_support
from rag.types import Intent, Reading


def check_answer(
    answer: str,
    intents: Sequence[Intent],
    reading: Reading | None,
    *,
    abstained: bool = False,
    grounds: Sequence[str] = (),
) -> dict[str, Any]:
    """The answer check for the trace: per intent whether it is addressed, and ``complete``. ``grounds``: the
    evidence sentences an answer's claims rest on (a paraphrase quotes none)."""
    report: dict[str, Any] = address_report(check_addresses(answer, intents, abstained=abstained))
    if reading is None or abstained:
        return report
    report = reader_support(answer, intents, reading, report, grounds=grounds)
    checks = [
        {**c, "addressed": bool(c["addressed"]) or float(c.get("support", 0.0)) >= reading.answer_bar}
        for c in report["intents"]
    ]
    complete = bool(checks) and all(c["addressed"] and c["supported"] for c in checks)
    return {**report, "complete": complete, "intents": checks}


def unanswered(
    answer: str, intents: Sequence[Intent], uncovered: Sequence[Intent], reading: Reading | None
) -> list[Intent]:
    """The parts in ``uncovered`` (those the evidence checks found no answer for) that ``answer`` does not
    address (``check_answer``): the parts it may say it found nothing about. A part a quoted sentence addresses
    is not one: a note denying what the answer just quoted contradicts it."""
    if not uncovered:
        return []
    checks = check_answer(answer, intents, reading)["intents"]
    addressed = {c["index"] for c in checks if c["addressed"]}
    return [intent for intent in uncovered if intent.index not in addressed]


# ----------------------------------------------------------------------------- the stage


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
