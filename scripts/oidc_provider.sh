#!/usr/bin/env bash
# Install the OpenID provider the OIDC sign-in browser tests start (tests/ui/test_oidc_browser.py): the npm package
# oidc-provider, at the versions tests/oidc/package-lock.json pins, into tests/oidc/node_modules (git-ignored).
# Idempotent and offline once installed: npm runs only when the lockfile changed since the last install.
# Needs Node >= 20 and npm (Debian's nodejs package when apt-get can install one that new).
# Exits 0 when the provider can run, non-zero when it cannot (the tests then skip, or fail under CI).
set -euo pipefail
cd "$(dirname "$0")/../tests/oidc"
MIN_NODE=20

node_major() { node --version 2>/dev/null | sed -E 's/^v([0-9]+)\..*/\1/'; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
    echo "installing nodejs and npm with apt-get..."
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq nodejs npm || true
  fi
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "error: node and npm are needed for the test OpenID provider (Node >= $MIN_NODE)" >&2
  exit 1
fi
if [ "$(node_major)" -lt "$MIN_NODE" ]; then
  echo "error: node $(node --version) is older than $MIN_NODE, which the test OpenID provider needs" >&2
  exit 1
fi

stamp=node_modules/.installed-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f node_modules/oidc-provider/package.json ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "oidc-provider: $(node -p 'require("./node_modules/oidc-provider/package.json").version') (tests/oidc, installed)"
  exit 0
fi
echo "installing the test OpenID provider (npm ci in tests/oidc)..."
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
echo "$want" > "$stamp"
echo "oidc-provider: $(node -p 'require("./node_modules/oidc-provider/package.json").version') (tests/oidc)"
