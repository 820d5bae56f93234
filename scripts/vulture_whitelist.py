"""Names vulture cannot see used (pyproject.toml [tool.vulture]; scripts/lint.sh runs the check).

Each is read by a framework or another process, not by a Python call vulture can follow: the sandboxed children's
entry points (ingest's readers and the tests' hostile readers are called by name in a child process), ONNX Runtime
and SQLAlchemy settings assigned as attributes, the pydantic fields and SQLAlchemy columns that serialisation and
the database read, and a Streamlit cache key. Regenerate with ``vulture --make-whitelist`` and read every line:
a name belongs here only when something outside Python's call graph uses it.
"""

# ruff: noqa
_child_convert  # unused function (ingest/formats.py)
_child_recognise  # unused function (ingest/ocr.py)
_child_clean  # unused function (ingest/pdf.py)
_child_answer  # unused function (ingest/pdf.py)
_.intra_op_num_threads  # unused attribute (rag/models/embedder.py)
_.inter_op_num_threads  # unused attribute (rag/models/embedder.py)
_.log_severity_level  # unused attribute (rag/models/embedder.py)
from_  # unused variable (rag/traces/schema.py)
from_  # unused variable (rag/traces/schema.py)
from_  # unused variable (rag/traces/schema.py)
evidence_tokens  # unused variable (rag/traces/schema.py)
feedback_reason  # unused variable (rag/tracestore/analytics.py)
feedback_comment  # unused variable (rag/tracestore/analytics.py)
thumbs_up  # unused variable (rag/tracestore/analytics.py)
thumbs_down  # unused variable (rag/tracestore/analytics.py)
_.isolation_level  # unused attribute (rag/tracestore/db.py)
evidence_tokens  # unused variable (rag/tracestore/models.py)
first_seen_at  # unused variable (rag/tracestore/models.py)
intent_index  # unused variable (rag/tracestore/models.py)
updated_at  # unused variable (rag/tracestore/models.py)
superseded_by  # unused variable (rag/tracestore/models.py)
updated_at  # unused variable (rag/tracestore/models.py)
what_i_inherit  # unused function (tests/ingest/sandbox_readers.py)
hog  # unused function (tests/ingest/sandbox_readers.py)
crash  # unused function (tests/ingest/sandbox_readers.py)
logprobs  # unused variable (ui/api/schemas.py)
total_tokens  # unused variable (ui/api/schemas.py)
system_fingerprint  # unused variable (ui/api/schemas.py)
logprobs  # unused variable (ui/api/schemas.py)
system_fingerprint  # unused variable (ui/api/schemas.py)
owned_by  # unused variable (ui/api/schemas.py)
updated_at  # unused variable (ui/api/schemas.py)
model_key  # unused variable (ui/views/analytics.py)
