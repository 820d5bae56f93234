"""Fixtures for the UI tests: the sample corpus indexed once, with a migrated trace database and a user list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rag.types import Principal

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "ui" / "app.py"
CANARY_HR = "CANARY-HR-7731"
CANARY_SEC = "CANARY-SEC-4410"
# The demo users plus an admin and a user of their own for the memory test (users.json in the data dir).
USERS = {
    "alice": ["staff"],
    "hana": ["staff", "hr"],
    "sam": ["staff", "security"],
    "olga": ["staff", "admin"],
    "tom": ["staff"],
}
# Two of them as the query path sees them.
ALICE = Principal("alice", frozenset(USERS["alice"]))
HANA = Principal("hana", frozenset(USERS["hana"]))


@pytest.fixture(autouse=True)
def demo_sign_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests sign in through the demo picker (RAG_AUTH=demo); tests of proxy and OIDC sign-in set their own
    mode. The environment is inherited by the UI servers the browser tests start."""
    monkeypatch.setenv("RAG_AUTH", "demo")


@pytest.fixture(scope="session")
def ui_data_dir(tmp_path_factory: pytest.TempPathFactory, sample_data_dir: Path) -> Path:
    """The sample corpus (ingested once per session by ``sample_data_dir`` with ``ingest.indexer.ingest``),
    copied so these tests may write to it, with the trace database upgraded and users.json written."""
    from rag.config import load_settings
    from rag.tracestore.db import upgrade

    data_dir = tmp_path_factory.mktemp("ui-data")
    shutil.copytree(sample_data_dir, data_dir, dirs_exist_ok=True)
    upgrade(load_settings(data_dir=data_dir))
    (data_dir / "users.json").write_text(json.dumps(USERS))
    return data_dir


@pytest.fixture(scope="session")
def data_dir_with_failures(tmp_path_factory: pytest.TempPathFactory, sample_pdfs: Path, embedder) -> Path:  # type: ignore[no-untyped-def]
    """Two good policies and one file that is not a PDF: the last ingestion has a failure to show."""
    from ingest.indexer import ingest
    from rag.config import load_settings

    docs = tmp_path_factory.mktemp("docs-with-failure")
    for name in ("refunds.pdf", "salary-bands.pdf"):
        shutil.copy(sample_pdfs / name, docs / name)
        shutil.copy(sample_pdfs / f"{name}.meta.json", docs / f"{name}.meta.json")
    (docs / "broken.pdf").write_bytes(b"this is not a PDF at all\n" * 20)
    data_dir = tmp_path_factory.mktemp("data-with-failure")
    report = ingest([str(docs)], load_settings(data_dir=data_dir), embedder=embedder)
    assert report.published and not report.ok, report.to_json()
    return data_dir
