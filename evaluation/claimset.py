"""A claim/passage test set for the claim checker (``rag.stages.claims``), built reproducibly from the suites.

For every question of the dev, gitlab and sample suites that has gold evidence quotes:

- the **passage** is the question's gold quotes in order (one evidence passage, [1]) and, as [2], the quotes of
  another question of the same suite (seeded): a distractor the checker must not match;
- **true claims**: each gold quote as written (``quote``: a copy), a rule-based paraphrase of it
  (``paraphrase``: modal and contraction rewording, numbers as words, a reporting frame, synonyms), and, for
  dev and gitlab, each sentence of the human-written gold answer (``answer``: a real paraphrase, which may
  combine quotes or add what the passage does not say: reported on its own);
- **false claims** made from a quote or its paraphrase: ``polarity`` (a negation added or removed),
  ``number`` (the first figure changed), ``unit`` (days -> weeks, miles -> kilometres, $ -> EUR, ...),
  ``entity`` (a name or form id swapped for one from another question of the suite), ``condition`` (a
  comparator or condition swapped: before/after, at least/at most, full-time/part-time, ... and pairs the
  checker has no rule for, such as monthly/annually or manager/director).

Every pair carries its question's split (``evaluation.splits.split_ids``): rules are tuned on ``tune``;
``docs/llm.md`` reports ``test``.

    python -m evaluation.claimset --write              # evaluation/suites/claims/claims.jsonl
    python -m evaluation.claimset --measure --split test [--no-embed]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evaluation.splits import split_ids
from evaluation.stats import wilson_interval
from rag.text import split_sentences
from rag.text.lexicon import spell
from rag.types import Candidate, Chunk, Evidence

CLAIMS_PATH = Path(__file__).parent / "suites" / "claims" / "claims.jsonl"
SEED = "rag-claimset-2026-12-01"
TRUE_KINDS = ("quote", "paraphrase", "answer")
FALSE_KINDS = ("polarity", "number", "unit", "entity", "condition")


def _rank(key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{SEED}:{key}".encode()).digest()[:8], "big")


def _clean(text: str) -> str:
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # Markdown links keep their text
    text = re.sub(r"[*_`]+", "", text)
    return " ".join(text.split()).strip()


def _sentence(text: str) -> str:
    text = _clean(text)
    text = text[0].upper() + text[1:] if text else text
    return text if text.endswith((".", "!", "?")) else f"{text}."


# ------------------------------------------------------------------------------ true: paraphrases
# The numbers a paraphrase spells out ("30 days" -> "thirty days").
_WORDS = {n: spell(n) for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 15, 20, 25, 30, 45, 60, 90)}
_REWORD = [
    (r"\bmay\b", "can"),
    (r"\bmust be\b", "has to be"),
    (r"\bmust\b", "need to"),
    (r"\bare not\b", "aren't"),
    (r"\bis not\b", "isn't"),
    (r"\bdo not\b", "don't"),
    (r"\bdoes not\b", "doesn't"),
    (r"\bwill not\b", "won't"),
    (r"\bcannot\b", "can't"),
    (r"\bemployees\b", "staff"),
    (r"\bteam members?\b", "employees"),
    (r"\bprovide\b", "give"),
    (r"\bprior to\b", "before"),
    (r"\bpurchase\b", "buy"),
    (r"\breceive\b", "get"),
    (r"\brequired\b", "needed"),
    (r"\bapproximately\b", "about"),
    (r"\bimmediately\b", "right away"),
    (r"\breimbursed\b", "paid back"),
    (r"\bsubmit\b", "send in"),
    (r"\bcustomers\b", "shoppers"),
]
_FRAMES = ("The policy says that {}", "According to the policy, {}", "Per the handbook, {}", "In short, {}")


def paraphrase(quote: str, key: str) -> str | None:
    """A meaning-preserving rewording of ``quote`` (None when no rule applies)."""
    text = _sentence(quote)
    out = text
    for pattern, repl in _REWORD:
        out = (
            re.sub(pattern, repl, out, count=1, flags=re.IGNORECASE) if re.search(pattern, out, re.I) else out
        )
    out = re.sub(
        r"\b(\d{1,2})\b(?=\s+(?:days?|weeks?|months?|years?|hours?|minutes?))",
        lambda m: _WORDS.get(int(m.group(1)), m.group(1)),
        out,
        count=1,
    )
    if _rank(key + "frame") % 2 == 0:
        body = out[0].lower() + out[1:] if not re.match(r"[A-Z]{2,}|[A-Z][a-z]+[A-Z]", out) else out
        out = _FRAMES[_rank(key) % len(_FRAMES)].format(body)
    return out if out != text else None


# ------------------------------------------------------------------------------ false: perturbations
_NEGATE = [
    (r"\bare not\b", "are"),
    (r"\bis not\b", "is"),
    (r"\bdo not\b", "do"),
    (r"\bdoes not\b", "does"),
    (r"\bcannot\b", "can"),
    (r"\bcan't\b", "can"),
    (r"\bwill not\b", "will"),
    (r"\bnot\b", ""),
    (r"\bnever\b", "always"),
    (r"\bNo\b", "Some"),
    (r"\bno\b", "some"),
    (r"\bdon't\b", "do"),
    (r"\bmust\b", "must not"),
    (r"\bmay\b", "may not"),
    (r"\bcan\b", "cannot"),
    (r"\bwill\b", "will not"),
    (r"\bshould\b", "should not"),
    (r"\bare\b", "are not"),
    (r"\bis\b", "is not"),
    (r"\bhas to\b", "does not have to"),
    (r"\brequires\b", "does not require"),
    (r"\bneed\b", "do not need"),
]
_UNITS = [
    ("days", "weeks"),
    ("day", "week"),
    ("weeks", "months"),
    ("week", "month"),
    ("months", "years"),
    ("month", "year"),
    ("hours", "days"),
    ("hour", "day"),
    ("minutes", "hours"),
    ("years", "months"),
    ("mile", "kilometre"),
    ("miles", "kilometres"),
    ("%", " dollars"),
    ("business days", "calendar days"),
]
_CONDITIONS = [  # the first group the checker has a rule for; the second it has none for (held out)
    ("before", "after"),
    ("after", "before"),
    ("at least", "at most"),
    ("more than", "less than"),
    ("less than", "more than"),
    ("full-time", "part-time"),
    ("part-time", "full-time"),
    ("first", "last"),
    ("minimum", "maximum"),
    ("maximum", "minimum"),
    ("above", "below"),
    ("over", "under"),
    ("always", "never"),
    ("every", "no"),
    ("all", "no"),
    ("international", "domestic"),
    ("paid", "unpaid"),
    ("higher", "lower"),
    ("approved", "rejected"),
    ("earlier", "later"),
    ("required", "optional"),
    ("up to", "at least"),
    ("annual", "monthly"),
    ("annually", "monthly"),
    ("monthly", "annual"),
    ("daily", "weekly"),
    ("weekly", "monthly"),
    ("manager", "director"),
    ("director", "manager"),
    ("written", "verbal"),
    ("inside", "outside"),
    ("original", "new"),
    ("receipt", "photo"),
    ("delivery", "purchase"),
    ("same", "different"),
    ("local", "foreign"),
    ("public", "private"),
    ("internal", "external"),
]
_ENTITY = re.compile(
    r"\b(?:[A-Z]{2,}[A-Z0-9]*-\d+[A-Z]?|[A-Z]{2,}[A-Z0-9]*|(?<=[a-z,] )[A-Z][a-z]{2,}(?: [A-Z][a-z]+)*)\b"
)


def _sub_once(pattern: str, repl: str, text: str) -> str | None:
    out = re.sub(pattern, repl, text, count=1)
    out = " ".join(out.split())
    return out if out != text else None


def flip_polarity(text: str) -> str | None:
    for pattern, repl in _NEGATE:
        if re.search(pattern, text):
            return _sub_once(pattern, repl, text)
    return None


def change_number(text: str, key: str) -> str | None:
    m = re.search(r"(?<![A-Za-z-])(\d+(?:,\d{3})*(?:\.\d+)?)(?![\d-]*[A-Za-z]*-\d)", text)
    if not m or re.search(r"[A-Za-z]-$", text[: m.start()]):
        return None
    raw = m.group(1).replace(",", "")
    value = float(raw)
    step = (2, 3, 0.5, 1.5)[_rank(key) % 4]
    new = value * step if value * step != value else value + 1
    if new == value:
        return None
    shown = f"{new:,.2f}" if "." in raw else f"{round(new):,}"
    if "," not in m.group(1) and "." not in raw:
        shown = shown.replace(",", "")
    if shown == m.group(1):
        shown = str(int(value) + 1)
    return text[: m.start()] + shown + text[m.end() :]


def change_unit(text: str) -> str | None:
    for a, b in _UNITS:
        if re.search(rf"\d\s?{re.escape(a)}\b" if a != "%" else r"\d%", text):
            return _sub_once(
                rf"(\d\s?){re.escape(a)}\b" if a != "%" else r"(\d)%",
                rf"\g<1>{b}" if a != "%" else rf"\g<1>{b}",
                text,
            )
    m = re.search(r"\$(\d)", text)
    return text[: m.start()] + "EUR " + text[m.start() + 1 :] if m else None


def swap_condition(text: str, key: str) -> str | None:
    options = [(a, b) for a, b in _CONDITIONS if re.search(rf"\b{re.escape(a)}\b", text, re.IGNORECASE)]
    if not options:
        return None
    a, b = options[_rank(key) % len(options)]
    return _sub_once(rf"\b{re.escape(a)}\b", b, text)


def swap_entity(text: str, others: Sequence[str], key: str) -> str | None:
    mine = [m.group(0) for m in _ENTITY.finditer(text)]
    pool = sorted({o for o in others if o not in mine and o.lower() not in text.lower()})
    if not mine or not pool:
        return None
    target = mine[_rank(key) % len(mine)]
    same_shape = [o for o in pool if bool(re.search(r"\d", o)) == bool(re.search(r"\d", target))] or pool
    return text.replace(target, same_shape[_rank(key + "e") % len(same_shape)], 1)


# ------------------------------------------------------------------------------ building
def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def default_sources(shared: Path) -> dict[str, Path]:
    from evaluation.datasets import default_questions_path

    return {
        "dev": shared / "data/questions/dev.jsonl",
        "gitlab": shared / "data/questions/gitlab-dev.jsonl",
        "sample": Path(default_questions_path()),
    }


def build(sources: dict[str, Path]) -> list[dict[str, Any]]:
    """Every claim/passage pair, in a fixed order (see the module docstring)."""
    pairs: list[dict[str, Any]] = []
    for suite, path in sorted(sources.items()):
        records = [r for r in _jsonl(path) if r.get("evidence")]
        test = split_ids(suite, "test")
        quotes_of = {
            r["id"]: [_sentence(e["quote"]) for e in r["evidence"] if e.get("quote")] for r in records
        }
        entities = [m.group(0) for qs in quotes_of.values() for q in qs for m in _ENTITY.finditer(q)]
        ids = sorted(quotes_of)
        for r in records:
            qid = r["id"]
            quotes = quotes_of[qid]
            if not quotes:
                continue
            others = [i for i in ids if i != qid]
            distractor = quotes_of[sorted(others, key=lambda i: _rank(qid + i))[0]] if others else []
            base = {
                "suite": suite,
                "qid": qid,
                "split": "test" if qid in test else "tune",
                "passages": [" ".join(quotes), " ".join(distractor)] if distractor else [" ".join(quotes)],
            }

            def add(
                kind: str, claim: str | None, source: str, label: bool, base: dict[str, Any] = base
            ) -> None:
                if claim and len(claim.split()) >= 4:
                    n = sum(p["qid"] == base["qid"] and p["suite"] == base["suite"] for p in pairs)
                    pairs.append(
                        {
                            **base,
                            "id": f"{base['suite']}:{base['qid']}:{n}",
                            "kind": kind,
                            "label": label,
                            "claim": claim,
                            "source": source,
                        }
                    )

            for i, quote in enumerate(quotes):
                key = f"{suite}:{qid}:{i}"
                para = paraphrase(quote, key)
                add("quote", quote, quote, True)
                add("paraphrase", para, quote, True)
                # false claims start from the paraphrase half of the time, so they are not copies either
                start = para if para and _rank(key + "start") % 2 else quote
                add("polarity", flip_polarity(start), quote, False)
                add("number", change_number(start, key), quote, False)
                add("unit", change_unit(start), quote, False)
                add("entity", swap_entity(start, entities, key), quote, False)
                add("condition", swap_condition(start, key), quote, False)
            for sentence in (
                split_sentences(_clean(r.get("answer") or "")) if isinstance(r.get("answer"), str) else []
            ):
                add("answer", _sentence(sentence), "", True)
    return pairs


# ------------------------------------------------------------------------------ measuring
def _evidence(passages: Sequence[str], pair_id: str) -> list[Evidence]:
    out = []
    for n, text in enumerate(passages, 1):
        chunk = Chunk(
            chunk_id=f"{pair_id}:{n}",
            doc_id=f"doc{n}",
            text=text,
            source=f"doc{n}.md",
            title="Policy",
            ordinal=n,
            groups=("*",),
            doc_version="v1",
            n_tokens=len(text.split()),
        )
        out.append(Evidence(n=n, candidate=Candidate(chunk=chunk), bundle_id=n))
    return out


def measure(
    pairs: Sequence[dict[str, Any]], *, embed: Callable[[list[str]], Any] | None = None, old: bool = False
) -> dict[str, Any]:
    """The checker's verdict on every pair (each claim cited [1], as an LLM would cite its passage), summed
    by kind: false claims caught (not judged supported) and contradicted; true claims flagged.

    ``embed`` (texts -> L2-normalised vectors) gives the pipeline's support score and sentence cosines; without
    it both are lexical. ``old`` measures the previous citation check instead (check_citations)."""
    from rag.models.sentences import sentence_units
    from rag.stages.citations import check_citations, lexical_support
    from rag.stages.claims import check_claims

    vectors: dict[str, Any] = {}
    if embed is not None:
        texts = sorted(
            {t for p in pairs for t in [p["claim"], *(u for x in p["passages"] for u in sentence_units(x))]}
        )
        vectors = dict(zip(texts, embed(texts), strict=True))

    def vec(text: str) -> Any:
        if text not in vectors and embed is not None:
            vectors[text] = embed([text])[0]
        return vectors[text]

    def cosine(claim: str, sentences: Sequence[str]) -> list[float]:
        return [float(vec(claim) @ vec(s)) for s in sentences]

    def support(claim: str, passage: str) -> float:
        units = sentence_units(passage)
        best = max((float(vec(claim) @ vec(u)) for u in units), default=0.0)
        return 0.5 * lexical_support(claim, passage) + 0.5 * max(0.0, best)

    rows = []
    for p in pairs:
        evidence = _evidence(p["passages"], p["id"])
        answer = re.sub(r"([.!?])$", r" [1]\1", p["claim"])
        if old:
            cites = check_citations(answer, evidence, support=support if embed else None)
            verdict = "supported" if cites and all(c.supported for c in cites) else "unsupported"
        else:
            checks = check_claims(
                answer, evidence, support=support if embed else None, cosine=cosine if embed else None
            )
            verdict = (
                "supported"
                if checks and all(c.verdict == "supported" for c in checks)
                else ("contradicted" if any(c.verdict == "contradicted" for c in checks) else "unsupported")
            )
        rows.append({**p, "verdict": verdict})
    out: dict[str, Any] = {"pairs": len(rows), "by_kind": {}}
    for kind in (*TRUE_KINDS, *FALSE_KINDS):
        ks = [r for r in rows if r["kind"] == kind]
        if ks:
            out["by_kind"][kind] = {
                "n": len(ks),
                "not_supported": sum(r["verdict"] != "supported" for r in ks),
                "contradicted": sum(r["verdict"] == "contradicted" for r in ks),
            }
    false = [r for r in rows if not r["label"]]
    true = [r for r in rows if r["label"] and r["kind"] != "answer"]
    answers = [r for r in rows if r["kind"] == "answer"]

    def rate(k: int, n: int) -> dict[str, Any]:
        lo, hi = wilson_interval(k, n) if n else (0.0, 0.0)
        return {"k": k, "n": n, "rate": round(k / n, 4) if n else None, "ci95": [round(lo, 3), round(hi, 3)]}

    out["false_caught"] = rate(sum(r["verdict"] != "supported" for r in false), len(false))
    out["false_contradicted"] = rate(sum(r["verdict"] == "contradicted" for r in false), len(false))
    out["true_flagged"] = rate(sum(r["verdict"] != "supported" for r in true), len(true))
    out["true_contradicted"] = rate(sum(r["verdict"] == "contradicted" for r in true), len(true))
    out["answer_flagged"] = rate(sum(r["verdict"] != "supported" for r in answers), len(answers))
    out["answer_contradicted"] = rate(sum(r["verdict"] == "contradicted" for r in answers), len(answers))
    out["misses"] = [
        {"kind": r["kind"], "claim": r["claim"], "verdict": r["verdict"], "source": r["source"]}
        for r in rows
        if (r["verdict"] == "supported") != r["label"]
    ]
    return out


def load(path: Path = CLAIMS_PATH) -> list[dict[str, Any]]:
    return _jsonl(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--write", action="store_true", help="rebuild the claim set from the question files")
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--split", choices=("tune", "test", "all"), default="tune")
    parser.add_argument("--no-embed", action="store_true", help="lexical similarity only (no MiniLM)")
    parser.add_argument("--old", action="store_true", help="measure the previous citation check instead")
    parser.add_argument("--misses", type=int, default=0, help="print this many misclassified pairs")
    args = parser.parse_args(argv)
    if args.write:
        pairs = build(default_sources(args.shared))
        CLAIMS_PATH.parent.mkdir(parents=True, exist_ok=True)
        CLAIMS_PATH.write_text(
            "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8"
        )
        kinds = {k: sum(p["kind"] == k for p in pairs) for k in (*TRUE_KINDS, *FALSE_KINDS)}
        print(f"{len(pairs)} pairs -> {CLAIMS_PATH}: {kinds}")
    if args.measure:
        pairs = [p for p in load() if args.split == "all" or p["split"] == args.split]
        embed = None
        if not args.no_embed:
            from rag.config import load_settings
            from rag.models.embedder import load_embedder

            settings = load_settings()
            embedder = load_embedder(settings.embedding_model, settings.embed_batch_size)
            embed = embedder.embed_queries
        result = measure(pairs, embed=embed, old=args.old)
        misses = result.pop("misses")
        print(json.dumps(result, indent=1))
        for m in misses[: args.misses]:
            print(f"[{m['kind']}/{m['verdict']}] {m['claim']}\n      <- {m['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
