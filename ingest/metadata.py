"""Document metadata: ``<file>.meta.json`` sidecars, folder manifests (``_meta.json``) and defaults.

A sidecar sits next to its file and carries the full file name: ``handbook.pdf.meta.json``. A manifest in a
folder maps glob patterns (matched against file names in that folder) to the same fields; every matching
pattern applies in the order written, later ones winning, and the sidecar wins over the manifest. Keys:
``title`` (string), ``groups`` (list of access groups; ``["*"]`` = everyone), ``effective`` and ``expires``
(ISO dates, YYYY-MM-DD) and ``tags`` (list of strings). Sidecar and manifest keys are checked strictly: a
misspelt key would otherwise silently make a restricted document public.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from rag.errors import IngestFileError
from rag.types import PUBLIC_GROUP, DocumentMeta

SIDECAR_SUFFIX = ".meta.json"
MANIFEST_NAME = "_meta.json"
META_KEYS = ("title", "groups", "effective", "expires", "tags")


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def manifest_path(path: Path) -> Path:
    return path.with_name(MANIFEST_NAME)


def is_metadata_file(path: Path) -> bool:
    return path.name.endswith(SIDECAR_SUFFIX) or path.name == MANIFEST_NAME


def file_overrides(path: Path) -> dict[str, Any]:
    """The validated fields that the folder manifest and the sidecar set for ``path`` (sidecar wins)."""
    fields: dict[str, Any] = {}
    manifest = manifest_path(path)
    if manifest.is_file():
        entries = _read_json(manifest)
        if not isinstance(entries, dict):
            raise _bad(manifest, "must be a JSON object mapping glob patterns to metadata objects")
        for pattern, raw in entries.items():
            if fnmatch.fnmatchcase(path.name, pattern):
                fields.update(parse_fields(raw, f"{manifest} (pattern {pattern!r})", strict=True))
    sidecar = sidecar_path(path)
    if sidecar.is_file():
        fields.update(parse_fields(_read_json(sidecar), str(sidecar), strict=True))
    return fields


def metadata_bytes(path: Path) -> bytes:
    """Raw bytes of the sidecar and manifest that apply to ``path`` (for change detection)."""
    out = b""
    for meta in (manifest_path(path), sidecar_path(path)):
        if meta.is_file():
            out += b"\x00" + meta.name.encode() + b"\x00" + meta.read_bytes()
    return out


def parse_fields(raw: object, where: str, *, strict: bool) -> dict[str, Any]:
    """Validate one metadata object. ``strict`` rejects unknown keys (sidecars); JSONL records ignore them."""
    if not isinstance(raw, Mapping):
        raise _bad(where, f"must be a JSON object, not {type(raw).__name__}")
    unknown = sorted(set(raw) - set(META_KEYS))
    if strict and unknown:
        raise _bad(where, f"unknown key {unknown[0]!r} (allowed: {', '.join(META_KEYS)})")
    fields: dict[str, Any] = {}
    if raw.get("title") is not None:
        title = raw["title"]
        if not isinstance(title, str) or not title.strip():
            raise _bad(where, "'title' must be a non-empty string")
        fields["title"] = " ".join(title.split())
    if "groups" in raw:
        groups = _strings(raw["groups"], "groups", where)
        if not groups:
            raise _bad(
                where,
                f"'groups' is empty, so nobody could read the document; use [{PUBLIC_GROUP!r}] for everyone",
            )
        fields["groups"] = groups
    for key in ("effective", "expires"):
        if raw.get(key) is not None:
            fields[key] = _date(raw[key], key, where)
    if "tags" in raw:
        fields["tags"] = _strings(raw["tags"], "tags", where)
    if fields.get("effective") and fields.get("expires") and fields["expires"] < fields["effective"]:
        raise _bad(where, f"'expires' ({fields['expires']}) is before 'effective' ({fields['effective']})")
    return fields


def build_meta(fields: Mapping[str, Any], default_title: str, where: object = "metadata") -> DocumentMeta:
    """Fill the defaults: the given title, readable by everyone, always valid, no tags."""
    merged = dict(fields)
    effective, expires = merged.get("effective"), merged.get("expires")
    if effective and expires and expires < effective:  # can arise when a sidecar overrides one manifest date
        raise _bad(where, f"'expires' ({expires}) is before 'effective' ({effective})")
    return DocumentMeta(
        title=merged.get("title") or default_title,
        groups=tuple(merged.get("groups") or (PUBLIC_GROUP,)),
        effective=effective,
        expires=expires,
        tags=tuple(merged.get("tags") or ()),
    )


def prettify_stem(stem: str) -> str:
    """``information_security_policy`` -> ``Information Security Policy``; ``030-policies`` -> ``Policies``."""
    text = re.sub(r"^\d+[-_. ]+(?=\D)", "", stem)
    text = " ".join(re.sub(r"[-_.]+", " ", text).split())
    if not text:
        return stem
    return text if any(c.isupper() for c in text) else text.title()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise _bad(path, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(path, f"cannot be read ({exc})") from exc


def _strings(value: object, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _bad(where, f'{key!r} must be a list of non-empty strings, e.g. ["hr", "managers"]')
    return tuple(dict.fromkeys(v.strip() for v in value))


def _date(value: object, key: str, where: str) -> date:
    text = value.strip() if isinstance(value, str) else ""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        try:
            return date.fromisoformat(text)
        except ValueError:
            pass
    raise _bad(where, f'{key!r} must be an ISO date like "2025-01-31", not {value!r}')


def _bad(where: object, problem: str) -> IngestFileError:
    return IngestFileError(
        "bad_metadata",
        f"{where}: {problem}.",
        hint="Fix the metadata file; allowed keys: title, groups, effective, expires, tags.",
    )
