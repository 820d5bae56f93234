"""``rag eval``: position-sensitivity sweeps and end-to-end answer quality. Mounted by ``supportbot.cli`` as ``eval``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from rag.cli_support import user_errors
from rag.errors import ConfigurationError

if TYPE_CHECKING:
    from evaluation.suite import Paths

eval_app = typer.Typer(
    help="Evaluate: position-sensitivity sweeps (`position`), end-to-end answer quality (`qa`), multi-hop evidence (`multihop`).",
    no_args_is_help=True,
)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _progress(enabled: bool) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A transient progress bar on stderr when it is a terminal; nothing otherwise (scripts, tests)."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    task = bar.add_task("runs", total=None)
    bar.start()

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar.stop


def _console() -> Console:
    """Tables need room: a terminal keeps its width, a pipe or file gets 160 columns instead of rich's 80."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def _settings(data_dir: Path | None) -> Any:
    from rag.config import load_settings

    return load_settings(data_dir=data_dir)


# ------------------------------------------------------------------------------------------------ position
def sweep_tables(result: Any) -> list[Table]:
    from rag.traces.sweeps import length_json

    cells = Table(
        title=f"Position sweep: {result.model or result.generator}, {result.n_questions} question(s)"
    )
    conf = result.config.get("confidence", 0.95)
    heads = (
        "len",
        "cell",
        "depth",
        "pos",
        "n",
        f"acc % [{conf:.0%} CI]",
        "strict %",
        "cite %",
        "abstain %",
        "prompt tok",
        "ms",
        "cost",
    )
    for col in heads:
        cells.add_column(col, justify="left" if col == "cell" else "right")
    for c in result.cells:
        cells.add_row(
            str(length_json(c.length)),
            c.label,
            "-" if c.depth is None else f"{100 * c.depth:.0f}%",
            "-" if c.position is None else f"{c.position:.3g}",
            str(c.n),
            f"{_pct(c.accuracy)} [{_pct(c.ci_low)}-{_pct(c.ci_high)}]",
            _pct(c.strict_accuracy),
            _pct(c.citation_accuracy),
            _pct(c.abstention_rate),
            f"{c.prompt_tokens:.0f}",
            f"{c.latency_ms:.1f}",
            f"{c.cost:.4g}",
        )
    comps = Table(title=f"Paired comparisons ({result.config.get('test', 'mcnemar')})")
    for col in ("a", "b", "pairs", "diff", "p", "verdict", "runs needed"):
        comps.add_column(col)
    for cmp in result.comparisons:
        verdict = "[yellow]within noise[/]" if cmp.within_noise else "[green]different[/]"
        comps.add_row(
            cmp.a,
            cmp.b,
            str(cmp.n_pairs),
            f"{100 * cmp.diff:+.1f}",
            f"{cmp.p_value:.3g}",
            verdict,
            "-" if cmp.runs_needed is None else str(cmp.runs_needed),
        )
    return [cells, comps] if result.comparisons else [cells]


@eval_app.command("position")
@user_errors
def position(
    questions: Annotated[
        Path | None,
        typer.Option(
            "--questions",
            help="Questions JSONL (ours), a paper file (nq-open-*.jsonl.gz, kv-retrieval-*.jsonl.gz) or a frozen file. Default: the sample corpus questions.",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir", help="Indexed corpus the questions are frozen against. Env: RAG_DATA_DIR."
        ),
    ] = None,
    frozen: Annotated[
        Path | None, typer.Option("--frozen", help="Reuse a frozen evidence file (reproducible sweep).")
    ] = None,
    freeze_out: Annotated[
        Path | None, typer.Option("--freeze-out", help="Write the frozen evidence sets here.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto|ours|paper-qa|paper-kv|frozen")] = "auto",
    distractors: Annotated[
        str,
        typer.Option(
            "--distractors", help="retrieved (the question's own candidates) | pool (random index chunks)"
        ),
    ] = "retrieved",
    retrieval: Annotated[
        str, typer.Option("--retrieval", help="pipeline (full query path ranking) | lexical (BM25 only)")
    ] = "pipeline",
    limit: Annotated[int | None, typer.Option("--limit", help="At most N questions.")] = None,
    depths: Annotated[str, typer.Option("--depths", help="Gold depths in percent.")] = "0,25,50,75,100",
    positions: Annotated[
        str | None,
        typer.Option(
            "--positions", help="Explicit 1-based gold positions (replace --depths), e.g. 1,5,10,15,20."
        ),
    ] = None,
    lengths: Annotated[
        str,
        typer.Option(
            "--lengths", help="Context lengths: passages (10,20,30) or tokens of passage text (2000t, 4k)."
        ),
    ] = "10,20,30",
    strategies: Annotated[
        str, typer.Option("--strategies", help="Packing strategies to compare ('' for none).")
    ] = "edges,best_first,best_last,document_order",
    control: Annotated[
        bool, typer.Option("--control/--no-control", help="Include the control with the gold removed.")
    ] = True,
    spacing: Annotated[
        bool, typer.Option("--spacing/--no-spacing", help="Spacing variants for multi-source questions.")
    ] = True,
    repeats: Annotated[int, typer.Option("--repeats", help="Runs per variant.")] = 1,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    generator: Annotated[
        str | None,
        typer.Option(
            "--generator",
            help="openai|extractive|simulated (default: openai when RAG_LLM_BASE_URL is set, else extractive).",
        ),
    ] = None,
    curve: Annotated[
        str | None, typer.Option("--curve", help="Simulated accuracy by depth d in [0,1].")
    ] = None,
    scorer: Annotated[
        str, typer.Option("--scorer", help="Extractive sentence scorer: auto|embedding|lexical.")
    ] = "auto",
    abstain_rate: Annotated[
        float, typer.Option("--abstain-rate", help="Simulated: abstention probability on the control.")
    ] = 0.8,
    grader: Annotated[
        str,
        typer.Option(
            "--grader", help="paper|normalised|strict (the 'accuracy' column; strict is always reported too)."
        ),
    ] = "normalised",
    prompt: Annotated[
        str, typer.Option("--prompt", help="rag (production prompt, cited) | paper (Liu et al. template).")
    ] = "rag",
    temperature: Annotated[float, typer.Option("--temperature")] = 0.0,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens")] = None,
    price_prompt: Annotated[float, typer.Option("--price-prompt", help="Cost per 1M prompt tokens.")] = 0.0,
    price_completion: Annotated[
        float, typer.Option("--price-completion", help="Cost per 1M completion tokens.")
    ] = 0.0,
    test: Annotated[
        str, typer.Option("--test", help="Paired test: mcnemar (exact) | midp | bootstrap.")
    ] = "mcnemar",
    alpha: Annotated[float, typer.Option("--alpha")] = 0.05,
    workers: Annotated[int, typer.Option("--workers", help="Parallel LLM calls.")] = 1,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write cells.csv, comparisons.csv, runs.jsonl, sweep.json and position-sweep.png here.",
        ),
    ] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the plot PNG here.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object: {cells, comparisons, ...}.")
    ] = False,
) -> None:
    """Freeze retrieval, move the gold passage, and measure accuracy by position with confidence intervals."""
    from evaluation.generators import DEFAULT_CURVE
    from evaluation.position import SweepConfig, parse_depths, parse_ints, run_sweep
    from rag.traces.sweeps import save_figure, save_sweep

    settings = _settings(data_dir)
    if generator is None:
        generator = "openai" if settings.llm_configured else "extractive"
    config = SweepConfig(
        questions=questions,
        frozen=frozen,
        freeze_out=freeze_out,
        data_dir=data_dir,
        format=fmt,
        distractors=distractors,
        retrieval=retrieval,
        limit=limit,
        depths=parse_depths(depths),
        positions=parse_ints(positions, "positions") if positions else (),
        lengths=tuple(x.strip() for x in lengths.split(",") if x.strip()),
        strategies=tuple(x.strip() for x in strategies.split(",") if x.strip()),
        control=control,
        spacing=spacing,
        repeats=repeats,
        seed=seed,
        generator=generator,
        curve=curve or DEFAULT_CURVE,
        scorer=scorer,
        abstain_rate=abstain_rate,
        grader=grader,
        prompt=prompt,
        temperature=temperature,
        max_tokens=max_tokens,
        price_prompt=price_prompt,
        price_completion=price_completion,
        test=test,
        alpha=alpha,
        workers=workers,
    )
    if curve is not None and generator != "simulated":
        raise ConfigurationError("--curve only applies to --generator simulated.")
    update, stop = _progress(True)
    try:
        result = run_sweep(config, settings=settings, progress=update)
    finally:
        stop()
    written = save_sweep(result, out) if out is not None else {}
    if plot is not None:
        written["plot_file"] = save_figure(result, plot)
    if as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
        return
    console = _console()
    for table in sweep_tables(result):
        console.print(table)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    for name, path in written.items():
        console.print(f"[dim]{name}: {path}[/]")


# ------------------------------------------------------------------------------------------------ qa
def qa_table(report: Any) -> Table:
    """Metrics as rows, question types as columns; each cell: rate, k/n and the 95% Wilson interval."""
    rows = [
        ("accuracy", "accuracy"),
        ("strict accuracy", "strict_accuracy"),
        ("retrieval recall", "retrieval_recall"),
        ("evidence recall", "evidence_recall"),
        ("best gold at edge", "best_gold_at_edge"),
        ("citations valid", "citation_validity"),
        ("abstention precision", "abstention_precision"),
        ("abstention recall", "abstention_recall"),
    ]
    summaries = {**report.types, "overall": report.overall}
    table = Table(
        title="Answer quality by question type: rate %, k/n, [95% Wilson interval]", show_lines=True
    )
    table.add_column("metric")
    for name, summary in summaries.items():
        table.add_column(
            f"{name}\n(n={summary['n']})", justify="right", style="bold" if name == "overall" else None
        )

    def fmt(m: dict[str, Any]) -> str:
        if not m["n"]:
            return "-"
        return f"{_pct(m['rate'])} {m['k']}/{m['n']}\n[{100 * m['ci_low']:.0f}-{100 * m['ci_high']:.0f}]"

    for label, key in rows:
        table.add_row(label, *[fmt(summary[key]) for summary in summaries.values()])
    return table


@eval_app.command("qa")
@user_errors
def qa(
    questions: Annotated[
        Path | None,
        typer.Option(
            "--questions", help="Questions JSONL with gold quotes. Default: the sample corpus questions."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Indexed corpus. Env: RAG_DATA_DIR.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most N questions.")] = None,
    user: Annotated[str, typer.Option("--user", help="Who asks when a record names no user.")] = "eval",
    packing: Annotated[
        str | None,
        typer.Option(
            "--packing",
            help="edges|best_first|best_last|document_order|bundle_edges; several, comma-separated, ask each "
            "question under each in turn and compare them paired (with --out: written as it goes).",
        ),
    ] = None,
    k: Annotated[int | None, typer.Option("--k", help="Evidence budget: at most K passages.")] = None,
    llm: Annotated[
        bool | None, typer.Option("--llm/--no-llm", help="Use the configured LLM (default: when configured).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write report.json, questions.jsonl (graded rows), results.jsonl (raw answers)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object: {types, overall, questions}.")
    ] = False,
) -> None:
    """Run questions through the query path and report answer and evidence quality per question type."""
    from evaluation.datasets import default_questions_path, load_questions
    from evaluation.qa import run_qa
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions
    from rag.stages.pack import STRATEGIES

    packings = [p.strip() for p in (packing or "").split(",") if p.strip()]
    unknown = [p for p in packings if p not in STRATEGIES]
    if unknown or len(set(packings)) != len(packings):
        raise ConfigurationError(
            f"Bad --packing {packing!r}.", hint=f"Name distinct strategies among {', '.join(STRATEGIES)}."
        )
    settings = _settings(data_dir)
    path = questions or default_questions_path()
    qs = load_questions(path)
    if limit:
        qs = qs[:limit]
    if not qs:
        raise ConfigurationError(f"No questions in {path}.")
    pipeline = build_pipeline(settings)
    meta = {
        "questions": str(path),
        "data_dir": str(settings.data_dir),
        "generation": "llm" if (pipeline.llm is not None and llm is not False) else "extractive",
    }
    if len(packings) > 1:
        _qa_paired(
            qs,
            pipeline,
            packings,
            k=k,
            llm=llm,
            user=user,
            meta=meta,
            out=out,
            as_json=as_json,
        )
        return
    update, stop = _progress(True)
    try:
        report = run_qa(
            qs,
            pipeline,
            options=PipelineOptions(packing=packing or None, evidence_k=k, use_llm=llm),
            default_user=user,
            progress=update,
        )
    finally:
        stop()
    report.meta = {**meta, "packing": packing or settings.packing}
    if out is not None:
        _write_qa(out, report)
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False))
        return
    _console().print(qa_table(report))


def _write_report(out: Path, report: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=1, ensure_ascii=False))


def _write_qa(out: Path, report: Any) -> None:
    _write_report(out, report)
    with open(out / "questions.jsonl", "w") as fh:
        for row in report.rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(out / "results.jsonl", "w") as fh:  # the input grade_evidence.py expects
        for result in report.results:
            fh.write(json.dumps(result, ensure_ascii=False, default=str) + "\n")


def _appender(out: Path, packings: Sequence[str]) -> Callable[[str, dict[str, Any], dict[str, Any]], None]:
    """Empty ``out/<packing>/{questions,results}.jsonl``, then append each graded row and raw answer as it comes."""
    for p in packings:
        (out / p).mkdir(parents=True, exist_ok=True)
        for name in ("questions.jsonl", "results.jsonl"):
            (out / p / name).write_text("")

    def append(p: str, row: dict[str, Any], raw: dict[str, Any]) -> None:
        for name, obj in (("questions.jsonl", row), ("results.jsonl", raw)):
            with open(out / p / name, "a") as fh:
                fh.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")

    return append


def _qa_paired(
    qs: Any,
    pipeline: Any,
    packings: list[str],
    *,
    k: int | None,
    llm: bool | None,
    user: str,
    meta: dict[str, Any],
    out: Path | None,
    as_json: bool,
) -> None:
    """``rag eval qa --packing A,B``: each question under each packing in turn, one report per packing (under
    ``out/<packing>/``, rows appended as they come), and every packing against the first, paired."""
    from evaluation.qa import PAIRED_METRICS, compare_packings, run_packings
    from rag.pipeline import PipelineOptions

    update, stop = _progress(True)
    try:
        reports = run_packings(
            qs,
            pipeline,
            packings,
            options=lambda p: PipelineOptions(packing=p, evidence_k=k, use_llm=llm),
            default_user=user,
            progress=update,
            sink=None if out is None else _appender(out, packings),
        )
    finally:
        stop()
    for p, report in reports.items():
        report.meta = {**meta, "packing": p}
    paired = {m: [c.to_json() for c in compare_packings(reports, m)] for m in PAIRED_METRICS}
    data = {"packings": {p: r.to_json() for p, r in reports.items()}, "paired": paired, "meta": meta}
    if out is not None:
        for p, report in reports.items():  # rows and raw answers were appended as they came
            _write_report(out / p, report)
        (out / "paired.json").write_text(json.dumps({"paired": paired, "meta": meta}, indent=1))
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False))
        return
    console = _console()
    for p, report in reports.items():
        console.print(f"[bold]{p}[/bold]")
        console.print(qa_table(report))
    console.print(paired_table(paired))


def paired_table(paired: dict[str, list[dict[str, Any]]]) -> Table:
    """Each packing against the first, per metric: both rates, the discordant pairs, McNemar's p."""
    table = Table(title="Packings compared on the same questions (exact McNemar on the discordant pairs)")
    for col in ("metric", "a vs b", "a", "b", "only a / only b", "p", "diff 95% CI"):
        table.add_column(col)
    for metric, comparisons in paired.items():
        for c in comparisons:
            table.add_row(
                metric,
                f"{c['a']} vs {c['b']}",
                f"{_pct(c['acc_a'])} of {c['n_pairs']}",
                _pct(c["acc_b"]),
                f"{c['a_only']} / {c['b_only']}",
                f"{c['p_value']:.3g}",
                f"[{100 * c['ci_low']:+.0f}, {100 * c['ci_high']:+.0f}]",
            )
    return table


def multihop_table(report: Any) -> Table:
    table = Table(title="Multi-hop evidence (both supporting paragraphs in the final evidence)")
    for col in (
        "config",
        "both",
        "at least one",
        "adjacent | both",
        "answer present",
        "p50 ms",
        "hop p50 ms",
    ):
        table.add_column(col)

    def fmt(m: dict[str, Any]) -> str:
        lo, hi = m["ci95"]
        return f"{m['k']}/{m['n']} {_pct(m['rate'])} [{_pct(lo)}–{_pct(hi)}]"

    for name, summary in report.configs.items():
        table.add_row(
            name,
            fmt(summary["both_in_evidence"]),
            fmt(summary["at_least_one"]),
            fmt(summary["adjacent_when_both"]),
            fmt(summary["answer_present"]),
            f"{summary['ms_end_to_end']['p50']:.0f}",
            f"{summary['ms_hops']['p50']:.0f}",
        )
    return table


@eval_app.command("multihop")
@user_errors
def multihop(
    questions: Annotated[
        Path,
        typer.Option("--questions", help="HotpotQA-style JSONL (question_text, answers_objects, contexts)."),
    ],
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Where the pooled corpus is ingested. Env: RAG_DATA_DIR."),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most N questions.")] = None,
    k: Annotated[int | None, typer.Option("--k", help="Evidence budget: at most K passages.")] = None,
    hops: Annotated[
        int | None, typer.Option("--hops", help="Follow-up hops (default: RAG_MAX_HOPS).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write report.json and rows/results per configuration.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: {meta, configs}.")] = False,
) -> None:
    """Pool the questions' paragraphs into one corpus, ingest it, and compare evidence with and without hops."""
    from evaluation.multihop import load_multihop, run_multihop, write_corpus
    from ingest.indexer import ingest as run_ingest
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions

    settings = _settings(data_dir)
    qs, records = load_multihop(questions)
    if limit:
        qs = qs[:limit]
    if not qs:
        raise ConfigurationError(f"No questions in {questions}.")
    corpus = write_corpus(records, settings.data_dir / "corpus" / f"{questions.stem}.jsonl")
    report_ingest = run_ingest([str(corpus)], settings)
    if not report_ingest.ok:
        raise ConfigurationError(f"Ingesting {corpus} failed; run `rag ingest {corpus}` to see why.")
    pipeline = build_pipeline(settings)
    n_hops = settings.max_hops if hops is None else hops
    configs = {
        "no_hop": PipelineOptions(evidence_k=k, use_llm=False, max_hops=0),
        f"hops={n_hops}": PipelineOptions(evidence_k=k, use_llm=False, max_hops=n_hops),
    }
    update, stop = _progress(not as_json)
    try:
        report = run_multihop(qs, pipeline, configs, progress=update)
    finally:
        stop()
    report.meta = {
        "questions": str(questions),
        "data_dir": str(settings.data_dir),
        "corpus_records": len(records),
        "evidence_k": k or settings.evidence_k,
        "reranker": pipeline.reranker.name,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report.to_json(), indent=1, ensure_ascii=False))
        for name in configs:
            with open(out / f"rows-{name}.jsonl", "w") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in report.rows[name])
            with open(out / f"results-{name}.jsonl", "w") as fh:
                fh.writelines(
                    json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in report.results[name]
                )
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False))
        return
    _console().print(multihop_table(report))


# ------------------------------------------------------------------------------------------------ suite
def _rate_cell(m: dict[str, Any] | None) -> str:
    if not m or not m.get("n"):
        return "-"
    lo, hi = m["ci95"]
    return f"{m['k']}/{m['n']} {_pct(m['rate'])} [{_pct(lo)}–{_pct(hi)}]"


def suite_tables(report: dict[str, Any]) -> list[Table]:
    """The combined table (one row per policy suite), then HotpotQA, SciFact and the unanswerables."""
    meta = report["meta"]
    suites = report["suites"]
    tables: list[Table] = []
    policy = [r for r in report["combined"] if "all_gold" in r]
    if policy:
        t = Table(
            title=f"Policy QA, {meta['split']} split, {meta['commit']}: k/n % [95% Wilson]", show_lines=True
        )
        for col in (
            "suite",
            "all gold in evidence",
            "best gold at edge (bundle)",
            "gold passage first or last",
            "rerank-top first or last",
            "answer holds a gold quote",
            "answer holds all gold",
            "badge precision",
            "badge recall",
            "unanswerable abstained",
            "false abstention",
            "answer accuracy",
            "invalid cit.",
            "evidence tok",
            "p50 ms",
        ):
            t.add_column(col)
        for r in policy:
            t.add_row(
                r["suite"],
                _rate_cell(r["all_gold"]),
                _rate_cell(r["best_gold_at_edge"]),
                _rate_cell(r.get("gold_first_or_last")),
                _rate_cell(r.get("top_first_or_last")),
                _rate_cell(r["answer_any_gold"]),
                _rate_cell(r["answer_all_gold"]),
                _rate_cell(r["badge_precision"]),
                _rate_cell(r["badge_recall"]),
                _rate_cell(r["unanswerable_abstained"]),
                _rate_cell(r["false_abstention"]),
                _rate_cell(r["answer_accuracy"]),
                str(r["invalid_citations"]),
                str(r.get("evidence_tokens_mean", "")),
                str(r.get("ms_p50", "")),
            )
        tables.append(t)
    text = [r for r in report["combined"] if r.get("answer_text")]
    if text:
        tables.append(answer_text_table(text))
    if "followup" in suites:
        tables.append(followup_table(suites["followup"]))
    if "hotpotqa" in suites:
        h = suites["hotpotqa"]
        t = Table(title="HotpotQA (both files pooled): both supporting paragraphs in the final evidence")
        for col in ("questions", "both", "at least one", "answer present", "p50 ms"):
            t.add_column(col)
        for kind in ("overall", "bridge", "comparison"):
            s = h[kind]
            t.add_row(
                f"{kind} ({s['questions']})",
                _rate_cell(s["both_in_evidence"]),
                _rate_cell(s["at_least_one"]),
                _rate_cell(s["answer_present"]),
                f"{s['ms_end_to_end']['p50']:.0f}",
            )
        tables.append(t)
    if "scifact" in suites:
        s = suites["scifact"]
        t = Table(title=f"SciFact ({s['queries']} train-qrels queries of the split)")
        for col in ("metric", "mean", "95% bootstrap"):
            t.add_column(col)
        for metric in ("ndcg@10", "recall@100"):
            t.add_row(
                metric,
                f"{s[metric]['mean']:.4f}",
                f"[{s[metric]['ci95'][0]:.3f}, {s[metric]['ci95'][1]:.3f}]",
            )
        tables.append(t)
    if "unanswerable" in suites:
        u = suites["unanswerable"]
        t = Table(title="Unanswerable: abstained")
        t.add_column("questions → corpus")
        t.add_column("abstained")
        t.add_row("near-miss (policy suites)", _rate_cell(u["near_miss"]))
        for name, p in u["pairs"].items():
            t.add_row(name, _rate_cell(p["abstained"]))
        t.add_row("cross-corpus, all", _rate_cell(u["cross_corpus"]))
        tables.append(t)
    return tables


def answer_text_table(rows: list[dict[str, Any]]) -> Table:
    """The answer-text check: answers whose text contradicts itself, mislabels a partial answer, opens with a
    sentence pointing back at nothing, or gives an abstention reason that is not plain English (each should be 0)."""
    from evaluation.graders import ANSWER_TEXT_FAULTS

    t = Table(title="Answer text: answers with each fault (each should be 0)", show_lines=False)
    t.add_column("suite")
    t.add_column("answers")
    for fault in ANSWER_TEXT_FAULTS:
        t.add_column(fault.replace("_", " "))
    for r in rows:
        counts = r["answer_text"]
        t.add_row(
            r["suite"], str(counts.get("answers", 0)), *(str(counts.get(f, 0)) for f in ANSWER_TEXT_FAULTS)
        )
    return t


def followup_table(f: dict[str, Any]) -> Table:
    """The follow-ups (asked after their first question) beside the standalone questions they stand for."""

    def diff(value: float | None) -> str:
        return "-" if value is None else f"{value * 100:+.1f} pts"

    t = Table(
        title=f"Follow-ups ({f['pairs']} conversations): asked after the first question vs the standalone question",
        show_lines=True,
    )
    for col in ("measure", "follow-up", "standalone", "difference"):
        t.add_column(col)
    for label, key in (
        ("all gold in evidence", "all_gold"),
        ("answer holds a gold quote", "answer_any_gold"),
        ("best gold at edge", "best_gold_at_edge"),
    ):
        t.add_row(
            label,
            _rate_cell(f["followup"][key]),
            _rate_cell(f["standalone"][key]),
            diff(f[f"{key}_difference"]),
        )
    t.add_row(
        "false abstention",
        _rate_cell(f["followup"]["false_abstention"]),
        _rate_cell(f["standalone"]["false_abstention"]),
        "",
    )
    for corpus, c in f["by_corpus"].items():
        t.add_row(
            f"all gold, {corpus} ({c['pairs']})",
            _rate_cell(c["followup_all_gold"]),
            _rate_cell(c["standalone_all_gold"]),
            "",
        )
    p = f["all_gold_pairs"]
    t.add_row(
        "pairs: both / standalone only / follow-up only / neither",
        f"{p['both']} / {p['standalone_only']} / {p['followup_only']} / {p['neither']}",
        "",
        "",
    )
    t.add_row("follow-ups rewritten", _rate_cell(f["rewritten"]), "", "")
    t.add_row("first question: all gold", _rate_cell(f["first_all_gold"]), "", "")
    return t


# The options and folders the dataset-ingesting commands (suite, llm-subset) share.
SharedOption = Annotated[
    Path | None,
    typer.Option("--shared", help="The shared data folder. Default: ../shared beside the repo."),
]
WorkDirOption = Annotated[
    Path | None,
    typer.Option(
        "--work-dir",
        help="Where each corpus is ingested (kept: re-runs reuse it). Default: <data-dir>/suites.",
    ),
]
SuiteDataDirOption = Annotated[Path | None, typer.Option("--data-dir", help="Env: RAG_DATA_DIR.")]


def _suite_paths(
    shared: Path | None, work_dir: Path | None, data_dir: Path | None, copies: Path | None = None
) -> Paths:
    """The suites' data folders: ``shared`` (default ../shared beside the repo) and the work dir (created)."""
    from evaluation.suite import Paths

    root = Path(__file__).resolve().parents[1]
    paths = Paths(
        shared or root.parent / "shared", work_dir or _settings(data_dir).data_dir / "suites", copies=copies
    )
    paths.work_dir.mkdir(parents=True, exist_ok=True)
    return paths


@eval_app.command("suite")
@user_errors
def suite(
    suites: Annotated[
        str,
        typer.Option(
            "--suites",
            help="Comma-separated: dev,gitlab,moj,hypha,sample,followup,scifact,hotpotqa,unanswerable or all.",
        ),
    ] = "all",
    split: Annotated[
        str, typer.Option("--split", help="tune (for tuning), test (for reporting) or all.")
    ] = "test",
    shared: SharedOption = None,
    work_dir: WorkDirOption = None,
    data_dir: SuiteDataDirOption = None,
    llm: Annotated[bool, typer.Option("--llm/--no-llm", help="Generate with the configured LLM.")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write report.json (with per-question rows).")
    ] = None,
    rows: Annotated[bool, typer.Option("--rows", help="Keep per-question rows in --json output.")] = False,
    results: Annotated[
        Path | None,
        typer.Option(
            "--results",
            help="Write every answer's rag ask --json object, one JSON line each ({suite, id, result}): "
            "`python -m evaluation.parity A B` compares two runs field by field.",
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="A setting for every suite's pipeline, NAME=VALUE (repeatable): a variant to compare.",
        ),
    ] = None,
    copies: Annotated[
        Path | None,
        typer.Option(
            "--copies",
            help="Ingest the policy corpora found here (python -m evaluation.format_copies: scans, Word or HTML "
            "copies, a folder per corpus) instead of the originals; use a --work-dir of its own.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object: {meta, suites, combined}.")
    ] = False,
) -> None:
    """Every quality suite on one split: policy QA, follow-ups, SciFact, HotpotQA, cross-corpus and near-miss
    unanswerables."""
    from evaluation.suite import SUITES, run_suites, strip_rows
    from rag.pipeline import PipelineOptions

    chosen = list(SUITES) if suites == "all" else [s.strip() for s in suites.split(",") if s.strip()]
    paths = _suite_paths(shared, work_dir, data_dir, copies)
    log = (lambda msg: None) if as_json else (lambda msg: typer.echo(msg, err=True))
    pairs = [o.split("=", 1) for o in overrides or []]
    if any(len(p) != 2 or not p[0].strip() for p in pairs):
        raise ConfigurationError("--set takes NAME=VALUE, e.g. --set evidence_k=10.")
    sink = None
    if results is not None:
        results.parent.mkdir(parents=True, exist_ok=True)
        handle = results.open("w", encoding="utf-8")

        def sink(suite_name: str, qid: str, result: dict[str, Any]) -> None:
            line = {"suite": suite_name, "id": qid, "result": result}
            handle.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")

    try:
        report = run_suites(
            chosen,
            split,
            paths,
            options=PipelineOptions(use_llm=llm),
            log=log,
            settings_overrides={name.strip(): value for name, value in pairs},
            results=sink,
        )
    finally:
        if results is not None:
            handle.close()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str))
    if as_json:
        typer.echo(json.dumps(report if rows else strip_rows(report), ensure_ascii=False, default=str))
        return
    console = _console()
    for table in suite_tables(report):
        console.print(table)


def llm_subset_table(report: dict[str, Any]) -> Table:
    """Before (citation check) and after (claim check) on the same model text, one row per measure."""
    s = report["summary"]
    before, after = s["before_citation_check"], s["after_claim_check"]
    t = Table(
        title=f"LLM subset, {report['meta']['commit']}, {report['meta']['model']}: "
        f"{s['questions']} questions ({s['abstained']} abstained, {s['errors']} errors)",
        show_lines=True,
    )
    for col in ("measure", "before (citation check)", "after (claim check)"):
        t.add_column(col)
    t.add_row("model's text right", _rate_cell(s["model_accuracy"]), _rate_cell(s["model_accuracy"]))
    t.add_row("served answer right", "", _rate_cell(s["served_accuracy"]))
    t.add_row("passed as checked", _rate_cell(before["passed"]), _rate_cell(after["passed"]))
    t.add_row("wrong answers caught", _rate_cell(before["wrong_caught"]), _rate_cell(after["wrong_caught"]))
    t.add_row("wrong answers passed", ", ".join(before["wrong_passed"]), ", ".join(after["wrong_passed"]))
    t.add_row(
        "false flags (right, not passed)", _rate_cell(before["false_flags"]), _rate_cell(after["false_flags"])
    )
    verdicts = ", ".join(f"{k} {v}" for k, v in s["verdicts"].items())
    t.add_row(
        "judged",
        f"{s['citations']} citations: {s['citations_invalid']} invalid, {s['citations_unsupported']} unsupported",
        f"{s['claims']} claims: {verdicts}",
    )
    t.add_row(
        "inline markers",
        "",
        f"{_rate_cell(s['inline_markers'])} of claims; {s['answers_without_inline_marker']} answers with none",
    )
    t.add_row(
        "after the check",
        "",
        f"{s['repair_calls']} repair calls, {s['repaired']} repaired, {s['fallbacks']} extractive fallbacks; "
        f"served verified {_rate_cell(s['served_verified'])}",
    )
    ms = s["ms_total"]
    t.add_row(
        "seconds per answer",
        "",
        f"p50 {ms['p50'] / 1000:.1f}, mean {ms['mean'] / 1000:.1f}, max {ms['max'] / 1000:.1f} "
        f"(generate p50 {s['ms_generate_p50'] / 1000:.1f}, claims p50 {s['ms_claims_p50'] / 1000:.1f})",
    )
    return t


@eval_app.command("llm-subset")
def llm_subset(
    shared: SharedOption = None,
    work_dir: WorkDirOption = None,
    data_dir: SuiteDataDirOption = None,
    limit_per_suite: Annotated[
        int | None, typer.Option("--limit-per-suite", help="Only the first N questions of each suite.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write report.json and results.jsonl (every rag ask --json).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object: {meta, summary, per_suite, rows}.")
    ] = False,
) -> None:
    """The fixed LLM subset: claim check against citation check on the same model answers (RAG_LLM_BASE_URL)."""
    from evaluation.llm_subset import run

    paths = _suite_paths(shared, work_dir, data_dir)
    log = (lambda msg: None) if as_json else (lambda msg: typer.echo(msg, err=True))
    report = run(paths, out=out, log=log, limit_per_suite=limit_per_suite)
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False, default=str))
        return
    _console().print(llm_subset_table(report))
