#!/usr/bin/env bash
# The static checks, one command: ruff check, mypy over rag, ingest, ui and benchmarks, and the import-layer
# contracts in .importlinter (lint-imports). Every check runs; the exit status is 1 when any of them failed.
# Formatting (ruff format --check) is not checked here yet.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
  . .venv/bin/activate
fi
status=0
check() {
  echo "== $*"
  if "$@"; then echo "ok: $1"; else echo "FAILED: $1"; status=1; fi
}
check ruff check rag ingest ui tests benchmarks
check mypy rag ingest ui benchmarks
check lint-imports --config .importlinter
exit "$status"
