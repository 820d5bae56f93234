"""Helpers for the tests that run the UI server as a process."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable

import pytest


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


def wait_until_up(
    process: subprocess.Popen[bytes],
    up: Callable[[], bool],
    what: str,
    where: str,
    log: object,
    *,
    timeout_s: float,
    poll_s: float,
) -> None:
    """Wait until ``up()``; fail the test, pointing at ``log``, when ``process`` exits first or ``timeout_s`` pass."""
    deadline = time.monotonic() + timeout_s
    while not up():
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode}; see {log}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not come up on {where}; see {log}")
        time.sleep(poll_s)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate ``process``; kill it when it has not exited 20 seconds later."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
