"""`rag ask --json` as the CLI tests ask it: the sample corpus's refund question, by alice of staff."""

from __future__ import annotations

from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

REFUND_Q = "How many days does a customer have to return an item for a full refund?"


def ask_refund(data_dir: Path) -> Result:
    """`rag ask REFUND_Q --user alice --groups staff --data-dir DATA_DIR --json` through the CLI."""
    from supportbot.cli import app

    args = ["ask", REFUND_Q, "--user", "alice", "--groups", "staff", "--data-dir", str(data_dir), "--json"]
    return CliRunner().invoke(app, args)
