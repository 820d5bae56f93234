"""`rag eval` driven the way users drive it: typer's CliRunner on eval_app with a synthetic frozen file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evaluation.cli import eval_app
from evaluation.datasets import save_frozen, synthetic_sets

runner = CliRunner()


@pytest.fixture
def frozen(tmp_path: Path) -> Path:
    sets = synthetic_sets(6, 30, seed=21) + synthetic_sets(2, 30, seed=22, n_gold=2, prefix="multi")
    return save_frozen(sets, tmp_path / "frozen.json", {"note": "synthetic"})


def simulated_sweep(frozen: Path, tmp_path: Path, *extra: str) -> Any:
    """``rag eval position`` on the frozen file with the simulated generator and an unused data dir."""
    args = ["position", "--frozen", str(frozen), "--generator", "simulated"]
    return runner.invoke(eval_app, [*args, "--data-dir", str(tmp_path / "unused"), *extra])


def test_position_json(frozen: Path, tmp_path: Path) -> None:
    res = simulated_sweep(frozen, tmp_path, "--lengths", "10,20", "--repeats", "5", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["generator"] == "simulated" and data["questions"] == 8
    cells = data["cells"]
    depth = [c for c in cells if c["strategy"] == "fixed"]
    assert [c["depth"] for c in depth[:5]] == [0, 0.25, 0.5, 0.75, 1]
    assert all(c["n"] == 40 for c in depth)  # 8 questions x 5 repeats
    assert {c["strategy"] for c in cells} >= {
        "edges",
        "best_first",
        "best_last",
        "document_order",
        "control",
        "spacing:adjacent",
        "spacing:split",
        "spacing:separated",
    }
    assert all(0 <= c["ci_low"] <= c["accuracy"] <= c["ci_high"] <= 1 for c in cells)
    assert data["comparisons"] and all(c["test"] == "mcnemar" for c in data["comparisons"])


def test_position_table_files_and_plot(frozen: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    res = simulated_sweep(
        frozen,
        tmp_path,
        *("--lengths", "10", "--positions", "1,5,10", "--strategies", "edges", "--repeats", "3"),
        *("--out", str(out), "--curve", "0.9 - 0.3*d"),
    )
    assert res.exit_code == 0, res.output
    assert "Position sweep" in res.stdout and "position 5" in res.stdout
    for name in ("cells.csv", "comparisons.csv", "runs.jsonl", "sweep.json", "position-sweep.png"):
        assert (out / name).is_file(), name
    header = (out / "cells.csv").read_text().splitlines()[0]
    assert header.startswith("length,label,kind,strategy,depth,position,n,accuracy,ci_low,ci_high")
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    # 6 one-gold questions: 3 positions + edges + control; 2 two-gold questions: position 10 cannot hold a pair
    # of 10, so 2 positions + edges + control, plus 3 spacings. 3 repeats each.
    assert len(runs) == 3 * (6 * 5 + 2 * (4 + 3))


def test_freeze_out_then_reuse(frozen: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.json"
    args = [
        "position",
        "--generator",
        "simulated",
        "--lengths",
        "10",
        "--repeats",
        "2",
        "--json",
        "--data-dir",
        str(tmp_path / "unused"),
    ]
    first = runner.invoke(eval_app, [*args, "--questions", str(frozen), "--freeze-out", str(again)])
    assert first.exit_code == 0, first.output
    second = runner.invoke(eval_app, [*args, "--frozen", str(again)])
    assert second.exit_code == 0, second.output

    def outcome(stdout: str) -> list[dict[str, Any]]:  # everything but wall-clock latency
        return [{k: v for k, v in c.items() if k != "latency_ms"} for c in json.loads(stdout)["cells"]]

    assert outcome(first.stdout) == outcome(second.stdout)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--curve", "__import__('os')"], "not allowed"),
        (["--strategies", "middle_out"], "Unknown packing strategy"),
        (["--lengths", "ten"], "Bad context length"),
        (["--grader", "fuzzy"], "Unknown grader"),
    ],
)
def test_user_errors_have_no_traceback(frozen: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    res = simulated_sweep(frozen, tmp_path, *extra)
    assert res.exit_code == 1
    assert message in res.output and "Traceback" not in res.output


def test_missing_frozen_file(tmp_path: Path) -> None:
    res = runner.invoke(
        eval_app, ["position", "--frozen", str(tmp_path / "nope.json"), "--generator", "simulated"]
    )
    assert res.exit_code == 1 and "not found" in res.output


def test_qa_command_with_a_fake_pipeline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import rag.pipeline

    quote = "Customers may return items within 45 days of delivery for a full refund."
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        json.dumps(
            {
                "id": "a",
                "type": "single",
                "question": "Refund window?",
                "answers": ["45 days"],
                "evidence": [{"quote": quote}],
                "user": "alice",
                "groups": ["staff"],
            }
        )
        + "\n"
        + json.dumps({"id": "b", "type": "unanswerable", "question": "Dog at work?", "answers": []})
        + "\n"
    )

    class FakePipeline:
        llm = None

        def __init__(self, settings: Any, **_: Any) -> None:
            self.settings = settings

        def ask(self, question: Any, options: Any = None) -> Any:
            answerable = question.text.startswith("Refund")
            data = {
                "answer": "45 days [1]."
                if answerable
                else "I can't answer this from the policies you have access to.",
                "abstained": not answerable,
                "evidence": [{"n": 1, "text": quote, "bundle": 0}] if answerable else [],
                "candidates": [{"text": quote}] if answerable else [],
                "citations": [{"n": 1, "valid": True, "supported": True}] if answerable else [],
                "tokens": {"prompt": 100},
                "timings_ms": {"total": 5.0},
                "error": None,
            }
            return type("R", (), {"to_json": lambda self: data})()

    monkeypatch.setattr(rag.pipeline, "Pipeline", FakePipeline)
    res = runner.invoke(
        eval_app,
        [
            "qa",
            "--questions",
            str(questions),
            "--json",
            "--data-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "qa"),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["overall"]["accuracy"]["k"] == 2
    assert data["types"]["single"]["evidence_recall"]["rate"] == 1.0
    assert data["types"]["unanswerable"]["abstention_recall"]["rate"] == 1.0
    assert (tmp_path / "qa" / "report.json").is_file()
    raw = [json.loads(line) for line in (tmp_path / "qa" / "results.jsonl").read_text().splitlines()]
    assert [r["id"] for r in raw] == ["a", "b"] and raw[0]["answer"] == "45 days [1]."
    table = runner.invoke(eval_app, ["qa", "--questions", str(questions), "--data-dir", str(tmp_path)])
    assert table.exit_code == 0 and "overall" in table.stdout


def test_qa_command_compares_packings_paired_and_writes_as_it_goes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import rag.pipeline

    rule = "Customers may return items within 45 days of delivery for a full refund."
    other = "Gift cards are not refundable, except where required by law."
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        "".join(
            json.dumps(
                {
                    "id": i,
                    "type": "single",
                    "question": f"Refund window {i}?",
                    "answers": ["45 days"],
                    "evidence": [{"quote": rule}],
                }
            )
            + "\n"
            for i in ("a", "b")
        )
    )

    class FakePipeline:
        llm = None

        def __init__(self, settings: Any, **_: Any) -> None:
            self.settings = settings

        def ask(self, question: Any, options: Any = None) -> Any:
            new = options.packing == "edges"
            data = {
                "answer": "45 days [1]." if new else "Ask the team [1].",
                "abstained": False,
                "evidence": [
                    {"n": 1, "text": rule if new else other, "bundle": 0},
                    {"n": 2, "text": other if new else rule, "bundle": 0},
                ],
                "candidates": [{"text": rule}],
                "citations": [{"n": 1, "valid": True, "supported": True}],
                "tokens": {"prompt": 100},
                "timings_ms": {"total": 5.0},
                "error": None,
            }
            return type("R", (), {"to_json": lambda self: data})()

    monkeypatch.setattr(rag.pipeline, "Pipeline", FakePipeline)
    args = [
        "qa",
        "--questions",
        str(questions),
        "--data-dir",
        str(tmp_path),
        "--packing",
        "edges,bundle_edges",
    ]
    res = runner.invoke(eval_app, [*args, "--json", "--out", str(tmp_path / "qa")])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["packings"]["edges"]["overall"]["accuracy"]["k"] == 2
    assert data["packings"]["bundle_edges"]["overall"]["accuracy"]["k"] == 0
    assert data["packings"]["bundle_edges"]["overall"]["gold_at_prompt_edge"]["k"] == 2  # second of two
    (accuracy,) = data["paired"]["correct"]
    assert (accuracy["a"], accuracy["b"], accuracy["a_only"], accuracy["b_only"]) == (
        "edges",
        "bundle_edges",
        2,
        0,
    )
    assert data["paired"]["cites_gold"][0]["a_only"] == 2
    for packing in ("edges", "bundle_edges"):
        rows = (tmp_path / "qa" / packing / "questions.jsonl").read_text().splitlines()
        assert [json.loads(r)["id"] for r in rows] == ["a", "b"]
    assert json.loads((tmp_path / "qa" / "paired.json").read_text())["paired"]["correct"][0]["n_pairs"] == 2
    table = runner.invoke(eval_app, args)
    assert table.exit_code == 0 and "edges vs bundle_edges" in table.stdout
    bad = runner.invoke(eval_app, [*args[:-1], "edges,edges"])
    assert bad.exit_code == 1 and "distinct strategies" in bad.output and "Traceback" not in bad.output
