"""The reader: for every sentence of the final evidence, the probability that it states what an intent asks.

Ranking reads passages by topic; an answer needs the sentence that states the asked-for fact. The reader is one
learned model over (intent, sentence) pairs, trained by ``python -m evaluation.training.reader`` on sentence-level
labels (gold quotes against the other evidence sentences, near misses as negatives) and shipped as
``rag/models/reader.json``. Its features cost dot products and set lookups: the sentence vectors were embedded at
ingestion, the intent's vector is the cached query vector. Each sentence is read with its context: the sentence
before it, its passage (title, section path, the centroid of its sentences) and its passage's rerank score.

Every stage that needs "does the evidence answer this?" reads the same probabilities: the extractive answer
quotes the sentences that clear the answer bar, an intent with none is unanswered (a partial answer names it,
no intent answered abstains), and the "Citations checked" badge needs every intent's quote to clear the bar.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from rag.models.reader import FEATURES, ReaderModel
from rag.models.sentences import reading_text
from rag.request import State
from rag.stages.budget import score_of
from rag.stages.extractive import asks_for_number, evidence_sentences, has_number
from rag.stages.pack import edge_pack, number_evidence
from rag.stages.shared import Models, QueryVectors, Scoring, VectorLookup
from rag.text import bm25_token_set, bm25_tokens, collapse_ws
from rag.types import Bundle, Coverage, Dropped, Evidence, EvidenceSentence, Intent, Reading

_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022\uf0b7]|\d+[.)]|[a-z][.)])\s")


def _rr(values: np.ndarray) -> np.ndarray:
    order = np.argsort(-values, kind="stable")
    out = np.empty(len(values))
    out[order] = 1.0 / np.arange(1, len(values) + 1)
    return out


def _idf(sentences: Sequence[EvidenceSentence]) -> Callable[[str], float]:
    df = Counter(t for s in sentences for t in s.tokens)
    n = len(sentences)
    return lambda t: math.log(1.0 + (n - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5))


def _share(weights: Mapping[str, float], present: frozenset[str] | set[str]) -> float:
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if t in present) / total if total > 0 else 0.0


def reader_features(
    intent: str,
    sentences: Sequence[EvidenceSentence],
    *,
    query_vector: np.ndarray,
    vectors: np.ndarray,
    before_vectors: np.ndarray,
    passage_vectors: Mapping[int, np.ndarray],
    passage_scores: Mapping[int, float],
) -> np.ndarray:
    """(sentences x FEATURES) for one intent. ``vectors`` and ``before_vectors`` are L2-normalised, one row per
    sentence (a zero row where a sentence has no sentence before it); ``passage_vectors`` and ``passage_scores``
    are keyed by evidence number."""
    m = len(sentences)
    x = np.zeros((m, len(FEATURES)))
    if m == 0:
        return x
    col = {name: i for i, name in enumerate(FEATURES)}
    q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    cos = vectors @ q
    x[:, col["cos"]] = cos
    x[:, col["cos_gap"]] = cos - cos.max()
    x[:, col["cos_z"]] = (cos - cos.mean()) / (cos.std() or 1.0)
    x[:, col["cos_rr"]] = _rr(cos)
    x[:, col["cos_before"]] = before_vectors @ q
    x[:, col["cos_passage"]] = [
        float(passage_vectors[s.n] @ q) if s.n in passage_vectors else 0.0 for s in sentences
    ]
    q_tokens = bm25_tokens(intent)
    wanted = list(dict.fromkeys(q_tokens))
    idf = _idf(sentences)
    weights = {t: idf(t) for t in wanted}
    pairs = set(zip(q_tokens, q_tokens[1:], strict=False))
    numeric = asks_for_number(intent)
    x[:, col["asks_number"]] = numeric
    scores = np.array([passage_scores.get(s.n, 0.0) for s in sentences])
    best_score = max(passage_scores.values()) if passage_scores else 0.0
    passage_rank = {
        n: rank for rank, n in enumerate(sorted(passage_scores, key=lambda k: -passage_scores[k]), 1)
    }
    counts = Counter(s.n for s in sentences)
    for i, s in enumerate(sentences):
        if wanted:
            x[i, col["coverage"]] = sum(t in s.tokens for t in wanted) / len(wanted)
            x[i, col["coverage_idf"]] = _share(weights, s.tokens)
            context = s.tokens | bm25_token_set(s.before) | bm25_token_set(s.heading)
            x[i, col["context_idf"]] = _share(weights, context)
            x[i, col["heading_idf"]] = _share(weights, bm25_token_set(s.heading))
        if pairs:
            own = bm25_tokens(s.text)
            x[i, col["bigram"]] = len(pairs & set(zip(own, own[1:], strict=False))) / len(pairs)
        number = has_number(s.text)
        x[i, col["has_number"]] = number
        x[i, col["number_match"]] = numeric and number
        x[i, col["is_question"]] = s.asks
        x[i, col["opens_list"]] = s.text.rstrip().endswith(":")
        x[i, col["list_item"]] = bool(_LIST_ITEM.match(s.text))
        x[i, col["first"]] = s.position == 0
        x[i, col["position"]] = s.position / max(1, counts[s.n] - 1)
        x[i, col["log_words"]] = math.log1p(len(s.text.split()))
        x[i, col["passage_rr"]] = 1.0 / passage_rank.get(s.n, len(passage_rank) + 1)
    x[:, col["coverage_idf_rr"]] = _rr(x[:, col["coverage_idf"]])
    x[:, col["passage_score"]] = scores
    x[:, col["passage_gap"]] = scores - best_score
    return x


def intent_features(
    intents: Sequence[str],
    sentences: Sequence[EvidenceSentence],
    *,
    query_vectors: Sequence[np.ndarray],
    vectors: VectorLookup,
    passage_scores: Mapping[int, float],
) -> list[np.ndarray]:
    """One (sentences x FEATURES) matrix per intent: what ``read`` scores and what the reader is trained on
    (``query_vectors``: one per intent)."""
    if not sentences:
        return [np.zeros((0, len(FEATURES))) for _ in intents]
    sv = vectors([reading_text(s.heading, s.text) for s in sentences])
    bv = np.zeros_like(sv)
    known = [i for i, s in enumerate(sentences) if s.before]
    if known:  # the sentence before is context, never worth embedding at query time
        bv[known] = vectors(
            [reading_text(sentences[i].heading, sentences[i].before) for i in known], stored_only=True
        )
    passage_vectors: dict[int, np.ndarray] = {}
    for n in dict.fromkeys(s.n for s in sentences):
        centroid = sv[[i for i, s in enumerate(sentences) if s.n == n]].mean(axis=0)
        passage_vectors[n] = centroid / (float(np.linalg.norm(centroid)) or 1.0)
    out = []
    for intent, qv in zip(intents, query_vectors, strict=True):
        x = reader_features(
            intent,
            sentences,
            query_vector=qv,
            vectors=sv,
            before_vectors=bv,
            passage_vectors=passage_vectors,
            passage_scores=passage_scores,
        )
        out.append(x)
    return out


def read(
    intents: Sequence[str],
    sentences: Sequence[EvidenceSentence],
    *,
    model: ReaderModel,
    query_vectors: Sequence[np.ndarray],
    vectors: VectorLookup,
    passage_scores: Mapping[int, float],
) -> Reading:
    """The probability that each sentence states what each intent asks (``intent_features``' arguments)."""
    if not sentences:
        return Reading(np.zeros((len(intents), 0)), (), model.answer_bar, model.support_bar, model.keep_ratio)
    features = intent_features(
        intents,
        sentences,
        query_vectors=query_vectors,
        vectors=vectors,
        passage_scores=passage_scores,
    )
    rows = [model.probabilities(x) for x in features]
    return Reading(np.vstack(rows), tuple(sentences), model.answer_bar, model.support_bar, model.keep_ratio)


def reader_coverage(coverage: Coverage, intents: Sequence[Intent], reading: Reading) -> Coverage:
    """The coverage after reading: an intent no evidence sentence answers (every probability below the answer
    bar) joins the uncovered ones; when none is left covered, the answer abstains."""
    uncovered = list(coverage.uncovered)
    missed = []
    for row, intent in enumerate(intents):
        if intent not in uncovered and not reading.answered(row):
            uncovered.append(intent)
            missed.append(f'"{intent.text}" (best {reading.best(row):.2f})')
    if not missed:
        return coverage
    reason = (
        f"no evidence sentence states what was asked, at the reader's bar {reading.answer_bar:.2f}: "
        + "; ".join(missed)
    )
    ordered = tuple(i for i in intents if i in uncovered)
    if len(ordered) == len(intents):
        return Coverage(True, ordered, reason)
    return Coverage(coverage.abstain, ordered, coverage.reason or reason)


def reader_support(
    answer: str,
    intents: Sequence[Intent],
    reading: Reading,
    report: Mapping[str, Any],
    *,
    grounds: Sequence[str] = (),
) -> dict[str, Any]:
    """``report`` (the answer check) with each intent's reader support: the best probability among the evidence
    sentences the answer quotes (or, for a paraphrase, ``grounds``: the evidence sentences its claims rest on),
    and that sentence (``quote``).
    ``complete`` then also needs every intent supported, so "Citations checked" is never shown on an answer
    whose quotes the reader does not vouch for."""
    sentences = reading.sentences
    said = collapse_ws(answer).lower()
    grounded = {collapse_ws(g).lower() for g in grounds}
    used = [
        i
        for i, s in enumerate(sentences)
        if collapse_ws(s.text).lower() in said or collapse_ws(s.text).lower() in grounded
    ]
    checks = []
    for row, check in enumerate(report.get("intents", [])):
        p = reading.probabilities[row] if row < len(intents) else np.zeros(len(sentences))
        best = max(used, key=p.__getitem__, default=None)
        support = float(p[best]) if best is not None else 0.0
        checks.append(
            {
                **check,
                "support": round(support, 4),
                "supported": support >= reading.support_bar,
                "quote": sentences[best].text if best is not None else None,
            }
        )
    complete = bool(report.get("complete")) and bool(checks) and all(c["supported"] for c in checks)
    return {**report, "complete": complete, "intents": checks}


def trim_bundles(
    bundles: Sequence[Bundle], evidence: Sequence[Evidence], reading: Reading, *, cut: float, keep: int
) -> tuple[list[Bundle], list[Dropped]]:
    """The smallest evidence that covers the question: once every intent has a sentence above the answer bar, a
    bundle (ranked best first) whose best sentence, for any intent, is below ``cut`` x the best sentence's
    probability leaves the evidence. The ``keep`` best bundles and every bundle holding an intent's best
    sentence stay; a bundle stays whole (a rule with its exception, a chain's links)."""
    rows = range(reading.probabilities.shape[0])
    if not cut or not len(reading.sentences) or not all(reading.answered(r) for r in rows):
        return list(bundles), []
    bundle_of = {e.n: e.bundle_id for e in evidence}
    best: dict[int, float] = {}
    holds_best: set[int] = set()
    for r in rows:
        p = reading.probabilities[r]
        holds_best.add(bundle_of[reading.sentences[int(np.argmax(p))].n])
        for s, value in zip(reading.sentences, p, strict=True):
            b = bundle_of[s.n]
            best[b] = max(best.get(b, 0.0), float(value))
    top = max(best.values())
    kept, dropped = [], []
    for rank, bundle in enumerate(bundles):
        if rank < keep or bundle.bundle_id in holds_best or best.get(bundle.bundle_id, 0.0) >= cut * top:
            kept.append(bundle)
        else:
            dropped += [Dropped(m.chunk_id, "reader_cut", "read") for m in bundle.members]
    return kept, dropped


# ----------------------------------------------------------------------------- the stage


class Read:
    """Reads the evidence when there is some and a reader model is loaded. With ``cut`` > 0 bundles whose
    sentences the reader finds nothing in are dropped (at least ``keep`` stay), and the rest packed again."""

    name = "read"

    def __init__(
        self, models: Models, queries: QueryVectors, scoring: Scoring, *, cut: float, keep: int
    ) -> None:
        self.models, self.queries, self.scoring = models, queries, scoring
        self.cut, self.keep = cut, keep

    def run(self, state: State) -> State:
        intents, evidence, coverage = state.intents, state.evidence, state.coverage
        bundles, dropped = state.bundles, state.dropped
        if not evidence or self.models.reader_model is None:
            return state
        with state.recorder.stage(self.name) as d:
            reading = self.read(intents, evidence)
            if not coverage.abstain:
                coverage = reader_coverage(coverage, intents, reading)
            if self.cut and not coverage.abstain:
                trimmed, cut = trim_bundles(bundles, evidence, reading, cut=self.cut, keep=self.keep)
                if cut:  # fewer passages: pack and number them again, and read them in their new places
                    bundles, dropped = trimmed, dropped + cut
                    evidence = number_evidence(edge_pack(bundles, state.plan.packing))
                    reading = self.read(intents, evidence)
                    d.update(cut=[c.chunk_id for c in cut], order=[e.candidate.chunk_id for e in evidence])
            d.update(reading.to_json())
        return replace(
            state, reading=reading, coverage=coverage, bundles=bundles, dropped=dropped, evidence=evidence
        )

    def read(self, intents: Sequence[Intent], evidence: Sequence[Evidence]) -> Reading:
        """The reader's probabilities for every (intent, evidence sentence) pair."""
        assert self.models.reader_model is not None
        texts = [i.text for i in intents]
        return read(
            texts,
            evidence_sentences(evidence),
            model=self.models.reader_model,
            query_vectors=self.scoring.reading.vectors(texts),
            vectors=self.scoring.reading_vector_lookup(evidence),
            passage_scores={e.n: score_of(e.candidate) for e in evidence},
        )
