"""The compose file: services, health checks, start order, named volumes, required secrets, no literal secrets.

Parsed with PyYAML so CI needs no Docker; when a compose CLI is installed, ``docker compose config -q`` (or the
v1 ``docker-compose``) must accept the file too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
QDRANT = ("qdrant-1", "qdrant-2", "qdrant-3")
LONG_RUNNING = (*QDRANT, "postgres", "ui", "api")
APPS = ("migrate", "ui", "api", "ingest")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def test_services(services: dict[str, Any]) -> None:
    assert set(services) == {*QDRANT, "postgres", "migrate", "ui", "api", "oauth2-proxy", "ingest"}
    assert services["postgres"]["image"].startswith("postgres:16")
    for name in QDRANT:
        assert services[name]["image"].startswith("qdrant/qdrant:")
        assert services[name]["environment"]["QDRANT__CLUSTER__ENABLED"] == "true"
    assert services["qdrant-1"]["command"] == ["./qdrant", "--uri", "http://qdrant-1:6335"]
    for name in ("qdrant-2", "qdrant-3"):
        command = services[name]["command"]
        assert command[command.index("--bootstrap") + 1] == "http://qdrant-1:6335"
    for name in APPS:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"
    assert services["migrate"]["command"] == ["rag", "db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    assert services["ingest"]["command"] == ["rag", "ingest", "/corpus", "--prune"]
    assert services["ingest"]["profiles"] == ["ingest"]
    assert any(v.endswith(":/corpus:ro") for v in services["ingest"]["volumes"])
    assert "8501" in " ".join(services["ui"]["command"]) and services["ui"]["expose"] == ["8501"]
    assert services["api"]["command"] == ["rag", "serve", "--host", "0.0.0.0", "--port", "8000"]


def test_the_ui_is_reached_only_through_oauth2_proxy(services: dict[str, Any]) -> None:
    """The UI trusts identity headers (RAG_AUTH=proxy, never demo), so only the proxy that sets them is published
    in front of it; the API is published on its own port for chat tools, and takes API keys only there."""
    for name in APPS:
        assert services[name]["environment"]["RAG_AUTH"] == "proxy"
    published = [name for name, service in services.items() if service.get("ports")]
    assert published == ["api", "oauth2-proxy"]
    assert services["api"]["environment"]["RAG_API_REQUIRE_KEY"] == "true"
    assert "RAG_API_REQUIRE_KEY" not in services["ui"]["environment"]  # behind the proxy: its headers work
    proxy = services["oauth2-proxy"]
    env = proxy["environment"]
    assert env["OAUTH2_PROXY_UPSTREAMS"] == "http://ui:8501/"
    assert env["OAUTH2_PROXY_PASS_USER_HEADERS"] == "true"  # sets X-Forwarded-User / -Email / -Groups
    for key in ("OAUTH2_PROXY_CLIENT_SECRET", "OAUTH2_PROXY_COOKIE_SECRET", "OAUTH2_PROXY_OIDC_ISSUER_URL"):
        assert env[key].startswith("${") and ":?" in env[key], key
    assert proxy["depends_on"]["ui"] == {"condition": "service_healthy"}


def test_app_environment(services: dict[str, Any]) -> None:
    for name in APPS:
        env = services[name]["environment"]
        assert env["RAG_QDRANT_URL"] == "http://qdrant-1:6333"
        assert env["RAG_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert "${POSTGRES_PASSWORD:?" in env["RAG_DATABASE_URL"]
        assert env["RAG_QDRANT_REPLICATION"].endswith(":-2}")
        assert "RAG_QDRANT_SHARDS" in env and env["RAG_DATA_DIR"] == "/data"
        # API answers' source links are signed by the api and checked by the ui: one required secret for both
        assert env["STREAMLIT_SERVER_COOKIE_SECRET"].startswith("${STREAMLIT_COOKIE_SECRET:?")


def test_health_checks_on_every_long_running_service(services: dict[str, Any]) -> None:
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert {"interval", "timeout", "retries"} <= set(check), name
    for name in QDRANT:
        test = " ".join(services[name]["healthcheck"]["test"])
        assert "/readyz" in test and "curl" not in test and "wget" not in test  # the image has neither
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])


def test_start_order(services: dict[str, Any]) -> None:
    for app in ("ui", "api"):
        depends = services[app]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}
        for name in (*QDRANT, "postgres"):
            assert depends[name] == {"condition": "service_healthy"}
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    for name in QDRANT:
        assert services["ingest"]["depends_on"][name] == {"condition": "service_healthy"}
    for name in ("qdrant-2", "qdrant-3"):
        assert services[name]["depends_on"]["qdrant-1"] == {"condition": "service_healthy"}


def test_data_lives_on_named_volumes(compose: dict[str, Any], services: dict[str, Any]) -> None:
    named = set(compose["volumes"])
    mounts = {
        "qdrant-1": "/qdrant/storage",
        "qdrant-2": "/qdrant/storage",
        "qdrant-3": "/qdrant/storage",
        "postgres": "/var/lib/postgresql/data",
        "ui": "/data",
        "api": "/data",
        "ingest": "/data",
    }
    for name, target in mounts.items():
        sources = [v.split(":")[0] for v in services[name]["volumes"] if v.split(":")[1] == target]
        assert sources and sources[0] in named, (name, target)
    qdrant_volumes = {services[n]["volumes"][0].split(":")[0] for n in QDRANT}
    assert len(qdrant_volumes) == 3  # one per node


def test_no_literal_secrets() -> None:
    text = COMPOSE.read_text()
    for line in text.splitlines():
        key_value = re.match(
            r"\s*-?\s*([A-Z0-9_]*(PASSWORD|SECRET|TOKEN|API_KEY)[A-Z0-9_]*)\s*[:=]\s*(.+)", line
        )
        if key_value:
            assert key_value.group(3).strip().startswith("${"), line
    assert "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in .env}" in text
    assert not re.search(r"://[^:/\s]+:(?!\$\{)[^@\s]+@", text), "a URL with an inline password"
    example = (REPO / ".env.example").read_text()
    assert re.search(r"^POSTGRES_PASSWORD=\s*$", example, re.M), ".env.example must not ship a password"


def _compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_cli_accepts_the_file(tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no compose CLI here (docker compose or docker-compose); the YAML checks above still ran")
    env_file = tmp_path / "empty.env"
    env_file.write_text(
        "OIDC_ISSUER_URL=https://id.example.com\nOIDC_CLIENT_ID=rag\nOIDC_CLIENT_SECRET=dummy\n"
        "OAUTH2_PROXY_COOKIE_SECRET=dummy\nSTREAMLIT_COOKIE_SECRET=dummy\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSTGRES_", "RAG_", "COMPOSE_"))}
    base = [*cli, "--project-directory", str(REPO), "-f", str(COMPOSE), "--env-file", str(env_file)]
    ok = subprocess.run(
        [*base, "config", "-q"], env={**env, "POSTGRES_PASSWORD": "dummy"}, capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    profiles = subprocess.run(
        [*base, "--profile", "ingest", "config", "--services"],
        env={**env, "POSTGRES_PASSWORD": "dummy"},
        capture_output=True,
        text=True,
    )
    assert profiles.returncode == 0 and "ingest" in profiles.stdout.split(), profiles.stderr
    missing = subprocess.run([*base, "config", "-q"], env=env, capture_output=True, text=True)
    assert missing.returncode != 0 and "set POSTGRES_PASSWORD in .env" in missing.stderr
