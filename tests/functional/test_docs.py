"""The documentation stays inside the repository: its links and the files it names exist.

(The README's commands themselves are run by tests/e2e/test_fresh_clone.py.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
# OpenTSDB's own files, named where pytsd mirrors them; they are not meant to be here.
OPENTSDB_FILES = {"opentsdb.conf", "create_table.sh", "src/create_table.sh",
                  "test/rollup/TestRollupUtils.java"}
# Files pytsd writes at run time (defaults of settings), under the gitignored data/ folder.
RUNTIME_FILES = {"data/auth.json"}
FILE_NAME = re.compile(
    r"(?<![\w/.:-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:md|py|sh|ya?ml|toml|txt|java|json|xml|png))\b")


def repository_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode()
    return [name for name in listing.split("\0") if name and (ROOT / name).is_file()]


def in_repository(name: str, doc: Path, files: list[str]) -> bool:
    """A path from the document's folder, or a repository file's path or trailing part."""
    near = (doc.parent / name).resolve()
    if near.is_relative_to(ROOT) and near.exists():
        return True
    return any(path == name or path.endswith("/" + name) for path in files)


def relative_links(doc: Path) -> list[str]:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8"))
    return [link for link in links if not link.startswith(("http://", "https://"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_relative_links_point_into_the_repository(doc: Path) -> None:
    outside = [link for link in relative_links(doc)
               if not (doc.parent / link).resolve().is_relative_to(ROOT)
               or not (doc.parent / link).exists()]
    assert outside == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_file_named_is_in_the_repository(doc: Path) -> None:
    files = repository_files()
    named = set(FILE_NAME.findall(doc.read_text(encoding="utf-8"))) - OPENTSDB_FILES - RUNTIME_FILES
    assert sorted(name for name in named if not in_repository(name, doc, files)) == []
