"""Qdrant's embedded mode standing in for a Qdrant server: ``connect`` is pointed at one embedded client, which
implements the calls the server path makes (collections, payload indexes, aliases, the Query API), so no network
and no server binary are needed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

import rag.stores.qdrant_server as qs


class SharedClient:
    """One embedded client shared by every writer and reader of a test, like one server; close() is the test's."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def close(self) -> None:
        pass


C = TypeVar("C", bound=SharedClient)


@contextmanager
def embedded_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrap: Callable[[Any], C]) -> Iterator[C]:
    """An embedded client under ``tmp_path``, wrapped, that every ``connect`` of the test gets; closed after."""
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp_path / "qdrant-server"))
    shared = wrap(client)
    monkeypatch.setattr(qs, "connect", lambda settings: shared)
    try:
        yield shared
    finally:
        client.close()
