"""The chat's first screen without a browser: which policies a user can ask about, how they are grouped, the
example questions drawn from them, and the length limit's message."""

from __future__ import annotations

from datetime import date
from typing import Any

from rag.types import Chunk, Principal
from tests.ui.conftest import ALICE, HANA
from ui.first_screen import (
    Policy,
    askable_policies,
    example_question,
    example_questions,
    group_by_tag,
    policies_html,
)
from ui.views.chat import too_long

TODAY = date(2026, 6, 1)


def _doc(
    title: str, *, groups: tuple[str, ...] = ("*",), tags: tuple[str, ...] = (), **dates: str
) -> dict[str, Any]:
    return {
        "title": title,
        "groups": list(groups),
        "tags": list(tags),
        "source": f"docs/{title}.pdf",
        **dates,
    }


def _chunks(doc_id: str, doc: dict[str, Any], sections: list[str]) -> list[Chunk]:
    """One chunk per section path (relative to the title), carrying the document's access metadata."""
    title = doc["title"]
    return [
        Chunk(
            chunk_id=f"{doc_id}-{i}",
            doc_id=doc_id,
            text=f"Text of {s or title}.",
            source=doc["source"],
            title=title,
            section=" > ".join([title, s]) if s else title,
            page=1,
            page_end=1,
            ordinal=i,
            groups=tuple(doc["groups"]),
            effective=date.fromisoformat(doc["effective"]) if doc.get("effective") else None,
            expires=date.fromisoformat(doc["expires"]) if doc.get("expires") else None,
            tags=tuple(doc["tags"]),
            doc_version="v1",
            n_tokens=5,
        )
        for i, s in enumerate(sections)
    ]


DOCS = {
    "leave": _doc("Leave Policy", tags=("leave", "hr")),
    "remote": _doc("Remote Work Policy", tags=("remote work", "hr")),
    "salary": _doc("Salary Bands", groups=("hr",), tags=("pay", "hr")),
    "travel": _doc("Travel Policy", tags=("travel", "finance"), effective="2025-01-01"),
    "travel-old": _doc(
        "Travel Policy", tags=("travel", "finance"), effective="2022-01-01", expires="2024-12-31"
    ),
    "travel-eu": {**_doc("Travel  policy", tags=("travel",)), "source": "docs/eu/travel-eu.md"},
    "future": _doc("Hybrid Work Policy", tags=("hr",), effective="2027-01-01"),
    "faq": _doc("IT Help FAQ"),
    "empty": _doc("Nothing Indexed Yet"),
}
SECTIONS = {
    "leave": ["", "1. Purpose", "2. Annual leave > 2.2 Carry-over", "3. Parental leave", "9. Contact"],
    "remote": ["1. Purpose", "2. Core hours", "3. Working from abroad", "7. Contact"],
    "salary": ["1. Purpose", "2. Bands by level", "5. Contact"],
    "travel": ["1. Purpose", "4. Accommodation", "9. Contact"],
    "travel-old": ["1. Purpose", "4. Hotel caps", "8. Contact"],
    "travel-eu": ["Purpose", "Per diem in Europe", "Contact"],
    "future": ["1. Purpose", "2. Office days", "3. Contact"],
    "faq": ["1. Purpose", "2.1 How do I reset my password?", "9. Contact"],
    "empty": [],
}
CHUNKS = {d: _chunks(d, DOCS[d], SECTIONS[d]) for d in DOCS}


def _policies(principal: Principal, today: date = TODAY) -> list[Policy]:
    return askable_policies(DOCS, lambda d: CHUNKS.get(d, []), principal, today)


def test_only_what_retrieval_would_search_is_listed() -> None:
    ids = {p.doc_id for p in _policies(ALICE)}
    # not hr's salary bands, not the expired travel policy, not one in force next year, not a document without text
    assert ids == {"leave", "remote", "travel", "travel-eu", "faq"}
    assert "salary" in {p.doc_id for p in _policies(HANA)}
    # the same documents a day inside the old policy's validity: the old one is in force, the new one not yet
    assert {p.doc_id for p in _policies(ALICE, date(2024, 6, 1))} == {
        "leave",
        "remote",
        "travel-old",
        "travel-eu",
        "faq",
    }


def test_two_policies_with_one_title_are_told_apart_by_file_name() -> None:
    labels = sorted(p.label for p in _policies(ALICE))
    assert labels == [
        "IT Help FAQ",
        "Leave Policy",
        "Remote Work Policy",
        "Travel  policy (travel-eu.md)",
        "Travel Policy (Travel Policy.pdf)",
    ]


def test_headings_drop_numbering_the_preamble_and_repeats() -> None:
    leave = next(p for p in _policies(ALICE) if p.doc_id == "leave")
    assert leave.headings == ("Purpose", "Carry-over", "Parental leave", "Contact")


def test_each_policy_is_listed_once_under_its_most_shared_tag() -> None:
    groups = group_by_tag(_policies(ALICE))
    assert [(tag, [p.doc_id for p in ps]) for tag, ps in groups] == [
        ("hr", ["leave", "remote"]),  # "hr" is shared by two; "leave" and "remote work" by one each
        ("travel", ["travel-eu", "travel"]),  # "travel" beats "finance" for the policy tagged with both
        ("other", ["faq"]),  # untagged, last
    ]
    # hana reads the salary bands too: it joins hr rather than a group of its own
    assert [p.doc_id for p in dict(group_by_tag(_policies(HANA)))["hr"]] == ["leave", "remote", "salary"]


def test_examples_come_from_distinctive_headings_of_readable_policies_one_per_group() -> None:
    groups = group_by_tag(_policies(ALICE))
    questions = example_questions(groups)
    assert (
        questions
        == [
            "What does the Leave Policy say about carry-over?",  # not "Purpose" or "Contact", which every policy has
            "What does the Travel  policy say about per diem in Europe?",
            "How do I reset my password?",  # a heading that is a question is asked as written
        ]
    )
    text = " ".join(questions).lower()
    assert "bands" not in text and "salary" not in text  # nothing from hr's document
    assert "hotel caps" not in text  # nor from the expired one
    assert len(example_questions(groups, n=2)) == 2
    assert example_questions([]) == []


def test_an_example_keeps_acronyms_and_codes_as_written() -> None:
    policy = Policy("x", "Security Runbook", "Security Runbook", (), ())
    assert (
        example_question(policy, "SEV1 escalation")
        == "What does the Security Runbook say about SEV1 escalation?"
    )
    assert example_question(policy, "IT contacts") == "What does the Security Runbook say about IT contacts?"
    assert example_question(Policy("y", "The Handbook", "The Handbook", (), ()), "Pay") == (
        "What does The Handbook say about pay?"
    )


def test_titles_and_tags_are_shown_as_text() -> None:
    planted = Policy(
        "x", "**Bold** <img src=x onerror=alert(1)>", "**Bold** <img src=x>", ("<b>tag</b>",), ()
    )
    out = policies_html([("<b>tag</b>", [planted])])
    assert "<img" not in out and "<b>tag</b>" not in out
    assert "&lt;img src=x&gt;" in out and "&lt;b&gt;tag&lt;/b&gt;" in out


def test_the_length_message_says_the_question_is_kept() -> None:
    assert too_long("x" * 1000, 1000) is None
    message = too_long("x" * 5000, 1000) or ""
    assert "5,000 characters" in message and "at most 1,000" in message and "still in the box" in message
