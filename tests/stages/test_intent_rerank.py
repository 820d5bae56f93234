"""Per-intent reranking (rag/stages/intent_rerank.py): each candidate keeps the intents it ranks best for."""

from __future__ import annotations

from collections.abc import Sequence

from rag.stages.intent_rerank import INTENT_TOP, is_compound, rerank_per_intent
from rag.types import Candidate, Intent
from tests.stages.factories import make_candidate

WINDOW = Intent(0, "What is the refund window")
GIFT = Intent(1, "can I refund a gift card?")


def by_shared_words(query: str, candidates: Sequence[Candidate]) -> list[Candidate]:
    """A reranker double: more words shared with the query first, ties in input order."""
    words = set(query.lower().split())
    order = sorted(candidates, key=lambda c: -len(words & set(c.chunk.text.lower().split())))
    return [c.with_(rerank_score=float(len(order) - i), rerank_rank=i + 1) for i, c in enumerate(order)]


def test_only_a_question_of_several_intents_is_reranked_per_intent() -> None:
    assert not is_compound([WINDOW])
    assert is_compound([WINDOW, GIFT])


def test_a_passage_found_by_both_intents_keeps_the_one_it_answers() -> None:
    window = make_candidate("the refund window is 45 days", ordinal=0, intents=(0, 1))
    gift = make_candidate("a gift card is not refundable", ordinal=1, intents=(0, 1))
    out, best = rerank_per_intent([WINDOW, GIFT], [window, gift], by_shared_words, top=1)
    assert [(c.chunk_id, c.intents) for c in out] == [(window.chunk_id, (0,)), (gift.chunk_id, (1,))]
    assert best == {0: [window.chunk_id], 1: [gift.chunk_id]}


def test_the_ranking_order_and_scores_are_kept() -> None:
    ranked = [
        make_candidate(f"passage {i} refund", ordinal=i, rerank=10.0 - i, intents=(0, 1)) for i in range(5)
    ]
    out, _ = rerank_per_intent([WINDOW, GIFT], ranked, by_shared_words)
    assert [c.chunk_id for c in out] == [c.chunk_id for c in ranked]
    assert [c.rerank_score for c in out] == [c.rerank_score for c in ranked]


def test_only_the_best_few_of_each_intent_count_for_it() -> None:
    ranked = [make_candidate(f"passage {i}", ordinal=i, intents=(0,)) for i in range(INTENT_TOP + 2)]
    out, best = rerank_per_intent([WINDOW, GIFT], ranked, by_shared_words)
    assert len(best[0]) == INTENT_TOP and best[1] == []  # nothing was retrieved for the second intent
    assert [c.intents for c in out] == [(0,)] * INTENT_TOP + [()] * 2


def test_each_intent_reranks_only_what_was_retrieved_for_it() -> None:
    seen: list[tuple[str, list[str]]] = []

    def recording(query: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        seen.append((query, [c.chunk_id for c in candidates]))
        return list(candidates)

    a = make_candidate("a", ordinal=0, intents=(0,))
    b = make_candidate("b", ordinal=1, intents=(1,))
    both = make_candidate("c", ordinal=2, intents=(0, 1))
    out, _ = rerank_per_intent([WINDOW, GIFT], [a, b, both], recording)
    assert seen == [(WINDOW.text, [a.chunk_id, both.chunk_id]), (GIFT.text, [b.chunk_id, both.chunk_id])]
    assert [c.intents for c in out] == [(0,), (1,), (0, 1)]
