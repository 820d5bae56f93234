"""``python -m supportbot ...``: the ``rag`` command."""

from supportbot.cli import main

main()
