#!/usr/bin/env bash
# Make sure Debian's tesseract-ocr (with English and orientation data) is installed: ingestion reads scanned pages
# with it (ingest/ocr.py). Called by scripts/setup.sh, so both README commands and CI install it.
# Exits 0 when tesseract is present (or was installed), non-zero when it cannot be installed here.
set -euo pipefail
if command -v tesseract >/dev/null 2>&1 && tesseract --list-langs 2>/dev/null | grep -qx eng; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: tesseract is missing and apt-get is not available: install Tesseract 5 with English data" \
    "(e.g. brew install tesseract) to read scanned PDFs" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "error: installing tesseract needs root (run: sudo apt-get install tesseract-ocr) to read scanned PDFs" >&2
    exit 1
  fi
fi
echo "installing tesseract-ocr with apt-get (reads scanned PDFs)..." >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "error: apt-get update failed" >&2; exit 1; }
$SUDO apt-get install -y -qq tesseract-ocr >/dev/null || { echo "error: apt-get install tesseract-ocr failed" >&2; exit 1; }
tesseract --version 2>&1 | head -n 1 >&2
