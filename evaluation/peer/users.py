"""``--mode users``: the peer as its users run it on every policy suite (Haystack's converters and splitter)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from evaluation.peer.common import (
    GRADER,
    REPO,
    SHARED,
    Log,
    load_average,
    load_grader,
    machine,
    require_haystack,
)
from evaluation.peer.measure import latency, peer_label, rotate, stage_latencies, through_evidence
from evaluation.peer.systems import Answer, Ours, docs_in_order, ingest_ours, torch_threads

# ---------------------------------------------------------------------------------------------------------
# The peer as its users run it (--mode users): Haystack's own converters, cleaner and splitter, per policy suite
# ---------------------------------------------------------------------------------------------------------

SUITE_CACHE = Path(
    "/work/cache/suite"
)  # where `rag eval suite` keeps each suite's index (reused when present)
SPLIT_WORDS, SPLIT_OVERLAP = (
    200,
    20,
)  # DocumentSplitter(split_by="word", ...), as the issue and Haystack's docs
PEER_TOP_K = 6  # the peer's default evidence: the joiner's top 6


@dataclass(frozen=True)
class PolicySuite:
    """A policy QA suite: its questions (with ``evidence`` quotes) and the corpus they are asked over."""

    name: str
    questions: Path
    corpus: tuple[Path, ...]


def policy_suites(shared: Path = SHARED, repo: Path = REPO) -> dict[str, PolicySuite]:
    policies = shared / "data" / "policies"
    return {
        "dev": PolicySuite(
            "dev",
            shared / "data" / "questions" / "dev.jsonl",
            (policies / "epa-infosec", policies / "civicactions-handbook" / "markdown" / "docs"),
        ),
        "gitlab": PolicySuite(
            "gitlab", shared / "data" / "questions" / "gitlab-dev.jsonl", (policies / "gitlab-people",)
        ),
        "moj": PolicySuite(
            "moj", shared / "data" / "questions" / "moj-dev.jsonl", (policies / "moj-handbook" / "pdf",)
        ),
        "hypha": PolicySuite(
            "hypha", shared / "data" / "questions" / "hypha-dev.jsonl", (policies / "hypha-handbook" / "pdf",)
        ),
        "sample": PolicySuite(
            "sample", repo / "ingest" / "sample" / "questions.jsonl", (repo / "ingest" / "sample" / "pdfs",)
        ),
    }


@dataclass(frozen=True)
class SuiteQuestion:
    """One question of a policy suite, as its file gives it (the asker defaults to a user with no groups)."""

    qid: str
    type: str
    text: str
    quotes: tuple[str, ...]
    gold_files: tuple[str, ...]
    user: str = "peer-bench"
    groups: frozenset[str] = frozenset()
    as_of: date | None = None


def suite_question(d: dict[str, Any]) -> SuiteQuestion:
    evidence = d.get("evidence") or []
    return SuiteQuestion(
        qid=str(d["id"]),
        type=str(d.get("type", "single")),
        text=str(d["question"]),
        quotes=tuple(str(e["quote"]) for e in evidence if e.get("quote")),
        gold_files=tuple(str(e["file"]) for e in evidence if e.get("file")),
        user=str(d.get("user") or "peer-bench"),
        groups=frozenset(d.get("groups") or ()),
        as_of=date.fromisoformat(d["as_of"]) if d.get("as_of") else None,
    )


def select_split(
    questions: Sequence[SuiteQuestion],
    suite: str,
    split: str,
    ids: Callable[[str, str], frozenset[str]] | None = None,
) -> list[SuiteQuestion]:
    """The questions of ``suite`` in ``split`` (tune, test or all), by the fixed split on disk
    (``evaluation.splits.split_ids``), in file order. A question the split does not know is an error: the
    split file is stale."""
    from evaluation.splits import split_ids

    lookup = ids or split_ids
    known = lookup(suite, "all")
    unknown = [q.qid for q in questions if q.qid not in known]
    if unknown:
        raise SystemExit(
            f"{suite}: questions {', '.join(unknown[:5])} have no tune/test split; rebuild the splits with "
            "`python -m evaluation.splits --write` (and commit them)."
        )
    chosen = lookup(suite, split)
    return [q for q in questions if q.qid in chosen]


def sidecar_groups(corpus: Sequence[Path]) -> dict[str, tuple[str, ...]]:
    """File name -> the access groups its ``<file>.meta.json`` sidecar gives (no sidecar or no groups: public)."""
    from rag.types import PUBLIC_GROUP

    groups: dict[str, tuple[str, ...]] = {}
    for root in corpus:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for f in files:
            if f.name.endswith(".meta.json") or not f.is_file():
                continue
            meta = f.with_name(f.name + ".meta.json")
            found = json.loads(meta.read_text()).get("groups") if meta.is_file() else None
            groups[f.name] = tuple(found) if found else (PUBLIC_GROUP,)
    return groups


def gold_readable(q: SuiteQuestion, groups: dict[str, tuple[str, ...]]) -> bool:
    """Whether the asker may read every gold file (a file the corpus does not know counts as public)."""
    from rag.types import PUBLIC_GROUP, Principal

    readable = Principal(q.user, q.groups).readable_groups
    return all(set(groups.get(Path(f).name, (PUBLIC_GROUP,))) & readable for f in q.gold_files)


def graded_questions(
    questions: Sequence[SuiteQuestion], groups: dict[str, tuple[str, ...]]
) -> tuple[list[SuiteQuestion], dict[str, list[str]]]:
    """The questions both sides are graded on: those with gold quotes the asker may read (the peer has no access
    control, so a question whose gold the asker may not read has no peer answer to grade); and the rest by why."""
    kept: list[SuiteQuestion] = []
    left: dict[str, list[str]] = {"no_gold_quotes": [], "gold_not_readable_by_asker": []}
    for q in questions:
        if not q.quotes:
            left["no_gold_quotes"].append(q.qid)
        elif not gold_readable(q, groups):
            left["gold_not_readable_by_asker"].append(q.qid)
        else:
            kept.append(q)
    return kept, left


def budget_cut(token_counts: Sequence[int], budget: int) -> int:
    """How many leading documents (in fused order) fit in ``budget`` tokens: take them in order and stop at the
    first that would exceed it (never over the budget; a first document larger than it leaves none)."""
    total = 0
    for i, n in enumerate(token_counts):
        if total + n > budget:
            return i
        total += n
    return len(token_counts)


def grade_evidence(
    quotes: Sequence[str],
    texts: Sequence[str],
    bundles: Sequence[str | None] | None,
    covered: Callable[[str, list[str]], bool],
) -> dict[str, Any]:
    """One answer graded as ../shared/tools/grade_evidence.py grades it: every gold quote covered by the final
    evidence texts, how many quotes are, and whether the passage covering the first quote is in the first or
    last bundle (a passage without a bundle is its own)."""
    texts = list(texts)
    each = [bool(covered(q, texts)) for q in quotes]
    labels = [b if b is not None else f"#{i}" for i, b in enumerate(bundles or [None] * len(texts))]
    pos = [i for i, t in enumerate(texts) if quotes and covered(quotes[0], [t])]
    edge = bool(pos) and labels[pos[0]] in (labels[0], labels[-1])
    return {"all_gold": bool(quotes) and all(each), "quotes": sum(each), "of": len(quotes), "edge": edge}


def side_metrics(rows: Sequence[dict[str, Any]], sizes: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    """A system's figures over graded answers: ``rows`` from grade_evidence, ``sizes`` (passages, words, tokens)."""
    from evaluation.stats import wilson_interval

    k, n = sum(r["all_gold"] for r in rows), len(rows)
    low, high = wilson_interval(k, n)
    arr = np.asarray(sizes, dtype=float).reshape(-1, 3)
    mean = arr.mean(axis=0) if len(arr) else np.zeros(3)
    return {
        "all_gold": {
            "k": k,
            "n": n,
            "rate": round(k / n, 4) if n else None,
            "wilson95": [round(low, 4), round(high, 4)],
        },
        "quotes_covered": {"k": sum(r["quotes"] for r in rows), "n": sum(r["of"] for r in rows)},
        "best_gold_at_edge": {"k": sum(bool(r["edge"]) for r in rows), "n": n},
        "evidence_passages_mean": round(float(mean[0]), 2),
        "evidence_words_mean": round(float(mean[1]), 1),
        "evidence_tokens_mean": round(float(mean[2]), 1),
    }


def paired_all_gold(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Ours vs one peer configuration on the same questions: the all-gold ratio and the exact McNemar test."""
    from evaluation.stats import discordant_counts, mcnemar_exact

    a, b = [r["all_gold"] for r in ours], [r["all_gold"] for r in theirs]
    only_ours, only_theirs = discordant_counts(a, b)
    return {
        "ratio_all_gold_ours_over_theirs": round(sum(a) / sum(b), 3) if sum(b) else None,
        "only_ours": only_ours,
        "only_theirs": only_theirs,
        "mcnemar_exact_p": round(mcnemar_exact(only_ours, only_theirs), 4),
    }


def ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 3) if theirs else None


class UsersPeer:
    """Haystack 2.x as its users build it: its converters, DocumentCleaner, DocumentSplitter (200 words, 20
    overlap), SentenceTransformersDocumentEmbedder, InMemoryDocumentStore; per query BM25 top 40 + MiniLM top 40,
    DocumentJoiner(reciprocal_rank_fusion). ``ask`` returns the whole fused list in the joiner's order (its
    ``top_k=6`` is its first six), so the top-6 and token-budget configurations come from one run."""

    name = "haystack"

    def __init__(
        self, files: Sequence[Path], *, model_dir: Path, cache_dir: Path, top_n: int, log: Log = print
    ) -> None:
        from haystack import Pipeline
        from haystack.components.converters import PyPDFToDocument, TextFileToDocument
        from haystack.components.embedders import (
            SentenceTransformersDocumentEmbedder,
            SentenceTransformersTextEmbedder,
        )
        from haystack.components.joiners import DocumentJoiner
        from haystack.components.preprocessors import DocumentCleaner, DocumentSplitter
        from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
        from haystack.document_stores.in_memory import InMemoryDocumentStore
        from haystack.utils import ComponentDevice

        cpu = ComponentDevice.from_str("cpu")
        timings: dict[str, float] = {}
        started = time.perf_counter()
        pdfs = [f for f in files if f.suffix.lower() == ".pdf"]
        texts = [f for f in files if f.suffix.lower() in (".md", ".markdown", ".txt")]
        md = [f for f in texts if f.suffix.lower() != ".txt"]
        plain = [f for f in texts if f.suffix.lower() == ".txt"]
        converters: dict[str, str] = {}
        docs: list[Any] = []
        if pdfs:
            docs += PyPDFToDocument().run(sources=pdfs)["documents"]
            converters["pdf"] = f"PyPDFToDocument ({len(pdfs)} files)"
        if md:
            try:
                from haystack.components.converters import MarkdownToDocument

                docs += MarkdownToDocument(progress_bar=False).run(sources=md)["documents"]
                converters["markdown"] = f"MarkdownToDocument ({len(md)} files)"
            except ImportError:  # its optional mdit_plain is missing: what a user would fall back to
                docs += TextFileToDocument().run(sources=md)["documents"]
                converters["markdown"] = f"TextFileToDocument ({len(md)} files; mdit_plain not installed)"
        if plain:
            docs += TextFileToDocument().run(sources=plain)["documents"]
            converters["text"] = f"TextFileToDocument ({len(plain)} files)"
        timings["convert"] = time.perf_counter() - started
        t = time.perf_counter()
        docs = DocumentCleaner().run(documents=docs)["documents"]
        timings["clean"] = time.perf_counter() - t
        t = time.perf_counter()
        splitter = DocumentSplitter(split_by="word", split_length=SPLIT_WORDS, split_overlap=SPLIT_OVERLAP)
        if hasattr(splitter, "warm_up"):
            splitter.warm_up()
        docs = splitter.run(documents=docs)["documents"]
        timings["split"] = time.perf_counter() - t
        self.converters = converters
        self.files = len(files)

        # Embedding is the slow step: cached on disk by model and the split texts, so a re-run is cheap.
        t = time.perf_counter()
        digest = hashlib.sha256(f"users:{model_dir}".encode())
        for d in docs:
            digest.update((d.content or "").encode() + b"\x00")
        cached = cache_dir / f"haystack-users-{digest.hexdigest()[:16]}.npy"
        embedded = 0
        if cached.exists():
            vectors = np.load(cached)
            docs = [replace(d, embedding=v.tolist()) for d, v in zip(docs, vectors, strict=True)]
        else:
            log(f"haystack: embedding {len(docs)} split documents (SentenceTransformersDocumentEmbedder)")
            embedder = SentenceTransformersDocumentEmbedder(
                model=str(model_dir), device=cpu, progress_bar=False
            )
            embedder.warm_up()
            docs = embedder.run(documents=docs)["documents"]
            embedded = len(docs)
            cache_dir.mkdir(parents=True, exist_ok=True)
            np.save(cached, np.asarray([d.embedding for d in docs], dtype=np.float32))
        timings["embed"] = time.perf_counter() - t
        t = time.perf_counter()
        self.store = InMemoryDocumentStore()
        self.store.write_documents(docs)
        timings["write"] = time.perf_counter() - t
        self.indexing = {
            "seconds": round(time.perf_counter() - started, 2),
            "timings_s": {k: round(v, 2) for k, v in timings.items()},
            "embedded_this_run": embedded,
            "vectors_cache": str(cached),
            "documents": self.store.count_documents(),
        }

        pipe = Pipeline()
        pipe.add_component(
            "text_embedder",
            SentenceTransformersTextEmbedder(model=str(model_dir), device=cpu, progress_bar=False),
        )
        pipe.add_component("bm25", InMemoryBM25Retriever(self.store, top_k=top_n))
        pipe.add_component("dense", InMemoryEmbeddingRetriever(self.store, top_k=top_n))
        pipe.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion"))
        pipe.connect("text_embedder.embedding", "dense.query_embedding")
        pipe.connect("bm25", "joiner")
        pipe.connect("dense", "joiner")
        pipe.warm_up()
        self.pipeline = pipe

    def ask(self, question: str) -> Answer:
        started = time.perf_counter()
        out = self.pipeline.run({"text_embedder": {"text": question}, "bm25": {"query": question}})
        ms = (time.perf_counter() - started) * 1000
        fused = out["joiner"]["documents"]
        evidence = [(d.id, d.content or "") for d in fused]
        return Answer(docs_in_order([str(d.meta.get("file_path", "")) for d in fused]), evidence, ms, {})


def ours_data_dir(suite: str, work_dir: Path, cache_root: Path = SUITE_CACHE) -> Path:
    """``cache_root/<suite>`` when it already holds an index (the suite runner's), else ``work_dir/ours/<suite>``."""
    from rag.stores.index import current_generation

    shared_dir = cache_root / suite
    return shared_dir if current_generation(shared_dir) else work_dir / "ours" / suite


def users_side_by_side(
    ours: Ours,
    peer: UsersPeer,
    questions: Sequence[SuiteQuestion],
    *,
    peer_threads: Sequence[int | None],
    log: Log,
) -> tuple[list[Answer], list[Answer], dict[str, list[float]]]:
    """Each question through ours (as its asker, on its date) and the peer (once per thread setting), who goes
    first rotating per question; the peer's answers are the same whatever its threads (the first setting's kept)."""

    def peer_with(n: int | None) -> Callable[[SuiteQuestion], Answer]:
        def ask(q: SuiteQuestion) -> Answer:
            with torch_threads(n):
                return peer.ask(q.text)

        return ask

    def ours_ask(q: SuiteQuestion) -> Answer:
        return ours.ask(q.text, user=q.user, groups=q.groups, as_of=q.as_of)

    runs: list[tuple[str, Callable[[SuiteQuestion], Answer]]] = [("ours", ours_ask)]
    runs += [(peer_label(n), peer_with(n)) for n in peer_threads]
    warm = SuiteQuestion("warm-up", "single", "What is this about?", (), ())
    return rotate(runs, questions, warm, peer_label(peer_threads[0]), log=log, every=10)


def _sizes(texts: Sequence[str]) -> tuple[int, int, int]:
    from rag.text import count_tokens

    return len(texts), sum(len(t.split()) for t in texts), sum(count_tokens(t) for t in texts)


def run_users_suite(
    suite: PolicySuite,
    split: str,
    work_dir: Path,
    grader: ModuleType,
    *,
    peer_threads: Sequence[int | None] = (None, 1),
    cache_root: Path = SUITE_CACHE,
    log: Log = print,
) -> dict[str, Any]:
    """One policy suite, ours and the peer side by side: quality at top 6, at our settings' evidence token budget
    and at ours' mean evidence tokens in this run; latency per query from the same loop."""
    from ingest.sources import discover
    from rag.config import default_settings
    from rag.models.embedder import resolve_model_dir

    s = default_settings()
    rows = [json.loads(line) for line in suite.questions.read_text().splitlines() if line.strip()]
    in_split = select_split([suite_question(r) for r in rows], suite.name, split)
    questions, excluded = graded_questions(in_split, sidecar_groups(suite.corpus))
    data_dir = ours_data_dir(suite.name, work_dir, cache_root)
    ours_indexing = ingest_ours([str(p) for p in suite.corpus], data_dir, log)
    ours = Ours(data_dir, use_llm=False)
    files = discover([str(p) for p in suite.corpus])
    peer = UsersPeer(
        files,
        model_dir=resolve_model_dir(s.embedding_model),
        cache_dir=work_dir / "haystack-cache",
        top_n=s.lexical_top_n,
        log=log,
    )
    log(
        f"{suite.name} ({split}): {len(questions)} graded of {len(in_split)} questions; ours "
        f"{len(ours.chunks())} chunks, haystack {peer.indexing['documents']} documents"
    )
    mine, theirs, ms = users_side_by_side(ours, peer, questions, peer_threads=peer_threads, log=log)

    ours_rows, ours_sizes = [], []
    for q, a in zip(questions, mine, strict=True):
        ev = sorted(a.record.get("evidence", []), key=lambda e: e.get("n", 0))
        texts = [e.get("text", "") for e in ev]
        ours_rows.append(grade_evidence(q.quotes, texts, [e.get("bundle") for e in ev], grader.covered))
        ours_sizes.append(_sizes(texts))
    ours_tokens = float(np.mean([t for _, _, t in ours_sizes])) if ours_sizes else 0.0
    configs: dict[str, dict[str, Any]] = {
        "haystack_top6": {"cut": f"the joiner's top {PEER_TOP_K}", "budget_tokens": None},
        "haystack_budget": {
            "cut": "fused order until our settings' evidence_token_budget",
            "budget_tokens": s.evidence_token_budget,
        },
        "haystack_ours_mean": {
            "cut": "fused order until ours' mean evidence tokens in this run",
            "budget_tokens": int(round(ours_tokens)),
        },
    }
    systems: dict[str, Any] = {"ours": side_metrics(ours_rows, ours_sizes)}
    per_question = [
        {"id": q.qid, "type": q.type, "ours": {k: r[k] for k in ("all_gold", "quotes", "edge")}}
        for q, r in zip(questions, ours_rows, strict=True)
    ]
    from rag.text import count_tokens

    for name, cfg in configs.items():
        cfg_rows, cfg_sizes = [], []
        for q, a, pq in zip(questions, theirs, per_question, strict=True):
            texts = [t for _, t in a.evidence]
            budget = cfg["budget_tokens"]
            keep = PEER_TOP_K if budget is None else budget_cut([count_tokens(t) for t in texts], budget)
            texts = texts[:keep]
            row = grade_evidence(q.quotes, texts, None, grader.covered)
            cfg_rows.append(row)
            cfg_sizes.append(_sizes(texts))
            pq[name] = {k: row[k] for k in ("all_gold", "quotes", "edge")}
        systems[name] = {**cfg, **side_metrics(cfg_rows, cfg_sizes), **paired_all_gold(ours_rows, cfg_rows)}

    table = {label: latency(v) for label, v in ms.items()}
    peers = [label for label in table if label != "ours"]
    best = min(peers, key=lambda label: table[label]["p50"])
    through = through_evidence(mine)
    return {
        "split": split,
        "questions_in_split": len(in_split),
        "graded": len(questions),
        "excluded": excluded,
        "corpus": [str(p) for p in suite.corpus],
        "ours": {
            "data_dir": str(data_dir),
            "chunks": len(ours.chunks()),
            "reranker": ours.reranker,
            "indexing": ours_indexing,
        },
        "haystack": {"converters": peer.converters, "files": peer.files, "indexing": peer.indexing},
        "systems": systems,
        "latency_ms": {
            "ours": table["ours"],
            "ours_through_evidence": through,
            "haystack": table[best],
            "haystack_setting": best,
            "haystack_all_settings": {label: table[label] for label in peers},
            "ratio_ours_over_theirs": {p: ratio(table["ours"][p], table[best][p]) for p in ("p50", "p95")},
            "ratio_through_evidence_over_theirs": {
                p: ratio(through[p], table[best][p]) for p in ("p50", "p95")
            },
            "ours_stages_ms": stage_latencies(mine),
        },
        "per_question": per_question,
    }


def git_commit(repo: Path = REPO) -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def run_users(
    *,
    work_dir: Path,
    suites: Sequence[str],
    split: str = "test",
    grader: Path = GRADER,
    shared: Path = SHARED,
    cache_root: Path = SUITE_CACHE,
    peer_threads: Sequence[int | None] = (None, 1),
    known: dict[str, PolicySuite] | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Every chosen policy suite, ours and the peer as its users run it (the JSON shape: module docstring)."""
    from rag.config import default_settings

    version = require_haystack()
    known = known if known is not None else policy_suites(shared)
    missing = [n for n in suites if n not in known]
    if missing:
        raise SystemExit(f"Unknown suite {', '.join(missing)}; known: {', '.join(known)}.")
    absent = [str(p) for n in suites for p in (known[n].questions, *known[n].corpus) if not p.exists()]
    if absent:
        raise SystemExit(f"Suite files are missing: {', '.join(absent)} (is ../shared present?).")
    started = time.perf_counter()
    s = default_settings()
    result: dict[str, Any] = {
        "mode": "users",
        "date": date.today().isoformat(),
        "commit": git_commit(),
        "haystack": version,
        "machine": machine(),
        "load_average_at_start": load_average(),
        "split": split,
        "settings": {
            "evidence_k": s.evidence_k,
            "evidence_token_budget": s.evidence_token_budget,
            "lexical_top_n": s.lexical_top_n,
            "dense_top_n": s.dense_top_n,
            "tokens_counted_with": "rag.text.count_tokens (the embedding model's word pieces), both sides",
        },
        "peer_pipeline": (
            f"converters -> DocumentCleaner() -> DocumentSplitter(split_by='word', split_length={SPLIT_WORDS}, "
            f"split_overlap={SPLIT_OVERLAP}) -> SentenceTransformersDocumentEmbedder -> InMemoryDocumentStore; "
            f"query: InMemoryBM25Retriever(top_k={s.lexical_top_n}) + SentenceTransformersTextEmbedder -> "
            f"InMemoryEmbeddingRetriever(top_k={s.dense_top_n}) -> DocumentJoiner(join_mode='reciprocal_rank_fusion')"
        ),
        "suites": {},
    }
    work_dir.mkdir(parents=True, exist_ok=True)
    covered = load_grader(grader)
    for name in suites:
        result["suites"][name] = run_users_suite(
            known[name], split, work_dir, covered, peer_threads=peer_threads, cache_root=cache_root, log=log
        )
    result["load_average_at_end"] = load_average()
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _rate(m: dict[str, Any]) -> str:
    a = m["all_gold"]
    lo, hi = a["wilson95"]
    return f"{a['k']}/{a['n']} = {a['rate'] or 0:.2f} [{lo:.2f}, {hi:.2f}]"


def users_table(result: dict[str, Any]) -> str:
    lines = [
        f"Ours vs Haystack {result['haystack']} as its users run it, {result['date']}, commit {result['commit']}, "
        f"split {result['split']}, {result['machine']['cpus']} CPUs, load {result['load_average_at_start'][0]} -> "
        f"{result['load_average_at_end'][0]}"
    ]
    cols = [
        ("ours", "ours"),
        ("haystack_top6", "hs top 6"),
        ("haystack_budget", "hs @budget"),
        ("haystack_ours_mean", "hs @ours' mean"),
    ]
    for name, r in result["suites"].items():
        sy, lat = r["systems"], r["latency_ms"]
        ex = ", ".join(f"{k} {len(v)}" for k, v in r["excluded"].items() if v) or "none"
        lines += [
            "",
            f"{name} ({r['split']}): {r['graded']} graded of {r['questions_in_split']} (not graded: {ex}); "
            f"ours {r['ours']['chunks']} chunks ({r['ours']['reranker']}), haystack "
            f"{r['haystack']['indexing']['documents']} documents ({'; '.join(r['haystack']['converters'].values())})",
            f"  budgets: @budget = {sy['haystack_budget']['budget_tokens']} tokens (our settings), "
            f"@ours' mean = {sy['haystack_ours_mean']['budget_tokens']} tokens (measured in this run)",
            f"{'':<26}" + "".join(f"{label:>28}" for _, label in cols),
        ]
        lines.append(f"{'all gold [Wilson 95%]':<26}" + "".join(f"{_rate(sy[k]):>28}" for k, _ in cols))
        lines.append(
            f"{'  ratio ours/theirs (p)':<26}{'':>28}"
            + "".join(
                f"{str(sy[k]['ratio_all_gold_ours_over_theirs']) + ' (p=' + str(sy[k]['mcnemar_exact_p']) + ')':>28}"
                for k, _ in cols[1:]
            )
        )
        for key, title in (("quotes_covered", "quotes covered"), ("best_gold_at_edge", "best gold at edge")):
            lines.append(
                f"{title:<26}"
                + "".join(f"{str(sy[k][key]['k']) + '/' + str(sy[k][key]['n']):>28}" for k, _ in cols)
            )
        lines.append(
            f"{'evidence words / tokens':<26}"
            + "".join(
                f"{sy[k]['evidence_words_mean']:>18.0f} / {sy[k]['evidence_tokens_mean']:>5.0f}"
                for k, _ in cols
            )
        )
        lines.append(
            f"{'passages per answer':<26}"
            + "".join(f"{sy[k]['evidence_passages_mean']:>24.1f}" for k, _ in cols)
        )
        o, h, rt = lat["ours"], lat["haystack"], lat["ratio_ours_over_theirs"]
        te, rte = lat["ours_through_evidence"], lat["ratio_through_evidence_over_theirs"]
        lines.append(
            f"latency ms p50 / p95: ours {o['p50']:.1f} / {o['p95']:.1f}, haystack ({lat['haystack_setting']}) "
            f"{h['p50']:.1f} / {h['p95']:.1f}; ours/theirs {rt['p50']} / {rt['p95']}"
        )
        lines.append(
            f"  ours up to its evidence {te['p50']:.1f} / {te['p95']:.1f} ms ({rte['p50']} / {rte['p95']}); "
            + ", ".join(
                f"{k} {v['p50']:.1f} / {v['p95']:.1f}" for k, v in lat["haystack_all_settings"].items()
            )
        )
        top = sorted(lat["ours_stages_ms"].items(), key=lambda kv: -kv[1]["p50"])[:6]
        lines.append("  our slowest stages (p50 ms): " + ", ".join(f"{k} {v['p50']:.1f}" for k, v in top))
    lines.append(f"\n{result['seconds']:.0f} s in all")
    return "\n".join(lines)
