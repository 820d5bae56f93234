"""Conversation memory: history within its own budget, explicit facts, relevant facts by overlap."""

from __future__ import annotations

import pytest

from rag.stages.memory import extract_fact, history_tokens, relevant_facts, select_history
from rag.text import count_tokens

CONVERSATION = [
    ("user", "What is the refund window for customers?"),
    (
        "assistant",
        "Customers may return items within 45 days of delivery for a full refund [1].\nSources: [1]",
    ),
    ("user", "thanks!"),
    ("assistant", "You're welcome."),
    ("user", "And can gift cards be refunded?"),
    ("assistant", "Gift cards cannot be refunded or exchanged for cash [2][3]."),
]


# ----------------------------------------------------------------------------- select_history
def test_history_keeps_recent_turns_that_matter_in_order() -> None:
    history = select_history(CONVERSATION, 400)
    assert history == [
        ("user", "What is the refund window for customers?"),
        ("assistant", "Customers may return items within 45 days of delivery for a full refund."),
        ("user", "And can gift cards be refunded?"),
        ("assistant", "Gift cards cannot be refunded or exchanged for cash."),
    ]


def test_history_strips_old_citation_markers_and_sources_lines() -> None:
    text = " ".join(content for _, content in select_history(CONVERSATION, 400))
    assert "[" not in text and "Sources" not in text


@pytest.mark.parametrize("budget", [1, 10, 20, 25, 40, 60, 400])
def test_history_never_exceeds_its_budget(budget: int) -> None:
    history = select_history(CONVERSATION, budget)
    assert history_tokens(history) <= budget
    assert sum(count_tokens(c) for _, c in history) <= budget


def test_history_drops_oldest_first_and_never_leaves_a_hole() -> None:
    full = select_history(CONVERSATION, 400)
    last_two = sum(count_tokens(c) for _, c in full[-2:])
    history = select_history(CONVERSATION, last_two)
    assert history == full[-2:]
    # Whatever is kept is a suffix of the full history (a shortened turn may lead it).
    for budget in range(0, 80, 3):
        kept = select_history(CONVERSATION, budget)
        whole = [t for t in kept if not t[1].endswith("\u2026")]
        assert whole == full[len(full) - len(whole) :]


def test_history_shortens_a_long_turn_rather_than_dropping_everything() -> None:
    long_answer = " ".join(
        f"Sentence number {i} explains one more detail of the travel policy." for i in range(40)
    )
    history = select_history([("user", "Tell me about travel."), ("assistant", long_answer)], 60)
    assert history, "a long last answer must not empty the history"
    role, content = history[-1]
    assert role == "assistant" and content.endswith("\u2026") and content.startswith("Sentence number 0")
    assert history_tokens(history) <= 60


def test_history_zero_budget_and_odd_inputs() -> None:
    assert select_history(CONVERSATION, 0) == []
    assert select_history([], 100) == []
    turns = [
        {"role": "user", "content": "What about leave?", "trace_id": None},
        ("system", "ignored"),
        ("bot", ""),
    ]
    assert select_history(turns, 100) == [("user", "What about leave?")]


# ----------------------------------------------------------------------------- extract_fact
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Remember that I work part-time", ("employment", "I work part-time")),
        ("Note: my office is in Berlin", ("office", "My office is in Berlin")),
        ("Actually, I'm in the Berlin office", ("office", "I'm in the Berlin office")),
        ("Please remember: my manager is Dana Smith.", ("manager", "My manager is Dana Smith")),
        ("FYI my team is Finance", ("team", "My team is Finance")),
        ("Correction: my laptop is a ThinkPad X1", ("device", "My laptop is a ThinkPad X1")),
        ("Keep in mind I'm a contractor", ("employment", "I'm a contractor")),
        ("Remember that I work part-time. How much leave do I get?", ("employment", "I work part-time")),
    ],
)
def test_extract_fact_confirmations_and_corrections(message: str, expected: tuple[str, str]) -> None:
    assert extract_fact(message) == expected


def test_a_correction_has_the_same_key_as_the_fact_it_corrects() -> None:
    first = extract_fact("Note: my office is in Berlin")
    second = extract_fact("Actually, I'm in the Munich office")
    assert first and second and first[0] == second[0] and first[1] != second[1]
    part = extract_fact("Remember that I work part-time")
    full = extract_fact("Actually I work full-time now")
    assert part and full and part[0] == full[0]


@pytest.mark.parametrize(
    "message",
    [
        "How many days of leave do I get?",
        "Remember, what is the refund window?",
        "Actually, I meant the travel policy",
        "Remember that refunds take 45 days",  # not about the user
        "Notebook is broken",  # 'note' inside a word is no trigger
        "Thanks!",
        "No, thanks",
        "",
        "I work part-time",  # a statement without an explicit confirmation is not stored
    ],
)
def test_extract_fact_ignores_questions_and_other_messages(message: str) -> None:
    assert extract_fact(message) is None


# ----------------------------------------------------------------------------- relevant_facts
FACTS = [
    {"key": "employment", "value": "I work part-time"},
    {"key": "office", "value": "My office is in Berlin"},
    {"key": "device", "value": "My laptop is a ThinkPad"},
]


def test_relevant_facts_by_lexical_overlap() -> None:
    assert relevant_facts("Can I expense a taxi from the Berlin office?", FACTS) == ["My office is in Berlin"]
    assert relevant_facts("My laptop broke, what do I do?", FACTS) == ["My laptop is a ThinkPad"]
    assert relevant_facts("What is the customer refund window?", FACTS) == []


def test_relevant_facts_uses_the_topic_words_of_a_key() -> None:
    assert relevant_facts("How many vacation days do I get?", FACTS) == ["I work part-time"]


def test_relevant_facts_accepts_strings_and_pairs_and_limits() -> None:
    facts = [
        "My office is in Berlin",
        ("office", "My office is in Berlin"),
        ("team", "My team is Berlin ops"),
    ]
    assert relevant_facts("Berlin office parking", facts) == [
        "My office is in Berlin",
        "My team is Berlin ops",
    ]
    assert relevant_facts("Berlin office parking", facts, limit=1) == ["My office is in Berlin"]
    assert relevant_facts("", facts) == []
