"""``python -m evaluation.peer``: both modes, the results JSON and the tables (docs/benchmarks-peer.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from evaluation.peer.chunks import run_dev, run_scifact
from evaluation.peer.common import (
    DEFAULT_OUT,
    DEV_CORPUS,
    DEV_QUESTIONS,
    GRADER,
    SCIFACT,
    WORK_DIR,
    Log,
    load_average,
    load_grader,
    machine,
    require_haystack,
)
from evaluation.peer.users import SUITE_CACHE, run_users, users_table

# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------


def run(
    *,
    work_dir: Path,
    scifact_root: Path | None,
    scifact_limit: int | None = None,
    scifact_docs: int | None = None,
    dev_questions: Path | None = None,
    dev_corpus: Sequence[Path] = DEV_CORPUS,
    grader: Path = GRADER,
    peer_threads: Sequence[int | None] = (None, 1),
    peer_vectors: str = "own",
    cross_encoder_queries: int = 0,
    log: Log = print,
) -> dict[str, Any]:
    version = require_haystack()
    started = time.perf_counter()
    result: dict[str, Any] = {
        "date": date.today().isoformat(),
        "machine": machine(),
        "haystack": version,
        "load_average_at_start": load_average(),
    }
    work_dir.mkdir(parents=True, exist_ok=True)
    if scifact_root is not None:
        result["scifact"] = run_scifact(
            scifact_root,
            work_dir,
            limit=scifact_limit,
            docs=scifact_docs,
            peer_threads=peer_threads,
            peer_vectors=peer_vectors,
            log=log,
        )
    if dev_questions is not None:
        result["dev"] = run_dev(
            dev_questions,
            dev_corpus,
            work_dir,
            load_grader(grader),
            peer_threads=peer_threads,
            peer_vectors=peer_vectors,
            cross_encoder_queries=cross_encoder_queries,
            log=log,
        )
    result["load_average_at_end"] = load_average()
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"Haystack {result['haystack']} vs ours, {result['date']}, {result['machine']['cpus']} CPUs, "
        f"load {result['load_average_at_start'][0]} -> {result['load_average_at_end'][0]}"
    ]
    head = f"{'':<34}{'ours':>10}{'haystack':>10}{'ours/theirs':>13}"
    for key, title in (("scifact", "SciFact"), ("dev", "dev questions")):
        r = result.get(key)
        if not r:
            continue
        q, lat = r["quality"], r["latency"]
        n = r["queries"] if key == "scifact" else r["answerable"]
        lines += [
            "",
            f"{title}: {n} {'held-out queries' if key == 'scifact' else 'answerable questions'}, "
            f"{r['chunks']} chunks, our reranker {r['reranker']}",
            head,
        ]
        metric = "nDCG@10" if key == "scifact" else "evidence recall"
        lines.append(
            f"{metric:<34}{q['ours']:>10.4f}{q['haystack']:>10.4f}{q['ratio_ours_over_theirs'] or 0:>13.3f}"
            f"   delta CI95 {q['delta_ci95']}"
        )
        peer = lat["ms"][lat["peer_compared"]]
        for p in ("p50", "p95"):
            lines.append(
                f"{'latency ' + p + ' ms (' + lat['peer_compared'] + ')':<34}{lat['ms']['ours'][p]:>10.1f}"
                f"{peer[p]:>10.1f}{lat['ratio_ours_over_theirs'][p]:>13.3f}"
            )
        te, ter = lat["ours_through_evidence_ms"], lat["ours_through_evidence_ratio"]
        lines.append(
            f"  ours up to its evidence: p50 {te['p50']:.1f} ms ({ter['p50']}), p95 {te['p95']:.1f} ms ({ter['p95']})"
        )
        for label, v in lat["ms"].items():
            if label not in ("ours", lat["peer_compared"]):
                lines.append(f"  also {label}: p50 {v['p50']:.1f} ms, p95 {v['p95']:.1f} ms")
        top = sorted(lat["ours_stages_ms"].items(), key=lambda kv: -kv[1]["p50"])[:5]
        lines.append("  our slowest stages (p50 ms): " + ", ".join(f"{k} {v['p50']:.1f}" for k, v in top))
        for side in ("ours", "haystack"):
            ix = r["indexing"][side]
            reused = f", vectors reused: {ix['vectors_reused']}" if "vectors_reused" in ix else ""
            lines.append(
                f"  indexing {side}: {ix['seconds']:.1f} s, embedded {ix['embedded_this_run']} this run{reused}"
            )
        if key == "dev":
            es = r["evidence_size"]
            lines.append(
                f"  evidence per question: ours {es['ours']['chunks']} chunks / {es['ours']['tokens']} tokens, "
                f"haystack {es['haystack']['chunks']} / {es['haystack']['tokens']}"
            )
            lines.append(
                f"  by type: {q['by_type']}; ours abstained on unanswerable {q['ours_abstained_on_unanswerable']}"
            )
            ce = r.get("cross_encoder_time_only")
            if ce:
                lines.append(
                    f"  same MiniLM-L6 cross-encoder on both (time only, {ce['ms']['ours']['n']} questions): "
                    f"ours p50 {ce['ms']['ours']['p50']:.0f} ms, haystack p50 "
                    f"{ce['ms'][ce['peer_compared']]['p50']:.0f} ms, ratio {ce['ratio_ours_over_theirs']['p50']}"
                )
    lines.append(f"\n{result['seconds']:.0f} s in all")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evaluation.peer",
        description=__doc__ + "\nMethod and output: docs/benchmarks-peer.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--work-dir", type=Path, default=WORK_DIR, help="Indexes and embedding caches (scratch)."
    )
    parser.add_argument("--scifact", type=Path, default=SCIFACT, help="BEIR SciFact folder.")
    parser.add_argument("--scifact-limit", type=int, default=None, help="Only the first N held-out queries.")
    parser.add_argument(
        "--scifact-docs",
        type=int,
        default=None,
        help="Index only the queries' relevant documents plus others up to N (not the full corpus).",
    )
    parser.add_argument("--no-scifact", action="store_true")
    parser.add_argument("--dev-questions", type=Path, default=DEV_QUESTIONS)
    parser.add_argument("--dev-corpus", type=Path, nargs="+", default=list(DEV_CORPUS))
    parser.add_argument("--no-dev", action="store_true")
    parser.add_argument(
        "--grader", type=Path, default=GRADER, help="grade_evidence.py (defines evidence recall)."
    )
    parser.add_argument(
        "--cross-encoder-queries",
        type=int,
        default=10,
        help="Dev questions to time with a MiniLM-sized cross-encoder on both sides (0: skip).",
    )
    parser.add_argument(
        "--peer-vectors",
        choices=("own", "ours"),
        default="own",
        help="'own': Haystack embeds the chunks itself (cached in --work-dir); 'ours': it is given the vectors our "
        "ingestion stored for the same texts (same model: they differ by ~1e-7), when embedding twice does not fit.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--json", action="store_true", help="Print the JSON instead of the table.")
    parser.add_argument(
        "--mode",
        choices=("chunks", "users"),
        default="chunks",
        help="'chunks': the peer is fed our chunks (SciFact + dev); 'users': the peer as its users run it, on "
        "every policy suite (its converters, cleaner, 200-word splitter).",
    )
    parser.add_argument(
        "--suites", nargs="+", default=["dev", "gitlab", "sample"], help="--mode users: suites."
    )
    parser.add_argument(
        "--split", choices=("tune", "test", "all"), default="test", help="--mode users: split."
    )
    parser.add_argument(
        "--suite-cache",
        type=Path,
        default=SUITE_CACHE,
        help="--mode users: ours reuses <this>/<suite> as its data dir when it holds an index.",
    )
    args = parser.parse_args(argv)
    require_haystack()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)  # Haystack 2.x announcing its 3.0 moves
    log: Log = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    command = " ".join(["python -m evaluation.peer", *(argv if argv is not None else sys.argv[1:])])
    if args.mode == "users":
        users = run_users(
            work_dir=args.work_dir,
            suites=args.suites,
            split=args.split,
            grader=args.grader,
            cache_root=args.suite_cache,
            log=log,
        )
        users["command"] = command
        out = args.out if args.out != DEFAULT_OUT else DEFAULT_OUT.with_name("peer-users.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(users, indent=1) + "\n")
        print(json.dumps(users) if args.json else users_table(users) + f"\nwrote {out}")
        return 0
    result = run(
        work_dir=args.work_dir,
        scifact_root=None if args.no_scifact else args.scifact,
        scifact_limit=args.scifact_limit,
        scifact_docs=args.scifact_docs,
        dev_questions=None if args.no_dev else args.dev_questions,
        dev_corpus=args.dev_corpus,
        grader=args.grader,
        peer_vectors=args.peer_vectors,
        cross_encoder_queries=args.cross_encoder_queries,
        log=log,
    )
    result["command"] = " ".join(["python -m evaluation.peer", *(argv if argv is not None else sys.argv[1:])])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result))
    else:
        print(_table(result))
        print(f"wrote {args.out}")
    return 0
