"""Speed measurement (``rag bench NAME``); quality is ``evaluation/``, below it in .importlinter."""

from __future__ import annotations

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
