from __future__ import annotations

import pytest

from rag.stages.intents import split_intents


def texts(question: str) -> list[str]:
    return [i.text for i in split_intents(question)]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What is X? And can I Y?", ["What is X?", "can I Y?"]),
        (
            "What is the refund window, and can I refund a gift card?",
            ["What is the refund window", "can I refund a gift card?"],
        ),
        (
            "How many days of leave do I get and who approves it?",
            ["How many days of leave do I get", "who approves it?"],
        ),
        (
            "What is the travel policy; also how do I book a hotel?",
            ["What is the travel policy", "how do I book a hotel?"],
        ),
        ("Who approves overtime; when is it paid?", ["Who approves overtime", "when is it paid?"]),
        (
            "What is the refund window, also can I refund a gift card?",
            ["What is the refund window", "can I refund a gift card?"],
        ),
        (
            "What is the refund window as well as the gift card rules?",
            ["What is the refund window", "the gift card rules?"],
        ),
        (
            "What is the dress code as well as how do I report a breach?",
            ["What is the dress code", "how do I report a breach?"],
        ),
        ("Can I work from home or do I need approval?", ["Can I work from home", "do I need approval?"]),
        ("Can I carry over leave, and if so, how many days?", ["Can I carry over leave", "how many days?"]),
        (
            "What is the parental leave policy and what is the sick leave policy and who approves both?",
            ["What is the parental leave policy", "what is the sick leave policy", "who approves both?"],
        ),
        ("Is sick leave paid and is there a limit?", ["Is sick leave paid", "is there a limit?"]),
        (
            "Tell me the refund window and explain the gift card rules",
            ["Tell me the refund window", "explain the gift card rules"],
        ),
        (
            "What is the per diem? Also, who signs off on travel?",
            ["What is the per diem?", "who signs off on travel?"],
        ),
        (
            "How do I claim mileage and do contractors get it too?",
            ["How do I claim mileage", "do contractors get it too?"],
        ),
    ],
)
def test_compound_questions_split(question: str, expected: list[str]) -> None:
    assert texts(question) == expected


@pytest.mark.parametrize(
    "question",
    [
        "Do I need salt and pepper?",
        "What is the travel and expense policy?",
        "Do I have to read and sign the handbook?",
        "Can I expense meals and drinks?",
        "Does this also apply to contractors?",
        "I also want to know the refund window.",
        "Is it 30 or 45 days?",
        "Who approves leave and when?",
        "Do I need to book flights and have them approved?",
        "Which expenses are reimbursed and are taxed?",
        "Can gift cards be refunded and can be exchanged?",
        "What is the notice period for employees who are part-time and who work remotely?",
        "What are the rules for travel and accommodation?",
        "Does the policy cover employees as well as contractors?",
        "What is the notice period for employees as well as for contractors?",
        "What is the refund window and the exchange window?",
        "How do I submit and track an expense claim?",
        "refund window",
        "Health and safety training requirements",
        "What happens if I'm sick and can't come in?",
        "Which leave is paid and is available to contractors?",
        "Who books the flight and can ask for an upgrade?",
        "Do new hires get a laptop and have to return it?",
    ],
)
def test_noun_phrase_and_verb_conjunctions_do_not_split(question: str) -> None:
    assert texts(question) == [question]


def test_statements_ride_along_with_their_question() -> None:
    assert texts("I bought a gift card last week. Can I refund it?") == [
        "I bought a gift card last week. Can I refund it?"
    ]
    assert texts("What is the refund window? I bought it in March.") == [
        "What is the refund window? I bought it in March."
    ]


def test_context_goes_to_every_intent_of_its_question() -> None:
    # "My yearly review is coming up. Who gives the feedback, and when is it?": the second half alone
    # ("when is it?") names nothing to retrieve; the statement before the question is what "it" means.
    assert texts("I work part-time. How many days of leave do I get and who approves it?") == [
        "I work part-time. How many days of leave do I get",
        "I work part-time. who approves it?",
    ]


def test_indices_run_from_zero() -> None:
    intents = split_intents("What is X? Can I Y? Who approves Z?")
    assert [i.index for i in intents] == [0, 1, 2]


def test_repeated_intents_collapse() -> None:
    assert texts("What is the refund window? What is the refund window?") == ["What is the refund window?"]


@pytest.mark.parametrize("question", ["", "   ", "?", "and"])
def test_always_at_least_one_intent(question: str) -> None:
    intents = split_intents(question)
    assert len(intents) >= 1 and intents[0].index == 0


def test_whitespace_is_trimmed() -> None:
    assert texts("  What is the refund window?  ") == ["What is the refund window?"]


def test_typographic_apostrophes_are_understood() -> None:
    assert texts("What\u2019s the refund window and can I refund a gift card?") == [
        "What\u2019s the refund window",
        "can I refund a gift card?",
    ]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (
            "How many days does a customer have to return an item, and are gift cards refundable?",
            ["How many days does a customer have to return an item", "are gift cards refundable?"],
        ),
        (
            "Which laptop do I get and is parental leave paid?",
            ["Which laptop do I get", "is parental leave paid?"],
        ),
        (
            "Leave is granted and is available to all staff?",
            ["Leave is granted and is available to all staff?"],
        ),
    ],
)
def test_be_questions_with_noun_phrase_subjects(question: str, expected: list[str]) -> None:
    assert [i.text for i in split_intents(question)] == expected


def test_a_conditional_clause_with_its_own_question_splits() -> None:
    question = (
        "What do I need set up if I lose my YubiKey, and if my laptop gets stolen while travelling, "
        "what should I do in LastPass?"
    )
    assert [i.text for i in split_intents(question)] == [
        "What do I need set up if I lose my YubiKey",
        "if my laptop gets stolen while travelling, what should I do in LastPass?",
    ]
    assert len(split_intents("Can I expense a taxi if I arrive late, and if so, how?")) == 1
