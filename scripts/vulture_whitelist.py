"""Names vulture cannot see used (pyproject.toml [tool.vulture]; scripts/lint.sh runs the check).

Each is read by a framework or another process, not by a Python call vulture can follow: the sandboxed children's
entry points (ingest's readers and the tests' hostile readers are called by name in a child process), ONNX Runtime
and SQLAlchemy settings assigned as attributes, the pydantic fields and SQLAlchemy columns that serialisation and
the database read, and a Streamlit cache key. Regenerate with ``vulture --make-whitelist`` and read every line:
a name belongs here only when something outside Python's call graph uses it.
"""

# ruff: noqa
# ingest/formats.py: sandboxed child entry points, called by name
_child_convert
# ingest/ocr.py: sandboxed child entry point, called by name
_child_recognise
# ingest/pdf.py: sandboxed child entry points, called by name
_child_clean; _child_answer
# rag/models/embedder.py: ONNX Runtime session options
_.intra_op_num_threads; _.inter_op_num_threads; _.log_severity_level
# rag/traces/schema.py: pydantic fields of the trace
from_; evidence_tokens
# rag/tracestore/analytics.py: fields of an analytics row
feedback_reason; feedback_comment; thumbs_up; thumbs_down
# rag/tracestore/db.py: the SQLite driver's setting
_.isolation_level
# rag/tracestore/models.py: SQLAlchemy columns
evidence_tokens; first_seen_at; intent_index; updated_at; superseded_by
# tests/ingest/sandbox_readers.py: hostile readers the sandbox tests run by name
what_i_inherit; hog; crash
# ui/api/schemas.py: pydantic fields of the OpenAI-compatible API
logprobs; total_tokens; system_fingerprint; owned_by; updated_at
# ui/views/analytics.py: a Streamlit cache key
model_key
