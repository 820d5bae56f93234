"""`rag eval multihop`: HotpotQA-style records pooled into one corpus, graded with and without hops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evaluation.cli import eval_app
from evaluation.multihop import answer_present, grade, load_multihop, paragraph_id, summarise
from rag.errors import ConfigurationError

PARAGRAPHS = {
    "Ferdi Taygan": "Ferdi Taygan (born December 5, 1956) is an American former professional tennis player.",
    "Mahesh Bhupathi": "Mahesh Shrinivas Bhupathi (born 7 June 1974) is a retired Indian professional tennis player.",
    "Leonberger": "The Leonberger is a giant dog breed from the city of Leonberg in Germany.",
    "Basset Hound": "The Basset Hound is a short-legged breed of dog of the hound family.",
    "1983 Volvo International": "Sherwood Stewart and Ferdi Taygan were the defending champions of the doubles.",
    "Dachshund": "The dachshund is a short-legged, long-bodied, hound-type dog breed.",
}


def record(qid: str, question: str, answer: str, supporting: list[str], others: list[str]) -> dict:  # type: ignore[type-arg]
    return {
        "question_id": qid,
        "question_text": question,
        "answers_objects": [{"spans": [answer]}],
        "contexts": [
            {"id": str(i), "title": t, "paragraph_text": PARAGRAPHS[t], "is_supporting": t in supporting}
            for i, t in enumerate([*supporting, *others])
        ],
    }


@pytest.fixture
def questions(tmp_path: Path) -> Path:
    path = tmp_path / "hotpot.jsonl"
    rows = [
        record(
            "q1",
            "Who is older, Ferdi Taygan or Mahesh Bhupathi?",
            "Ferdi Taygan",
            ["Ferdi Taygan", "Mahesh Bhupathi"],
            ["1983 Volvo International"],
        ),
        record(
            "q2",
            "Which dog is a giant breed, the Leonberger or the Basset Hound?",
            "Leonberger",
            ["Leonberger", "Basset Hound"],
            ["Dachshund"],
        ),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_pools_each_distinct_paragraph_once(questions: Path) -> None:
    qs, corpus = load_multihop(questions)
    assert [q.qid for q in qs] == ["q1", "q2"]
    assert len(corpus) == len({r["_id"] for r in corpus}) == 6
    assert qs[0].supporting == (
        paragraph_id("Ferdi Taygan", PARAGRAPHS["Ferdi Taygan"]),
        paragraph_id("Mahesh Bhupathi", PARAGRAPHS["Mahesh Bhupathi"]),
    )


def test_a_broken_record_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question_id": "x"}\n')
    with pytest.raises(ConfigurationError, match="line 1"):
        load_multihop(path)


def test_grading_both_adjacent_and_answer(questions: Path) -> None:
    q = load_multihop(questions)[0][0]
    a, b = q.supporting

    def result(order: list[str], answer: str = "") -> dict:  # type: ignore[type-arg]
        return {
            "evidence": [{"n": i + 1, "doc_id": d} for i, d in enumerate(order)],
            "answer": answer,
            "timings_ms": {"retrieve": 10.0, "hop_1": 5.0, "generate": 99.0, "total": 114.0},
            "hops": [],
        }

    row = grade(q, result([a, b, "x"], "Ferdi Taygan is older."))
    assert row["both"] and row["adjacent"] and row["answer_present"]
    assert row["ms_end_to_end"] == 15.0 and row["ms_hops"] == 5.0, (
        "the generator is not part of the query time"
    )
    apart = grade(q, result([a, "x", b]))
    assert apart["both"] and not apart["adjacent"] and not apart["answer_present"]
    one = grade(q, result(["x", b]))
    assert one["at_least_one"] and not one["both"]
    summary = summarise([row, apart, one])
    assert summary["both_in_evidence"]["k"] == 2 and summary["adjacent_when_both"]["n"] == 2
    assert summary["adjacent_when_both"]["k"] == 1


def test_answer_match_ignores_case_and_punctuation() -> None:
    assert answer_present(["The Four Seasons"], "It was the four seasons.")
    assert not answer_present(["Kir"], "Kirsch is different")


def test_command_ingests_the_pool_and_compares_hops(questions: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    res = CliRunner().invoke(
        eval_app,
        [
            "multihop",
            "--questions",
            str(questions),
            "--data-dir",
            str(data),
            "--json",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.output.strip().splitlines()[-1])
    assert set(report["configs"]) == {"no_hop", "hops=1"}
    for summary in report["configs"].values():
        assert summary["questions"] == 2
        assert summary["both_in_evidence"]["k"] == 2, "both compared subjects are retrieved"
        assert summary["adjacent_when_both"]["k"] == 2, "and packed side by side"
    assert (tmp_path / "out" / "rows-no_hop.jsonl").exists()
    again = CliRunner().invoke(
        eval_app, ["multihop", "--questions", str(questions), "--data-dir", str(data), "--json"]
    )
    assert (
        again.exit_code == 0
        and json.loads(again.output.strip().splitlines()[-1])["meta"]["corpus_records"] == 6
    )
