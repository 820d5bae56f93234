"""Chunking: section paths, sizes, sentence-safe boundaries, ids and links; real-data evidence coverage."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections import Counter
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.chunking import chunk_document, heading_level
from ingest.sources import PageText, SourceDocument, load_file
from rag.config import Settings
from rag.text import count_tokens, split_sentences
from rag.types import Chunk, DocumentMeta

SETTINGS = Settings()
SMALL = Settings(chunk_target_tokens=40, chunk_max_tokens=60, chunk_min_tokens=8)
SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def make_doc(
    text: str | list[str],
    *,
    fmt: str = "text",
    title: str = "Refund Policy",
    doc_id: str = "refunds-1234abcd",
    meta: DocumentMeta | None = None,
) -> SourceDocument:
    if isinstance(text, list):
        pages = tuple(PageText(i + 1, t) for i, t in enumerate(text))
    else:
        pages = (PageText(None, text),)
    return SourceDocument(doc_id, f"/docs/{doc_id}", fmt, meta or DocumentMeta(title), "v1", pages)


def sentence(i: int, words: int = 12) -> str:
    body = " ".join(f"word{(i * 7 + k) % 50}" for k in range(words - 1))
    return f"Sentence {i} says {body}."


def flat(text: str) -> str:
    return " ".join(text.split())


# --- sections ---------------------------------------------------------------------------------------------

NUMBERED = """1. Purpose
This policy explains how refunds work.

4. Refund exceptions
Some items cannot be refunded.

4.2 Gift cards
Gift cards are not refundable. See section 4.3 for sale items.

4.3 Sale items
Sale items can be exchanged within 14 days.

SECTION 5 - CONTACTS
Write to the help desk.
"""


def test_numbered_sections_give_paths_with_numbers() -> None:
    chunks = chunk_document(make_doc(NUMBERED), SETTINGS)
    assert [c.section for c in chunks] == [
        "Refund Policy > 1. Purpose",
        "Refund Policy > 4. Refund exceptions",
        "Refund Policy > 4. Refund exceptions > 4.2 Gift cards",
        "Refund Policy > 4. Refund exceptions > 4.3 Sale items",
        "Refund Policy > SECTION 5 - CONTACTS",
    ]
    assert chunks[2].text == "4.2 Gift cards\nGift cards are not refundable. See section 4.3 for sale items."


def test_control_labels_and_caps_headings_nest_under_numbered_sections() -> None:
    text = (
        "6. PROCEDURE\nThe controls below apply to all systems.\n\n"
        "AC-7 - Unsuccessful Logon Attempts\nFor All Systems:\n1) Lock the account after five attempts.\n\n"
        "AC-7(2) - Unsuccessful Logon Attempts | Purge Device\nNot selected.\n\n"
        "7. ROLES AND RESPONSIBILITIES\nEveryone has some.\n\n"
        "APPENDIX A: ACRONYMS\nAO Authorizing Official\n"
    )
    sections = [c.section.removeprefix("Refund Policy > ") for c in chunk_document(make_doc(text), SETTINGS)]
    assert sections == [
        "6. PROCEDURE",
        "6. PROCEDURE > AC-7 - Unsuccessful Logon Attempts",
        "6. PROCEDURE > AC-7(2) - Unsuccessful Logon Attempts | Purge Device",
        "7. ROLES AND RESPONSIBILITIES",
        "APPENDIX A: ACRONYMS",
    ]


def test_markdown_headings_drive_sections_and_title_is_not_repeated() -> None:
    text = "# Travel\n\nIntro text.\n\n## Flights\n\nBook economy.\n\n### Long haul\n\nBusiness class over 6 hours.\n"
    chunks = chunk_document(make_doc(text, fmt="markdown", title="Travel"), SETTINGS)
    assert [c.section for c in chunks] == ["Travel", "Travel > Flights", "Travel > Flights > Long haul"]
    assert chunks[1].text == "## Flights\n\nBook economy."


def test_markdown_code_and_setext() -> None:
    text = (
        "Setext Title\n============\n\nText.\n\n```bash\n# not a heading\necho hi\n```\n\nSub\n---\n\nMore."
    )
    chunks = chunk_document(make_doc(text, fmt="markdown", title="Doc"), SETTINGS)
    assert [c.section for c in chunks] == ["Doc > Setext Title", "Doc > Setext Title > Sub"]
    assert "# not a heading" in chunks[0].text


def test_a_heading_without_text_rides_with_the_next_one() -> None:
    text = "# Policies\n\n## Leave\n\n### Sick leave\n\nTake what you need.\n\n## Pay\n\nPaid monthly.\n\n## Empty end\n"
    chunks = chunk_document(make_doc(text, fmt="markdown", title="Handbook"), SETTINGS)
    assert chunks[0].text.startswith("# Policies\n\n## Leave\n\n### Sick leave")
    assert chunks[0].section == "Handbook > Policies > Leave > Sick leave"
    for chunk in chunks[:-1]:  # no chunk ends with a heading line...
        assert not chunk.text.rstrip().split("\n")[-1].startswith("#")
    assert chunks[-1].text == "## Pay\n\nPaid monthly.\n\n## Empty end"  # ...unless nothing follows it


def test_lone_title_lines_are_headings_numbered_steps_are_lists_stubs_merge() -> None:
    text = (
        "Expenses\n\nWe reimburse approved expenses.\n\n"
        "Step 1: Request approval\n\n1. Go to the Expenses Trello board\n2. Create a new card.\n3. Add a label\n\n"
        "Step 2: Approval\n\nThe budget owner approves it.\n\n"
        "11. MATERIAL SUPERSEDED\n\nN/A\n\n12. CONTACTS\n\nAsk the office.\n"
    )
    chunks = chunk_document(make_doc(text, title="Handbook"), SETTINGS)
    assert [c.section for c in chunks] == [
        "Handbook > Expenses",
        "Handbook > Step 1: Request approval",
        "Handbook > Step 2: Approval",
        "Handbook > 12. CONTACTS",
    ]
    assert chunks[1].text.endswith(
        "1. Go to the Expenses Trello board\n2. Create a new card.\n3. Add a label"
    )
    assert chunks[3].text == "11. MATERIAL SUPERSEDED\n\nN/A\n\n12. CONTACTS\n\nAsk the office."


def test_plain_numbered_list_is_not_headings() -> None:
    chunks = chunk_document(make_doc("Bring these:\n1. Passport\n2. Ticket\n3. Receipts\n"), SETTINGS)
    assert [c.section for c in chunks] == ["Refund Policy"]
    assert heading_level("1. PURPOSE") == (1, True)
    assert heading_level("1. Identify multiple suspect counterfeit indicators.") is None
    assert heading_level("Section 4 of the Act requires that") is None


# --- sizes and boundaries ---------------------------------------------------------------------------------


def test_small_section_stays_whole_and_tiny_paragraphs_merge() -> None:
    chunks = chunk_document(make_doc("Short one.\n\nShort two.\n\nShort three."), SETTINGS)
    assert [c.text for c in chunks] == ["Short one.\n\nShort two.\n\nShort three."]


def test_long_section_splits_between_sentences_within_limits() -> None:
    paragraphs = ["\n".join(sentence(10 * p + i) for i in range(6)) for p in range(4)]
    chunks = chunk_document(make_doc("\n\n".join(paragraphs)), SMALL)
    assert len(chunks) > 4
    for chunk in chunks:
        assert chunk.n_tokens <= SMALL.chunk_max_tokens
        assert chunk.text.endswith(".") and chunk.text[0].isupper()
    assert flat(" ".join(c.text for c in chunks)) == flat(" ".join(paragraphs))  # nothing lost or repeated


def test_one_sentence_over_the_limit_is_cut_at_clauses() -> None:
    clauses = [f"clause {i} adds several more words here" for i in range(30)]
    text = "This is one long sentence, " + ", ".join(clauses) + "."
    chunks = chunk_document(make_doc(text), SMALL)
    assert len(chunks) > 1
    assert all(c.n_tokens <= SMALL.chunk_max_tokens for c in chunks)
    assert all(c.text.endswith((",", ".")) for c in chunks)  # cut after a comma, never inside a clause
    assert flat(" ".join(c.text for c in chunks)) == flat(text)


def test_no_punctuation_blob_is_cut_at_words() -> None:
    text = " ".join(f"token{i}" for i in range(400))
    chunks = chunk_document(make_doc(text), SMALL)
    assert all(c.n_tokens <= SMALL.chunk_max_tokens for c in chunks)
    assert flat(" ".join(c.text for c in chunks)) == text


def test_list_stays_with_its_introduction() -> None:
    intro = " ".join(sentence(i) for i in range(3))
    text = f"{intro}\n\nThe following are required:\n1) A passport.\n2) A ticket.\n3) Receipts for meals.\n"
    chunks = chunk_document(make_doc(text), SMALL)
    holder = next(c for c in chunks if "The following are required:" in c.text)
    assert "1) A passport." in holder.text


def test_an_faq_answer_stays_with_its_question() -> None:
    # sized so that, cut by size alone, a chunk ends on the next question (answer 20 + question 16 tokens)
    questions = [
        f"Does rule {i} of the staff handbook apply to part-time employees like me?" for i in range(6)
    ]
    answers = [sentence(i, 9) for i in range(7)]
    text = "\n\n".join(
        [answers[0], *(part for q, a in zip(questions, answers[1:], strict=True) for part in (q, a))]
    )
    chunks = chunk_document(make_doc(text), SMALL)
    assert not any(c.text.rstrip().endswith("?") for c in chunks)
    for q, a in zip(questions, answers[1:], strict=True):
        assert any(q in c.text and a in c.text for c in chunks), q


def test_table_rows_stay_together() -> None:
    rows = "\n".join(f"| {2015 + i} | {100 + i} | {i} |" for i in range(8))
    text = f"# Budget\n\n{' '.join(sentence(i) for i in range(4))}\n\n| Year | Hours | People |\n| --- | --- | --- |\n{rows}\n"
    chunks = chunk_document(
        make_doc(text, fmt="markdown", title="Budget"), Settings(chunk_target_tokens=80, chunk_max_tokens=120)
    )
    holders = {c.ordinal for c in chunks for line in rows.split("\n") if line in c.text}
    assert len(holders) == 1


def test_paragraph_flows_across_a_page_break() -> None:
    pages = [
        "1. TRAVEL\nEmployees book economy class and the employee must submit the expense form",
        "within 30 days of the trip.\n\n2. MEALS\nMeals are paid per diem.",
    ]
    chunks = chunk_document(make_doc(pages, fmt="pdf"), SETTINGS)
    first = chunks[0]
    assert "submit the expense form within 30 days of the trip." in first.text
    assert (first.page, first.page_end) == (1, 2)
    assert (chunks[1].page, chunks[1].page_end) == (2, 2)


def test_a_new_sentence_on_the_next_page_is_a_new_paragraph() -> None:
    pages = ["Refunds take a week.", "Gift cards are final."]
    [chunk] = chunk_document(make_doc(pages, fmt="pdf"), SETTINGS)
    assert chunk.text == "Refunds take a week.\n\nGift cards are final."
    assert (chunk.page, chunk.page_end) == (1, 2)


words = st.text(alphabet="abcdefghij", min_size=1, max_size=12)
sentences = st.lists(words, min_size=1, max_size=40).map(lambda ws: " ".join(ws).capitalize() + ".")
paragraphs = st.lists(sentences, min_size=1, max_size=8).map(" ".join)


@settings(max_examples=40, deadline=None)
@given(st.lists(paragraphs, min_size=1, max_size=6))
def test_chunks_never_exceed_the_max_and_keep_every_word(paras: list[str]) -> None:
    text = "\n\n".join(paras)
    chunks = chunk_document(make_doc(text), SMALL)
    assert all(c.n_tokens <= SMALL.chunk_max_tokens for c in chunks)
    assert flat(" ".join(c.text for c in chunks)) == flat(text)
    for chunk in chunks:  # boundaries fall between sentences unless one sentence is over the limit
        last = split_sentences(chunk.text)[-1]
        if count_tokens(last) < SMALL.chunk_max_tokens // 2:
            assert chunk.text.endswith(".")


# --- ids, links and fields --------------------------------------------------------------------------------


def test_ids_are_stable_and_follow_content() -> None:
    text = "\n\n".join(f"{i}. SECTION {chr(65 + i)}\n{sentence(i)}" for i in range(1, 5))
    first = chunk_document(make_doc(text), SETTINGS)
    again = chunk_document(make_doc(text), SETTINGS)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    changed = chunk_document(make_doc(text.replace("Sentence 3 says", "Sentence 3 now says")), SETTINGS)
    same = [a.chunk_id == b.chunk_id for a, b in zip(first, changed, strict=True)]
    assert same == [True, True, False, True]
    other_doc = chunk_document(make_doc(text, doc_id="other-00000000"), SETTINGS)
    assert not {c.chunk_id for c in first} & {c.chunk_id for c in other_doc}


def test_identical_texts_get_distinct_ids() -> None:
    text = "# A\n\nSee the intranet.\n\n# B\n\nOther words here.\n\n# A\n\nSee the intranet.\n"
    chunks = chunk_document(make_doc(text, fmt="markdown", title="Doc"), SETTINGS)
    assert chunks[0].text == chunks[2].text
    assert len({c.chunk_id for c in chunks}) == 3


def test_links_ordinals_and_copied_fields() -> None:
    meta = DocumentMeta("Refund Policy", ("finance",), date(2025, 1, 1), date(2026, 1, 1), ("money",))
    chunks = chunk_document(make_doc(NUMBERED, meta=meta), SETTINGS)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert chunks[0].prev_id is None and chunks[-1].next_id is None
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before.next_id == after.chunk_id and after.prev_id == before.chunk_id
    for chunk in chunks:
        assert isinstance(chunk, Chunk)
        assert chunk.doc_id == "refunds-1234abcd" and chunk.source == "/docs/refunds-1234abcd"
        assert chunk.title == "Refund Policy" and chunk.groups == ("finance",) and chunk.tags == ("money",)
        assert (chunk.effective, chunk.expires) == (date(2025, 1, 1), date(2026, 1, 1))
        assert chunk.doc_version == "v1" and chunk.page is None and chunk.page_end is None
        assert chunk.n_tokens == count_tokens(chunk.text)


def test_jsonl_record_has_one_section() -> None:
    chunks = chunk_document(
        make_doc(" ".join(sentence(i) for i in range(20)), fmt="jsonl", title="Abstract"), SETTINGS
    )
    assert {c.section for c in chunks} == {"Abstract"}
    assert all(c.n_tokens <= SETTINGS.chunk_max_tokens for c in chunks)


# --- real data --------------------------------------------------------------------------------------------


def _grader():  # type: ignore[no-untyped-def]
    path = SHARED / "tools" / "grade_evidence.py"
    spec = importlib.util.spec_from_file_location("grade_evidence", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.shared
@pytest.mark.slow
def test_every_dev_quote_is_covered_by_one_chunk() -> None:
    """All 25 EPA PDFs and the handbook Markdown: each evidence quote of dev.jsonl lies in one chunk.

    PDF quotes are pypdf's raw text, so a quote with a word that extraction split ("T he same day") is also
    tried as our cleaning repairs it ("The same day"): that is the text a reader sees.
    """
    policies = SHARED / "data" / "policies"
    if not policies.exists():
        pytest.skip(f"shared data not found at {SHARED} (clone ../shared next to the repo)")
    from ingest.pdf import _vocabulary, repair_line

    grader = _grader()
    started = time.perf_counter()
    chunks: dict[str, list[Chunk]] = {}
    for pdf in sorted((policies / "epa-infosec").glob("*.pdf")):
        [doc] = load_file(pdf, SETTINGS)
        chunks[pdf.name] = chunk_document(doc, SETTINGS)
    markdown = policies / "civicactions-handbook" / "markdown"
    for md in sorted((markdown / "docs").rglob("*.md")):
        [doc] = load_file(md, SETTINGS)
        chunks[md.relative_to(markdown).as_posix()] = chunk_document(doc, SETTINGS)
    seconds = time.perf_counter() - started
    assert len([k for k in chunks if k.endswith(".pdf")]) == 25

    tally: Counter[str] = Counter()
    missed = []
    for line in (SHARED / "data" / "questions" / "dev.jsonl").read_text().splitlines():
        question = json.loads(line)
        for evidence in question.get("evidence", []):
            key = Path(evidence["file"]).name if evidence["file"].endswith(".pdf") else evidence["file"]
            texts = [c.text for c in chunks[key]]
            quote = evidence["quote"]
            variants = [quote]
            if key.endswith(".pdf"):
                variants.append(repair_line(" ".join(quote.split()), _vocabulary([[t for t in texts]])))
            if any(grader.covered(quote, [t]) for t in texts):
                tally["one chunk (raw quote)"] += 1
            elif any(grader.covered(v, [t]) for v in variants for t in texts):
                tally["one chunk (repaired quote)"] += 1
            elif any(grader.covered(v, texts[i : i + 2]) for v in variants for i in range(len(texts) - 1)):
                tally["two adjacent chunks"] += 1
            else:
                missed.append((question["id"], key, quote))
    print(f"\nquote coverage: {dict(tally)}; missed {len(missed)}; load+chunk {seconds:.1f}s")
    assert not missed, missed
    assert tally["two adjacent chunks"] == 0
    for doc_chunks in chunks.values():
        assert all(c.n_tokens <= SETTINGS.chunk_max_tokens for c in doc_chunks)


@pytest.mark.shared
def test_epa_pdf_is_clean() -> None:
    pdf = (
        SHARED / "data" / "policies" / "epa-infosec" / "information_security_personnel_security_procedure.pdf"
    )
    if not pdf.exists():
        pytest.skip(f"shared data not found at {pdf}")
    [doc] = load_file(pdf, SETTINGS)
    assert len(doc.pages) == 6
    text = "\n".join(p.text for p in doc.pages)
    assert "Page 2 of 6" not in text and "Form Rev." not in text and "Directive No:" not in text
    assert "a) Disable information system access within:" in text
    assert "ii) The same day of departure" in text
    assert "\uf0b7" not in text
    chunks = chunk_document(doc, SETTINGS)
    termination = next(c for c in chunks if "Disable information system access" in c.text)
    assert termination.section.endswith("5. PROCEDURE > PS-4 - Personnel Termination")
    assert termination.text.startswith("PS-4 - Personnel Termination")
    assert re.search(r"i\) 4 hours of departure if involuntary termination", termination.text)
