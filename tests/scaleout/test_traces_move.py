"""Moving traces to the scale-out database: `rag traces export` from one store, `rag traces import` into another."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rag.config import load_settings
from rag.tracestore import TraceStore
from rag.tracestore.cli import db_app, traces_app
from tests.tracestore.factories import BASE_TIME, make_trace


def test_export_then_import_moves_every_trace_once(tmp_path: Path) -> None:
    runner = CliRunner()
    old, new = tmp_path / "old", tmp_path / "new"
    for data in (old, new):
        assert runner.invoke(db_app, ["upgrade", "--data-dir", str(data)]).exit_code == 0
    store = TraceStore.from_settings(load_settings(data_dir=old))
    try:
        for i in range(3):
            store.traces.save(make_trace(user=f"u{i}", seed=i, created_at=BASE_TIME.replace(hour=9 + i)))
    finally:
        store.close()

    dump = tmp_path / "traces.jsonl"
    exported = runner.invoke(traces_app, ["export", "--out", str(dump), "--data-dir", str(old)])
    assert exported.exit_code == 0, exported.output
    first = runner.invoke(traces_app, ["import", str(dump), "--data-dir", str(new)])
    assert first.exit_code == 0, first.output
    assert "Imported 3 trace(s); 0 already stored." in first.output
    again = runner.invoke(traces_app, ["import", str(dump), "--data-dir", str(new)])
    assert "Imported 0 trace(s); 3 already stored." in again.output  # re-running is safe

    moved = tmp_path / "moved.jsonl"
    runner.invoke(traces_app, ["export", "--out", str(moved), "--data-dir", str(new)])
    assert [json.loads(x) for x in moved.read_text().splitlines()] == [
        json.loads(x) for x in dump.read_text().splitlines()
    ]

    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    broken = runner.invoke(traces_app, ["import", str(bad), "--data-dir", str(new)])
    assert broken.exit_code != 0 and "not JSON" in broken.output
