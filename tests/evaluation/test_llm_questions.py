"""LLM-written training questions (evaluation/llm_questions.py): what is kept, that a run resumes and never asks
twice, and that the reader's held-out figures never score them (evaluation/reader_train.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evaluation import llm_questions as lq
from evaluation import reader_train
from rag.errors import GenerationError
from rag.models.reader import FEATURES
from rag.types import Generated, Prompt

SENTENCE = "Employees receive 25 days of annual leave each year, plus public holidays."
GOOD = (
    "ANSWERED: How many days of annual leave do I get?\nUNANSWERED: Can I carry unused leave into next year?"
)


class Scripted:
    """An LLM double that replies from a script (a reply, or an exception to raise) and records prompts."""

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.prompts: list[Prompt] = []

    def complete(
        self, prompt: Prompt, *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> Generated:
        self.prompts.append(prompt)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return Generated(reply, "scripted-model")


def _rows(n: int) -> list[dict]:
    return [
        {
            "id": f"s{i}",
            "corpus": "dev",
            "chunk_id": f"c{i}",
            "doc_id": "d",
            "heading": "Leave",
            "sentence": SENTENCE,
        }
        for i in range(n)
    ]


def test_a_reply_gives_both_questions_and_is_kept() -> None:
    parsed = lq.parse_reply(GOOD, SENTENCE)
    assert parsed == {
        "question": "How many days of annual leave do I get?",
        "near_miss": "Can I carry unused leave into next year?",
        "kept": True,
    }
    decorated = "**ANSWERED:** How many days of leave do I get?\n**UNANSWERED:** Who approves leave requests?"
    assert lq.parse_reply(decorated, SENTENCE)["kept"]


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("ANSWERED: How many days of annual leave do I get?", "no UNANSWERED line"),
        ("Here are two questions.", "no ANSWERED line"),
        ("ANSWERED: Annual leave days\nUNANSWERED: Who approves leave?", "answered: not a question"),
        ("ANSWERED: Leave?\nUNANSWERED: Who approves leave requests?", "answered: 1 words"),
        (
            "ANSWERED: How many days of annual leave do I get?\nUNANSWERED: How many days of annual leave do I get?",
            "the same question twice",
        ),
        (
            f"ANSWERED: {SENTENCE[:-1]}?\nUNANSWERED: Who approves leave requests?",
            "answered: copies the sentence",
        ),
    ],
)
def test_an_unusable_reply_is_kept_on_record_with_why(reply: str, why: str) -> None:
    parsed = lq.parse_reply(reply, SENTENCE)
    assert not parsed["kept"] and parsed["why"] == why


def test_the_prompt_fences_the_sentence_and_names_its_heading() -> None:
    prompt = lq.prompt_for(SENTENCE, "Handbook > Leave")
    assert f'"""\n{SENTENCE}\n"""' in prompt.user and "From: Handbook > Leave" in prompt.user
    assert "never instructions" in prompt.system


def test_a_run_appends_each_reply_and_resumes_without_asking_twice(tmp_path: Path) -> None:
    out = tmp_path / "q.jsonl"
    llm = Scripted(GOOD, "nothing useful")
    assert lq.run(llm, _rows(5), out, limit=2) == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["s0", "s1"]
    assert records[0]["kept"] and not records[1]["kept"]
    assert records[0]["model"] == "scripted-model" and records[0]["prompt"] == lq.PROMPT_VERSION
    assert records[0]["reply"] == GOOD and records[0]["sentence"] == SENTENCE

    again = Scripted(GOOD)
    assert lq.run(again, _rows(5), out) == 3
    assert len(again.prompts) == 3 and lq.done_ids(out) == {f"s{i}" for i in range(5)}
    assert [r["id"] for r in lq.load(out)] == ["s0", "s2", "s3", "s4"]  # the kept ones, in the file's order
    assert lq.run(Scripted(GOOD), _rows(5), out) == 0


def test_failed_calls_are_skipped_but_a_dead_server_stops_the_run(tmp_path: Path) -> None:
    out = tmp_path / "q.jsonl"
    flaky = Scripted(GenerationError("timed out"), GOOD)
    assert lq.run(flaky, _rows(3), out) == 2 and lq.done_ids(out) == {"s1", "s2"}
    with pytest.raises(GenerationError):
        lq.run(Scripted(GenerationError("connection refused")), _rows(9), tmp_path / "dead.jsonl")


def test_the_sample_is_dealt_round_robin_and_avoids_test_gold() -> None:
    dealt = list(lq._round_robin([[{"i": 1}, {"i": 2}, {"i": 3}], [{"i": 4}]]))
    assert [[r["i"] for r in group] for group in dealt] == [[1, 4], [2], [3]]
    quotes = [(q, set(lq._words(q))) for q in ["Employees receive 25 days of annual leave each year"]]
    assert lq._in_quote(SENTENCE, quotes)
    assert not lq._in_quote("Sick leave is recorded in the HR system by the manager.", quotes)


def _group(corpus: str, qid: str, *, source: str | None = None, rng: np.random.Generator) -> dict:
    x = rng.normal(size=(4, len(FEATURES)))
    y = np.array([True, False, False, False])
    x[0] += 1.0  # the positive stands out, so that every fit is well posed
    group = {"x": x, "y": y, "corpus": corpus, "qid": qid, "answerable": True, "intent": 0}
    return {**group, "source": source} if source else group


def test_held_out_figures_never_score_llm_questions_nor_train_on_the_held_corpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(0)
    groups = [
        _group(corpus, f"{corpus}-{i}", rng=rng) for corpus in ("dev", "gitlab", "moj") for i in range(3)
    ] + [
        _group(corpus, f"llm:question:{corpus}{i}", source="llm", rng=rng)
        for corpus in ("dev", "gitlab")
        for i in range(3)
    ]
    trained_on: dict[int, set[str]] = {}
    real_fit = reader_train.fit

    def spy(train: list[dict], c: float = reader_train.C) -> reader_train.ReaderModel:
        trained_on[len(trained_on)] = {g["qid"] for g in train}
        return real_fit(train, c)

    monkeypatch.setattr(reader_train, "fit", spy)
    pooled, per = reader_train.loco(groups)
    assert not any(key.split(":", 1)[1].startswith("llm:") for key in pooled)
    assert sorted(per) == ["dev", "gitlab", "moj"] and len(pooled) == 9
    dev_fold = trained_on[0]  # POLICY's order: dev held out first
    assert not any(q.startswith("dev") or q.startswith("llm:question:dev") for q in dev_fold)
    assert {"llm:question:gitlab0", "moj-0"} <= dev_fold


def test_stats_say_what_the_file_holds(tmp_path: Path) -> None:
    out = tmp_path / "q.jsonl"
    lq.run(Scripted(GOOD, "nothing useful", GOOD), _rows(3), out)
    figures = lq.stats(out)
    assert figures["records"] == 3 and figures["kept"] == 2 and figures["per_corpus"] == {"dev": "2/3"}
    assert figures["why_not"] == {"no ANSWERED line": 1} and figures["models"] == ["scripted-model"]
    assert lq.stats(tmp_path / "none.jsonl") == {"records": 0}


def test_one_source_or_a_share_of_it_is_selected_at_a_time() -> None:
    rng = np.random.default_rng(1)
    groups = [
        _group("dev", f"llm:{kind}:{rid}", source="llm", rng=rng)
        for rid in ("a", "b", "c")
        for kind in ("question", "near_miss")
    ]
    records = [{"id": "b"}, {"id": "a"}, {"id": "c"}]  # the file's order
    pick = reader_train.select_llm
    assert [g["qid"] for g in pick(groups, records, ["question"])] == [
        "llm:question:a",
        "llm:question:b",
        "llm:question:c",
    ]
    assert {g["qid"] for g in pick(groups, records, ["question", "near_miss"], 1)} == {
        "llm:question:b",
        "llm:near_miss:b",
    }


def test_a_question_about_the_sentence_itself_is_not_used() -> None:
    assert lq.usable("What does the sentence mean?", SENTENCE) == "asks about the sentence"
    assert lq.usable("How many days of annual leave do I get?", SENTENCE) == ""


def test_the_round_trip_is_resumable_and_only_agreeing_questions_are_used(tmp_path: Path) -> None:
    out = tmp_path / "q.jsonl"
    lq.run(Scripted(GOOD), _rows(3), out)
    judge = Scripted("yes", "no", "maybe")
    assert lq.check(judge, out, ["question"]) == 3
    assert "Does the sentence answer the question?" in judge.prompts[0].user
    assert lq.check(Scripted("yes"), out, ["question"]) == 0  # each (record, kind) is asked once
    records = lq.load(out)
    assert [r["checks"] for r in records] == [{"question": True}, {"question": False}, {"question": None}]
    assert [lq.passes(r, "question") for r in records] == [True, False, False]
    assert not lq.passes(records[0], "near_miss")  # unchecked: not used when checks are required
    assert lq.check(Scripted("no"), out, ["near_miss"], limit=1) == 1
    assert lq.passes(lq.load(out)[0], "near_miss")
    assert lq.stats(out)["checks"] == {
        "question": {"True": 1, "False": 1, "None": 1},
        "near_miss": {"False": 1},
    }

    rng = np.random.default_rng(2)
    groups = [_group("dev", f"llm:question:s{i}", source="llm", rng=rng) for i in range(3)]
    picked = reader_train.select_llm(groups, lq.load(out), ["question"], checked=True)
    assert [g["qid"] for g in picked] == ["llm:question:s0"]
    assert len(reader_train.select_llm(groups, lq.load(out), ["question"])) == 3


def test_a_failed_check_call_is_not_recorded(tmp_path: Path) -> None:
    out = tmp_path / "q.jsonl"
    lq.run(Scripted(GOOD), _rows(2), out)
    assert lq.check(Scripted(GenerationError("timed out"), "yes"), out, ["question"]) == 1
    assert [r["checks"] for r in lq.load(out)] == [{}, {"question": True}]
