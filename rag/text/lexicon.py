"""English word lists the answering layer reads, each defined once (as bm25s keeps its stopwords in one module).

A stage composes what it needs from these (``BE | MODALS``) and says beside the composition why it adds or
leaves out a word; no stage keeps its own copy of a list defined here.
"""

from __future__ import annotations

# English stopwords (the classic Lucene/NLTK-style list); removing them matches the BM25 setups we compare against.
_LUCENE_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not of off on
    once only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves""".split()
)
NEGATIONS = frozenset({"no", "not", "nor"})
# Negations carry meaning in policy text ("not", "no"): they stay searchable.
STOPWORDS = _LUCENE_STOPWORDS - NEGATIONS

# ------------------------------------------------------------------------------------------------ numbers
UNITS: dict[str, int] = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
TENS: dict[str, int] = {
    w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())
}
SCALES: dict[str, int] = {"hundred": 100, "thousand": 1_000, "million": 1_000_000}
# The number words a policy writes a count or a duration in ("five (5) days", "thirty days", "a hundred").
CARDINALS: dict[str, int] = {**UNITS, **TENS, "hundred": 100}
# ``CARDINALS`` as a regular-expression group (longest first); callers add their own word boundaries.
CARDINAL_PATTERN = "(?:" + "|".join(sorted(CARDINALS, key=len, reverse=True)) + ")"
# The number words the reader's ``has_number`` feature was trained with (rag/models/reader.json): CARDINALS less
# zero, thirteen, fourteen, sixteen to nineteen, seventy and eighty. Widened to CARDINALS, it moved the reader's
# sentence probabilities on 2 of 1,141 suite questions, so it changes only together with a retrained reader.
READER_CARDINALS = tuple(
    "one two three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty fifty sixty ninety "
    "hundred".split()
)
# How often, as a policy says it instead of a number ("twice", "annually").
FREQUENCIES = ("once", "twice", "annually", "weekly", "monthly", "daily", "quarterly")


def spell(n: int) -> str:
    """``n`` (0 to 99) in words: 7 -> "seven", 45 -> "forty-five"."""
    if not 0 <= n < 100:
        raise ValueError(f"spell() covers 0 to 99, not {n}")
    words = {v: w for w, v in (UNITS | TENS).items()}
    if n in words:
        return words[n]
    return f"{words[n - n % 10]}-{words[n % 10]}"


# ------------------------------------------------------------------------------------------------ calendar
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
# A month as dates write it, for regular expressions: the full name or its first three letters ("Sept" too).
MONTH_PATTERN = "(?:" + "|".join(m[:3] + (f"(?:{m[3:]})?" if m[3:] else "") for m in MONTHS) + "|sept)"

# ------------------------------------------------------------------------------------------------ verbs
# Finite forms of "be" that open a question ("is there", "are contractors") or follow "there".
BE = frozenset("am is are was were isn't aren't wasn't weren't".split())
MODALS = frozenset("can could may might must shall should will would".split())
# The auxiliaries a yes/no question opens with ("can I", "do contractors", "has the policy").
AUXILIARIES = (
    BE
    | MODALS
    | frozenset("do does did has have had".split())
    | frozenset("can't cannot don't doesn't didn't won't wouldn't shouldn't couldn't".split())
)
WH_WORDS = frozenset("what how who whom whose when where which why".split())
