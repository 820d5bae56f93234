"""The fork server that reads untrusted files: fresh children, limits, timeouts, and a server that survives them."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from ingest import sandbox
from ingest.sandbox import OUT_OF_MEMORY, run_isolated

READERS = "tests.ingest.sandbox_readers"


def run(function: str, *args: object, timeout_s: float = 30, memory_mb: int = 512) -> sandbox.Outcome:
    return run_isolated(READERS, function, list(args), timeout_s=timeout_s, max_memory_mb=memory_mb)


def test_a_child_answers_and_inherits_nothing_of_the_caller() -> None:
    import numpy  # noqa: F401  (loaded here, in the caller)

    first, second = run("what_i_inherit"), run("what_i_inherit")
    assert first.code == 0 and first.answer is not None and second.answer is not None
    a, b = json.loads(first.answer), json.loads(second.answer)
    assert a["server"] != os.getpid()  # a child of the fork server, not of this process
    assert a["pid"] != b["pid"] and a["server"] == b["server"]  # a fresh child per call, one server kept
    assert not a["numpy"] and not a["pytest"]  # nothing this process imported


def test_a_long_answer_arrives_whole() -> None:
    n = 5 * 2**20 + 7  # a long document's pages: more than any single read of the pipe
    assert run("big", n).answer == b"y" * n


def test_a_child_past_the_timeout_is_killed_and_the_server_serves_on() -> None:
    slow = run("sleep", 30, timeout_s=0.5)
    assert slow.timed_out and slow.answer is None and slow.code == -signal.SIGKILL
    assert run("echo", "next file").answer == b"next file"


def test_memory_over_the_limit_ends_the_child_not_the_server() -> None:
    big = run("hog", 600, memory_mb=256)
    assert big.answer is None and big.code == OUT_OF_MEMORY
    assert run("hog", 8, memory_mb=256).answer == str(8 * 1024 * 1024).encode()


def test_a_failing_or_crashing_reader_is_an_exit_status() -> None:
    assert run("fail") == sandbox.Outcome(code=1, answer=None)
    assert run("crash") == sandbox.Outcome(code=-signal.SIGSEGV, answer=None)
    assert run("echo", "still here").answer == b"still here"


def test_a_dead_server_is_replaced() -> None:
    server = sandbox._take(READERS)
    sandbox._give(server)
    os.kill(server._process.pid, signal.SIGKILL)
    server._process.wait()
    assert run("echo", "fresh").answer == b"fresh"


def test_concurrent_readers_each_get_a_server() -> None:
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda i: run("echo", f"file {i}").answer, range(9)))
    assert answers == [f"file {i}".encode() for i in range(9)]


def test_a_server_that_cannot_start_is_an_ingest_error() -> None:
    with pytest.raises(sandbox.SandboxError) as caught:
        run_isolated("tests.ingest.no_such_module", "echo", ["x"], timeout_s=5, max_memory_mb=256)
    assert "tests.ingest.no_such_module has stopped" in str(caught.value)
    assert caught.value.hint
