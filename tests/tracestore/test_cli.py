"""`rag db ...` and `rag traces ...`, driven through typer's CliRunner on the two sub-apps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.tracestore import TraceStore
from rag.tracestore.cli import db_app, traces_app
from tests.tracestore.factories import BASE_TIME, make_trace, roundtrip


@pytest.fixture
def cli(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run a command the way `rag` would: settings from --data-dir (SQLite) or RAG_DATABASE_URL (PostgreSQL)."""
    monkeypatch.chdir(tmp_path)  # no stray .env
    if store_url.startswith("sqlite"):
        monkeypatch.delenv("RAG_DATABASE_URL", raising=False)
    else:
        monkeypatch.setenv("RAG_DATABASE_URL", store_url)
    runner = CliRunner()

    def invoke(app, *args: str):
        return runner.invoke(app, [*args, "--data-dir", str(tmp_path)], env={"COLUMNS": "160"})

    return invoke


def test_db_commands(cli) -> None:
    result = cli(db_app, "current")
    assert result.exit_code == 0 and "not initialised" in result.stdout

    result = cli(db_app, "upgrade")
    assert result.exit_code == 0, result.output
    assert "revision 0003" in result.stdout
    assert "0003 (head)" in cli(db_app, "current").stdout

    result = cli(db_app, "downgrade", "base")
    assert result.exit_code == 0, result.output
    assert "not initialised" in cli(db_app, "current").stdout
    assert cli(db_app, "upgrade").exit_code == 0


def test_traces_before_upgrade_say_what_to_do(cli) -> None:
    result = cli(traces_app, "list")
    assert result.exit_code == 1
    assert "run `rag db upgrade`" in result.stderr
    assert "Traceback" not in result.output


@pytest.fixture
def saved(cli, store_url: str) -> list[dict]:
    assert cli(db_app, "upgrade").exit_code == 0
    traces = [
        make_trace(user="alice", created_at=BASE_TIME, seed=1),
        make_trace(user="bob", created_at=BASE_TIME.replace(day=2), abstained=True, seed=2),
        make_trace(user="bob", created_at=BASE_TIME.replace(day=3), failed_citation=True, seed=3),
    ]
    with TraceStore(store_url) as store:
        for trace in traces:
            store.traces.save(trace)
    return traces


def _listed(result) -> list[str]:
    assert result.exit_code == 0, result.output
    return [row["trace_id"] for row in json.loads(result.stdout)]


def test_list(cli, saved: list[dict]) -> None:
    ids = [t["trace_id"] for t in saved]
    table = cli(traces_app, "list")
    assert table.exit_code == 0, table.output
    assert all(trace_id in table.stdout for trace_id in ids)
    assert "abstained" in table.stdout and "failed-citation" in table.stdout

    assert _listed(cli(traces_app, "list", "--json")) == ids[::-1]
    assert _listed(cli(traces_app, "list", "--json", "--user", "bob")) == [ids[2], ids[1]]
    assert _listed(cli(traces_app, "list", "--json", "--abstained")) == [ids[1]]
    assert _listed(cli(traces_app, "list", "--json", "--no-abstained")) == [ids[2], ids[0]]
    assert _listed(cli(traces_app, "list", "--json", "--failed-citations")) == [ids[2]]
    assert _listed(cli(traces_app, "list", "--json", "--doc", "doc-2")) == ids[::-1]
    assert _listed(cli(traces_app, "list", "--json", "--doc", "no-such-doc")) == []
    assert _listed(cli(traces_app, "list", "--json", "--since", "2025-03-02")) == [ids[2], ids[1]]
    assert _listed(cli(traces_app, "list", "--json", "--since", "2025-03-02T12:00")) == [ids[2]]
    assert _listed(cli(traces_app, "list", "--json", "--limit", "1")) == [ids[2]]

    bad = cli(traces_app, "list", "--since", "last tuesday")
    assert bad.exit_code == 2 and "ISO date" in bad.output


def test_show(cli, saved: list[dict]) -> None:
    trace = saved[2]
    as_json = cli(traces_app, "show", trace["trace_id"], "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == roundtrip(trace)

    readable = cli(traces_app, "show", trace["trace_id"])
    assert readable.exit_code == 0, readable.output
    for expected in (
        trace["question"],
        "Final order",
        "Citations",
        "Dropped",
        "Timings",
        "over_budget",
        "Always [9].",
    ):
        assert expected in readable.stdout

    missing = cli(traces_app, "show", "nope")
    assert missing.exit_code == 1
    assert "No trace with id 'nope'" in missing.stderr and "Traceback" not in missing.output


def test_export(cli, saved: list[dict], tmp_path: Path) -> None:
    out = tmp_path / "exports" / "traces.jsonl"
    result = cli(traces_app, "export", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "Exported 3 trace(s)" in result.stderr
    assert [json.loads(line) for line in out.read_text().splitlines()] == [roundtrip(t) for t in saved]

    to_stdout = cli(traces_app, "export", "--user", "bob", "--since", "2025-03-03")
    assert to_stdout.exit_code == 0, to_stdout.output
    assert [json.loads(line) for line in to_stdout.stdout.splitlines()] == [roundtrip(saved[2])]
