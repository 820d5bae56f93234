"""``python -m rag.evaluation position|qa ...``: the same commands as ``rag eval``."""

from rag.evaluation.cli import eval_app

eval_app(prog_name="rag eval")
