"""Tokenising is safe from several threads at once (Pipeline.ask serves concurrent requests)."""

from __future__ import annotations

import random
import string
import threading

from rag.text import bm25_tokens


def _words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    suffixes = ["ational", "ization", "fulness", "ement", "ing", "ousness"]
    return [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 14)))
        + rng.choice(suffixes)
        + str(seed)
        for _ in range(n)
    ]


def test_concurrent_tokenising_matches_sequential() -> None:
    batches = {seed: _words(seed, 6000) for seed in range(4)}
    results: dict[int, list[list[str]]] = {}
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            results[seed] = [bm25_tokens(w) for w in batches[seed]]
        except BaseException as exc:  # the shared stemmer raised IndexError under contention
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for seed, words in batches.items():
        assert results[seed] == [bm25_tokens(w) for w in words]
