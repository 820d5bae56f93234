"""A small synthetic corpus for the store contract: every filter dimension varies (groups, validity dates,
tags), each chunk names a code only it carries, and vectors are fixed random unit vectors (dim 8)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from rag.stores import GenerationBuild, IndexWriter
from rag.stores.bm25 import average_length
from rag.stores.index import GENERATIONS, Manifest, index_root, publish, save_chunks
from rag.text import bm25_tokens
from rag.types import PUBLIC_GROUP, Chunk

DIM = 8
TODAY = date(2026, 6, 1)
TOPICS = ("refund window", "travel booking", "salary band", "laptop theft")
GROUPS = (("staff",), ("staff",), ("hr",), ("security",), ("staff", "hr"), (PUBLIC_GROUP,))
TAGS: tuple[tuple[str, ...], ...] = ((), ("emea",), ("us",), ())
# (effective, expires): always valid, not yet in force, expired, valid on TODAY within a window
DATES: tuple[tuple[date | None, date | None], ...] = (
    (None, None),
    (date(2027, 1, 1), None),
    (None, date(2025, 12, 31)),
    (date(2026, 1, 1), date(2026, 12, 31)),
)


def chunk_id(doc_id: str, text: str) -> str:
    return hashlib.sha256(f"{doc_id}\x00{text}".encode()).hexdigest()[:32]


def make_corpus(n: int = 24, *, docs: int = 4, start: int = 0) -> list[Chunk]:
    """``n`` chunks over ``docs`` documents; chunk ``i`` says ``code<i>`` and its document's topic."""
    chunks = []
    for i in range(start, start + n):
        doc = f"doc{i % docs}"
        text = f"{TOPICS[i % len(TOPICS)]} rule {i} code{i}" + " detail" * (i % 3)
        effective, expires = DATES[(i // 4) % len(DATES)]
        groups = GROUPS[i % len(GROUPS)]
        if groups == (PUBLIC_GROUP,) and effective is None:  # nothing is readable in 1990 without a group
            effective = date(2000, 1, 1)
        chunks.append(
            Chunk(
                chunk_id=chunk_id(doc, text),
                doc_id=doc,
                text=text,
                source=f"{doc}.md",
                title=doc.title(),
                ordinal=i // docs,
                groups=groups,
                effective=effective,
                expires=expires,
                tags=TAGS[(i // 2) % len(TAGS)],
                doc_version="v1",
                n_tokens=len(text.split()),
            )
        )
    return chunks


def vectors_for(chunks: Sequence[Chunk]) -> dict[str, np.ndarray]:
    """A fixed unit vector per chunk, derived from its id (the same in every generation)."""
    out = {}
    for c in chunks:
        rng = np.random.default_rng(int(c.chunk_id[:8], 16))
        v = rng.normal(size=DIM).astype(np.float32)
        out[c.chunk_id] = v / np.linalg.norm(v)
    return out


@dataclass
class Written:
    name: str
    chunks: list[Chunk]
    tokens: list[list[str]]
    vectors: dict[str, np.ndarray]


def write_generation(
    data_dir: Path,
    writers: Sequence[IndexWriter],
    name: str,
    chunks: list[Chunk],
    *,
    previous: Written | None = None,
) -> Written:
    """What ``ingest`` does with the writers, over given chunks: write every store's part into the staging
    folder, save the chunks and the manifest, publish the folder, then each store."""
    tokens = [bm25_tokens(c.text) for c in chunks]
    vectors = vectors_for(chunks)
    old_ids = {c.chunk_id for c in previous.chunks} if previous else set()
    new_ids = {c.chunk_id for c in chunks}
    tmp = index_root(data_dir) / GENERATIONS / f".tmp-{name}-{os.getpid()}"
    tmp.mkdir(parents=True)
    build = GenerationBuild(
        name=name,
        folder=tmp,
        chunks=chunks,
        tokens=tokens,
        dim=DIM,
        fresh=[(c, vectors[c.chunk_id]) for c in chunks if c.chunk_id not in old_ids],
        dropped=sorted(old_ids - new_ids),
        all_vectors=lambda: np.array([vectors[c.chunk_id] for c in chunks], dtype=np.float32).reshape(
            -1, DIM
        ),
        previous=index_root(data_dir) / GENERATIONS / previous.name if previous else None,
        previous_avgdl=average_length(previous.tokens) if previous else None,
    )
    for writer in writers:
        writer.write(build)
    save_chunks(tmp, chunks)
    documents: dict[str, dict[str, object]] = {}
    for c in chunks:
        documents.setdefault(c.doc_id, {"title": c.title, "chunk_ids": []})["chunk_ids"].append(c.chunk_id)  # type: ignore[union-attr]
    manifest = Manifest(
        generation=name,
        created_at="2026-06-01T00:00:00+00:00",
        embedding_model="synthetic",
        dim=DIM,
        documents=documents,  # type: ignore[arg-type]
        sources={},
        bm25_avgdl=average_length(tokens),
    )
    (tmp / "manifest.json").write_text(manifest.to_json())
    publish(data_dir, tmp, name)
    for writer in writers:
        writer.publish(name)
    return Written(name, chunks, tokens, vectors)
