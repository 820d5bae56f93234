"""Knowledge gaps for admins: what the Analytics page computes from the trace store, as plain functions.
Questions come from every channel (the chat page, ``rag ask``, the API); topics and the per-channel table say
which.

Questions the bot abstained on or that their asker rated down are grouped by topic: their embeddings (the
project's embedder, the packaged MiniLM by default) are clustered agglomeratively (average linkage, cosine
distance, cut at ``TOPIC_DISTANCE``), so the number of topics follows the questions instead of a fixed k.
An abstention that a document the asker may not read would have answered is a refusal for access, counted
apart (:func:`needed_documents`). Documents are told apart by file and validity (:func:`document_label`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rag.text import STOPWORDS
from rag.types import Principal
from ui.sources import document_meta

# Cosine distance at which two groups of questions stop being one topic. MiniLM puts paraphrases of one
# question at ~0.1-0.35 and different policy questions at ~0.6-0.9; 0.5 keeps "dog in the office" apart from
# "parental leave" while merging the ways people ask about either.
TOPIC_DISTANCE = 0.5
EXAMPLES = 3
_WORD = re.compile(r"[a-z][a-z0-9'-]+")
_QUESTION_WORDS = frozenset({"can", "may", "much", "many", "long", "get", "need", "please", "tell", "know"})


@dataclass(frozen=True)
class Topic:
    """One group of similar unanswered or down-voted questions."""

    label: str  # the question nearest the group's centre
    terms: tuple[str, ...]  # the group's most frequent content words
    count: int
    abstained: int
    down_votes: int
    examples: tuple[str, ...]  # distinct questions of the group, label first
    trace_ids: tuple[str, ...] = field(default=(), repr=False)
    reasons: Mapping[str, int] = field(default_factory=dict)
    channels: Mapping[str, int] = field(default_factory=dict)  # where its questions were asked: ui, cli, api


def cluster_labels(vectors: np.ndarray, distance: float = TOPIC_DISTANCE) -> np.ndarray:
    """A topic number (0..k-1, biggest topic first) for each row of ``vectors`` (normalised or not)."""
    n = len(vectors)
    if n == 0:
        return np.zeros(0, dtype=int)
    if n == 1:
        return np.zeros(1, dtype=int)
    from scipy.cluster.hierarchy import fcluster, linkage

    x = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms == 0, 1.0, norms)
    raw = fcluster(linkage(x, method="average", metric="cosine"), t=distance, criterion="distance")
    sizes = Counter(raw.tolist())
    # Renumber: the biggest topic is 0; ties by first appearance, so the result does not depend on scipy's ids.
    first = {c: i for i, c in reversed(list(enumerate(raw.tolist())))}
    order = sorted(sizes, key=lambda c: (-sizes[c], first[c]))
    rank = {c: i for i, c in enumerate(order)}
    return np.array([rank[c] for c in raw.tolist()], dtype=int)


def _terms(questions: Sequence[str], k: int = 3) -> tuple[str, ...]:
    counts: Counter[str] = Counter()
    for q in questions:
        counts.update(
            {w for w in _WORD.findall(q.lower()) if w not in STOPWORDS and w not in _QUESTION_WORDS}
        )
    return tuple(w for w, _ in counts.most_common(k))


def group_gaps(
    gaps: Sequence[Mapping[str, Any]], embed: Any, distance: float = TOPIC_DISTANCE
) -> list[Topic]:
    """Group ``gaps`` (rows of ``TraceStore.gap_questions``) into topics, biggest first.

    ``embed`` maps a list of questions to a matrix (``embedder.embed_queries``). Each distinct question
    (case and spacing ignored) is embedded once; repeats count towards their topic.
    """
    rows = [g for g in gaps if str(g.get("question") or "").strip()]
    if not rows:
        return []
    keys = [" ".join(str(g["question"]).lower().split()) for g in rows]
    distinct = list(dict.fromkeys(keys))
    text_of = {k: " ".join(str(g["question"]).split()) for k, g in zip(keys, rows, strict=True)}
    vectors = np.asarray(embed([text_of[k] for k in distinct]), dtype=np.float64)
    labels = cluster_labels(vectors, distance)
    topic_of = dict(zip(distinct, labels.tolist(), strict=True))
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1.0, norms)
    topics: list[Topic] = []
    for t in range(int(labels.max()) + 1):
        members = [i for i, k in enumerate(distinct) if topic_of[k] == t]
        centre = unit[members].mean(axis=0)
        medoid = members[int(np.argmax(unit[members] @ centre))]
        group_rows = [g for g, k in zip(rows, keys, strict=True) if topic_of[k] == t]
        counts = Counter(k for k in keys if topic_of[k] == t)
        by_count = sorted(members, key=lambda i: (i != medoid, -counts[distinct[i]], i))
        topics.append(
            Topic(
                label=text_of[distinct[medoid]],
                terms=_terms([text_of[distinct[i]] for i in members]),
                count=len(group_rows),
                abstained=sum(bool(g.get("abstained")) for g in group_rows),
                down_votes=sum(g.get("feedback") == "down" for g in group_rows),
                examples=tuple(text_of[distinct[i]] for i in by_count[:EXAMPLES]),
                trace_ids=tuple(str(g["trace_id"]) for g in group_rows),
                reasons=dict(
                    Counter(str(g["feedback_reason"]) for g in group_rows if g.get("feedback_reason"))
                ),
                channels=dict(Counter(str(g["channel"]) for g in group_rows if g.get("channel"))),
            )
        )
    return sorted(topics, key=lambda t: (-t.count, t.label))


def topics_frame(topics: Sequence[Topic]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "topic": t.label,
                "terms": ", ".join(t.terms),
                "questions": t.count,
                "abstained": t.abstained,
                "down-voted": t.down_votes,
                "reasons": ", ".join(f"{r.replace('_', ' ')} {n}" for r, n in sorted(t.reasons.items())),
                "channels": ", ".join(f"{c} {n}" for c, n in sorted(t.channels.items())),
                "examples": " | ".join(t.examples),
            }
            for t in topics
        ],
        columns=["topic", "terms", "questions", "abstained", "down-voted", "reasons", "channels", "examples"],
    )


def channels_frame(stats: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Questions per channel (the chat page, `rag ask`, the API) with their abstention rate and feedback."""
    labels = {"ui": "chat page (ui)", "cli": "rag ask (cli)", "api": "API (api)"}
    frame = pd.DataFrame(
        [
            {
                "channel": labels.get(str(c["channel"]), str(c["channel"])),
                "questions": int(c["questions"]),
                "abstained": int(c["abstained"]),
                "thumbs up": int(c["thumbs_up"]),
                "thumbs down": int(c["thumbs_down"]),
            }
            for c in stats
        ],
        columns=["channel", "questions", "abstained", "thumbs up", "thumbs down"],
    )
    asked = frame["questions"].where(frame["questions"] > 0)
    frame["abstention rate"] = (frame["abstained"] / asked).fillna(0.0)
    return frame


def daily_frame(days: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per day with the rates beside the counts (a day with no answers has no row)."""
    columns = ["day", "questions", "abstained", "failed_citations", "errors", "thumbs_up", "thumbs_down"]
    frame = pd.DataFrame(list(days), columns=columns)
    questions = frame["questions"].where(frame["questions"] > 0)
    frame["abstention_rate"] = (frame["abstained"] / questions).fillna(0.0)
    frame["failed_citation_rate"] = (frame["failed_citations"] / questions).fillna(0.0)
    return frame


def totals(days: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Counts over the whole window, with the abstention and failed-citation rates (0 when nothing was asked)."""
    keys = ("questions", "abstained", "failed_citations", "errors", "thumbs_up", "thumbs_down")
    out: dict[str, float] = {k: float(sum(int(d.get(k) or 0) for d in days)) for k in keys}
    asked = out["questions"]
    out["abstention_rate"] = out["abstained"] / asked if asked else 0.0
    out["failed_citation_rate"] = out["failed_citations"] / asked if asked else 0.0
    return out


DOCUMENT_COLUMNS = ["document", "title", "file", "valid", "status", "answers citing it", "doc id", "indexed"]


def validity(doc: Mapping[str, Any], today: date) -> tuple[str, str]:
    """('2022-01-01 to 2024-12-31', 'expired') for a manifest entry: its validity window and its state today."""
    meta = document_meta("?", dict(doc))
    if meta.effective and meta.expires:
        window = f"{meta.effective} to {meta.expires}"
    elif meta.effective:
        window = f"from {meta.effective}"
    else:
        window = f"until {meta.expires}" if meta.expires else ""
    if meta.valid_on(today):
        return window, "in force"
    return window, "expired" if meta.expires and today > meta.expires else "not yet in force"


def document_label(title: str, file: str, status: str) -> str:
    """One line that tells documents apart: 'Travel Policy · travel-policy-2022.pdf · expired'. Two documents
    may share a title (a policy and the version it replaced), never a file and a state."""
    return " \u00b7 ".join(p for p in (title, file, "" if status == "in force" else status) if p)


def documents_frame(
    indexed: Mapping[str, Mapping[str, Any]],
    cited: Mapping[str, Mapping[str, Any]],
    today: date | None = None,
) -> pd.DataFrame:
    """Every indexed document (and any cited one no longer indexed) with how many answers cited it, most first.

    ``document`` is :func:`document_label`: documents that share a title are told apart by their file and, when
    not in force today, their state, so none is merged with another in a chart or listed as both cited and not.
    """
    day = today or date.today()
    rows = []
    for doc_id in sorted(set(indexed) | set(cited)):
        doc = indexed.get(doc_id)
        seen = cited.get(doc_id) or {}
        title = str((doc or {}).get("title") or seen.get("title") or doc_id)
        file = Path(str((doc or {}).get("source") or seen.get("source") or "")).name
        window, status = validity(doc, day) if doc is not None else ("", "no longer indexed")
        rows.append(
            {
                "document": document_label(title, file, status),
                "title": title,
                "file": file,
                "valid": window,
                "status": status,
                "answers citing it": int(seen.get("answers") or 0),
                "doc id": doc_id,
                "indexed": doc is not None,
            }
        )
    frame = pd.DataFrame(rows, columns=DOCUMENT_COLUMNS)
    return frame.sort_values(["answers citing it", "document"], ascending=[False, True], ignore_index=True)


# ----------------------------------------------------------------------------- refused for access
# Asks a question again as the given principal (no language model) and returns the answer's trace dict.
Ask = Callable[[str, Principal, date | None, frozenset[str]], Mapping[str, Any]]


def withheld_groups(documents: Mapping[str, Mapping[str, Any]], asker: Principal) -> frozenset[str]:
    """The access groups of indexed documents that ``asker`` is not in."""
    groups = {g for doc_id, doc in documents.items() for g in document_meta(doc_id, dict(doc)).groups}
    return frozenset(groups - asker.readable_groups)


def needed_documents(
    gap: Mapping[str, Any], documents: Mapping[str, Mapping[str, Any]], ask: Ask
) -> tuple[str, ...]:
    """The documents its asker may not read that would have answered an abstained question, or ().

    The pipeline decides, not a rule about the question: the question is asked again by the same user on the
    same date with every withheld access group added. If that answer cites a document the asker may not read,
    the abstention was a refusal for access (their policies do not say, a restricted one does), not a missing
    policy. Only for admins: the answer says which restricted documents exist.
    """
    if not gap.get("abstained") or not gap.get("user") or not str(gap.get("question") or "").strip():
        return ()
    asker = Principal(str(gap["user"]), frozenset(str(g) for g in gap.get("groups") or ()))
    extra = withheld_groups(documents, asker)
    if not extra:
        return ()
    as_of = date.fromisoformat(str(gap["as_of"])) if gap.get("as_of") else None
    trace = ask(
        str(gap["question"]),
        Principal(asker.user, asker.groups | extra),
        as_of,
        frozenset(str(t) for t in gap.get("tags") or ()),
    )
    if trace.get("abstained"):
        return ()
    cited = dict.fromkeys(str(e.get("doc_id")) for e in trace.get("evidence") or [] if e.get("cited"))
    return tuple(
        d for d in cited if d in documents and not document_meta(d, dict(documents[d])).readable_by(asker)
    )


def refusals_frame(
    gaps: Sequence[Mapping[str, Any]],
    needed: Mapping[str, Sequence[str]],
    documents: Mapping[str, Mapping[str, Any]],
    today: date | None = None,
) -> pd.DataFrame:
    """One row per question refused for access: who asked, with which groups, and the documents that answer it."""
    day = today or date.today()

    def label(doc_id: str) -> str:
        doc = documents.get(doc_id) or {}
        return document_label(
            str(doc.get("title") or doc_id), Path(str(doc.get("source") or "")).name, validity(doc, day)[1]
        )

    return pd.DataFrame(
        [
            {
                "question": g["question"],
                "user": g.get("user"),
                "groups": ", ".join(str(x) for x in g.get("groups") or []),
                "answered by": " | ".join(label(d) for d in needed[str(g["trace_id"])]),
                "asked at": str(g.get("created_at") or "")[:16].replace("T", " "),
                "trace id": g["trace_id"],
            }
            for g in gaps
            if needed.get(str(g["trace_id"]))
        ],
        columns=["question", "user", "groups", "answered by", "asked at", "trace id"],
    )
