"""Conversation memory: which past turns and which confirmed facts go into the next prompt.

Pure functions, no storage. History has its own token budget (``settings.history_token_budget``), separate from
the evidence budget, so a long conversation can never crowd evidence out of the prompt. Facts the user states
explicitly ("Remember that I work part-time") are stored apart from the turns (the trace store keeps them per
user) and only the ones that overlap the new question are sent with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rag.text import bm25_tokens, count_tokens, split_sentences

# ----------------------------------------------------------------------------- history
ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant", "bot": "assistant"}
# Turns that carry no information for the next question ("thanks!", "ok").
_FILLER = re.compile(
    r"^\s*(?:ok(?:ay)?|k|thanks?(?: you)?(?: very much| a lot| so much)?|thx|ty|cheers|great|perfect|nice|cool|"
    r"got it|understood|sounds good|hi|hello|hey|good (?:morning|afternoon|evening)|bye|goodbye|no problem|"
    r"no worries|you['\u2019]re welcome|you are welcome|my pleasure|glad (?:i could|to) help)"
    r"[\s.!,:)]*$",
    re.IGNORECASE,
)
# Old answers cite passages of *their* prompt: the numbers would point at the wrong passages in the next one.
_CITATION = re.compile(r"\s*\[\d+(?:\s*[,\u2013-]\s*\d+)*\]")
_SOURCES_LINE = re.compile(r"^\s*sources?:.*$", re.IGNORECASE | re.MULTILINE)
MIN_PARTIAL_TOKENS = 16  # a shortened turn below this many tokens says too little to be worth its cost


def _role_content(turn: Any) -> tuple[str, str] | None:
    """(role, content) from a (role, content) pair or a mapping with role/content keys (trace store turns)."""
    if isinstance(turn, Mapping):
        role, content = turn.get("role"), turn.get("content")
    else:
        try:
            role, content = turn
        except (TypeError, ValueError):
            return None
    if not isinstance(role, str) or not isinstance(content, str):
        return None
    role = ROLES.get(role.strip().lower())
    return (role, content) if role else None


def clean_turn(role: str, content: str) -> str:
    """The text of a turn as it should appear in a later prompt: without citation markers or source lines."""
    text = content
    if role == "assistant":
        text = _SOURCES_LINE.sub("", text)
        text = _CITATION.sub("", text)
    return " ".join(text.split())


def matters(role: str, content: str) -> bool:
    """False for empty turns and pleasantries that tell the next answer nothing."""
    text = content.strip()
    return bool(text) and not _FILLER.match(text)


def _shorten(text: str, budget: int) -> str | None:
    """The leading sentences of ``text`` that fit ``budget`` tokens (with an ellipsis), or None."""
    kept: list[str] = []
    for sentence in split_sentences(text):
        candidate = " ".join([*kept, sentence]) + " \u2026"
        if count_tokens(candidate) > budget:
            break
        kept.append(sentence)
    if not kept:
        return None
    out = " ".join(kept) + " \u2026"
    return out if count_tokens(out) <= budget else None


def select_history(turns: Iterable[Any], budget_tokens: int) -> list[tuple[str, str]]:
    """The most recent turns that matter, oldest first, within ``budget_tokens`` (counted with ``count_tokens``).

    Walks back from the newest turn and stops at the first one that does not fit: an older turn is never kept
    while a newer one is dropped, so the model never sees a conversation with a hole in it. The turn that does
    not fit is shortened to its leading sentences when enough budget is left for that to say something.
    Citation markers are removed from old answers (their numbers point at passages of an older prompt).
    """
    if budget_tokens <= 0:
        return []
    selected: list[tuple[str, str]] = []
    left = budget_tokens
    pairs = [rc for rc in (_role_content(t) for t in turns) if rc is not None]
    for role, content in reversed(pairs):
        text = clean_turn(role, content)
        if not matters(role, text):
            continue
        cost = count_tokens(text)
        if cost <= left:
            selected.append((role, text))
            left -= cost
            continue
        if left >= MIN_PARTIAL_TOKENS:
            short = _shorten(text, left)
            if short is not None:
                selected.append((role, short))
        break
    selected.reverse()
    return selected


def history_tokens(history: Sequence[tuple[str, str]]) -> int:
    """Tokens the pipeline will record for this history (it counts the contents)."""
    return sum(count_tokens(content) for _, content in history)


# ----------------------------------------------------------------------------- facts
# Phrases that make a message an explicit confirmation or correction of a fact about the user.
_TRIGGERS = re.compile(
    r"^\s*(?:"
    r"(?:please\s+)?(?:remember|note|keep in mind|bear in mind)\b(?:\s+that\b)?\s*[:,\-\u2013]?\s*"
    r"|(?:just\s+)?(?:fyi|for the record|for your information)\b\s*[:,\-\u2013]?\s*"
    r"|(?:actually|correction|to correct (?:that|myself)|no|sorry|wait)\s*[:,\-\u2013!]+\s*"
    r"|actually\s+"
    r")",
    re.IGNORECASE,
)
# Statements that correct the *question*, not a fact ("Actually, I meant the refund policy").
_NOT_A_FACT = re.compile(
    r"^(?:i\s+(?:meant?|want(?:ed)?|need(?:ed)?|would like|'d like|was asking|am asking|asked|wonder(?:ed)?|"
    r"think|guess|don't know|do not know|have a question)|i'm asking|i'm wondering)\b",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(
    r"^(?:what|when|where|who|whom|which|why|how|can|could|may|do|does|did|is|are|should)\b", re.IGNORECASE
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|im|my|me|mine)\b", re.IGNORECASE)

# A fact's key names what it is about, so a correction ("Actually, I'm in the Munich office") replaces the
# earlier fact ("Note: my office is in Berlin"). Checked in order; the first matching topic wins.
_TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (key, re.compile(pattern, re.IGNORECASE))
    for key, pattern in (
        (
            "employment",
            r"\b(?:part[- ]?time|full[- ]?time|contractor|freelanc\w*|intern(?:ship)?|temporary contract|"
            r"permanent contract|fixed[- ]term|hours per week|\d+\s*(?:hours|h)\s*(?:a|per)\s*week)\b",
        ),
        ("manager", r"\b(?:manager|boss|supervisor|line manager|report to|reporting to)\b"),
        ("office", r"\b(?:office|based in|located in|work from|working from|site|campus|headquarters|hq)\b"),
        ("team", r"\b(?:team|department|dept|division|squad)\b"),
        ("role", r"\b(?:role|job title|position|title|i am an?|i'm an?)\b"),
        ("start_date", r"\b(?:started|joined|start date|hired|my first day)\b"),
        ("home", r"\b(?:country|live in|living in|reside in|resident of|citizen|moved to)\b"),
        ("device", r"\b(?:laptop|macbook|phone|device|computer|monitor)\b"),
    )
)
# Words a question may use for a topic without repeating the fact's own words (lexical overlap only).
RELATED_TERMS: dict[str, str] = {
    "employment": "hours schedule leave vacation holiday holidays annual sick overtime salary pay benefits "
    "contract allowance pro-rata prorated entitlement",
    "manager": "approval approve approver sign-off escalate escalation",
    "office": "location city travel commute desk remote relocation expenses local site",
    "team": "department approval budget on-call",
    "role": "band salary grade level access permissions",
    "start_date": "probation tenure anniversary seniority entitlement",
    "home": "country holidays tax relocation travel visa local commute remote",
    "device": "equipment laptop hardware replacement repair it",
}
_MY_X_IS = re.compile(r"^my\s+((?:[a-z\-]+\s+){0,2}?[a-z\-]+)\s+(?:is|are|was|=)\b", re.IGNORECASE)
_I_VERB = re.compile(r"^i\s+(?:also\s+|now\s+|currently\s+|usually\s+)?([a-z]+)\b", re.IGNORECASE)


def _statement(message: str) -> tuple[str, bool]:
    """The message without its trigger phrase, and whether a trigger was found."""
    match = _TRIGGERS.match(message)
    if not match or not message[match.end() :].strip():
        return message.strip(), False
    return message[match.end() :].strip(), True


def fact_key(statement: str) -> str:
    """The topic a statement about the user is about: a known topic, else 'my X is ...' -> X, else the verb."""
    for key, pattern in _TOPICS:
        if pattern.search(statement):
            return key
    my = _MY_X_IS.match(statement)
    if my:
        return "_".join(my.group(1).lower().split())
    verb = _I_VERB.match(statement)
    if verb and verb.group(1).lower() not in ("am", "m", "have", "was", "will", "would", "do", "did"):
        return verb.group(1).lower()
    words = [w for w in bm25_tokens(statement) if not w.isdigit()]
    return "_".join(words[:2]) or "note"


def extract_fact(user_message: str) -> tuple[str, str] | None:
    """(key, value) when the message explicitly confirms or corrects a fact about the user, else None.

    "Remember that I work part-time" -> ("employment", "I work part-time");
    "Note: my office is in Berlin" -> ("office", "My office is in Berlin");
    "Actually, I'm in the Munich office" -> ("office", "I'm in the Munich office") (same key: it replaces).
    Questions, and corrections of the question ("Actually, I meant the travel policy"), are not facts.
    """
    text = " ".join((user_message or "").split())
    statement, triggered = _statement(text)
    if not triggered:
        return None
    # Only the first sentence is the fact ("Remember that I work part-time. How much leave do I get?").
    statement = (split_sentences(statement) or [statement])[0].strip()
    statement = statement.rstrip(" .!;:")
    if not statement or statement.endswith("?") or _QUESTION_START.match(statement):
        return None
    statement = re.sub(r"^that\s+", "", statement, flags=re.IGNORECASE)
    if not _FIRST_PERSON.search(statement) or _NOT_A_FACT.match(statement):
        return None
    if len(statement) > 300:
        return None
    value = statement[0].upper() + statement[1:]
    return fact_key(value), value


def _fact_parts(fact: Any) -> tuple[str, str] | None:
    if isinstance(fact, str):
        return ("", fact)
    if isinstance(fact, Mapping):
        value = fact.get("value")
        return (str(fact.get("key") or ""), str(value)) if value else None
    try:
        key, value = fact
    except (TypeError, ValueError):
        return None
    return (str(key), str(value))


def relevant_facts(question: str, facts: Iterable[Any], limit: int = 5) -> list[str]:
    """The stored facts that share words with the question, most overlapping first (at most ``limit``).

    Facts may be strings, (key, value) pairs or trace store rows ({"key", "value", ...}); the overlap counts the
    fact's words, its key and a few words the question might use for the fact's topic (``RELATED_TERMS``).
    """
    asked = set(bm25_tokens(question))
    if not asked:
        return []
    scored: list[tuple[int, int, str]] = []
    for order, fact in enumerate(facts):
        parts = _fact_parts(fact)
        if parts is None:
            continue
        key, value = parts
        words = set(bm25_tokens(value)) | set(bm25_tokens(key.replace("_", " ")))
        words |= set(bm25_tokens(RELATED_TERMS.get(key, "")))
        overlap = len(asked & words)
        if overlap:
            scored.append((overlap, order, value))
    scored.sort(key=lambda s: (-s[0], -s[1]))
    seen: set[str] = set()
    out: list[str] = []
    for _, _, value in scored:
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out[:limit]
