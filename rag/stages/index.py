"""The ``index`` stage: every request reads the newest published generation of the index."""

from __future__ import annotations

from rag.request import State
from rag.stages.shared import Models


class OpenIndex:
    """Switch to the newest published generation, if there is one."""

    name = "index"

    def __init__(self, models: Models) -> None:
        self.models = models

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            d["switched"] = self.models.reader.refresh()
            d["generation"] = self.models.reader.generation.name
        return state
