"""One request's budget: what it may read and emit, until when, and whether it was called off.

A :class:`Budget` is made once per request (``app.api.budget.request_budget``) and handed to
every read the request makes: ``/api/query`` (percentiles too), ``/api/query/exp``,
``/api/query/gexp``, ``/api/query/last``, ``/api/search/lookup``, ``/api/suggest`` and the
annotation reads. This module is the one place that says what each limit means:

- :class:`InputBounds`: what may enter at all, checked before any read (pattern length and
  RE2 program size of a filter, expression size, ``percentiles`` count, tsuid count); 400.
- ``QueryLimits`` (``app.query.limits``): points and bytes read, points emitted; 413.
- the deadline (``tsd.query.timeout``), checked per chunk of rows, per expression node, per
  series emitted and while serialising; 408.
- cancellation: :meth:`Budget.cancel` (the serving layer calls it when the client has gone)
  stops the work at the next check, the same checks as the deadline.
- :meth:`Budget.check_estimate`: an output estimated before it is built (an expression
  chain's series x points) against the emitted-points limit; 413 before it allocates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.errors import BadRequestError, QueryLimitError, QueryTimeoutError
from app.query.ast import Query
from app.query.filters import compile_regexp
from app.query.limits import Deadline, QueryLimits

# The WSGI environ key under which a request's budget waits for the serving layer.
ENVIRON_KEY = "pytsd.budget"
# The WSGI environ key under which the server puts a threading.Event it sets when the client
# went away while its request ran (app/server/http.py sets it; the budget and the lanes read it).
CLIENT_GONE = "pytsd.client_gone"


class QueryCancelledError(QueryTimeoutError):
    """The request was called off (its client has gone): the work stops at the next check."""


@dataclass(frozen=True)
class InputBounds:
    """What a request may ask for at all; 0 turns one off. Checked before any read."""

    pattern_chars: int = 1024
    regexp_program_size: int = 2000
    expression_chars: int = 4096
    expression_nodes: int = 10_000
    percentiles: int = 100
    tsuids: int = 10_000

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> InputBounds:
        return cls(pattern_chars=config["tsd.query.limits.pattern_chars"],
                   regexp_program_size=config["tsd.query.limits.regexp_program_size"],
                   expression_chars=config["tsd.query.limits.expression_chars"],
                   expression_nodes=config["tsd.query.limits.expression_nodes"],
                   percentiles=config["tsd.query.limits.percentiles"],
                   tsuids=config["tsd.query.limits.tsuids"])

    def check_query(self, query: Query) -> None:
        """Every sub-query's filters, percentiles and tsuids against the bounds."""
        for sub in query.queries:
            self.check_tsuids(len(sub.tsuids))
            _at_most(self.percentiles, len(sub.percentiles), "percentiles",
                     "tsd.query.limits.percentiles")
            for spec in sub.filters:
                if "wildcard" in spec.type or "regexp" in spec.type:
                    self.check_pattern(spec.type, spec.filter)

    def check_pattern(self, kind: str, pattern: str) -> None:
        """A filter's pattern: its length, and a regexp's compiled program size (RE2's
        search time grows with it)."""
        _at_most(self.pattern_chars, len(pattern), f"characters in a {kind} filter",
                 "tsd.query.limits.pattern_chars")
        if kind.endswith("regexp") and self.regexp_program_size:
            _at_most(self.regexp_program_size, compile_regexp(pattern).programsize,
                     "RE2 instructions in a regexp filter",
                     "tsd.query.limits.regexp_program_size")

    def check_tsuids(self, count: int) -> None:
        _at_most(self.tsuids, count, "tsuids in a sub query", "tsd.query.limits.tsuids")

    def check_expression(self, text: str) -> None:
        """One expression's text, before it is parsed."""
        _at_most(self.expression_chars, len(text), "characters in an expression",
                 "tsd.query.limits.expression_chars")

    def check_expression_nodes(self, nodes: int) -> None:
        """The nodes of all a request's expressions (each is evaluated once)."""
        _at_most(self.expression_nodes, nodes, "expression nodes",
                 "tsd.query.limits.expression_nodes")


def _at_most(bound: int, count: int, what: str, setting: str) -> None:
    if bound and count > bound:
        raise BadRequestError(f"Too many {what}: {count}, more than {bound}",
                              f"The bound is {setting}")


class Budget(Deadline):
    """A request's limits, input bounds, deadline and cancellation flag.

    A ``Deadline`` itself, so every place that checks the deadline (the reader per chunk of
    rows, the engine per stage) also notices a cancellation."""

    def __init__(self, timeout_ms: int = 0, limits: QueryLimits | None = None,
                 bounds: InputBounds | None = None) -> None:
        super().__init__(timeout_ms)
        self.limits = limits or QueryLimits()
        self.bounds = bounds or InputBounds()
        self._cancelled = False
        self._gone: Callable[[], bool] | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Budget:
        limits = QueryLimits(data_points=config["tsd.query.limits.data_points.default"],
                             bytes=config["tsd.query.limits.bytes.default"],
                             emitted_points=config["tsd.query.limits.emitted_points"])
        return cls(config["tsd.query.timeout"], limits, InputBounds.from_config(config))

    def cancel(self) -> None:
        """Call the work off: the next check raises (safe from another thread)."""
        self._cancelled = True

    def cancel_when(self, gone: Callable[[], bool]) -> None:
        """Also call the work off once ``gone()`` says so (the serving layer's "the client
        has disconnected" flag), looked at wherever the deadline is checked."""
        self._gone = gone

    @property
    def cancelled(self) -> bool:
        return self._cancelled or (self._gone is not None and self._gone())

    def check(self, index: int = 0) -> None:
        """Raise when the request was cancelled or its time is up."""
        if self.cancelled:
            raise QueryCancelledError("Query cancelled: the client has gone")
        super().check(index)

    def check_estimate(self, what: str, points: int) -> None:
        """An output estimated before it is built, against the emitted-points limit."""
        limit = self.limits.emitted_points
        if limit and points > limit:
            raise QueryLimitError(
                f"Sorry, you have attempted to emit more than our limit of {limit} data "
                f"points ({what} would emit up to {points}). Please try downsampling, a "
                "longer downsample interval, fewer expressions, filtering using more tags or "
                "decrease your time range.")
