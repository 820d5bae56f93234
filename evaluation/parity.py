"""Do two runs give the same answers? Field-by-field comparison of two ``rag eval suite --results`` files.

A refactor that should not change behaviour is checked with it: run the suites before and after the change on
the same ingested corpora (one ``--work-dir``, so both read the same index), then

    python -m evaluation.parity before.jsonl after.jsonl

compares every question's ``rag ask --json`` object key by key, ignoring what differs between any two runs (the
trace id, the creation time, timings). It prints, per top-level field, how many questions differ, then the first
differences with their paths, and exits 1 when any question differs or is missing from one side.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VOLATILE = frozenset({"trace_id", "created_at", "timings_ms", "ms", "seconds"})


def load(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(suite, id): result}`` from a ``--results`` file."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    with path.open(encoding="utf-8") as handle:
        for n, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                out[(str(row["suite"]), str(row["id"]))] = row["result"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise SystemExit(f"{path}:{n}: not a --results line ({exc}).") from exc
    return out


def differences(a: Any, b: Any, path: str = "", ignore: frozenset[str] = VOLATILE) -> Iterator[str]:
    """Paths where ``a`` and ``b`` differ (keys in ``ignore`` are skipped at any depth)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key in ignore:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                yield f"{where}: only in {'after' if key in b else 'before'}"
            else:
                yield from differences(a[key], b[key], where, ignore)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} items before, {len(b)} after"
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from differences(x, y, f"{path}[{i}]", ignore)
    elif a != b:
        yield f"{path}: {_short(a)} -> {_short(b)}"


def _short(value: Any, width: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def compare(
    before: dict[tuple[str, str], dict[str, Any]],
    after: dict[tuple[str, str], dict[str, Any]],
    ignore: frozenset[str] = VOLATILE,
) -> dict[str, Any]:
    """The comparison as one JSON-able object: counts per field and per suite, and every difference."""
    shared = sorted(set(before) & set(after))
    by_field: Counter[str] = Counter()
    by_suite: Counter[str] = Counter()
    per_suite: Counter[str] = Counter(suite for suite, _ in shared)
    diffs: dict[str, list[str]] = {}
    for key in shared:
        found = list(differences(before[key], after[key], ignore=ignore))
        if found:
            diffs[f"{key[0]}/{key[1]}"] = found
            by_suite[key[0]] += 1
            by_field.update({d.split(":")[0].split(".")[0].split("[")[0] for d in found})
    return {
        "questions": len(shared),
        "only_before": [f"{s}/{i}" for s, i in sorted(set(before) - set(after))],
        "only_after": [f"{s}/{i}" for s, i in sorted(set(after) - set(before))],
        "differing": len(diffs),
        "by_suite": {s: {"questions": n, "differing": by_suite[s]} for s, n in sorted(per_suite.items())},
        "by_field": dict(by_field.most_common()),
        "differences": diffs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--ignore", action="append", default=[], help="Another key to ignore (repeatable).")
    parser.add_argument("--show", type=int, default=20, help="Differences to print (default 20).")
    parser.add_argument("--json", action="store_true", help="Print the comparison as one JSON object.")
    args = parser.parse_args(argv)
    report = compare(load(args.before), load(args.after), VOLATILE | frozenset(args.ignore))
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        print(f"{report['questions']} questions in both runs; {report['differing']} differ")
        for side in ("only_before", "only_after"):
            if report[side]:
                print(f"{len(report[side])} {side.replace('_', ' ')}: {', '.join(report[side][:10])}")
        for suite, row in report["by_suite"].items():
            print(f"  {suite}: {row['differing']} of {row['questions']} differ")
        for field, n in report["by_field"].items():
            print(f"  field {field}: {n} questions")
        shown = 0
        for question, found in report["differences"].items():
            for d in found:
                if shown >= args.show:
                    break
                print(f"{question}: {d}")
                shown += 1
    same = not report["differing"] and not report["only_before"] and not report["only_after"]
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
