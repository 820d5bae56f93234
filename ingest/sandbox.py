"""Run a reader over one untrusted file in a fresh forked child, with a timeout and a memory limit.

A fork server (an interpreter started once, which has imported only the reader's module) forks one child per
file: the child limits its address space and CPU time, calls the reader and writes the reader's answer (bytes)
to a pipe; the server waits for it and sends the parent its exit status, then the answer as it is. A child
inherits nothing of the ingesting process (no models, no open stores, no threads), and it starts in a few
milliseconds instead of an interpreter's start and imports (0.13 CPU-s a file for the PDF reader). The parent
kills a child that outlives the timeout; the server, blocked waiting for it, cannot reap it before, so its pid
cannot have been reused.

Servers are pooled: one per reading thread at a time, kept for the next file, replaced when one dies. Each
server reads its stdin for requests and exits when the parent does.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rag.errors import IngestError

OUT_OF_MEMORY = 3  # a child's exit status when it ran out of memory before it could answer
START_TIMEOUT_S = 60.0  # for a server to start and import the reader's module
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
_SERVER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); from ingest.sandbox import serve; serve(sys.argv[2])"
)


@dataclass(frozen=True)
class Outcome:
    """How one child ended: its exit status (negative: killed by that signal) and its answer, if it gave one."""

    code: int
    answer: bytes | None
    timed_out: bool = False


class SandboxError(IngestError):
    """The fork server could not be started or stopped answering (not the file's fault)."""

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            hint="Check that this Python can start another of itself (memory, process limits) and run again.",
        )


def run_isolated(
    module: str, function: str, args: list[Any], *, timeout_s: float, max_memory_mb: int
) -> Outcome:
    """``module.function(*args)`` in a forked child of a fork server: its bytes, or how it ended."""
    server = _take(module)
    try:
        outcome = server.run(function, args, timeout_s=timeout_s, max_memory_mb=max_memory_mb)
    except BaseException:
        server.close()
        raise
    _give(server)
    return outcome


# ---------------------------------------------------------------------------------------------------------
# The parent side: a pool of servers.

_idle: list[_Server] = []
_idle_lock = threading.Lock()


def _take(module: str) -> _Server:
    with _idle_lock:
        for i, server in enumerate(_idle):
            if server.module == module:
                del _idle[i]
                if server.alive():
                    return server
                server.close()
                break
    return _Server(module)


def _give(server: _Server) -> None:
    with _idle_lock:
        _idle.append(server)


class _Server:
    def __init__(self, module: str) -> None:
        self.module = module
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVER_CODE, _PACKAGE_ROOT, module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a reader's warnings are not the user's; its failures come as answers
        )
        self._buffer = bytearray()
        self._fd = self._process.stdout.fileno()  # type: ignore[union-attr]
        self._poller = select.poll()  # not select(): a busy process's descriptors may number over 1,024
        self._poller.register(self._fd, select.POLLIN)
        try:
            ready = self._line(time.monotonic() + START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        if ready != {"ready": True}:
            self.close()
            raise SandboxError(f"the reader process for {module} could not start: {ready}")

    def alive(self) -> bool:
        return self._process.poll() is None

    def run(self, function: str, args: list[Any], *, timeout_s: float, max_memory_mb: int) -> Outcome:
        stdin: IO[bytes] = self._process.stdin  # type: ignore[assignment]
        request = {"function": function, "args": args, "memory_mb": max_memory_mb, "cpu_s": timeout_s}
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise SandboxError(f"the reader process for {self.module} has stopped ({exc})") from exc
        deadline = time.monotonic() + timeout_s
        started = self._line(time.monotonic() + START_TIMEOUT_S, required=True)  # the fork itself
        ended = self._line(deadline)
        if ended is None:  # past the timeout: the server still waits for the child, so the pid is its own
            with contextlib.suppress(ProcessLookupError):  # it ended this very moment
                os.kill(int(started["pid"]), signal.SIGKILL)
            self._line(time.monotonic() + START_TIMEOUT_S, required=True)
            return Outcome(code=-signal.SIGKILL, answer=None, timed_out=True)
        length = ended.get("length")
        answer = self._bytes(int(length)) if length is not None else None
        return Outcome(code=int(ended["code"]), answer=answer)

    def _line(self, deadline: float, required: bool = False) -> Any:
        """The server's next line as JSON; None at the deadline (a ``SandboxError`` when ``required``)."""
        end = self._buffer.find(b"\n")
        while end < 0:
            searched = len(self._buffer)
            if not self._read(deadline - time.monotonic()):
                if required:
                    raise SandboxError(f"the reader process for {self.module} stopped answering")
                return None
            end = self._buffer.find(b"\n", searched)
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return json.loads(line)

    def _bytes(self, n: int) -> bytes:
        """The ``n`` bytes of an answer, sent as they are right after its status line."""
        while len(self._buffer) < n:
            if not self._read(START_TIMEOUT_S):  # written with the line before it: only a dead server stalls
                raise SandboxError(f"the reader process for {self.module} stopped answering")
        answer = bytes(self._buffer[:n])
        del self._buffer[:n]
        return answer

    def _read(self, wait_s: float) -> bool:
        """Add what the server has sent to the buffer, waiting up to ``wait_s``; False when nothing came."""
        if wait_s <= 0 or not self._poller.poll(math.ceil(wait_s * 1000)):
            return False
        data = os.read(self._fd, 1 << 20)
        if not data:
            raise SandboxError(f"the reader process for {self.module} has stopped")
        self._buffer += data
        return True

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()


# ---------------------------------------------------------------------------------------------------------
# The server and its children.


def serve(module_name: str) -> None:
    """The fork server: import the reader's module, then fork a child per request on stdin, one at a time."""
    import importlib

    module = importlib.import_module(module_name)
    for name in getattr(module, "SANDBOX_PRELOAD", ()):  # what every child would import: imported once here
        importlib.import_module(name)
    out = sys.stdout.buffer
    _say(out, {"ready": True})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        reading, writing = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: nothing but the reader from here, and never back into this loop
            os.close(reading)
            _child(writing, getattr(module, request["function"]), request)
        os.close(writing)
        _say(out, {"pid": pid})
        chunks = []
        while chunk := os.read(reading, 1 << 20):
            chunks.append(chunk)
        os.close(reading)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        answer = b"".join(chunks) if code == 0 and chunks else b""
        _say(out, {"code": code, "length": len(answer) if answer else None}, answer)


def _say(out: Any, message: dict[str, Any], answer: bytes = b"") -> None:
    out.write(json.dumps(message).encode() + b"\n" + answer)
    out.flush()


def _child(writing: int, reader: Any, request: dict[str, Any]) -> None:
    """Limit memory and CPU time, answer, exit (``os._exit``: no cleanup of the server's state runs here)."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)  # the server's requests and answers are not the child's
        os.dup2(devnull, 1)
        _limit(int(request["memory_mb"]), float(request["cpu_s"]))
        data = reader(*request["args"])
        view = memoryview(data)
        while view:
            view = view[os.write(writing, view) :]
        code = 0
    except MemoryError:
        code = OUT_OF_MEMORY
    finally:  # any other failure leaves code 1; exiting here also keeps its traceback off the terminal
        os._exit(code)


def _limit(memory_mb: int, cpu_s: float) -> None:
    """Cap the address space, and the CPU time at twice the wall-clock timeout (a backstop for a child whose
    parent died before it could kill it)."""
    import resource

    for which, value in (
        (resource.RLIMIT_AS, memory_mb * 1024 * 1024),
        (resource.RLIMIT_CPU, max(1, math.ceil(2 * cpu_s))),
    ):
        try:
            _, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, hard))
        except (ValueError, OSError):  # pragma: no cover - a platform without the limit
            pass
