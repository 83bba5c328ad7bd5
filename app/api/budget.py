"""The budget of the request being served (``app.query.budget``), made on first use.

It is kept in the WSGI environ under ``ENVIRON_KEY``: the serving layer, which holds that
environ, may call ``environ["pytsd.budget"].cancel()`` when the client has gone, and the
request's reads stop at their next check of the deadline.
"""

from __future__ import annotations

from flask import current_app, request

from app.query.budget import ENVIRON_KEY, Budget


def request_budget() -> Budget:
    """This request's one budget: every read it makes is charged to it."""
    budget = request.environ.get(ENVIRON_KEY)
    if not isinstance(budget, Budget):
        budget = Budget.from_config(current_app.config["TSD"])
        request.environ[ENVIRON_KEY] = budget
    return budget
