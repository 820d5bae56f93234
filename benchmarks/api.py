"""The API under load: concurrent clients against ``rag serve`` on the embedded default, and the API's overhead over
an in-process ask.

    python -m benchmarks.api [--data-dir DIR] [--clients 16] [--seconds 60] [--overhead-repeats 3] [--json]
    rag bench api ...

1. **Load.** ``rag serve`` runs as its own process (uvicorn, ``RAG_API_WORKERS`` answering threads, the trace
   store on SQLite); each of ``--clients`` client threads has its own API key and its own keep-alive connection,
   and asks the sample questions in turn, alternating whole and streamed answers, for ``--seconds``. Every
   request must succeed (200, a complete answer with its trace id; a stream ending in ``[DONE]``): any other
   outcome counts as an error. Reported: requests and answers per second, p50/p95 of a whole answer (request
   sent to response read), of a stream's first byte (to the first byte of the body: the role chunk, sent before
   the answer is computed) and of its first answer text, and of a whole stream. Keys are made with a rate limit
   out of the way: this measures the server, not the limiter.
2. **Overhead.** One client, one question at a time, each question asked over HTTP (a whole answer) and
   in-process (``pipeline.ask`` + ``to_json`` + storing the trace: what ``rag ask`` and the chat page do per
   question) in alternating order, after a warm-up pass of both. The overhead is the per-question difference
   API - in-process; reported as its p50 and p95 (target p50 <= 10 ms, issue 55). A second figure takes the
   pipeline's run-to-run variation out: each API request's time less the time the server itself spent asking
   and storing it (its ``Server-Timing`` header), i.e. what the API adds to that very ask.

With no --data-dir the sample corpus is ingested into a temporary directory. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import SAMPLE, data_dir_or_sample

REPO = Path(__file__).resolve().parents[1]
MODEL = "policy-bot"


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "n": 0}
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "n": len(ordered),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _questions(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _body(q: dict[str, Any], stream: bool) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": q["question"]}], "stream": stream}
    ).encode()


# ----------------------------------------------------------------------------- the server
class Server:
    """``rag serve`` as its own process on a free loopback port."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.port = _free_port()
        env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        env.update({"RAG_AUTH": "proxy", "RAG_API_REQUIRE_KEY": "true"})
        self._log = open(log, "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "supportbot",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(data_dir),
            ],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"rag serve did not come up; its log: {log}")
            time.sleep(0.3)

    def _healthy(self) -> bool:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            connection.request("GET", "/v1/health")
            return connection.getresponse().status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self._log.close()


def _keys(data_dir: Path, n: int) -> list[str]:
    from rag.config import load_settings
    from rag.tracestore import TraceStore

    with TraceStore.from_settings(load_settings(data_dir=data_dir)) as store:
        expires = datetime.now(UTC) + timedelta(hours=2)
        return [
            store.keys.create(
                f"bench-{i}", ["staff"], expires_at=expires, name=f"bench-{i}", rate_limit=1_000_000
            )[1]
            for i in range(n)
        ]


# ----------------------------------------------------------------------------- one client
@dataclass
class Tally:
    whole_ms: list[float] = field(default_factory=list)
    first_byte_ms: list[float] = field(default_factory=list)
    first_text_ms: list[float] = field(default_factory=list)
    stream_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Client:
    """One keep-alive connection with its own key."""

    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def whole(self, q: dict[str, Any]) -> tuple[float, str | None]:
        """(ms to the whole response, an error or None)."""
        ms, _, error = self.timed_whole(q)
        return ms, error

    def timed_whole(self, q: dict[str, Any]) -> tuple[float, float, str | None]:
        """(ms to the whole response, ms the server spent asking and storing (Server-Timing), an error or None)."""
        start = time.perf_counter()
        self.connection.request("POST", "/v1/chat/completions", body=_body(q, False), headers=self.headers)
        response = self.connection.getresponse()
        payload = response.read()
        ms = (time.perf_counter() - start) * 1000
        if response.status != 200:
            return ms, 0.0, f"{response.status}: {payload[:200]!r}"
        reply = json.loads(payload)
        if not reply["choices"][0]["message"]["content"] or not reply["rag"]["trace_id"]:
            return ms, 0.0, "an empty answer"
        timing = response.getheader("Server-Timing") or ""
        ask_ms = float(timing.split("dur=", 1)[1]) if "dur=" in timing else float("nan")
        return ms, ask_ms, None

    def stream(self, q: dict[str, Any]) -> tuple[float, float, float, str | None]:
        """(ms to the first byte of the body, to the first answer text, to the end; an error or None)."""
        start = time.perf_counter()
        self.connection.request("POST", "/v1/chat/completions", body=_body(q, True), headers=self.headers)
        response = self.connection.getresponse()
        if response.status != 200:
            payload = response.read()
            ms = (time.perf_counter() - start) * 1000
            return ms, ms, ms, f"{response.status}: {payload[:200]!r}"
        first = response.read1(1)  # the role chunk: sent before the answer is computed
        first_byte = (time.perf_counter() - start) * 1000
        buffer, first_text = first, None
        while not buffer.rstrip().endswith(b"data: [DONE]"):
            more = response.read1(65536)
            if not more:
                return (
                    first_byte,
                    first_text or 0.0,
                    (time.perf_counter() - start) * 1000,
                    "the stream ended early",
                )
            buffer += more
            if first_text is None and b'"content":"' in buffer.replace(b'"content":""', b""):
                first_text = (time.perf_counter() - start) * 1000
        response.read()
        end = (time.perf_counter() - start) * 1000
        if b'"trace_id"' not in buffer or b'"error"' in buffer:
            return first_byte, first_text or end, end, "no trace id, or an error event"
        return first_byte, first_text or end, end, None


def load(port: int, keys: list[str], questions: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """``len(keys)`` clients for ``seconds``; every client alternates whole and streamed answers."""
    tally = Tally()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    barrier = threading.Barrier(len(keys))

    def run(index: int, key: str) -> None:
        client = Client(port, key)
        i = index
        barrier.wait()
        while time.monotonic() < stop_at:
            q = questions[i % len(questions)]
            try:
                if i % 2 == 0:
                    ms, error = client.whole(q)
                    with lock:
                        (tally.errors.append(error) if error else tally.whole_ms.append(ms))
                else:
                    first_byte, first_text, end, error = client.stream(q)
                    with lock:
                        if error:
                            tally.errors.append(error)
                        else:
                            tally.first_byte_ms.append(first_byte)
                            tally.first_text_ms.append(first_text)
                            tally.stream_ms.append(end)
            except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
                with lock:
                    tally.errors.append(f"{type(exc).__name__}: {exc}")
                client = Client(port, key)
            i += 1

    threads = [threading.Thread(target=run, args=(i, k)) for i, k in enumerate(keys)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    answers = len(tally.whole_ms) + len(tally.stream_ms)
    return {
        "clients": len(keys),
        "seconds": round(elapsed, 1),
        "answers": answers,
        "answers_per_s": round(answers / elapsed, 2),
        "errors": len(tally.errors),
        "error_examples": tally.errors[:5],
        "whole_ms": percentiles(tally.whole_ms),
        "stream_first_byte_ms": percentiles(tally.first_byte_ms),
        "stream_first_text_ms": percentiles(tally.first_text_ms),
        "stream_whole_ms": percentiles(tally.stream_ms),
    }


# ----------------------------------------------------------------------------- overhead
def overhead(
    data_dir: Path, port: int, key: str, questions: list[dict[str, Any]], repeats: int
) -> dict[str, Any]:
    """Per question, the API's whole answer against the same question asked and stored in-process."""
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from rag.pipeline import Question
    from rag.tracestore import TraceStore
    from rag.types import Principal

    settings = load_settings(data_dir=data_dir)
    pipeline = build_pipeline(settings)
    store = TraceStore.from_settings(settings)
    client = Client(port, key)
    principal = Principal("bench-0", frozenset({"staff"}))

    def in_process(q: dict[str, Any]) -> float:
        start = time.perf_counter()
        store.traces.save(pipeline.ask(Question(q["question"], principal, channel="cli")).to_json())
        return (time.perf_counter() - start) * 1000

    served: list[float] = []  # per API request: its time less the server's own time asking and storing

    def over_http(q: dict[str, Any]) -> float:
        ms, ask_ms, error = client.timed_whole(q)
        if error:
            raise SystemExit(f"the API failed during the overhead run: {error}")
        served.append(ms - ask_ms)
        return ms

    for q in questions:  # warm-up: query vectors and first-call costs on both sides
        in_process(q)
        over_http(q)
    served.clear()
    api, local, diff = [], [], []
    for r in range(repeats):
        for i, q in enumerate(questions):
            if (i + r) % 2 == 0:
                a, b = over_http(q), in_process(q)
            else:
                b, a = in_process(q), over_http(q)
            api.append(a)
            local.append(b)
            diff.append(a - b)
    store.close()
    return {
        "questions": len(questions),
        "repeats": repeats,
        "api_ms": percentiles(api),
        "in_process_ms": percentiles(local),
        "overhead_ms": percentiles(diff),  # API - in-process, the same question, two processes
        "overhead_in_server_ms": percentiles(
            served
        ),  # API - the same request's ask in the server (Server-Timing)
        "target_p50_ms": 10.0,
    }


def run(
    data_dir: Path, questions: list[dict[str, Any]], clients: int, seconds: float, overhead_repeats: int
) -> dict[str, Any]:
    """The load run and the overhead run against one ``rag serve`` over ``data_dir`` (migrated, keys added)."""
    from rag.config import load_settings
    from rag.tracestore.db import upgrade

    upgrade(load_settings(data_dir=data_dir))
    keys = _keys(data_dir, max(clients, 1))
    log = Path(tempfile.mkdtemp(prefix="rag-bench-api-log-")) / "serve.log"
    server = Server(data_dir, log)
    try:
        return {
            "load": load(server.port, keys[:clients], questions, seconds),
            "overhead": overhead(data_dir, server.port, keys[0], questions, overhead_repeats),
            "cores": os.cpu_count(),
            "server_log": str(log),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, help="an ingested data folder (default: the sample corpus)")
    parser.add_argument("--questions", type=Path, default=SAMPLE / "questions.jsonl")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--overhead-repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with data_dir_or_sample(args.data_dir, "rag-bench-api-") as data_dir:
        result = run(data_dir, _questions(args.questions), args.clients, args.seconds, args.overhead_repeats)
    if args.json:
        print(json.dumps(result))
        return
    lo, ov = result["load"], result["overhead"]
    print(
        f"load: {lo['clients']} clients x {lo['seconds']} s: {lo['answers']} answers ({lo['answers_per_s']}/s), "
        f"{lo['errors']} errors {lo['error_examples'] or ''}"
    )
    for name in ("whole_ms", "stream_first_byte_ms", "stream_first_text_ms", "stream_whole_ms"):
        p = lo[name]
        print(f"  {name:22s} p50 {p['p50']:8.1f}  p95 {p['p95']:8.1f}  (n={p['n']})")
    print(
        f"overhead ({ov['questions']} questions x {ov['repeats']}, one client): API p50 {ov['api_ms']['p50']} ms, "
        f"in-process p50 {ov['in_process_ms']['p50']} ms, API - in-process p50 {ov['overhead_ms']['p50']} ms, "
        f"p95 {ov['overhead_ms']['p95']} ms; API - its own ask (Server-Timing) p50 "
        f"{ov['overhead_in_server_ms']['p50']} ms, p95 {ov['overhead_in_server_ms']['p95']} ms (target p50 <= 10 ms)"
    )


if __name__ == "__main__":
    main()
