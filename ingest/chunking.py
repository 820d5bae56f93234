"""Structure-aware chunking: a ``SourceDocument`` becomes a list of linked ``Chunk``s.

1. Parse the text into units: headings, paragraphs, list items, table rows, code blocks. Markdown headings
   are ``#`` lines; in PDFs and plain text a heading is a numbered title ("4.2 Gift cards", "1. PURPOSE"), a
   control label ("AC-7 - Unsuccessful Logon Attempts"), "Section 4 ..." / "Appendix A ..." or a short
   ALL-CAPS line. Wrapped lines are joined; a paragraph may flow across a page break.
2. Group units into sections; each section knows its path ("Title > 4. Refunds > 4.2 Gift cards").
3. Pack each section's units into chunks of about ``chunk_target_tokens`` and never more than
   ``chunk_max_tokens``, choosing boundaries by dynamic programming: a whole section stays in one chunk when it
   fits, lists stay with the sentence that introduces them, table rows stay together where they can, and
   nothing is cut mid-sentence unless one sentence alone is over the limit (then at a clause, else a word).
   Headings start the chunk of their section and never end one. A table cut across chunks repeats its header
   row (and the Markdown rule under it) at the top of every chunk that holds its rows, so a row is never read
   without the names of its columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from ingest.pdf import is_known_word
from ingest.sources import MARKUP_FORMATS, PageText, SourceDocument
from rag.config import Settings
from rag.text import count_tokens, split_sentences
from rag.types import Chunk, chunk_id_for

# The chunking rules' version: bump it when they change, so the next ingestion re-chunks files whose bytes did
# not change (their unchanged chunk texts are not embedded again: the embedding cache keys on the text).
CHUNKER_VERSION = 5

SECTION_SEP = " > "
MAX_LABEL_CHARS = 120

# Boundary costs for the packer (a chunk itself costs 1.0; a chunk at the hard maximum costs about 2.0).
COST_MID_SENTENCE = 20.0
COST_AFTER_INTRO = 3.0  # after "... the following:" -- the list belongs to its introduction
COST_AFTER_QUESTION = 3.0  # after "Does the budget roll over?" -- an FAQ's answer belongs to its question
COST_CONTINUATION = 2.0  # before a line that continues the previous one in lowercase
COST_TABLE_ROW = 1.5
COST_LIST_ITEM = 0.5
COST_IN_PARAGRAPH = 0.3
COST_UNDER_MIN = 3.0


@dataclass
class _Unit:
    text: str
    kind: str  # heading | para | item | row | line (a short line of its own) | code
    page: int | None
    page_end: int | None
    new_block: bool = False  # a blank line came before it
    level: int = 0  # heading level
    label: str = ""  # heading text for the section path
    numbered: bool = False  # heading carries a section number
    marks: list[tuple[int, int]] = field(default_factory=list)  # (offset in text, page) where a page starts
    header: str = ""  # a table row's header row (and rule), repeated where a chunk starts inside its table


@dataclass
class _Piece:
    text: str
    tokens: int
    kind: str
    page: int | None
    page_end: int | None
    joiner: str  # how it attaches to the piece before it: "\n\n", "\n" or " "
    whole_sentence_end: bool = True  # False when a sentence over the limit was cut after this piece
    continues_unit: bool = False  # a later sentence of the same unit
    header: str = ""  # a table row's header: put before it when a chunk starts at this piece
    header_tokens: int = 0


@dataclass
class _Section:
    path: tuple[str, ...]
    heads: list[_Unit]
    body: list[_Unit]


# ---------------------------------------------------------------------------------------------------------
# Public entry point


def chunking_signature(settings: Settings) -> str:
    """What a file's chunks depend on besides its bytes: the rules' version and the chunk sizes."""
    return (
        f"v{CHUNKER_VERSION}:{settings.chunk_target_tokens}/{settings.chunk_max_tokens}/"
        f"{settings.chunk_min_tokens}"
    )


def chunk_document(doc: SourceDocument, settings: Settings) -> list[Chunk]:
    """Chunks of ``doc`` in document order, with ids, links, section paths, pages and metadata filled in."""
    units = markdown_units(doc.pages) if doc.fmt in MARKUP_FORMATS else plain_units(doc.pages)
    drafts: list[_Draft] = []
    for section in _sections(units, doc.meta.title):
        path = SECTION_SEP.join(section.path)
        for group in _pack_section(section, settings):
            drafts.extend(_drafts(group, path, settings.chunk_max_tokens))
    return _link(doc, drafts)


@dataclass(frozen=True)
class _Draft:
    text: str
    section: str
    page: int | None
    page_end: int | None
    tokens: int


def _drafts(group: list[_Piece], section: str, limit: int) -> list[_Draft]:
    """Count each chunk once. Piece counts add up to the chunk's count; should one ever not, split again."""
    text = _join(group)
    # one piece is its own text, already counted (half of all tokenizer calls on one-paragraph documents)
    tokens = group[0].tokens if len(group) == 1 else count_tokens(text)
    if tokens <= limit or len(group) == 1:
        pages = [p for piece in group for p in (piece.page, piece.page_end) if p is not None]
        return [_Draft(text, section, min(pages, default=None), max(pages, default=None), tokens)]
    parts: list[list[_Piece]] = [[]]
    size = 0
    for piece in group:
        if parts[-1] and size + piece.tokens > limit * 0.9:
            parts.append([])
            size = 0
        parts[-1].append(piece)
        size += piece.tokens
    if len(parts) == 1:
        parts = [group[: len(group) // 2], group[len(group) // 2 :]]
    return [draft for part in parts for draft in _drafts(part, section, limit)]


def _link(doc: SourceDocument, drafts: Sequence[_Draft]) -> list[Chunk]:
    seen: dict[str, int] = {}
    ids = []
    for draft in drafts:
        occurrence = seen.get(draft.text, 0)
        seen[draft.text] = occurrence + 1
        ids.append(chunk_id_for(doc.doc_id, draft.text, occurrence))
    meta = doc.meta
    return [
        Chunk(
            chunk_id=ids[i],
            doc_id=doc.doc_id,
            text=draft.text,
            source=doc.source,
            title=meta.title,
            section=draft.section,
            page=draft.page,
            page_end=draft.page_end,
            ordinal=i,
            prev_id=ids[i - 1] if i > 0 else None,
            next_id=ids[i + 1] if i + 1 < len(ids) else None,
            groups=meta.groups,
            effective=meta.effective,
            expires=meta.expires,
            tags=meta.tags,
            doc_version=doc.version,
            n_tokens=draft.tokens,
        )
        for i, draft in enumerate(drafts)
    ]


# ---------------------------------------------------------------------------------------------------------
# Parsing: Markdown


_MD_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_MD_SETEXT = re.compile(r"^ {0,3}(=+|-{2,})[ \t]*$")
_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MD_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+\S")
_MD_ROW = re.compile(r"^\s*\|")
_MD_RULE = re.compile(r"^ {0,3}([-*_])(?:\s*\1){2,}\s*$")
_MD_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _table_rows(units: list[_Unit]) -> list[_Unit]:
    """The rows of the table that ``units`` ends in (first row first); [] when it does not end in one."""
    rows: list[_Unit] = []
    for unit in reversed(units):
        if unit.kind != "row" or (rows and rows[-1].new_block):
            break
        rows.append(unit)
    return rows[::-1]


def _add_row(units: list[_Unit], row: _Unit) -> None:
    """Append a table row; a row after a table's first row and its rule carries them as its header."""
    table = _table_rows(units)
    if len(table) == 1 and _MD_TABLE_RULE.match(row.text):  # the rule under the first row: a header
        table[0].header = "-"
    elif len(table) >= 2 and table[0].header == "-":
        row.header = table[0].text + "\n" + table[1].text
    units.append(row)


def _finish_tables(units: list[_Unit]) -> None:
    for unit in units:
        if unit.header == "-":  # the marker of a table's header row, not a header to repeat
            unit.header = ""


def markdown_units(pages: Sequence[PageText]) -> list[_Unit]:
    text = "\n".join(p.text for p in pages)
    units: list[_Unit] = []
    current: _Unit | None = None
    blank_before = False
    fence: str | None = None

    def flush() -> None:
        nonlocal current
        if current is not None:
            units.append(current)
            current = None

    def start(kind: str, line: str, **extra: object) -> _Unit:
        nonlocal blank_before
        unit = _Unit(line, kind, None, None, new_block=blank_before or not units, **extra)  # type: ignore[arg-type]
        blank_before = False
        return unit

    for line in text.split("\n"):
        line = line.rstrip()
        if fence is not None:
            assert current is not None
            current.text += "\n" + line
            if line.strip().startswith(fence):
                fence = None
                flush()
            continue
        if not line.strip():
            flush()
            blank_before = True
            continue
        fence_match = _MD_FENCE.match(line)
        if fence_match:
            flush()
            fence = fence_match.group(1)
            current = start("code", line)
            continue
        atx = _MD_ATX.match(line)
        if atx:
            flush()
            units.append(start("heading", line, level=len(atx.group(1)), label=_md_label(atx.group(2))))
            continue
        setext = _MD_SETEXT.match(line)
        if setext and current is not None and current.kind == "para" and "\n" not in current.text:
            current.kind, current.level = "heading", 1 if setext.group(1).startswith("=") else 2
            current.label = _md_label(current.text)
            current.text += "\n" + line
            flush()
            continue
        if _MD_RULE.match(line):
            flush()
            blank_before = True
            continue
        if _MD_ROW.match(line):
            flush()
            _add_row(units, start("row", line))
            continue
        if _MD_ITEM.match(line):
            flush()
            current = start("item", line)
            continue
        if current is not None and current.kind in ("para", "item"):
            current.text += "\n" + line
        else:
            flush()
            current = start("para", line)
    flush()
    _finish_tables(units)
    return [u for u in units if u.kind != "heading" or u.label]


def _md_label(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    return _short(re.sub(r"[*_`]+", "", text))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 3].rstrip() + "..."


# ---------------------------------------------------------------------------------------------------------
# Parsing: PDF pages and plain text


_NUMBERED = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,4})(\.?)\s+(\S.*)$")
_CONTROL = re.compile(r"^[A-Z]{1,6}-\d{1,3}[A-Za-z]?(?:\(\d{1,3}\))*\s+[-|:]\s+[A-Z(]")
_NAMED = re.compile(
    r"^(?:section|article|chapter|part|appendix|annex|attachment|schedule|exhibit)\s+[0-9A-Z]{1,4}(?:\.\d{1,3})*\b[.:]?"
    r"|^(?:appendix|appendices|annex|attachment|glossary)\b",
    re.I,
)
_ITEM = re.compile(
    r"^(?:[\u2022\u25aa\u25e6\u25cf\u25a0\u25a1\u27a2\u2713\u2714\u2023\u2043*+-]|o(?=\s)|"
    r"\(?\d{1,3}[.)]|\(?[a-zA-Z][.)]|\(?[ivxlcdm]{1,6}[.)])\s+\S"
)
_SENTENCE_END = re.compile(r"[.!?:;][\"')\]]*$")


def heading_level(line: str) -> tuple[int, bool] | None:
    """``(level, numbered)`` when a line of plain text looks like a heading, else None.

    Levels: a numbered heading "5.6.1 Title" is level 3; named ones ("Section 4", "Appendix A") are level 1;
    control labels and ALL-CAPS lines get level 0, meaning "one below the current numbered heading".
    """
    line = line.strip()
    words = line.split()
    if not words or len(line) > MAX_LABEL_CHARS or len(words) > 16:
        return None
    m = _NUMBERED.match(line)
    if m:
        number, dot, title = m.groups()
        if _is_heading_title(title) and (dot or "." in number or _all_caps(title)):
            return number.count(".") + 1, True
        return None
    if _CONTROL.match(line) and not line.endswith((".", ";", ",")):
        return 0, False
    named = _NAMED.match(line)
    if named and len(words) <= 12 and not line.endswith((".", ";", ",")):
        rest = line[named.end() :].lstrip()
        if not rest.strip(":.") or rest[0] in "-(" or rest[0].isupper():
            return 1, False
    if _all_caps(line) and len(words) <= 10 and not line.endswith((".", ",", ";")) and not _ITEM.match(line):
        letters = re.findall(r"[A-Za-z]+", line)
        if len(letters) >= 2 and sum(len(w) >= 3 for w in letters) >= 1:
            return 0, False
        if len(letters) == 1 and len(letters[0]) >= 5 and is_known_word(letters[0].lower()):
            return 0, False
    return None


def _is_heading_title(title: str) -> bool:
    words = title.split()
    if len(words) > 12 or title.endswith((".", ",", ";", ":")) or ". " in title:
        return False
    return title[:1].isupper() or (title[:1] == "(" and title[1:2].isupper())


def _all_caps(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return len(letters) >= 4 and all(c.isupper() for c in letters)


def plain_units(pages: Sequence[PageText]) -> list[_Unit]:
    """Units of PDF pages or plain text. Wrapped lines are joined; a short line ends its unit unless the
    next line continues in lowercase (so table rows and address-like lines stay one per line)."""
    width = _wrap_width(pages)
    units: list[_Unit] = []
    current: _Unit | None = None
    last_short = False
    blank_before = False

    def flush() -> None:
        nonlocal current
        if current is not None:
            units.append(current)
            current = None

    for page in pages:
        lines = [" ".join(raw.split()) for raw in page.text.split("\n")]
        while lines and not lines[0]:
            lines.pop(0)
        for i, line in enumerate(lines):
            first_on_page = i == 0
            if not line:
                flush()
                blank_before = True
                continue
            if _is_row(line):  # a ruled table's row, as ``ingest.pdf.with_ruled_tables`` writes it
                flush()
                _add_row(units, _Unit(line, "row", page.number, page.number, blank_before or first_on_page))
                blank_before, last_short = False, True
                continue
            short = len(line) < SHORT_LINE * width
            continues = current is not None and _joins(current, line, last_short, first_on_page)
            level = heading_level(line)
            if level is None and len(line) <= 80 and not continues and (blank_before or first_on_page):
                alone = i + 1 == len(lines) or not lines[i + 1]
                level = (0, False) if alone and _looks_like_title(line) else None
            if level is not None:
                flush()
                depth, numbered = level
                new_block = blank_before or first_on_page
                units.append(
                    _Unit(line, "heading", page.number, page.number, new_block, depth, _short(line), numbered)
                )
                blank_before = False
            elif _ITEM.match(line):
                flush()
                current = _Unit(line, "item", page.number, page.number, blank_before or first_on_page)
                blank_before = False
            elif current is not None and continues:
                if page.number != current.page_end:
                    current.marks.append((len(current.text) + 1, page.number or 0))
                    current.page_end = page.number
                current.text += " " + line
            else:
                flush()
                kind = "line" if short else "para"
                current = _Unit(line, kind, page.number, page.number, blank_before or first_on_page)
                blank_before = False
            last_short = short
    flush()
    _finish_tables(units)
    return _resolve_levels(_demote_heading_lists(units))


def _is_row(line: str) -> bool:
    return len(line) > 2 and line.startswith("|") and line.endswith("|")


def _resolve_levels(units: list[_Unit]) -> list[_Unit]:
    """Level 0 means "one below the numbered heading in force"; a level-1 named heading ends numbering."""
    numbered_depth = 0
    for unit in units:
        if unit.kind != "heading":
            continue
        if unit.numbered:
            numbered_depth = unit.level
        elif unit.level == 0:
            unit.level = numbered_depth + 1
        else:
            numbered_depth = 0
    return units


def _looks_like_title(line: str) -> bool:
    """A short line standing alone between blank lines that reads like a title: "Step 1: Request approval"."""
    words = line.split()
    letters = sum(c.isalpha() for c in line)
    return (
        len(words) <= 10
        and letters >= 4
        and line[0].isupper()
        and not line.endswith((".", ",", ";", ":", "!", "?"))
        and ". " not in line
        and not _ITEM.match(line)
    )


SHORT_LINE = 0.6  # a line shorter than this share of the usual line width ends its paragraph


def _wrap_width(pages: Sequence[PageText]) -> int:
    """The usual width of a full line (90th percentile of line lengths), in characters."""
    lengths = sorted(
        len(" ".join(line.split())) for p in pages for line in p.text.split("\n") if line.strip()
    )
    if not lengths:
        return 80
    return max(40, lengths[int(0.9 * (len(lengths) - 1))])


def _joins(current: _Unit, line: str, last_short: bool, first_on_page: bool) -> bool:
    """Whether ``line`` continues ``current`` rather than starting a new paragraph."""
    if line[:1].islower():
        return True
    if current.kind == "line":
        return False
    if first_on_page:  # after a page break: only an unfinished sentence continues
        return not _SENTENCE_END.search(current.text)
    return not last_short


def _demote_heading_lists(units: list[_Unit]) -> list[_Unit]:
    """A numbered "heading" next to the previous or next number of a list is a list item ("1. Go to ...")."""

    def number(unit: _Unit) -> tuple[int, str] | None:
        m = re.match(r"(\d{1,3})([.)])\s", unit.text)
        return (int(m.group(1)), m.group(2)) if m and unit.kind in ("heading", "item") else None

    numbers = [number(u) for u in units]
    for i, unit in enumerate(units):
        mine = numbers[i]
        if unit.kind != "heading" or mine is None or _all_caps(unit.text):
            continue
        n, style = mine
        after = numbers[i + 1] if i + 1 < len(units) else None
        before = numbers[i - 1] if i > 0 else None
        if after == (n + 1, style) or (before == (n - 1, style) and units[i - 1].kind == "item"):
            unit.kind = "item"
    return units


# ---------------------------------------------------------------------------------------------------------
# Sections


def _sections(units: Sequence[_Unit], title: str) -> list[_Section]:
    """Split at headings. A heading with no text before the next one rides along with that next section."""
    sections: list[_Section] = []
    stack: list[_Unit] = []
    heads: list[_Unit] = []  # headings waiting for their first body unit
    body: list[_Unit] = []
    for unit in units:
        if unit.kind == "heading":
            if body:
                sections.append(_Section(_path(title, stack), heads, body))
                heads, body = [], []
            while stack and stack[-1].level >= unit.level:
                stack.pop()
            stack.append(unit)
            heads.append(unit)
        else:
            body.append(unit)
    if body:
        sections.append(_Section(_path(title, stack), heads, body))
    elif heads:  # the document ends with headings: they join the last section, or stand alone
        tail = [_Unit(h.text, "para", h.page, h.page_end, True) for h in heads]
        if sections:
            sections[-1].body.extend(tail)
        else:
            sections.append(_Section(_path(title, []), [], tail))
    return _merge_stubs(_absorb_preamble(sections))


def _merge_stubs(sections: list[_Section]) -> list[_Section]:
    """A section whose whole text is a fragment ("N/A", a repeated title) opens the next section instead."""
    out: list[_Section] = []
    carry: list[_Unit] = []
    for i, section in enumerate(sections):
        heads = carry + section.heads
        carry = []
        body = section.body
        is_stub = (
            i + 1 < len(sections)
            and len(body) == 1
            and len(body[0].text.split()) <= 3
            and not _SENTENCE_END.search(body[0].text)
        )
        if is_stub:
            carry = heads + [_Unit(u.text, "para", u.page, u.page_end, True) for u in section.body]
            continue
        out.append(_Section(section.path, heads, section.body))
    return out


def _path(title: str, stack: Sequence[_Unit]) -> tuple[str, ...]:
    path = [_short(title)]
    for unit in stack:
        if unit.label and unit.label.casefold() != path[-1].casefold():
            path.append(unit.label)
    return tuple(path)


def _absorb_preamble(sections: list[_Section]) -> list[_Section]:
    """Text before the first heading that is too short for a chunk of its own joins the first section."""
    if len(sections) >= 2 and not sections[0].heads:
        total = sum(count_tokens(u.text) for u in sections[0].body)
        if total < 24:
            first, second = sections[0], sections[1]
            sections[1] = _Section(second.path, first.body + second.heads, second.body)
            return sections[1:]
    return sections


# ---------------------------------------------------------------------------------------------------------
# Packing


def _pack_section(section: _Section, settings: Settings) -> list[list[_Piece]]:
    limit = settings.chunk_max_tokens
    heads = [_as_piece(u, u.text, count_tokens(u.text)) for u in section.heads]
    head_tokens = sum(p.tokens for p in heads)
    body = section.body
    if head_tokens > limit // 2:  # absurdly long headings: pack them as ordinary text
        body = [_Unit(h.text, "para", h.page, h.page_end, True) for h in section.heads] + body
        heads, head_tokens = [], 0
    pieces: list[_Piece] = []
    for k, unit in enumerate(body):
        pieces.extend(_pieces(unit, limit - head_tokens if k == 0 else limit))
    groups = _best_split(pieces, head_tokens, settings)
    for k in range(1, len(groups)):
        first = groups[k][0]
        if first.header:
            header = _Piece(first.header, first.header_tokens, "row", first.page, first.page, first.joiner)
            groups[k] = [header, replace(first, joiner="\n")] + groups[k][1:]
    if heads and groups:
        groups[0] = heads + groups[0]
    return groups


def _pieces(unit: _Unit, limit: int) -> list[_Piece]:
    """The unit whole when it fits, else its sentences; a sentence over the limit is cut at clauses/words."""
    limit = max(8, limit)
    tokens = count_tokens(unit.text)
    if tokens <= limit:
        return [_as_piece(unit, unit.text, tokens)]
    if unit.kind == "code" or unit.kind == "row":
        parts = unit.text.split("\n")
        joiner = "\n"
    else:
        parts = split_sentences(unit.text)
        joiner = " "
    out: list[_Piece] = []
    cursor = 0
    for i, part in enumerate(parts):
        found = unit.text.find(part, cursor)
        offset = found if found >= 0 else cursor
        cursor = offset + len(part) if found >= 0 else cursor
        page = _page_at(unit, offset)
        page_end = _page_at(unit, offset + max(0, len(part) - 1))
        n = count_tokens(part)
        cut = _cut(part, limit) if n > limit else [(part, n)]
        for j, (text, count) in enumerate(cut):
            piece = _Piece(
                text,
                count,
                unit.kind,
                page,
                page_end,
                joiner=(("\n\n" if unit.new_block else "\n") if i == 0 and j == 0 else joiner),
                whole_sentence_end=j == len(cut) - 1,
                continues_unit=not (i == 0 and j == 0),
            )
            out.append(_with_header(piece, unit))
    return out


def _with_header(piece: _Piece, unit: _Unit) -> _Piece:
    if unit.header:
        piece.header, piece.header_tokens = unit.header, count_tokens(unit.header)
    return piece


def _page_at(unit: _Unit, offset: int) -> int | None:
    page = unit.page
    for start, number in unit.marks:
        if offset >= start:
            page = number
    return page


def _as_piece(unit: _Unit, text: str, tokens: int) -> _Piece:
    piece = _Piece(text, tokens, unit.kind, unit.page, unit.page_end, "\n\n" if unit.new_block else "\n")
    return _with_header(piece, unit)


_CLAUSE = re.compile(r"(?<=[,;:])\s+|\s+(?=\((?:[a-z]|[ivx]+|\d+)\)\s)")


def _cut(sentence: str, limit: int) -> list[tuple[str, int]]:
    """Split one over-long sentence at clause boundaries, falling back to word boundaries."""
    out: list[tuple[str, int]] = []
    for clause in _CLAUSE.split(sentence):
        if not clause:
            continue
        n = count_tokens(clause)
        if n > limit:
            out.extend(_cut_words(clause, limit))
        elif out and out[-1][1] + n <= limit:
            text = out[-1][0] + " " + clause
            out[-1] = (text, out[-1][1] + n)
        else:
            out.append((clause, n))
    return out


def _cut_words(text: str, limit: int) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    words: list[str] = []
    total = 0
    for word in text.split():
        n = count_tokens(word)
        if words and total + n > limit:
            out.append((" ".join(words), total))
            words, total = [], 0
        if n > limit:  # one "word" longer than a chunk (a URL, a blob): cut it by characters
            for start in range(0, len(word), limit):
                part = word[start : start + limit]
                out.append((part, count_tokens(part)))
            continue
        words.append(word)
        total += n
    if words:
        out.append((" ".join(words), total))
    return out


def _best_split(pieces: Sequence[_Piece], head_tokens: int, settings: Settings) -> list[list[_Piece]]:
    """Dynamic programming over piece boundaries: fewest, well-sized chunks with the cheapest cuts."""
    n = len(pieces)
    if n == 0:
        return []
    target, limit, minimum = (
        settings.chunk_target_tokens,
        settings.chunk_max_tokens,
        settings.chunk_min_tokens,
    )
    limit = max(limit, target)
    best = [0.0] + [float("inf")] * n
    back = [0] * (n + 1)
    for end in range(1, n + 1):
        size = 0
        for start in range(end - 1, -1, -1):
            size += pieces[start].tokens
            # a chunk that starts inside a table repeats its header row
            total = size + (head_tokens if start == 0 else pieces[start].header_tokens)
            if total > limit and start < end - 1:
                break
            cost = best[start] + _size_cost(total, target, limit, minimum)
            if end < n:
                cost += _cut_cost(pieces[end - 1], pieces[end])
            if cost < best[end]:
                best[end], back[end] = cost, start
    groups: list[list[_Piece]] = []
    end = n
    while end > 0:
        start = back[end]
        groups.append(list(pieces[start:end]))
        end = start
    return groups[::-1]


def _size_cost(size: int, target: int, limit: int, minimum: int) -> float:
    cost = 1.0
    if size < target:
        cost += ((target - size) / target) ** 2
        if size < minimum:
            cost += COST_UNDER_MIN
    elif size > target:
        cost += ((size - target) / max(1, limit - target)) ** 2
    return cost


def _cut_cost(before: _Piece, after: _Piece) -> float:
    cost = 0.0
    if not before.whole_sentence_end:
        cost += COST_MID_SENTENCE
    if after.continues_unit:
        cost += COST_IN_PARAGRAPH
    if before.text.rstrip().endswith(":"):
        cost += COST_AFTER_INTRO
    if before.text.rstrip().endswith("?") and not after.continues_unit:
        cost += COST_AFTER_QUESTION  # a question standing as its own paragraph or line: an FAQ's
    if before.kind in ("row", "line") and after.kind in ("row", "line"):
        cost += COST_TABLE_ROW
    if after.kind == "row" and _MD_TABLE_RULE.match(after.text):
        cost += COST_MID_SENTENCE  # a header row stays with the rule under it (then every later chunk repeats both)
    if before.kind == "item" and after.kind == "item":
        cost += COST_LIST_ITEM
    if after.kind in ("para", "line") and after.text[:1].islower():
        cost += COST_CONTINUATION
    return cost


def _join(pieces: Iterable[_Piece]) -> str:
    out = ""
    for piece in pieces:
        out = piece.text if not out else out + piece.joiner + piece.text
    return out
