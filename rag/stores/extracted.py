"""What ingestion read out of a source file that the file itself cannot show again: the words OCR recognised on a
scanned page (with their boxes) and the text of a converted document (Word, HTML).

Ingestion writes it, and reads it back as its OCR cache (a re-ingest of a scan recognises nothing twice; an
interrupted one resumes at the first page it had not finished). The source viewer reads it to open a citation
at its passage: on a scanned page the marks sit on the recognised words' boxes, and a Word or HTML document is
shown as the text that was indexed, with the passage highlighted. One SQLite file in the data directory,
``extracted.sqlite``, keyed by the sha256 of the file's bytes (``content_key``), so a metadata edit or a moved
file reuses what was recognised, and by the engine that recognised it, so a new engine recognises afresh.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "extracted.sqlite"
Box = tuple[float, float, float, float]  # left, top, right, bottom as fractions of the page (top-left origin)


@dataclass(frozen=True)
class Word:
    """One recognised word: its text, its box on the page image, the engine's confidence (0-100)."""

    text: str
    box: Box
    confidence: float


@dataclass(frozen=True)
class RecognisedPage:
    """One page as OCR read it. ``status``: ``ok``; ``poor`` (too few confident words to be text: noise, a photo,
    a damaged scan); ``empty`` (nothing recognised: a blank page). Only ``ok`` pages are indexed."""

    page: int  # 1-based
    text: str  # lines in reading order, a blank line between paragraphs
    words: tuple[Word, ...]
    confidence: float  # mean word confidence, weighted by length (0-100)
    status: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "page": self.page,
                "text": self.text,
                "confidence": round(self.confidence, 2),
                "status": self.status,
                "words": [
                    [w.text, *(round(v, 5) for v in w.box), round(w.confidence, 1)] for w in self.words
                ],
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, raw: str) -> RecognisedPage:
        data = json.loads(raw)
        return cls(
            page=int(data["page"]),
            text=str(data["text"]),
            words=tuple(Word(str(w[0]), (w[1], w[2], w[3], w[4]), float(w[5])) for w in data["words"]),
            confidence=float(data["confidence"]),
            status=str(data["status"]),
        )


def content_key(path: Path | str) -> str:
    """sha256 of the file's bytes alone (its metadata is not part of what OCR reads)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ExtractedStore:
    """Recognised pages by (content key, engine, page) and converted texts by content key."""

    def __init__(self, data_dir: Path | str) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._lock = threading.Lock()  # one connection shared by ingestion's reading threads
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS pages (key TEXT, engine TEXT, page INTEGER, result TEXT, "
                "PRIMARY KEY (key, engine, page))"
            )
            conn.execute("CREATE TABLE IF NOT EXISTS texts (key TEXT PRIMARY KEY, converter TEXT, text TEXT)")
            self._conn = conn
        return self._conn

    def exists(self) -> bool:
        return self.path.is_file()

    def pages(self, key: str, engine: str, numbers: Iterable[int] | None = None) -> dict[int, RecognisedPage]:
        """The pages of ``key`` that ``engine`` recognised (only ``numbers`` when given)."""
        wanted = None if numbers is None else set(numbers)
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT page, result FROM pages WHERE key = ? AND engine = ?", (key, engine))
                .fetchall()
            )
        return {
            int(n): RecognisedPage.from_json(raw) for n, raw in rows if wanted is None or int(n) in wanted
        }

    def page(self, key: str, engine: str, number: int) -> RecognisedPage | None:
        return self.pages(key, engine, [number]).get(number)

    def engines(self, key: str) -> list[str]:
        """Every engine that recognised pages of ``key``."""
        with self._lock:
            rows = self._db().execute("SELECT DISTINCT engine FROM pages WHERE key = ?", (key,)).fetchall()
        return sorted(str(r[0]) for r in rows)

    def other_engines(self, key: str, engine: str) -> list[str]:
        """Engines other than ``engine`` that recognised pages of ``key`` before (a new engine's notice)."""
        return [e for e in self.engines(key) if e != engine]

    def put_page(self, key: str, engine: str, page: RecognisedPage) -> None:
        """Stored at once, page by page: an interrupted run loses at most the page it was reading."""
        with self._lock, self._db() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?)", (key, engine, page.page, page.to_json())
            )

    def text(self, key: str) -> str | None:
        with self._lock:
            row = self._db().execute("SELECT text FROM texts WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put_text(self, key: str, converter: str, text: str) -> None:
        with self._lock, self._db() as conn:
            conn.execute("INSERT OR REPLACE INTO texts VALUES (?, ?, ?)", (key, converter, text))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def word_text(words: Sequence[Word]) -> tuple[str, list[int]]:
    """The words joined by spaces, and the index of the word each character belongs to (-1 for the spaces):
    the page text the viewer searches for a passage, and how a found range maps back to word boxes."""
    parts: list[str] = []
    owner: list[int] = []
    for i, word in enumerate(words):
        if parts:
            parts.append(" ")
            owner.append(-1)
        parts.append(word.text)
        owner.extend([i] * len(word.text))
    return "".join(parts), owner
