"""A real bridge question end to end: the answer's passage names nothing the question names."""

from __future__ import annotations

import json

import pytest

from rag.config import load_settings
from rag.pipeline import Pipeline, PipelineOptions, Question
from rag.types import Principal

QUESTION = (
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"
)
DOCS = {
    "Kiss and Tell (1945 film)": "Kiss and Tell is a 1945 American comedy film starring then 17-year-old Shirley "
    "Temple as Corliss Archer. In the film, two teenage girls cause their respective parents much concern when "
    "they start to become interested in boys.",
    "Shirley Temple": "Shirley Temple Black was an American actress, singer, dancer, businesswoman, and diplomat "
    "who was Hollywood's number one box-office draw as a child actress from 1935 to 1938. As an adult, she was "
    "named United States ambassador to Ghana and to Czechoslovakia and also served as Chief of Protocol.",
    "Kiss and Tell (play)": "Kiss and Tell is a 1943 Broadway comedy play by F. Hugh Herbert about the teenager "
    "Corliss Archer and her family.",
    "Meet Corliss Archer": "Meet Corliss Archer is an American radio sitcom about a teenage girl, broadcast from "
    "1943 to 1956, later adapted for television.",
    "Corliss Archer": "Corliss Archer is a fictional teenage girl created by the writer F. Hugh Herbert in a "
    "series of short stories.",
    "Civil service": "A government position in the civil service is an office held by a person appointed to work "
    "for the government.",
    "A Kiss for Corliss": "A Kiss for Corliss is a 1949 American comedy film, the sequel to the 1945 film Kiss "
    "and Tell, in which the woman who plays Corliss returns.",
}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, embedder) -> Pipeline:  # type: ignore[no-untyped-def]
    from ingest.indexer import ingest

    root = tmp_path_factory.mktemp("bridge")
    corpus = root / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"_id": f"b{i}", "title": t, "text": x}) + "\n"
            for i, (t, x) in enumerate(DOCS.items())
        )
    )
    settings = load_settings(data_dir=root / "data")
    assert ingest([str(corpus)], settings, embedder=embedder).ok
    return Pipeline(settings, embedder=embedder)


def ask(pipeline: Pipeline, hops: int) -> dict:  # type: ignore[type-arg]
    options = PipelineOptions(evidence_k=2, max_hops=hops, use_llm=False)
    return pipeline.ask(Question(QUESTION, Principal("u", frozenset())), options).to_json()


def test_the_second_hop_finds_the_bridged_passage_and_bundles_the_chain(pipeline: Pipeline) -> None:
    without = ask(pipeline, 0)
    assert "Shirley Temple" not in [e["title"] for e in without["evidence"]], "one hop cannot find her"
    r = ask(pipeline, 1)
    titles = [e["title"] for e in r["evidence"]]
    assert titles == ["Kiss and Tell (1945 film)", "Shirley Temple"], (
        "chain order: the film, then the actress"
    )
    assert len({e["bundle"] for e in r["evidence"]}) == 1 and r["bundles"][0]["reason"] == "chain"
    temple = r["evidence"][1]
    assert temple["hop"] == 1 and temple["added_by"] == "hop_1:Shirley Temple"
    linked = r["hops"][0]["linked"]
    assert [(lk["term"], lk["moved"]) for lk in linked] == [("Shirley Temple", True)]
    assert any(d["reason"].startswith("replaced_by_chain_link:") for d in r["dropped"])


def test_the_terminal_view_says_what_each_hop_followed(pipeline: Pipeline) -> None:
    from rag.traces.render import hop_lines

    lines = hop_lines(ask(pipeline, 1))
    assert len(lines) == 1 and "'Shirley Temple'" in lines[0] and "linked Shirley Temple" in lines[0]
    assert hop_lines(ask(pipeline, 0)) == []
