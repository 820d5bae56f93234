"""The follow-up suite: its pairs are well formed and split, the sample pairs' gold is in the sample PDFs, and the
suite runs end to end on the sample corpus, asking each follow-up after its first question."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evaluation import suite as suite_mod
from evaluation.cli import suite_tables
from evaluation.graders import covered
from evaluation.splits import FOLLOWUPS_PATH, split_ids

FIELDS = {"id", "corpus", "first", "followup", "standalone", "answer", "evidence", "first_evidence", "notes"}


def _records() -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in FOLLOWUPS_PATH.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def test_pairs_are_well_formed() -> None:
    records = _records()
    assert len(records) >= 40
    assert len({r["id"] for r in records}) == len(records)
    per_corpus = Counter(r["corpus"] for r in records)
    assert set(per_corpus) <= set(suite_mod.POLICY_SUITES) and len(per_corpus) >= 2
    assert min(per_corpus.values()) >= 8, per_corpus
    for r in records:
        assert set(r) >= FIELDS - {"notes"} and set(r) <= FIELDS, r["id"]
        assert all(
            isinstance(r[k], str) and r[k].strip() for k in ("first", "followup", "standalone", "answer")
        )
        assert r["followup"] != r["standalone"] and r["followup"] != r["first"], r["id"]
        for ev in (*r["evidence"], *r["first_evidence"]):
            assert set(ev) == {"file", "page", "quote"} and ev["file"] and ev["quote"].strip(), r["id"]
            assert ev["page"] is None or (isinstance(ev["page"], int) and ev["page"] >= 1), r["id"]
        assert r["evidence"] and r["first_evidence"], r["id"]
        # the follow-up asks something new: its gold is not the first question's gold
        first = [ev["quote"] for ev in r["first_evidence"]]
        for quote in (ev["quote"] for ev in r["evidence"]):
            assert not covered(quote, first), r["id"]
            assert not any(covered(q, [quote]) for q in first), r["id"]


def test_split_covers_every_pair_once_with_every_corpus_on_both_sides() -> None:
    records = _records()
    tune, test = split_ids("followup", "tune"), split_ids("followup", "test")
    assert tune | test == {r["id"] for r in records} and not tune & test
    corpus = {r["id"]: r["corpus"] for r in records}
    assert {corpus[i] for i in tune} == {corpus[i] for i in test} == set(corpus.values())
    assert abs(len(tune) - len(test)) <= len(set(corpus.values()))


def test_loaded_pairs_share_the_gold_between_follow_up_and_standalone() -> None:
    pairs = suite_mod.load_followups()
    assert [p.id for p in pairs] == [r["id"] for r in _records()]
    for p in pairs:
        assert p.followup.quotes and p.followup.quotes == p.standalone.quotes
        assert p.first.quotes and set(p.first.quotes).isdisjoint(p.followup.quotes)
        assert not p.followup.expects_abstention and not p.standalone.expects_abstention
    tune = suite_mod.followup_pairs("tune")
    assert {p.id for p in tune if not p.near_miss} == split_ids("followup", "tune")
    assert {p.id for p in tune if p.near_miss} == split_ids("followup_near_miss", "tune")


def test_near_miss_pairs_ask_after_an_answerable_question_what_the_corpus_does_not_say() -> None:
    from evaluation.splits import NEAR_MISS_FOLLOWUPS_PATH

    pairs = suite_mod.load_followups(NEAR_MISS_FOLLOWUPS_PATH)
    assert len(pairs) >= 20 and {p.corpus for p in pairs} == {"sample", "dev", "gitlab", "moj", "hypha"}
    for p in pairs:
        assert p.near_miss and p.first.quotes and not p.first.expects_abstention
        assert p.followup.expects_abstention and p.standalone.expects_abstention and not p.followup.quotes


@pytest.mark.slow
def test_sample_gold_quotes_are_in_the_ingested_sample_pdfs(sample_data_dir: Path) -> None:
    """Every quote of the sample pairs is findable by the grader in one passage of the file (and page) it names."""
    from rag.stores.index import current_generation, generation_dir, load_chunks

    generation = current_generation(sample_data_dir)
    assert generation is not None
    chunks, _ = load_chunks(generation_dir(sample_data_dir, generation))
    sample = [r for r in _records() if r["corpus"] == "sample"]
    assert len(sample) >= 8
    for r in sample:
        for ev in (*r["evidence"], *r["first_evidence"]):
            found = [
                c for c in chunks if Path(c.source).name == ev["file"] and covered(ev["quote"], [c.text])
            ]
            assert found, (r["id"], ev["quote"])
            if ev["page"] is not None:
                assert any(c.page == ev["page"] for c in found), (r["id"], ev["page"])


@pytest.mark.slow
def test_followup_suite_runs_on_the_sample_corpus(tmp_path: Path, sample_data_dir: Path) -> None:
    """Without the shared data only the sample pairs are asked; every figure of the report is there, and the
    follow-up (only it) was asked with the first turn as its history."""
    work = tmp_path / "work"
    shutil.copytree(sample_data_dir, work / "sample")  # unchanged corpus: ingestion reuses it
    asked: dict[str, dict[str, Any]] = {}
    logged: list[str] = []
    report = suite_mod.run_suites(
        ["followup"],
        "tune",
        suite_mod.Paths(tmp_path / "no-shared", work),
        log=logged.append,
        results=lambda suite, qid, result: asked.setdefault(qid, {"suite": suite, **result}),
    )
    f = report["suites"]["followup"]
    pairs = [p for p in suite_mod.followup_pairs("tune") if p.corpus == "sample" and not p.near_miss]
    near = [p for p in suite_mod.followup_pairs("tune") if p.corpus == "sample" and p.near_miss]
    assert pairs and f["pairs"] == len(pairs) and list(f["by_corpus"]) == ["sample"]
    assert f["near_miss"]["pairs"] == len(near) and f["near_miss"]["followup_abstained"]["n"] == len(near)
    assert any("not asked" in line for line in logged)  # the shared corpora's pairs are skipped, and said so
    for side in ("followup", "standalone"):
        for key in ("all_gold", "answer_any_gold", "best_gold_at_edge", "false_abstention"):
            m = f[side][key]
            assert m["n"] == len(pairs) and 0 <= m["ci95"][0] <= m["rate"] <= m["ci95"][1] <= 1, (side, key)
    for key in ("all_gold", "answer_any_gold", "best_gold_at_edge"):
        assert f[f"{key}_difference"] == round(f["followup"][key]["rate"] - f["standalone"][key]["rate"], 4)
    assert sum(f["all_gold_pairs"].values()) == len(pairs)
    assert f["rewritten"]["n"] == len(pairs) and f["first_all_gold"]["n"] == len(pairs)
    # each pair's three questions reached the results sink, the follow-up after its first turn
    for p in pairs:
        first, followup, standalone = asked[f"{p.id}:first"], asked[p.id], asked[f"{p.id}:standalone"]
        assert {first["suite"], followup["suite"], standalone["suite"]} == {"followup"}
        assert first["question"] == p.first.question and standalone["question"] == p.standalone.question
        assert followup["tokens"]["history"] > 0
        assert first["tokens"]["history"] == standalone["tokens"]["history"] == 0
    rows = {r["id"]: r for r in f["rows"]}
    assert set(rows) == {p.id for p in pairs} | {p.id for p in near}
    assert all({"all_gold", "answer_any_gold"} <= set(rows[p.id]["followup"]) for p in pairs)
    # the standalone questions find their gold on this small corpus: a floor, not a fixed figure
    assert f["standalone"]["all_gold"]["rate"] >= 0.5
    row = next(r for r in report["combined"] if r["suite"] == "followup")
    assert row["pairs"] == len(pairs) and row["followup_all_gold"] == f["followup"]["all_gold"]
    titles = [t.title for t in suite_tables(report)]
    assert any(str(t).startswith("Follow-ups") for t in titles)
    assert "rows" not in suite_mod.strip_rows(report)["suites"]["followup"]
