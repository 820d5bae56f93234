"""The models' room and its card index: every weights file in rag/models/ is a card of ``rag.models.CARDS``, every
card's file exists and its loader imports, its training command names a module and options that exist, and
docs/models.md lists each card with its file (or package) and that command."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

from rag.models import CARDS, MODELS_DIR, Card

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
WEIGHTS_SUFFIXES = {".json", ".npz", ".onnx", ".safetensors", ".bin", ".gguf"}


def test_every_weights_file_in_the_room_has_a_card() -> None:
    files = {p.name for p in MODELS_DIR.iterdir() if p.suffix in WEIGHTS_SUFFIXES}
    carded = {c.path.name for c in CARDS if c.path is not None}
    assert files == carded, f"files without a card: {files - carded}; cards without a file: {carded - files}"


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.name)
def test_a_card_names_its_loader_and_a_training_command_that_exist(card: Card) -> None:
    assert card.path is None or card.path.is_file()
    assert importlib.util.find_spec(card.loader) is not None, card.loader
    if card.path is not None:
        assert card.trained_by, f"{card.name} ships from this repo: say what rebuilds it"
    if card.trained_by:
        words = card.trained_by.split()
        assert words[:3] == ["python", "-m", words[2]] and words[2].startswith("evaluation.training.")
        spec = importlib.util.find_spec(words[2])
        assert spec is not None and spec.origin is not None, words[2]
        source = Path(spec.origin).read_text()
        for option in (w for w in words[3:] if w.startswith("--")):
            assert f'"{option}"' in source, f"{words[2]} has no {option} option"


def test_the_card_index_lists_every_card_with_its_file_and_training_command() -> None:
    doc = DOC.read_text()
    index = doc[doc.index("## Card index") :]
    index = index[: index.index("\n## ", 4)] if "\n## " in index[4:] else index
    rows = [line for line in index.splitlines() if line.startswith("| ") and not line.startswith("| model")]
    for card in CARDS:
        row = next((r for r in rows if r.startswith(f"| {card.name} ")), None)
        assert row is not None, f"docs/models.md's card index has no row for {card.name}"
        weights = card.weights.removeprefix("package:").split("..")[0]
        assert weights in row, f"{card.name}: {weights} not in its row"
        if card.trained_by:
            assert f"`{card.trained_by}`" in row, f"{card.name}: `{card.trained_by}` not in its row"
        assert card.loader.replace(".", "/") in row, f"{card.name}: {card.loader} not in its row"
    assert len(rows) == len(CARDS), "a row of the card index is no card of rag.models.CARDS"


def test_the_loaders_import_without_loading_weights() -> None:
    for loader in sorted({c.loader for c in CARDS}):
        assert importlib.import_module(loader) is not None
