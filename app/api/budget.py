"""The budget of the request being served (``app.query.budget``), made on first use.

It is kept in the WSGI environ under ``ENVIRON_KEY``. The serving layer puts an event in the
environ (``CLIENT_GONE``) that it sets when the client disconnects; the budget looks at it
wherever the deadline is checked, so an abandoned request stops at its next check (408).
"""

from __future__ import annotations

from flask import current_app, request

from app.query.budget import CLIENT_GONE, ENVIRON_KEY, Budget


def request_budget() -> Budget:
    """This request's one budget: every read it makes is charged to it."""
    budget = request.environ.get(ENVIRON_KEY)
    if not isinstance(budget, Budget):
        budget = Budget.from_config(current_app.config["TSD"])
        gone = request.environ.get(CLIENT_GONE)  # set by the server when the client leaves
        if gone is not None:
            budget.cancel_when(gone.is_set)
        request.environ[ENVIRON_KEY] = budget
    return budget
