#!/usr/bin/env bash
# Make sure Debian's Chromium (and chromedriver) is installed for the browser tests (pytest -m browser).
# Playwright drives /usr/bin/chromium directly; never run `playwright install` (it downloads its own browser).
# Exits 0 when /usr/bin/chromium is present (or was installed), non-zero when it cannot be installed.
set -euo pipefail
CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "chromium: $("$CHROMIUM" --version 2>/dev/null || echo present) ($CHROMIUM)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: $CHROMIUM is missing and apt-get is not available; install Chromium another way" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "error: installing Chromium needs root (run as root, or: sudo apt-get install chromium chromium-driver)" >&2
    exit 1
  fi
fi
echo "installing chromium and chromium-driver with apt-get..."
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "error: apt-get update failed" >&2; exit 1; }
$SUDO apt-get install -y -qq chromium chromium-driver || { echo "error: apt-get install chromium failed" >&2; exit 1; }
if [ ! -x "$CHROMIUM" ]; then
  echo "error: apt-get finished but $CHROMIUM is still missing" >&2
  exit 1
fi
echo "chromium: $("$CHROMIUM" --version 2>/dev/null || echo installed) ($CHROMIUM)"
