"""``rag serve``: the API alone (no Streamlit app), for API-only deployments, on uvicorn.

Mounted by ``supportbot/cli.py`` (``app.command("serve")(serve_command)``) when the command line names it. It
serves the API's routes (ui/api/app.py) and the route that opens cited sources (ui/serving.py), whose links are
signed with Streamlit's cookie secret: set ``STREAMLIT_SERVER_COOKIE_SECRET`` to the same value for every process
behind one address (``rag ui`` and ``rag serve`` included), or links made by one are refused by another.
"""

from __future__ import annotations

from typing import Annotated

import typer

from rag.cli_support import DataDir, or_exit
from rag.config import load_settings


def serve_command(
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on. 127.0.0.1 (the default) serves this machine only; 0.0.0.0 every "
            "interface (in a container, behind your network's controls). Demo sign-in needs a loopback address.",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 8000,
    data_dir: DataDir = None,
) -> None:
    """Serve the OpenAI-compatible API alone (docs/api.md): POST /v1/chat/completions, GET /v1/models, ..."""
    settings = or_exit(lambda: load_settings(data_dir=data_dir))
    import uvicorn
    from streamlit import config

    from ui.api.app import create_app

    # The source route (ui/serving.py) reads the server's address from Streamlit's options (demo mode is served
    # on a loopback address only): here the address is uvicorn's.
    config.set_option("server.address", host)
    typer.echo(
        f"Serving the API on http://{host}:{port}/v1 as model {settings.api_model!r} (data: {settings.data_dir}, "
        f"sign-in: {'API keys only' if settings.api_require_key else 'API keys or RAG_AUTH=' + settings.auth}); "
        "Ctrl+C stops it.",
        err=True,
    )
    uvicorn.run(
        create_app(settings, host=host),
        host=host,
        port=port,
        log_level="info",
        proxy_headers=False,  # client addresses are not taken from headers anyone can send
        timeout_graceful_shutdown=30,
    )
