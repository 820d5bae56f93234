"""Ingestion: files -> chunks -> the next index generation, published atomically.

Re-running is safe and cheap: a file whose bytes (and sidecar) are unchanged is not parsed again, a chunk
whose text was embedded before is not embedded again (embedding cache), and a run that changes nothing writes
nothing. One ingestion runs at a time (a lock file); readers keep serving the published generation meanwhile.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ingest.chunking import chunk_document, chunking_signature
from ingest.ocr import Recogniser
from ingest.sources import SUPPORTED, SourceDocument, discover, file_version, load_file, skip_reason
from rag.config import Settings
from rag.errors import IngestError, IngestFileError
from rag.models.embedder import Embedder, embedder_for, passage_text, reading_encoder_for
from rag.models.reading import identity
from rag.models.sentences import SentenceStore, build_sentence_store, chunk_heading, reading_model_of
from rag.stores import GenerationBuild, IndexWriter
from rag.stores.bm25 import average_length
from rag.stores.extracted import ExtractedStore
from rag.stores.index import (
    GENERATIONS,
    ChunkArchive,
    Manifest,
    current_generation,
    generation_dir,
    index_root,
    load_chunks,
    publish,
    save_chunks,
)
from rag.stores.memory import load_dense_matrix
from rag.stores.qdrant_server import open_index_writers
from rag.text import bm25_tokens
from rag.types import Chunk

KEEP_GENERATIONS = 3


@dataclass
class FileResult:
    path: str
    status: str  # indexed | unchanged | removed | failed | skipped
    reason: str | None = None
    chunks: int = 0
    message: str | None = None
    warnings: list[str] = field(default_factory=list)  # indexed, but pages left out (OCR too poor, blank)
    notices: list[str] = field(default_factory=list)  # worth knowing: a new OCR engine read the pages again
    ocr_pages: int = 0  # pages whose text OCR gave
    hint: str | None = None  # what to do about a failed or skipped file


@dataclass
class IngestReport:
    files: list[FileResult] = field(default_factory=list)
    generation: str | None = None
    published: bool = False
    embedded: int = 0
    index_chunks: int = 0
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    pages: int = 0
    ocr_seconds: list[float] = field(default_factory=list)  # each page OCR read this run (render + recognise)

    @property
    def totals(self) -> dict[str, int]:
        totals = {"indexed": 0, "unchanged": 0, "removed": 0, "failed": 0, "skipped": 0}
        for f in self.files:
            totals[f.status] += 1
        totals["chunks"] = sum(f.chunks for f in self.files if f.status in ("indexed", "unchanged"))
        totals["ocr_pages"] = sum(f.ocr_pages for f in self.files)
        totals["with_warnings"] = sum(1 for f in self.files if f.warnings)
        return totals

    @property
    def ok(self) -> bool:
        return not any(f.status == "failed" for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [
                {
                    "path": f.path,
                    "status": f.status,
                    "reason": f.reason,
                    "chunks": f.chunks,
                    "message": f.message,
                    "hint": f.hint,
                    "warnings": f.warnings,
                    "notices": f.notices,
                    "ocr_pages": f.ocr_pages,
                }
                for f in self.files
            ],
            "totals": self.totals,
            "generation": self.generation,
            "published": self.published,
            "embedded": self.embedded,
            "index_chunks": self.index_chunks,
            "seconds": round(self.seconds, 3),
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
            "pages": self.pages,
            "ocr": _ocr_summary(self.ocr_seconds),
        }


def _ocr_summary(seconds: Sequence[float]) -> dict[str, Any]:
    """Pages OCR read this run and their time each (wall, rendering included): p50, p95, total."""
    if not seconds:
        return {"pages": 0}
    ordered = sorted(seconds)
    return {
        "pages": len(ordered),
        "p50_s": round(ordered[len(ordered) // 2], 3),
        "p95_s": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 3),
        "total_s": round(sum(ordered), 2),
    }


class EmbeddingCache:
    """Vectors by (model, text): a re-run after a crash or a re-chunk embeds only what is new."""

    def __init__(self, data_dir: Path, model: str) -> None:
        self.path = Path(data_dir) / "embeddings.sqlite"
        self.model = model
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=60)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB)")

    def key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model}\x00{text}".encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            for key, blob in self.conn.execute(
                f"SELECT key, vector FROM vectors WHERE key IN ({marks})", part
            ):
                out[key] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put_many(self, items: Sequence[tuple[str, np.ndarray]]) -> None:
        with self.conn:
            self.conn.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items],
            )

    def vectors(
        self,
        texts: Sequence[str],
        embedder: Embedder,
        *,
        batch: int = 512,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[list[np.ndarray], int]:
        """A vector per text (aligned), embedding only texts the cache lacks (each distinct text once) and
        storing them batch by batch, so a crashed run loses at most one batch. Returns (vectors, embedded)."""
        keys = [self.key(x) for x in texts]
        found = self.get_many(keys)
        missing = list({k: i for i, k in enumerate(keys) if k not in found}.values())
        # longest first, so each batch holds texts of about one length and the embedder pads little: the EPA
        # PDFs' sentence units (sorted by text) padded to 1.39x their word-pieces in batches as given, 1.09x so
        missing.sort(key=lambda i: -len(texts[i]))
        for start in range(0, len(missing), batch):
            if progress:
                progress(start, len(missing))
            part = missing[start : start + batch]
            out = embedder.embed_passages([texts[i] for i in part])
            items = [(keys[i], out[j]) for j, i in enumerate(part)]
            self.put_many(items)
            found.update(items)
        return [found[k] for k in keys], len(missing)

    def close(self) -> None:
        self.conn.close()


Loaded = FileResult | tuple[str, list[SourceDocument] | BaseException]  # a verdict, or (version, documents)


def _read_ahead(
    files: Sequence[Path],
    settings: Settings,
    old_sources: dict[str, Any],
    old_docs: dict[str, Any],
    chunking: str,
    recogniser: Recogniser | None = None,
) -> Iterator[tuple[Path, Loaded]]:
    """Each file in order with what reading it gave: a ``FileResult`` for an unreadable or unchanged file, else
    its version and its documents (or the exception reading raised). Files are read a few at a time in
    threads, so as many PDFs are parsed at once (each in its own child process, ``ingest.pdf``) as there are
    cores, while the caller chunks the earlier ones; at most ``2 x workers`` files are read ahead."""
    from concurrent.futures import Future, ThreadPoolExecutor

    def read(path: Path) -> Loaded:
        source = str(path.resolve())
        skipped = skip_reason(path)
        if skipped is not None:
            reason, message, hint = skipped
            return FileResult(source, "skipped", reason, message=message, hint=hint)
        try:
            version = file_version(path)
        except OSError as exc:
            return FileResult(source, "failed", "unreadable", message=str(exc))
        known = old_sources.get(source)
        if known and known["version"] == version and known.get("chunking") == chunking:
            n = sum(len(old_docs[d]["chunk_ids"]) for d in known["doc_ids"] if d in old_docs)
            return FileResult(source, "unchanged", chunks=n)
        try:
            return version, load_file(path, settings, recogniser)
        except Exception as exc:  # reported, in order, by the caller
            return version, exc

    workers = max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        pending: list[tuple[Path, Future[Loaded]]] = []
        queue = iter(files)
        for path in queue:
            pending.append((path, pool.submit(read, path)))
            if len(pending) >= 2 * workers:
                break
        while pending:
            path, future = pending.pop(0)
            nxt = next(queue, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(read, nxt)))
            yield path, future.result()


@contextmanager
def ingest_lock(data_dir: Path, wait_s: float = 600.0) -> Iterator[None]:
    """One writer at a time. The OS releases the lock if the process dies (kill -9 included)."""
    root = index_root(data_dir)
    (root / GENERATIONS).mkdir(parents=True, exist_ok=True)
    with open(root / "ingest.lock", "w") as fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise IngestError(
                        "Another ingestion is still running on this data directory.",
                        hint="Wait for it to finish, or check for a stuck `rag ingest` process.",
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _next_generation_name(data_dir: Path) -> str:
    folder = index_root(data_dir) / GENERATIONS
    numbers = [int(p.name.split("-")[1]) for p in folder.glob("gen-*") if p.name.split("-")[1].isdigit()]
    return f"gen-{max(numbers, default=0) + 1:06d}"


def _clean_stale(data_dir: Path) -> None:
    """Remove half-built generations left by a crashed run (we hold the lock, so none is in progress)."""
    for tmp in (index_root(data_dir) / GENERATIONS).glob(".tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)
    for tmp in index_root(data_dir).glob("CURRENT.tmp-*"):
        tmp.unlink(missing_ok=True)


def _collect_garbage(data_dir: Path, keep: int = KEEP_GENERATIONS) -> None:
    folder = index_root(data_dir) / GENERATIONS
    current = current_generation(data_dir)
    gens = sorted(p for p in folder.glob("gen-*") if p.is_dir())
    for old in gens[:-keep]:
        if old.name != current:
            shutil.rmtree(old, ignore_errors=True)


def _doc_entry(doc: SourceDocument, chunks: Sequence[Chunk]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "source": doc.source,
        "version": doc.version,
        "fmt": doc.fmt,
        "title": doc.meta.title,
        "groups": list(doc.meta.groups),
        "effective": doc.meta.effective.isoformat() if doc.meta.effective else None,
        "expires": doc.meta.expires.isoformat() if doc.meta.expires else None,
        "tags": list(doc.meta.tags),
        "pages": sum(1 for p in doc.pages if p.number is not None),
        "chunk_ids": [c.chunk_id for c in chunks],
    }
    if doc.extraction is not None and (doc.extraction.ocr_pages or doc.extraction.view_text is not None):
        # where the source viewer finds the recognised words or the converted text (``rag.stores.extracted``)
        entry["extracted"] = {
            "key": doc.extraction.content_key,
            "by": doc.extraction.engine,
            "ocr_pages": list(doc.extraction.ocr_pages),
        }
    return entry


ProgressFn = Callable[[str, int, int], None]  # (phase, done, total)


def ingest(
    paths: Sequence[str],
    settings: Settings,
    *,
    prune: bool = False,
    exact: bool = False,
    embedder: Embedder | None = None,
    reading_encoder: Embedder | None = None,
    progress: ProgressFn | None = None,
    rebuild: bool = False,
) -> IngestReport:
    """Ingest files, folders and globs; publish a new generation only when something changed.

    ``prune``: documents whose files are gone are removed. ``exact``: the index holds exactly the files under
    ``paths``; every other source is removed too (the same corpus read from another checkout is not kept twice).
    ``rebuild``: publish a new generation even when nothing changed, every store written afresh in the current
    layout from the cached vectors (a generation of the previous release is migrated so).
    """
    started = time.perf_counter()
    report = IngestReport()
    data_dir = Path(settings.data_dir)
    with ingest_lock(data_dir):
        _clean_stale(data_dir)
        current_name = current_generation(data_dir)
        manifest = Manifest.load(generation_dir(data_dir, current_name)) if current_name else None
        model_name = settings.embedding_model
        if manifest and manifest.embedding_model != model_name:
            raise IngestError(
                f"The index was built with embedding model {manifest.embedding_model!r}, not {model_name!r}.",
                hint="Use a fresh --data-dir for a different embedding model.",
            )
        old_docs = dict(manifest.documents) if manifest else {}
        old_sources = dict(manifest.sources) if manifest else {}

        new_docs: dict[str, tuple[SourceDocument, list[Chunk]]] = {}
        removed_docs: set[str] = set()
        new_sources: dict[str, dict[str, Any]] = dict(old_sources)

        # 1. read and chunk what changed
        t = time.perf_counter()
        files = discover(paths)
        if not files and not (prune or exact):
            raise IngestError(
                f"No files found in {', '.join(paths)}.", hint=f"Ingestion reads {SUPPORTED}; check the path."
            )
        given: set[str] = set()  # every source named this run, read or not (for ``exact``)
        # new chunking rules or sizes re-chunk a file whose bytes are unchanged
        chunking = chunking_signature(settings)
        store = ExtractedStore(data_dir)
        recogniser = Recogniser(
            settings, store, progress=(lambda done, total: progress("ocr", done, total)) if progress else None
        )
        loaded_files = _read_ahead(files, settings, old_sources, old_docs, chunking, recogniser)
        for i, (path, loaded) in enumerate(loaded_files):
            if progress:
                progress("read", i, len(files))
            source = str(path.resolve())
            given.add(source)
            if isinstance(loaded, FileResult):  # unreadable, skipped or unchanged
                if loaded.status == "unchanged":  # what was left out of it is still left out: say so again
                    loaded.warnings = list(old_sources.get(source, {}).get("warnings") or [])
                report.files.append(loaded)
                continue
            version, outcome = loaded
            known = old_sources.get(source)
            try:
                if isinstance(outcome, BaseException):
                    raise outcome
                chunked = [(doc, chunk_document(doc, settings)) for doc in outcome]
            except IngestFileError as exc:
                status = "skipped" if exc.reason == "unsupported" else "failed"
                report.files.append(FileResult(source, status, exc.reason, message=str(exc), hint=exc.hint))
                continue
            except Exception as exc:  # one bad file never stops the batch
                report.files.append(
                    FileResult(source, "failed", "unreadable", message=f"{type(exc).__name__}: {exc}")
                )
                continue
            if not any(chunks for _, chunks in chunked):
                report.files.append(
                    FileResult(source, "failed", "no_text", message="No text could be extracted.")
                )
                continue
            for doc, chunks in chunked:
                if chunks:
                    new_docs[doc.doc_id] = (doc, chunks)
                    report.pages += sum(1 for p in doc.pages if p.number is not None)
            ids = [doc.doc_id for doc, chunks in chunked if chunks]
            if known:  # documents that were in this file before but are not any more
                removed_docs.update(d for d in known["doc_ids"] if d not in ids)
            result = FileResult(source, "indexed", chunks=sum(len(c) for _, c in chunked))
            for doc, _ in chunked:
                extraction = doc.extraction
                if extraction is None:
                    continue
                if extraction.view_text is not None:
                    store.put_text(extraction.content_key, extraction.engine, extraction.view_text)
                result.warnings.extend(extraction.warnings)
                result.notices.extend(extraction.notices)
                result.ocr_pages += len(extraction.ocr_pages)
            new_sources[source] = {"version": version, "doc_ids": ids, "chunking": chunking}
            if result.warnings:
                new_sources[source]["warnings"] = result.warnings
            report.files.append(result)
        store.close()
        report.ocr_seconds = list(recogniser.page_seconds)
        report.timings["read_chunk"] = time.perf_counter() - t

        if prune or exact:
            for source, entry in old_sources.items():
                if not Path(source).exists() or (exact and source not in given):
                    removed_docs.update(entry["doc_ids"])
                    new_sources.pop(source, None)
                    n = sum(len(old_docs[d]["chunk_ids"]) for d in entry["doc_ids"] if d in old_docs)
                    report.files.append(FileResult(source, "removed", chunks=n))

        # unchanged documents need nothing; a run that changes nothing writes nothing. A list in file order,
        # not a set: the chunk order (and so every BM25 and dense tie) must not depend on the hash seed.
        changed = [d for d, (doc, chunks) in new_docs.items() if old_docs.get(d) != _doc_entry(doc, chunks)]
        removed_docs -= set(new_docs)
        # files re-chunked under new rules or sizes into the same chunks: record that, or every run reads them again
        rechunked = any(
            old_sources.get(s, {}).get("chunking") != e.get("chunking") for s, e in new_sources.items()
        )
        writers = open_index_writers(settings)
        try:
            published = _write_generation(
                writers,
                settings,
                report,
                current_name=current_name,
                manifest=manifest,
                new_docs=new_docs,
                new_sources=new_sources,
                changed=changed,
                removed_docs=removed_docs,
                embedder=embedder,
                reading_encoder=reading_encoder,
                progress=progress,
                rechunked=rechunked or rebuild,
            )
        finally:
            for writer in writers:
                writer.close()
        if published:
            _collect_garbage(data_dir)
    report.seconds = time.perf_counter() - started
    return report


def _write_generation(
    writers: Sequence[IndexWriter],
    settings: Settings,
    report: IngestReport,
    *,
    current_name: str | None,
    manifest: Manifest | None,
    new_docs: dict[str, tuple[SourceDocument, list[Chunk]]],
    new_sources: dict[str, dict[str, Any]],
    changed: Sequence[str],
    removed_docs: set[str],
    embedder: Embedder | None,
    progress: ProgressFn | None,
    reading_encoder: Embedder | None = None,
    rechunked: bool = False,
) -> bool:
    """Embed what changed, write the next generation through ``writers`` and publish it; True when it did.

    A run that changes nothing writes nothing, unless a writer finds its part of the published generation stale
    (an index that predates the sparse BM25 leg, a Qdrant server that lacks the published generation), or files
    were ``rechunked`` under new chunking rules or sizes (the manifest records them, with nothing to embed),
    or the published generation lacks the reading encoder's vectors (written by an earlier release, or with
    another reading model): then the generation is rebuilt even though no chunk changed.
    """
    data_dir = Path(settings.data_dir)
    model_name = settings.embedding_model
    # vectors are cached by model and text: int8 vectors (RAG_EMBEDDING_RUNTIME=onnx-int8) under their own name
    cached_as = identity(model_name, settings.embedding_runtime)
    reading_name = identity(settings.reading_model, settings.reading_runtime)
    old_docs = dict(manifest.documents) if manifest else {}
    upgrade = manifest is not None and any(w.is_stale(manifest) for w in writers)
    if current_name and not upgrade:
        upgrade = reading_model_of(generation_dir(data_dir, current_name)) != reading_name
    if not changed and not removed_docs and not upgrade and not rechunked:
        if current_name:
            for writer in writers:  # a run that died between publishing the folder and publishing a store
                writer.publish(current_name)
        report.generation = current_name
        report.index_chunks = manifest.n_chunks if manifest else 0
        return False

    # 2. embed new chunks (cached by text)
    t = time.perf_counter()
    embed_chunks = [c for d in changed for c in new_docs[d][1]]
    emb = embedder or embedder_for(settings)
    cache = EmbeddingCache(data_dir, cached_as)
    try:
        chunk_vectors, report.embedded = cache.vectors(
            [passage_text(c.title, c.section, c.text) for c in embed_chunks],
            emb,
            progress=(lambda done, total: progress("embed", done, total)) if progress else None,
        )
    finally:
        cache.close()
    report.timings["embed"] = time.perf_counter() - t

    # 3. build the next generation beside the published one
    t = time.perf_counter()
    name = _next_generation_name(data_dir)
    tmp = index_root(data_dir) / GENERATIONS / f".tmp-{name}-{os.getpid()}"
    tmp.mkdir(parents=True)
    old_chunks: list[Chunk] = []
    old_tokens: list[list[str]] = []
    previous_folder = generation_dir(data_dir, current_name) if current_name else None
    if previous_folder is not None:
        old_chunks, old_tokens = load_chunks(previous_folder)
    drop_docs = set(changed) | removed_docs
    kept = [(c, tok) for c, tok in zip(old_chunks, old_tokens, strict=True) if c.doc_id not in drop_docs]
    added = [(c, bm25_tokens(passage_text(c.title, c.section, c.text))) for c in embed_chunks]
    all_pairs = kept + added
    all_chunks = [c for c, _ in all_pairs]
    all_tokens = [tok for _, tok in all_pairs]
    build = GenerationBuild(
        name=name,
        folder=tmp,
        chunks=all_chunks,
        tokens=all_tokens,
        dim=emb.dim,
        fresh=list(zip(embed_chunks, chunk_vectors, strict=True)),
        dropped=[c.chunk_id for c in old_chunks if c.doc_id in drop_docs],
        all_vectors=_AllVectors(
            all_chunks,
            list(zip(embed_chunks, chunk_vectors, strict=True)),
            [c.chunk_id for c in old_chunks],
            previous_folder,
            data_dir,
            cached_as,
            emb,
        ),
        previous=previous_folder,
        previous_avgdl=manifest.bm25_avgdl if manifest else None,
    )
    try:
        for writer in writers:
            writer.write(build)
        save_chunks(tmp, all_chunks)
        t_sent = time.perf_counter()
        _sentence_store(all_chunks, data_dir, current_name, cached_as, emb).save(tmp)
        report.timings["embed_sentences"] = time.perf_counter() - t_sent
        t_read = time.perf_counter()
        reading = reading_encoder or reading_encoder_for(settings)
        _sentence_store(all_chunks, data_dir, current_name, reading_name, reading, reading=True).save(
            tmp, reading=True
        )
        report.timings["embed_reading"] = time.perf_counter() - t_read
        documents = {d: e for d, e in old_docs.items() if d not in drop_docs}
        for doc_id in changed:
            doc, chunks = new_docs[doc_id]
            documents[doc_id] = _doc_entry(doc, chunks)
        new_manifest = Manifest(
            generation=name,
            created_at=datetime.now(UTC).isoformat(),
            embedding_model=model_name,
            dim=emb.dim,
            documents=documents,
            sources={s: e for s, e in new_sources.items() if any(d in documents for d in e["doc_ids"])},
            bm25_avgdl=average_length(all_tokens),
        )
        (tmp / "manifest.json").write_text(new_manifest.to_json())
        (tmp / "ingest-report.json").write_text(json.dumps([asdict(f) for f in report.files], indent=1))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ChunkArchive(data_dir).add(embed_chunks)
    report.timings["build"] = time.perf_counter() - t

    # 4. publish atomically: the folder (CURRENT), then each store
    publish(data_dir, tmp, name)
    for writer in writers:
        writer.publish(name)
    report.generation = name
    report.published = True
    report.index_chunks = len(all_chunks)
    return True


class _AllVectors:
    """Every chunk's vector, aligned with ``chunks`` (``GenerationBuild.all_vectors``), computed once however
    many writers ask: this run's vectors, then the published generation's dense matrix, then the embedding cache
    (embedding only what it lacks) for what neither holds (a generation of the previous release)."""

    def __init__(
        self,
        chunks: Sequence[Chunk],
        fresh: Sequence[tuple[Chunk, np.ndarray]],
        previous_ids: Sequence[str],
        previous: Path | None,
        data_dir: Path,
        model: str,
        emb: Embedder,
    ) -> None:
        self.chunks, self.fresh, self.previous_ids = chunks, fresh, previous_ids
        self.previous, self.data_dir, self.model, self.emb = previous, data_dir, model, emb
        self._matrix: np.ndarray | None = None

    def __call__(self) -> np.ndarray:
        if self._matrix is None:
            self._matrix = self._compute()
        return self._matrix

    def _compute(self) -> np.ndarray:
        matrix = np.zeros((len(self.chunks), self.emb.dim), dtype=np.float32)
        row = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        done = np.zeros(len(self.chunks), dtype=bool)
        for c, v in self.fresh:
            matrix[row[c.chunk_id]] = v
            done[row[c.chunk_id]] = True
        published = load_dense_matrix(self.previous) if self.previous is not None else None
        if published is not None and not done.all():
            for j, cid in enumerate(self.previous_ids):
                i = row.get(cid)
                if i is not None and not done[i]:
                    matrix[i] = published[j]
                    done[i] = True
        missing = np.flatnonzero(~done).tolist()
        if len(missing):
            cache = EmbeddingCache(self.data_dir, self.model)
            try:
                texts = [
                    passage_text(self.chunks[i].title, self.chunks[i].section, self.chunks[i].text)
                    for i in missing
                ]
                matrix[missing] = np.asarray(cache.vectors(texts, self.emb)[0], dtype=np.float32).reshape(
                    -1, self.emb.dim
                )
            finally:
                cache.close()
        return matrix


def _sentence_store(
    chunks: Sequence[Chunk],
    data_dir: Path,
    current_name: str | None,
    model: str,
    emb: Embedder,
    *,
    reading: bool = False,
) -> SentenceStore:
    """Sentence vectors of every chunk (with ``reading``: the reading encoder's, of each sentence read after its
    heading): copied from the published generation, embedded (cached by text) when new."""
    folder = generation_dir(data_dir, current_name) if current_name else None
    previous = SentenceStore.load(folder, reading=reading) if folder is not None else None
    cache = EmbeddingCache(data_dir, model)

    def embed(texts: list[str]) -> dict[str, np.ndarray]:
        return dict(zip(texts, cache.vectors(texts, emb)[0], strict=True))

    try:
        return build_sentence_store(
            [(c.chunk_id, c.text) for c in chunks],
            previous=previous,
            embed=embed,
            dim=emb.dim,
            headings={c.chunk_id: chunk_heading(c.title, c.section) for c in chunks} if reading else None,
            model=model if reading else "",
        )
    finally:
        cache.close()
