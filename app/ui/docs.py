"""``/docs/``: the Markdown documentation of a source checkout, served as plain text.

Only when the ``docs/`` folder sits next to the package (a clone, ``pip install -e``); an
installed wheel has none and the pages then show no docs link. Text, never rendered HTML.
"""

from __future__ import annotations

from pathlib import Path

from flask import Response, abort, render_template

from app import __version__
from app.ui import bp

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"


def doc_names() -> list[str]:
    """The documents' stems, sorted (``api``, ``annotations``, ...)."""
    if not DOCS_DIR.is_dir():
        return []
    return sorted(path.stem for path in DOCS_DIR.glob("*.md"))


def docs_available() -> bool:
    return bool(doc_names())


@bp.get("/docs/")
def docs_index() -> str:
    names = doc_names()
    if not names:
        abort(404)
    return render_template("ui/docs.html", version=__version__, names=names)


@bp.get("/docs/<name>.md")
def doc(name: str) -> Response:
    # Only names from the listing: no path is ever built from the request.
    if name not in doc_names():
        abort(404)
    text = (DOCS_DIR / f"{name}.md").read_text(encoding="utf-8")
    return Response(text, mimetype="text/plain; charset=utf-8")
