"""The query path end to end on the sample corpus: real index, real models, the offline extractive generator."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path

import pytest

from rag.config import load_settings
from rag.pipeline import Pipeline, PipelineOptions, Question
from rag.types import Candidate, Principal

ALICE = Principal("alice", frozenset({"staff"}))
HANA = Principal("hana", frozenset({"staff", "hr"}))
TODAY = date(2026, 6, 1)


@pytest.fixture(scope="module")
def pipeline(sample_data_dir: Path, embedder) -> Pipeline:  # type: ignore[no-untyped-def]
    return Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder)


def ask(pipeline: Pipeline, text: str, who: Principal = ALICE, **kw: object) -> dict:  # type: ignore[type-arg]
    return pipeline.ask(Question(text, who, as_of=kw.pop("as_of", TODAY)), PipelineOptions(**kw)).to_json()  # type: ignore[arg-type]


def positions(result: dict, needle: str) -> list[int]:  # type: ignore[type-arg]
    return [e["n"] for e in result["evidence"] if needle.lower() in " ".join(e["text"].split()).lower()]


def test_rule_and_exception_are_adjacent_and_cited(pipeline: Pipeline) -> None:
    r = ask(
        pipeline,
        "A customer bought a gift card 10 days ago. It is inside the 45-day window, so can we refund it?",
    )
    rule = positions(r, "return items within 45 days of delivery")
    exception = positions(r, "Gift cards are not refundable")
    assert rule and exception, [e["text"][:60] for e in r["evidence"]]
    assert abs(rule[0] - exception[0]) == 1, "a rule travels with its exception"
    bundle = {e["n"]: e["bundle"] for e in r["evidence"]}
    assert bundle[rule[0]] == bundle[exception[0]]
    cited = {c["n"] for c in r["citations"] if c["valid"]}
    assert exception[0] in cited
    assert not r["abstained"]


@pytest.mark.parametrize("canary", ["CANARY-HR-7731", "salary band"])
def test_restricted_document_never_reaches_an_outsider(pipeline: Pipeline, canary: str) -> None:
    for question in (
        "What are the salary bands for level L3?",
        "What internal reference code do the pay grades use?",
    ):
        r = ask(pipeline, question)
        blob = json.dumps(r)
        assert "CANARY-HR-7731" not in blob
        assert all(
            "hr" not in (c.get("source") or "") or "salary" not in c["source"] for c in r["candidates"]
        )
        assert "salary-bands" not in blob
    allowed = ask(pipeline, "What are the salary bands for level L3?", HANA)
    assert any("salary-bands" in e["source"] for e in allowed["evidence"])


def test_expired_and_superseded_policies_are_never_used(pipeline: Pipeline) -> None:
    r = ask(pipeline, "How many days a week can I work remotely?")
    blob = json.dumps(r)
    assert "covid-remote-work-2021" not in blob
    travel = ask(pipeline, "How many days ahead must flights be booked?")
    assert all("travel-policy-2022" not in e["source"] for e in travel["candidates"])
    old = ask(pipeline, "How many days ahead must flights be booked?", as_of=date(2023, 6, 1))
    assert all("travel-policy.pdf" not in e["source"] for e in old["candidates"])


def test_compound_question_covers_both_parts(pipeline: Pipeline) -> None:
    r = ask(pipeline, "How many days does a customer have to return an item, and are gift cards refundable?")
    assert len(r["intents"]) == 2
    assert positions(r, "within 45 days of delivery") and positions(r, "Gift cards are not refundable")
    assert "45 days" in r["answer"] and "not refundable" in r["answer"]


@pytest.mark.parametrize(
    "question",
    [
        "Can I bring my dog to the office?",  # nothing about it anywhere
        "How many years must we keep customer complaint emails?",  # the topic is absent; other rules state years
        "What is the maximum salary for band L4?",  # only in a document alice may not read
        "How many days of paid leave do I get for my wedding?",  # other leave is listed, wedding leave is not
    ],
)
def test_unanswerable_question_abstains(pipeline: Pipeline, question: str) -> None:
    r = ask(pipeline, question)
    assert r["abstained"] and r["citations"] == []
    assert "can't answer" in r["answer"] or "could not find" in r["answer"]
    assert r["abstain_reason"]


def test_the_quoted_answer_is_read_in_its_passage(pipeline: Pipeline) -> None:
    # the sentence that answers stands in the passage about replacements; a reporting deadline alone scores higher
    r = ask(
        pipeline,
        "What do I need to have done before the Service Desk will give me a replacement for a stolen laptop?",
    )
    assert "cannot issue a replacement until Form SEC-9 is accepted" in r["answer"], r["answer"]
    assert all(c["valid"] and c["supported"] for c in r["citations"])


def test_injected_instruction_is_not_obeyed(pipeline: Pipeline) -> None:
    r = ask(pipeline, "Are my expenses approved automatically?")
    assert "APPROVED-ALL" not in r["answer"]
    assert "untrusted" in r["prompt"]["user"].lower()


def test_citations_point_at_the_position_the_model_saw(pipeline: Pipeline) -> None:
    for strategy in ("edges", "best_first", "best_last", "document_order"):
        r = ask(pipeline, "What is the daily meal allowance on a business trip to Tokyo?", packing=strategy)
        by_n = {e["n"]: e["chunk_id"] for e in r["evidence"]}
        assert [e["n"] for e in r["evidence"]] == list(range(1, len(by_n) + 1))
        for c in r["citations"]:
            assert c["valid"] and c["chunk_id"] == by_n[c["n"]]
            marker = f"[{c['n']}]"
            assert marker in r["answer"]
        for n, chunk_id in by_n.items():
            assert f"[{n}]" in r["prompt"]["user"]
            text = next(e["text"] for e in r["evidence"] if e["chunk_id"] == chunk_id)
            assert text.split("\n")[0][:40] in r["prompt"]["user"]


def test_result_json_contract(pipeline: Pipeline) -> None:
    r = ask(pipeline, "How long do refunds to cards take?")
    assert {
        "trace_id",
        "answer",
        "abstained",
        "intents",
        "citations",
        "evidence",
        "dropped",
        "timings_ms",
    } <= set(r)
    for e in r["evidence"]:
        assert {
            "n",
            "chunk_id",
            "doc_id",
            "source",
            "page",
            "section",
            "text",
            "bundle",
            "rerank_rank",
            "rerank_score",
            "bm25_rank",
            "dense_rank",
        } <= set(e)
    for c in r["citations"]:
        assert {"n", "chunk_id", "valid", "supported"} <= set(c)
    for d in r["dropped"]:
        assert {"chunk_id", "reason"} <= set(d)
    assert {"retrieve", "rerank", "pack", "generate", "total"} <= set(r["timings_ms"])
    first_bundle = r["evidence"][0]["bundle"]  # edge packing: the best passage's bundle comes first
    assert any(e["rerank_rank"] == 1 for e in r["evidence"] if e["bundle"] == first_bundle)


SAM = Principal("sam", frozenset({"staff", "security"}))
RANSOMWARE = (
    "Our team lead's laptop got ransomware. Who at Security Operations do we page, and on which extension?"
)


def test_a_form_named_in_a_rule_is_chained_to_its_deadline(pipeline: Pipeline) -> None:
    r = ask(
        pipeline,
        "How long after I get back from a business trip do I have to submit my travel expense claim?",
    )
    deadline = positions(r, "Form EXP-7 must be filed within 30 days")
    assert deadline, [e["text"][:60] for e in r["evidence"]]
    by_n = {e["n"]: e for e in r["evidence"]}
    bundle_id = by_n[deadline[0]]["bundle"]
    bundle = next(b for b in r["bundles"] if b["bundle_id"] == bundle_id)
    assert "chain" in bundle["reason"] or len(bundle["chunk_ids"]) > 1
    members = [e for e in r["evidence"] if e["bundle"] == bundle_id]
    namers = [e for e in members if "EXP-7" in e["text"] and e["doc_id"] != by_n[deadline[0]]["doc_id"]]
    assert namers, "the passage that names the form travels with the form's deadline"
    # chain order (the rule naming the form, then the form) is the bundle's; at an edge of the prompt the
    # bundle's best passage leads instead, and the prompt's order is its own
    order = bundle["chunk_ids"]
    assert max(order.index(e["chunk_id"]) for e in namers) < order.index(by_n[deadline[0]]["chunk_id"])
    if deadline[0] == 1:
        assert by_n[1]["rerank_score"] == max(e["rerank_score"] or 0.0 for e in members)
    else:
        assert max(e["n"] for e in namers) < deadline[0], "chain order in the middle of the prompt"
    ns = sorted(e["n"] for e in members)
    assert ns == list(range(ns[0], ns[0] + len(ns))), "a bundle is contiguous"
    assert [d for s in r["stages"] if s["name"] == "bundle" for d in s["detail"]["chains"]]


def test_follow_up_queries_never_cross_access_filters(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = pipeline.reader
    calls: list[tuple[object, list[str]]] = []
    search = reader.search

    def spy(query):  # type: ignore[no-untyped-def]
        legs = search(query)
        calls.append(
            (query.filt, [cid for hits in (legs.lexical, legs.dense, legs.fused or []) for cid, _ in hits])
        )
        return legs

    monkeypatch.setattr(reader, "search", spy)
    stolen = ask(
        pipeline,
        "What do I need to have done before the Service Desk will give me a replacement for a stolen laptop?",
    )
    assert stolen["hops"] and stolen["hops"][0]["queries"], "the question must exercise follow-up queries"
    assert len(calls) > len(stolen["intents"]), "follow-ups search through the same filtered legs"
    r = ask(pipeline, RANSOMWARE)
    # the bridge terms alice's passages name lead to no passage she may read: nothing is retrieved for them
    assert r["hops"][0].get("skipped") and not r["hops"][0]["queries"]
    for filt, ids in calls:
        assert filt.principal == ALICE  # type: ignore[attr-defined]
        for cid in ids:
            chunk = reader.get(cid)
            assert chunk is not None and "security" not in chunk.groups
    blob = json.dumps(r)
    assert "CANARY-SEC-4410" not in blob and "incident-escalation" not in blob
    # The same path reaches the runbook for someone allowed to read it: the filter, not luck, kept it out.
    assert "incident-escalation" in json.dumps(ask(pipeline, RANSOMWARE, SAM))


def test_every_hop_is_in_the_trace(pipeline: Pipeline) -> None:
    r = ask(
        pipeline, "Can I claim a $90 keyboard for my home office from the home-office equipment allowance?"
    )
    hop = r["hops"][0]
    assert hop["hop"] == 1 and hop["from"] and hop["stopped"]
    assert all({"term", "query", "from", "found", "best_score"} <= set(q) for q in hop["queries"])
    assert "hop_1" in r["timings_ms"]
    off = ask(
        pipeline,
        "Can I claim a $90 keyboard for my home office from the home-office equipment allowance?",
        max_hops=0,
    )
    assert off["hops"] == [] and "hop_1" not in off["timings_ms"]


class MisnumberingLLM:
    """A scripted model that answers with the right sentence but cites the passage after the one it read
    (the slip small models make), writing its ids in front of the sentence as they often do."""

    model = "misnumbering-test-model"
    max_tokens = 200

    def __init__(self, needle: str) -> None:
        self.needle = needle

    def complete(self, prompt, *, max_tokens=None, temperature=0.0):  # type: ignore[no-untyped-def]
        import re

        from rag.types import Generated

        blocks = re.split(r"\n(?=\[\d+\] )", prompt.user)
        n = next(int(b[1:].split("]", 1)[0]) for b in blocks[1:] if self.needle in " ".join(b.split()))
        wrong = n + 1 if n + 1 <= len(prompt.evidence_map) else n - 1
        return Generated(
            f"[{wrong}] Customers may return items within 45 days of delivery.\nSources: [{wrong}]",
            self.model,
            100,
            20,
        )


def test_an_llm_citation_that_points_at_the_wrong_passage_is_repaired_and_traced(
    sample_data_dir: Path,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    llm = MisnumberingLLM("return items within 45 days of delivery")
    p = Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder, llm=llm)
    r = ask(p, "How many days does a customer have to return an item for a full refund?")
    rule = positions(r, "return items within 45 days of delivery")
    assert rule and r["model"] == llm.model
    assert (
        r["answer"].splitlines()[0] == f"[{rule[0]}] Customers may return items within 45 days of delivery."
    )
    assert all(c["valid"] and c["supported"] for c in r["citations"])
    detail = next(s["detail"] for s in r["stages"] if s["name"] == "citations")
    assert detail["repairs"][0]["to"] == rule[0] and detail["repairs"][0]["from"] != rule[0]
    assert detail["model_answer"].startswith(
        f"[{detail['repairs'][0]['from']}]"
    )  # the model's own text is kept

    unrepaired = Pipeline(
        load_settings(data_dir=sample_data_dir, citation_repair=False), embedder=embedder, llm=llm
    )
    r = ask(unrepaired, "How many days does a customer have to return an item for a full refund?")
    assert not any(c["supported"] for c in r["citations"] if c["sentence"].startswith("["))


class RecordingSink:
    """A TraceSink (rag/protocols.py) that keeps what it is given."""

    def __init__(self) -> None:
        self.saved: list[dict] = []  # type: ignore[type-arg]

    def save_trace(self, trace: Mapping[str, object]) -> str:
        self.saved.append(dict(trace))
        return str(trace["trace_id"])


def test_each_answer_is_saved_once_as_its_json_and_abstains_for_the_reason_a_stage_gave(
    sample_data_dir: Path,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    sink = RecordingSink()
    p = Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder, trace_store=sink)
    result = p.ask(Question("How many days of paid leave do I get for my wedding?", ALICE, as_of=TODAY))
    assert sink.saved == [result.to_json()]
    # passages on paid leave clear the threshold; the answer-type stage finds none about a wedding
    assert result.abstained
    assert result.abstain_reason == 'no passage mentions "wedding"'
    detail = next(s.detail for s in result.stages if s.name == "answer_type")
    assert list(detail.values()) == [result.abstain_reason]


class OnlyRerank:
    """A Reranker (rag/protocols.py) with nothing but a name and ``rerank``: no ``support``, no calibrated
    ``abstain_threshold``. It keeps fusion order and records every query it is asked to rank for."""

    name = "only-rerank"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def rerank(self, question: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        from rag.models.rerankers import NoReranker

        self.queries.append(question)
        return NoReranker().rerank(question, candidates)


def test_the_query_path_needs_only_the_reranker_protocol(
    sample_data_dir: Path,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    reranker = OnlyRerank()
    p = Pipeline(load_settings(data_dir=sample_data_dir, max_hops=0), embedder=embedder, reranker=reranker)
    assert p.abstain_threshold == 0.0  # none calibrated: every passage may answer
    question = "How many days does a customer have to return an item, and are gift cards refundable?"
    r = ask(p, question)
    assert r["reranker"] == "only-rerank" and not r["abstained"]
    assert len(r["intents"]) == 2 and reranker.queries == [question]  # the whole question, once


def test_ablations_switch_off_one_mechanism_each(sample_data_dir: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    question = (
        "A customer bought a gift card 10 days ago. It is inside the 45-day window, so can we refund it?"
    )
    off = Pipeline(load_settings(data_dir=sample_data_dir, ablate="bundling,intents"), embedder=embedder)
    r = ask(off, question)
    assert {b["reason"] for b in r["bundles"]} == {"single"}  # no rule travels with its exception
    assert len(r["intents"]) == 1
    compound = ask(
        off, "How many days does a customer have to return an item, and are gift cards refundable?"
    )
    assert len(compound["intents"]) == 1
    wedding = "How many days of paid leave do I get for my wedding?"  # the check declines: no passage says "wedding"
    on = ask(Pipeline(load_settings(data_dir=sample_data_dir), embedder=embedder), wedding)
    assert on["abstained"] and "answer_type" in on["timings_ms"]
    no_types = Pipeline(load_settings(data_dir=sample_data_dir, ablate="answer_types"), embedder=embedder)
    off_types = ask(no_types, wedding)
    assert not off_types["abstained"] and "answer_type" not in off_types["timings_ms"]


def test_an_unknown_ablation_is_a_configuration_error() -> None:
    from rag.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="unknown mechanism 'rerank'"):
        load_settings(ablate="bundling,rerank")
    assert load_settings(ablate=" bundling ,").ablated == frozenset({"bundling"})


def test_the_reader_is_traced_and_the_badge_follows_it(pipeline: Pipeline) -> None:
    """The `read` stage gives every intent its best sentences with their probabilities, the answer quotes the best
    one first, and "Citations checked" (`verified`) is shown only where every intent's quote clears the reader's
    support bar (docs/reader.md)."""
    r = ask(pipeline, "How many days of annual leave do I get?")
    read = next(s["detail"] for s in r["stages"] if s["name"] == "read")
    assert read["answer_bar"] <= read["support_bar"] and len(read["intents"]) == len(r["intents"])
    top = read["intents"][0]["top"]
    assert (
        top
        and top[0]["p"] == read["intents"][0]["best"]
        and all(a["p"] >= b["p"] for a, b in zip(top, top[1:], strict=False))
    )
    # the first point of the answer is the excerpt around the best sentence, which the trace marks as its key
    first = r["excerpts"][0]
    assert " ".join(top[0]["sentence"].split()) in first["key"] and first["intents"] == [0]
    assert (
        r["answer"].splitlines()[0]
        == f"{first['heading']} \u2014 {' '.join(first['sentences'])} [{first['n']}]"
    )
    passage = next(e["text"] for e in r["evidence"] if e["n"] == first["n"])
    assert " ".join(passage[first["start"] : first["end"]].split()) == " ".join(first["sentences"])
    checks = r["answer_check"]["intents"]
    assert all(
        c["support"] is not None and c["supported"] == (c["support"] >= read["support_bar"]) for c in checks
    )
    assert r["verified"] == (r["answer_check"]["complete"] and r["verification"]["verified"])
    if not all(c["supported"] for c in checks):
        assert not r["verified"]


def test_without_the_reader_the_query_path_answers_as_before(sample_data_dir: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    plain = Pipeline(load_settings(data_dir=sample_data_dir, ablate="reader"), embedder=embedder)
    r = ask(plain, "How many days of annual leave do I get?")
    assert plain.reader_model is None and "read" not in {s["name"] for s in r["stages"]}
    assert "25 days" in r["answer"] and all(c.get("support") is None for c in r["answer_check"]["intents"])


def test_a_follow_up_is_searched_and_answered_as_the_question_it_stands_for(pipeline: Pipeline) -> None:
    first = "What is the daily meal allowance for domestic travel?"
    history = (("user", first), ("assistant", ask(pipeline, first)["answer"]))
    r = pipeline.ask(Question("and what about for international trips?", ALICE, as_of=TODAY, history=history))
    j = r.to_json()
    # what the user typed stays the question; the standalone form is what was searched and answered
    assert j["question"] == "and what about for international trips?"
    assert j["standalone"]["rewritten"] and j["standalone"]["previous"] == first
    assert "international" in j["standalone"]["question"] and "domestic" not in j["standalone"]["question"]
    assert [i["text"] for i in j["intents"]] == [j["standalone"]["question"]]
    assert "destination city" in j["answer"], j["answer"]
    assert any(s["name"] == "standalone" for s in j["stages"])


def test_a_question_without_a_conversation_is_not_rewritten(pipeline: Pipeline) -> None:
    j = ask(pipeline, "and what about for international trips?")
    assert j["standalone"] == {
        "asked": "and what about for international trips?",
        "question": "and what about for international trips?",
        "rewritten": False,
        "method": "none",
        "previous": None,
        "reason": "no earlier question",
        "replaced": [],
    }
