"""The OpenID provider the OIDC sign-in browser tests sign in through: tests/oidc/provider.mjs (the npm package
oidc-provider, pinned by tests/oidc/package-lock.json and installed by scripts/oidc_provider.sh) run by Node on
free loopback ports, with one client for the app and the users below, and the app's ``[auth]`` secrets for it.

Missing Node or the npm packages: the tests skip with a message, unless RAG_REQUIRE_BROWSER=1 (CI), which turns
the skip into a failure, as for Chromium.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ui.conftest import REPO
from tests.ui.support import free_port, stop, wait_until_up

OIDC_DIR = REPO / "tests" / "oidc"
PROVIDER_SCRIPT = OIDC_DIR / "provider.mjs"
MIN_NODE = 20
CLIENT_ID = "policy-rag"
# The provider's accounts. nora has no groups claim at all; her address holds Markdown and HTML, which the app
# must show as text.
USERS: dict[str, dict[str, object]] = {
    "hana": {"password": "hana-pw-1", "email": "hana@example.com", "name": "Hana", "groups": ["staff", "hr"]},
    "alice": {"password": "alice-pw-2", "email": "alice@example.com", "name": "Alice", "groups": ["staff"]},
    "nora": {"password": "nora-pw-3", "email": "nora_*new*<b>@example.com", "name": "Nora"},
}
ATTACKS = ("tampered", "wrong-issuer", "foreign-key")  # what provider.mjs can do to the next ID token


def unavailable_reason() -> str | None:
    """Why the provider cannot run here (no Node, an old one, the packages not installed), or None."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed"
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"node does not run ({exc})"
    match = re.match(r"v(\d+)\.", version.strip())
    if match is None or int(match.group(1)) < MIN_NODE:
        return f"node {version.strip() or '?'} is older than {MIN_NODE}"
    if not (OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        return f"the npm packages of {OIDC_DIR.relative_to(REPO)} are not installed"
    return None


def require_provider() -> None:
    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("RAG_REQUIRE_BROWSER") == "1":
        pytest.fail(
            f"the test OpenID provider cannot run: {reason} (RAG_REQUIRE_BROWSER=1 makes this a failure)"
        )
    pytest.skip(f"the test OpenID provider cannot run: {reason}; run scripts/oidc_provider.sh")


@dataclass
class Provider:
    """A running provider: its issuer URL, its client secret, the control port that makes it send a bad ID
    token, and its log."""

    issuer: str
    client_secret: str
    control: str
    log: Path
    process: subprocess.Popen[bytes]

    @property
    def metadata_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def attack_next_id_token(self, mode: str) -> None:
        """Make the next token response carry an ID token treated as ``mode`` (one of ATTACKS)."""
        data = urllib.parse.urlencode({"mode": mode}).encode()
        with urllib.request.urlopen(f"{self.control}/next-id-token", data=data, timeout=10) as response:
            assert response.status == 204, response.status

    def stop(self) -> None:
        stop(self.process)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextmanager
def run_provider(redirect_uri: str, log: Path, workdir: Path) -> Iterator[Provider]:
    """The provider on free loopback ports, with a client whose redirect URI is ``redirect_uri``; stopped on exit."""
    require_provider()
    port, control_port = free_port(), free_port()
    client_secret = secrets.token_urlsafe(24)
    config = workdir / "oidc-provider.json"
    config.write_text(
        json.dumps(
            {
                "port": port,
                "control_port": control_port,
                "client_id": CLIENT_ID,
                "client_secret": client_secret,
                "redirect_uri": redirect_uri,
                "users": USERS,
            }
        )
    )
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "w")  # noqa: SIM115
    process = subprocess.Popen(
        [str(shutil.which("node")), str(PROVIDER_SCRIPT), str(config)],
        cwd=OIDC_DIR,
        env={**os.environ, "NODE_ENV": "production"},
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    provider = Provider(
        f"http://127.0.0.1:{port}", client_secret, f"http://127.0.0.1:{control_port}", log, process
    )
    try:
        wait_until_up(
            process,
            lambda: _answers(provider.metadata_url) and _control_answers(provider.control),
            "the OpenID provider",
            provider.issuer,
            log,
            timeout_s=60,
            poll_s=0.2,
        )
        yield provider
    finally:
        provider.stop()
        out.close()


def _control_answers(control: str) -> bool:
    try:
        urllib.request.urlopen(f"{control}/", timeout=2)
    except urllib.error.HTTPError as exc:
        return exc.code == 404  # it answers: every address but /next-id-token is a 404
    except OSError:
        return False
    return True


def write_secrets(path: Path, app_url: str, provider: Provider) -> Path:
    """The app's ``.streamlit/secrets.toml`` ``[auth]`` section for ``provider``, as docs/deployment.md has it."""
    path.write_text(
        "[auth]\n"
        f'redirect_uri = "{app_url}/oauth2callback"\n'
        f'cookie_secret = "{secrets.token_urlsafe(32)}"\n'
        f'client_id = "{CLIENT_ID}"\n'
        f'client_secret = "{provider.client_secret}"\n'
        f'server_metadata_url = "{provider.metadata_url}"\n'
        'client_kwargs = { scope = "openid email profile groups" }\n'
    )
    return path
