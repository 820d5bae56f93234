"""Place bundles in the prompt, and number the passages in their final order.

Models use the edges of a long context best (Liu et al., "Lost in the Middle"), so by default the strongest
bundle goes first, the second-strongest last and the weakest in the middle. The edges are passages, not
bundles: the bundle at the first edge opens with its best passage and the one at the last edge ends with its
best passage, so the passage the reranker put first is the first or last one the model reads, not the heading or
the paragraph before the rule that document order would put there. The other members keep their document order
(A B C with B best reads B A C at the first edge, A C B at the last), so a rule stays next to its exception, and
the prompt's labels say what continues what (rag/stages/prompt.py). A passage that states nothing an answer could quote (a
heading, a line of document metadata) never sits at an edge end: its text is the section label of the passages
beside it. Bundles in the middle keep their document order.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import replace

from rag.request import State
from rag.stages.budget import score_of
from rag.stages.bundle import has_rule_cue
from rag.types import Bundle, Candidate, Chunk, Evidence

# Where single passages can go; bundle_edges differs from edges only inside a bundle of several passages, so a
# sweep over single passages (evaluation/position.py) leaves it out by default.
SINGLE_PASSAGE_STRATEGIES = ("edges", "best_first", "best_last", "document_order")
STRATEGIES = (*SINGLE_PASSAGE_STRATEGIES, "bundle_edges")


def edges_order(n: int) -> list[int]:
    """Rank indices in edge order: ranks 0, 2, 4, ... fill from the front, ranks 1, 3, 5, ... from the back.

    ``edges_order(5) == [0, 2, 4, 3, 1]`` (A B C D E -> A C E D B); the best is first and the second-best last
    for every n >= 2, odd or even.
    """
    return list(range(0, n, 2)) + list(range(1, n, 2))[::-1]


def _document_key(bundle: Bundle) -> tuple[str, str, int]:
    if not bundle.members:
        return ("", "", -1)
    first = bundle.members[0].chunk
    return (
        first.source,
        first.doc_id,
        min(m.chunk.ordinal for m in bundle.members if m.chunk.doc_id == first.doc_id),
    )


# ------------------------------------------------------------------------------ what cannot lead the prompt
_WORDS = re.compile(r"[0-9a-z]+")
# "Effective date: 1 May 2024", "Owner: IT Service Desk", "Classification: Restricted, security group only":
# a label of up to three words, a colon, and a short value that states no rule
_FIELD = re.compile(r"^[A-Z][\w'&-]*(?:\s+[\w'&()-]+){0,2}:\s+(?P<value>\S.*)$", re.S)
_FIELD_VALUE_WORDS = 5
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")  # not rag.text.split_sentences: it splits at colons


def _words(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def _is_field(sentence: str) -> bool:
    m = _FIELD.match(sentence.strip().rstrip("."))
    return (
        m is not None
        and len(m.group("value").split()) <= _FIELD_VALUE_WORDS
        and not has_rule_cue(m.group("value"))
    )


@functools.lru_cache(maxsize=50_000)
def _states_nothing(text: str, title: str, section: str) -> bool:
    headings = f" {' '.join(_words(h) for h in [title, *section.split('>')])} "
    lines = [line.strip().lstrip("#").strip() for line in text.splitlines()]
    for line in filter(None, lines):
        if f" {_words(line)} " in headings or not _words(line):
            continue
        if not all(_is_field(sentence) for sentence in _SENTENCE_END.split(line)):
            return False
    return True


def states_nothing(chunk: Chunk) -> bool:
    """Every line of the passage is a heading (its title, a name on its section path, a running header) or a
    field of the document's metadata ("Effective date: 1 May 2024. Policy owner: IT Operations."): nothing an
    answer could quote, and nothing the section label does not say. Such a passage never leads the prompt."""
    return _states_nothing(chunk.text, chunk.title, chunk.section)


# ------------------------------------------------------------------------------ packing
def _strength(cand: Candidate) -> tuple[bool, bool, float]:
    """How strongly a member leads its bundle: a passage that states something, then a reranked one, then by
    score (the reranker's, else the fused score)."""
    return (not states_nothing(cand.chunk), cand.rerank_score is not None, score_of(cand))


def lead_index(bundle: Bundle, *, last: bool = False) -> int:
    """The member that goes at the edge: the strongest (``_strength``); among equals the first in document
    order, or with ``last`` the last, so members no score tells apart are never reordered."""
    members = bundle.members
    indices = range(len(members) - 1, -1, -1) if last else range(len(members))
    return max(indices, key=lambda i: _strength(members[i]))


def lead_first(bundle: Bundle) -> Bundle:
    """The bundle with its best passage first, the others after it in document order (A B C, B best: B A C)."""
    i, members = lead_index(bundle), bundle.members
    return replace(bundle, members=(members[i], *members[:i], *members[i + 1 :]))


def lead_last(bundle: Bundle) -> Bundle:
    """The bundle with its best passage last, the others before it in document order (A B C, B best: A C B)."""
    i, members = lead_index(bundle, last=True), bundle.members
    return replace(bundle, members=(*members[:i], *members[i + 1 :], members[i]))


def _can_lead(bundle: Bundle) -> bool:
    return not all(states_nothing(m.chunk) for m in bundle.members)


def edge_pack(bundles: Sequence[Bundle], strategy: str = "edges") -> list[Bundle]:
    """Order ``bundles`` (ranked best first) for the prompt, and their members: the returned bundles hold their
    members in prompt order. ``edges``: bundles in edge order, the first one led by its best passage and the
    last one ended by it; ``best_first``: in rank order, the first led by its best; ``best_last``: in reverse
    rank order, the last ended by its best; ``document_order``: by source and position, members untouched;
    ``bundle_edges``: bundles in edge order, members untouched (the packing before passage-level edges: a
    bundle at an edge may open with its heading or the paragraph before the rule). A bundle of passages that
    state nothing ranks after every other (it never sits at an edge while another can).
    """
    if strategy == "document_order":
        return sorted(bundles, key=_document_key)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown packing strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    ranked = [b for b in bundles if _can_lead(b)] + [b for b in bundles if not _can_lead(b)]
    if strategy in ("edges", "bundle_edges"):
        packed = [ranked[i] for i in edges_order(len(ranked))]
    elif strategy == "best_first":
        packed = list(ranked)
    else:
        packed = ranked[::-1]
    if packed and strategy in ("edges", "best_first"):
        packed[0] = lead_first(packed[0])
    if len(packed) > 1 and strategy in ("edges", "best_last"):
        packed[-1] = lead_last(packed[-1])
    elif len(packed) == 1 and strategy == "best_last":
        packed[0] = lead_last(packed[0])
    return packed


def number_evidence(packed: Sequence[Bundle]) -> list[Evidence]:
    """Flatten packed bundles into passages numbered 1..m in final order: [n] is the passage at position n."""
    flat = [(member, bundle.bundle_id) for bundle in packed for member in bundle.members]
    return [Evidence(n, cand, bundle_id) for n, (cand, bundle_id) in enumerate(flat, start=1)]


# ----------------------------------------------------------------------------- the stage


class Pack:
    """The bundles in prompt order, numbered [1], [2], ..."""

    name = "pack"

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            evidence = number_evidence(edge_pack(state.bundles, state.plan.packing))
            d.update(strategy=state.plan.packing, order=[e.candidate.chunk_id for e in evidence])
        return replace(state, evidence=evidence)
