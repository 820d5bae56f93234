"""Speed measurement (``rag bench NAME``); quality is ``evaluation/``, below it in .importlinter."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "ingest" / "sample"


@contextmanager
def data_dir_or_sample(data_dir: Path | None, prefix: str) -> Iterator[Path]:
    """``data_dir``, or a temporary one holding the sample corpus ingested, removed afterwards."""
    if data_dir is not None:
        yield data_dir
        return
    from ingest.indexer import ingest
    from rag.config import load_settings

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        ingest([str(SAMPLE / "pdfs")], load_settings(data_dir=tmp))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def query_options(description: str | None) -> argparse.Namespace:
    """The command line the query-path benchmarks share: --data-dir (default: the sample corpus, ingested into a
    temporary folder), --questions (default: the sample questions), --repeats and --json."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--questions", type=Path, default=SAMPLE / "questions.jsonl")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()
