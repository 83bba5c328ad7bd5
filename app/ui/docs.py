"""``/docs/``: the Markdown documentation of a source checkout, rendered as HTML pages.

Only when the ``docs/`` folder sits next to the package (a clone, ``pip install -e``); an
installed wheel has none and the pages then show no docs link. Rendered by markdown-it-py
(CommonMark and tables) with raw HTML off, so a document can hold no script; headings get
GitHub's anchors so the documents' ``page.md#section`` links work; ``docs/images/*`` is served
for the pictures. Nothing inline (no style attributes), so the page holds under a strict CSP.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flask import Response, abort, render_template, send_file
from markdown_it import MarkdownIt

from app import __version__
from app.ui import bp

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg"}


def doc_names() -> list[str]:
    """The documents' stems, sorted (``api``, ``annotations``, ...)."""
    if not DOCS_DIR.is_dir():
        return []
    return sorted(path.stem for path in DOCS_DIR.glob("*.md"))


def image_names() -> list[str]:
    folder = DOCS_DIR / "images"
    if not folder.is_dir():
        return []
    return sorted(path.name for path in folder.iterdir() if path.suffix in IMAGE_TYPES)


def docs_available() -> bool:
    return bool(doc_names())


def slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _anchor_and_unstyle(tokens: list[Any]) -> None:
    """Ids on headings (a repeated one gets -1, -2, ...); table alignment as a class, not a
    style attribute (which a strict Content-Security-Policy refuses)."""
    seen: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if token.type == "heading_open":
            base = slug(tokens[index + 1].content)
            count = seen.get(base, 0)
            seen[base] = count + 1
            token.attrSet("id", f"{base}-{count}" if count else base)
        style = token.attrGet("style")
        if style and style.startswith("text-align:"):
            token.attrs.pop("style")
            token.attrSet("class", f"align-{style.split(':', 1)[1]}")


def render(text: str) -> str:
    markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = markdown.parse(text)
    _anchor_and_unstyle(tokens)
    return str(markdown.renderer.render(tokens, markdown.options, {}))


@bp.get("/docs/")
def docs_index() -> str:
    names = doc_names()
    if not names:
        abort(404)
    return render_template("ui/docs.html", version=__version__, names=names)


@bp.get("/docs/<name>.md")
def doc(name: str) -> str:
    # Only names from the listing: no path is ever built from the request.
    if name not in doc_names():
        abort(404)
    text = (DOCS_DIR / f"{name}.md").read_text(encoding="utf-8")
    return render_template("ui/doc.html", version=__version__, name=name, body=render(text),
                           names=doc_names())


@bp.get("/docs/images/<name>")
def doc_image(name: str) -> Response:
    if name not in image_names():
        abort(404)
    path = DOCS_DIR / "images" / name
    return send_file(path, mimetype=IMAGE_TYPES[path.suffix])
