"""Evaluation that ingests its datasets: ``rag eval`` (``evaluation.cli``) and the quality suites
(``evaluation.suite``), which build each corpus with ingest/ and ask it through rag/.

It sits beside ``benchmarks/``, above ``rag``, ``ingest`` and ``ui`` (.importlinter). What only reads (the sweep,
graders, statistics, splits, dataset loaders) stays in ``rag.evaluation``, which the UI's Evaluation page uses.
"""
