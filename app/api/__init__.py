"""OpenTSDB's HTTP API: one blueprint, one module per endpoint group.

Each endpoint module registers its routes on ``bp``; the imports at the bottom wire them in.
"""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("api", __name__)

# Endpoint modules register their routes on ``bp`` when imported.
from app.api import (  # noqa: E402,F401
    annotation,
    cors,
    errors,
    histogram,
    jsonp,
    last,
    meta,
    metrics,
    mode,
    put,
    query,
    query_exp,
    query_gexp,
    rollup,
    search,
    self_stats,
    stats,
    suggest,
    tree,
    tsmeta,
    uid,
)
