"""Rendering helpers, error messages, the user list and the launcher: pure functions, no Streamlit run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from rag.config import load_settings
from rag.errors import (
    ConfigurationError,
    EmptyIndexError,
    GenerationError,
    RetrievalError,
    StorageError,
)
from ui import components, launch, services


def evidence(
    n: int, rank: int | None, *, cited: bool = False, text: str = "Refunds within 45 days."
) -> dict[str, Any]:
    return {
        "n": n,
        "chunk_id": f"c{n}",
        "doc_id": "refunds",
        "source": "refunds.pdf",
        "title": "Refunds Policy",
        "page": 2,
        "page_end": 2,
        "section": "Refunds > Returns",
        "text": text,
        "bundle": n,
        "rerank_rank": rank,
        "rerank_score": 1.0 / (rank or 10),
        "bm25_rank": rank,
        "dense_rank": rank,
        "cited": cited,
        "added_by": None if rank else "bundling",
    }


def trace(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "trace_id": "t1",
        "question": "Refund window?",
        "user": "alice",
        "groups": ["staff"],
        "packing": "edges",
        "answer": "Returns are accepted within 45 days [1]. Gift cards are final [3].\nSources: [1], [3]",
        "abstained": False,
        "abstain_reason": None,
        "error": None,
        "evidence": [
            evidence(1, 1, cited=True),
            evidence(2, 3),
            evidence(3, 4),
            evidence(4, None),
            evidence(5, 2),
        ],
        "citations": [
            {
                "n": 1,
                "chunk_id": "c1",
                "valid": True,
                "supported": True,
                "sentence": "Returns ... [1].",
                "support_score": 0.9,
            },
            {
                "n": 3,
                "chunk_id": "c3",
                "valid": True,
                "supported": False,
                "sentence": "Gift cards are final [3].",
                "support_score": 0.1,
            },
        ],
        "candidates": [evidence(1, 1), evidence(2, 3), evidence(9, 5)],
        "dropped": [{"chunk_id": "c9", "reason": "over_budget", "stage": "budget"}],
        "bundles": [],
        "stages": [{"name": "retrieve", "ms": 3.0, "detail": {}}],
        "timings_ms": {"total": 3.0},
    }
    base.update(changes)
    return base


# ----------------------------------------------------------------------------- answer and citations
def test_citations_become_tooltips_with_the_passage() -> None:
    out = components.answer_html(trace())
    assert out.count('class="rag-cite') == 4  # [1] and [3] in the text, [1], [3] in the sources line
    assert "Refunds Policy, p. 2, Refunds &gt; Returns" in out
    assert 'tabindex="0"' in out  # focusable: a click (or tab) reveals it too


def test_unsupported_and_missing_citations_are_marked() -> None:
    out = components.answer_html(
        trace(
            answer="Claim [3]. Invented [7].",
            citations=[
                {
                    "n": 3,
                    "chunk_id": "c3",
                    "valid": True,
                    "supported": False,
                    "sentence": "Claim [3].",
                    "support_score": 0,
                },
                {
                    "n": 7,
                    "chunk_id": None,
                    "valid": False,
                    "supported": False,
                    "sentence": "Invented [7].",
                    "support_score": 0,
                },
            ],
        )
    )
    assert 'class="rag-cite weak"' in out and "does not support this sentence" in out
    assert 'class="rag-cite bad"' in out and "[7] does not exist" in out
    badges = components.badges_html(trace())
    assert "1 citation(s) failed the check: [3]" in badges
    assert "Abstained" in components.badges_html(trace(abstained=True, citations=[]))


def test_document_and_model_text_is_escaped() -> None:
    hostile = '<script>alert(1)</script><img src=x onerror=alert(2)>"'
    out = components.answer_html(trace(answer=f"{hostile} [1]", evidence=[evidence(1, 1, text=hostile)]))
    assert "<script>" not in out and "<img" not in out
    assert "&lt;script&gt;" in out
    assert components.escape_md("**bold** [link](x) $5") == r"\*\*bold\*\* \[link\]\(x\) \$5"


def test_the_sentence_that_carried_the_choice_is_highlighted_inside_its_excerpt_and_escaped() -> None:
    hostile = 'Examples include <img src=x onerror=alert(1)> and "minibar" items.'
    answer = (
        f"General <b>principles</b> \u2014 Personal costs are never reimbursed. {hostile} [1]\nSources: [1]"
    )
    excerpt = {
        "n": 1,
        "chunk_id": "c1",
        "heading": "General <b>principles</b>",
        "start": 0,
        "end": 90,
        "sentences": ["Personal costs are never reimbursed.", hostile],
        "key": [hostile],
        "intents": [0],
        "score": 0.3,
    }
    out = components.answer_html(trace(answer=answer, citations=[], excerpts=[excerpt]))
    assert "<img" not in out and "<b>principles" not in out
    escaped = hostile.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    assert f'<mark class="rag-key">{escaped}</mark>' in out
    assert (
        "<mark" not in out.split("Personal costs")[0] and "never reimbursed. <mark" in out
    )  # the rule: context
    assert '<span class="rag-heading">General &lt;b&gt;principles&lt;/b&gt;</span> \u2014 ' in out
    caption = components.excerpt_caption(trace(excerpts=[excerpt]))
    assert (
        caption.startswith("Quoted from [1] General \\<b\\>principles") and "characters 0\u201390" in caption
    )
    assert components.excerpt_caption(trace()) == ""
    # a model's answer (no excerpts) renders as before
    assert "<mark" not in components.answer_html(trace())


def test_grouped_and_range_markers_expand() -> None:
    out = components.answer_html(trace(answer="Both [1, 2] and [3-5].", citations=[]))
    assert [f">[{n}]<" in out for n in range(1, 6)] == [True] * 5


# ----------------------------------------------------------------------------- chunk order
def test_chunk_order_frame_keeps_positions_and_ranks() -> None:
    frame = components.chunk_order_frame(trace())
    assert list(frame["position"]) == [1, 2, 3, 4, 5]
    assert list(frame["rerank rank"].astype("float").fillna(-1)) == [1, 3, 4, -1, 2]
    assert list(frame["cited"]) == [True, False, False, False, False]
    for column in components.ORDER_COLUMNS:
        assert column in frame.columns
    assert components.chunk_order_frame(trace(evidence=[])).empty


def test_chart_puts_the_best_rank_on_top() -> None:
    frame = components.chunk_order_frame(trace())
    spec = components.chunk_order_chart_spec(frame)
    assert spec["encoding"]["x"]["field"] == "position"
    assert (
        spec["encoding"]["y"]["field"] == "rerank rank" and spec["encoding"]["y"]["scale"]["reverse"] is True
    )
    data = components.chart_data(frame)
    json.dumps(data.to_dict(orient="records"), default=str)  # plain values Vega can take
    assert "is first of 4 in the prompt" in components.shape_note([1, 3, None, 2])
    assert "is last of 3 in the prompt" in components.shape_note([2, 3, 1])
    assert "position 3 of 5, 2 passages in from the start: not at an edge" in components.shape_note(
        [3, None, 1, 4, 2]
    )
    # issue 44: position 3 of 13 was called "near an edge"; it is two places in
    thirteen = [9, 11, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 13]
    assert "position 3 of 13, 2 passages in from the start: not at an edge" in components.shape_note(thirteen)
    assert "1 passage in from the end" in components.shape_note([4, 2, None, 3, None, 6, 5, 1, 7])


def test_the_bundles_table_shows_each_members_own_place_in_the_prompt() -> None:
    # bundle 0 in document order c4, c1: edge packing put its best passage c1 first, c4 second
    bundle = {"bundle_id": 0, "chunk_ids": ["c4", "c1", "gone"], "reason": "adjacent", "score": 1.0}
    frame = components.bundles_frame(trace(bundles=[bundle]))
    assert list(frame["positions"]) == ["[4], [1], -"]


def test_candidates_say_what_became_of_each() -> None:
    frame = components.candidates_frame(trace())
    fates = dict(zip(frame["chunk id"], frame["fate"], strict=True))
    assert fates["c1"] == "in prompt at position 1"
    assert fates["c9"] == "dropped (budget: over_budget)"
    assert list(components.dropped_frame(trace())["reason"]) == ["over_budget"]
    lifted = trace(
        stages=[
            {"name": "context", "ms": 0.1, "detail": {"raised": [{"chunk_id": "c1", "from": 7, "to": 2}]}}
        ]
    )
    fates = dict(zip(*(components.candidates_frame(lifted)[k] for k in ("chunk id", "fate")), strict=True))
    assert fates["c1"] == "in prompt at position 1; raised by its section: budget order 7 -> 2"
    assert fates["c9"] == "dropped (budget: over_budget)"
    verdicts = components.citations_frame(trace())
    assert list(verdicts["verdict"]) == ["ok", "does not support the sentence"]


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (EmptyIndexError("No index in /x"), "Nothing indexed yet: run `rag ingest PATH`"),
        (StorageError("Database not initialised: run `rag db upgrade` (sqlite:///x)."), "rag db upgrade"),
        (StorageError("no such table: answers"), "run `rag db upgrade`"),
        (RetrievalError("Dense search failed: connection refused"), "is Qdrant running?"),
        (
            GenerationError("The LLM server did not answer within 120 s.", hint="Raise RAG_LLM_TIMEOUT_S"),
            "RAG_LLM_TIMEOUT_S",
        ),
        (ConfigurationError("Bad setting", hint="Fix it"), "Hint: Fix it"),
        (ValueError("boom"), "Something went wrong (ValueError: boom)"),
    ],
)
def test_errors_become_messages(error: Exception, expected: str) -> None:
    message = services.describe_error(error)
    assert expected in message
    assert "Traceback" not in message


# ----------------------------------------------------------------------------- users
def test_users_default_and_from_file(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    assert services.load_users(settings) == services.DEMO_USERS
    (tmp_path / "users.json").write_text(json.dumps({"ann": ["staff", "admin"]}))
    assert services.load_users(settings) == {"ann": frozenset({"staff", "admin"})}
    (tmp_path / "users.json").write_text(json.dumps({"users": [{"user": "bo", "groups": ["hr"]}]}))
    assert services.load_users(settings) == {"bo": frozenset({"hr"})}
    for broken in ("[1, 2]", "{", "{}"):
        (tmp_path / "users.json").write_text(broken)
        with pytest.raises(ConfigurationError):
            services.load_users(settings)


# ----------------------------------------------------------------------------- launcher
def test_launch_runs_streamlit_on_localhost_with_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[list[str], dict[str, str], str]] = []
    cwd_now = [str(Path.cwd())]

    class Execed(Exception):
        pass

    def fake_execve(path: str, cmd: list[str], env: dict[str, str]) -> None:
        assert path == cmd[0]
        calls.append((cmd, env, cwd_now[0]))
        raise Execed  # a real exec never returns

    def fake_call(cmd: list[str], env: dict[str, str], cwd: str) -> int:
        calls.append((cmd, env, cwd))
        return 0

    monkeypatch.setattr(launch.os, "execve", fake_execve)
    monkeypatch.setattr(launch.os, "chdir", lambda d: cwd_now.__setitem__(0, str(d)))
    monkeypatch.setattr(launch.subprocess, "call", fake_call)
    settings = load_settings(data_dir=tmp_path)
    monkeypatch.setattr(launch, "EXEC", True)  # POSIX: the process becomes Streamlit, a SIGTERM reaches it
    with pytest.raises(Execed):
        launch.launch(settings, port=8765)
    monkeypatch.setattr(launch, "EXEC", False)  # elsewhere Streamlit runs as a child until it exits
    assert launch.launch(settings, port=8765) == 0
    for cmd, env, cwd in calls:
        assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4].endswith("ui/server.py")
        assert cmd[cmd.index("--server.port") + 1] == "8765"
        assert cmd[cmd.index("--server.headless") + 1] == "true"
        assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
        assert env["RAG_DATA_DIR"] == str(tmp_path.resolve())
        assert (Path(cwd) / ".streamlit" / "config.toml").is_file()
    assert len(calls) == 2


def test_ui_command_mounts_on_typer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def fake_launch(settings: Any, port: int = 8501, headless: bool = True) -> int:
        seen.update(data_dir=settings.data_dir, port=port, headless=headless)
        return 3

    monkeypatch.setattr(launch, "launch", fake_launch)
    app = typer.Typer()
    app.command("ui")(launch.ui_command)
    app.command("noop")(lambda: None)  # a second command, so "ui" stays a sub-command as in `rag`
    result = CliRunner().invoke(app, ["ui", "--port", "9001", "--data-dir", str(tmp_path)])
    assert result.exit_code == 3, result.output
    assert seen == {"data_dir": tmp_path, "port": 9001, "headless": True}


def test_hops_list_every_follow_up_and_what_it_linked() -> None:
    t = trace(
        hops=[
            {
                "hop": 1,
                "from": ["c1"],
                "queries": [
                    {
                        "term": "Form EXP-7",
                        "query": "Form EXP-7 how long",
                        "from": "c1",
                        "found": ["c3"],
                        "best_score": 0.4,
                    },
                    {
                        "term": "Finance",
                        "query": "Finance how long",
                        "from": "c1",
                        "found": [],
                        "best_score": None,
                    },
                ],
                "linked": [
                    {"chunk_id": "c3", "from": "c1", "term": "Form EXP-7", "score": 0.4, "moved": False}
                ],
                "stopped": "nothing new: no follow-up passage beat the evidence it would displace",
            }
        ]
    )
    frame = components.hops_frame(t)
    assert list(frame["term"]) == ["Form EXP-7", "Finance"]
    assert "already in the evidence" in frame["linked"][0] and frame["linked"][1] == ""
    assert components.hop_stops(t) == [
        "Hop 1: nothing new: no follow-up passage beat the evidence it would displace"
    ]
    assert components.hops_frame(trace()).empty


def test_citations_checked_only_when_every_claim_is_supported() -> None:
    """Valid citations are not enough: a contradicted claim (issue 20's gift-card answer) never shows as checked."""
    ok_cite = [
        {"n": 1, "chunk_id": "c1", "valid": True, "supported": True, "sentence": "s", "support_score": 1}
    ]
    supported = [{"text": "Gift cards are not refundable [1].", "verdict": "supported"}]
    contradicted = [{"text": "Yes, we can refund the gift card.", "verdict": "contradicted"}]
    good = {
        "answer": "Gift cards are not refundable [1].",
        "citations": ok_cite,
        "claims": supported,
        "verified": True,
        "answer_check": {"complete": True},
        "evidence": [],
    }
    assert components.citations_checked(good) and "Citations checked" in components.badges_html(good)
    bad = {**good, "claims": contradicted, "verified": False}
    assert not components.citations_checked(bad)
    assert "Citations checked" not in components.badges_html(bad)
    assert "1 claim(s) not supported by the evidence" in components.badges_html(bad)
    partial = {**good, "answer_check": {"complete": False}}
    assert not components.citations_checked(partial)
    assert not components.citations_checked({**good, "verified": None})  # an old trace without a claim check


def test_a_quote_the_reader_does_not_vouch_for_is_marked_unconfirmed_not_checked() -> None:
    ok_cite = [
        {"n": 1, "chunk_id": "c1", "valid": True, "supported": True, "sentence": "s", "support_score": 1}
    ]
    trace = {
        "answer": "Lock your screen when you leave your desk [1].",
        "citations": ok_cite,
        "claims": [{"text": "Lock your screen when you leave your desk [1].", "verdict": "supported"}],
        "verified": False,
        "answer_check": {
            "complete": False,
            "intents": [{"text": "What if I lose my laptop?", "addressed": True, "supported": False}],
        },
        "evidence": [],
    }
    badges = components.badges_html(trace)
    assert "Citations checked" not in badges and "not confirmed as the answer" in badges
    assert components.unconfirmed_intents(trace) == ["What if I lose my laptop?"]
    assert components.unconfirmed_intents({**trace, "abstained": True}) == []


def test_a_badge_the_language_model_vouched_for_says_so() -> None:
    ok_cite = [
        {"n": 1, "chunk_id": "c1", "valid": True, "supported": True, "sentence": "s", "support_score": 1}
    ]
    intent = {"text": "How long is parental leave?", "addressed": True, "supported": True}
    trace = {
        "answer": "Parental leave is 16 weeks [1].",
        "citations": ok_cite,
        "claims": [{"text": "Parental leave is 16 weeks [1].", "verdict": "supported"}],
        "verified": True,
        "answer_check": {"complete": True, "intents": [intent]},
        "evidence": [],
    }
    assert "language model" not in components.badges_html(trace)  # the reader vouched for it
    confirmed = {**trace, "answer_check": {"complete": True, "intents": [{**intent, "confirmed": True}]}}
    assert "Citations checked (confirmed by the language model)" in components.badges_html(confirmed)
