#!/usr/bin/env bash
# The static checks, one command: ruff check, ruff format --check, mypy over rag, ingest, ui, evaluation, supportbot and benchmarks, the import-layer
# contracts in .importlinter (lint-imports), dead code (vulture at 60% confidence, pyproject.toml [tool.vulture]), and that
# docs/schema/trace.schema.json matches rag/traces/schema.py. Every check runs; the exit status is 1 when any of them failed.
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
check ruff check rag ingest ui evaluation supportbot tests benchmarks migrations
check ruff format --check rag ingest ui evaluation supportbot tests benchmarks migrations
check mypy rag ingest ui evaluation supportbot benchmarks
check lint-imports .importlinter
check vulture
check python -m rag.traces.schema --check
exit "$status"
