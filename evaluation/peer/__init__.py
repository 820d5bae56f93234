"""A peer, side by side: our query path and Haystack 2.x's equivalent, on the same chunks (``--mode chunks``)
and as each side's users run it on the policy suites (``--mode users``): quality and latency.

    bash scripts/peer_venv.sh                       # once: .venv-peer = the app + haystack-ai (never in .venv)
    .venv-peer/bin/python -m evaluation.peer --help

Method, commands, output format and results: docs/benchmarks-peer.md.
"""

from rag.config import library_defaults

library_defaults(  # read by Haystack and the Hugging Face libraries at import; Haystack would otherwise phone home
    {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "TQDM_DISABLE": "1",
    }
)
