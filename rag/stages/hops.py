"""Multi-hop retrieval: follow what the strongest passages name that the question does not.

"What position did the woman who played Corliss Archer hold?" retrieves the film's passage, which names
Shirley Temple; only a second retrieval for "Shirley Temple" finds the passage that answers. Policies chain the
same way: a rule names a form whose deadline lives elsewhere, a limit applies to a defined term, "see 4.2".

Pure functions; the runner (rag/pipeline.py) does the searching and reranking between them:

1. ``follow_ups``: bridge terms from the strongest passages (proper names, quoted titles, form and control
   identifiers, defined terms) that the question does not already name, each turned into a follow-up query:
   the term plus the words of the question its passage did not answer (the bridging text and what is still
   asked). The runner retrieves with it and reranks what it finds against it: one embedding per follow-up.
2. ``link_chains``: a hop candidate joins the evidence only when it is about the bridge term and scores at
   least half what the passage that named it scored; it then sits right after that passage, the budget
   keeps both links (rag/stages/budget.py) and bundling keeps them adjacent, in chain order. A follow-up
   that finds a passage already in the evidence links the two in place.
3. ``comparison_chains``: passages about subjects the question compares ("X or Y") travel together.
4. ``evidence_chains``: a selected passage naming a term another selected passage is about ("Form EXP-7").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rag.config import Settings
from rag.request import State, rounded
from rag.stages.budget import score_of
from rag.stages.retrieve import Search
from rag.stages.shared import Models
from rag.text import bm25_token_set, bm25_tokens, split_sentences
from rag.text.lexicon import NEGATIONS, STOPWORDS
from rag.types import Candidate, Chain, Chunk

STAGE = "hop"

# Proper-name runs: capitalised words, optionally joined by short function words ("Bank of America",
# "Kiss and Tell"); identifiers ("AC-2", "IR-6(1)", "SF-182", "Form T-7"); quoted titles; defined terms.
_CONNECTOR = r"(?:of|the|and|for|de|del|la|le|von|van|da|du|der|&|on|in)"
_CAP_WORD = r"(?:[A-Z][\w'’.\-]*[\w'’]|[A-Z])"
_NAME = re.compile(rf"\b{_CAP_WORD}(?:\s+(?:{_CONNECTOR}\s+)?{_CAP_WORD})*")
_IDENTIFIER = re.compile(
    r"\b(?:(?:Form|Section|Appendix|Schedule|Exhibit|Annex|Table)\s+[A-Z0-9][\w.\-]*"
    r"|[A-Z]{1,4}-\d+(?:\(\d+\))?)"
)
_QUOTED = re.compile(r"[\"“]([^\"”]{3,80})[\"”]")
_DEFINED = re.compile(r"[\"“]?([A-Za-z][\w \-]{2,60}?)[\"”]?\s+(?:means|is defined as|refers to)\b")
_DEFINING = ("means", "is defined as", "refers to")  # _DEFINED cannot match a sentence without one of them
_TRAILING_CONNECTOR = re.compile(rf"(?:\s+{_CONNECTOR})+$")
# Addresses carry capitals and ids that name nothing: "(https://trello.com/c/Lpz7sc8d)", "EISD@epa.gov".
_ADDRESS = re.compile(r"\]\([^)]*\)|https?://\S+|www\.\S+|\S+@\S+\.\w+")
# A line opens a sentence too: list items and headings start with a capital whatever they say.
_LINE_START = re.compile(r"(?m)^[ \t]*(?:[-*#>\u2022]+|\d+[.)]|[a-z][.)]|\(\w+\))?[ \t]*")
_FUNCTION_WORDS = STOPWORDS | NEGATIONS


@dataclass(frozen=True)
class FollowUp:
    """One follow-up query: what to retrieve, what to rerank against, and which passage named it."""

    parent_id: str  # the passage whose text named the bridge term
    term: str  # the bridge term
    query: str  # the term plus the question's unanswered words: retrieved with, and reranked against


def _shouted(word: str) -> bool:
    """A word in capitals too long for an acronym: a run-in heading ("RESULTS", "PURPOSE") or emphasis."""
    return len(word) >= 6 and word.isalpha() and word.isupper()


def _single_word_ok(word: str) -> bool:
    """A lone capitalised word names something when it is an acronym or a proper noun, not a shouted word."""
    if word.lower() in _FUNCTION_WORDS or _shouted(word):
        return False
    # "Lpz7sc8d": an id from an address, not a name
    return not (any(ch.isdigit() for ch in word) and any(ch.islower() for ch in word))


def _terms_in(sentence: str) -> list[str]:
    """Candidate bridge terms of one sentence, the most specific kinds first, then in order of appearance:
    quoted titles and defined terms, identifiers, multi-word names, acronyms, single capitalised words."""
    return list(_sentence_terms(sentence))


@functools.lru_cache(maxsize=50_000)  # passages (and their sentences) come back request after request
def _sentence_terms(sentence: str) -> tuple[str, ...]:
    sentence = _ADDRESS.sub(" ", sentence)
    starts = {m.end() for m in _LINE_START.finditer(sentence)} | {_first_word_start(sentence)}
    found: list[tuple[int, int, str]] = []  # (kind, position, term)
    for m in _QUOTED.finditer(sentence):
        found.append((0, m.start(1), m.group(1).strip()))
    if any(
        word in sentence for word in _DEFINING
    ):  # _DEFINED tries ~60 characters from every letter: ~0.3 ms
        for m in _DEFINED.finditer(sentence):
            found.append((0, m.start(1), m.group(1).strip()))
    for m in _IDENTIFIER.finditer(sentence):
        found.append((1, m.start(), m.group(0).rstrip(".")))  # "on Form RW-4." names "Form RW-4"
    for m in _NAME.finditer(sentence):
        words = _TRAILING_CONNECTOR.sub("", m.group(0)).strip(" .-").split()
        opens = m.start() in starts
        if len(words) > 1 and _shouted(words[0]):
            words, opens = words[1:], True  # "RESULTS Of the 20 patients": a run-in heading, then a sentence
        if words and opens and not words[0].isupper():
            words = words[1:]  # "Use MFA", "The Kiss": a sentence's first capital says nothing
            words = words[1:] if words and words[0].lower() in _FUNCTION_WORDS else words
        if not words:
            continue
        if len(words) == 1 and not _single_word_ok(words[0]):
            continue
        kind = 2 if len(words) > 1 else 3 if words[0].isupper() else 4
        found.append((kind, m.start(), " ".join(words)))
    found.sort(key=lambda x: (x[0], x[1]))
    return tuple(term for _, _, term in found)


def _first_word_start(sentence: str) -> int:
    m = re.search(r"\w", sentence)
    return m.start() if m else 0


def bridge_terms(question: str, text: str, title: str = "", limit: int = 2, heading: str = "") -> list[str]:
    """Terms in ``text`` that the question does not name, from the sentences closest to the question first.

    A term qualifies when it carries at least one content word that is neither in the question nor in the
    passage's own title or heading (the passage already is about those), and is not part of a term already
    taken ("EXP-7" after "Form EXP-7"). Sentences are tried in order of how many question words they share,
    so the term comes from where the passage meets the question.
    """
    q_tokens = bm25_token_set(question)
    own = q_tokens | bm25_token_set(title) | bm25_token_set(heading)
    sentences = split_sentences(text) or [text]
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(q_tokens & bm25_token_set(sentences[i])), i))
    terms: list[str] = []
    seen: set[frozenset[str]] = set()
    for i in ranked:
        for term in _terms_in(sentences[i]):
            tokens = frozenset(bm25_tokens(term))
            if not tokens or tokens <= own or any(tokens <= t or t <= tokens for t in seen):
                continue
            if all(t in STOPWORDS for t in term.lower().split()):
                continue
            seen.add(tokens)
            terms.append(term)
            if len(terms) >= limit:
                return terms
    return terms


def residual_words(question: str, text: str) -> str:
    """The question's content words that ``text`` does not contain: what is still to be found."""
    have = bm25_token_set(text)
    words = re.findall(r"[\w'’\-]+", question)
    kept = [w for w in words if (t := bm25_tokens(w)) and not set(t) <= have]
    return " ".join(kept)


def follow_ups(
    question: str,
    parents: Sequence[Candidate],
    *,
    terms_per_passage: int = 2,
    seen_terms: frozenset[str] = frozenset(),
) -> list[FollowUp]:
    """Follow-up queries from ``parents`` (the strongest passages, best first); each term is followed once."""
    out: list[FollowUp] = []
    seen = {t.casefold() for t in seen_terms}
    for parent in parents:
        chunk = parent.chunk
        for term in bridge_terms(
            question, chunk.text, chunk.title, terms_per_passage, _heading(chunk.section)
        ):
            if term.casefold() in seen:
                continue
            seen.add(term.casefold())
            residual = residual_words(question, chunk.text)
            out.append(
                FollowUp(
                    parent_id=chunk.chunk_id,
                    term=term,
                    query=f"{term} {residual}".strip(),
                )
            )
    return out


@dataclass(frozen=True)
class Link:
    """A chain link: ``child`` is what the bridge ``term`` found in ``parent``'s text led to."""

    parent_id: str
    child: Candidate
    term: str
    moved: bool  # False when the child was already among the passages the budget would keep


def _score(c: Candidate) -> float:
    return c.rerank_score if c.rerank_score is not None else c.fused_score


def _heading(section: str) -> str:
    return section.split(">")[-1].strip() if section else ""


def _bare_title(title: str) -> str:
    """'Kir (cocktail)' -> 'Kir': the disambiguation in brackets is not how anyone names the subject."""
    return re.sub(r"\s*\([^)]*\)\s*", " ", title).strip()


def _specific(term: str) -> bool:
    """Names one thing: several words, a number ("EXP-7", "AC-2") or an acronym; not "Security", "Time"."""
    words = term.split()
    return len(words) > 1 or any(ch.isdigit() for ch in term) or (term.isupper() and len(term) > 1)


def title_key(title: str) -> frozenset[str]:
    """What a document title is matched on: the tokens of its bare title."""
    return frozenset(bm25_tokens(_bare_title(title)))


def is_about(term: str, cand: Candidate) -> bool:
    """The passage is about ``term``: the term is its document's title, a specific term in its heading, or
    the words its text opens with ("Qualifying Equipment means ...", "Form EXP-7 must be filed ...")."""
    return chunk_is_about(term, cand.chunk)


def chunk_is_about(term: str, chunk: Chunk) -> bool:
    """``is_about`` for a chunk."""
    tokens = set(bm25_tokens(term))
    if not tokens:
        return False
    if tokens == set(bm25_tokens(_bare_title(chunk.title))):
        return True
    if not _specific(term):
        return False  # a lone common word ("Systems", "Authorization") opens or heads too many passages
    if tokens <= set(bm25_tokens(_heading(chunk.section))):
        return True
    start = _opening_start(chunk.text)
    opening = chunk.text[start : start + len(term) + 1].lower()
    return opening.startswith(term.lower()) and not opening[len(term) : len(term) + 1].isalnum()


_LEADING_MARKS = re.compile(r"[#\-*\s]*")


def _opening_start(text: str) -> int:
    """Where a passage's opening starts, as ``is_about`` reads it: after leading list and heading marks."""
    m = _LEADING_MARKS.match(text)
    return m.end() if m else 0


def _opening_key(text: str) -> str:
    """The first two characters of the lowercased opening (``is_about`` compares a prefix of at least two)."""
    start = _opening_start(text)
    return text[start : start + 2].lower()[:2]


class AboutIndex:
    """Which passages could be about a term (``is_about``), found without scanning every passage.

    A follow-up retrieval can only link a passage about its term (``link_chains``), so a term no readable
    passage is about needs no retrieval: ``any_about`` answers that exactly, from three lookups (the bare
    title's tokens, the heading's tokens, the opening's first two characters) verified with ``is_about``.
    """

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self._by_title: dict[frozenset[str], list[Chunk]] = {}
        self._by_heading_token: dict[str, list[Chunk]] = {}
        self._by_opening: dict[str, list[Chunk]] = {}
        titles: dict[str, frozenset[str]] = {}  # chunks of one document share its title and its sections
        headings: dict[str, frozenset[str]] = {}
        for chunk in chunks:
            if chunk.title not in titles:
                titles[chunk.title] = title_key(chunk.title)
            if chunk.section not in headings:
                headings[chunk.section] = frozenset(bm25_tokens(_heading(chunk.section)))
            self._by_title.setdefault(titles[chunk.title], []).append(chunk)
            for token in headings[chunk.section]:
                self._by_heading_token.setdefault(token, []).append(chunk)
            self._by_opening.setdefault(_opening_key(chunk.text), []).append(chunk)

    def candidates(self, term: str) -> list[Chunk]:
        """Every chunk that may be about ``term`` (a superset; ``chunk_is_about`` decides)."""
        tokens = frozenset(bm25_tokens(term))
        if not tokens:
            return []
        out = list(self._by_title.get(tokens, ()))
        if _specific(term):
            postings = [self._by_heading_token.get(t, []) for t in tokens]
            shortest = min(postings, key=len)
            out += shortest  # a heading holding every token holds the rarest one
            key = term.lower()[:2]
            if len(key) == 2:
                out += self._by_opening.get(key, [])
            else:  # a one-character term: every opening that starts with it
                out += [c for k, cs in self._by_opening.items() if k.startswith(key) for c in cs]
        return out

    def any_about(self, term: str, *, exclude: str, allows: Callable[[Chunk], bool]) -> bool:
        """Whether any chunk other than ``exclude`` that ``allows`` admits is about ``term``."""
        return any(
            c.chunk_id != exclude and allows(c) and chunk_is_about(term, c) for c in self.candidates(term)
        )


def link_chains(
    ranked: Sequence[Candidate],
    found: Sequence[tuple[FollowUp, Sequence[Candidate]]],
    *,
    k: int,
    max_links: int = 1,
    min_ratio: float = 0.5,
) -> tuple[list[Candidate], list[Link]]:
    """Link each follow-up's best passage to the passage that named its term; return the new ranking.

    ``found`` pairs each follow-up with its candidates reranked against its query (best first).
    - The best passage is already among the first ``k``: it is linked in place when it is about the term
      (the chain exists; bundling will keep the two together).
    - Otherwise it is linked, and moved right behind its parent (pushing the weakest passage out of the
      budget), only when it is about the term too, and its hop score reaches ``min_ratio`` of its parent's
      score and beats its own score for the plain question: a passage that merely mentions a side term
      ("American", "a retrospective template") or answers the follow-up weakly does not push out evidence.
    At most ``max_links`` links per parent; every other candidate keeps its order.
    """
    if not ranked:
        return [], []
    top_ids = {c.chunk_id for c in ranked[:k]}
    own = {c.chunk_id: _score(c) for c in ranked}
    proposals: list[tuple[float, Link]] = []
    for follow_up, candidates in found:
        best = next((c for c in candidates if c.chunk_id != follow_up.parent_id), None)
        if best is None:
            continue
        if best.chunk_id in top_ids:
            if is_about(follow_up.term, best):
                proposals.append((_score(best), Link(follow_up.parent_id, best, follow_up.term, moved=False)))
            continue
        score = _score(best)
        floor = min_ratio * own.get(follow_up.parent_id, float("inf"))
        if (
            score >= floor
            and score > own.get(best.chunk_id, float("-inf"))
            and is_about(follow_up.term, best)
        ):
            proposals.append((score, Link(follow_up.parent_id, best, follow_up.term, moved=True)))
    links: list[Link] = []
    per_parent: dict[str, int] = {}
    children: set[str] = set()
    for _, link in sorted(proposals, key=lambda x: -x[0]):
        cid = link.child.chunk_id
        if cid in children or cid == link.parent_id or per_parent.get(link.parent_id, 0) >= max_links:
            continue
        children.add(cid)
        per_parent[link.parent_id] = per_parent.get(link.parent_id, 0) + 1
        links.append(link)
    moved = {lk.child.chunk_id: lk for lk in links if lk.moved}
    out: list[Candidate] = []
    for cand in ranked:
        if cand.chunk_id in moved:
            continue  # it moves up, behind its parent
        out.append(cand)
        out.extend(lk.child for lk in links if lk.moved and lk.parent_id == cand.chunk_id)
    return out, links


def comparison_chains(question: str, selected: Sequence[Candidate], limit: int = 3) -> list[Chain]:
    """Passages about different subjects the question names side by side ("Who is older, X or Y?").

    A selected passage qualifies when its document title (brackets dropped) is named in the question as a
    phrase; with two or more such subjects, their best passages form one chain ((child, parent,
    "comparison"), the best-ranked passage the parent). Answering a comparison needs both sides together, not at opposite ends of the prompt.
    """
    q = f" {' '.join(re.findall(r'[0-9a-z]+', question.lower()))} "
    best: dict[str, tuple[int, Candidate]] = {}
    for rank, cand in enumerate(selected):
        title = _bare_title(cand.chunk.title)
        words = re.findall(r"[0-9a-z]+", title.lower())
        if not words or all(w in _FUNCTION_WORDS for w in words):
            continue
        if f" {' '.join(words)} " in q:
            best.setdefault(" ".join(words), (rank, cand))
    named = [cand for _, cand in sorted(best.values(), key=lambda x: x[0])][:limit]
    docs = {c.chunk.doc_id for c in named}
    if len(named) < 2 or len(docs) < len(named):
        return []
    return [(c.chunk_id, named[0].chunk_id, "comparison") for c in named[1:]]


def evidence_chains(question: str, selected: Sequence[Candidate], terms_per_passage: int = 4) -> list[Chain]:
    """Chains inside the selection itself: a passage names a term that another selected passage is about.

    "Submit your travel expenses on Form EXP-7" and "3.2 Form EXP-7: ... must be filed within 30 days" were
    both retrieved; every such pair is returned as (child, parent, "chain"), best-ranked parent first, and
    bundling joins the first pair whose bundles still fit. No retrieval is needed, so every selected passage
    is a possible parent. Passages of one document are left to dependency bundling.
    """
    chains: list[Chain] = []
    for parent in selected:
        chunk = parent.chunk
        terms = bridge_terms(question, chunk.text, chunk.title, terms_per_passage, _heading(chunk.section))
        for child in selected:
            if child.chunk.doc_id != chunk.doc_id and any(is_about(term, child) for term in terms):
                chains.append((child.chunk_id, chunk.chunk_id, "chain"))
    return chains


# ------------------------------------------------------------------------------- the runner's hop decisions
HOP_NOTHING_NEW = "nothing new: no follow-up passage beat the evidence it would displace"


def hop_frontier(ranked: Sequence[Candidate], *, passages: int, threshold: float) -> list[Candidate]:
    """The passages the first hop follows from: of the best ``passages``, those reaching ``threshold`` (the
    abstention threshold: a passage too weak to answer leads nowhere worth following)."""
    return [c for c in ranked[:passages] if _score(c) >= threshold]


def followable(
    follow_ups: Sequence[FollowUp], about: AboutIndex, *, allows: Callable[[Chunk], bool]
) -> list[FollowUp]:
    """The follow-ups worth retrieving: some passage ``allows`` admits, other than the one that named the term,
    is about the term (a lone common word that titles nothing, an id no heading or opening carries, is not)."""
    return [f for f in follow_ups if about.any_about(f.term, exclude=f.parent_id, allows=allows)]


def no_follow_up(follow_ups: Sequence[FollowUp]) -> str:
    """Why hopping stops when no follow-up is worth retrieving (``follow_ups``: the ones proposed)."""
    if follow_ups:
        return "no readable passage is about the bridge terms the strongest passages name"
    return "no bridge term: the strongest passages name nothing the question does not"


def hop_limit(max_hops: int) -> str:
    """Why hopping stops after its last allowed round."""
    return f"hop limit ({max_hops}) reached"


def bundle_chains(question: str, selected: Sequence[Candidate], hop_chains: Sequence[Chain]) -> list[Chain]:
    """Every chain bundling keeps together, in the order it joins them: the links the hops found first, then
    subjects compared side by side ("Who is older, X or Y?"), then terms one selected passage names and
    another is about."""
    return [*hop_chains, *comparison_chains(question, selected), *evidence_chains(question, selected)]


# ----------------------------------------------------------------------------- the stage


class Hops:
    """Places linked passages behind the passages that named them; records the chains ((linked chunk id, the
    chunk id that led to it, "chain"), moved or linked in place) and one trace record per hop."""

    name = "hops"

    def __init__(self, settings: Settings, models: Models, search: Search) -> None:
        self.settings, self.models, self.search = settings, models, search
        self._about: tuple[str, AboutIndex] | None = None  # (generation, which passages a term could lead to)

    def run(self, state: State) -> State:
        if state.plan.max_hops <= 0 or not state.ranked:
            return state
        ranked, chains, records = self.follow(state, state.plan.max_hops)
        return replace(state, ranked=ranked, chains=chains, hops=records)

    def follow(
        self, state: State, max_hops: int
    ) -> tuple[list[Candidate], list[Chain], list[dict[str, Any]]]:
        s, filt, ranked = self.settings, state.search_filter, state.ranked
        question, k = state.question.text, state.plan.evidence_k
        chains: list[Chain] = []
        records: list[dict[str, Any]] = []
        frontier = hop_frontier(ranked, passages=s.hop_passages, threshold=state.threshold)
        seen_terms: set[str] = set()
        for hop in range(1, max_hops + 1):
            with state.recorder.stage(f"hop_{hop}") as d:
                record: dict[str, Any] = {"hop": hop, "from": [c.chunk_id for c in frontier], "queries": []}
                records.append(record)
                fus = follow_ups(
                    question, frontier, terms_per_passage=s.hop_terms, seen_terms=frozenset(seen_terms)
                )
                seen_terms.update(f.term for f in fus)
                # A follow-up can only link a passage about its term: one no readable passage is about is
                # not retrieved.
                worth = followable(fus, self.about_index(), allows=filt.allows)
                if skipped := [f.term for f in fus if f not in worth]:
                    record["skipped"] = skipped  # no passage could be about them: nothing to retrieve
                if not worth:
                    record["stopped"] = no_follow_up(fus)
                    d.update(queries=0, linked=0, stopped="no_terms")
                    break
                fus = worth
                self.search.queries.vectors([f.query for f in fus])
                found = []
                for f in fus:
                    cands, _ = self.search.search(f.query, filt, intent=0, top_n=s.hop_top_n)
                    cands = [c.with_(hop=hop, added_by=f"hop_{hop}:{f.term}") for c in cands]
                    reranked = self.models.reranker.rerank(f.query, cands) if cands else []
                    found.append((f, reranked))
                    record["queries"].append(
                        {
                            "term": f.term,
                            "query": f.query,
                            "from": f.parent_id,
                            "found": [c.chunk_id for c in reranked[:3]],
                            "best_score": rounded(score_of(reranked[0])) if reranked else None,
                        }
                    )
                ranked, links = link_chains(ranked, found, k=k)
                chains += [(link.child.chunk_id, link.parent_id, "chain") for link in links]
                record["linked"] = [
                    {
                        "chunk_id": lk.child.chunk_id,
                        "from": lk.parent_id,
                        "term": lk.term,
                        "score": rounded(score_of(lk.child)),
                        "moved": lk.moved,
                    }
                    for lk in links
                ]
                d.update(queries=len(fus), linked=len(links))
                frontier = [lk.child for lk in links if lk.moved]
                if not frontier:
                    record["stopped"] = HOP_NOTHING_NEW
                    d["stopped"] = "nothing_new"
                    break
        else:
            if records:
                records[-1]["stopped"] = hop_limit(max_hops)
        return ranked, chains, records

    def about_index(self) -> AboutIndex:
        """The generation's AboutIndex (which passages a bridge term could lead to), built once per generation,
        by the first question that hops (constructing a Pipeline reads no index; the build is ~0.7 s at 10k
        chunks)."""
        reader = self.models.reader
        generation = reader.generation.name
        if self._about is None or self._about[0] != generation:
            chunks = [c for doc_id in reader.documents() for c in reader.doc_chunks(doc_id)]
            self._about = (generation, AboutIndex(chunks))
        return self._about[1]
