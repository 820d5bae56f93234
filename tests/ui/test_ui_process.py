"""`rag ui` as a process: stopping it stops the server (a service manager's SIGTERM must not orphan Streamlit)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ui.support import free_port, healthy

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.name != "posix", reason="exec and SIGTERM semantics are POSIX")
def test_sigterm_to_rag_ui_stops_the_server(tmp_path: Path) -> None:
    rag = shutil.which("rag") or str(Path(sys.executable).with_name("rag"))
    if not Path(rag).exists():
        pytest.skip("the rag CLI is not installed in this environment")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "TQDM_DISABLE": "1"}
    log = open(tmp_path / "ui.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [rag, "ui", "--port", str(port), "--data-dir", str(tmp_path / "data")],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not healthy(url):
            assert proc.poll() is None, (tmp_path / "ui.log").read_text()
            assert time.monotonic() < deadline, "the UI did not come up"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # what docker stop / systemd send
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while healthy(url) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not healthy(url), "the Streamlit server outlived the stopped `rag ui`"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the session, so nothing leaks
        proc.wait(timeout=30)
        log.close()
