"""The human-facing pages: the query explorer at ``/`` and the annotation manager.

The pages are static HTML plus plain ES modules (no build step, no inline script or style, so
a strict ``Content-Security-Policy: default-src 'self'`` holds). They talk to the public HTTP
API; the few facts no public endpoint gives live in ``/ui/api/*`` (see ``docs/ui.md``).
"""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("ui", __name__, template_folder="templates", static_folder="static",
               static_url_path="/ui/static")

from app.ui import docs, helpers, views  # noqa: E402,F401
