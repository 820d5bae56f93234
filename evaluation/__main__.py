"""``python -m evaluation position|qa|multihop|suite ...``: the same commands as ``rag eval``."""

from evaluation.cli import eval_app

eval_app(prog_name="rag eval")
