"""The validated query model: what both front doors (GET ``m=`` and POST JSON) produce.

Frozen dataclasses, no behaviour. Times are integer milliseconds since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class Filter:
    """One tag filter: ``type`` is a name from ``app.query.filters.FILTERS``."""

    type: str
    tagk: str
    filter: str
    group_by: bool = False


@dataclass(frozen=True)
class Downsample:
    """A parsed downsample spec such as ``1m-avg-nan``, ``0all-sum`` or ``1dc-max``.

    ``interval_ms`` is 0 for ``all``; for calendar intervals it is the nominal length and
    ``unit``/``count`` give the calendar unit.
    """

    text: str
    interval_ms: int
    count: int
    unit: str
    function: str
    fill: str = "none"
    calendar: bool = False
    run_all: bool = False


@dataclass(frozen=True)
class RateOptions:
    counter: bool = False
    counter_max: int = LONG_MAX
    reset_value: int = 0
    drop_resets: bool = False
    # Given in the request (even with default values): OpenTSDB's showQuery echo prints it then.
    given: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class SubQuery:
    """One entry of ``queries[]`` (or one ``m=``/``tsuid=`` parameter)."""

    aggregator: str
    index: int = 0
    metric: str | None = None
    tsuids: tuple[str, ...] = ()
    downsample: Downsample | None = None
    rate: bool = False
    rate_options: RateOptions = field(default_factory=RateOptions)
    filters: tuple[Filter, ...] = ()
    explicit_tags: bool = False
    percentiles: tuple[float, ...] = ()
    # Histogram queries (2.4): also answer one series per bucket of the histograms.
    show_histogram_buckets: bool = False
    # Rollups (2.4): ``ROLLUP_*`` name or None for the default; read the pre-aggregate table.
    rollup_usage: str | None = None
    pre_aggregate: bool = False


@dataclass(frozen=True)
class Query:
    """A whole ``/api/query`` request."""

    start_ms: int
    end_ms: int
    queries: tuple[SubQuery, ...]
    start_text: str = ""
    end_text: str | None = None
    ms_resolution: bool = False
    arrays: bool = False
    show_tsuids: bool = False
    show_query: bool = False
    show_summary: bool = False
    show_stats: bool = False
    no_annotations: bool = False
    global_annotations: bool = False
    timezone: str = "UTC"
    use_calendar: bool = False
    delete: bool = False
