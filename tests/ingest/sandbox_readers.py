"""Readers for tests/ingest/test_sandbox.py: they run inside the sandbox's forked children."""

from __future__ import annotations

import json
import os
import sys
import time

SANDBOX_PRELOAD = ("json",)


def echo(text: str) -> bytes:
    return text.encode()


def what_i_inherit() -> bytes:
    """What a child sees of its world: its parent (the fork server), and whether heavy modules are loaded."""
    return json.dumps(
        {
            "pid": os.getpid(),
            "server": os.getppid(),
            "numpy": "numpy" in sys.modules,
            "pytest": "pytest" in sys.modules,
        }
    ).encode()


def sleep(seconds: float) -> bytes:
    time.sleep(seconds)
    return b"woke"


def hog(megabytes: int) -> bytes:
    block = bytearray(megabytes * 1024 * 1024)
    return str(len(block)).encode()


def fail() -> bytes:
    raise ValueError("a reader bug")


def crash() -> bytes:
    os.kill(os.getpid(), 11)  # as a segfault in a native reader would end it
    return b""


def big(n: int) -> bytes:
    return b"y" * n
