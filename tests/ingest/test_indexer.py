"""Ingestion end to end: real files, real Qdrant embedded mode, real embedding model, real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import ingest.indexer as indexer
from ingest.indexer import ingest
from rag.config import load_settings
from rag.stores import GenerationBuild, LegsQuery, PublishedGeneration
from rag.stores.index import IndexReader, current_generation, generation_dir, index_root, load_chunks
from rag.stores.qdrant_server import open_index_reader, open_index_writers
from rag.text import bm25_tokens
from rag.types import Principal, SearchFilter
from supportbot.cli import app

REPO = Path(__file__).resolve().parents[2]
EVERYONE = SearchFilter(Principal("t", frozenset()), date(2026, 1, 1))


def write_docs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "refunds.md").write_text(
        "# Refund policy\n\n## 1. Window\n\nCustomers may return items within 45 days of delivery.\n\n"
        "## 2. Exceptions\n\nGift cards are not refundable.\n"
    )
    (folder / "leave.txt").write_text("Leave policy\n\nEmployees accrue 1.5 days of paid leave per month.\n")


def test_ingest_is_idempotent_and_writes_nothing_when_unchanged(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data)
    first = ingest([str(docs)], settings, embedder=embedder)
    assert first.ok and first.published and first.totals["indexed"] == 2 and first.embedded > 0
    gen = current_generation(data)
    snapshot = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}

    again = ingest([str(docs)], settings, embedder=embedder)
    assert again.totals == {
        "indexed": 0,
        "unchanged": 2,
        "removed": 0,
        "failed": 0,
        "skipped": 0,
        "chunks": first.totals["chunks"],
        "ocr_pages": 0,
        "with_warnings": 0,
    }
    assert again.embedded == 0 and not again.published
    assert current_generation(data) == gen
    after = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file() and p.name != "ingest.lock"}
    assert after == {p: t for p, t in snapshot.items() if p.name != "ingest.lock"}


def test_an_index_without_reading_vectors_gets_them_on_the_next_ingest(
    tmp_path: Path, embedder, caplog
) -> None:  # type: ignore[no-untyped-def]
    """An index written before the reading encoder (or with another reading model) keeps answering, reading its
    evidence by embedding it at query time with a notice; the next ingest adds the vectors, embedding nothing
    else."""
    from rag.models.reading import identity
    from rag.models.sentences import READING_FILE, READING_VECTORS_FILE, SentenceStore, reading_model_of

    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data)
    assert ingest([str(docs)], settings, embedder=embedder).published
    folder = generation_dir(data, current_generation(data))  # type: ignore[arg-type]
    assert reading_model_of(folder) == identity(settings.reading_model, settings.reading_runtime)
    stored = SentenceStore.load(folder, reading=True)
    assert stored is not None and len(stored.vectors) == len(SentenceStore.load(folder).vectors)  # type: ignore[union-attr]
    (folder / READING_FILE).unlink()  # as an earlier release wrote it
    (folder / READING_VECTORS_FILE).unlink()

    reader = IndexReader(data)
    chunk_id = reader.generation.chunk_ids[0]
    with caplog.at_level("WARNING"):
        assert (
            reader.reading_vectors(chunk_id, identity(settings.reading_model, settings.reading_runtime))
            is None
        )
        reader.reading_vectors(chunk_id, identity(settings.reading_model, settings.reading_runtime))
    assert sum("no sentence vectors by the reading encoder" in r.message for r in caplog.records) == 1
    reader.close()

    again = ingest([str(docs)], settings, embedder=embedder)
    assert again.published and again.embedded == 0  # no chunk embedded again
    folder = generation_dir(data, current_generation(data))  # type: ignore[arg-type]
    assert reading_model_of(folder) == identity(settings.reading_model, settings.reading_runtime)
    reader = IndexReader(data)
    vectors = reader.reading_vectors(chunk_id, identity(settings.reading_model, settings.reading_runtime))
    assert vectors is not None and vectors.shape[1] == 384
    assert reader.reading_vectors(chunk_id, "another-model") is None
    reader.close()
    assert not ingest([str(docs)], settings, embedder=embedder).published  # and then nothing to do


def test_new_chunk_sizes_or_rules_rechunk_files_whose_bytes_did_not_change(
    tmp_path: Path,
    embedder,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ingest.chunking as chunking

    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    (docs / "long.md").write_text(
        "# Handbook\n\n## Leave\n\n"
        + "\n\n".join(f"Rule {i}: leave request number {i} needs approval." for i in range(30))
    )
    first = ingest([str(docs)], load_settings(data_dir=data), embedder=embedder)
    assert first.ok and first.totals["indexed"] == 3
    smaller = load_settings(data_dir=data, chunk_target_tokens=40, chunk_max_tokens=60, chunk_min_tokens=8)
    resized = ingest([str(docs)], smaller, embedder=embedder)
    assert resized.totals["indexed"] == 3 and resized.totals["unchanged"] == 0  # every file read again
    assert resized.published and resized.totals["chunks"] > first.totals["chunks"]  # the long one split finer
    assert ingest([str(docs)], smaller, embedder=embedder).totals["unchanged"] == 3  # and then it settles

    monkeypatch.setattr(chunking, "CHUNKER_VERSION", chunking.CHUNKER_VERSION + 1)
    upgraded = ingest([str(docs)], smaller, embedder=embedder)
    assert upgraded.totals["indexed"] == 3 and upgraded.embedded == 0  # the same chunks: nothing embedded
    assert upgraded.published  # the manifest records the new rules, so the next run reads nothing again
    assert ingest([str(docs)], smaller, embedder=embedder).totals["unchanged"] == 3


class RecordingWriter:
    """Forwards to a real writer and records what ingestion asked of it."""

    def __init__(self, writer, calls: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
        self._writer, self.calls = writer, calls

    def is_stale(self, published: PublishedGeneration) -> bool:
        stale = bool(self._writer.is_stale(published))
        self.calls.append(("is_stale", f"{published.generation}:{stale}"))
        return stale

    def write(self, build: GenerationBuild) -> None:
        self.calls.append(("write", build.name))
        self._writer.write(build)

    def publish(self, generation: str) -> None:
        self.calls.append(("publish", generation))
        self._writer.publish(generation)

    def close(self) -> None:
        self.calls.append(("close", ""))
        self._writer.close()


def test_ingestion_writes_every_store_through_the_writer_protocol(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data)
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(
        indexer, "open_index_writers", lambda s: [RecordingWriter(w, calls) for w in open_index_writers(s)]
    )
    first = ingest([str(docs)], settings, embedder=embedder)
    gen1 = first.generation or ""
    # three writers (the dense matrix, the BM25 files, the Qdrant Edge shard): each writes, then publishes
    # after CURRENT moved
    assert calls == [("write", gen1)] * 3 + [("publish", gen1)] * 3 + [("close", "")] * 3
    calls.clear()
    ingest(
        [str(docs)], settings, embedder=embedder
    )  # nothing changed: nothing written, each store re-published
    assert calls == [("is_stale", f"{gen1}:False")] * 3 + [("publish", gen1)] * 3 + [("close", "")] * 3
    reader = IndexReader(data)
    try:
        assert reader.lexical.search(bm25_tokens("gift cards"), EVERYONE, 3)
    finally:
        reader.close()


def test_changed_file_replaces_its_chunks_and_old_text_stays_resolvable(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data)
    ingest([str(docs)], settings, embedder=embedder)
    reader = IndexReader(data)
    old_ids = {cid for cid, _ in reader.lexical.search(bm25_tokens("45 days"), EVERYONE, 10)}
    assert old_ids

    (docs / "refunds.md").write_text((docs / "refunds.md").read_text().replace("45 days", "60 days"))
    report = ingest([str(docs)], settings, embedder=embedder)
    assert report.totals["indexed"] == 1 and report.totals["unchanged"] == 1
    assert reader.refresh()  # a running reader picks up the new generation without a restart
    texts = " ".join(c.text for c in reader.generation.chunks)
    assert "60 days" in texts and "45 days" not in texts
    assert not reader.lexical.search(bm25_tokens("45"), EVERYONE, 10)
    from rag.stores.index import ChunkArchive

    archived = [ChunkArchive(data).get(cid) for cid in old_ids]
    assert all(c is not None for c in archived) and any("45 days" in c.text for c in archived if c)
    reader.close()


def test_prune_removes_documents_whose_files_are_gone(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data)
    ingest([str(docs)], settings, embedder=embedder)
    (docs / "leave.txt").unlink()
    kept = ingest([str(docs)], settings, embedder=embedder)  # without --prune nothing is removed
    assert kept.totals["removed"] == 0
    pruned = ingest([str(docs)], settings, prune=True, embedder=embedder)
    assert pruned.totals["removed"] == 1 and pruned.published
    reader = IndexReader(data)
    assert not reader.lexical.search(bm25_tokens("paid leave"), EVERYONE, 10)
    reader.close()


def test_exact_keeps_only_the_given_files_when_a_copy_moves(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """The same corpus ingested from another checkout replaces the old copy instead of joining it."""
    first, second, data = (
        tmp_path / "checkout-a" / "docs",
        tmp_path / "checkout-b" / "docs",
        tmp_path / "data",
    )
    write_docs(first)
    write_docs(second)
    settings = load_settings(data_dir=data)
    n = ingest([str(first)], settings, embedder=embedder).index_chunks
    assert ingest([str(second)], settings, prune=True, embedder=embedder).index_chunks == 2 * n  # both exist
    moved = ingest([str(second)], settings, exact=True, embedder=embedder)
    assert moved.index_chunks == n and moved.totals["removed"] == 2
    reader = IndexReader(data)
    sources = {c.source for c in reader.generation.chunks}
    reader.close()
    assert sources and all(str(second.resolve()) in s for s in sources)
    assert not ingest([str(second)], settings, exact=True, embedder=embedder).published  # then a no-op


def test_bad_file_never_stops_the_batch(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    (docs / "broken.pdf").write_bytes(b"this is not a pdf at all")
    report = ingest([str(docs)], load_settings(data_dir=data), embedder=embedder)
    statuses = {Path(f.path).name: (f.status, f.reason) for f in report.files}
    assert statuses["broken.pdf"] == ("failed", "not_a_pdf")
    assert statuses["refunds.md"][0] == "indexed" and not report.ok


def test_cli_json_summary_and_exit_status(tmp_path: Path) -> None:
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    (docs / "empty.pdf").write_bytes(b"")
    result = CliRunner().invoke(app, ["ingest", str(docs), "--data-dir", str(data), "--json"])
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    assert set(summary) >= {"files", "totals"}
    assert set(summary["totals"]) >= {"indexed", "unchanged", "removed", "failed", "chunks"}
    assert {f["status"] for f in summary["files"]} == {"indexed", "failed"}
    for f in summary["files"]:
        assert set(f) >= {"path", "status", "reason", "chunks"}


def _reader_script(data: Path, out: Path) -> str:
    return f"""
import json, time
from datetime import date
from rag.stores.index import IndexReader
from rag.text import bm25_tokens
from rag.types import Principal, SearchFilter
f = SearchFilter(Principal('t', frozenset()), date(2026, 1, 1))
r = IndexReader({str(data)!r})
seen, errors, deadline = set(), 0, time.time() + 120
while time.time() < deadline:
    try:
        r.refresh()
        seen.add(r.generation.name)
        hits = r.lexical.search(bm25_tokens('zebra crossing'), f, 5)
        if hits:
            break
    except Exception as exc:
        errors += 1
        print(repr(exc))
    time.sleep(0.05)
open({str(out)!r}, 'w').write(json.dumps({{'seen': sorted(seen), 'found': bool(hits), 'errors': errors}}))
"""


def test_ingestion_while_another_process_reads(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data)
    ingest([str(docs)], settings, embedder=embedder)
    out = tmp_path / "reader.json"
    proc = subprocess.Popen([sys.executable, "-c", _reader_script(data, out)], cwd=REPO)
    time.sleep(3)  # the reader holds the published generation open
    (docs / "zebra.md").write_text("# Crossings\n\nA zebra crossing policy for the car park.\n")
    report = ingest([str(docs)], settings, embedder=embedder)
    assert report.published
    assert proc.wait(timeout=150) == 0
    seen = json.loads(out.read_text())
    assert seen["found"] and seen["errors"] == 0 and len(seen["seen"]) == 2


def test_kill_9_mid_run_keeps_the_old_index_and_a_rerun_completes(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data)
    ingest([str(docs)], settings, embedder=embedder)
    published = current_generation(data)
    for i in range(40):
        (docs / f"extra{i}.md").write_text(
            f"# Extra policy {i}\n\n" + f"Rule {i} says item {i} costs {i} dollars. " * 30
        )

    victim = subprocess.Popen(
        [sys.executable, "-m", "ingest", str(docs), "--data-dir", str(data)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    # wait until it is busy building (embedding cache file or a temporary generation appears), then kill -9
    deadline = time.time() + 120
    gens = index_root(data) / "generations"
    while time.time() < deadline and victim.poll() is None:
        if list(gens.glob(".tmp-*")) or (data / "embeddings.sqlite-wal").exists():
            break
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert current_generation(data) == published  # the old index still serves
    reader = IndexReader(data)
    assert reader.lexical.search(bm25_tokens("45 days"), EVERYONE, 5)
    reader.close()

    rerun = ingest([str(docs)], settings, embedder=embedder)
    assert rerun.ok and rerun.published
    assert not list(gens.glob(".tmp-*"))
    reader = IndexReader(data)
    ids = [c.chunk_id for c in reader.generation.chunks]
    assert len(ids) == len(set(ids))  # no duplicate chunks
    assert reader.lexical.search(bm25_tokens("Rule 39"), EVERYONE, 5)
    reader.close()
    shutil.rmtree(data)


_STALL_IN_THE_STORE = """
import sys, time
from pathlib import Path
import rag.stores.edge as edge
from ingest.indexer import ingest
from rag.config import load_settings

edge.UPSERT_BATCH = 4  # many small batches: the kill lands between two of them
written, point = [0], edge.edge_point

def stalling_point(*args, **kwargs):
    written[0] += 1
    if written[0] == 9:  # two batches are in the staging shard: say so, and wait for the kill
        Path(sys.argv[2]).write_text("in the store")
        time.sleep(600)
    return point(*args, **kwargs)

edge.edge_point = stalling_point
ingest([sys.argv[1]], load_settings(data_dir=sys.argv[3], lexical_backend="qdrant"))
"""


def test_kill_9_while_the_store_is_written_keeps_the_published_generation(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """kill -9 in the middle of writing the next generation's stores (batches already in its Qdrant Edge shard):
    both readers keep serving the published generation, and the next run discards the half-written one."""
    docs, data = tmp_path / "docs", tmp_path / "data"
    write_docs(docs)
    settings = load_settings(data_dir=data, lexical_backend="qdrant")
    ingest([str(docs)], settings, embedder=embedder)
    published = current_generation(data)
    for i in range(12):
        (docs / f"extra{i}.md").write_text(
            f"# Extra policy {i}\n\nRule {i} says item {i} costs {i} dollars.\n"
        )
    marker = tmp_path / "stalled"
    victim = subprocess.Popen(
        [sys.executable, "-c", _STALL_IN_THE_STORE, str(docs), str(marker), str(data)],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    deadline = time.time() + 180
    while time.time() < deadline and victim.poll() is None and not marker.exists():
        time.sleep(0.05)
    assert marker.exists(), "the run never reached the store"
    gens = index_root(data) / "generations"
    (staging,) = gens.glob(".tmp-*")
    assert (staging / "edge").is_dir()  # the next generation's shard holds some points already
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    assert current_generation(data) == published
    for backend in ("bm25", "qdrant"):
        reader = open_index_reader(load_settings(data_dir=data, lexical_backend=backend))
        try:
            assert reader.generation.name == published
            legs = reader.search(
                LegsQuery(
                    bm25_tokens("45 days refund"),
                    embedder.embed_queries(["refund window"])[0],
                    EVERYONE,
                    n_lexical=5,
                    n_dense=5,
                    rrf_k=60,
                )
            )
            assert legs.lexical and legs.dense
        finally:
            reader.close()

    rerun = ingest([str(docs)], settings, embedder=embedder)
    assert rerun.ok and rerun.published and not list(gens.glob(".tmp-*"))
    reader = open_index_reader(settings)
    try:
        ids = [c.chunk_id for c in reader.generation.chunks]
        assert len(ids) == len(set(ids)) == rerun.index_chunks
        assert reader.lexical.search(bm25_tokens("Rule 11 item 11"), EVERYONE, 3)
    finally:
        reader.close()


def test_sample_corpus_filters_inside_both_legs(sample_data_dir: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    reader = IndexReader(sample_data_dir)
    outsider = SearchFilter(Principal("eve", frozenset({"staff"})), date.today())
    hr = SearchFilter(Principal("hana", frozenset({"hr"})), date.today())
    tokens = bm25_tokens("salary bands CANARY-HR-7731")
    vector = embedder.embed_queries(["salary bands for each grade"])[0]
    for hits in (reader.lexical.search(tokens, outsider, 40), reader.dense.search(vector, outsider, 40)):
        assert all("hr" not in reader.get(cid).groups for cid, _ in hits)  # type: ignore[union-attr]
    assert any("hr" in reader.get(cid).groups for cid, _ in reader.lexical.search(tokens, hr, 40))  # type: ignore[union-attr]
    for cid, _ in reader.dense.search(vector, outsider, 40):
        chunk = reader.get(cid)
        assert chunk is not None and chunk.meta.valid_on(date.today())
    reader.close()


def test_index_order_does_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    """The same files give the same chunk order (and so the same BM25 and dense ties) in every process."""
    docs = tmp_path / "docs"
    write_docs(docs)
    for name in ("travel", "security", "expenses", "hardware", "onboarding", "benefits"):
        (docs / f"{name}.md").write_text(f"# {name.title()} policy\n\nThe {name} rule applies to everyone.\n")
    orders = []
    for seed in ("1", "2", "3"):
        data = tmp_path / f"data-{seed}"
        subprocess.run(
            [sys.executable, "-m", "ingest", str(docs), "--data-dir", str(data)],
            cwd=REPO,
            check=True,
            capture_output=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": seed},
        )
        chunks, _ = load_chunks(generation_dir(data, current_generation(data)))
        orders.append([c.chunk_id for c in chunks])
    assert orders[0] == orders[1] == orders[2]


class _LengthEmbedder:
    """Vectors that spell out each text (its length, its first character), and a record of every batch."""

    name = "fake"
    dim = 2

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def embed_passages(self, texts):  # type: ignore[no-untyped-def]
        self.batches.append(list(texts))
        return np.array([[len(t), ord(t[0])] for t in texts], dtype=np.float32)

    def embed_queries(self, texts):  # type: ignore[no-untyped-def]
        return self.embed_passages(texts)


def test_embedding_cache_embeds_each_new_text_once_longest_first(tmp_path: Path) -> None:
    texts = ["bb", "a", "dddd", "ccc", "a", "eeeee", "ff"]
    cache = indexer.EmbeddingCache(tmp_path, "fake")
    cache.put_many(
        [("unused", np.zeros(2, dtype=np.float32)), (cache.key("ccc"), np.array([9, 9], np.float32))]
    )
    fake = _LengthEmbedder()
    try:
        vectors, embedded = cache.vectors(texts, fake, batch=2)
        again, embedded_again = cache.vectors(texts, fake, batch=2)
    finally:
        cache.close()
    expected = [[9, 9] if t == "ccc" else [len(t), ord(t[0])] for t in texts]
    assert [
        v.tolist() for v in vectors
    ] == expected  # aligned with the texts, whatever order they were embedded in
    assert [v.tolist() for v in again] == expected
    # each missing text once, longest first (batches of one length pad least), stored batch by batch
    assert fake.batches == [["eeeee", "dddd"], ["bb", "ff"], ["a"]]
    assert (embedded, embedded_again) == (5, 0)
