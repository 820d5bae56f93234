"""Answer types: does the evidence state the kind of answer each part of the question asks for (a number of
the asked unit, a duration, a date, one of the offered choices, the asked-about thing or place)? A part it
does not is uncovered, and the answer says so instead of quoting a topical passage that does not answer."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rag.models.embedder import passage_text
from rag.request import State
from rag.stages.budget import score_of
from rag.stages.claims import COMMON_CAPS, Quantity, quantities
from rag.stages.shared import Scoring
from rag.stages.standalone import unmentioned
from rag.text import bm25_token_set, bm25_tokens, normalize, split_sentences
from rag.text.lexicon import BE, CARDINAL_PATTERN, FREQUENCIES, MODALS, MONTH_PATTERN, MONTHS
from rag.types import Coverage, Evidence, Intent

# A question that asks for a quantity in a unit ("how many years", "how many days", "how much") is answered
# only by a sentence that states that unit next to what the question is about. Topic-relevant passages
# without such a sentence are the classic trap: the bot borrows a nearby number from another rule.
_UNITS: dict[str, tuple[str, ...]] = {
    "minute": ("minute",),
    "hour": ("hour",),
    "day": ("day", "daili", "business day", "calendar day"),
    "week": ("week", "weekli"),
    "month": ("month", "monthli"),
    "year": ("year", "annual"),
    "time": ("time", "attempt", "consecut"),
    "percent": ("percent", "%"),
    "money": ("$", "usd", "dollar", "€", "£"),
}
_ASK_UNIT = re.compile(
    # the counted noun may carry up to two modifiers: "how many wrong password attempts", "how many paid days"
    r"\bhow\s+(?:many|much)\s+(?:[a-z][a-z-]*\s+){0,2}?"
    r"(?P<unit>minutes?|hours?|days?|weeks?|months?|years?|times?|attempts?|percent|percentage|dollars?|cents?)\b"
    r"|\bwhat\s+(?P<pct>percent(?:age)?)\b"
    r"|\b(?:which|what)\s+(?P<date>dates?)\b"
    r"|\bwhat(?:'s|\s+is|\s+are)\s+the\s+(?:[a-z-]+\s+){0,2}?"
    r"(?P<amount>amount|deductible|stipend|allowance|fee|cost|price|salary|reimbursement)s?\b"
    # "how much" asks for money when a verb, a pronoun, "per" or a money noun follows ("how much can I claim",
    # "how much per day", "how much life insurance"), not when another noun does ("how much heads-up",
    # "how much paid leave", "how much of my week")
    r"|\bhow\s+much\b(?=\s*(?:[?.,;:)]|$)|\s+(?:(?:do|does|did|can|could|will|would|should|shall|may|might|must|"
    r"is|are|was|were|am|i|we|you|they|it|he|she|per)\b|(?:[a-z-]+\s+)?(?:money|cash|insurance|coverage|pay|"
    r"salary|compensation|budget|funding|bonus|allowance|stipend|reimbursement)\b|[$€£]))(?P<money>)",
    re.IGNORECASE,
)


# Words a question uses to ask, not to say what it is about.
_ASKING = frozenset(
    bm25_tokens(
        "how many much long often exactly many number amount total maximum minimum least most need needs have "
        "has get gets got do does did can could would should must allow allowed required require we our us you "
        "your i my me they them there this that what which who when where why if so also just really actually "
        "time times day days year years month months week weeks hour hours minute minutes percent dollars "
        "anything anyone something someone everything nothing else"
    )
)


# Words that may follow the asked noun when it ends its phrase: "the deductible on ...", "the allowance when ...".
_PHRASE_END = frozenset(
    "for of on in at per under with from by to if when while that which who i we you they he she it my our your "
    "their do does did will would can could should shall must may might is are was were be been the a an and or "
    "as after before during until".split()
)


_NEGATED = re.compile(r"n't\b", re.IGNORECASE)


_CLITIC = re.compile(r"'(?:m|s|re|ve|d|ll)\b", re.IGNORECASE)


def _question_terms(text: str) -> list[str]:
    """``bm25_tokens`` of a question with its contractions undone: "I'm" and "what's" are not topic words (kept
    whole, "im" is rarer in a handbook than any word it is about), and "don't" keeps its "not"."""
    text = normalize(text)
    text = re.sub(r"\bcan't\b", "can not", re.sub(r"\bwon't\b", "will not", text, flags=re.I), flags=re.I)
    return bm25_tokens(_CLITIC.sub("", _NEGATED.sub(" not", text)))


def _by_specificity(terms: Sequence[str], pool: Sequence[str]) -> list[str]:
    """``terms`` most specific first: those fewest ``pool`` passages contain, then the longer; ties keep their
    order."""
    pool_terms = [bm25_token_set(p) for p in pool]
    return sorted(terms, key=lambda t: (sum(t in ts for ts in pool_terms), -len(t)))


def _heads_its_phrase(match: re.Match[str], text: str) -> bool:
    """A "what is the <amount>" match asks for an amount only when the noun ends its phrase: "the salary bands"
    asks for bands (a table), "the meal allowance when ..." and "the amount GitLab pays" for an amount."""
    if match.group("amount") is None:
        return True
    following = re.match(r"\s*([A-Za-z][\w'-]*)", text[match.end() :])
    if following is None:  # punctuation or the end of the question
        return True
    word = following.group(1)
    return word.lower() in _PHRASE_END or word[0].isupper()


def _unit_key(match: re.Match[str]) -> str:
    if match.group("money") is not None or match.group("amount") is not None:
        return "money"
    if match.group("date") is not None:
        return "date"
    word = (match.group("unit") or match.group("pct")).lower().rstrip("s")
    return {"percentage": "percent", "dollar": "money", "cent": "money", "attempt": "time"}.get(word, word)


def _has_unit(sentence: str, key: str) -> bool:
    low = normalize(sentence).lower()
    if key == "money":
        return any(sym in low for sym in ("$", "€", "£")) or bool(
            re.search(r"\b(?:usd|eur|euros?|gbp|chf|cad|aud|dollars?|pounds?)\b", low)
        )
    if key == "percent":
        return "%" in low or "percent" in low
    stems = set(bm25_tokens(low))
    return any(u in stems or u in low for u in _UNITS[key])


# What a sentence must state, in words, for a unit that is not counted: "a number of amounts" is not English.
_AMOUNT_OF = {"money": "an amount of money", "percent": "a percentage"}


# A count opens with a number, a number word or an indefinite ("a day", "several weeks").
_NUMBER_WORDS = rf"(?:\d+(?:[.,]\d+)?|{CARDINAL_PATTERN}|a|an|several|few)"


_DURATION_UNITS = frozenset({"minute", "hour", "day", "week", "month", "year"})


# A count as it opens its noun phrase: "five (5) ", "30-", "seventy-two (72) ", "one ".
_COUNT = rf"\b{_NUMBER_WORDS}(?:[\s-]+{_NUMBER_WORDS})*(?:\s*\(\d+\))?[\s-]+"


def _states_duration(sentence: str, key: str) -> bool:
    """A count of the unit itself: "five (5) years", "30-day", "seventy-two (72) hours", "one business day".

    "How many years" is not answered by "annually" (a frequency) or by "every year"; those state how often.
    """
    unit = {"day": r"(?:business\s+|calendar\s+|working\s+)?days?"}.get(key, f"{key}s?")
    pattern = rf"{_COUNT}(?:consecutive\s+|more\s+|full\s+)?{unit}\b"
    return re.search(pattern, normalize(sentence), re.IGNORECASE) is not None


# "How many free counseling sessions do I get?": the counted noun (plural, ending its phrase before the verb)
# is the unit asked for.
_ASK_COUNT = re.compile(
    r"\bhow\s+many\s+(?:[a-z][a-z-]*\s+){0,2}?(?P<noun>[a-z][a-z-]*[a-z]s)\b(?=\s+(?:do|does|did|can|could|"
    r"will|would|should|must|may|might|are|is|were|was|have|has|had|i|we|you|they)\b)",
    re.IGNORECASE,
)


def _states_count(sentence: str, noun: str) -> bool:
    """A number of ``noun`` (singular): "eight (8) sessions", "up to 6 free counseling sessions", "one session"."""
    pattern = rf"{_COUNT}(?:[a-z-]+\s+){{0,2}}{re.escape(noun)}(?:s|es)?\b"
    return re.search(pattern, normalize(sentence), re.IGNORECASE) is not None


_DATE = re.compile(
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{MONTH_PATTERN}\b|\b{MONTH_PATTERN}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b"
    r"|\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b",
    re.IGNORECASE,
)


def _has_number(sentence: str) -> bool:
    return bool(
        re.search(
            rf"\d|\b(?:{CARDINAL_PATTERN}|{'|'.join(FREQUENCIES)})\b",
            sentence,
            re.IGNORECASE,
        )
    )


def missing_answer_type(
    intent_text: str,
    passages: Sequence[str],
    *,
    context: str = "",
    pool: Sequence[str] = (),
    score: Callable[[str, Sequence[str]], Sequence[float]] | None = None,
    min_score: float = 0.5,
) -> str | None:
    """Why the passages cannot answer a quantity question, or None when they might (or it asks no quantity).

    Some sentence must state a number in the unit asked for (the counted noun itself when it is none of the
    units: "how many counseling sessions do I get" needs a number of sessions), and be about what the question
    is about: it shares a content word with the question (other than the asking words), or ``score``
    (sentence similarity) rates it at least ``min_score``. "Retain records of configuration-controlled changes for
    five years" does not answer "how many years do we keep audit logs". ``context`` (the whole question)
    supplies the topic of an intent that has none of its own ("... 401(k)? If so, how much?"). With ``pool``
    (the request's own candidates' texts) the sentence must also sit in a passage holding one of the topic's two
    most specific words (those fewest pool passages contain): "up to 5 weeks of sick pay" shares "pay" with "how
    many weeks of severance pay" but says nothing about severance.
    """
    match = next((m for m in _ASK_UNIT.finditer(intent_text) if _heads_its_phrase(m, intent_text)), None)
    counted = _ASK_COUNT.search(intent_text) if match is None else None
    if match is None and counted is None:
        return None
    key = _unit_key(match) if match is not None else "count"
    nouns = counted.group("noun").lower() if counted is not None else ""
    noun = nouns[:-2] if nouns.endswith(("ches", "shes", "sses", "xes")) else nouns[:-1]  # its singular
    asked = intent_text if set(_question_terms(intent_text)) - _ASKING else f"{context} {intent_text}"
    topic = set(_question_terms(asked)) - _ASKING
    if not topic:
        return None

    def states(sentence: str) -> bool:
        if key == "date":  # "which dates": a day of a month ("1 March", "March 1st", "03/01")
            return _DATE.search(sentence) is not None
        if key in _DURATION_UNITS:  # "how many years": a count of years, not "annually"
            return _states_duration(sentence, key)
        if key == "count":  # "how many counseling sessions": a number of them ("up to eight free sessions")
            return _states_count(sentence, noun)
        return _has_number(sentence) and _has_unit(sentence, key)

    # one of the topic's two most specific words (those fewest ``pool`` passages contain) must be in the passage
    rarest = set(_by_specificity(sorted(topic), pool)[:2])
    stated = [
        sentence
        for passage in passages
        if not pool or rarest & bm25_token_set(passage)
        for sentence in split_sentences(passage)
        if states(sentence)
    ]
    if any(topic & bm25_token_set(sentence) for sentence in stated):
        return None
    if stated and score is not None and max(score(asked, stated)) >= min_score:
        return None
    if key == "date":
        return "no passage states a date for what the question asks about"
    if key == "count":
        return f"no passage states a number of {nouns} for what the question asks about"
    return f"no passage states {_AMOUNT_OF.get(key, f'a number of {key}s')} for what the question asks about"


# "Is it one or two times my salary?", "24 hours or 72 hours?": a question that offers quantities to choose from
# is answered only by evidence stating one of them; a passage about the topic that states neither cannot pick.
_CHOICE = re.compile(r"(?P<a>(?:\S+\s+){0,2}\S+)\s+or\s+(?P<b>\S+(?:\s+\S+){0,2})", re.IGNORECASE)


_BARE_UNITS = frozenset({"", "times", "x"})  # "two times" is "2x"; a lone number takes the other's unit


def _states_offered(stated: Quantity, offered: Quantity, unit: str) -> bool:
    """``stated`` is ``offered``: the same value, in ``offered``'s unit (``unit``, the choice's, for a bare one)."""
    want = offered.unit if offered.unit not in _BARE_UNITS else unit
    same_unit = stated.unit == want if want not in _BARE_UNITS else stated.unit in _BARE_UNITS
    return abs(stated.value - offered.value) < 1e-9 and same_unit


def missing_choice(intent_text: str, passages: Sequence[str]) -> str | None:
    """Why the passages cannot answer a choice between quantities, or None when they might (or none is offered).

    The choice is "A or B" where both sides are quantities (``rag.stages.claims.quantities``: "24 hours",
    "$500", "one"); some sentence must state A or B (the same value, in the same unit when both name one)."""
    for clause in re.split(r"[?;:]|,\s", normalize(intent_text)):
        m = _CHOICE.search(clause)
        if m is None:
            continue
        a, b = quantities(m.group("a")), quantities(m.group("b"))
        if not a or not b:
            continue
        offered = [a[-1], b[0]]
        unit = next((q.unit for q in offered if q.unit not in _BARE_UNITS), "")
        stated = [q for passage in passages for q in quantities(passage)]
        if any(_states_offered(q, o, unit) for q in stated for o in offered):
            return None
        return f"no passage states {offered[0].text} or {offered[1].text}"
    return None


# ------------------------------------------------------------------------------------------------- existence
# "Is there any severance pay?" presupposes a thing; passages that never mention it (or anything close to it)
# cannot say yes or no, however well they match the rest of the question ("laid off").
_EXISTENCE = re.compile(
    r"(?:^|(?<=[.!?])\s+|[,;:]\s*|\b(?:and|so|then|but)\s+)"
    r"(?:(?:is|are)\s+there|(?:do|does|will|would)\s+(?:\w+\s+){1,2}?(?:get|offer|provide|receive|match|give|pay))"
    r"\s+(?:any\s+|a\s+|an\s+|some\s+)?(?P<focus>[^?.;,]+)",
    re.IGNORECASE,
)


# "What discount do employees get on ...?" presupposes a discount just as "is there a discount" does.
_WHAT_GIVEN = re.compile(
    r"\bwhat\s+(?:kind\s+of\s+|sort\s+of\s+|type\s+of\s+)?(?P<focus>[a-z][\w-]*(?:\s+[a-z][\w-]*)?)\s+"
    r"(?:do|does|will|would|can)\s+(?:\w+\s+){1,2}?(?:get|receive|have|offer|provide)\b",
    re.IGNORECASE,
)


# "How many days of leave do I get for my wedding?" asks about leave for one occasion: general leave rules do
# not answer it unless the occasion is mentioned.
_QUALIFIED = re.compile(
    r"\bhow\s+(?:many|much|long)\b[^?]*?\b(?:for|on)\s+(?:my|our|your|a|an)\s+"
    r"(?P<focus>[a-z][\w'-]*(?:\s+[a-z][\w'-]*){0,2})\s*\??\s*$",
    re.IGNORECASE,
)


# "Is there a way to report anonymously?" asks whether something can be done, not whether a thing exists: the
# words that say what are verbs and their objects, which a passage paraphrases ("an anonymous hotline").
_CAPABILITY = re.compile(
    r"(?:way|option|possibility|chance|process|procedure|means)s?\s+(?:to\s|(?:for|of)\s+\w+ing\b)",
    re.IGNORECASE,
)


def missing_focus(
    intent_text: str,
    passages: Sequence[str],
    *,
    pool: Sequence[str] = (),
    score: Callable[[str, Sequence[str]], Sequence[float]] | None = None,
    min_score: float = 0.5,
) -> str | None:
    """Why the passages cannot answer whether something exists, or None when they might (or it is not asked).

    Applies to clauses that ask whether a thing exists or is given ("is there any severance pay", "does the
    company match contributions", "what discount do employees get"). The thing's most specific word (the one
    fewest ``pool`` passages contain; the pool is the request's own filtered candidates, so no unreadable text
    decides it) must appear in a sentence of the evidence, or ``score`` must rate some sentence at least
    ``min_score`` against the thing.
    """
    text = normalize(intent_text)
    match = _EXISTENCE.search(text) or _WHAT_GIVEN.search(text) or _QUALIFIED.search(text)
    if match is None:
        return None
    focus = match.group("focus").strip()
    if _CAPABILITY.match(focus):
        return None
    terms = [t for t in dict.fromkeys(_question_terms(focus)) if t not in _ASKING and not t.isdigit()]
    if not terms:
        return None
    key = _by_specificity(terms, pool)[0]
    sentences = [sentence for passage in passages for sentence in split_sentences(passage)]
    if any(key in bm25_tokens(sentence) for sentence in sentences):
        return None
    if sentences and score is not None and max(score(focus, sentences)) >= min_score:
        return None
    return f'no passage mentions "{focus}"'


# ------------------------------------------------------------------------------------------------ named place
# "I'm going onsite in Washington DC. What's the daily per diem I can claim there?" asks what holds in the place
# the question named: evidence that never names it (the per-diem rule, the coverage rules while travelling)
# cannot say what holds there. Only a "there" that points back at a place counts: a place told only as the
# scenario ("I want to work from Portugal for two weeks. How far in advance must I ask?") is not what is asked
# about, and a place the asking sentence names itself is often the asked attribute, not a scope ("Which writer
# was from England?": the evidence says "born in London").
_PLACED = re.compile(
    r"\b(?:in|to|from|at|near|within|into|outside|across)\s+(?:the\s+)?"
    r"(?P<name>[A-Z][\w&'-]*(?:[ \t]+[A-Z][\w&'-]*)*)"
)


_CALENDAR = frozenset((*MONTHS, "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))


# "there" that does not point at a place: "is there", "there is", "there's", "there will be"
_BE = BE | MODALS | frozenset("be been being 's 're seem seems exist exists".split())


# A rule stated for every place answers for the named one too.
_EVERYWHERE = re.compile(
    r"\b(?:any|all|every|each)\s+(?:other\s+)?(?:countr(?:y|ies)|locations?|regions?|jurisdictions?)\b"
    r"|\banywhere\b|\bworldwide\b|\bregardless\s+of\s+(?:your\s+|their\s+|the\s+)?(?:location|country)",
    re.IGNORECASE,
)


def _placed_names(text: str) -> list[str]:
    """The proper names ``text`` puts something in, at, to or from ("in Washington DC", "to the Toronto
    office": "Toronto"), without month and day names or a word opening a clause caught after the name ("I")."""
    names = []
    for match in _PLACED.finditer(normalize(text)):
        words = list(itertools.takewhile(lambda w: w not in COMMON_CAPS, match.group("name").split()))
        if words and not (len(words) == 1 and words[0].lower() in _CALENDAR):
            names.append(" ".join(words))
    return list(dict.fromkeys(names))


def _points_there(sentence: str) -> bool:
    """``sentence`` says "there" of a place ("claim there", "move there"), not as "is there" / "there is"."""
    words = re.findall(r"[a-z]+(?:'[a-z]+)?|'[a-z]+", normalize(sentence).lower())
    for i, word in enumerate(words):  # "there's" is one word here, so it never counts
        if word == "there":
            before = words[i - 1] if i else ""
            after = words[i + 1] if i + 1 < len(words) else ""
            if before not in _BE and after not in _BE:
                return True
    return False


def _asking_sentence(text: str) -> tuple[str, str]:
    """(the scenario told before it, the sentence that asks): the last question sentence, else the last one."""
    sentences = split_sentences(normalize(text))
    if not sentences:
        return "", text
    asking = max((i for i, s in enumerate(sentences) if s.rstrip().endswith("?")), default=len(sentences) - 1)
    return " ".join(sentences[:asking]), sentences[asking]


def missing_place(
    intent_text: str, passages: Sequence[str], *, context: str = "", pool: Sequence[str] = ()
) -> str | None:
    """Why the passages cannot answer for the place the question asks about, or None when they might (or it
    asks about none).

    The question asks about a place when its asking sentence says "there" of a place (``_points_there``) and
    names none itself; the places are the names the scenario before it puts something in, at, to or from
    (``_placed_names``; the intent's own scenario, else the whole question, ``context``: "How long is
    probation in Germany, and what's the notice period there?"). Each must be named (all its words) by one of
    ``passages`` (give them with their titles and section paths), unless most of ``pool`` (the request's
    candidates) names it (the organisation's own name), or a passage states a rule for every place ("in any
    country", "anywhere", "worldwide").
    """
    scenario, asking = _asking_sentence(intent_text)
    if not _points_there(asking) or _placed_names(asking):
        return None
    names = _placed_names(scenario) or _placed_names(context)
    if not names:
        return None
    passage_terms = [bm25_token_set(p) for p in passages]
    pool_terms = [bm25_token_set(p) for p in pool]
    for name in names:
        words = set(bm25_tokens(name))
        if not words or any(words <= terms for terms in passage_terms):
            continue
        if pool_terms and sum(words <= terms for terms in pool_terms) > len(pool_terms) / 2:
            continue
        if any(_EVERYWHERE.search(p) for p in passages):
            return None
        return f'no passage names "{name}"'
    return None


def vouched_evidence(evidence: Sequence[Evidence], *, threshold: float, k: int | None) -> list[Evidence]:
    """The evidence passages the answer-type check reads: with ``k``, the ``k`` best-scoring whose score clears
    ``threshold`` (best first; the single best when none does), else all of ``evidence`` in its order.

    The budget fills the evidence with tokens, so it also holds passages that rank below the abstention
    threshold: they can complete an answer, but that a topical one among them mentions the asked-for thing
    must not turn an answer the scores do not vouch for into a confident one.
    """
    if k is None:
        return list(evidence)
    best = sorted(evidence, key=lambda e: -score_of(e.candidate))
    return [e for e in best if score_of(e.candidate) >= threshold][:k] or best[:1]


# --------------------------------------------------------------------------------------------- answer types
Scorer = Callable[[str, Sequence[str]], Sequence[float]]


@dataclass(frozen=True)
class AnswerTypes:
    """The coverage after the answer-type checks, and why each intent they uncovered cannot be answered."""

    coverage: Coverage
    missing: tuple[tuple[Intent, str], ...] = ()  # (intent, why), in intent order


# "How many days of emergency leave can I take, and is it full pay?": a follow-up whose subject is "it" or "that"
# asks about what the intent before it asked for; when no passage answers that, none answers the follow-up.
_REFERS_BACK = re.compile(
    # after any scenario sentence the splitter kept (one ending "." before a lower-case "is it ...?")
    r"^(?:[^?]*[.!]\s+)?(?:and\s+|but\s+)?(?:(?:is|was|does|did|will|would|can|could)\s+(?:it|that)|"
    r"(?:it|that)\s+(?:is|was|does|did|will|would|can|could))\b",
    re.IGNORECASE,
)


def _refers_back(intent_text: str) -> bool:
    """The asking sentence of ``intent_text`` has "it" or "that" as its subject ("is it full pay?")."""
    return _REFERS_BACK.match(_asking_sentence(intent_text)[1].strip()) is not None


def check_answer_types(
    question: str,
    intents: Sequence[Intent],
    coverage: Coverage,
    evidence: Sequence[str],
    *,
    pool: Sequence[str] = (),
    score: Scorer | None = None,
    labelled: Sequence[str] | None = None,
) -> AnswerTypes:
    """The evidence must hold the kind of answer asked for ("how many years"), not just the topic, mention
    the thing whose existence is asked about ("is there any severance pay?") and name the place asked about
    ("what can I claim there?").

    Each intent still covered is checked against the ``evidence`` passage texts with ``missing_answer_type``
    (``question`` gives an intent without a topic of its own its topic), ``missing_choice``, ``missing_focus``
    (``pool``: the request's candidates' texts) and then ``missing_place`` (against ``labelled``, the same
    passages with their titles and section paths, when given). A follow-up about "it" or "that" ("..., and is it
    full pay?") fails with the intent before it. An intent a check fails joins the uncovered ones; when that
    leaves none covered the answer abstains, and the reason is the failed checks' reasons.
    """
    uncovered = list(coverage.uncovered)
    missing: list[tuple[Intent, str]] = []
    for position, intent in enumerate(intents):
        if intent in uncovered:
            continue
        why = (
            missing_answer_type(intent.text, evidence, context=question, pool=pool, score=score)
            or missing_choice(intent.text, evidence)
            or missing_focus(intent.text, evidence, pool=pool, score=score)
            or missing_place(intent.text, labelled or evidence, context=question, pool=pool)
        )
        before = intents[position - 1] if position else None
        if not why and any(i == before for i, _ in missing) and _refers_back(intent.text):
            why = "it refers back to the part before it, which no passage answers"
        if why:
            uncovered.append(intent)
            missing.append((intent, why))
    if len(uncovered) == len(intents):
        reason = "; ".join(why for _, why in missing)
        return AnswerTypes(Coverage(True, tuple(uncovered), reason), tuple(missing))
    return AnswerTypes(Coverage(coverage.abstain, tuple(uncovered), coverage.reason), tuple(missing))


# ----------------------------------------------------------------------------- the stage


class CheckAnswerTypes:
    """Does the evidence state the kind of answer each part asks for (a number, a place, one of the choices)?
    A part it does not is uncovered."""

    name = "answer_type"

    def __init__(self, scoring: Scoring, *, check_k: int | None, followup_topic: bool = True) -> None:
        self.scoring, self.check_k, self.followup_topic = scoring, check_k, followup_topic

    def _mentioned(self, state: State) -> Callable[[str], bool] | None:
        """Whether a passage the asker may read holds a word (one BM25 search under the request's filter)."""
        filt = state.filter
        if filt is None:
            return None
        lexical = self.scoring.models.reader.lexical
        return lambda stem: bool(lexical.search([stem], filt, 1))

    def run(self, state: State) -> State:
        evidence, coverage = state.evidence, state.coverage
        if not evidence or coverage.abstain:
            return state
        with state.recorder.stage(self.name) as d:
            vouched = vouched_evidence(evidence, threshold=state.threshold, k=self.check_k)
            types = check_answer_types(
                state.question.text,
                state.intents,
                coverage,
                [e.candidate.chunk.text for e in vouched],
                pool=[c.chunk.text for c in state.ranked],
                score=self.scoring.sentence_scorer(vouched),
                labelled=[
                    passage_text(e.candidate.chunk.title, e.candidate.chunk.section, e.candidate.chunk.text)
                    for e in vouched
                ],
            )
            d.update({f"intent_{intent.index}": why for intent, why in types.missing})
            coverage = types.coverage
            if self.followup_topic and state.standalone is not None and not coverage.abstain:
                # a follow-up about something no passage mentions is not answered by the previous topic's passages
                pool = [passage_text(c.chunk.title, c.chunk.section, c.chunk.text) for c in state.ranked]
                why = unmentioned(state.standalone, pool, self._mentioned(state))
                if why:
                    coverage = Coverage(True, tuple(state.intents), why)
                    d["followup"] = why
        return replace(state, coverage=coverage)
