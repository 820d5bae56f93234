"""Multi-hop stage functions: bridge terms, follow-up queries, chain linking, comparisons, in-evidence chains."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rag.stages.bundle import MAX_CHAIN_BUNDLE, bundle_dependencies
from rag.stages.hops import (
    AboutIndex,
    bridge_terms,
    comparison_chains,
    evidence_chains,
    follow_ups,
    is_about,
    link_chains,
    residual_words,
)
from rag.types import Candidate, Chunk, Principal, SearchFilter

CORLISS = (
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"
)
FILM = (
    "Kiss and Tell is a 1945 American comedy film starring then 17-year-old Shirley Temple as Corliss Archer. "
    "In the film, two teenage girls cause their respective parents much concern when they start to become "
    "interested in boys."
)
TEMPLE = (
    "Shirley Temple Black was an American actress, singer, dancer, businesswoman, and diplomat. As an adult, "
    "she was named United States ambassador to Ghana and to Czechoslovakia and also served as Chief of Protocol."
)


def chunk(
    cid: str, text: str, *, doc: str | None = None, title: str = "Doc", section: str = "", ordinal: int = 0
) -> Chunk:
    return Chunk(
        chunk_id=cid,
        doc_id=doc or f"doc-{cid}",
        text=text,
        source=f"/{doc or cid}.md",
        title=title,
        section=section or title,
        ordinal=ordinal,
        groups=("public",),
        doc_version="v1",
        n_tokens=len(text.split()),
    )


def cand(c: Chunk, score: float) -> Candidate:
    return Candidate(chunk=c, rerank_score=score, fused_score=score)


# ---------------------------------------------------------------------------------------------- bridge terms
def test_bridge_term_is_the_name_the_question_does_not_know() -> None:
    terms = bridge_terms(CORLISS, FILM, "Kiss and Tell (1945 film)")
    assert terms[0] == "Shirley Temple"
    assert not any("Corliss" in t or "Kiss" in t for t in terms), "names from the question are not bridges"


def test_addresses_and_line_openings_are_not_terms() -> None:
    text = (
        "- Three of the following must hold.\n"
        "Review the [board](https://trello.com/c/Lpz7sc8d) NOT now. Ask the Enterprise IT Service Desk "
        "(EISD@epa.gov) to enable MFA."
    )
    terms = bridge_terms("How do I reset my password?", text, "Passwords", limit=5)
    assert "Enterprise IT Service Desk" in terms and "MFA" in terms
    assert not {"Three", "Review", "NOT", "Lpz7sc8d"} & set(terms)


def test_a_term_inside_a_taken_term_is_not_followed_twice() -> None:
    terms = bridge_terms(
        "When is the claim due?", "Submit it on Form EXP-7; EXP-7 claims go to Finance Operations.", limit=5
    )
    assert len({"Form EXP-7", "EXP-7"} & set(terms)) == 1 and "Finance Operations" in terms


def test_the_passage_heading_is_not_a_bridge() -> None:
    text = "Form EXP-7 is used for every cost that belongs to a business trip."
    assert (
        bridge_terms(
            "When is the claim due?", text, "Glossary", heading="3.2 Form EXP-7: Travel Expense Claim"
        )
        == []
    )


def test_residual_words_are_what_the_passage_did_not_answer() -> None:
    residual = residual_words(CORLISS, FILM)
    assert "government" in residual and "position" in residual
    assert "Corliss" not in residual and "film" not in residual


def test_follow_ups_follow_each_term_once() -> None:
    parents = [
        cand(chunk("a", FILM, title="Kiss and Tell (1945 film)"), 0.9),
        cand(chunk("b", "A remake starred Shirley Temple again."), 0.8),
    ]
    fus = follow_ups(CORLISS, parents, terms_per_passage=2)
    assert [f.term for f in fus].count("Shirley Temple") == 1
    first = fus[0]
    assert first.parent_id == "a" and first.query.startswith("Shirley Temple") and "government" in first.query


def test_seen_terms_are_not_followed_again() -> None:
    parents = [cand(chunk("a", FILM, title="Kiss and Tell (1945 film)"), 0.9)]
    terms = {f.term for f in follow_ups(CORLISS, parents, seen_terms=frozenset({"Shirley Temple"}))}
    assert "Shirley Temple" not in terms


# ---------------------------------------------------------------------------------------------- aboutness
def test_is_about_title_heading_or_opening() -> None:
    assert is_about("Shirley Temple", cand(chunk("t", TEMPLE, title="Shirley Temple"), 0.5))
    glossary = chunk(
        "g",
        "Form EXP-7 must be filed within 30 days.",
        title="Glossary",
        section="Glossary > 3.2 Form EXP-7: Travel",
    )
    assert is_about("Form EXP-7", cand(glossary, 0.5))
    opening = chunk(
        "q", "Qualifying Equipment means a desk or a chair.", title="Glossary", section="Glossary > Terms"
    )
    assert is_about("Qualifying Equipment", cand(opening, 0.5))
    mention = chunk(
        "m",
        "Check out this retrospective template for ideas.",
        title="PM role",
        section="PM role > Resources",
    )
    assert not is_about("Retrospective Template", cand(mention, 0.5))
    common = chunk(
        "s", "Systems vulnerable to malware must be scanned.", title="Access", section="Access > Systems"
    )
    assert not is_about("Systems", cand(common, 0.5)), "a lone common word names nothing"


def test_only_terms_some_passage_could_be_about_are_followed() -> None:
    passages = [
        chunk("h", "Harvest is where we log time.", title="Harvest", section="Harvest > Logging"),
        chunk("k", "Kir is a cocktail of wine and cassis.", title="Kir (cocktail)"),
        chunk("t", TEMPLE, title="Shirley Temple"),
        chunk("f", "Form EXP-7 must be filed within 30 days.", title="Glossary", section="Glossary > Forms"),
        chunk("i", "IRS mileage rates apply.", title="Travel", section="Travel > Mileage"),
        chunk("c", "Company cars are leased.", title="Fleet", section="Fleet > Company cars"),
        chunk("s", "Saturday work is paid double.", title="Overtime", section="Overtime > Weekends"),
    ]
    index = AboutIndex(passages)
    everyone = lambda c: True  # noqa: E731
    for term in ("Shirley Temple", "Form EXP-7", "IRS"):
        assert index.any_about(term, exclude="", allows=everyone), (
            "a specific term can head or open a passage"
        )
    assert index.any_about("Harvest", exclude="", allows=everyone), "a lone word that is a readable title"
    assert index.any_about("Kir", exclude="", allows=everyone), "the bare title, without its brackets"
    # a lone common word names nothing, however many passages mention it: following it could never link anything
    for term in ("Company", "Saturday"):
        assert not index.any_about(term, exclude="", allows=everyone)
        assert not any(is_about(term, cand(c, 0.5)) for c in passages)
    assert not index.any_about("Harvest", exclude="", allows=lambda c: c.title != "Harvest"), (
        "only readable titles"
    )


# ---------------------------------------------------------------------------------------------- linking
def _ranking(n: int = 6) -> list[Candidate]:
    film = cand(chunk("film", FILM, title="Kiss and Tell (1945 film)"), 0.9)
    others = [cand(chunk(f"o{i}", f"Another passage number {i}."), 0.5 - i * 0.05) for i in range(n - 1)]
    return [film, *others]


def _follow_up(term: str = "Shirley Temple"):  # type: ignore[no-untyped-def]
    fus = follow_ups(CORLISS, [_ranking()[0]])
    return next(f for f in fus if f.term == term)


def test_a_found_link_moves_behind_the_passage_that_named_it() -> None:
    ranked = _ranking()
    temple = cand(chunk("temple", TEMPLE, title="Shirley Temple"), 0.8)
    out, links = link_chains(ranked, [(_follow_up(), [temple])], k=6)
    assert [c.chunk_id for c in out[:2]] == ["film", "temple"]
    assert len(out) == len(ranked) + 1 and links[0].moved and links[0].parent_id == "film"


def test_a_weak_or_off_topic_hit_is_not_linked() -> None:
    ranked = _ranking()
    weak = cand(chunk("temple", TEMPLE, title="Shirley Temple"), 0.1)  # below what it would displace
    assert link_chains(ranked, [(_follow_up(), [weak])], k=6)[1] == []
    mention = cand(chunk("m", "A documentary mentions Shirley Temple once.", title="Docs"), 0.95)
    assert link_chains(ranked, [(_follow_up(), [mention])], k=6)[1] == [], "it must be about the term"


def test_a_hit_already_in_the_evidence_is_linked_in_place() -> None:
    temple = cand(chunk("temple", TEMPLE, title="Shirley Temple"), 0.45)
    ranked = [*_ranking(3), temple]
    out, links = link_chains(ranked, [(_follow_up(), [temple])], k=6)
    assert [c.chunk_id for c in out] == [c.chunk_id for c in ranked]
    assert links and not links[0].moved


# ---------------------------------------------------------------------------------------------- comparisons
def test_compared_subjects_form_one_chain() -> None:
    a = cand(chunk("a", "Ferdi Taygan is an American former tennis player.", title="Ferdi Taygan"), 0.9)
    b = cand(chunk("b", "Mahesh Bhupathi is an Indian tennis player.", title="Mahesh Bhupathi"), 0.8)
    other = cand(chunk("c", "Doubles tournaments in 1983.", title="1983 Volvo International"), 0.7)
    chains = comparison_chains("Who is older, Ferdi Taygan or Mahesh Bhupathi?", [a, other, b])
    assert chains == [("b", "a", "comparison")]
    assert comparison_chains("How old is Ferdi Taygan?", [a, other, b]) == []


def test_evidence_chain_links_a_form_to_its_deadline() -> None:
    rule = cand(
        chunk(
            "rule",
            "After a trip, submit your expenses on Form EXP-7 with receipts.",
            doc="travel",
            title="Travel Policy",
            section="Travel Policy > 7. After you travel",
        ),
        0.9,
    )
    deadline = cand(
        chunk(
            "deadline",
            "Form EXP-7 must be filed within 30 days of the trip end.",
            doc="glossary",
            title="Glossary",
            section="Glossary > 3.2 Form EXP-7: Travel Expense Claim",
        ),
        0.7,
    )
    chains = evidence_chains("How long do I have to submit my travel expense claim?", [rule, deadline])
    assert ("deadline", "rule", "chain") in chains


def test_bundling_keeps_a_chain_together_in_chain_order() -> None:
    rule = cand(
        chunk("rule", "After a trip, submit your expenses on Form EXP-7.", doc="travel", title="Travel"), 0.9
    )
    other = cand(chunk("x", "Unrelated passage about parking.", doc="parking", title="Parking"), 0.8)
    deadline = cand(
        chunk("deadline", "Form EXP-7 must be filed within 30 days.", doc="glossary", title="Glossary"), 0.7
    )
    selected = [rule, other, deadline]

    class Lookup:
        def get(self, chunk_id: str) -> Chunk | None:
            return next((c.chunk for c in selected if c.chunk_id == chunk_id), None)

        def doc_chunks(self, doc_id: str) -> list[Chunk]:
            return [c.chunk for c in selected if c.chunk.doc_id == doc_id]

        def docs_by_title(self, title: str) -> list[str]:
            return []

    from datetime import date

    filt = SearchFilter(Principal("u", frozenset({"public"})), date(2026, 1, 1))
    bundles, _, _ = bundle_dependencies(selected, Lookup(), filt, chains=[("deadline", "rule", "chain")])
    chain = next(b for b in bundles if b.reason == "chain")
    assert chain.chunk_ids == ("rule", "deadline"), "the passage naming the form first, then the form"
    assert len(bundles) == 2
    assert MAX_CHAIN_BUNDLE >= 2


# -- which passages a term could lead to, without scanning them all ------------------------------------------
ABOUT_CHUNKS = [
    chunk("film", FILM, title="Kiss and Tell (1945 film)"),
    chunk("temple", TEMPLE, title="Shirley Temple"),
    chunk(
        "form",
        "Form EXP-7 must be filed within 30 days of the trip end.",
        title="Glossary",
        section="Glossary > Forms",
    ),
    chunk(
        "ac2",
        "Accounts are reviewed quarterly.",
        title="Access Control",
        section="Access Control > AC-2 Account Management",
    ),
    chunk("list", "- 5 consecutive attempts lock the account.", title="Logon", section="Logon > Limits"),
    chunk("secret", "Form SEC-9 records incidents.", title="Runbook", section="Runbook > Forms"),
    chunk("common", "Security matters to everyone.", title="Security", section="Security > Security"),
]


def test_the_about_index_answers_exactly_what_scanning_every_passage_would() -> None:
    index = AboutIndex(ABOUT_CHUNKS)
    terms = [
        "Shirley Temple",
        "Kiss and Tell",
        "Form EXP-7",
        "EXP-7",
        "AC-2",
        "Account Management",
        "5",
        "Form SEC-9",
        "Security",
        "Temple",
        "Corliss Archer",
        "Glossary",
        "Ghana",
        "form exp-7",
        "",
    ]
    not_secret = lambda c: c.chunk_id != "secret"  # noqa: E731  (a principal who may not read the runbook)
    for term in terms:
        for exclude in ("", "temple", "form"):
            for allows in (lambda c: True, not_secret):
                brute = any(
                    c.chunk_id != exclude and allows(c) and is_about(term, Candidate(chunk=c))
                    for c in ABOUT_CHUNKS
                )
                assert index.any_about(term, exclude=exclude, allows=allows) == brute, (term, exclude)
    assert index.any_about("Shirley Temple", exclude="", allows=lambda c: True)
    assert not index.any_about(
        "Shirley Temple", exclude="temple", allows=lambda c: True
    )  # only its own passage
    assert not index.any_about(
        "Form SEC-9", exclude="", allows=not_secret
    )  # only in what the asker cannot read
    assert not index.any_about(
        "Corliss Archer", exclude="", allows=lambda c: True
    )  # named, but nothing is about it


def test_run_in_headings_and_shouted_words_are_not_bridge_terms() -> None:
    # structured abstracts and procedures run their headings into the text: "RESULTS Of the 20 patients ..."
    text = "RESULTS Of the 20 patients treated with DAF-16, most recovered. PARTICIPANTS were enrolled at EPA sites."
    terms = bridge_terms("Does treatment help patients recover?", text, limit=5)
    assert "DAF-16" in terms and "EPA" in terms
    assert not any(t.split()[0] in {"RESULTS", "PARTICIPANTS", "Of"} for t in terms), terms
    # an acronym before a name is still a name: "NIST Special Publication", "EPA Chief Information Officer"
    named = bridge_terms(
        "Which standard applies?",
        "Follow NIST Special Publication 800-53 as the EPA Chief Information Officer says.",
        limit=5,
    )
    assert "NIST Special Publication" in named and "EPA Chief Information Officer" in named


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "Form",
                "EXP-7",
                '"Qualifying',
                'Equipment"',
                "means",
                "is",
                "defined",
                "as",
                "refers",
                "to",
                "mean",
                "s",
                "Means",
                "\n",
                "a",
                "desk.",
                "“Leave”",
                "-",
                "x" * 70,
            ]
        ),
        max_size=25,
    )
)
def test_defined_terms_need_a_defining_word(words: list[str]) -> None:
    """_sentence_terms runs the slow _DEFINED pattern only on sentences holding one of _DEFINING's words: it
    cannot match anywhere else, so skipping it changes no term."""
    from rag.stages.hops import _DEFINED, _DEFINING

    sentence = " ".join(words)
    if not any(word in sentence for word in _DEFINING):
        assert _DEFINED.search(sentence) is None
    assert _DEFINED.search('"Qualifying Equipment" means a desk.') is not None


def test_skipping_the_defined_pattern_changes_no_term(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every sentence of the sample corpus's sources gives the same terms with the pattern always run."""
    from pathlib import Path

    from rag.stages import hops
    from rag.text import split_sentences

    sources = Path(__file__).resolve().parents[2] / "ingest" / "sample" / "sources"
    sentences = [x for f in sorted(sources.rglob("*")) if f.is_file() for x in split_sentences(f.read_text())]
    assert len(sentences) > 200
    fast = [hops._sentence_terms.__wrapped__(x) for x in sentences]
    monkeypatch.setattr(hops, "_DEFINING", ("",))  # "" is in every sentence: _DEFINED always runs
    assert [hops._sentence_terms.__wrapped__(x) for x in sentences] == fast
    assert any(x for x in fast)


def test_an_identifier_ending_a_sentence_is_named_without_its_full_stop() -> None:
    terms = bridge_terms("How many weeks can I work from home?", "Ask HR first, on Form RW-4.", limit=3)
    assert "Form RW-4" in terms and "Form RW-4." not in terms
    assert "Section 4.2" in bridge_terms("What applies?", "The limits are in Section 4.2.", limit=3)


# ------------------------------------------------------------------------------- the runner's hop decisions
def test_the_first_hop_follows_the_strongest_passages_that_could_answer() -> None:
    from rag.stages.hops import hop_frontier

    ranked = [cand(chunk(f"p{i}", f"Passage {i}."), score) for i, score in enumerate((0.9, 0.2, 0.7, 0.8))]
    assert [c.chunk_id for c in hop_frontier(ranked, passages=3, threshold=0.5)] == ["p0", "p2"]
    assert hop_frontier(ranked, passages=3, threshold=0.95) == []
    assert [c.chunk_id for c in hop_frontier(ranked, passages=4, threshold=0.7)] == ["p0", "p2", "p3"]


def test_only_follow_ups_some_other_readable_passage_is_about_are_retrieved() -> None:
    from rag.stages.hops import followable

    film = chunk("film", FILM, title="Kiss and Tell (1945 film)")
    temple = chunk("temple", TEMPLE, title="Shirley Temple")
    fus = follow_ups(CORLISS, [cand(film, 0.9)])
    assert "Shirley Temple" in [f.term for f in fus]
    index = AboutIndex([film, temple])
    assert [f.term for f in followable(fus, index, allows=lambda c: True)] == ["Shirley Temple"]
    assert followable(fus, index, allows=lambda c: c.chunk_id != "temple") == []  # not readable
    assert followable(fus, AboutIndex([film]), allows=lambda c: True) == []  # only the passage naming it


def test_why_hopping_stops() -> None:
    from rag.stages.hops import HOP_NOTHING_NEW, hop_limit, no_follow_up

    fus = follow_ups(CORLISS, [cand(chunk("film", FILM, title="Kiss and Tell (1945 film)"), 0.9)])
    assert no_follow_up(fus) == "no readable passage is about the bridge terms the strongest passages name"
    assert no_follow_up([]) == "no bridge term: the strongest passages name nothing the question does not"
    assert hop_limit(2) == "hop limit (2) reached"
    assert HOP_NOTHING_NEW == "nothing new: no follow-up passage beat the evidence it would displace"


def test_the_budget_keeps_both_ends_of_every_link() -> None:
    from rag.stages.budget import chain_links

    assert chain_links([("b", "a", "chain"), ("c", "a", "comparison")]) == {"b": "a", "c": "a"}
    assert chain_links([]) == {}


def test_bundling_joins_hop_links_first_then_comparisons_then_evidence_chains() -> None:
    from rag.stages.hops import bundle_chains

    question = "Who is older, Shirley Temple or Kiss and Tell?"
    selected = [
        cand(chunk("temple", TEMPLE, title="Shirley Temple"), 0.9),
        cand(chunk("film", FILM, title="Kiss and Tell"), 0.8),
    ]
    hop = [("x", "y", "chain")]
    expected = [*hop, *comparison_chains(question, selected), *evidence_chains(question, selected)]
    assert comparison_chains(question, selected)  # the order is tested with something to order
    assert bundle_chains(question, selected, hop) == expected
    assert bundle_chains(question, [], []) == []
