from __future__ import annotations

import re

import pytest

from rag.stages.citations import check_citations, detach_sources, is_sources_line, parse_citations
from rag.types import Evidence
from tests.stages.factories import make_candidate, make_chunk

EVIDENCE = [
    Evidence(
        1,
        make_candidate(make_chunk("Customers may request a refund within 45 days of purchase.", ordinal=1)),
        0,
    ),
    Evidence(2, make_candidate(make_chunk("Gift cards are not eligible for refunds.", ordinal=5)), 1),
    Evidence(3, make_candidate(make_chunk("Refunds are paid to the original payment method.", ordinal=2)), 1),
]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Refunds take 45 days [1].", [("Refunds take 45 days [1].", [1])]),
        ("A claim [1, 3].", [("A claim [1, 3].", [1, 3])]),
        ("A claim [1][2].", [("A claim [1][2].", [1, 2])]),
        ("A claim [1-3].", [("A claim [1-3].", [1, 2, 3])]),
        ("A claim [2\u20133].", [("A claim [2\u20133].", [2, 3])]),
        ("A claim [1,3-4].", [("A claim [1,3-4].", [1, 3, 4])]),
        ("A claim [3][1][3].", [("A claim [3][1][3].", [3, 1])]),
        ("No citation here.", [("No citation here.", [])]),
        ("", []),
    ],
)
def test_parse_citation_forms(answer: str, expected: list[tuple[str, list[int]]]) -> None:
    assert parse_citations(answer) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(
            "Refunds take 45 days. [1] Gift cards are excluded [2].\nSources: [1], [2]",
            [
                ("Refunds take 45 days. [1]", [1]),
                ("Gift cards are excluded [2].", [2]),
                ("Sources: [1], [2]", [1, 2]),
            ],
            id="a-marker-after-a-full-stop-stays-with-its-sentence",
        ),
        pytest.param(  # the list style small models write: "[1] sentence" per line, not "sentence [1]"
            "[1] Refunds take 45 days.\n[2] Gift cards are excluded.\n\nSources: [1], [2].",
            [
                ("[1] Refunds take 45 days.", [1]),
                ("[2] Gift cards are excluded.", [2]),
                ("Sources: [1], [2].", [1, 2]),
            ],
            id="markers-opening-a-line-cite-that-lines-sentence",
        ),
        pytest.param(  # on one line, a marker after a full stop still closes the sentence before it
            "Refunds take 45 days. [1] Gift cards are excluded [2].",
            [("Refunds take 45 days. [1]", [1]), ("Gift cards are excluded [2].", [2])],
            id="a-marker-after-a-full-stop-closes-the-sentence-on-one-line",
        ),
        pytest.param(  # a quoted table row has no full stop: the line below it is another sentence
            "L1 Store associate, 38,000 … L4 Software engineer, 81,000 112,000 [1]\n"
            "Never tell a candidate the band maximum. [2]",
            [
                ("L1 Store associate, 38,000 … L4 Software engineer, 81,000 112,000 [1]", [1]),
                ("Never tell a candidate the band maximum. [2]", [2]),
            ],
            id="markers-ending-a-line-end-its-sentence-without-a-full-stop",
        ),
        pytest.param(
            "Refunds are paid\nwithin 45 days [1].",
            [("Refunds are paid\nwithin 45 days [1].", [1])],
            id="a-sentence-wrapped-over-two-lines-stays-one-sentence",
        ),
    ],
)
def test_parse_splits_sentences(answer: str, expected: list[tuple[str, list[int]]]) -> None:
    assert parse_citations(answer) == expected


def test_parse_keeps_numbered_list_items_whole() -> None:
    answer = "1. Refunds take 45 days [1].\n2. Gift cards are excluded [2]."
    assert [ids for _, ids in parse_citations(answer)] == [[1], [2]]
    assert parse_citations(answer)[0][0].startswith("1. Refunds")


def test_a_runaway_range_keeps_only_its_ends() -> None:
    assert parse_citations("x [1-9999].") == [("x [1-9999].", [1, 9999])]


@pytest.mark.parametrize(
    "line",
    [
        "Sources: [1], [2]",
        "Sources: [1][3].",
        "**Sources:** [1, 2]",
        "References: [1] and [2]",
        "[1], [2]",
        "Passages used: [2]",
    ],
)
def test_sources_lines(line: str) -> None:
    assert is_sources_line(line)


@pytest.mark.parametrize("line", ["Refunds take 45 days [1].", "Sources say refunds take 45 days [1]."])
def test_claims_are_not_sources_lines(line: str) -> None:
    assert not is_sources_line(line)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            "- [Mac OS X instructions](./macosx.md#screen-lock) Sources: [1], [2]",
            "- [Mac OS X instructions](./macosx.md#screen-lock)\nSources: [1], [2]",
        ),
        (
            "Refunds take 45 days [1] **Sources:** [1].\nMore [2].",
            "Refunds take 45 days [1]\n**Sources:** [1].\nMore [2].",
        ),
        ("Refunds take 45 days [1].\nSources: [1]", "Refunds take 45 days [1].\nSources: [1]"),
        ("Sources say refunds take 45 days [1].", "Sources say refunds take 45 days [1]."),
        ("Refunds take 45 days [1], [2]", "Refunds take 45 days [1], [2]"),
    ],
)
def test_a_sources_list_run_on_at_the_end_of_a_line_gets_its_own_line(answer: str, expected: str) -> None:
    assert detach_sources(answer) == expected
    claims = [s for s, _ in parse_citations(detach_sources(answer)) if not is_sources_line(s)]
    assert not any(re.search(r"(?i)sources?:", c) for c in claims)


def test_a_supported_citation() -> None:
    [citation] = check_citations("Customers can request a refund within 45 days of purchase [1].", EVIDENCE)
    assert citation.valid and citation.supported
    assert citation.chunk_id == EVIDENCE[0].candidate.chunk_id
    assert citation.n == 1 and citation.support_score > 0.8
    assert citation.sentence == "Customers can request a refund within 45 days of purchase [1]."


def test_a_citation_to_a_missing_passage_is_invalid() -> None:
    [citation] = check_citations("Refunds take 45 days [7].", EVIDENCE)
    assert (citation.n, citation.chunk_id, citation.valid, citation.supported) == (7, None, False, False)


def test_a_wrong_passage_does_not_support_the_sentence() -> None:
    [citation] = check_citations("Customers can request a refund within 45 days of purchase [2].", EVIDENCE)
    assert citation.valid and not citation.supported


def test_a_wrong_number_is_unsupported_even_with_high_overlap() -> None:
    [citation] = check_citations("Customers may request a refund within 30 days of purchase [1].", EVIDENCE)
    assert citation.support_score > 0.8
    assert not citation.supported


def test_each_id_of_a_sentence_is_checked() -> None:
    citations = check_citations("Gift cards are not eligible for refunds [1][2].", EVIDENCE)
    assert [(c.n, c.supported) for c in citations] == [(1, False), (2, True)]


def test_a_sources_line_never_counts_as_support_by_itself() -> None:
    # issue 20: 'Sources: [1], [2]' was the only "sentence" checked, and it scored 1.0
    answer = "Gift cards are not eligible for refunds [2].\nSources: [2], [3], [9]"
    citations = check_citations(answer, EVIDENCE)
    assert [(c.n, c.valid, c.supported) for c in citations] == [
        (2, True, True),
        (2, True, True),  # [2] supports a sentence of the answer
        (3, True, False),  # listed, but supports none of them
        (9, False, False),
    ]
    only_sources = check_citations("Parking is free for visitors.\nSources: [3]", EVIDENCE)
    assert [(c.n, c.supported) for c in only_sources] == [(3, False)]


def test_an_injected_support_function_is_used() -> None:
    calls: list[tuple[str, str]] = []

    def support(sentence: str, passage: str) -> float:
        calls.append((sentence, passage))
        return 0.9 if "gift" in passage.lower() else 0.1

    citations = check_citations(
        "You cannot get your money back for those [2]. Nor here [3].", EVIDENCE, support=support
    )
    assert [c.supported for c in citations] == [True, False]
    assert calls[0] == ("You cannot get your money back for those.", EVIDENCE[1].candidate.chunk.text)


def test_the_threshold_is_configurable() -> None:
    answer = "Refunds go back to the card used [3]."
    assert not check_citations(answer, EVIDENCE, threshold=0.9)[0].supported
    assert check_citations(answer, EVIDENCE, threshold=0.2)[0].supported


def test_uncited_sentences_yield_no_citations() -> None:
    assert check_citations("Hello. We are happy to help.", EVIDENCE) == []


def test_numbers_in_the_section_path_count_as_in_the_passage() -> None:
    chunk = make_chunk("Gift cards are excluded.", section="Refund Policy > 4.2 Gift cards")
    [citation] = check_citations(
        "Section 4.2 excludes gift cards [1].", [Evidence(1, make_candidate(chunk), 0)]
    )
    assert citation.supported


REFUND_EVIDENCE = [
    Evidence(
        1,
        make_candidate(
            make_chunk("Customers may return items within 45 days of delivery for a refund.", ordinal=1)
        ),
        1,
    ),
    Evidence(
        2,
        make_candidate(make_chunk("Gift cards are not refundable, except where required by law.", ordinal=2)),
        2,
    ),
]


def test_a_citation_pointing_next_to_the_supporting_passage_is_repaired() -> None:
    from rag.stages.citations import repair_citations

    answer = "Items can be returned within 45 days of delivery [2].\n[1] Gift cards are not refundable.\nSources: [2]"
    fixed, repairs = repair_citations(answer, REFUND_EVIDENCE)
    assert (
        fixed
        == "Items can be returned within 45 days of delivery [1].\n[2] Gift cards are not refundable.\nSources: [1], [2]"
    )
    assert repairs == [
        {"sentence": "Items can be returned within 45 days of delivery.", "from": 2, "to": 1},
        {"sentence": "Gift cards are not refundable.", "from": 1, "to": 2},
    ]
    assert all(c.valid and c.supported for c in check_citations(fixed, REFUND_EVIDENCE))


def test_repair_drops_an_extra_unsupported_id_and_never_invents_support() -> None:
    from rag.stages.citations import repair_citations

    fixed, repairs = repair_citations("Gift cards are not refundable [1][2].", REFUND_EVIDENCE)
    assert fixed == "Gift cards are not refundable [2]." and repairs[0]["to"] is None
    # nothing supports "30 days" (no passage has the number): the citation stays and the check flags it
    answer = "Items can be returned within 30 days [2]."
    assert repair_citations(answer, REFUND_EVIDENCE) == (answer, [])
    assert not check_citations(answer, REFUND_EVIDENCE)[0].supported
    # a [9] that is no passage is re-pointed only when a passage supports the sentence
    assert (
        repair_citations("Gift cards are not refundable [9].", REFUND_EVIDENCE)[0]
        == "Gift cards are not refundable [2]."
    )


def test_only_the_language_models_own_answer_is_repaired() -> None:
    from rag.stages.citations import is_model_answer
    from rag.types import Generated

    answered = Generated(text="45 days [1].", model="m")
    assert is_model_answer(answered, use_llm=True, abstained=False)
    assert not is_model_answer(answered, use_llm=False, abstained=False)  # the extractive answer
    assert not is_model_answer(answered, use_llm=True, abstained=True)
    fallback = Generated(text="Quoted [1].", model="extractive (fallback; m failed)", error="timeout")
    assert not is_model_answer(fallback, use_llm=True, abstained=False)
