"""Builders for Chunks, Candidates and linked documents, plus an in-memory ChunkLookup, for stage tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import date

from rag.types import PUBLIC_GROUP, Candidate, Chunk, Principal, SearchFilter

TODAY = date(2025, 6, 1)


def make_chunk(
    text: str,
    *,
    doc_id: str = "doc-a",
    ordinal: int = 0,
    chunk_id: str | None = None,
    title: str = "Refund Policy",
    section: str = "",
    page: int | None = None,
    page_end: int | None = None,
    prev_id: str | None = None,
    next_id: str | None = None,
    groups: tuple[str, ...] = (PUBLIC_GROUP,),
    effective: date | None = None,
    expires: date | None = None,
    tags: tuple[str, ...] = (),
    n_tokens: int | None = None,
    source: str | None = None,
) -> Chunk:
    return Chunk(
        chunk_id=chunk_id or f"{doc_id}:{ordinal}",
        doc_id=doc_id,
        text=text,
        source=source or f"policies/{doc_id}.pdf",
        title=title,
        section=section,
        page=page,
        page_end=page_end,
        ordinal=ordinal,
        prev_id=prev_id,
        next_id=next_id,
        groups=groups,
        effective=effective,
        expires=expires,
        tags=tags,
        doc_version="v1",
        n_tokens=len(text.split()) if n_tokens is None else n_tokens,
    )


def make_candidate(
    text_or_chunk: str | Chunk,
    *,
    rerank: float | None = None,
    fused: float = 0.0,
    intents: tuple[int, ...] = (0,),
    **chunk_fields: object,
) -> Candidate:
    chunk = text_or_chunk if isinstance(text_or_chunk, Chunk) else make_chunk(text_or_chunk, **chunk_fields)  # type: ignore[arg-type]
    return Candidate(chunk=chunk, fused_score=fused, intents=intents, rerank_score=rerank)


def ranked(
    chunks: Iterable[Chunk], *, start: float = 10.0, intents: tuple[int, ...] = (0,)
) -> list[Candidate]:
    """Candidates with strictly decreasing rerank scores, in the given order (best first)."""
    return [
        Candidate(chunk=c, rerank_score=start - i, fused_score=1.0 / (61 + i), intents=intents)
        for i, c in enumerate(chunks)
    ]


def make_doc(
    doc_id: str,
    title: str,
    sections: Sequence[tuple[str, str]],
    **chunk_fields: object,
) -> list[Chunk]:
    """A document as linked chunks: (section, text) pairs in order, prev/next ids set, ordinals 0.."""
    ids = [f"{doc_id}:{i}" for i in range(len(sections))]
    return [
        make_chunk(
            text,
            doc_id=doc_id,
            ordinal=i,
            title=title,
            section=section,
            prev_id=ids[i - 1] if i else None,
            next_id=ids[i + 1] if i + 1 < len(ids) else None,
            **chunk_fields,  # type: ignore[arg-type]
        )
        for i, (section, text) in enumerate(sections)
    ]


def with_groups(chunks: Iterable[Chunk], *groups: str) -> list[Chunk]:
    return [replace(c, groups=groups) for c in chunks]


class InMemoryLookup:
    """A ChunkLookup over a list of chunks."""

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self.chunks = {c.chunk_id: c for c in chunks}

    def get(self, chunk_id: str) -> Chunk | None:
        return self.chunks.get(chunk_id)

    def doc_chunks(self, doc_id: str) -> Sequence[Chunk]:
        return sorted((c for c in self.chunks.values() if c.doc_id == doc_id), key=lambda c: c.ordinal)

    def docs_by_title(self, title: str) -> Sequence[str]:
        wanted = title.casefold().strip()
        found: dict[str, None] = {}
        for c in self.chunks.values():
            have = c.title.casefold()
            if wanted and (wanted in have or have in wanted):
                found.setdefault(c.doc_id)
        return list(found)


def user_filter(*groups: str, user: str = "alice", as_of: date = TODAY) -> SearchFilter:
    return SearchFilter(Principal(user, frozenset(groups)), as_of)
