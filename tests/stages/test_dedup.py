from __future__ import annotations

from rag.stages.dedup import overlap, remove_near_duplicates, shingles
from tests.stages.factories import make_candidate

RULE = (
    "Customers may request a refund within 45 days of purchase. The item must be returned in its original "
    "packaging with the receipt, and the refund is issued to the original payment method within ten days."
)
BOILERPLATE = (
    "This document is confidential and intended for employees of Example Corp only. Questions about this "
    "policy should be sent to the policy owner listed on the intranet."
)


def ids(cands: list) -> list[str]:
    return [c.chunk_id for c in cands]


def test_identical_text_in_another_chunk_is_dropped_with_its_reason() -> None:
    a = make_candidate(RULE, doc_id="refunds", ordinal=3)
    b = make_candidate(RULE, doc_id="refunds-2024", ordinal=3)
    kept, dropped = remove_near_duplicates([a, b])
    assert ids(kept) == [a.chunk_id]
    assert len(dropped) == 1
    assert dropped[0].chunk_id == b.chunk_id
    assert dropped[0].reason == f"near_duplicate_of:{a.chunk_id} overlap=1.00"
    assert dropped[0].stage == "dedup"


def test_overlapping_consecutive_chunks_keep_the_better_one() -> None:
    words = (RULE + " " + RULE.upper()).split()
    a = make_candidate(" ".join(words[:40]), ordinal=1)
    b = make_candidate(" ".join(words[4:44]), ordinal=2)  # sliding window: 36 of 40 words shared
    kept, dropped = remove_near_duplicates([b, a])
    assert ids(kept) == [b.chunk_id]
    assert dropped[0].chunk_id == a.chunk_id


def test_a_short_chunk_contained_in_a_longer_one_is_dropped() -> None:
    short = make_candidate("Customers may request a refund within 45 days of purchase.", ordinal=9)
    long = make_candidate(RULE, ordinal=1)
    kept, dropped = remove_near_duplicates([long, short])
    assert ids(kept) == [long.chunk_id]
    assert dropped[0].reason.endswith("overlap=1.00")


def test_a_better_short_chunk_drops_the_longer_copy_too() -> None:
    short = make_candidate("Customers may request a refund within 45 days of purchase.", ordinal=9)
    long = make_candidate(RULE, ordinal=1)
    kept, _ = remove_near_duplicates([short, long])
    assert ids(kept) == [short.chunk_id]


def test_documents_sharing_only_boilerplate_stay_apart() -> None:
    travel = make_candidate(
        BOILERPLATE
        + " Economy class is required for flights under six hours; business class needs VP approval.",
        doc_id="travel",
    )
    leave = make_candidate(
        BOILERPLATE
        + " Employees accrue two days of annual leave per month, up to 25 days per calendar year.",
        doc_id="leave",
    )
    kept, dropped = remove_near_duplicates([travel, leave])
    assert ids(kept) == [travel.chunk_id, leave.chunk_id]
    assert dropped == []
    assert 0.3 < overlap(shingles(travel.chunk.text), shingles(leave.chunk.text)) < 0.8


def test_the_threshold_is_configurable() -> None:
    travel = make_candidate(
        BOILERPLATE + " Economy class is required for flights under six hours.", doc_id="t"
    )
    leave = make_candidate(BOILERPLATE + " Employees accrue two days of annual leave per month.", doc_id="l")
    kept, dropped = remove_near_duplicates([travel, leave], threshold=0.5)
    assert ids(kept) == [travel.chunk_id] and len(dropped) == 1


def test_normalisation_ignores_case_quotes_and_punctuation() -> None:
    a = make_candidate("Employees can\u2019t carry over more than FIVE days\u2014see HR.", ordinal=0)
    b = make_candidate("employees can't carry over more than five days - see HR", ordinal=1)
    kept, dropped = remove_near_duplicates([a, b])
    assert ids(kept) == [a.chunk_id] and len(dropped) == 1


def test_distinct_passages_are_all_kept_in_order() -> None:
    cands = [
        make_candidate("Refunds are issued within 45 days of purchase.", ordinal=0),
        make_candidate("Gift cards cannot be refunded or exchanged for cash.", ordinal=1),
        make_candidate("Sale items may be exchanged within 14 days.", ordinal=2),
    ]
    kept, dropped = remove_near_duplicates(cands)
    assert kept == cands and dropped == []


def test_the_reason_names_the_most_similar_kept_passage() -> None:
    a = make_candidate("Gift cards cannot be refunded or exchanged for cash at any store.", ordinal=0)
    b = make_candidate(RULE, ordinal=1)
    c = make_candidate(RULE + " Ask a store manager.", ordinal=2)
    _, dropped = remove_near_duplicates([a, b, c])
    assert [d.reason.split()[0] for d in dropped] == [f"near_duplicate_of:{b.chunk_id}"]


def test_empty_and_tiny_texts_do_not_crash_or_merge() -> None:
    empty_a = make_candidate("", ordinal=0)
    empty_b = make_candidate("   ", ordinal=1)
    tiny = make_candidate("Yes.", ordinal=2)
    kept, dropped = remove_near_duplicates([empty_a, empty_b, tiny])
    assert len(kept) == 3 and dropped == []


def test_the_same_chunk_twice_is_dropped_once() -> None:
    a = make_candidate(RULE)
    kept, dropped = remove_near_duplicates([a, a])
    assert kept == [a] and len(dropped) == 1


def test_nothing_in_nothing_out() -> None:
    assert remove_near_duplicates([]) == ([], [])


def _pairwise_reference(cands, threshold=0.8):  # type: ignore[no-untyped-def]
    """The definition, pair by pair: each passage against every better kept one, the first best wins."""
    kept, dropped = [], []
    for cand in cands:
        grams = shingles(cand.chunk.text)
        best_id, best = "", 0.0
        for other in kept:
            score = 1.0 if other.chunk_id == cand.chunk_id else overlap(grams, shingles(other.chunk.text))
            if score > best:
                best_id, best = other.chunk_id, score
        if best >= threshold and best > 0.0:
            dropped.append((cand.chunk_id, f"near_duplicate_of:{best_id} overlap={best:.2f}"))
        else:
            kept.append(cand)
    return [c.chunk_id for c in kept], dropped


def test_the_shared_count_product_agrees_with_pairwise_overlap() -> None:
    import random

    rng = random.Random(7)
    words = (RULE + " " + BOILERPLATE).split()
    for trial in range(60):
        cands = []
        for i in range(rng.randint(0, 25)):
            start = rng.randrange(len(words))
            text = " ".join(words[start : start + rng.randint(0, 30)]) or ""
            if rng.random() < 0.2 and cands:  # exact copies and a copy with a word changed
                text = cands[-1].chunk.text + (" extra" if rng.random() < 0.5 else "")
            cands.append(make_candidate(text, ordinal=i, doc_id=f"d{trial}"))
        threshold = rng.choice([0.5, 0.8, 1.0])
        kept, dropped = remove_near_duplicates(cands, threshold=threshold)
        expected_kept, expected_dropped = _pairwise_reference(cands, threshold)
        assert ids(kept) == expected_kept
        assert [(d.chunk_id, d.reason) for d in dropped] == expected_dropped


def test_shingle_keys_count_exactly_the_shared_shingles() -> None:
    """The array keys dedup scores with agree with the shingle sets: same sizes, same shared counts."""
    import itertools
    import random

    from rag.stages.dedup import _shared_counts, _shingle_keys

    rng = random.Random(7)
    vocab = ["refund", "days", "45", "the", "a", "receipt", "item", "within", "Refund", "of"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30))) for _ in range(40)]
    texts += ["", "one", "two words", "a b c", "c b a", "b a c", RULE, RULE.lower()]
    keys = [_shingle_keys(t) for t in texts]
    shared = _shared_counts(keys)
    for (i, a), (j, b) in itertools.product(enumerate(texts), repeat=2):
        assert len(keys[i]) == len(shingles(a))
        assert shared[i, j] == len(shingles(a) & shingles(b)), (a, b)
