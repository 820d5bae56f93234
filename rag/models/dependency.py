"""Excerpts: what the offline answer shows of a passage. A sentence's meaning often lives in its neighbour ("Examples
include ... minibar items" means nothing without "Personal costs are never reimbursed" before it), so each point of
the extractive answer is a contiguous excerpt of one passage: the sentence the reader chose, with the sentences its
meaning depends on, and no more.

Whether a sentence depends on the one before it is one learned model (``DependencyModel``, shipped as
``rag/models/dependency.json``, trained by ``python -m evaluation.training.dependency`` on hand-labelled sentence pairs
of the policy corpora, validated leave one corpus out). Its inputs are what ingestion keeps of a passage's structure
(the sentence before is a heading, a lead-in ending in ":", a question, a list item; the sentence is a list item)
and the two sentences' words (their opening words, the words they share); nothing in it is a hand-written list.

The same model decides, in ``rag.stages.extractive``, which neighbours an excerpt takes, and in the evaluation's
answer-text check (``evaluation.graders``) whether a shown sentence was cut from what it depends on.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag.errors import ConfigurationError
from rag.models import MODELS_DIR
from rag.text import bm25_token_set

DEFAULT_DEPENDENCY_MODEL = MODELS_DIR / "dependency.json"

# How the sentence before relates to the sentence: a sentence of the same passage, the heading it sits under, or
# not known (the first sentence of a passage whose predecessor is in another passage, not in the evidence).
PREV_KINDS = ("sentence", "heading", "hidden")

_ITEM = re.compile(
    r"^\s*(?:[-*\u2022\u2023\u25e6\u25aa\uf0b7\u2013]|\(?\d{1,2}[.)]|\(?[a-z][.)]|\([ivx]+\))\s+"
)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_NUMBER = re.compile(r"\d")


def is_list_item(text: str) -> bool:
    """A bullet or a numbered or lettered step ("- ", "3. ", "(b) ")."""
    return _ITEM.match(text) is not None


def _opening(text: str, n: int = 3) -> list[str]:
    """The first ``n`` words of a sentence, lower-cased, after any list marker."""
    return _WORD.findall(_ITEM.sub("", text, count=1).lower())[:n]


def _length_bucket(words: int) -> str:
    return (
        "len:1-6" if words <= 6 else "len:7-12" if words <= 12 else "len:13-25" if words <= 25 else "len:26+"
    )


def dependency_features(prev: str, cur: str, *, kind: str = "sentence") -> dict[str, float]:
    """The features of "``cur`` depends on ``prev``": structure (what ``prev`` is, list items, a lead-in's colon),
    the opening words of ``cur`` (its first word, its first two, each of its first three) and how much of ``cur``'s
    content ``prev`` already holds. ``kind``: ``PREV_KINDS``; with "hidden", ``prev`` is not read."""
    if kind not in PREV_KINDS:
        raise ValueError(f"unknown kind of preceding text {kind!r}")
    f: dict[str, float] = {f"prev:{kind}": 1.0}
    cur_item = is_list_item(cur)
    words = _opening(cur, 3)
    stripped = _ITEM.sub("", cur, count=1).lstrip("\"'(\u201c")
    end = cur.rstrip()[-1:]
    f["cur:item"] = float(cur_item)
    f["cur:lower"] = float(bool(stripped[:1]) and stripped[:1].islower())
    f["cur:number"] = float(bool(_NUMBER.search(cur)))
    f["cur:colon"] = float(end == ":")  # a lead-in itself
    f["cur:question"] = float(end == "?")
    f["cur:fragment"] = float(end not in (".", "!", "?", ":", ";", ")"))  # no sentence end: a label or a cell
    f[_length_bucket(len(cur.split()))] = 1.0
    if words:
        f[f"w1:{words[0]}"] = 1.0
    if len(words) > 1:
        f[f"w2:{words[0]}_{words[1]}"] = 1.0
    for w in dict.fromkeys(words):
        f[f"w:{w}"] = 1.0
    if kind == "hidden":
        return f
    p = prev.rstrip()
    prev_item = is_list_item(prev)
    f["prev:colon"] = float(p.endswith(":"))
    f["prev:question"] = float(p.endswith("?"))
    f["prev:item"] = float(prev_item)
    f["prev:open"] = float(not p.endswith((".", "!", "?", ":", ";")))  # a line that runs on into ``cur``
    f["prev:semicolon"] = float(p.endswith((";", "; and", "; or", ", and", ", or")))  # a list runs on
    f["prev:short"] = float(len(prev.split()) <= 4)  # a label ("Technical users", "Timing:")
    f["both:item"] = float(cur_item and prev_item)
    f["item_after_colon"] = float(cur_item and p.endswith(":"))
    own, before = bm25_token_set(cur), bm25_token_set(prev)
    if own:
        f["shared"] = len(own & before) / len(own)
    return f


@dataclass(frozen=True)
class DependencyModel:
    """A logistic model over ``dependency_features`` (sparse: a weight per feature name; features it was not
    trained on weigh nothing) and ``bar``, the probability at which a sentence counts as depending on the one
    before it (calibrated leave one corpus out on the labels, ``evaluation.training.dependency``)."""

    weights: Mapping[str, float]
    intercept: float
    bar: float
    meta: dict[str, Any] = field(default_factory=dict)

    def probability(self, prev: str, cur: str, *, kind: str = "sentence") -> float:
        """The probability that ``cur``, read alone, loses what ``prev`` (the sentence or heading before it) says."""
        return _probability(self, prev, cur, kind)

    def depends(self, prev: str, cur: str, *, kind: str = "sentence") -> bool:
        return self.probability(prev, cur, kind=kind) >= self.bar

    def to_json(self) -> dict[str, Any]:
        return {
            "intercept": round(self.intercept, 6),
            "bar": self.bar,
            "weights": {k: round(v, 6) for k, v in sorted(self.weights.items())},
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DependencyModel:
        return cls(
            {str(k): float(v) for k, v in data["weights"].items()},
            float(data["intercept"]),
            float(data["bar"]),
            dict(data.get("meta", {})),
        )

    @classmethod
    def load(cls, path: Path = DEFAULT_DEPENDENCY_MODEL) -> DependencyModel:
        if not path.is_file():
            raise ConfigurationError(
                f"No sentence-dependency model at {path}.",
                hint="Train it: python -m evaluation.training.dependency --write.",
            )
        return _load(path)

    def __hash__(self) -> int:  # the weights are a dict: hashed by identity, so a model can key a cache
        return id(self)


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> DependencyModel:
    return DependencyModel.from_json(json.loads(path.read_text()))


@functools.lru_cache(maxsize=20_000)  # an answer's passages are read again by the checks and the next answer
def _probability(model: DependencyModel, prev: str, cur: str, kind: str) -> float:
    features = dependency_features(prev, cur, kind=kind)
    z = model.intercept + sum(model.weights.get(k, 0.0) * v for k, v in features.items())
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
