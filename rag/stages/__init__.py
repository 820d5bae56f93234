"""The pure, typed stages of the query path. The runner calls them in order and records timing and traces;
no stage does I/O or logging."""

from rag.stages.abstention import abstain, abstention_text, decide_abstention
from rag.stages.answer_type import check_answer_types
from rag.stages.budget import apply_budget
from rag.stages.bundle import ChunkLookup, bundle_dependencies
from rag.stages.citations import check_citations, parse_citations
from rag.stages.dedup import remove_near_duplicates
from rag.stages.extractive import extractive_answer
from rag.stages.intents import split_intents
from rag.stages.pack import edge_pack, number_evidence
from rag.stages.prompt import build_prompt
from rag.stages.retrieve import Hit, merge_intents, rrf_fuse
from rag.types import Abstention, Coverage

__all__ = [
    "Abstention",
    "ChunkLookup",
    "Coverage",
    "Hit",
    "abstain",
    "abstention_text",
    "apply_budget",
    "build_prompt",
    "bundle_dependencies",
    "check_answer_types",
    "check_citations",
    "decide_abstention",
    "edge_pack",
    "extractive_answer",
    "merge_intents",
    "number_evidence",
    "parse_citations",
    "remove_near_duplicates",
    "rrf_fuse",
    "split_intents",
]
