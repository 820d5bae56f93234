"""The reader: a logistic model over (intent, evidence sentence) features that says how likely the sentence
states what the intent asks (``rag/models/reader.json``, trained by ``python -m evaluation.training.reader``).
The features are computed by the read stage (``rag.stages.read.reader_features``), in ``FEATURES`` order."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rag.errors import ConfigurationError
from rag.models import MODELS_DIR

DEFAULT_READER_MODEL = MODELS_DIR / "reader.json"


FEATURES: tuple[str, ...] = (
    "cos",  # the sentence's vector against the intent's
    "cos_gap",  # ... minus the best sentence's
    "cos_z",  # ... standardised over this evidence's sentences
    "cos_rr",  # 1 / its rank by cos
    "cos_before",  # the sentence before it (0 for a passage's first)
    "cos_passage",  # its passage's sentence centroid
    "coverage",  # share of the intent's words it holds
    "coverage_idf",  # ... weighted by IDF over the evidence's sentences
    "coverage_idf_rr",  # 1 / its rank by coverage_idf
    "context_idf",  # IDF share of the intent's words in it, the sentence before and its heading together
    "heading_idf",  # IDF share of the intent's words in its title and section path
    "bigram",  # share of the intent's word pairs it holds in order
    "asks_number",  # the intent asks how many / how long / how much / when
    "number_match",  # ... and the sentence states a number
    "has_number",
    "is_question",  # a question in the evidence (an FAQ's question is not its answer)
    "opens_list",  # ends with ":" (introduces steps or a list)
    "list_item",  # a bullet or numbered step
    "first",  # the first sentence of its passage
    "position",  # its place in the passage, 0..1
    "log_words",
    "passage_score",  # its passage's rerank score
    "passage_gap",  # ... minus the best passage's
    "passage_rr",  # 1 / its passage's rank by rerank score
)


@dataclass(frozen=True)
class ReaderModel:
    """A logistic model over standardised FEATURES, with the bars calibrated on the tune splits.

    ``answer_bar``: a sentence at or above it states what was asked (below it for every sentence, the intent is
    unanswered). ``support_bar``: the lowest probability a quoted sentence may have for the answer to carry
    "Citations checked". ``keep_ratio``: a further sentence joins an intent's answer when its probability is at
    least this share of the intent's best.
    """

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    answer_bar: float
    support_bar: float
    keep_ratio: float = 0.5
    meta: dict[str, Any] = field(default_factory=dict)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        if x.shape[1] != len(self.features):
            raise ValueError(f"{x.shape[1]} feature columns for a model of {len(self.features)}")
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))

    def to_json(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "mean": self.mean.round(6).tolist(),
            "scale": self.scale.round(6).tolist(),
            "coef": self.coef.round(6).tolist(),
            "intercept": round(self.intercept, 6),
            "answer_bar": self.answer_bar,
            "support_bar": self.support_bar,
            "keep_ratio": self.keep_ratio,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReaderModel:
        features = tuple(data["features"])
        if features != FEATURES:
            raise ConfigurationError(
                "The reader model was trained on other features than this version computes.",
                hint="Retrain it: python -m evaluation.training.reader.",
            )
        return cls(
            features,
            np.asarray(data["mean"], dtype=float),
            np.asarray(data["scale"], dtype=float),
            np.asarray(data["coef"], dtype=float),
            float(data["intercept"]),
            float(data["answer_bar"]),
            float(data["support_bar"]),
            float(data.get("keep_ratio", 0.5)),
            dict(data.get("meta", {})),
        )

    @classmethod
    def load(cls, path: Path = DEFAULT_READER_MODEL) -> ReaderModel:
        if not path.is_file():
            raise ConfigurationError(
                f"No reader model at {path}.", hint="Train it: python -m evaluation.training.reader."
            )
        return cls.from_json(json.loads(path.read_text()))
