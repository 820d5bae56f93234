"""Generations as the previous release wrote them, made from a generation written today.

The previous release kept an embedded generation's vectors in a qdrant-client store (``qdrant/``: one point per
chunk with the dense and sparse vectors and the chunk as payload, written point by point), each chunk's BM25
tokens inside ``chunks.pkl``, and the sentence vectors inside ``sentences.npz``; it wrote no ``dense.npy``, token
arrays, separate sentence vectors or Qdrant Edge shard. ``to_previous_release`` rewrites a published generation
so, byte for byte the layout an existing ``.rag/`` directory holds, for the tests that readers still serve it
and that ``rag ingest --rebuild`` migrates it.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np

from rag.models.sentences import FILE as SENTENCES_FILE
from rag.models.sentences import VECTORS_FILE
from rag.stores import chunk_to_dict
from rag.stores.bm25 import average_length
from rag.stores.edge import FOLDER as EDGE_FOLDER
from rag.stores.index import Manifest, load_chunks
from rag.stores.memory import DENSE_FILE, TOKEN_OFFSETS_FILE, TOKENS_FILE
from rag.stores.qdrant import COLLECTION, LEGACY_FOLDER, collection_config, point


def to_previous_release(folder: Path) -> None:
    """Rewrite the generation in ``folder`` in the previous release's layout (its chunks, vectors and BM25 files
    unchanged)."""
    from qdrant_client import QdrantClient

    chunks, tokens = load_chunks(folder)
    dense = np.load(folder / DENSE_FILE)
    manifest = Manifest.load(folder)
    client = QdrantClient(path=str(folder / LEGACY_FOLDER))
    try:
        client.create_collection(COLLECTION, **collection_config(manifest.dim))
        avgdl = average_length(tokens)
        for start in range(0, len(chunks), 256):
            client.upsert(
                COLLECTION,
                points=[
                    point(c, dense[i], tokens[i], avgdl)
                    for i, c in enumerate(chunks[start : start + 256], start=start)
                ],
                wait=True,
            )
    finally:
        client.close()
    with open(folder / "chunks.pkl", "wb") as fh:
        pickle.dump({"chunks": [chunk_to_dict(c) for c in chunks], "tokens": [list(t) for t in tokens]}, fh)
    if (folder / VECTORS_FILE).exists():
        data = np.load(folder / SENTENCES_FILE, allow_pickle=True)
        np.savez(
            folder / SENTENCES_FILE,
            chunk_ids=data["chunk_ids"],
            starts=data["starts"],
            counts=data["counts"],
            vectors=np.load(folder / VECTORS_FILE),
        )
        (folder / VECTORS_FILE).unlink()
    for name in (DENSE_FILE, TOKENS_FILE, TOKEN_OFFSETS_FILE):
        (folder / name).unlink(missing_ok=True)
    shutil.rmtree(folder / EDGE_FOLDER, ignore_errors=True)
