"""``rag ui``: start the Streamlit app on localhost.

Mounted by ``supportbot/cli.py`` (the composition root) with ``app.command("ui")(ui_command)``, imported only
when the command line names ``ui``; ``rag`` the library never imports ``ui``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from rag.cli_support import DataDir, or_exit
from rag.config import Settings, load_settings

# The app (ui/app.py) and the route that opens a cited PDF in the browser's viewer (ui/serving.py).
APP = Path(__file__).resolve().parent / "server.py"
REPO = APP.parents[1]
EXEC = os.name == "posix"  # replace this process with Streamlit (see launch)


def streamlit_command(port: int = 8501, headless: bool = True, address: str = "127.0.0.1") -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.port",
        str(port),
        "--server.headless",
        "true" if headless else "false",
        "--server.address",
        address,
        "--browser.gatherUsageStats",
        "false",
    ]


def child_env(settings: Settings) -> dict[str, str]:
    """The child's environment: the data directory travels as RAG_DATA_DIR (settings read it from there)."""
    env = dict(os.environ)
    env["RAG_DATA_DIR"] = str(Path(settings.data_dir).resolve())
    env.setdefault("TQDM_DISABLE", "1")
    return env


def launch(settings: Settings, port: int = 8501, headless: bool = True) -> int:
    """Run ``streamlit run ui/server.py`` on 127.0.0.1:PORT until it exits; returns its exit status.

    Runs from the repository root so Streamlit finds ``.streamlit/config.toml`` (no tracebacks in the browser).
    On POSIX the process becomes Streamlit (exec): a service manager's SIGTERM (``docker stop``, systemd, a
    test's ``terminate()``) reaches the server itself. As a child of ``rag ui`` it outlived the ``rag ui``
    that was stopped and kept serving the port.
    """
    cmd = streamlit_command(port, headless)
    env = child_env(settings)
    if EXEC:
        sys.stdout.flush()
        sys.stderr.flush()
        os.chdir(REPO)
        os.execve(cmd[0], cmd, env)  # does not return
    try:
        return subprocess.call(cmd, env=env, cwd=str(REPO))
    except KeyboardInterrupt:
        return 130


def ui_command(
    port: Annotated[int, typer.Option("--port", help="Port to serve on (localhost only).")] = 8501,
    data_dir: DataDir = None,
) -> None:
    """Start the support bot's web UI (chat, trace explorer, documents, evaluation) on http://127.0.0.1:PORT."""
    settings = or_exit(lambda: load_settings(data_dir=data_dir))
    typer.echo(
        f"Serving the UI on http://127.0.0.1:{port} (data: {settings.data_dir}); Ctrl+C stops it.", err=True
    )
    raise typer.Exit(launch(settings, port=port, headless=True))
