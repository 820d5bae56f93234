#!/usr/bin/env bash
# Create .venv-peer: the app plus Haystack 2.x, for `python -m evaluation.peer` only (issue 9, "a peer, side by
# side"). Haystack is never a dependency of the app; it lives in this separate environment so both pipelines
# run in one process. With --test, the test tools too (to run tests/evaluation/test_peer.py there). Idempotent.
# torch is installed first and pinned (as scripts/setup.sh does), so nothing else pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
HAYSTACK="haystack-ai==2.31.0"
# MarkdownToDocument's optional dependency (Haystack asks for `pip install markdown-it-py mdit_plain`): the
# peer reads the dev suite's Markdown handbook with it in `evaluation.peer --mode users`.
MARKDOWN="mdit-plain==1.0.1"
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
if [ ! -x .venv-peer/bin/python ]; then
  "$PY" -m venv .venv-peer
fi
. .venv-peer/bin/activate
stamp=".venv-peer/.installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$0" -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".$extras" "$HAYSTACK" "$MARKDOWN"
  touch "$stamp"
fi
echo "ready: .venv-peer/bin/python -m evaluation.peer --help"
