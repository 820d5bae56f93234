"""The one place a query pipeline is put together from settings.

``rag ask``, the UI, evaluation and the benchmarks all call :func:`build_pipeline`, so they answer with the same
collaborators: the index reader these settings name (embedded generations, or the Qdrant server when
``RAG_QDRANT_URL`` is set), the embedder, the reranker fed with the generation's stored sentence vectors and
passage tokens (``Pipeline`` wires those from the reader), the LLM client when one is configured, the trace
store when the caller wants traces saved, and the stages ``Pipeline.ask`` runs over them, in order
(``rag.pipeline.build_stages``, less the ones ``RAG_ABLATE`` removes; ``Pipeline`` calls it, as a Pipeline
constructed directly in a test needs the same list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag.config import Settings

if TYPE_CHECKING:
    from rag.models.embedder import Embedder
    from rag.pipeline import Pipeline
    from rag.protocols import LLM, TraceSink
    from rag.stores.index import IndexReader
    from rag.tracestore import TraceStore


def build_pipeline(
    settings: Settings,
    *,
    reader: IndexReader | None = None,
    trace_store: TraceSink | None = None,
    embedder: Embedder | None = None,
    llm: LLM | None = None,
) -> Pipeline:
    """The pipeline ``rag ask`` runs for these settings.

    ``trace_store``: where ``ask`` saves each trace (None: the caller saves traces itself, or not at all).
    ``reader`` / ``embedder`` / ``llm``: an already open reader (from ``open_index_reader(settings)``), loaded
    model or client to share (the UI, tests, benchmarks); by default the reader these settings name, the
    process-wide embedder for ``settings.embedding_model`` and an LLM client when ``settings.llm_base_url`` is set.
    """
    from rag.pipeline import Pipeline

    # Pipeline opens what is not given, in this order: the reader for these settings (open_index_reader: it
    # raises EmptyIndexError / IndexUnavailableError before any model loads), the process-wide embedder, the
    # reranker wired to the reader's stored sentence vectors and passage tokens, the configured LLM client.
    return Pipeline(settings, reader=reader, embedder=embedder, llm=llm, trace_store=trace_store)


def open_trace_store(settings: Settings) -> TraceStore:
    """The trace store, ready to write. The embedded SQLite store creates and migrates itself on first use
    (under the migration lock); PostgreSQL must have been migrated with ``rag db upgrade`` (a StorageError
    says so otherwise)."""
    from rag.tracestore import TraceStore
    from rag.tracestore.db import ensure_embedded_schema

    ensure_embedded_schema(settings.sqlalchemy_url)
    store = TraceStore.from_settings(settings)
    store.check_ready()
    return store


__all__ = ["build_pipeline", "open_trace_store"]
