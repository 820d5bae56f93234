"""Small policy passages as chunks and a hashed bag-of-words embedder: stand-ins for reranker and training tests."""

from __future__ import annotations

import numpy as np

from rag.types import PUBLIC_GROUP, Chunk

PASSAGES = [
    ("Leave policy", "Parental leave", "New parents get 20 days of paid parental leave from 2024 onwards."),
    ("Expenses", "Travel", "Economy class is required for flights under six hours. Receipts are mandatory."),
    ("Leave policy", "Sick leave", "Sick leave requires a doctor's note after three days of absence."),
    ("IT FAQ", "Passwords", "Passwords rotate every 90 days; use the self-service portal to reset yours."),
    ("Leave policy", "Holidays", "Employees get 25 days of holiday per year, plus public holidays."),
]


def make_chunk(i: int, title: str, section: str, text: str) -> Chunk:
    return Chunk(
        chunk_id=f"c{i}",
        doc_id=f"d{i}",
        text=text,
        source=f"doc{i}.md",
        title=title,
        section=section,
        groups=(PUBLIC_GROUP,),
        doc_version="v",
        n_tokens=len(text.split()),
    )


class HashEmbedder:
    """Bag-of-words hashed into 64 dimensions: a fast stand-in with the Embedder interface."""

    name = "hash-64"
    dim = 64

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        from rag.text import bm25_tokens

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in bm25_tokens(t):
                out[i, hash(tok) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)

    embed_queries = embed_passages


class CountingEmbedder(HashEmbedder):
    """HashEmbedder that records every text it embeds."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.seen.extend(texts)
        return HashEmbedder.embed_passages(self, texts)

    embed_queries = embed_passages
