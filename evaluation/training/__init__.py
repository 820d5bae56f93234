"""Training of every model the app ships (rag/models/; docs/models.md is the card index), one module each:

- ``reranker``: the feature reranker (features-v1, -v2, -v3: ``rag/models/reranker_features*.json``), on the
  training halves of SciFact and NQ-Open;
- ``reader``: the reader (``rag/models/reader.json``), on the query path's evidence for the tune splits;
- ``reading_encoder``: the reading encoder (``rag/models/minilm-mpnet-reader.npz``), MiniLM-L6 distilled from
  all-mpnet-base-v2;
- ``dependency``: the sentence-dependency model of the excerpts (``rag/models/dependency.json``), on hand-labelled
  sentence pairs.

Each runs as ``python -m evaluation.training.NAME`` and writes its model only with ``--write`` (the reranker:
``--out`` or its file); test splits are never read.
"""
