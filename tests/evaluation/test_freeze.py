"""Freezing retrieval against an index: gold chunks found by quote coverage, distractors that cannot answer,
access control respected. An in-memory reader stands in for the index; the real one runs under `slow`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from evaluation.datasets import question_from_dict
from evaluation.generators import EmbeddingScorer
from evaluation.graders import normalised_match
from evaluation.position import SweepConfig, freeze_from_index, run_sweep
from rag.text import bm25_tokens
from tests.stages.factories import make_chunk

RULE = "Customers may return items within 45 days of delivery for a full refund."
GIFT = "Gift cards are not refundable, except where required by law."


class MemoryReader:
    """The slice of IndexReader that freezing uses: the generation's chunks, get(), and a BM25-ish lexical index
    (``reader.lexical.search``: this reader is its own ``LexicalIndex``)."""

    def __init__(self, chunks: list[Any]) -> None:
        self.generation = SimpleNamespace(chunks=chunks)
        self.by_id = {c.chunk_id: c for c in chunks}
        self.lexical = self

    def get(self, chunk_id: str) -> Any:
        return self.by_id.get(chunk_id)

    def search(self, tokens: list[str], filt: Any, n: int) -> list[tuple[str, float]]:
        q = set(tokens)
        scored = [
            (c.chunk_id, float(len(q & set(bm25_tokens(c.text)))))
            for c in self.generation.chunks
            if filt.allows(c)
        ]
        scored = [s for s in scored if s[1] > 0]
        return sorted(scored, key=lambda s: -s[1])[:n]


def corpus() -> list[Any]:
    chunks = [
        make_chunk("Refunds. " + RULE, doc_id="refunds", ordinal=0),
        make_chunk("Refund exceptions. " + GIFT, doc_id="refunds", ordinal=1),
        make_chunk(
            "Refunds after 45 days are store credit only.", doc_id="refunds", ordinal=2
        ),  # holds the answer
        make_chunk("HR only: refund of salary advances takes 10 days.", doc_id="hr", groups=("hr",)),
    ]
    chunks += [
        make_chunk(f"Refund form F-{i} goes to the finance team.", doc_id=f"misc{i}") for i in range(6)
    ]
    chunks += [
        make_chunk(f"Parking permit rule {i} for the warehouse.", doc_id=f"park{i}") for i in range(20)
    ]
    return chunks


def test_freeze_finds_gold_and_clean_distractors() -> None:
    q = question_from_dict(
        {
            "id": "s01",
            "question": "How many days for a refund?",
            "answers": ["45 days"],
            "evidence": [{"quote": RULE}],
            "user": "alice",
            "groups": ["staff"],
        }
    )
    warnings: list[str] = []
    sets = freeze_from_index(
        [q],
        None,
        reader=MemoryReader(corpus()),
        retrieval="lexical",
        min_distractors=12,
        warn=warnings.append,
    )
    assert warnings == []
    es = sets[0]
    assert [p.pid for p in es.gold] == ["refunds:0"] and es.gold[0].rank is not None
    ids = [p.pid for p in es.distractors]
    assert "refunds:2" not in ids  # mentions "45 days": it would answer the control
    assert "hr:0" not in ids  # alice may not read it
    assert not any(normalised_match(p.text, es.answers) for p in es.distractors)
    retrieved = [p for p in es.distractors if p.origin == "retrieved"]
    assert retrieved and all(p.origin == "pool" for p in es.distractors[len(retrieved) :])
    assert [p.rank for p in retrieved] == sorted(p.rank for p in retrieved)  # frozen in retrieval order
    assert len(es.distractors) >= 12
    again = freeze_from_index(
        [q], None, reader=MemoryReader(corpus()), retrieval="lexical", min_distractors=12
    )
    assert again == sets  # pool top-up is seeded


def test_pool_distractors_and_missing_quotes() -> None:
    qs = [
        question_from_dict(
            {
                "id": "s02",
                "question": "Gift card refund?",
                "answers": ["not refundable"],
                "evidence": [{"quote": GIFT}, {"quote": RULE}],
            }
        ),
        question_from_dict(
            {
                "id": "x",
                "question": "Unknown?",
                "answers": ["y"],
                "evidence": [{"quote": "This sentence is nowhere in the corpus at all."}],
            }
        ),
        question_from_dict({"id": "u", "type": "unanswerable", "question": "Dog?"}),
    ]
    warnings: list[str] = []
    sets = freeze_from_index(
        qs, None, reader=MemoryReader(corpus()), distractors="pool", min_distractors=10, warn=warnings.append
    )
    assert [s.qid for s in sets] == ["s02"]  # no gold found: skipped with a warning; unanswerable: skipped
    assert any(w.startswith("x:") for w in warnings)
    assert [p.pid for p in sets[0].gold] == ["refunds:1", "refunds:0"]  # quote order
    assert all(p.origin == "pool" for p in sets[0].distractors)


def test_a_sweep_over_a_frozen_index(tmp_path: Path) -> None:
    q = question_from_dict(
        {
            "id": "s01",
            "question": "How many days for a refund?",
            "answers": ["45 days"],
            "evidence": [{"quote": RULE}],
        }
    )
    sets = freeze_from_index(
        [q], None, reader=MemoryReader(corpus()), retrieval="lexical", min_distractors=20
    )
    cfg = SweepConfig(
        generator="extractive", scorer="lexical", lengths=("10", "20"), freeze_out=tmp_path / "f.json"
    )
    result = run_sweep(cfg, sets=sets)
    assert (tmp_path / "f.json").is_file()
    assert all(c.accuracy == 1.0 for c in result.cells if c.kind == "depth")
    assert result.cell("control").accuracy == 0.0


class CountingEmbedder:
    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        out = np.array([[1.0, float(len(t) % 3)] for t in texts])
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_embedding_scorer_caches_sentence_vectors() -> None:
    emb = CountingEmbedder()
    score = EmbeddingScorer(emb)
    first = score("refund window", ["the refund window", "badges"])
    assert len(first) == 2 and first[0] > first[1]
    assert score("refund window", ["badges", "the refund window"]) == first[::-1]
    assert emb.texts == 3  # nothing embedded twice


@pytest.mark.slow
def test_freeze_against_the_ingested_sample_corpus(sample_data_dir: Path) -> None:
    from evaluation.datasets import default_questions_path, load_questions
    from rag.config import load_settings

    settings = load_settings(data_dir=sample_data_dir)
    qs = [q for q in load_questions(default_questions_path()) if not q.expects_abstention]
    sets = freeze_from_index(qs, settings, retrieval="lexical", min_distractors=19)
    assert len(sets) >= len(qs) - 2
    for es in sets:
        assert es.gold and not any(normalised_match(p.text, es.answers) for p in es.distractors)


def test_a_policy_question_without_short_answers_is_graded_by_its_gold_quotes(tmp_path: Path) -> None:
    q = question_from_dict(
        {"id": "p01", "question": "How many days for a refund?", "evidence": [{"quote": RULE}]}
    )
    sets = freeze_from_index(
        [q], None, reader=MemoryReader(corpus()), retrieval="lexical", min_distractors=20
    )
    assert sets[0].answers == () and sets[0].quotes == (RULE,)
    cfg = SweepConfig(
        generator="extractive", scorer="lexical", lengths=("10",), freeze_out=tmp_path / "f.json"
    )
    result = run_sweep(cfg, sets=sets)
    depth = [c for c in result.cells if c.kind == "depth"]
    assert depth and all(c.accuracy == 1.0 for c in depth)  # the extractive answer quotes the rule
    assert result.cell("control").accuracy == 0.0  # without the gold passage no answer holds the quote
    from evaluation.datasets import load_frozen

    assert load_frozen(tmp_path / "f.json")[0][0].quotes == (RULE,)  # frozen with the set
