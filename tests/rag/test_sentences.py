"""Sentence vectors are embedded once at ingestion and reused across generations."""

from __future__ import annotations

import numpy as np

from rag.sentences import SentenceStore, build_sentence_store, sentence_units


def fake_embed(calls: list[list[str]]):  # type: ignore[no-untyped-def]
    def embed(units: list[str]) -> dict[str, np.ndarray]:
        calls.append(list(units))
        return {u: np.full(4, float(len(u)), dtype=np.float32) for u in units}

    return embed


def test_units_drop_headings_and_fragments() -> None:
    units = sentence_units(
        "4.2 Gift cards\nGift cards are not refundable. In most places. Ask a lead about it."
    )
    assert units == ["Gift cards are not refundable.", "In most places.", "Ask a lead about it."]
    assert sentence_units("Short") == ["Short"]


def test_unchanged_chunks_are_copied_not_embedded_again(tmp_path) -> None:  # type: ignore[no-untyped-def]
    calls: list[list[str]] = []
    first = build_sentence_store(
        [("a", "One two three. Four five six.")], previous=None, embed=fake_embed(calls), dim=4
    )
    first.save(tmp_path)
    loaded = SentenceStore.load(tmp_path)
    assert loaded is not None and loaded.vectors_of("a") is not None and len(loaded.vectors_of("a")) == 2  # type: ignore[arg-type]
    second = build_sentence_store(
        [("a", "One two three. Four five six."), ("b", "Seven eight nine.")],
        previous=loaded,
        embed=fake_embed(calls),
        dim=4,
    )
    assert calls == [["Four five six.", "One two three."], ["Seven eight nine."]]
    np.testing.assert_array_equal(second.vectors_of("a"), first.vectors_of("a"))  # type: ignore[arg-type]
    assert second.vectors_of("missing") is None and "b" in second
    assert SentenceStore.load(tmp_path / "nowhere") is None
