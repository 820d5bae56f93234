"""Sentence vectors are embedded once at ingestion and reused across generations."""

from __future__ import annotations

import numpy as np

from rag.models.sentences import SentenceStore, build_sentence_store, sentence_units


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


def test_reading_text_reads_a_sentence_after_its_title_and_nearest_section() -> None:
    from rag.models.sentences import HEADING_WORDS, chunk_heading, reading_text

    heading = chunk_heading("Leave Policy", "Leave Policy > Annual leave > Carry-over")
    assert reading_text(heading, "You may carry  over 5 days.") == (
        "Leave Policy > Carry-over: You may carry over 5 days."
    )
    long_title = " ".join(f"w{i}" for i in range(HEADING_WORDS + 5))
    text = reading_text(f"{long_title} > {long_title} > 7. ROLES", "Hello there.")
    assert text == " ".join(f"w{i}" for i in range(HEADING_WORDS)) + " ... > 7. ROLES: Hello there."
    assert reading_text("", "Plain sentence.") == "Plain sentence."
    assert reading_text("Only a title", "S.") == "Only a title: S."


def test_reading_vectors_are_embedded_after_their_heading_and_kept_per_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    calls: list[list[str]] = []
    chunks = [("a", "One two three. Four five six.")]
    first = build_sentence_store(
        chunks, previous=None, embed=fake_embed(calls), dim=4, headings={"a": "Title > Part"}, model="m1"
    )
    assert calls == [["Title > Part: Four five six.", "Title > Part: One two three."]]
    first.save(tmp_path, reading=True)
    assert SentenceStore.load(tmp_path) is None  # the reading vectors have their own files
    loaded = SentenceStore.load(tmp_path, reading=True)
    assert loaded is not None and loaded.model == "m1"
    from rag.models.sentences import reading_model_of

    assert reading_model_of(tmp_path) == "m1" and reading_model_of(tmp_path / "none") is None
    same = build_sentence_store(
        chunks, previous=loaded, embed=fake_embed(calls), dim=4, headings={"a": "Title > Part"}, model="m1"
    )
    assert len(calls) == 1  # copied
    np.testing.assert_array_equal(same.vectors_of("a"), first.vectors_of("a"))  # type: ignore[arg-type]
    build_sentence_store(
        chunks, previous=loaded, embed=fake_embed(calls), dim=4, headings={"a": "Title > Part"}, model="m2"
    )
    assert len(calls) == 2  # another model's vectors are never reused
