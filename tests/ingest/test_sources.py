"""Discovery, versions, ids, metadata and the per-format loaders."""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest

from ingest.metadata import prettify_stem
from ingest.sources import PageText, discover, doc_id_for_file, file_version, load_file, skip_reason
from rag.config import Settings
from rag.errors import IngestFileError
from rag.types import PUBLIC_GROUP
from tests.ingest.hostile import text_pdf

SETTINGS = Settings(pdf_timeout_s=60)
SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def reason_of(path: Path, settings: Settings = SETTINGS) -> str:
    with pytest.raises(IngestFileError) as caught:
        load_file(path, settings)
    return caught.value.reason


# --- discovery --------------------------------------------------------------------------------------------


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    for name in ["a.md", "b.txt", "sub/c.pdf", "sub/deeper/d.markdown", "e.jsonl", "UPPER.MD"]:
        write(tmp_path / name, "x")
    for name in [
        "notes.docx",
        "a.md.meta.json",
        "_meta.json",
        ".hidden.md",
        ".git/config.md",
        "sub/.cache/x.txt",
    ]:
        write(tmp_path / name, "x")
    return tmp_path


def names(paths: list[Path], root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def test_discover_lists_every_file_but_metadata_and_hidden_folders_as_themselves(tree: Path) -> None:
    """Nothing is skipped silently: unsupported and hidden files come back for the report to name; a hidden
    folder comes back as one entry and is not walked; sidecars and manifests are metadata, not documents."""
    found = names(discover([str(tree)]), tree)
    assert found == [
        ".git",
        ".hidden.md",
        "UPPER.MD",
        "a.md",
        "b.txt",
        "e.jsonl",
        "notes.docx",
        "sub/.cache",
        "sub/c.pdf",
        "sub/deeper/d.markdown",
    ]
    reasons = {name: skip_reason(tree / name) for name in found}
    assert {n for n, r in reasons.items() if r} == {".git", ".hidden.md", "sub/.cache"}
    assert all(r[0] == "hidden" for r in reasons.values() if r)


def test_skip_reason_names_the_type_of_an_unsupported_file(tmp_path: Path) -> None:
    reason, message, hint = skip_reason(write(tmp_path / "rates.xlsx", b"PK\x03\x04")) or ("", "", None)
    assert reason == "unsupported" and "Excel workbook (.xlsx)" in message and hint and "PDF" in hint
    reason, message, _ = skip_reason(write(tmp_path / "memo.doc", b"x")) or ("", "", None)
    assert "Word 97-2003" in message
    reason, message, _ = skip_reason(write(tmp_path / "blob.xyz", b"x")) or ("", "", None)
    assert reason == "unsupported" and ".xyz" in message
    assert skip_reason(write(tmp_path / "policy.docx", b"x")) is None
    assert skip_reason(write(tmp_path / "page.htm", b"x")) is None


def test_discover_globs_files_and_duplicates(tree: Path) -> None:
    found = discover([str(tree / "*.md"), str(tree / "a.md"), str(tree / "sub"), str(tree / "**" / "*.pdf")])
    assert names(found, tree) == ["a.md", "sub/.cache", "sub/c.pdf", "sub/deeper/d.markdown"]


def test_discover_keeps_explicit_unsupported_and_missing_files(tree: Path) -> None:
    write(tree / "slides.pptx", "x")
    found = discover([str(tree / "slides.pptx"), str(tree / "missing.pdf"), str(tree / "a.md.meta.json")])
    assert names(found, tree) == ["missing.pdf", "slides.pptx"]
    assert reason_of(tree / "slides.pptx") == "unsupported"
    assert reason_of(tree / "missing.pdf") == "unreadable"


def test_discover_of_nothing_is_empty(tmp_path: Path) -> None:
    assert discover([str(tmp_path / "*.pdf")]) == []
    assert discover([]) == []


# --- versions and ids -------------------------------------------------------------------------------------


def test_file_version_covers_bytes_and_metadata(tmp_path: Path) -> None:
    doc = write(tmp_path / "policy.md", "# Policy\n\nText.")
    first = file_version(doc)
    assert first == file_version(doc) and re.fullmatch(r"[0-9a-f]{64}", first)
    write(tmp_path / "policy.md.meta.json", '{"groups": ["hr"]}')
    second = file_version(doc)
    assert second != first
    write(tmp_path / "_meta.json", '{"*.md": {"tags": ["x"]}}')
    assert file_version(doc) not in (first, second)
    write(tmp_path / "policy.md", "# Policy\n\nOther text.")
    assert load_file(doc, SETTINGS)[0].version == file_version(doc)


def test_doc_id_is_stable_per_absolute_path(tmp_path: Path) -> None:
    one = write(tmp_path / "x" / "Travel Policy (2024).pdf", "x")
    two = write(tmp_path / "y" / "Travel Policy (2024).pdf", "x")
    assert re.fullmatch(r"travel-policy-2024-[0-9a-f]{8}", doc_id_for_file(one))
    assert doc_id_for_file(one) == doc_id_for_file(tmp_path / "x" / ".." / "x" / "Travel Policy (2024).pdf")
    assert doc_id_for_file(one) != doc_id_for_file(two)
    assert doc_id_for_file(write(tmp_path / "§§.md", "x")).startswith("doc-")


# --- Markdown and text ------------------------------------------------------------------------------------


def test_markdown_front_matter_comments_and_title(tmp_path: Path) -> None:
    path = write(
        tmp_path / "030-expenses.md",
        "---\nstatus: Up-to-date\nupdated: April 20, 2018\n---\n\n<!-- prettier-ignore -->\n# Expenses\n\n"
        "We reimburse approved expenses.\n\n## Step 1\n\nAsk first.\n",
    )
    [doc] = load_file(path, SETTINGS)
    assert doc.fmt == "markdown" and doc.meta.title == "Expenses"
    assert doc.pages == (
        PageText(None, "\n\n# Expenses\n\nWe reimburse approved expenses.\n\n## Step 1\n\nAsk first.\n"),
    )
    assert doc.meta.groups == (PUBLIC_GROUP,) and doc.meta.effective is None and doc.meta.tags == ()
    assert doc.source == str(path) and doc.doc_id == doc_id_for_file(path)


def test_markdown_title_from_front_matter_then_stem(tmp_path: Path) -> None:
    titled = write(tmp_path / "a.md", '---\ntitle: "Leave Policy"\n---\nSome text without headings.\n')
    assert load_file(titled, SETTINGS)[0].meta.title == "Leave Policy"
    plain = write(tmp_path / "020-remote_work-policy.md", "Just text.\n\n```\n# not a heading\n```\n")
    assert load_file(plain, SETTINGS)[0].meta.title == "Remote Work Policy"


def test_text_file_title_and_encodings(tmp_path: Path) -> None:
    path = write(tmp_path / "notes.txt", "Office Hours\n\nThe office opens at 9.\n")
    [doc] = load_file(path, SETTINGS)
    assert doc.fmt == "text" and doc.meta.title == "Office Hours"
    latin = write(tmp_path / "latin.txt", "Caf\xe9 rules: no smoking.\n".encode("cp1252"))
    assert "Café" in load_file(latin, SETTINGS)[0].pages[0].text
    ligature = write(tmp_path / "lig.txt", "The \ufb01nal o\ufb03ce rule.\n")
    assert load_file(ligature, SETTINGS)[0].pages[0].text == "The final office rule.\n"


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("empty.md", b"", "empty"),
        ("blank.txt", b"  \n\n \t\n", "empty"),
        ("binary.txt", b"\x00\x01\x02PK\x03\x04" * 20, "unreadable"),
        ("slides.pptx", b"PK\x03\x04", "unsupported"),
        ("text-named.pdf", b"Hello, I am text.\n", "not_a_pdf"),
    ],
)
def test_bad_files_fail_with_reason(tmp_path: Path, name: str, data: bytes, reason: str) -> None:
    assert reason_of(write(tmp_path / name, data)) == reason


def test_size_limit_applies_to_every_format(tmp_path: Path) -> None:
    path = write(tmp_path / "big.txt", "word " * 300_000)
    assert reason_of(path, Settings(max_file_mb=1)) == "too_large"


def test_folder_is_not_a_file(tmp_path: Path) -> None:
    assert reason_of(tmp_path) == "unsupported"


def test_pdf_loads_with_page_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "two.pdf", text_pdf([["Remote Work Policy"], ["Work from home twice a week."]]))
    [doc] = load_file(path, SETTINGS)
    assert doc.fmt == "pdf" and [p.number for p in doc.pages] == [1, 2]
    assert doc.meta.title == "Remote Work Policy"  # no /Title metadata: the first heading-like line
    assert doc.pages[1].text == "Work from home twice a week."


# --- metadata ---------------------------------------------------------------------------------------------


def test_sidecar_sets_metadata(tmp_path: Path) -> None:
    path = write(tmp_path / "hr.md", "# HR Handbook\n\nText.")
    write(
        tmp_path / "hr.md.meta.json",
        json.dumps(
            {
                "title": "HR Handbook 2025",
                "groups": ["hr", "managers"],
                "effective": "2025-01-01",
                "expires": "2025-12-31",
                "tags": "handbook",
            }
        ),
    )
    meta = load_file(path, SETTINGS)[0].meta
    assert meta.title == "HR Handbook 2025"
    assert meta.groups == ("hr", "managers")
    assert (meta.effective, meta.expires) == (date(2025, 1, 1), date(2025, 12, 31))
    assert meta.tags == ("handbook",)


def test_manifest_globs_apply_in_order_and_sidecar_wins(tmp_path: Path) -> None:
    write(
        tmp_path / "_meta.json",
        json.dumps({"*": {"groups": ["staff"]}, "pay-*.md": {"groups": ["payroll"], "tags": ["pay"]}}),
    )
    general = write(tmp_path / "general.md", "# General\n\nText.")
    pay = write(tmp_path / "pay-2025.md", "# Pay\n\nText.")
    bonus = write(tmp_path / "pay-bonus.md", "# Bonus\n\nText.")
    write(tmp_path / "pay-bonus.md.meta.json", '{"groups": ["execs"]}')
    assert load_file(general, SETTINGS)[0].meta.groups == ("staff",)
    assert load_file(pay, SETTINGS)[0].meta.groups == ("payroll",)
    bonus_meta = load_file(bonus, SETTINGS)[0].meta
    assert bonus_meta.groups == ("execs",) and bonus_meta.tags == ("pay",)


@pytest.mark.parametrize(
    ("sidecar", "needle"),
    [
        ('{"group": ["hr"]}', "unknown key 'group'"),
        ('{"groups": []}', "'groups' is empty"),
        ('{"groups": "hr", "effective": "01/02/2025"}', "'effective' must be an ISO date"),
        ('{"effective": "2025-02-30"}', "'effective' must be an ISO date"),
        ('{"effective": "2025-06-01", "expires": "2025-01-01"}', "'expires' (2025-01-01) is before"),
        ('{"tags": [1, 2]}', "'tags' must be a list of non-empty strings"),
        ('{"title": ""}', "'title' must be a non-empty string"),
        ('["hr"]', "must be a JSON object"),
        ('{"groups": ["hr"],}', "not valid JSON (line 1"),
    ],
)
def test_bad_sidecar_names_file_and_key(tmp_path: Path, sidecar: str, needle: str) -> None:
    path = write(tmp_path / "doc.md", "# Doc\n\nText.")
    write(tmp_path / "doc.md.meta.json", sidecar)
    with pytest.raises(IngestFileError) as caught:
        load_file(path, SETTINGS)
    assert caught.value.reason == "bad_metadata"
    assert "doc.md.meta.json" in str(caught.value)
    assert needle in str(caught.value)


def test_bad_manifest_names_pattern(tmp_path: Path) -> None:
    path = write(tmp_path / "doc.md", "# Doc\n\nText.")
    write(tmp_path / "_meta.json", '{"*.md": {"expires": "soon"}}')
    with pytest.raises(IngestFileError) as caught:
        load_file(path, SETTINGS)
    assert caught.value.reason == "bad_metadata"
    assert "_meta.json (pattern '*.md')" in str(caught.value) and "'expires'" in str(caught.value)


@pytest.mark.parametrize(
    ("stem", "pretty"),
    [
        ("information_security_policy", "Information Security Policy"),
        ("030-policies", "Policies"),
        ("README", "README"),
        ("2024", "2024"),
        ("iPhone-setup", "iPhone setup"),
    ],
)
def test_prettify_stem(stem: str, pretty: str) -> None:
    assert prettify_stem(stem) == pretty


# --- JSONL ------------------------------------------------------------------------------------------------


def records(*rows: object) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def test_jsonl_records_become_documents(tmp_path: Path) -> None:
    path = write(
        tmp_path / "corpus.jsonl",
        records(
            {
                "_id": "4983",
                "title": "Microstructural development",
                "text": "Alterations of the architecture.",
                "metadata": {
                    "groups": ["research"],
                    "tags": ["neuro"],
                    "effective": "2020-01-01",
                    "pubmed": 123,
                },
            },
            {"_id": 5836, "title": "", "text": "Induction of myelodysplasia."},
            {"_id": "empty", "title": "No text", "text": ""},
        )
        + "\n",
    )
    docs = load_file(path, SETTINGS)
    assert [d.doc_id for d in docs] == ["4983", "5836"]
    first, second = docs
    assert first.source == f"{path}#4983" and first.fmt == "jsonl"
    assert first.meta.title == "Microstructural development"
    assert first.meta.groups == ("research",) and first.meta.tags == ("neuro",)
    assert first.meta.effective == date(2020, 1, 1)
    assert first.pages == (PageText(None, "Alterations of the architecture."),)
    assert second.meta.title == "5836" and second.meta.groups == (PUBLIC_GROUP,)
    assert first.version != second.version
    assert [d.version for d in load_file(path, SETTINGS)] == [first.version, second.version]


def test_jsonl_sidecar_gives_defaults_records_override(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.jsonl",
        records(
            {"_id": "a", "title": "A", "text": "One."},
            {"_id": "b", "title": "B", "text": "Two.", "metadata": {"groups": ["x"]}},
        ),
    )
    before = [d.version for d in load_file(path, SETTINGS)]
    write(tmp_path / "c.jsonl.meta.json", '{"groups": ["corpus"]}')
    docs = load_file(path, SETTINGS)
    assert [d.meta.groups for d in docs] == [("corpus",), ("x",)]
    assert [d.version for d in docs] != before  # a metadata change re-indexes the records


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "bro', "line 2: not valid JSON"),
        ('{"_id": "1", "text": "ok"}\n\n["list"]\n', "line 3: expected a JSON object"),
        ('{"title": "no id", "text": "x"}\n', "line 1: the record has no '_id'"),
        ('{"_id": "1", "text": 5}\n', "line 1: 'text' and 'title' must be strings"),
        (
            '{"_id": "1", "text": "a"}\n{"_id": "1", "text": "b"}\n',
            "line 2: duplicate _id '1' (first on line 1)",
        ),
    ],
)
def test_jsonl_problems_are_corrupt_with_line_numbers(tmp_path: Path, body: str, needle: str) -> None:
    path = write(tmp_path / "bad.jsonl", body)
    with pytest.raises(IngestFileError) as caught:
        load_file(path, SETTINGS)
    assert caught.value.reason == "corrupt"
    assert needle in str(caught.value)


def test_jsonl_bad_record_metadata(tmp_path: Path) -> None:
    path = write(tmp_path / "m.jsonl", records({"_id": "1", "text": "x", "metadata": {"expires": "never"}}))
    with pytest.raises(IngestFileError) as caught:
        load_file(path, SETTINGS)
    assert caught.value.reason == "bad_metadata" and "line 1" in str(caught.value)


def test_jsonl_identical_duplicates_are_kept_once(tmp_path: Path) -> None:
    row = {"_id": "p1", "title": "Paris", "text": "Paris is the capital of France."}
    path = write(tmp_path / "hotpot.jsonl", records(row, row))
    assert [d.doc_id for d in load_file(path, SETTINGS)] == ["p1"]


@pytest.mark.shared
def test_scifact_corpus_loads() -> None:
    corpus = SHARED / "data" / "scifact" / "corpus.jsonl"
    if not corpus.exists():
        pytest.skip(f"shared data not found at {corpus} (clone ../shared next to the repo)")
    docs = load_file(corpus, Settings())
    assert len(docs) == 5183
    assert all(d.pages[0].text.strip() for d in docs)
    assert len({d.doc_id for d in docs}) == len(docs)
