"""A running API server for the API tests: ``rag serve`` as its own process (uvicorn, the real routes, the real
pipeline over the sample corpus), with API keys made in its trace database, and the helpers to call it.

The server runs in proxy mode (``RAG_AUTH=proxy``): requests identify by API key or by the authenticating proxy's
identity headers, which the tests send as the proxy would. Each test module that needs another mode starts its
own server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rag.tracestore import TraceStore
from tests.ui.conftest import REPO, USERS
from tests.ui.support import free_port

MODEL = "policy-bot"
REFUND_Q = "How long do I have to return an item for a full refund, and can I refund a gift card?"
SALARY_Q = "What are the salary bands for level L3?"


@dataclass
class Server:
    """A running ``rag serve`` (or ``rag ui``): its base URL, data folder, process and log."""

    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: Path
    keys: dict[str, str] = field(default_factory=dict)  # name -> token

    @property
    def api(self) -> str:
        return f"{self.url}/v1"

    def store(self) -> TraceStore:
        return TraceStore(f"sqlite:///{self.data_dir / 'traces.sqlite'}")

    def key(self, name: str, user: str, groups: list[str], **options: Any) -> str:
        """A new key in the server's database (the server reads keys on every request)."""
        with self.store() as store:
            _, token = store.keys.create(
                user, groups, expires_at=datetime.now(UTC) + timedelta(days=1), name=name, **options
            )
        self.keys[name] = token
        return token

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request; (status, headers with lower-case names, body), error statuses included."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json", **(headers or {})}
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=120) as response:
                return response.status, _lower(response.headers), response.read()
        except urllib.error.HTTPError as err:
            return err.code, _lower(err.headers), err.read()

    def post(self, path: str, body: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        status, _, payload = self.request("POST", path, body, **kwargs)
        return status, json.loads(payload)

    def answers(self) -> int:
        with self.store() as store:
            return store.traces.count()


def _lower(headers: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}


def proxy_headers(user: str, groups: list[str]) -> dict[str, str]:
    """What oauth2-proxy sets for a signed-in user (RAG_AUTH=proxy)."""
    return {"X-Forwarded-User": user, "X-Forwarded-Groups": ",".join(groups)}


def chat(question: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": question}], **extra}


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def run_server(
    data_dir: Path, log: Path, env: dict[str, str], *, command: str = "serve", health: str = "/v1/health"
) -> Iterator[Server]:
    """``rag serve`` (or ``rag ui``) on a free loopback port until the block ends."""
    port = free_port()
    args = [sys.executable, "-m", "supportbot", command, "--port", str(port), "--data-dir", str(data_dir)]
    child_env = {
        **os.environ,
        "TQDM_DISABLE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **env,
    }
    out = open(log, "wb")  # noqa: SIM115
    process = subprocess.Popen(
        args, cwd=REPO, env=child_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while not _healthy(url + health):
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the server did not come up: " + log.read_text()[-3000:]
            time.sleep(0.3)
        yield Server(url, data_dir, process, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        out.close()


def copy_data_dir(tmp_path_factory: pytest.TempPathFactory, sample_data_dir: Path, name: str) -> Path:
    """The sample corpus with a migrated trace database and the UI tests' user list, in a folder of its own."""
    from rag.config import load_settings
    from rag.tracestore.db import upgrade

    data_dir = tmp_path_factory.mktemp(name)
    shutil.copytree(sample_data_dir, data_dir, dirs_exist_ok=True)
    upgrade(load_settings(data_dir=data_dir))
    (data_dir / "users.json").write_text(json.dumps(USERS))
    return data_dir


@pytest.fixture(scope="session")
def api_server(tmp_path_factory: pytest.TempPathFactory, sample_data_dir: Path) -> Iterator[Server]:
    """``rag serve`` in proxy mode over the sample corpus, with a small message limit to test it."""
    data_dir = copy_data_dir(tmp_path_factory, sample_data_dir, "api-data")
    log = tmp_path_factory.mktemp("api-log") / "serve.log"
    env = {"RAG_AUTH": "proxy", "RAG_API_RATE_LIMIT": "100000", "RAG_API_MAX_MESSAGES": "20"}
    with run_server(data_dir, log, env) as server:
        yield server
