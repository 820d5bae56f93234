"""The embedded trace store creates and migrates itself on first use: `rag ingest`, `rag ask`, then
`rag traces show ID` works without `rag db upgrade`. PostgreSQL stays an explicit one-shot step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.asking import ask_refund


def test_ingest_ask_then_show_works_without_db_upgrade(
    tmp_path: Path, sample_data_dir: Path, sample_pdfs: Path
) -> None:
    from rag.tracestore.cli import traces_app
    from supportbot.cli import app

    data_dir = tmp_path / "data"
    shutil.copytree(sample_data_dir, data_dir)  # an ingested corpus and no trace database
    assert not (data_dir / "traces.sqlite").exists()
    runner = CliRunner()
    ingested = runner.invoke(app, ["ingest", str(sample_pdfs), "--data-dir", str(data_dir), "--json"])
    assert ingested.exit_code == 0, ingested.output
    asked = ask_refund(data_dir)
    assert asked.exit_code == 0, asked.output
    assert "traces are not being stored" not in asked.output
    answer = json.loads(asked.stdout.strip().splitlines()[-1])  # stdout stays one JSON object
    shown = runner.invoke(traces_app, ["show", answer["trace_id"], "--data-dir", str(data_dir), "--json"])
    assert shown.exit_code == 0, shown.output
    trace = json.loads(shown.stdout)
    assert trace["trace_id"] == answer["trace_id"] and trace["answer"] == answer["answer"]


def test_first_use_migrates_an_old_embedded_database_to_head(tmp_path: Path) -> None:
    from rag.config import load_settings
    from rag.factory import open_trace_store
    from rag.tracestore.db import current_revision, downgrade, head_revision, upgrade

    settings = load_settings(data_dir=tmp_path)
    upgrade(settings)
    downgrade(settings, "0001")  # a database left by an older rag
    store = open_trace_store(settings)
    try:
        assert current_revision(settings) == head_revision()
    finally:
        store.close()


def test_postgresql_is_not_migrated_implicitly() -> None:
    from rag.errors import StorageError
    from rag.factory import open_trace_store
    from rag.tracestore.db import ensure_embedded_schema

    url = "postgresql+psycopg://rag:secret@127.0.0.1:1/none"
    assert ensure_embedded_schema(url) is False  # no connection attempted: migrations stay `rag db upgrade`
    from rag.config import load_settings

    with pytest.raises(StorageError):
        open_trace_store(load_settings(database_url=url))
