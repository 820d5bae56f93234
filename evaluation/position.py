"""Position-sensitivity sweeps: freeze retrieval, then vary only where the gold passage sits.

Each question gets one frozen ``EvidenceSet`` (its gold passage(s) and an ordered list of distractors). For a
context length L the variants of that question share the same L - g distractors in the same order; only the gold
moves (``place``). Cells are (length, variant) pairs: depths 0/25/50/75/100% or explicit positions, each packing
strategy of ``rag.stages.pack.edge_pack`` applied to the question's ranked evidence, spacing variants for
multi-source questions, and a control with the gold removed. Each cell reports accuracy with a Wilson interval,
and paired tests say which differences are more than noise.

The UI's Evaluation page uses ``run_sweep(config)``, ``rag.traces.sweeps.load_sweep(dir)`` and ``rag.traces.sweeps.sweep_figure``.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from datetime import date
from pathlib import Path
from typing import Any

from evaluation.datasets import (
    EvalQuestion,
    EvidenceSet,
    Passage,
    Variant,
    default_questions_path,
    detect_format,
    kv_sets,
    load_frozen,
    load_paper_kv,
    load_paper_qa,
    load_questions,
    paper_qa_sets,
    save_frozen,
)
from evaluation.generators import (
    DEFAULT_CURVE,
    EmbeddingScorer,
    Generator,
    Output,
    Trial,
    lexical_scores,
    make_generator,
)
from evaluation.graders import (
    GRADERS,
    covered,
    grade,
    grade_all_of,
    is_abstention,
    may_cover,
    normalised_match,
)
from evaluation.stats import PAIRED_TESTS, compare_paired, wilson_interval
from rag.errors import ConfigurationError, RagError
from rag.stages.pack import SINGLE_PASSAGE_STRATEGIES, STRATEGIES, edge_pack
from rag.text import count_tokens
from rag.traces.sweeps import Cell, Comparison, SweepResult
from rag.types import Bundle, Candidate, Chunk, Evidence, Prompt

PROMPT_STYLES = ("rag", "paper")
DISTRACTOR_SOURCES = ("retrieved", "pool")
SPACINGS = ("adjacent", "split", "separated")
_KIND_ORDER = {"depth": 0, "position": 0, "strategy": 1, "spacing": 2, "control": 3}


# ------------------------------------------------------------------------------------------------ configuration
@dataclass
class SweepConfig:
    """Everything a sweep depends on; ``to_json`` is stored next to the results."""

    questions: Path | None = None  # our JSONL, a paper file (.jsonl.gz), or a frozen file; None = the sample
    frozen: Path | None = None
    freeze_out: Path | None = None
    data_dir: Path | None = None
    format: str = "auto"
    distractors: str = "retrieved"  # "retrieved" (the question's own candidates) or "pool" (random chunks)
    retrieval: str = "pipeline"  # "pipeline" (Pipeline.ask candidates) or "lexical" (BM25 only, no models)
    limit: int | None = None
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    positions: tuple[int, ...] = ()  # 1-based; when given, replaces depths
    lengths: tuple[str, ...] = ("10", "20", "30")  # passages, or "<n>t" tokens of passage text
    strategies: tuple[str, ...] = SINGLE_PASSAGE_STRATEGIES
    control: bool = True
    spacing: bool = True
    repeats: int = 1
    seed: int = 0
    generator: str = "simulated"
    curve: str = DEFAULT_CURVE
    scorer: str = "auto"  # extractive sentence scorer: auto (pipeline, else embedding, else lexical) | embedding | lexical
    abstain_rate: float = 0.8
    grader: str = "normalised"
    prompt: str = "rag"
    temperature: float = 0.0
    max_tokens: int | None = None
    price_prompt: float = 0.0  # currency per 1M prompt tokens
    price_completion: float = 0.0  # currency per 1M completion tokens
    test: str = "mcnemar"
    alpha: float = 0.05
    power: float = 0.8
    confidence: float = 0.95
    workers: int = 1

    def validate(self) -> SweepConfig:
        def bad(msg: str, hint: str | None = None) -> ConfigurationError:
            return ConfigurationError(msg, hint=hint)

        if self.repeats < 1:
            raise bad("--repeats must be at least 1.")
        if not self.lengths:
            raise bad("Give at least one context length.", hint="--lengths 10,20,30")
        for length in self.lengths:
            parse_length(length)
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise bad("Depths must lie between 0 and 100%.")
        if any(p < 1 for p in self.positions):
            raise bad("Positions are 1-based.")
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown:
            raise bad(f"Unknown packing strategy {unknown[0]!r}.", hint=f"Use {', '.join(STRATEGIES)}.")
        for value, allowed, name in (
            (self.grader, GRADERS, "grader"),
            (self.prompt, PROMPT_STYLES, "prompt"),
            (self.test, PAIRED_TESTS, "test"),
            (self.distractors, DISTRACTOR_SOURCES, "distractors"),
            (self.retrieval, ("pipeline", "lexical"), "retrieval"),
            (self.scorer, ("auto", "embedding", "lexical"), "scorer"),
        ):
            if value not in allowed:
                raise bad(f"Unknown {name} {value!r}.", hint=f"Use one of {', '.join(allowed)}.")
        if not 0 < self.alpha < 1 or not 0 < self.confidence < 1:
            raise bad("--alpha and the confidence level must lie between 0 and 1.")
        return self

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = (
                str(value)
                if isinstance(value, Path)
                else (list(value) if isinstance(value, tuple) else value)
            )
        return out


def parse_depths(text: str) -> tuple[float, ...]:
    """'0,25,50,75,100' (percent) or '0,0.5,1' (fractions; used when every value is <= 1)."""
    try:
        values = [float(x) for x in text.replace("%", "").split(",") if x.strip()]
    except ValueError:
        raise ConfigurationError(f"Bad depths {text!r}.", hint="e.g. --depths 0,25,50,75,100") from None
    if any(v > 1 for v in values):
        values = [v / 100 for v in values]
    return tuple(values)


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigurationError(f"Bad {what} {text!r}: expected comma-separated integers.") from None


def parse_length(label: str) -> tuple[str, int]:
    """('passages', n) for '20'; ('tokens', n) for '2000t' or '4k' (passage text tokens)."""
    s = str(label).strip().lower()
    try:
        if s.endswith("k"):
            return "tokens", int(float(s[:-1]) * 1000)
        if s.endswith("t"):
            return "tokens", int(s[:-1])
        n = int(s)
    except ValueError:
        raise ConfigurationError(
            f"Bad context length {label!r}.", hint="Passages (20) or tokens (2000t, 4k)."
        ) from None
    if n < 1:
        raise ConfigurationError(f"Context length must be positive, got {label!r}.")
    return "passages", n


def normalise_length(label: str) -> str:
    unit, n = parse_length(label)
    return str(n) if unit == "passages" else f"{n}t"


# ------------------------------------------------------------------------------------------------ variants
def place(
    distractors: Sequence[Passage], gold: Sequence[Passage], positions: Sequence[int]
) -> tuple[Passage, ...]:
    """Put each gold passage at its 0-based final position; distractors fill the rest *in their given order*.

    This is the one way variants are built, so two variants of a question differ only in where the gold is."""
    total = len(distractors) + len(gold)
    if len(positions) != len(gold) or len(set(positions)) != len(positions):
        raise ValueError("need one distinct position per gold passage")
    if any(not 0 <= p < total for p in positions):
        raise ValueError(f"gold positions {list(positions)} outside 0..{total - 1}")
    slots: list[Passage | None] = [None] * total
    for pos, g in zip(positions, gold, strict=True):
        slots[pos] = g
    rest = iter(distractors)
    return tuple(s if s is not None else next(rest) for s in slots)


def depth_to_start(depth: float, slots: int) -> int:
    """Block start for a depth in [0, 1] over ``slots`` possible starts (round half up: 50% of 20 -> 10)."""
    return int(math.floor(depth * (slots - 1) + 0.5)) if slots > 1 else 0


def spacing_positions(spacing: str, n_gold: int, total: int) -> list[int]:
    if spacing == "adjacent":
        return list(range(n_gold))
    if spacing == "split":  # the first gold at the front, the others at the back
        return [0, *range(total - n_gold + 1, total)]
    if spacing == "separated":  # evenly spread through the middle, distractors between them
        pos = [round((i + 1) * (total - 1) / (n_gold + 1)) for i in range(n_gold)]
        if len(set(pos)) == n_gold:
            return pos
        return list(range(1, 2 * n_gold, 2))
    raise ValueError(f"unknown spacing {spacing!r}")


_token_cache: dict[str, int] = {}


def passage_tokens(p: Passage) -> int:
    if p.n_tokens:
        return p.n_tokens
    if p.text not in _token_cache:
        _token_cache[p.text] = count_tokens(p.text)
    return _token_cache[p.text]


def distractors_for(es: EvidenceSet, length: str) -> tuple[Passage, ...] | None:
    """The first distractors (frozen order) that make the context ``length`` long; None when too few exist."""
    unit, n = parse_length(length)
    if unit == "passages":
        need = n - len(es.gold)
        return es.distractors[:need] if 0 <= need <= len(es.distractors) else None
    total = sum(passage_tokens(g) for g in es.gold)
    for m, d in enumerate(es.distractors):
        if total >= n:
            return es.distractors[:m]
        total += passage_tokens(d)
    return es.distractors if total >= n else None


def _ranked(passages: Iterable[Passage]) -> list[Passage]:
    big = 10**9
    return sorted(passages, key=lambda p: p.rank if p.rank is not None else big)


def _passage_chunk(p: Passage) -> Chunk:
    return Chunk(
        chunk_id=p.pid,
        doc_id=p.doc_id or p.pid,
        text=p.text,
        source=p.source,
        title=p.title or "Document",
        section=p.section,
        page=p.page,
        page_end=p.page,
        ordinal=p.ordinal,
        groups=("*",),
        n_tokens=p.n_tokens or 0,
    )


def _candidate(p: Passage) -> Candidate:
    return Candidate(_passage_chunk(p), rerank_score=p.score, rerank_rank=p.rank)


def pack_by_strategy(ranked: Sequence[Passage], strategy: str) -> tuple[Passage, ...]:
    """Where ``edge_pack`` puts each passage of a ranked list (each passage its own bundle)."""
    by_id = {}
    bundles = []
    for i, p in enumerate(ranked):
        by_id[i] = p
        bundles.append(Bundle(i, (_candidate(p),), "single", -float(i)))
    return tuple(by_id[b.bundle_id] for b in edge_pack(bundles, strategy))


def build_variants(es: EvidenceSet, length: str, config: SweepConfig) -> list[Variant]:
    """Every variant of one question at one context length (empty when there are too few distractors)."""
    distractors = distractors_for(es, length)
    if distractors is None or not es.gold:
        return []
    g = len(es.gold)
    total = len(distractors) + g
    out: list[Variant] = []

    def add(
        kind: str, label: str, strategy: str, passages: tuple[Passage, ...], depth: float | None = None
    ) -> None:
        out.append(Variant(es.qid, kind, label, length, strategy, depth, passages))

    if config.positions:
        for p in config.positions:
            if p - 1 <= total - g:
                add(
                    "position", f"position {p}", "fixed", place(distractors, es.gold, range(p - 1, p - 1 + g))
                )
    else:
        for d in config.depths:
            start = depth_to_start(d, total - g + 1)
            add("depth", f"depth {d:.0%}", "fixed", place(distractors, es.gold, range(start, start + g)), d)
    ranked = _ranked([*es.gold, *distractors])
    for strategy in config.strategies:
        add("strategy", strategy, strategy, pack_by_strategy(ranked, strategy))
    if config.spacing and g >= 2 and total >= 2 * g + 1:
        for spacing in SPACINGS:
            add(
                "spacing",
                spacing,
                f"spacing:{spacing}",
                place(distractors, es.gold, spacing_positions(spacing, g, total)),
            )
    if config.control:
        add("control", "control", "control", tuple(distractors))
    return out


# ------------------------------------------------------------------------------------------------ prompts
PAPER_QA_INSTRUCTION = (
    "Write a high-quality answer for the given question using only the provided search results "
    "(some of which might be irrelevant)."
)
PAPER_KV_INSTRUCTION = "Extract the value corresponding to the specified key in the JSON object below."


def variant_evidence(variant: Variant) -> tuple[Evidence, ...]:
    return tuple(Evidence(n, _candidate(p), n) for n, p in enumerate(variant.passages, start=1))


def render(es: EvidenceSet, variant: Variant, style: str = "rag") -> tuple[Prompt, tuple[Evidence, ...]]:
    """The prompt the model sees for a variant. ``rag``: the production layout (``build_prompt``), numbered
    passages with citation instructions. ``paper``: Liu et al.'s templates (no citations asked for)."""
    evidence = variant_evidence(variant)
    emap = tuple((e.n, e.candidate.chunk_id) for e in evidence)
    if es.kind == "kv":
        rows = [f'"{p.title}": "{p.text}"' for p in variant.passages]
        body = "{" + ",\n ".join(rows) + "}"
        user = f'{PAPER_KV_INSTRUCTION}\n\nJSON data:\n{body}\n\nKey: "{es.question}"\nCorresponding value:'
        return Prompt("", user, emap, count_tokens(user)), evidence
    if style == "paper":
        docs = "\n".join(
            f"Document [{e.n}](Title: {p.title}) {p.text}"
            for e, p in zip(evidence, variant.passages, strict=True)
        )
        user = f"{PAPER_QA_INSTRUCTION}\n\n{docs}\n\nQuestion: {es.question}\nAnswer:"
        return Prompt("", user, emap, count_tokens(user)), evidence
    from rag.stages.prompt import build_prompt

    return build_prompt(es.question, evidence), evidence


# ------------------------------------------------------------------------------------------------ freezing
def freeze_from_index(
    questions: Sequence[EvalQuestion],
    settings: Any,
    *,
    distractors: str = "retrieved",
    retrieval: str = "pipeline",
    min_distractors: int = 29,
    min_tokens: int = 0,
    seed: int = 0,
    pipeline: Any = None,
    reader: Any = None,
    warn: Callable[[str], None] = lambda _m: None,
) -> list[EvidenceSet]:
    """One evidence set per answerable question: the chunks covering its gold quotes (or its gold chunk ids),
    plus distractors in a fixed order. ``retrieved`` distractors are the question's own candidates (as the
    query path ranks them), topped up from random index chunks when there are too few; ``pool`` takes random
    chunks only. A distractor never contains a gold answer or covers a gold quote: the control must lack it."""
    from rag.types import Principal, SearchFilter

    if reader is None:
        if pipeline is not None:
            reader = pipeline.reader
        else:
            from rag.stores.qdrant_server import open_index_reader

            reader = open_index_reader(settings)
    if pipeline is None and retrieval == "pipeline" and distractors == "retrieved":
        try:
            from rag.factory import build_pipeline

            pipeline = build_pipeline(settings, reader=reader)
        except (ImportError, RagError) as exc:
            warn(f"Pipeline unavailable ({exc}); ranking candidates with BM25 only.")
    all_chunks: list[Chunk] = list(reader.generation.chunks)
    out: list[EvidenceSet] = []
    for q in questions:
        if q.expects_abstention or not (q.quotes or q.chunk_ids):
            continue
        principal = Principal(q.user or "eval", frozenset(q.groups))
        as_of = date.fromisoformat(q.as_of) if q.as_of else date.today()
        filt = SearchFilter(principal, as_of, frozenset(q.tags))
        ranked = (
            _candidates(q, filt, reader, pipeline if distractors == "retrieved" else None)
            if distractors == "retrieved"
            else []
        )
        gold, missing = _gold_chunks(q, ranked, all_chunks, filt, reader)
        if missing:
            warn(
                f"{q.id}: {len(missing)} gold quote(s) not found in any chunk {user_hint(q)}: {missing[0][:60]!r}"
            )
        if not gold:
            continue
        gold_ids = {c.chunk_id for c, _ in gold}
        answers = q.answers or tuple(a for grp in q.all_of for a in grp)

        def answers_it(
            c: Chunk,
            gold_ids: set[str] = gold_ids,
            answers: tuple[str, ...] = answers,
            quotes: tuple[str, ...] = q.quotes,
        ) -> bool:
            return _answers_question(c, gold_ids, answers, quotes)

        rank_of = {c.chunk_id: i + 1 for i, (c, _) in enumerate(ranked)}
        chosen: list[Passage] = []
        for c, score in ranked:
            if not answers_it(c):
                chosen.append(_passage(c, False, rank_of[c.chunk_id], score, "retrieved"))
        tokens = sum(passage_tokens(p) for p in chosen)
        if len(chosen) < min_distractors or tokens < min_tokens:
            rng = random.Random(f"{seed}:{q.id}")
            pool = [c for c in all_chunks if filt.allows(c) and c.chunk_id not in rank_of]
            rng.shuffle(pool)
            for c in pool:
                if len(chosen) >= min_distractors and tokens >= min_tokens:
                    break
                if answers_it(c):
                    continue
                p = _passage(c, False, len(ranked) + len(chosen) + 1, None, "pool")
                chosen.append(p)
                tokens += passage_tokens(p)
        gold_passages = tuple(
            _passage(
                c,
                True,
                rank_of.get(c.chunk_id, len(ranked) + len(chosen) + 1),
                score,
                "retrieved" if c.chunk_id in rank_of else "index",
            )
            for c, score in gold
        )
        out.append(
            EvidenceSet(
                qid=q.id,
                question=q.question,
                answers=answers,
                gold=gold_passages,
                distractors=tuple(chosen),
                type=q.type,
                all_of=q.all_of,
                must_not_contain=q.must_not_contain,
                wrong_answers=tuple(q.must_not_contain),
                quotes=tuple(q.quotes) if not answers else (),
                notes={
                    "user": principal.user,
                    "groups": sorted(principal.groups),
                    "gold_retrieved": [c.chunk_id in rank_of for c, _ in gold],
                },
            )
        )
    return out


def _answers_question(c: Chunk, gold_ids: set[str], answers: Sequence[str], quotes: Sequence[str]) -> bool:
    """A chunk that could answer the question cannot be a distractor."""
    if c.chunk_id in gold_ids:
        return True
    if answers and normalised_match(c.text, answers):
        return True
    return any(may_cover(quote, c.text) and covered(quote, [c.text]) for quote in quotes)


def user_hint(q: EvalQuestion) -> str:
    return f"visible to {q.user or 'eval'}"


def _candidates(q: EvalQuestion, filt: Any, reader: Any, pipeline: Any) -> list[tuple[Chunk, float | None]]:
    if pipeline is not None:
        from rag.pipeline import PipelineOptions, Question

        result = pipeline.ask(
            Question(q.question, filt.principal, filt.as_of, filt.tags), PipelineOptions(use_llm=False)
        )
        return [
            (c.chunk, c.rerank_score if c.rerank_score is not None else c.fused_score)
            for c in result.candidates
        ]
    from rag.text import bm25_tokens

    hits = reader.lexical.search(bm25_tokens(q.question), filt, 80)
    out: list[tuple[Chunk, float | None]] = []
    for cid, score in hits:
        chunk = reader.get(cid)
        if chunk is not None and filt.allows(chunk):
            out.append((chunk, float(score)))
    return out


def _gold_chunks(
    q: EvalQuestion,
    ranked: Sequence[tuple[Chunk, float | None]],
    all_chunks: Sequence[Chunk],
    filt: Any,
    reader: Any,
) -> tuple[list[tuple[Chunk, float | None]], list[str]]:
    """Chunks holding the gold evidence, in the order the quotes are listed (one chunk per quote, deduplicated):
    the best-ranked candidate covering a quote, else any chunk the asker may read that covers it."""
    found: list[tuple[Chunk, float | None]] = []
    missing: list[str] = []
    seen: set[str] = set()
    for cid in q.chunk_ids:
        chunk = reader.get(cid)
        if chunk is None:
            missing.append(cid)
        elif cid not in seen:
            seen.add(cid)
            found.append((chunk, None))
    visible = None
    for quote in q.quotes:
        hit = next(((c, s) for c, s in ranked if may_cover(quote, c.text) and covered(quote, [c.text])), None)
        if hit is None:
            if visible is None:
                visible = [c for c in all_chunks if filt.allows(c)]
            chunk = next((c for c in visible if may_cover(quote, c.text) and covered(quote, [c.text])), None)
            hit = (chunk, None) if chunk is not None else None
        if hit is None:
            missing.append(quote)
        elif hit[0].chunk_id not in seen:
            seen.add(hit[0].chunk_id)
            found.append(hit)
    return found, missing


def _passage(c: Chunk, gold: bool, rank: int | None, score: float | None, origin: str) -> Passage:
    return Passage(
        pid=c.chunk_id,
        text=c.text,
        title=c.title,
        gold=gold,
        source=c.source,
        doc_id=c.doc_id,
        ordinal=c.ordinal,
        section=c.section,
        page=c.page,
        rank=rank,
        score=None if score is None else float(score),
        origin=origin,
        n_tokens=c.n_tokens or None,
    )


# ------------------------------------------------------------------------------------------------ the sweep
def load_evidence_sets(
    config: SweepConfig,
    *,
    settings: Any = None,
    pipeline: Any = None,
    warn: Callable[[str], None] = lambda _m: None,
) -> tuple[list[EvidenceSet], dict[str, Any]]:
    """The frozen evidence for a sweep: a frozen file, a paper-format file, or our questions frozen against
    the index (saved to ``config.freeze_out`` when given)."""
    lengths = [parse_length(x) for x in config.lengths]
    max_passages = max([n for u, n in lengths if u == "passages"], default=0)
    max_tokens = max([n for u, n in lengths if u == "tokens"], default=0)
    path = config.frozen or config.questions
    fmt = config.format
    if config.frozen is not None:
        fmt = "frozen"
    if path is None:
        path = default_questions_path()
    if fmt == "auto":
        fmt = detect_format(Path(path))
    source: dict[str, Any] = {"path": str(path), "format": fmt}
    if fmt == "frozen":
        sets, stored = load_frozen(Path(path))
        source.update(stored)
        sets = sets[: config.limit] if config.limit else sets
    elif fmt == "paper-qa":
        sets = paper_qa_sets(
            load_paper_qa(Path(path)),
            n_distractors=max(max_passages - 1, 29),
            seed=config.seed,
            limit=config.limit,
        )
    elif fmt == "paper-kv":
        sets = kv_sets(load_paper_kv(Path(path), config.limit))
    elif fmt == "ours":
        if settings is None:
            from rag.config import load_settings

            settings = load_settings(data_dir=config.data_dir)
        questions = [q for q in load_questions(Path(path)) if not q.expects_abstention]
        if config.limit:
            questions = questions[: config.limit]
        sets = freeze_from_index(
            questions,
            settings,
            distractors=config.distractors,
            retrieval=config.retrieval,
            min_distractors=max(max_passages, 30),
            min_tokens=max_tokens,
            seed=config.seed,
            pipeline=pipeline,
            warn=warn,
        )
        source.update(
            data_dir=str(settings.data_dir), distractors=config.distractors, retrieval=config.retrieval
        )
    else:
        raise ConfigurationError(
            f"Unknown input format {fmt!r}.", hint="Use ours, paper-qa, paper-kv or frozen."
        )
    if config.freeze_out is not None:
        save_frozen(sets, Path(config.freeze_out), source)
    return sets, source


def run_sweep(
    config: SweepConfig,
    *,
    sets: Sequence[EvidenceSet] | None = None,
    generator: Generator | None = None,
    settings: Any = None,
    pipeline: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Run a whole sweep: load or freeze evidence, build variants, generate ``repeats`` times per variant, grade,
    aggregate per cell with Wilson intervals, and compare variants pairwise on the same (question, repeat)."""
    config.validate()
    warnings: list[str] = []
    config.lengths = tuple(normalise_length(x) for x in config.lengths)
    if sets is None:
        sets, _source = load_evidence_sets(config, settings=settings, pipeline=pipeline, warn=warnings.append)
    elif config.freeze_out is not None:
        save_frozen(sets, Path(config.freeze_out), {"path": "(in memory)"})
    dupes = sorted(qid for qid, count in Counter(es.qid for es in sets).items() if count > 1)
    if dupes:
        raise ConfigurationError(f"Question ids must be unique; repeated: {', '.join(dupes[:5])}.")
    if not sets:
        raise ConfigurationError(
            "No question has gold evidence to place.",
            hint="Check that the index holds the documents the questions quote (rag ingest) and --limit.",
        )
    if generator is None and config.generator == "extractive" and any(es.kind != "qa" for es in sets):
        raise ConfigurationError(
            "The extractive generator answers passage questions, not key-value lookups.",
            hint="Use --generator openai (a real model) or simulated for the key-value task.",
        )
    if generator is None:
        if config.generator == "openai" and settings is None:
            from rag.config import load_settings

            settings = load_settings(data_dir=config.data_dir)
        generator = make_generator(
            config.generator,
            settings=settings,
            curve=config.curve,
            abstain_rate=config.abstain_rate,
            seed=config.seed,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            score=sentence_scorer(config.scorer, settings, pipeline, warnings.append)
            if config.generator == "extractive"
            else None,
        )

    trials: list[Trial] = []
    for length in config.lengths:
        short = []
        for es in sets:
            variants = build_variants(es, length, config)
            if not variants:
                short.append(es.qid)
                continue
            for v in variants:
                prompt, evidence = render(es, v, config.prompt)
                trials += [Trial(es, v, prompt, evidence, r, config.seed) for r in range(config.repeats)]
        if short:
            warnings.append(
                f"length {length}: {len(short)} question(s) skipped, too few distractors ({', '.join(short[:5])}"
                f"{', ...' if len(short) > 5 else ''})"
            )
    outputs = _generate_all(generator, trials, config.workers, progress)
    # A generator that knows its own accuracy per variant (the simulated model) gives every cell its true value.
    expected_of: Callable[[Variant], float] | None = getattr(generator, "expected_accuracy", None)
    runs = [
        _grade(t, o, config, None if expected_of is None else expected_of(t.variant))
        for t, o in zip(trials, outputs, strict=True)
    ]
    cells = aggregate(runs, config)
    missed = [c for c in cells if c.expected is not None and not c.ci_low <= c.expected <= c.ci_high]
    if missed:
        by_chance = len([c for c in cells if c.expected is not None]) * (1 - config.confidence)
        warnings.append(
            f"{len(missed)} cell(s) exclude the generator's expected accuracy from their "
            f"{config.confidence:.0%} interval (about {by_chance:.1f} would by chance): "
            + "; ".join(
                f"{c.name} {100 * c.accuracy:.1f} [{100 * c.ci_low:.1f}-{100 * c.ci_high:.1f}] vs "
                f"{100 * (c.expected or 0.0):.1f}"
                for c in missed[:5]
            )
        )
    comparisons = compare_cells(runs, cells, config)
    for c in comparisons:
        if c.within_noise and c.diff != 0:
            warnings.append(c.message)
    errors = sum(c.errors for c in cells)
    if errors:
        warnings.append(f"{errors} generation(s) failed and were graded as wrong (see runs.jsonl 'error').")
    return SweepResult(
        config=config.to_json(),
        cells=cells,
        comparisons=comparisons,
        runs=runs,
        warnings=warnings,
        generator=getattr(generator, "name", type(generator).__name__),
        model=str(getattr(generator, "model", "")),
        n_questions=len({t.es.qid for t in trials}),
    )


def sentence_scorer(kind: str, settings: Any, pipeline: Any, warn: Callable[[str], None]) -> Any:
    """The extractive generator's sentence scorer: the pipeline's, else the embedding model's, else lexical."""
    if kind == "lexical":
        return lexical_scores
    if pipeline is not None and kind == "auto":
        return pipeline.sentence_scores
    try:
        from rag.models.embedder import load_embedder

        if settings is None:
            from rag.config import load_settings

            settings = load_settings()
        return EmbeddingScorer(load_embedder(settings.embedding_model, settings.embed_batch_size))
    except Exception as exc:  # model files missing or unreadable: any loader error means "not available"
        if kind == "embedding":
            raise ConfigurationError(
                f"Could not load the embedding model for sentence scoring: {exc}"
            ) from exc
        warn(f"embedding model unavailable ({exc}); the extractive generator scores sentences lexically")
        return lexical_scores


def _generate_all(
    generator: Generator, trials: Sequence[Trial], workers: int, progress: Callable[[int, int], None] | None
) -> list[Output]:
    total = len(trials)
    if workers <= 1:
        outs = []
        for i, t in enumerate(trials, 1):
            outs.append(generator.generate(t))
            if progress is not None:
                progress(i, total)
        return outs
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outs = []
        for i, o in enumerate(pool.map(generator.generate, trials), 1):
            outs.append(o)
            if progress is not None:
                progress(i, total)
        return outs


def _grade(t: Trial, o: Output, config: SweepConfig, expected: float | None = None) -> dict[str, Any]:
    es, v = t.es, t.variant
    text = o.text if o.error is None else ""
    if es.all_of:
        correct = grade_all_of(text, es.all_of, config.grader, es.must_not_contain)
        strict = grade_all_of(text, es.all_of, "strict", es.must_not_contain)
    elif es.quotes and not es.answers:
        # a policy question: graded as the suite grades what the user reads (the answer holds a gold quote;
        # strict: every one)
        said = (
            [covered(quote, [text]) for quote in es.quotes] if text and not is_abstention(text) else [False]
        )
        correct, strict = any(said), all(said)
    else:
        correct = grade(text, es.answers, config.grader, es.must_not_contain)
        strict = grade(text, es.answers, "strict", es.must_not_contain)
    cited_gold: bool | None = None
    if es.kind == "qa" and config.prompt == "rag" and v.kind != "control" and o.error is None:
        from rag.stages.citations import check_citations

        citations = check_citations(text, t.evidence)
        gold_ids = {p.pid for p in v.passages if p.gold}
        cited_gold = (
            bool(citations)
            and all(c.valid for c in citations)
            and any(c.chunk_id in gold_ids for c in citations)
        )
    cost = (o.prompt_tokens * config.price_prompt + o.completion_tokens * config.price_completion) / 1e6
    return {
        "qid": es.qid,
        "type": es.type,
        "length": v.length,
        "label": v.label,
        "kind": v.kind,
        "strategy": v.strategy,
        "depth": v.depth,
        "realised_depth": v.realised_depth,
        "position": v.position,
        "gold_positions": [i + 1 for i in v.gold_positions],
        "n_passages": len(v.passages),
        "repeat": t.repeat,
        "output": o.text,
        "model": o.model,
        "correct": bool(correct),
        "strict": bool(strict),
        "cited_gold": cited_gold,
        "abstained": is_abstention(text),
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": o.completion_tokens,
        "latency_ms": round(o.latency_ms, 3),
        "cost": cost,
        "error": o.error,
        "expected": expected,
    }


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _cell_order(config: SweepConfig) -> Callable[[tuple[str, str, str]], tuple[int, int, int, str]]:
    lengths = {length: i for i, length in enumerate(config.lengths)}
    labels = [f"depth {d:.0%}" for d in config.depths] + [f"position {p}" for p in config.positions]
    labels += list(config.strategies) + list(SPACINGS) + ["control"]
    index = {label: i for i, label in enumerate(labels)}

    def key(k: tuple[str, str, str]) -> tuple[int, int, int, str]:
        length, kind, label = k
        return (lengths.get(length, 99), _KIND_ORDER.get(kind, 9), index.get(label, 99), label)

    return key


def aggregate(runs: Sequence[dict[str, Any]], config: SweepConfig) -> list[Cell]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["length"], r["kind"], r["label"]), []).append(r)
    cells = []
    for key in sorted(groups, key=_cell_order(config)):
        rs = groups[key]
        length, kind, label = key
        n = len(rs)
        k = sum(r["correct"] for r in rs)
        ks = sum(r["strict"] for r in rs)
        cit = [r["cited_gold"] for r in rs if r["cited_gold"] is not None]
        depths = [r["realised_depth"] for r in rs if r["realised_depth"] is not None]
        positions = [r["position"] for r in rs if r["position"] is not None]
        lo, hi = wilson_interval(k, n, config.confidence)
        slo, shi = wilson_interval(ks, n, config.confidence)
        requested = rs[0]["depth"] if kind == "depth" else None
        cost_total = sum(r["cost"] for r in rs)
        expected = [r["expected"] for r in rs if r.get("expected") is not None]
        cells.append(
            Cell(
                label=label,
                kind=kind,
                length=length,
                strategy=rs[0]["strategy"],
                depth=requested if requested is not None else (_mean(depths) if depths else None),
                position=_mean(positions) if positions else None,
                n=n,
                correct=k,
                accuracy=k / n,
                ci_low=lo,
                ci_high=hi,
                strict_correct=ks,
                strict_accuracy=ks / n,
                strict_ci_low=slo,
                strict_ci_high=shi,
                citation_n=len(cit),
                citation_accuracy=(sum(cit) / len(cit)) if cit else None,
                abstention_rate=sum(r["abstained"] for r in rs) / n,
                prompt_tokens=_mean([r["prompt_tokens"] for r in rs]),
                completion_tokens=_mean([r["completion_tokens"] for r in rs]),
                latency_ms=_mean([r["latency_ms"] for r in rs]),
                cost=cost_total / n,
                cost_total=cost_total,
                errors=sum(1 for r in rs if r["error"]),
                questions=len({r["qid"] for r in rs}),
                realised_depth=_mean(depths) if depths else None,
                expected=_mean(expected) if len(expected) == n else None,
            )
        )
    return cells


def compare_cells(
    runs: Sequence[dict[str, Any]], cells: Sequence[Cell], config: SweepConfig
) -> list[Comparison]:
    """Per length: every placement against the first (depth 0% or the first position), every strategy against
    the first strategy, split/separated against adjacent. Paired on (question, repeat)."""
    outcome: dict[tuple[str, str], dict[tuple[str, int], bool]] = {}
    for r in runs:
        outcome.setdefault((r["length"], r["label"]), {})[(r["qid"], r["repeat"])] = r["correct"]
    family = {"depth": "placement", "position": "placement", "strategy": "strategy", "spacing": "spacing"}
    grouped: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        if c.kind in family:
            grouped.setdefault((c.length, family[c.kind]), []).append(c)
    out = []
    for i, ((length, _fam), members) in enumerate(grouped.items()):
        ref = members[0]
        for j, other in enumerate(members[1:]):
            a, b = outcome[(length, ref.label)], outcome[(length, other.label)]
            keys = sorted(set(a) & set(b))
            if not keys:
                continue
            out.append(
                compare_paired(
                    [a[k] for k in keys],
                    [b[k] for k in keys],
                    label_a=ref.name,
                    label_b=other.name,
                    test=config.test,
                    alpha=config.alpha,
                    power=config.power,
                    seed=config.seed + 1000 * i + j,
                    confidence=config.confidence,
                )
            )
    return out


__all__ = [
    "Cell",
    "SweepConfig",
    "SweepResult",
    "Variant",
    "build_variants",
    "freeze_from_index",
    "load_evidence_sets",
    "place",
    "render",
    "run_sweep",
]
