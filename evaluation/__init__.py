"""Quality measurement, one package (speed is ``benchmarks/``, above it in .importlinter).

- ``rag eval`` (``cli``; ``python -m evaluation``) and the quality suites (``suite``, ``llm_subset``) over the
  data in ``suites/`` (splits, follow-ups, near misses, claims, the LLM subset), with ``datasets``, ``splits``,
  ``graders``, ``qa``, ``multihop``, ``claimset`` and ``stats``.
- Position sweeps: ``position`` and its ``generators``; the running app reads a saved sweep through
  ``rag.traces.sweeps``, never through this package.
- Training of the models the app ships (rag/models/): ``training`` (the feature reranker, the reader, the
  reading encoder, the sentence-dependency model).
- Quality benchmarks: ``retrieval`` (SciFact nDCG), ``rerankers``, ``lexical_parity``, the Haystack ``peer``
  and ``parity`` (do two runs give the same answers).

It builds each corpus with ingest/ and asks it through rag/; nDCG and recall are ``evaluation.metrics``.
"""
