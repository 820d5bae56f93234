"""Split a compound question into retrieval intents.

"What is the refund window, and can I refund a gift card?" holds two intents; "What is the travel and
expense policy?" holds one. A question is split only where the right-hand side reads as a clause of its own
(it opens with a question word, or with an auxiliary followed by a subject: "can I", "do I", "is it"), never
at a conjunction between noun phrases or verbs ("salt and pepper", "read and sign").
"""

from __future__ import annotations

import re
from dataclasses import replace

from rag.request import State
from rag.text import bm25_tokens, normalize
from rag.text.lexicon import AUXILIARIES, BE, WH_WORDS
from rag.types import Intent


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_WH = WH_WORDS | _set("what's whats how's who's")
# Relative pronouns: "employees who are part-time and who work remotely" is one intent, not two.
_RELATIVE = _set("who whom whose which where when")
_IMPERATIVE = _set("tell explain list describe show give")
# Words that cannot start the subject after an auxiliary: "and can be refunded", "and have them approved",
# "and can come in" (a second verb sharing the first subject, not a new question).
_NOT_SUBJECT = _set(
    """be been being not also only still just then them me us him so too to come go get take make use ask see
    keep give need book submit apply receive bring send find know want say tell"""
)
_PRONOUN = _set("i we you they he she it there this that these those")
_DETERMINER = _set("the a an my your our their his her its any all some every each no")
_PREDICATE = _set("available allowed required possible necessary eligible covered paid free due open valid")

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# Sentences end at "?" always, and at "." / "!" before a capital letter.
_SENTENCE = re.compile(r"(?<=\?)\s+|(?<=[.!])\s+(?=[A-Z])")
_SEPARATOR = re.compile(
    r"\s*;\s*"
    r"|,?\s+(?P<aswell>as\s+well\s+as)\s+"
    r"|,?\s+(?:and\s+also|and|or|also)\b,?\s+",
    re.IGNORECASE,
)
_LEADING = re.compile(r"^(?:(?:and|also|or|plus|but|so)\b[,\s]*|if\s+(?:so|yes|not)\b[,\s]*)+", re.IGNORECASE)
_TRAILING = re.compile(r"[\s,;:]+$")


def _words(text: str) -> list[str]:
    return _WORD.findall(normalize(text).lower())


def _clean(text: str) -> str:
    return _TRAILING.sub("", _LEADING.sub("", text.strip())).strip()


def _is_question(sentence: str) -> bool:
    words = _words(sentence)
    return sentence.rstrip().endswith("?") or bool(words and words[0] in _WH | AUXILIARIES | _IMPERATIVE)


def _aux_clause(words: list[str]) -> bool:
    """'can I refund ...', 'is there a limit', 'do contractors get ...' (auxiliary, then a subject)."""
    if len(words) < 3 or words[0] not in AUXILIARIES:
        return False
    aux, subject = words[0], words[1]
    if "n't" in aux or aux == "cannot":  # "can't I", "don't we"; not "and can't come in"
        return subject in _PRONOUN
    if aux in BE:  # "is there", "are the fees", "are contractors"; not "is available", "are taxed"
        # "are gift cards refundable", "is parental leave paid": a noun phrase of a word or two, then more
        plural = any(w.endswith("s") and not w.endswith(("ss", "ous")) for w in words[1:3])
        predicate = subject in _PREDICATE or subject.endswith(("ed", "able", "ible"))
        return subject in _PRONOUN | _DETERMINER or (not predicate and (plural or len(words) >= 4))
    return subject not in _NOT_SUBJECT and not subject.endswith("ed")


def _wh_clause(words: list[str], left: list[str]) -> bool:
    if len(words) < 2 or words[0] not in _WH:
        return False
    # The same relative pronoun inside the left side marks parallel relative clauses, not a new question.
    return not (words[0] in _RELATIVE and words[0] in left[1:])


def _is_clause(right: str, left: str) -> bool:
    words, left_words = _words(_clean(right)), _words(left)
    if _wh_clause(words, left_words) or _aux_clause(words):
        return True
    # "..., and if my laptop gets stolen, what should I do?": a conditional clause, then its own question
    if words[:1] == ["if"] and "," in right:
        main = _words(right.rsplit(",", 1)[1])
        if _wh_clause(main, left_words) or _aux_clause(main):
            return True
    return len(words) >= 3 and words[0] in _IMPERATIVE


def _should_split(sep: re.Match[str], left: str, right: str) -> bool:
    if not _words(left) or not _words(_clean(right)):
        return False
    if sep.group(0).strip().startswith(";"):
        return len(_words(left)) >= 2 and len(_words(_clean(right))) >= 2
    if sep.group("aswell"):
        # "the refund window as well as the gift card rules": two topics, two retrievals.
        return _is_clause(right, left) or (len(_words(left)) >= 2 and len(bm25_tokens(right)) >= 2)
    return _is_clause(right, left)


def _split_clauses(question: str) -> list[str]:
    """Split one question sentence at the separators whose right side reads as its own clause."""
    parts: list[str] = []
    start = 0
    seps = list(_SEPARATOR.finditer(question))
    for i, sep in enumerate(seps):
        right_end = seps[i + 1].start() if i + 1 < len(seps) else len(question)
        left, right = question[start : sep.start()], question[sep.end() : right_end]
        if _should_split(sep, left, right):
            parts.append(left)
            start = sep.end()
    parts.append(question[start:])
    return [p for p in (_clean(p) for p in parts) if p]


def _questions(text: str) -> list[tuple[str, str]]:
    """(context, question) pairs: statements ride along with the question that follows (or precedes) them."""
    pairs: list[tuple[str, str]] = []
    pending: list[str] = []
    for sentence in (s.strip() for s in _SENTENCE.split(text)):
        if not sentence:
            continue
        if _is_question(sentence):
            pairs.append((" ".join(pending), sentence))
            pending = []
        else:
            pending.append(sentence)
    if pending and pairs:
        context, last = pairs[-1]
        pairs[-1] = (context, f"{last} {' '.join(pending)}")
    elif pending:
        pairs.append(("", " ".join(pending)))
    return pairs


def split_intents(question: str) -> list[Intent]:
    """Retrieval intents of a question, indexed 0..n-1; always at least one (the whole question)."""
    texts: list[str] = []
    for context, sentence in _questions(question.strip()):
        for clause in _split_clauses(sentence):
            texts.append(f"{context} {clause}".strip() if context else clause)
    unique: list[str] = []
    for text in texts:
        if text.casefold() not in {u.casefold() for u in unique}:
            unique.append(text)
    if not unique:
        unique = [question.strip()]
    return [Intent(i, text) for i, text in enumerate(unique)]


# ----------------------------------------------------------------------------- the stage


class Intents:
    """The parts of a compound question (``split=False``: the question is one intent; ablate=intents)."""

    name = "intents"

    def __init__(self, *, split: bool = True) -> None:
        self.split = split

    def run(self, state: State) -> State:
        text = state.question.text
        with state.recorder.stage(self.name) as d:
            intents = split_intents(text) if self.split else [Intent(0, text)]
            d["intents"] = [i.text for i in intents]
        return replace(state, intents=intents)
