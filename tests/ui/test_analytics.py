"""Knowledge gaps for admins: topics from real MiniLM embeddings, the figures, and the Analytics page."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rag.config import load_settings
from rag.tracestore import TraceFilter
from tests.ui.test_pages import open_app
from ui import analytics

QUESTIONS = [
    "Can I bring my dog to the office?",
    "Are pets allowed at work?",
    "Is my dog allowed in the office on Fridays?",
    "Where can I park my car?",
    "Is there staff parking at the office?",
    "Do we get a parking permit?",
    "Can I expense crypto purchases?",
    "Are bitcoin expenses reimbursed?",
    "What is the parental leave for fathers?",
]


def _gaps(questions: list[str]) -> list[dict]:
    return [
        {
            "trace_id": f"t{i}",
            "question": q,
            "abstained": i % 2 == 0,
            "feedback": None if i % 2 == 0 else "down",
            "feedback_reason": None if i % 2 == 0 else "did_not_answer",
            "channel": "api" if i % 3 == 0 else "ui",
        }
        for i, q in enumerate(questions)
    ]


def test_gap_questions_group_by_topic_with_minilm(embedder) -> None:  # type: ignore[no-untyped-def]
    topics = analytics.group_gaps(_gaps(QUESTIONS), embedder.embed_queries)
    groups = [set(t.examples) for t in topics]
    assert [t.count for t in topics] == [3, 3, 2, 1]
    assert set(QUESTIONS[0:3]) in groups and set(QUESTIONS[3:6]) in groups and set(QUESTIONS[6:8]) in groups
    pets = next(t for t in topics if "dog" in t.terms)
    assert pets.abstained == 2 and pets.down_votes == 1 and pets.reasons == {"did_not_answer": 1}
    assert pets.label in QUESTIONS[0:3] and pets.examples[0] == pets.label
    assert pets.channels == {"api": 1, "ui": 2}  # API questions count in the gaps, by channel
    frame = analytics.topics_frame(topics)
    assert list(frame["questions"]) == [3, 3, 2, 1]
    assert "api 1, ui 2" in list(frame["channels"])


def test_questions_by_channel_with_their_abstention_rate() -> None:
    frame = analytics.channels_frame(
        [
            {"channel": "api", "questions": 4, "abstained": 1, "thumbs_up": 2, "thumbs_down": 0},
            {"channel": "unrecorded", "questions": 0, "abstained": 0, "thumbs_up": 0, "thumbs_down": 0},
        ]
    )
    assert list(frame["channel"]) == ["API (api)", "unrecorded"]
    assert list(frame["abstention rate"]) == [0.25, 0.0]


def test_repeated_questions_are_embedded_once_and_counted(embedder) -> None:  # type: ignore[no-untyped-def]
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return embedder.embed_queries(texts)

    gaps = _gaps(["Where can I park my car?", "where can i  park my car?", "Can I expense crypto purchases?"])
    topics = analytics.group_gaps(gaps, embed)
    assert len(calls) == 1 and len(calls[0]) == 2
    assert [t.count for t in topics] == [2, 1]
    assert analytics.group_gaps([], embed) == []


def test_cluster_labels_number_topics_biggest_first() -> None:
    vectors = np.array([[1, 0], [0, 1], [0.05, 1], [0.02, 1.0], [1, 0.03]], dtype=float)
    assert analytics.cluster_labels(vectors).tolist() == [1, 0, 0, 0, 1]
    assert analytics.cluster_labels(np.zeros((0, 2))).tolist() == []
    assert analytics.cluster_labels(np.ones((1, 2))).tolist() == [0]


def test_totals_rates_and_documents() -> None:
    days = [
        {
            "day": "2025-03-01",
            "questions": 4,
            "abstained": 1,
            "failed_citations": 2,
            "errors": 0,
            "thumbs_up": 1,
            "thumbs_down": 2,
        },
        {
            "day": "2025-03-02",
            "questions": 6,
            "abstained": 2,
            "failed_citations": 0,
            "errors": 1,
            "thumbs_up": 0,
            "thumbs_down": 1,
        },
    ]
    t = analytics.totals(days)
    assert t["questions"] == 10 and t["abstention_rate"] == pytest.approx(0.3)
    assert t["failed_citation_rate"] == pytest.approx(0.2) and t["thumbs_down"] == 3
    assert analytics.totals([])["abstention_rate"] == 0.0
    frame = analytics.daily_frame(days)
    assert list(frame["abstention_rate"]) == pytest.approx([0.25, 1 / 3])

    docs = analytics.documents_frame(
        {"a": {"title": "Refunds"}, "b": {"title": "Travel"}, "c": {"title": "Leave"}},
        {
            "b": {"title": "Travel", "answers": 5},
            "a": {"title": "Refunds", "answers": 2},
            "gone": {"title": "Old policy", "answers": 1},
        },
    )
    assert list(docs["doc id"]) == ["b", "a", "gone", "c"]
    assert list(docs["indexed"]) == [True, True, False, True]
    never = docs[(docs["answers citing it"] == 0) & docs["indexed"]]
    assert list(never["document"]) == ["Leave"]
    assert docs.set_index("doc id").loc["gone", "status"] == "no longer indexed"


# ----------------------------------------------------------------------------- the page
SALARY_Q = "What is the salary band for a senior engineer?"
MEALS_Q = "What is the daily meal allowance for international trips?"


def test_analytics_page_for_an_admin(monkeypatch: pytest.MonkeyPatch, ui_data_dir: Path) -> None:
    from rag.tracestore import TraceStore

    at = open_app(monkeypatch, ui_data_dir, "sam")
    at.chat_input(key="chat_input").set_value("What is the airspeed velocity of an unladen swallow?").run()
    at.chat_input(key="chat_input").set_value("How many days does a customer have to return an item?").run()
    store = TraceStore.from_settings(load_settings(data_dir=ui_data_dir))
    answered = next(r for r in store.traces.list(TraceFilter(user="sam"), limit=5) if not r["abstained"])
    store.feedback.set(answered["trace_id"], "sam", "down", reason="outdated")
    # alice (staff) asks what only hr's Salary Bands answer, and what the Travel Policy in force answers
    at = open_app(monkeypatch, ui_data_dir, "alice")
    at.chat_input(key="chat_input").set_value(SALARY_Q).run()
    at.chat_input(key="chat_input").set_value(MEALS_Q).run()
    salary = next(
        r for r in store.traces.list(TraceFilter(user="alice"), limit=20) if r["question"] == SALARY_Q
    )
    assert salary["abstained"]
    stored = store.traces.count()

    at = open_app(monkeypatch, ui_data_dir, "olga")
    at.switch_page("views/analytics.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Analytics"]
    metrics = {m.label: m.value for m in at.metric}
    assert int(metrics["Questions"]) >= 2
    assert metrics["Abstention rate"].endswith("%") and int(metrics[":material/thumb_down: Not helpful"]) >= 1
    channels = next(d.value for d in at.dataframe if "channel" in d.value.columns)
    assert int(channels.set_index("channel").loc["chat page (ui)", "questions"]) >= 4  # the chat page's own
    topics = next(d.value for d in at.dataframe if "topic" in d.value.columns)
    assert "How many days does a customer have to return an item?" in " ".join(topics["examples"])
    assert "ui " in " ".join(topics["channels"])
    assert topics["questions"].sum() >= 2
    labels = {b.proto.label for b in at.get("download_button")}
    assert {"Daily figures (CSV)", "Topics (CSV)", "Every such question (CSV)", "Documents (CSV)"} <= labels
    charts = [n for n in at._tree if getattr(n, "type", None) in ("arrow_vega_lite_chart", "vega_lite_chart")]
    assert len(charts) >= 4  # per day, rates, topics, reasons

    # The salary question is a refusal for access (hr's Salary Bands answers it), not a knowledge gap.
    refused = next(d.value for d in at.dataframe if "answered by" in d.value.columns)
    row = refused[refused["question"] == SALARY_Q]
    assert len(row) >= 1 and set(row["user"]) == {"alice"}
    assert all("Salary Bands" in a and "salary-bands.pdf" in a for a in row["answered by"])
    assert SALARY_Q not in " ".join(topics["examples"]) + " ".join(topics["topic"])
    assert store.traces.count() == stored  # asking again for the check stores nothing

    # Two documents are titled "Travel Policy": told apart by file, the expired one marked, neither both cited
    # and never cited.
    cited = next(d.value for d in at.dataframe if "answers citing it" in d.value.columns)
    never = next(d.value for d in at.dataframe if "doc id" in d.value.columns and "status" in d.value.columns)
    travel = pd.concat([cited, never])
    travel = travel[travel["title"] == "Travel Policy"]
    assert sorted(travel["file"]) == ["travel-policy-2022.pdf", "travel-policy.pdf"]
    assert set(travel[travel["file"] == "travel-policy-2022.pdf"]["status"]) == {"expired"}
    assert set(travel[travel["file"] == "travel-policy.pdf"]["status"]) == {"in force"}
    assert "travel-policy.pdf" in set(cited["file"]) and not set(cited["file"]) & set(never["file"])
