"""The human-facing pages: a home page and (later) the annotation manager."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("ui", __name__, template_folder="templates", static_folder="static",
               static_url_path="/ui/static")

from app.ui import views  # noqa: E402,F401
