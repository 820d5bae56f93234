"""The LLM room: the client every call goes through (``client``: any OpenAI-compatible server), the generation modes
the ``generate`` stage and the claim repair prompt it with (``generation``), and the packaged model's local server
(``serve``) with its command (``cli``: ``rag llm``)."""
