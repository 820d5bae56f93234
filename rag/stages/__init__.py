"""The stages of the query path, one module each, named for the stage (the name its trace record carries).

Each module holds the stage's component (a small class with a ``name`` and ``run(state) -> state``, which writes
what it did into the request's recorder) beside the pure, typed functions it runs; ``rag.pipeline.build_stages``
lists them in order:

index, filters, standalone, intents, retrieve, rerank, hops (``hop_1``, ...), abstention, dedup, context, budget,
bundle, pack, answer_type, read, prompt, generate, citations, claims, answer_check, confirm.

What several stages share: ``shared`` (the loaded models, the query-vector caches, sentence-level scores),
``extractive`` (the evidence's quotable sentences and the offline answer built from them) and ``memory`` (which
past turns and facts of a conversation a question carries).
"""
