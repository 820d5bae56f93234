"""The ``filters`` stage: what the asker may read, as of when, with which tags. Every search after it is
filtered inside the stores; nothing searches without it."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

from rag.request import State
from rag.types import SearchFilter


class Filters:
    """What the asker may read, as of when, with which tags: every search below is filtered by it."""

    name = "filters"

    def run(self, state: State) -> State:
        q = state.question
        with state.recorder.stage(self.name) as d:
            filt = SearchFilter(q.principal, q.as_of or date.today(), q.tags)
            d.update(
                groups=sorted(filt.principal.readable_groups),
                as_of=filt.as_of.isoformat(),
                tags=sorted(filt.tags),
            )
        return replace(state, filter=filt)
