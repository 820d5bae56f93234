"""The admin views' pure parts: escaping, the trace explorer's numbers in words, replay defaults, documents told
apart, and refusals for access told from knowledge gaps (no Streamlit run, no model)."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from rag.types import Principal
from ui import analytics, trace_view
from ui.components import escape_md

JOINER = "\u2060"


# ----------------------------------------------------------------------------- escaping
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("**bold** [link](x) $5", r"\*\*bold\*\* \[link\]\(x\) \$5"),
        ("![img](y) <b>t</b> a&amp;b", r"\!\[img\]\(y\) \<b\>t\</b\> a\&amp;b"),
        ("Title\n===", "Title\n\\=\\=\\="),
        ("see http://h/x", f"see http:{JOINER}//h/x"),
        ("www.Example.com", f"www{JOINER}\\.Example\\.com"),
        ("WWW.x.org", f"WWW{JOINER}\\.x\\.org"),
        ("mail bob@x.org", f"mail bob{JOINER}@x\\.org"),
        (
            ":smile: :material/warning: :red[x]",
            f":{JOINER}smile: :{JOINER}material/warning: :{JOINER}red\\[x\\]",
        ),
        ("Note: at 10:30", f"Note: at 10:{JOINER}30"),
        ("Plain words stay as they are", "Plain words stay as they are"),
    ],
)
def test_escape_md_leaves_no_markup(text: str, expected: str) -> None:
    assert escape_md(text) == expected


def test_escape_md_shows_the_text_as_written() -> None:
    """Without the escapes and the invisible joiners, the text is what was typed."""
    text = (
        "**b** [l](http://127.0.0.1:9/l) ![i](http://x/i.png) <img src=x> www.a.com a@b.co :smile: #h | ~s~"
    )
    shown = escape_md(text).replace(JOINER, "")
    assert pd.Series([shown]).str.replace(r"\\(.)", r"\1", regex=True)[0] == text


# ----------------------------------------------------------------------------- the trace explorer
def _evidence(
    n: int, chunk: str, *, rank: int | None, added_by: str | None = None, **more: Any
) -> dict[str, Any]:
    return {
        "n": n,
        "chunk_id": chunk,
        "doc_id": "travel",
        "title": "Travel Policy",
        "page": 2,
        "page_end": 2,
        "section": "5. Meals",
        "text": f"  Passage {n}\n  text  ",
        "rerank_rank": rank,
        "rerank_score": more.get("score"),
        "bm25_rank": more.get("bm25"),
        "dense_rank": rank,
        "bundle": 0,
        "cited": n == 1,
        "added_by": added_by,
    }


def _trace(**changes: Any) -> dict[str, Any]:
    evidence = [
        _evidence(1, "a", rank=1, score=0.9934, bm25=2),
        _evidence(2, "b", rank=2, score=0.000264),
        _evidence(3, "c", rank=None, added_by="neighbour_of:a"),
        _evidence(4, "d", rank=None, added_by="exception_of:b"),
        _evidence(5, "e", rank=5, added_by="hop_1:Expense Policy"),
    ]
    base: dict[str, Any] = {
        "trace_id": "t1",
        "packing": "edges",
        "evidence": evidence,
        "budgets": {
            "evidence_k": 3,
            "evidence_token_budget": 1500,
            "evidence_tokens": 1251,
            "history_token_budget": 400,
            "history_tokens": 0,
            "facts": 0,
        },
        "tokens": {"prompt": 0, "completion": 0, "evidence": 1251, "history": 0},
        "stages": [
            {"name": "budget", "ms": 0.1, "detail": {"selected": 3, "k": 3, "token_budget": 1500}},
            {"name": "bundle", "ms": 1.0, "detail": {"bundles": 2, "added": ["c", "d"]}},
        ],
    }
    return {**base, **changes}


def test_passage_count_says_what_the_numbers_are() -> None:
    assert trace_view.passage_count(_trace()) == "5 passages: 3 chosen (k=3) plus 2 bundled with them"
    alone = _trace(
        stages=[
            {"name": "budget", "ms": 0, "detail": {"selected": 5}},
            {"name": "bundle", "ms": 0, "detail": {"added": []}},
        ]
    )
    assert trace_view.passage_count(alone) == "5 passages: 5 chosen (k=3)"
    # bundling left some out to fit the budget: the numbers do not add up, and the sentence says so
    cut = _trace(
        stages=[
            {"name": "budget", "ms": 0, "detail": {"selected": 4}},
            {"name": "bundle", "ms": 0, "detail": {"added": ["c", "d"]}},
        ]
    )
    assert "the budget chose 4, bundling added 2 and left out some" in trace_view.passage_count(cut)
    # an older trace without the stage details: what bundling added is read from the evidence
    assert (
        trace_view.passage_count(_trace(stages=[])) == "5 passages: 3 chosen (k=3) plus 2 bundled with them"
    )
    assert trace_view.passage_count(_trace(evidence=[])) == "No passage reached the prompt (k=3)"


def test_budgets_read_as_a_sentence() -> None:
    text = trace_view.budget_sentence(_trace())
    assert text.startswith("The evidence took 1,251 of its 1,500 tokens (5 passages: 3 chosen (k=3) plus 2")
    assert "No conversation history was sent (its budget: 400)." in text
    assert "No language model was called" in text and "{" not in text
    used = trace_view.budget_sentence(
        _trace(
            budgets={**_trace()["budgets"], "history_tokens": 120, "facts": 1},
            tokens={"prompt": 2100, "completion": 85, "evidence": 1251, "history": 120},
        )
    )
    assert "The conversation so far took 120 of its 400 tokens." in used
    assert "1 remembered fact went with the question." in used
    assert "read 2,100 prompt tokens and wrote 85." in used


def test_evidence_table_puts_the_passage_first_and_leaves_missing_values_blank() -> None:
    frame = trace_view.evidence_frame(_trace())
    assert list(frame.columns)[:2] == ["passage", "source"]
    assert frame["passage"][0] == "Passage 1 text"  # whitespace folded, so a wrapped cell reads as prose
    assert frame["source"][0] == "Travel Policy, p. 2, 5. Meals"
    assert list(frame["added"]) == ["", "", "neighbour of [1]", "exception of [2]", "hop 1: Expense Policy"]
    assert frame["rerank rank"].isna().tolist() == [
        False,
        False,
        True,
        True,
        False,
    ]  # shown blank, not "None"
    assert str(frame["rerank rank"].dtype) == "Int64" and str(frame["rerank score"].dtype) == "Float64"
    # three significant digits: a small probability is not "0.000"
    assert trace_view.SCORE_FORMAT % 0.000264 == "0.000264" and trace_view.SCORE_FORMAT % 0.9934 == "0.993"
    assert trace_view.evidence_frame(_trace(evidence=[])).empty


def test_replay_starts_from_the_traces_own_settings() -> None:
    settings = SimpleNamespace(packing="best_first", evidence_k=6, evidence_token_budget=1800)
    assert trace_view.replay_defaults(_trace(), settings) == ("edges", 3, 1500)
    odd = _trace(packing="retired-strategy", budgets={})
    assert trace_view.replay_defaults(odd, settings) == ("best_first", 6, 1800)


# ----------------------------------------------------------------------------- analytics
DOCS: dict[str, dict[str, Any]] = {
    "travel-new": {"title": "Travel Policy", "source": "pdfs/travel-policy.pdf", "effective": "2025-01-01"},
    "travel-old": {
        "title": "Travel Policy",
        "source": "pdfs/travel-policy-2022.pdf",
        "effective": "2022-01-01",
        "expires": "2024-12-31",
    },
    "salary": {"title": "Salary Bands", "source": "pdfs/salary-bands.pdf", "groups": ["hr"]},
    "incidents": {"title": "Incident Runbook", "source": "pdfs/incidents.pdf", "groups": ["security"]},
    "leave": {"title": "Leave Policy", "source": "pdfs/leave.pdf", "effective": "2027-01-01"},
}
TODAY = date(2026, 12, 1)


def test_documents_that_share_a_title_are_told_apart() -> None:
    frame = analytics.documents_frame(DOCS, {"travel-new": {"title": "Travel Policy", "answers": 3}}, TODAY)
    rows = frame.set_index("doc id")
    assert rows.loc["travel-new", "document"] == "Travel Policy \u00b7 travel-policy.pdf"
    assert rows.loc["travel-old", "document"] == "Travel Policy \u00b7 travel-policy-2022.pdf \u00b7 expired"
    assert rows.loc["travel-old", "status"] == "expired" and rows.loc["travel-old", "valid"] == (
        "2022-01-01 to 2024-12-31"
    )
    assert (
        rows.loc["leave", "status"] == "not yet in force" and rows.loc["leave", "valid"] == "from 2027-01-01"
    )
    assert frame["document"].is_unique
    cited = set(frame[frame["answers citing it"] > 0]["document"])
    never = set(frame[frame["answers citing it"] == 0]["document"])
    assert cited == {"Travel Policy \u00b7 travel-policy.pdf"} and not cited & never
    gone = analytics.documents_frame(
        {}, {"old": {"title": "Old", "source": "x/old.pdf", "answers": 1}}, TODAY
    )
    assert gone["document"][0] == "Old \u00b7 old.pdf \u00b7 no longer indexed" and not gone["indexed"][0]


class _Ask:
    """A stand-in for the pipeline: answers from the documents the principal may read, as a trace dict."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers  # question -> the doc id that answers it
        self.calls: list[tuple[str, Principal, date | None, frozenset[str]]] = []

    def __call__(
        self, question: str, who: Principal, as_of: date | None, tags: frozenset[str]
    ) -> dict[str, Any]:
        self.calls.append((question, who, as_of, tags))
        doc = self.answers.get(question)
        groups = set(DOCS.get(doc or "", {}).get("groups") or ["*"])
        if doc is None or not groups & who.readable_groups:
            return {"abstained": True, "evidence": []}
        return {
            "abstained": False,
            "evidence": [{"doc_id": doc, "cited": True}, {"doc_id": "leave", "cited": False}],
        }


def _gap(question: str, **more: Any) -> dict[str, Any]:
    return {
        "trace_id": more.get("trace_id", question[:8]),
        "question": question,
        "user": "alice",
        "groups": ["staff"],
        "as_of": "2026-11-30",
        "tags": [],
        "abstained": True,
        **more,
    }


def test_an_abstention_a_restricted_document_answers_is_a_refusal_for_access() -> None:
    ask = _Ask({"What is the salary band for a senior engineer?": "salary"})
    salary = _gap("What is the salary band for a senior engineer?", trace_id="s1")
    assert analytics.needed_documents(salary, DOCS, ask) == ("salary",)
    question, who, as_of, tags = ask.calls[0]
    assert who.user == "alice" and who.groups == {"staff", "hr", "security"}  # every withheld group added
    assert as_of == date(2026, 11, 30) and tags == frozenset()

    # no policy answers it, even with every group: a knowledge gap
    assert analytics.needed_documents(_gap("Can I bring my dog to work?"), DOCS, ask) == ()
    # rated down but answered, or asked by someone who may read everything: never asked again
    calls = len(ask.calls)
    assert analytics.needed_documents(_gap("x", abstained=False), DOCS, ask) == ()
    everyone = _gap("What is the salary band for a senior engineer?", groups=["hr", "security"])
    assert analytics.needed_documents(everyone, DOCS, ask) == ()
    assert len(ask.calls) == calls

    frame = analytics.refusals_frame(
        [salary, _gap("Can I bring my dog to work?")], {"s1": ("salary",)}, DOCS, TODAY
    )
    assert list(frame["question"]) == ["What is the salary band for a senior engineer?"]
    assert frame["answered by"][0] == "Salary Bands \u00b7 salary-bands.pdf" and frame["groups"][0] == "staff"


def test_an_answer_citing_only_readable_documents_is_not_a_refusal() -> None:
    """The asker's own documents answered on the second try (e.g. the index changed): still not about access."""
    ask = _Ask({"When does the travel policy apply?": "travel-new"})
    assert analytics.needed_documents(_gap("When does the travel policy apply?"), DOCS, ask) == ()
