"""The LLM room: the client every call goes through (``client``: any OpenAI-compatible server) and the packaged
model's local server (``serve``) with its command (``cli``: ``rag llm``). What the query path asks of an LLM is
the ``generate`` stage's (rag/stages/generate.py)."""
