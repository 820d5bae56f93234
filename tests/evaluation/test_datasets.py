"""Loaders: our questions JSONL, the "Lost in the Middle" formats (inline samples and the real files), and
frozen evidence files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from evaluation.datasets import (
    default_questions_path,
    detect_format,
    kv_sets,
    load_frozen,
    load_paper_kv,
    load_paper_qa,
    load_questions,
    paper_qa_sets,
    question_from_dict,
    save_frozen,
    synthetic_sets,
)
from evaluation.graders import normalised_match, paper_match
from rag.errors import ConfigurationError

QA_RECORDS = [
    {
        "question": "who got the first nobel prize in physics",
        "answers": ["Wilhelm Conrad Röntgen"],
        "ctxs": [
            {
                "title": "Nobel Prize",
                "text": "The first Nobel Prize in Physics went to Wilhelm Conrad Röntgen.",
                "isgold": True,
            },
        ],
    },
    {
        "question": "when was the eiffel tower built",
        "answers": ["1889"],
        "ctxs": [
            {
                "title": "Eiffel Tower",
                "text": "The tower was completed in 1889 for the World's Fair.",
                "isgold": True,
            }
        ],
    },
    {
        "question": "what is the capital of australia",
        "answers": ["Canberra"],
        "ctxs": [
            {"title": "Sydney", "text": "Sydney is the largest city in Australia.", "isgold": False},
            {"title": "Canberra", "text": "Canberra is the capital city of Australia.", "isgold": True},
            {
                "title": "Melbourne",
                "text": "Melbourne was the seat of government until 1927.",
                "isgold": False,
            },
        ],
    },
    {
        "question": "who wrote hamlet",
        "answers": ["Shakespeare"],
        "ctxs": [
            {"title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare.", "isgold": True}
        ],
    },
]
KV_RECORDS = [
    {
        "ordered_kv_records": [["k1", "v1"], ["k2", "v2"], ["k3", "v3"], ["k4", "v4"]],
        "key": "k3",
        "value": "v3",
    },
    {"ordered_kv_records": [["a", "1"], ["b", "2"]], "key": "a", "value": "1"},
]


def write_jsonl(path: Path, records: list[dict], gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def test_paper_qa_records_with_and_without_their_own_distractors(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "nq.jsonl.gz", QA_RECORDS, gz=True)
    assert detect_format(path) == "paper-qa"
    records = load_paper_qa(path)
    assert [len(r.ctxs) for r in records] == [1, 1, 3, 1]
    sets = paper_qa_sets(records, n_distractors=2, seed=0)
    assert len(sets) == 4
    own = sets[2]
    assert [p.title for p in own.gold] == ["Canberra"]
    assert [p.title for p in own.distractors] == ["Sydney", "Melbourne"]  # the record's own, in order
    oracle = sets[0]
    assert len(oracle.distractors) == 2
    assert all(p.origin == "pool" and not p.gold for p in oracle.distractors)
    # Pool distractors are other questions' gold passages and never contain this question's answer.
    assert all(not paper_match(p.text, oracle.answers) for p in oracle.distractors)
    assert "Röntgen" not in " ".join(p.text for p in oracle.distractors)
    assert paper_qa_sets(records, n_distractors=2, seed=0) == sets  # seeded
    assert len(paper_qa_sets(records, limit=2)) == 2


def test_kv_records(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "kv.jsonl", KV_RECORDS)
    assert detect_format(path) == "paper-kv"
    records = load_paper_kv(path)
    assert records[0].gold_index == 2
    sets = kv_sets(records)
    first = sets[0]
    assert first.kind == "kv" and first.answers == ("v3",) and first.question == "k3"
    assert [p.title for p in first.gold] == ["k3"]
    assert [p.title for p in first.distractors] == ["k1", "k2", "k4"]  # record order kept
    assert "v3" not in first.wrong_answers


def test_bad_records_are_user_errors(tmp_path: Path) -> None:
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"ordered_kv_records": [["k1", "v1"]], "key": "zz", "value": "v"}]
    )
    with pytest.raises(ConfigurationError):
        kv_sets(load_paper_kv(bad))
    (tmp_path / "junk.jsonl").write_text("{not json\n")
    with pytest.raises(ConfigurationError, match="not JSON"):
        load_questions(tmp_path / "junk.jsonl")
    with pytest.raises(ConfigurationError, match="not found"):
        detect_format(tmp_path / "missing.jsonl")


def test_our_question_format() -> None:
    q = question_from_dict(
        {
            "id": "s21",
            "type": "compound",
            "question": "Who approves, and how fast?",
            "answers": ["director"],
            "all_of": [["director"], ["12 business days"]],
            "evidence": [{"file": "expenses.pdf", "quote": "Claims above $2,500 also need approval."}],
            "user": "alice",
            "groups": ["staff"],
            "must_not_contain": ["$100"],
        }
    )
    assert q.quotes == ("Claims above $2,500 also need approval.",)
    assert q.all_of == (("director",), ("12 business days",))
    assert q.groups == ("staff",) and q.must_not_contain == ("$100",)
    assert not q.expects_abstention
    ids = question_from_dict(
        {"question": "q", "evidence": ["0123456789abcdef01234567", "a quote"], "answers": "x"}
    )
    assert (
        ids.chunk_ids == ("0123456789abcdef01234567",)
        and ids.quotes == ("a quote",)
        and ids.answers == ("x",)
    )
    assert question_from_dict({"question": "Dog?", "type": "unanswerable"}).expects_abstention
    assert question_from_dict({"question": "Salary?", "type": "restricted", "answers": []}).expects_abstention
    long = question_from_dict(
        {"question": "q", "answer": "Not yet. You wait 90 days for the budget.", "evidence": []}
    )
    assert long.gold_strings == () and not long.expects_abstention


def test_the_sample_questions_load() -> None:
    path = default_questions_path()
    assert detect_format(path) == "ours"
    qs = load_questions(path)
    assert len(qs) >= 20
    assert sum(q.expects_abstention for q in qs) >= 3
    assert all(q.quotes for q in qs if not q.expects_abstention)


def test_frozen_round_trip(tmp_path: Path) -> None:
    sets = synthetic_sets(3, 5, seed=4) + synthetic_sets(2, 5, seed=5, n_gold=2, prefix="multi")
    path = save_frozen(sets, tmp_path / "frozen.json", {"note": "test"})
    assert detect_format(path) == "frozen"
    loaded, source = load_frozen(path)
    assert loaded == sets
    assert source == {"note": "test"}
    (tmp_path / "other.json").write_text('{"format": "something-else"}')
    with pytest.raises(ConfigurationError, match="not a frozen evidence file"):
        load_frozen(tmp_path / "other.json")


def test_synthetic_sets_never_leak_the_answer_into_distractors() -> None:
    for es in synthetic_sets(12, 30, seed=9, n_gold=2):
        assert len(es.gold) == 2 and len(es.distractors) == 30
        assert not any(normalised_match(d.text, es.answers) for d in es.distractors)
        assert normalised_match(es.gold[0].text, es.answers)


@pytest.mark.shared
def test_real_lost_in_the_middle_files(shared_dir: Path) -> None:
    folder = shared_dir / "data" / "lost-in-the-middle"
    nq, kv = folder / "nq-open-oracle.jsonl.gz", folder / "kv-retrieval-75_keys.jsonl.gz"
    if not nq.is_file() or not kv.is_file():
        pytest.skip(f"lost-in-the-middle files are absent from {folder}")
    assert detect_format(nq) == "paper-qa" and detect_format(kv) == "paper-kv"
    records = load_paper_qa(nq, limit=200)
    assert len(records) == 200
    assert all(len(r.ctxs) == 1 and r.ctxs[0].gold for r in records)  # the oracle file: gold only
    sets = paper_qa_sets(records, n_distractors=19, limit=5)
    assert all(len(s.distractors) == 19 for s in sets)
    assert all(not paper_match(d.text, s.answers) for s in sets for d in s.distractors)
    kv_records = load_paper_kv(kv, limit=3)
    assert all(len(r.ordered_kv_records) == 75 for r in kv_records)
    assert all(len(s.distractors) == 74 and len(s.gold) == 1 for s in kv_sets(kv_records))
