"""The reader stage: its features, the shipped model, and what the answer, abstention and badge take from it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from rag.errors import ConfigurationError
from rag.models.reader import DEFAULT_READER_MODEL, FEATURES, ReaderModel
from rag.stages.extractive import evidence_sentences
from rag.stages.read import (
    read,
    reader_coverage,
    reader_features,
    reader_support,
    trim_bundles,
)
from rag.text import bm25_tokens
from rag.types import Coverage, Evidence, Intent, Reading
from tests.stages.factories import make_candidate, make_chunk

EVIDENCE = [
    Evidence(
        1,
        make_candidate(
            make_chunk(
                "Information Security Policy. Lock your screen when you leave your desk. "
                "Report a lost or stolen laptop to the Service Desk within 2 hours.",
                ordinal=1,
                title="Security",
                section="Devices",
            ),
            rerank=0.9,
        ),
        1,
    ),
    Evidence(
        2,
        make_candidate(
            make_chunk(
                "Annual leave is 25 days a year. Part-time staff get leave pro rata.",
                ordinal=2,
                title="Leave",
            ),
            rerank=0.4,
        ),
        2,
    ),
]


def _vectors(texts: Sequence[str], *, stored_only: bool = False) -> np.ndarray:
    """A bag-of-stems embedding: enough for the features to be exercised without a model."""
    out = np.zeros((len(texts), len(_VOCAB)), dtype=np.float32)
    for i, text in enumerate(texts):
        for t in bm25_tokens(text):
            if t in _VOCAB:
                out[i, _VOCAB.index(t)] = 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1.0, norms)


_VOCAB = sorted(
    {t for e in EVIDENCE for t in bm25_tokens(e.candidate.chunk.text)}
    | set(bm25_tokens("What do I do if I lose my laptop? How many days of annual leave?"))
)


def _model(weights: dict[str, float], answer_bar: float = 0.5, support_bar: float = 0.6) -> ReaderModel:
    coef = np.array([weights.get(f, 0.0) for f in FEATURES])
    return ReaderModel(
        FEATURES, np.zeros(len(FEATURES)), np.ones(len(FEATURES)), coef, -2.0, answer_bar, support_bar
    )


def test_features_read_each_sentence_against_the_intent() -> None:
    sents = evidence_sentences(EVIDENCE)
    q = _vectors(["What do I do if I lose my laptop?"])[0]
    sv = _vectors([s.text for s in sents])
    x = reader_features(
        "What do I do if I lose my laptop?",
        sents,
        query_vector=q,
        vectors=sv,
        before_vectors=np.zeros_like(sv),
        passage_vectors={},
        passage_scores={1: 0.9, 2: 0.4},
    )
    assert x.shape == (len(sents), len(FEATURES))
    col = {f: i for i, f in enumerate(FEATURES)}
    laptop = next(i for i, s in enumerate(sents) if "laptop" in s.text)
    assert x[laptop, col["cos_rr"]] == 1.0
    assert x[laptop, col["coverage_idf"]] == x[:, col["coverage_idf"]].max()
    assert x[laptop, col["passage_rr"]] == 1.0
    leave = next(i for i, s in enumerate(sents) if "25 days" in s.text)
    assert x[leave, col["has_number"]] == 1.0
    assert x[leave, col["passage_gap"]] == pytest.approx(-0.5)


def test_each_sentence_knows_its_context() -> None:
    sents = evidence_sentences(EVIDENCE)
    texts = [s.text for s in sents]
    assert "Lock your screen when you leave your desk." in texts
    lost = next(s for s in sents if "lost" in s.text)
    assert lost.before == "Lock your screen when you leave your desk."
    assert lost.heading == "Security > Devices"
    assert lost.position == texts.index(lost.text) == 2


def test_read_gives_one_row_per_intent_and_the_stating_sentence_the_highest_probability() -> None:
    sents = evidence_sentences(EVIDENCE)
    intents = ["What do I do if I lose my laptop?", "How many days of annual leave?"]
    model = _model({"coverage_idf": 6.0, "number_match": 1.0})
    reading = read(
        intents,
        sents,
        model=model,
        query_vectors=list(_vectors(intents)),
        vectors=_vectors,
        passage_scores={1: 0.9, 2: 0.4},
    )
    assert reading.probabilities.shape == (2, len(sents))
    best = [sents[int(np.argmax(reading.probabilities[r]))].text for r in range(2)]
    assert "lost or stolen laptop" in best[0]
    assert "25 days" in best[1]


def test_an_intent_no_sentence_answers_is_uncovered_and_none_answered_abstains() -> None:
    intents = [Intent(0, "a"), Intent(1, "b")]
    reading = Reading(np.array([[0.9, 0.1], [0.2, 0.1]]), (), 0.5, 0.6, 0.5)
    partial = reader_coverage(Coverage(False), intents, reading)
    assert not partial.abstain and partial.uncovered == (intents[1],)
    assert "reader's bar" in (partial.reason or "")
    none = reader_coverage(Coverage(False), intents, Reading(np.array([[0.2], [0.1]]), (), 0.5, 0.6, 0.5))
    assert none.abstain and none.uncovered == tuple(intents)


def test_the_badge_needs_every_intent_supported_by_a_quoted_sentence() -> None:
    sents = evidence_sentences(EVIDENCE)
    intents = [Intent(0, "laptop")]
    lost = next(i for i, s in enumerate(sents) if "lost" in s.text)
    p = np.full((1, len(sents)), 0.1)
    p[0, lost] = 0.95
    reading = Reading(p, tuple(sents), 0.5, 0.6, 0.5)
    report = {"complete": True, "intents": [{"index": 0, "text": "laptop", "addressed": True}]}
    quoted = reader_support(f"{sents[lost].text} [1]", intents, reading, report)
    assert quoted["complete"] and quoted["intents"][0]["supported"]
    other = next(i for i, s in enumerate(sents) if "screen" in s.text)
    wrong = reader_support(f"{sents[other].text} [1]", intents, reading, report)
    assert not wrong["complete"] and wrong["intents"][0]["support"] == pytest.approx(0.1)
    paraphrase = reader_support(
        "Tell the desk fast [1]", intents, reading, report, grounds=[sents[lost].text]
    )
    assert paraphrase["complete"]


def test_the_model_round_trips_and_refuses_other_features() -> None:
    model = _model({"cos": 2.0})
    again = ReaderModel.from_json(json.loads(json.dumps(model.to_json())))
    x = np.random.default_rng(0).normal(size=(4, len(FEATURES)))
    assert np.allclose(again.probabilities(x), model.probabilities(x), atol=1e-5)
    data = {**model.to_json(), "features": ["cos"]}
    with pytest.raises(ConfigurationError):
        ReaderModel.from_json(data)
    with pytest.raises(ValueError):
        model.probabilities(np.zeros((2, 3)))


def test_the_shipped_model_loads_with_bars_in_order() -> None:
    model = ReaderModel.load(DEFAULT_READER_MODEL)
    # a support bar of 1.0 withholds the badge: no held-out bar reached the precision it is calibrated for
    assert 0.0 < model.answer_bar <= model.support_bar <= 1.0
    assert model.meta["trained_on"]


def test_the_evidence_cut_drops_bundles_far_below_the_best_sentence_once_every_intent_is_answered() -> None:
    from rag.types import Bundle

    evidence = [
        Evidence(n, make_candidate(make_chunk(f"Rule number {n} says something useful here.", ordinal=n)), n)
        for n in (1, 2, 3, 4)
    ]
    bundles = [Bundle(e.bundle_id, (e.candidate,), "single", 1.0) for e in evidence]
    sents = evidence_sentences(evidence)
    p = np.array([[0.9, 0.5, 0.05, 0.3]])
    reading = Reading(p, tuple(sents), 0.2, 0.6, 0.5)
    kept, dropped = trim_bundles(bundles, evidence, reading, cut=0.3, keep=1)
    assert [b.bundle_id for b in kept] == [1, 2, 4]
    assert [d.chunk_id for d in dropped] == [evidence[2].candidate.chunk_id]
    assert trim_bundles(bundles, evidence, reading, cut=0.3, keep=3)[0] == bundles[:3] + bundles[3:]
    unanswered = Reading(np.array([[0.9, 0.5, 0.05, 0.3], [0.1, 0.1, 0.1, 0.1]]), tuple(sents), 0.2, 0.6, 0.5)
    assert trim_bundles(bundles, evidence, unanswered, cut=0.3, keep=1) == (bundles, [])
