"""The reading encoder ships as its difference from the packaged MiniLM weights and is rebuilt from them."""

from __future__ import annotations

import numpy as np
import pytest

from rag.errors import ConfigurationError
from rag.models.reading import (
    READING_ENCODER,
    apply_difference,
    encode_difference,
    identity,
    reading_encoder_dir,
    weights_digest,
)


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layer.weight": rng.normal(size=(6, 5)).astype(np.float32),
        "layer.bias": rng.normal(size=5).astype(np.float32),
        "frozen.weight": rng.normal(size=(3, 5)).astype(np.float32),
    }


def test_difference_round_trips_within_int8_rounding() -> None:
    base = _weights(0)
    trained = {k: v.copy() for k, v in base.items()}
    trained["layer.weight"] += np.random.default_rng(1).normal(scale=0.01, size=(6, 5)).astype(np.float32)
    trained["layer.bias"] += 0.5
    shipped = encode_difference(base, trained)
    assert "frozen.weight.q" not in shipped and "frozen.weight.d" not in shipped  # unchanged: not shipped
    assert shipped["layer.weight.q"].dtype == np.int8
    rebuilt = apply_difference(base, shipped)
    row_step = np.abs(trained["layer.weight"] - base["layer.weight"]).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(rebuilt["layer.weight"] - trained["layer.weight"]) <= row_step / 2 + 1e-7)
    np.testing.assert_allclose(rebuilt["layer.bias"], trained["layer.bias"], atol=1e-6)
    np.testing.assert_array_equal(rebuilt["frozen.weight"], base["frozen.weight"])


def test_a_difference_from_other_base_weights_is_refused() -> None:
    shipped = encode_difference(_weights(0), _weights(1))
    with pytest.raises(ConfigurationError, match="other base weights"):
        apply_difference(_weights(2), shipped)


def test_vectors_carry_the_shipped_weights_digest() -> None:
    assert identity(READING_ENCODER) == f"{READING_ENCODER}@{weights_digest()}"
    assert identity("/some/model/folder") == "/some/model/folder"
    assert identity("/some/model/folder", "onnx-int8") == "/some/model/folder+int8"


@pytest.mark.slow
def test_the_shipped_encoder_is_built_once_from_the_packaged_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = reading_encoder_dir(tmp_path)
    assert (folder / "model.safetensors").is_file() and (folder / "modules.json").is_file()
    assert reading_encoder_dir(tmp_path) == folder
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no temporary folder left behind
    from rag.models.embedder import SentenceTransformerEmbedder

    texts = ["How many days of leave do I get?", "Annual leave: 25 days a year."]
    encoder = SentenceTransformerEmbedder(READING_ENCODER, cache_dir=tmp_path)
    vectors = encoder.embed_queries(texts)
    assert vectors.shape == (2, 384) and encoder.runtime == "onnx"
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    int8 = SentenceTransformerEmbedder(READING_ENCODER, cache_dir=tmp_path, runtime="onnx-int8")
    quantised = int8.embed_passages(texts)
    assert int8.runtime == "onnx-int8" and sorted(p.name for p in tmp_path.glob("*int8.onnx"))
    assert np.all((quantised * vectors).sum(axis=1) > 0.97) and not np.allclose(quantised, vectors, atol=1e-4)
    again = SentenceTransformerEmbedder(READING_ENCODER, cache_dir=tmp_path, runtime="onnx-int8")
    assert again._onnx is not None  # checked once, then loaded without PyTorch
    np.testing.assert_allclose(again.embed_passages(texts), quantised, atol=1e-6)
