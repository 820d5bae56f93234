"""The features of a (question, candidate) pair that the feature reranker (``rag.models.rerankers.FeatureReranker``)
weighs: lexical, dense and fusion scores and ranks, query-term coverage, and the question's cosines with the
passage's sentences (``sentence_features``): by the retrieval embedder, each sentence alone, and by the reading
encoder (``rag.models.reading``), each sentence read after the passage's heading. ``evaluation.training.reranker``
computes the same matrix to train the model."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rag.models.embedder import passage_text
from rag.text import bm25_tokens
from rag.types import Candidate

IdfProvider = Mapping[str, float] | Callable[[str], float | None]

FEATURE_NAMES: tuple[str, ...] = (
    "bm25_log",  # log1p(raw BM25 score); 0 when the lexical leg missed the candidate
    "bm25_norm",  # BM25 score / best BM25 score in the list
    "bm25_rr",  # 1 / bm25_rank
    "bm25_present",
    "dense_cos",  # cosine; candidates the dense leg missed get the list's lowest cosine
    "dense_norm",  # min-max normalised cosine within the list
    "dense_rr",  # 1 / dense_rank
    "dense_present",
    "fused_norm",  # fused score / best fused score
    "fused_rr",  # 1 / fused_rank
    "coverage_idf",  # IDF-weighted share of query terms present in the passage
    "coverage",  # unweighted share of query terms present
    "bigram",  # share of query bigrams present as bigrams in the passage
    "title_overlap",  # IDF-weighted share of query terms in title + section
    "numbers",  # share of the question's numbers present in the passage (0 when it has none)
    "log_len",  # log(1 + passage tokens)
    # sentence level (features-v2): cosines of the query with each of the passage's sentence_units
    "maxsim",  # best sentence cosine
    "maxsim_norm",  # maxsim - best maxsim in the list (<= 0)
    "top2sim",  # mean of the two best sentence cosines (= maxsim for one sentence)
    "maxsim_rank_rr",  # 1 / rank of the passage by maxsim within the list
    # reading encoder (features-v3): the same four over the reading vectors of the passage's sentence_units, each
    # read after the passage's heading (rag.models.sentences.reading_text), against the question's reading vector
    "read_maxsim",
    "read_maxsim_norm",
    "read_top2sim",
    "read_maxsim_rank_rr",
)
SENTENCE_FEATURES: frozenset[str] = frozenset({"maxsim", "maxsim_norm", "top2sim", "maxsim_rank_rr"})
READING_FEATURES: frozenset[str] = frozenset(
    {"read_maxsim", "read_maxsim_norm", "read_top2sim", "read_maxsim_rank_rr"}
)

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def _bigrams(tokens: Sequence[str]) -> set[tuple[str, str]]:
    return set(zip(tokens, tokens[1:], strict=False))


@dataclass(frozen=True)
class PassageTerms:
    tokens: list[str]
    bigrams: frozenset[tuple[str, str]]
    terms: frozenset[str]
    head_terms: frozenset[str]
    numbers: frozenset[str]


def passage_terms(candidate: Candidate) -> PassageTerms:
    chunk = candidate.chunk
    return _passage(chunk.title, chunk.section, chunk.text)


@functools.lru_cache(maxsize=50_000)
def _passage(title: str, section: str, text: str) -> PassageTerms:
    """Tokens of a passage, computed once per text: a passage comes back in query after query (and hop)."""
    return make_passage_terms(title, section, text)


def make_passage_terms(title: str, section: str, text: str, tokens: list[str] | None = None) -> PassageTerms:
    """``tokens``, when given, must be ``bm25_tokens(passage_text(title, section, text))`` (as stored at
    ingestion); otherwise they are computed here."""
    full = passage_text(title, section, text)
    if tokens is None:
        tokens = bm25_tokens(full)
    head = bm25_tokens(f"{title} {section}")
    return PassageTerms(
        tokens, frozenset(_bigrams(tokens)), frozenset(tokens), frozenset(head), frozenset(_numbers(full))
    )


def _local_idf(term_sets: Sequence[frozenset[str]], terms: Sequence[str]) -> dict[str, float]:
    """BM25-style IDF of the query terms over the candidate passages themselves (no corpus statistics)."""
    n = len(term_sets)
    out = {}
    for t in terms:
        df = sum(1 for s in term_sets if t in s)
        out[t] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    return out


def lookup_idf(idf: IdfProvider, term: str, fallback: float) -> float:
    """A term's IDF from ``idf`` (a mapping or a function), else ``fallback``; never negative."""
    value = idf(term) if callable(idf) else idf.get(term)
    return fallback if value is None else max(float(value), 0.0)


def sentence_features(
    query_vector: np.ndarray | None, sentence_vectors: Sequence[np.ndarray | None]
) -> np.ndarray:
    """(candidates x 4): maxsim, maxsim_norm, top2sim, maxsim_rank_rr from each candidate's sentence vectors (the
    retrieval embedder's, or the reading encoder's for the ``read_`` columns).

    A candidate without vectors (None or empty) gets the list's lowest maxsim/top2sim and no rank (rr 0); with
    no query vector every column is 0.
    """
    n = len(sentence_vectors)
    out = np.zeros((n, 4), dtype=np.float64)
    if n == 0 or query_vector is None:
        return out
    q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    best = np.full(n, np.nan)
    top2 = np.full(n, np.nan)
    for i, vectors in enumerate(sentence_vectors):
        if vectors is None or len(vectors) == 0 or vectors.shape[-1] != q.shape[0]:
            continue
        sims = np.asarray(vectors, dtype=np.float32) @ q
        if len(sims) == 1:
            best[i] = top2[i] = float(sims[0])
        else:
            two = np.partition(sims, len(sims) - 2)[-2:]
            best[i], top2[i] = float(two.max()), float(two.mean())
    known = ~np.isnan(best)
    if not known.any():
        return out
    best_filled = np.where(known, best, np.nanmin(best))
    out[:, 0] = best_filled
    out[:, 1] = best_filled - best_filled.max()
    out[:, 2] = np.where(known, top2, np.nanmin(top2))
    order = sorted(np.flatnonzero(known).tolist(), key=lambda j: (-best[j], j))
    for rank, j in enumerate(order, start=1):
        out[j, 3] = 1.0 / rank
    return out


def candidate_features(
    question: str,
    candidates: Sequence[Candidate],
    *,
    idf: IdfProvider | None = None,
    query_vector: np.ndarray | None = None,
    sentence_vectors: Sequence[np.ndarray | None] | None = None,
    reading_query_vector: np.ndarray | None = None,
    reading_vectors: Sequence[np.ndarray | None] | None = None,
    passages: Sequence[PassageTerms] | None = None,
) -> np.ndarray:
    """Feature matrix (candidates x FEATURE_NAMES) for one question's candidate list.

    The sentence-level columns need ``query_vector`` and ``sentence_vectors`` (one array per candidate, in
    candidate order), the reading ones ``reading_query_vector`` and ``reading_vectors`` (the reading encoder's);
    without them they are 0. ``passages`` (one per candidate) are the candidates' tokens when the caller has them
    already; otherwise each candidate's text is tokenised (cached by text).
    """
    n = len(candidates)
    x = np.zeros((n, len(FEATURE_NAMES)), dtype=np.float64)
    if n == 0:
        return x
    col = {name: i for i, name in enumerate(FEATURE_NAMES)}

    bm25 = np.array(
        [c.bm25_score if c.bm25_score is not None else np.nan for c in candidates], dtype=np.float64
    )
    has_bm25 = ~np.isnan(bm25)
    bm25_filled = np.where(has_bm25, np.maximum(np.nan_to_num(bm25), 0.0), 0.0)
    x[:, col["bm25_log"]] = np.log1p(bm25_filled)
    top = bm25_filled.max()
    x[:, col["bm25_norm"]] = bm25_filled / top if top > 0 else 0.0
    x[:, col["bm25_rr"]] = [1.0 / c.bm25_rank if c.bm25_rank else 0.0 for c in candidates]
    x[:, col["bm25_present"]] = has_bm25

    dense = np.array(
        [c.dense_score if c.dense_score is not None else np.nan for c in candidates], dtype=np.float64
    )
    has_dense = ~np.isnan(dense)
    floor = float(np.nanmin(dense)) if has_dense.any() else 0.0
    dense_filled = np.where(has_dense, np.nan_to_num(dense), floor)
    x[:, col["dense_cos"]] = dense_filled
    spread = float(dense_filled.max() - dense_filled.min())
    x[:, col["dense_norm"]] = (dense_filled - dense_filled.min()) / spread if spread > 0 else 0.0
    x[:, col["dense_rr"]] = [1.0 / c.dense_rank if c.dense_rank else 0.0 for c in candidates]
    x[:, col["dense_present"]] = has_dense

    fused = np.array([c.fused_score for c in candidates], dtype=np.float64)
    x[:, col["fused_norm"]] = fused / fused.max() if fused.max() > 0 else 0.0
    x[:, col["fused_rr"]] = [1.0 / c.fused_rank if c.fused_rank else 0.0 for c in candidates]

    q_tokens = bm25_tokens(question)
    q_terms = list(dict.fromkeys(q_tokens))
    q_bigrams = _bigrams(q_tokens)
    q_numbers = _numbers(question)
    if passages is None:
        passages = [passage_terms(c) for c in candidates]
    elif len(passages) != n:
        raise ValueError(f"{len(passages)} passages for {n} candidates")
    local = _local_idf([p.terms for p in passages], q_terms)
    weights = {t: (lookup_idf(idf, t, local[t]) if idf is not None else local[t]) for t in q_terms}
    total = sum(weights.values())
    for i, p in enumerate(passages):
        if q_terms:
            present = [t for t in q_terms if t in p.terms]
            x[i, col["coverage"]] = len(present) / len(q_terms)
            if total > 0:
                x[i, col["coverage_idf"]] = sum(weights[t] for t in present) / total
                x[i, col["title_overlap"]] = sum(weights[t] for t in q_terms if t in p.head_terms) / total
        if q_bigrams:
            x[i, col["bigram"]] = len(q_bigrams & p.bigrams) / len(q_bigrams)
        if q_numbers:
            x[i, col["numbers"]] = len(q_numbers & p.numbers) / len(q_numbers)
        x[i, col["log_len"]] = math.log1p(len(p.tokens))
    if sentence_vectors is not None:
        if len(sentence_vectors) != n:
            raise ValueError(f"{len(sentence_vectors)} sentence-vector arrays for {n} candidates")
        x[:, col["maxsim"] : col["maxsim_rank_rr"] + 1] = sentence_features(query_vector, sentence_vectors)
    if reading_vectors is not None:
        if len(reading_vectors) != n:
            raise ValueError(f"{len(reading_vectors)} reading-vector arrays for {n} candidates")
        x[:, col["read_maxsim"] : col["read_maxsim_rank_rr"] + 1] = sentence_features(
            reading_query_vector, reading_vectors
        )
    return x
