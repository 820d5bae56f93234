"""No module outside rag/config.py reads or writes the environment; settings come from ``load_settings``.

The one exception is building a child process's environment from this one's (``dict(os.environ, ...)`` or
``{**os.environ, ...}``), which changes nothing in this process.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rag", "ingest", "ui", "evaluation", "benchmarks", "supportbot")
ALLOWED_FILES = {"rag/config.py"}
ENVIRONMENT = re.compile(
    r"\bos\.(environ|getenv|putenv|unsetenv|environb)\b|\bfrom\s+os\s+import\b.*\b(environ|getenv|putenv)\b"
)
CHILD_ENVIRONMENT = re.compile(r"dict\(os\.environ\b|\{\*\*os\.environ\b")


def environment_uses() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED_FILES:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if ENVIRONMENT.search(code) and not CHILD_ENVIRONMENT.search(code):
                    found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_only_rag_config_reads_or_writes_the_environment() -> None:
    assert environment_uses() == []


def test_the_check_sees_reads_writes_and_allows_child_environments(tmp_path: Path) -> None:
    assert ENVIRONMENT.search('os.environ.setdefault("HF_HUB_OFFLINE", "1")')
    assert ENVIRONMENT.search('value = os.getenv("RAG_X")')
    assert ENVIRONMENT.search("from os import environ")
    assert not ENVIRONMENT.search("the current environment")
    assert CHILD_ENVIRONMENT.search('env = {**os.environ, "TQDM_DISABLE": "1"}')
    assert CHILD_ENVIRONMENT.search("env = dict(os.environ, X='1')")
