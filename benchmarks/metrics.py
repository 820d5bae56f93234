"""BEIR qrels files for the retrieval benchmarks; the metrics over them (nDCG@k, recall@k) are ``rag.metrics``."""

from __future__ import annotations

from pathlib import Path


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (``query-id<TAB>corpus-id<TAB>score``, header line optional): query -> doc -> grade."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if not line.strip():
                continue
            if len(parts) < 3:
                raise ValueError(f"{path}: line {n + 1}: expected query-id, corpus-id, score")
            try:
                grade = int(float(parts[2]))
            except ValueError:
                if n == 0:  # the header
                    continue
                raise ValueError(f"{path}: line {n + 1}: score {parts[2]!r} is not a number") from None
            qrels.setdefault(parts[0], {})[parts[1]] = grade
    return qrels
