#!/usr/bin/env bash
# Create .venv in the repo root and install the app (and, with --test, the test tools). Idempotent.
# torch is installed first and pinned, so nothing else pulls a multi-GB CUDA build. Debian's tesseract-ocr (OCR of
# scanned PDFs) is installed by scripts/ocr.sh; where it cannot be, ingestion says so on every scanned file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=".venv/.installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".$extras"
  touch "$stamp"
fi
bash scripts/ocr.sh || echo "warning: tesseract-ocr could not be installed; scanned PDFs will fail with a hint" \
  "(see the error above)" >&2
