#!/usr/bin/env bash
# README command 2: set up the same .venv and run the whole test suite.
# Starts a throwaway PostgreSQL (Debian packages) for the trace-store suite, and uses Debian's Chromium and the test
# OpenID provider (npm's oidc-provider, scripts/oidc_provider.sh) for the browser tests when they can be installed
# here; those tests skip with a clear message otherwise (CI requires them: RAG_REQUIRE_BROWSER=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ -z "${RAG_TEST_POSTGRES_URL:-}" ] && [ -f scripts/postgres.sh ]; then
  if url=$(bash scripts/postgres.sh start 2>/tmp/rag-pg-start.log | tail -n 1) && [ -n "$url" ]; then
    export RAG_TEST_POSTGRES_URL="$url"
    trap 'bash scripts/postgres.sh stop >/dev/null 2>&1 || true' EXIT
  else
    echo "PostgreSQL could not be started (see /tmp/rag-pg-start.log); postgres tests will skip." >&2
  fi
fi
if [ -f scripts/browser.sh ]; then
  bash scripts/browser.sh || echo "Chromium could not be installed; browser tests will skip." >&2
fi
if [ -f scripts/oidc_provider.sh ]; then
  bash scripts/oidc_provider.sh \
    || echo "The test OpenID provider could not be installed; OIDC browser tests will skip (fail in CI)." >&2
fi
# The static checks first (ruff, formatting, mypy, the import-layer contracts): they fail the run like a test.
bash scripts/lint.sh
mkdir -p test-artifacts
python -m pytest "$@"
