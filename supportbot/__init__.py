"""The composition root: the ``rag`` console command (``supportbot.cli``), above ``rag``, ``ingest``, ``ui`` and
``evaluation``."""
