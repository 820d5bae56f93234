"""Dependency bundling: a rule travels with its exception, a reference with what it refers to.

A passage is expanded only when it needs to be: it states a rule whose exception sits elsewhere, it is an
exception whose rule sits elsewhere, it cites another section ("see section 4.2", "section 5.1 of the Travel
Policy") or links to another document or section ("[approval in advance](expenses.md)"), it stops mid-list,
or it opens with a reference it cannot resolve alone ("This", "However,"). Every chunk added here is
re-checked against the request's filter: bundling must never widen what a user can read.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from rag.request import State
from rag.stages.hops import bundle_chains
from rag.stages.shared import Models
from rag.text import bm25_tokens
from rag.types import Bundle, Candidate, Chunk, Dropped, SearchFilter

STAGE = "bundling"
MAX_REFERENCES = 2  # cross-referenced sections followed per passage
# A bundle is a rule with what it needs, not a whole document: chains of links between selected passages
# would otherwise merge every passage of one policy into one block and defeat edge packing.
MAX_BUNDLE = 3
# A chain (a passage with the passage its term leads to) may add one link to a full bundle, and so may a
# selected passage that continues (or is continued by) a bundle's passage: two pieces of one list read as one.
MAX_CHAIN_BUNDLE = MAX_BUNDLE + 1
_CONTIGUOUS = frozenset({"continuation", "reference"})


class ChunkLookup(Protocol):
    def get(self, chunk_id: str) -> Chunk | None: ...

    def doc_chunks(self, doc_id: str) -> Sequence[Chunk]:  # ordered by ordinal
        ...

    def docs_by_title(self, title: str) -> Sequence[str]:  # doc ids whose title matches (case-insensitive)
        ...


EXCEPTION_CUES = re.compile(
    r"\b(?:except(?:ions?)?|(?:does|do|shall|will) not apply|unless|not eligible|ineligible|excluding|"
    r"excluded|exclusions?|not covered)\b",
    re.IGNORECASE,
)
_RULE_CUES = re.compile(
    r"\b(?:must|may|shall|should|required?|requires|eligible|entitled|allowed|permitted|within|up to|"
    r"at least|no more than|maximum|minimum|limit(?:ed|s)?|can|cannot|will be)\b"
    r"|\b\d+\s*(?:(?:days?|weeks?|months?|years?|hours?|percent)\b|%)",
    re.IGNORECASE,
)
_TITLE = r"(?P<title>[A-Z][\w'&-]*(?:\s+(?:(?:and|of|for|on|&)\s+)?[A-Z][\w'&-]*)*)"
_OF_TITLE = rf"(?:\s+(?:of|in)\s+(?:the\s+)?{_TITLE})?"
_SECTION_REFS = (
    re.compile(rf"(?i:\b(?:sections?|sec\.|clause)\s*|§\s*)(?P<num>\d+(?:\.\d+)*){_OF_TITLE}"),
    # a bare dotted number needs a referring verb: "as described in 3.4", "see 4.2"
    re.compile(
        rf"(?i:\b(?:see|described in|set out in|defined in|specified in|stated in|outlined in|refer to))"
        rf"\s+(?P<num>\d+(?:\.\d+)+){_OF_TITLE}"
    ),
)
_COMPONENT_NUMBER = re.compile(r"(?:(?:section|sec\.|§)\s*)?(\d+(?:\.\d+)*)\.?(?!\d)", re.IGNORECASE)
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022\u2023\u25e6]|\d+[.)]|[a-z][.)]|\([a-z0-9]+\))\s+")
_OPENS_WITH_REFERENCE = re.compile(
    r"^\s*(?:(?:This|These|Those|That|Such|It|They)\b(?!\s+(?:policy|document|section|guide|handbook|"
    r"procedure|standard)\b)|The above\b|However\b|Except as (?:noted|stated|provided|described)\b|"
    r"In (?:such|this|that) cases?\b|Otherwise\b|In addition\b)"
)


def opens_with_reference(text: str) -> bool:
    """The text opens by pointing back at what came before it ("However, ...", "This applies ...", "In addition,
    ...", "Otherwise ..."): read alone, it does not say what it is about."""
    return _OPENS_WITH_REFERENCE.match(text) is not None


# Words every section of a policy shares; they do not tie a rule to an exception.
_GENERIC = frozenset(
    bm25_tokens("policy policies section exception exceptions exclusions general rules overview introduction")
    + bm25_tokens("scope definitions notes appendix procedure part chapter")
    + bm25_tokens("may must shall can cannot will would should within day days week weeks month months")
    + bm25_tokens("year years employee employees staff customer customers")
)
_EXCEPTION_HEADING = re.compile(
    r"\b(?:exceptions?|exclusions?|limitations?|restrictions?|special cases?)\b", re.I
)
# A Markdown link to another file or to a section ("[approval in advance](expenses.md)", "(#reporting)");
# links with a scheme (https:, mailto:) point outside the corpus.
_DOC_LINK = re.compile(r"\[[^\]\n]+\]\((?P<target>[^)\s]+)\)")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


@dataclass(frozen=True)
class _Link:
    chunk: Chunk
    reason: str  # bundle reason
    added_by: str  # why the chunk was added, naming the passage that needed it


# Passages come back request after request (and bundling tests each pool candidate against each selected
# passage): the regex verdicts are kept per text.
@functools.lru_cache(maxsize=50_000)
def has_rule_cue(text: str) -> bool:
    """Rule wording: a modal ("must", "may"), a limit ("within", "up to") or a quantity of time ("30 days")."""
    return bool(_RULE_CUES.search(text))


@functools.lru_cache(maxsize=50_000)
def _has_exception_cue(text: str) -> bool:
    return bool(EXCEPTION_CUES.search(text))


def _states_rule(chunk: Chunk) -> bool:
    """Rule wording outside an exceptions section. A rule may mention an exception of its own ("except for
    faulty goods under section 5") and still need the exceptions listed elsewhere."""
    if _EXCEPTION_HEADING.search(chunk.section.removeprefix(chunk.title)):
        return False
    return has_rule_cue(chunk.text)


def _exception_level(chunk: Chunk) -> int | None:
    """Index of the first section-path component below the title that heads exceptions, or None."""
    return _exception_level_of(chunk.section, chunk.title)


@functools.lru_cache(maxsize=50_000)
def _exception_level_of(section: str, title: str) -> int | None:
    components = [c.strip() for c in section.split(">")]
    for i, component in enumerate(components):
        if component and component != title.strip() and _EXCEPTION_HEADING.search(component):
            return i
    return None


def _rule_for_exception(exception: Chunk, other: Chunk) -> bool:
    """``other`` states the rule that ``exception`` qualifies: same document, outside the exceptions
    section, under the section that holds it, rule wording, and a topic word of their own in common."""
    level = _exception_level(exception)
    if (
        level is None
        or other.doc_id != exception.doc_id
        or other.chunk_id == exception.chunk_id
        or _exception_level(other) is not None
        or not has_rule_cue(other.text)
    ):
        return False
    parent = [c.strip() for c in exception.section.split(">")][:level]
    if [c.strip() for c in other.section.split(">")][: len(parent)] != parent:
        return False
    return bool(_terms(exception.text, exception.title) & _terms(other.text, other.title))


def _slug(heading: str) -> str:
    """GitHub-style anchor of a heading: "Reporting an incident" -> "reporting-an-incident"."""
    words = re.sub(r"[^\w\s-]", "", heading.lower()).split()
    return "-".join(words)


def _link_targets(chunk: Chunk) -> list[tuple[str, str]]:
    """(resolved source path or "" for this document, anchor) of each Markdown link to the corpus."""
    out: list[tuple[str, str]] = []
    for match in _DOC_LINK.finditer(chunk.text):
        target = match.group("target")
        if _SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        if path:
            path = posixpath.normpath(posixpath.join(posixpath.dirname(chunk.source), path))
        if (path or anchor) and (path, anchor) not in out:
            out.append((path, anchor.lower()))
    return out


def _lines(text: str) -> list[str]:
    return [line for line in text.strip().splitlines() if line.strip()]


def _ends_mid_list(chunk: Chunk, nxt: Chunk) -> bool:
    lines, next_lines = _lines(chunk.text), _lines(nxt.text)
    if not lines:
        return False
    if lines[-1].rstrip().endswith(":"):
        return True
    return bool(_LIST_ITEM.match(lines[-1]) and next_lines and _LIST_ITEM.match(next_lines[0]))


def _starts_mid_list(chunk: Chunk, prev: Chunk) -> bool:
    lines = _lines(chunk.text)
    return bool(lines and _LIST_ITEM.match(lines[0]) and _ends_mid_list(prev, chunk))


def _section_numbers(section: str) -> list[str]:
    numbers = []
    for component in section.split(">"):
        match = _COMPONENT_NUMBER.match(component.strip())
        if match:
            numbers.append(match.group(1))
    return numbers


def _in_section(chunk: Chunk, number: str, *, prefix: bool = False) -> bool:
    numbers = _section_numbers(chunk.section)
    if prefix:
        return any(n.startswith(number + ".") for n in numbers)
    return number in numbers


@functools.lru_cache(maxsize=50_000)
def _terms(text: str, title: str) -> frozenset[str]:
    """Topic words of a section path (or a text): no title words, no section numbers, nothing generic."""
    words = set(bm25_tokens(text)) - set(bm25_tokens(title)) - _GENERIC
    return frozenset(w for w in words if not w.replace(".", "").isdigit())


def _is_exception_to(rule: Chunk, other: Chunk, *, from_pool: bool) -> bool:
    """Same document, exception wording, and tied to the rule by its section (or, for a reranked pool
    candidate, by an exceptions heading or a shared topic word in the text)."""
    if other.doc_id != rule.doc_id or other.chunk_id == rule.chunk_id or not _has_exception_cue(other.text):
        return False
    if _terms(rule.section, rule.title) & _terms(other.section, other.title):
        return True
    if not from_pool:
        return False
    heading = other.section.removeprefix(other.title)
    return bool(
        _EXCEPTION_HEADING.search(heading) or _terms(rule.text, rule.title) & _terms(other.text, other.title)
    )


class _Bundler:
    """Holds the state of one bundling call; ``bundle_dependencies`` is the public entry point."""

    def __init__(
        self,
        selected: Sequence[Candidate],
        lookup: ChunkLookup,
        filt: SearchFilter,
        pool: Sequence[Candidate],
        max_added: int,
        token_budget: int | None,
        chains: Sequence[tuple[str, str, str]] = (),
        join_adjacent: bool = True,
    ) -> None:
        self.lookup, self.filt, self.max_added, self.token_budget = lookup, filt, max_added, token_budget
        self.join_adjacent = join_adjacent
        self.chains = chains
        self.chain_parent: dict[str, str] = {}  # chained passage -> the passage that named its term
        self.pool = {c.chunk_id: c for c in pool}
        self.pool_rank = {c.chunk_id: i for i, c in enumerate(pool)}
        self.members: dict[str, Candidate] = {}
        for cand in selected:
            self.members.setdefault(cand.chunk_id, cand)
        self.selected = list(self.members)
        self.priority = {cid: i for i, cid in enumerate(self.selected)}
        self.parent = {cid: cid for cid in self.selected}
        self.reasons: dict[str, list[str]] = {cid: [] for cid in self.selected}
        self.added: list[Candidate] = []
        self.dropped: list[Dropped] = []
        self.refused: set[str] = set()
        self.tokens = sum(c.chunk.n_tokens for c in self.members.values())

    # -- groups (union-find over chunk ids) ------------------------------------------------------------
    def root(self, cid: str) -> str:
        while self.parent[cid] != cid:
            self.parent[cid] = self.parent[self.parent[cid]]
            cid = self.parent[cid]
        return cid

    def size(self, cid: str) -> int:
        root = self.root(cid)
        return sum(1 for member in self.parent if self.root(member) == root)

    def join(self, a: str, b: str, reason: str) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra == rb:
            return
        if self.priority[rb] < self.priority[ra]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.reasons[ra] = [*self.reasons[ra], reason, *self.reasons.pop(rb)]

    # -- finding what a passage depends on ---------------------------------------------------------------
    def cross_references(self, chunk: Chunk) -> Iterator[_Link]:
        """Up to MAX_REFERENCES sections the passage cites (a table of contents must not pull in a book)."""
        targets: list[str] = []
        refs = [ref for pattern in _SECTION_REFS for ref in pattern.finditer(chunk.text)]
        for ref in sorted(refs, key=lambda r: r.start()):
            if len(targets) >= MAX_REFERENCES:
                return
            target = self.resolve(chunk, ref.group("num"), ref.group("title"))
            if target is not None and target.chunk_id not in targets:
                targets.append(target.chunk_id)
                yield _Link(target, "cross_reference", f"cross_reference:{chunk.chunk_id}")

    def resolve(self, chunk: Chunk, number: str, title: str | None) -> Chunk | None:
        doc_ids = list(self.lookup.docs_by_title(title)) if title else [chunk.doc_id]
        if chunk.doc_id in doc_ids:  # "section 4 of the Policy" inside that policy: itself first
            doc_ids = [chunk.doc_id]
        return self.section_target(chunk, number, doc_ids)

    def section_target(self, chunk: Chunk, number: str, doc_ids: Sequence[str]) -> Chunk | None:
        """First chunk of the numbered section (a pool candidate when one is there), never ``chunk`` itself."""
        in_docs = [c for d in doc_ids for c in self.lookup.doc_chunks(d) if c.chunk_id != chunk.chunk_id]
        matches = [c for c in in_docs if _in_section(c, number)] or [
            c for c in in_docs if _in_section(c, number, prefix=True)
        ]
        return self.prefer_pool(matches)

    def prefer_pool(self, chunks: Sequence[Chunk]) -> Chunk | None:
        in_pool = sorted(
            (c for c in chunks if c.chunk_id in self.pool), key=lambda c: self.pool_rank[c.chunk_id]
        )
        if in_pool:
            return in_pool[0]
        return chunks[0] if chunks else None

    def exception_for(self, rule: Chunk) -> Chunk | None:
        """The passage holding the exception to ``rule``: a reranked pool candidate first, else the nearest
        chunk of the same document whose section shares a topic word with the rule's section."""
        for cand in sorted(self.pool.values(), key=lambda c: self.pool_rank[c.chunk_id]):
            if _is_exception_to(rule, cand.chunk, from_pool=True):
                return cand.chunk
        same_doc = [
            c for c in self.lookup.doc_chunks(rule.doc_id) if _is_exception_to(rule, c, from_pool=False)
        ]
        if not same_doc:
            return None
        return min(same_doc, key=lambda c: (abs(c.ordinal - rule.ordinal), -c.ordinal))

    def rule_for(self, exception: Chunk) -> Chunk | None:
        """The rule an exception passage qualifies: a reranked pool candidate first, else the nearest earlier
        chunk of the same document (see ``_rule_for_exception``)."""
        for cand in sorted(self.pool.values(), key=lambda c: self.pool_rank[c.chunk_id]):
            if _rule_for_exception(exception, cand.chunk):
                return cand.chunk
        earlier = [
            c
            for c in self.lookup.doc_chunks(exception.doc_id)
            if c.ordinal < exception.ordinal and _rule_for_exception(exception, c)
        ]
        return max(earlier, key=lambda c: c.ordinal) if earlier else None

    def document_links(self, chunk: Chunk) -> Iterator[_Link]:
        """Up to MAX_REFERENCES Markdown links to another document or section, followed only to a passage
        retrieved for this question (the pool): handbooks link everywhere, and a link is a dependency only
        when its target is about what was asked. A link with an anchor ("#tracking-expenses") leads to that
        section only; one without leads to the target document's best-ranked passage."""
        found: list[str] = []
        for path, anchor in _link_targets(chunk):
            if len(found) >= MAX_REFERENCES:
                return
            in_target = [
                c
                for c in self.pool.values()
                if c.chunk_id != chunk.chunk_id
                and (c.chunk.source == path if path else c.chunk.doc_id == chunk.doc_id)
            ]
            if anchor:
                in_target = [c for c in in_target if _slug(c.chunk.section.split(">")[-1]) == anchor]
            if not in_target:
                continue
            best = min(in_target, key=lambda c: self.pool_rank[c.chunk_id]).chunk
            if best.chunk_id not in found:
                found.append(best.chunk_id)
                yield _Link(best, "cross_reference", f"link_from:{chunk.chunk_id}")

    def neighbours(self, chunk: Chunk) -> Iterator[_Link]:
        added_by = f"neighbour_of:{chunk.chunk_id}"
        nxt = self.lookup.get(chunk.next_id) if chunk.next_id else None
        prev = self.lookup.get(chunk.prev_id) if chunk.prev_id else None
        if nxt is not None and _ends_mid_list(chunk, nxt):
            yield _Link(nxt, "continuation", added_by)
        if prev is not None and _starts_mid_list(chunk, prev):
            yield _Link(prev, "continuation", added_by)
        elif prev is not None and opens_with_reference(chunk.text):
            yield _Link(prev, "reference", added_by)

    def links(self, chunk: Chunk) -> Iterator[_Link]:
        # The exception first: with the bundle size capped, the rule's exception matters most. A
        # cross-reference does not replace it: "within 45 days ... except faulty goods under section 5"
        # still needs its gift-card exception in section 4.2.
        exception = self.exception_for(chunk) if _states_rule(chunk) else None
        if exception is not None:
            yield _Link(exception, "rule_exception", f"exception_of:{chunk.chunk_id}")
        # ... and an exception (a passage under an "Exceptions" heading) with the rule it qualifies
        rule = self.rule_for(chunk) if _exception_level(chunk) is not None else None
        if rule is not None:
            yield _Link(rule, "rule_exception", f"rule_of:{chunk.chunk_id}")
        for ref in self.cross_references(chunk):
            if exception is None or ref.chunk.chunk_id != exception.chunk_id:
                yield ref
        yield from self.document_links(chunk)
        yield from self.neighbours(chunk)

    # -- adding -----------------------------------------------------------------------------------------
    def refuse(self, chunk_id: str, reason: str) -> None:
        if chunk_id not in self.refused:
            self.refused.add(chunk_id)
            self.dropped.append(Dropped(chunk_id, reason, STAGE))

    def add(self, source: str, link: _Link, *, cap: int = MAX_BUNDLE) -> None:
        cid = link.chunk.chunk_id
        if cid in self.members:
            cap = max(cap, MAX_CHAIN_BUNDLE if link.reason in _CONTIGUOUS else MAX_BUNDLE)
            if self.root(source) != self.root(cid) and self.size(source) + self.size(cid) <= cap:
                self.join(source, cid, link.reason)
            return
        if cid in self.refused:
            return
        if not self.filt.allows(link.chunk):
            self.refuse(cid, "access_denied")  # the record names no title or text
        elif self.size(source) >= cap:
            return  # not refused for good: another passage's smaller bundle may still take it
        elif len(self.added) >= self.max_added:
            self.refuse(cid, "bundle_limit")
        elif self.token_budget is not None and self.tokens + link.chunk.n_tokens > self.token_budget:
            self.refuse(cid, "over_budget_tokens")
        else:
            base = self.pool.get(cid) or Candidate(chunk=link.chunk, hop=self.members[source].hop)
            cand = base.with_(added_by=link.added_by)
            self.members[cid] = cand
            self.added.append(cand)
            self.tokens += link.chunk.n_tokens
            self.priority[cid] = len(self.priority)
            self.parent[cid] = cid
            self.reasons[cid] = []
            self.join(source, cid, link.reason)

    def run(self) -> tuple[list[Bundle], list[Candidate], list[Dropped]]:
        for cid in self.selected:
            for link in self.links(self.members[cid].chunk):
                self.add(cid, link)
        # A passage added for another (a linked section) may itself be a list fragment: it gets its lead-in
        # or the rest of its list, one past the cap, so that nothing shown is cut mid-list.
        for cand in list(self.added):
            for link in self.neighbours(cand.chunk):
                self.add(cand.chunk_id, link, cap=MAX_CHAIN_BUNDLE)
        # Passages that follow each other in their document read as one text: they travel together, in
        # document order, so edge packing never puts a passage at one end and its continuation at the other.
        if self.join_adjacent:
            for cid in list(self.members):
                nxt = self.members[cid].chunk.next_id
                if (
                    nxt in self.members
                    and self.root(cid) != self.root(nxt)
                    and self.size(cid) + self.size(nxt) <= MAX_CHAIN_BUNDLE
                ):
                    self.join(cid, nxt, "adjacent")
        # Then chains: the passage that named a term with the passage it led to (what a passage needs to be
        # read at all comes first). A child joins the first of its parents whose bundle still has room.
        chained: set[str] = set()
        for child, parent, reason in self.chains:
            if child in chained or child not in self.members or parent not in self.members:
                continue
            if self.root(child) == self.root(parent):
                chained.add(child)
            elif self.size(parent) + self.size(child) <= MAX_CHAIN_BUNDLE:
                self.join(parent, child, reason)
                chained.add(child)
                self.chain_parent[child] = parent
        return self.bundles(), self.added, self.dropped

    # -- output ---------------------------------------------------------------------------------------
    def bundles(self) -> list[Bundle]:
        groups: dict[str, list[str]] = {}
        for cid in self.members:
            groups.setdefault(self.root(cid), []).append(cid)
        ordered = sorted(groups.items(), key=lambda kv: self.priority[kv[0]])
        return [self.bundle(i, root, ids) for i, (root, ids) in enumerate(ordered)]

    def bundle(self, bundle_id: int, root: str, ids: list[str]) -> Bundle:
        members = [self.members[cid] for cid in ids]
        doc_rank: dict[str, float] = {}
        for cand in sorted(members, key=lambda c: self.priority[c.chunk_id]):
            doc_rank.setdefault(cand.chunk.doc_id, len(doc_rank))
        for child, parent in self.chain_parent.items():  # chain order: the document that named the term first
            if child in ids and parent in ids:
                child_doc, parent_doc = self.members[child].chunk.doc_id, self.members[parent].chunk.doc_id
                if doc_rank[child_doc] < doc_rank[parent_doc]:
                    doc_rank[child_doc] = doc_rank[parent_doc] + 0.5
        members.sort(key=lambda c: (doc_rank[c.chunk.doc_id], c.chunk.ordinal))
        reason = self.reasons[root][0] if len(members) > 1 and self.reasons[root] else "single"
        return Bundle(bundle_id, tuple(members), reason, bundle_score(members))


def bundle_score(members: Sequence[Candidate]) -> float:
    """The best member's rerank score; the best fused score when no member was reranked."""
    reranked = [c.rerank_score for c in members if c.rerank_score is not None]
    if reranked:
        return max(reranked)
    return max((c.fused_score for c in members), default=0.0)


def single_bundles(selected: Sequence[Candidate]) -> list[Bundle]:
    """Every selected passage on its own, in rank order: what the evidence is without bundling."""
    return [Bundle(i, (c,), "single", bundle_score([c])) for i, c in enumerate(selected)]


def bundle_dependencies(
    selected: Sequence[Candidate],
    lookup: ChunkLookup,
    filt: SearchFilter,
    *,
    pool: Sequence[Candidate] = (),
    max_added: int = 4,
    token_budget: int | None = None,
    chains: Sequence[tuple[str, str, str]] = (),
    join_adjacent: bool = True,
) -> tuple[list[Bundle], list[Candidate], list[Dropped]]:
    """Group ``selected`` (ranked best first) with the passages they depend on.

    Returns the bundles (ids 0.. in order of their best member's rank; members in document order), the
    candidates that were added (``added_by`` says why; ``rerank_score`` kept only when they came from
    ``pool``), and Dropped records for chunks that were needed but refused: "access_denied",
    "bundle_limit" (more than ``max_added``) or "over_budget_tokens" (the selection plus additions would
    exceed ``token_budget``). A needed chunk that is already selected merges the two bundles instead.
    ``chains`` lists (passage, the passage it belongs with, reason: "chain" for a multi-hop link, "comparison"
    for subjects compared) in priority order: both selected, they join one bundle (up to MAX_CHAIN_BUNDLE
    members), the better-ranked passage's document first; a passage joins its first parent that has room.
    With ``join_adjacent``, members that follow each other in one document ("adjacent") join one bundle too,
    up to MAX_CHAIN_BUNDLE members.
    """
    return _Bundler(selected, lookup, filt, pool, max_added, token_budget, chains, join_adjacent).run()


# ----------------------------------------------------------------------------- the stage


class BundleDependencies:
    """Passages that depend on each other travel together (``bundling=False``: each passage alone, ablate=bundling;
    ``join_adjacent=False``: neighbours are not joined, ablate=adjacent)."""

    name = "bundle"

    def __init__(self, models: Models, *, bundling: bool = True, join_adjacent: bool = True) -> None:
        self.models, self.bundling, self.join_adjacent = models, bundling, join_adjacent

    def run(self, state: State) -> State:
        dropped = state.dropped
        with state.recorder.stage(self.name) as d:
            added: list[Candidate] = []
            if not self.bundling:
                bundles = single_bundles(state.selected)
            else:
                chains = bundle_chains(state.question.text, state.selected, state.chains)
                d["chains"] = [list(c) for c in chains]
                bundles, added, drops = bundle_dependencies(
                    state.selected,
                    self.models.reader,
                    state.search_filter,
                    pool=state.kept,
                    token_budget=state.plan.token_budget,
                    chains=chains,
                    join_adjacent=self.join_adjacent,
                )
                dropped = [*dropped, *drops]
            d.update(bundles=len(bundles), added=[c.chunk_id for c in added])
        return replace(state, bundles=bundles, dropped=dropped)
