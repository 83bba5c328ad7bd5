"""Every curl example of the README and docs/, run as written (only the host and port changed)
against a real gunicorn server over the demo data, in the order a reader meets them.

A command that fails as written (a URL with braces and no ``-g`` makes curl stop with "bad URL")
or that the server refuses (an ``{"error": ...}`` answer) fails the test.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import ARTIFACTS

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HOSTS = re.compile(r"(?:https?://)?(?:localhost|127\.0\.0\.1):4242")


def shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks whose language is a shell (or not given)."""
    blocks, body, language = [], [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if language is None:
                language, body = line[3:].strip(), []
            else:
                if language in ("", "sh", "bash", "shell", "console"):
                    blocks.append("\n".join(body))
                language = None
        elif language is not None:
            body.append(line)
    return blocks


def curl_examples(path: Path) -> list[str]:
    """The curl commands of the shell blocks, continuation lines joined as a shell joins them."""
    commands = []
    for block in shell_blocks(path.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            if line.lstrip().startswith("curl ") and HOSTS.search(line):
                commands.append(line.strip())
    return commands


EXAMPLES = [(path.relative_to(ROOT).as_posix(), curl_examples(path)) for path in DOCUMENTS]


def test_the_documents_have_examples() -> None:
    found = dict(EXAMPLES)
    assert len(found["README.md"]) >= 5
    assert len(found["docs/annotations.md"]) >= 4


@pytest.mark.parametrize(("document", "commands"), [e for e in EXAMPLES if e[1]],
                         ids=[e[0] for e in EXAMPLES if e[1]])
def test_curl_examples_run_as_written(live_server: str, document: str,
                                      commands: list[str]) -> None:
    where = urlsplit(live_server).netloc
    for command in commands:
        done = subprocess.run(["bash", "-c", HOSTS.sub(f"http://{where}", command)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (document, command, done.stderr)
        if not done.stdout.strip():
            continue  # 204 No Content: a put without ?details
        answer = json.loads(done.stdout)
        assert not (isinstance(answer, dict) and "error" in answer), (document, command, answer)


def test_docs_read_as_pages_with_their_pictures(page: Any, live_server: str) -> None:
    page.goto(f"{live_server}/docs/")
    page.get_by_role("link", name="ui.md").click()
    page.wait_for_url(f"{live_server}/docs/ui.md")
    assert page.locator("article h1").inner_text() == "The web pages"
    picture = page.get_by_role("img", name="The query explorer")
    assert picture.evaluate("img => img.complete && img.naturalWidth") == 1280
    # A link to a section of another document lands on that section.
    page.locator("article a[href='annotations.md#the-annotation-page']").first.click()
    page.wait_for_url(f"{live_server}/docs/annotations.md#the-annotation-page")
    assert page.locator("#the-annotation-page").inner_text() == "The annotation page"
    assert page.get_by_role("img", name="The annotation manager").evaluate(
        "img => img.naturalWidth") == 1280
    assert page.locator("article table").count() >= 3
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "docs-annotations.png"))
