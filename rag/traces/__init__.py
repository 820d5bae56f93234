"""What the app records and shows of its answers: the trace's schema (``schema``: the ``rag ask --json`` contract),
an answer's status label read from its trace (``status``), its terminal rendering (``render``), and a saved position
sweep as the UI reads it (``sweeps``). Where traces are stored is ``rag.tracestore``."""
