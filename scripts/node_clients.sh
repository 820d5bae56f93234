#!/usr/bin/env bash
# Install the official openai npm client the API tests drive a running server with (tests/ui/api/test_clients.py),
# at the version tests/node_clients/package-lock.json pins, into tests/node_clients/node_modules (git-ignored).
# Idempotent and offline once installed: npm runs only when the lockfile changed since the last install.
# Needs Node >= 20 and npm (as scripts/oidc_provider.sh, which installs them with apt-get where it can).
# Exits 0 when the client can run, non-zero when it cannot (the tests then skip, or fail under CI).
set -euo pipefail
cd "$(dirname "$0")/../tests/node_clients"
MIN_NODE=20
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "error: node and npm are needed for the openai npm client (Node >= $MIN_NODE; scripts/oidc_provider.sh installs them)" >&2
  exit 1
fi
if [ "$(node --version | sed -E 's/^v([0-9]+)\..*/\1/')" -lt "$MIN_NODE" ]; then
  echo "error: node $(node --version) is older than $MIN_NODE, which the openai npm client needs" >&2
  exit 1
fi
stamp=node_modules/.installed-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f node_modules/openai/package.json ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "openai (npm): $(node -p 'require("./node_modules/openai/package.json").version') (tests/node_clients, installed)"
  exit 0
fi
echo "installing the openai npm client (npm ci in tests/node_clients)..."
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
echo "$want" > "$stamp"
echo "openai (npm): $(node -p 'require("./node_modules/openai/package.json").version') (tests/node_clients)"
