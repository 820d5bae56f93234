"""Quality measurement, one package: ``rag eval`` (``evaluation.cli``), the quality suites (``evaluation.suite``)
and the data they read (``evaluation/suites/``: splits, follow-ups, near misses, claims, the LLM subset), graders,
statistics, dataset loaders, position sweeps (``evaluation.position``) and the retrieval-quality benchmark.

It builds each corpus with ingest/ and asks it through rag/; speed lives in ``benchmarks/``, above it
(.importlinter). The running app reads a saved sweep through ``rag.sweeps``, never through this package.
"""
