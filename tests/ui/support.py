"""Helpers for the tests that run the UI server as a process."""

from __future__ import annotations

import socket
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(url: str) -> bool:
    """Whether the Streamlit server at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
