"""Every difference from OpenTSDB 2.4.1 the differential suite accepts, in one list.

A difference between an answer and OpenTSDB's is accepted only when a departure below claims it:
pytsd's documented departures (each pointing at its line in the docs, by that line's text) and
OpenTSDB's own bugs (where pytsd stays right). Anything else fails the suite.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.differential.queries import Case

Predicate = Callable[[Case, list[str]], bool]
FLAKY = "differed once, agreed when asked again"


@dataclass(frozen=True)
class Departure:
    name: str
    doc: str     # the doc that documents it (path from the repository root)
    anchor: str  # text of the line that says so (a test checks the doc still has it)
    applies: Predicate
    # "pytsd": claims differences in pytsd's answers only; "any": OpenTSDB's own answers vary
    # too (its bugs), so an OpenTSDB reader may differ from the OpenTSDB writer as well.
    sides: str = "pytsd"


def _filters(case: Case) -> list[dict[str, Any]]:
    return [f for sub in case.sub for f in sub.get("filters", [])]


def _subs_with(case: Case, pred: Callable[[dict[str, Any]], bool]) -> bool:
    return any(pred(sub) for sub in case.sub)


def _several_filters_on_one_key(sub: dict[str, Any]) -> bool:
    keys = [f["tagk"] for f in sub.get("filters", [])]
    return len(keys) != len(set(keys))


def _all_lines(*words: str) -> Predicate:
    """Every difference line mentions one of ``words``."""
    return lambda case, lines: all(any(w in line for w in words) for line in lines)


def _lookup_paging_order(case: Case, lines: list[str]) -> bool:
    """A lookup whose answers differ only in where ``startIndex`` and ``totalResults`` stand
    among the top-level keys (OpenTSDB's Jackson orders those getters per JVM)."""
    paging = {"startIndex", "totalResults"}

    def swapped(line: str) -> bool:
        if not line.startswith("$: key order "):
            return False
        first, _, second = line[len("$: key order "):].partition(" vs ")
        a, b = json.loads(first.replace("'", '"')), json.loads(second.replace("'", '"'))
        return ([k for k in a if k not in paging] == [k for k in b if k not in paging]
                and set(a) == set(b))

    return case.kind == "lookup" and bool(lines) and all(swapped(line) for line in lines)


def _malformed_status(case: Case, lines: list[str]) -> bool:
    return case.kind == "malformed" and all(
        line.startswith(("status 500 vs 400", "message ")) for line in lines)


def _m_param_500(case: Case, lines: list[str]) -> bool:
    return _malformed_status(case, lines) and "m=" in case.path and "tsuid=" not in case.path


def _tsuid_malformed(case: Case, lines: list[str]) -> bool:
    return case.kind == "malformed" and "tsuid=" in case.path and all(
        line.startswith(("status 500 vs 400", "status 200 vs 400")) for line in lines)


def _iwildcard_value_case(case: Case, lines: list[str]) -> bool:
    """A case-insensitive wildcard where the upper-case tag value WEB04 exists."""
    def wild(sub: dict[str, Any]) -> bool:
        if not sub["metric"].endswith("sparse"):
            return False
        tags = [v for v in (sub.get("tags") or {}).values() if "*" in v and v != "*"]
        return bool(tags) or any(f["type"] == "iwildcard" for f in sub.get("filters", []))
    return _subs_with(case, wild)


def _implicit_wildcard_echo(case: Case, lines: list[str]) -> bool:
    shows = case.flags.get("showQuery") or case.flags.get("show_query")
    wild = _subs_with(case, lambda sub: any("*" in v and v != "*"
                                           for v in (sub.get("tags") or {}).values()))
    return bool(shows and wild) and _all_lines("filterTagKs", ".query.filters",
                                               ".query.tags")(case, lines)


def _annotations_out_of_range(case: Case, lines: list[str]) -> bool:
    return case.kind == "query" and _all_lines("nnotations")(case, lines)


def _unasked_global_annotations(case: Case, lines: list[str]) -> bool:
    return (case.method == "POST" and case.body is not None and "globalAnnotations" not in
            case.body and _all_lines("globalAnnotations")(case, lines))


def _series_set(lines: list[str]) -> bool:
    """The difference is in which series were answered (not in their points)."""
    return all(line.startswith("$: ") or ".tags" in line or ".aggregateTags" in line
               for line in lines)


def _explicit(sub: dict[str, Any]) -> bool:
    return bool(sub.get("explicitTags"))


def _multi_value_keys(sub: dict[str, Any]) -> int:
    keys = {f["tagk"] for f in sub.get("filters", [])
            if f["type"] != "literal_or" or "|" in f["filter"]}
    keys |= {k for k, v in (sub.get("tags") or {}).items() if "|" in v or "*" in v}
    return len(keys)


def _fills(sub: dict[str, Any]) -> bool:
    return any(sub.get("downsample", "").endswith(fill) for fill in ("-nan", "-null", "-zero"))


def _histogram_all(case: Case, lines: list[str]) -> bool:
    return _subs_with(case, lambda s: bool(s.get("percentiles") or s.get("showHistogramBuckets"))
                      and str(s.get("downsample") or "").startswith("0all"))


def _huge_back_scan(case: Case, lines: list[str]) -> bool:
    import re

    match = re.search(r"back_?[sS]can\D+(\d+)", case.path + (case.body or ""))
    return case.kind == "last" and match is not None and int(match.group(1)) > 1000


def _back_scan_zero(case: Case, lines: list[str]) -> bool:
    return case.kind == "last" and ("back_scan=0" in case.path or '"backScan": 0' in
                                    (case.body or ""))


DEPARTURES: list[Departure] = [
    # ---- pytsd's documented departures
    Departure("several-filters-on-one-key", "docs/query-differences.md",
              "Several filters on one tag key",
              lambda case, lines: _subs_with(case, _several_filters_on_one_key)),
    Departure("iwildcard-ignores-value-case", "docs/query-differences.md",
              "Case-insensitive wildcards", _iwildcard_value_case),
    Departure("implicit-wildcard-echo", "docs/query-differences.md",
              "Implicit wildcard type", _implicit_wildcard_echo),
    Departure("malformed-m-is-400", "docs/query-differences.md", "Malformed `m=`",
              _m_param_500),
    Departure("missing-queries-is-400", "docs/query-differences.md",
              "POST body without `queries`",
              lambda case, lines: case.kind == "malformed" and case.path == "/api/query"
              and case.body is not None and '"queries"' not in case.body),
    Departure("scalar-fill-rejected", "docs/query-differences.md", "Downsample fill `scalar`",
              lambda case, lines: "scalar" in (case.body or case.path)),
    Departure("malformed-tsuid-is-400", "docs/query-differences.md", "Malformed `tsuid=`",
              _tsuid_malformed),
    Departure("annotations-in-range-only", "docs/query-differences.md",
              "Series annotations outside the query range", _annotations_out_of_range),
    Departure("echo-without-filterTagKs", "docs/query-differences.md",
              "`query` echo (`showQuery`)", _all_lines("filterTagKs")),
    Departure("global-annotations-unasked", "docs/query-differences.md",
              "pytsd includes them for", _unasked_global_annotations),
    Departure("malformed-annotation-time-is-400", "docs/annotations.md",
              "A malformed TSUID, time or body is a 500",
              lambda case, lines: _malformed_status(case, lines)
              and case.path.startswith("/api/annotation")),
    Departure("lookup-without-meta", "docs/api.md", "Works from the data table alone",
              lambda case, lines: case.kind == "lookup"
              and _all_lines("$.results", "$.totalResults")(case, lines)),
    Departure("lookup-getter-order-varies", "docs/api.md",
              "The answer's keys come in one fixed order", _lookup_paging_order, sides="any"),
    Departure("last-without-meta", "docs/api.md", "Works without `tsdb-meta`",
              _back_scan_zero),
    Departure("unknown-tag-key-and-value", "docs/query-differences.md",
              "naming an unknown tag key *and* an unknown value",
              lambda case, lines: "No such name for 'tag" in lines[0], sides="any"),
    Departure("overflow-message", "docs/query-differences.md",
              "Arithmetic that overflows to ±Infinity",
              lambda case, lines: "Got Infinity" in lines[0] and lines[0].startswith("message")),
    # ---- OpenTSDB 2.4.1's own bugs (pytsd stays right)
    Departure("opentsdb-explicit-tags-multi-value", "docs/differences.md",
              "`explicitTags` with multi-value filters",
              lambda case, lines: _series_set(lines) and _subs_with(
                  case, lambda s: _explicit(s) and _multi_value_keys(s) >= 2), sides="any"),
    Departure("opentsdb-explicit-tags-fill-invents-series", "docs/differences.md",
              "`explicitTags` plus a fill policy",
              lambda case, lines: _series_set(lines) and _subs_with(
                  case, lambda s: _explicit(s) and _fills(s)), sides="any"),
    Departure("opentsdb-ghost-series", "docs/differences.md",
              "A ghost series with an empty metric name",
              lambda case, lines: '[""' in lines[0] or '"metric": ""' in lines[0], sides="any"),
    Departure("opentsdb-not-literal-or-group-by", "docs/differences.md",
              "A group-by `not_literal_or`",
              lambda case, lines: _series_set(lines) and any(
                  f["type"] == "not_literal_or" and f["groupBy"] for f in _filters(case)),
              sides="any"),
    Departure("opentsdb-varies", "docs/differences.md", "answers a request differently",
              lambda case, lines: lines[0].startswith(FLAKY), sides="any"),
    Departure("opentsdb-huge-back-scan", "docs/differences.md",
              "with a huge `back_scan`", _huge_back_scan, sides="any"),
    # tests/differential/test_histograms.py checks OpenTSDB's empty answer
    Departure("opentsdb-histogram-all-downsampler", "docs/differences.md",
              "Histograms and the `all` downsampler", _histogram_all, sides="any"),
]



# ---------------------------------------------------------------- /api/query/exp (test_expressions)


def _exp_invalid_is_400(case: Any, lines: list[str]) -> bool:
    return case.kind == "malformed" and lines == ["status 500 vs 400"]


def _exp_parse_error_text(case: Any, lines: list[str]) -> bool:
    return case.kind == "malformed" and all(
        line == "status 500 vs 400" or (line.startswith("message ") and "parsing error" in line)
        for line in lines)


def _exp_nested_nan(case: Any, lines: list[str]) -> bool:
    """2.4 cannot fill a NaN met in a nested expression: a NullPointerException, sometimes
    not even a JSON answer."""
    return len(json.loads(case.body).get("expressions") or []) > 1 and any(
        "getFillPolicy()" in line or "BadRequestException.getMessage()" in line
        for line in lines)


def _exp_explicit_tags_extra_row(case: Any, lines: list[str]) -> bool:
    """Only a metric's own output differs, and that metric reads an explicitTags filter."""
    body = json.loads(case.body)
    explicit = {f.get("id") for f in body.get("filters") or [] if f.get("explicitTags")}
    metrics = {m.get("id") for m in body.get("metrics") or [] if m.get("filter") in explicit}
    return bool(metrics) and all(
        line.startswith("output ") and line.split()[1].rstrip(":") in metrics for line in lines)


EXP_DEPARTURES = [
    Departure("exp-invalid-body-is-400", "docs/differences.md",
              "Invalid `/api/query/exp` body", _exp_invalid_is_400),
    Departure("exp-parse-error-text", "docs/differences.md",
              "An expression outside the JEXL subset", _exp_parse_error_text),
    Departure("opentsdb-exp-nested-nan", "docs/differences.md",
              "A nested expression yields NaN", _exp_nested_nan),
    Departure("opentsdb-exp-explicit-tags-extra-row", "docs/differences.md",
              "reads one hour row past its scan window", _exp_explicit_tags_extra_row),
]


# ---- /api/query/gexp (tests/differential/test_gexp.py)
SERIES_FUNCTIONS = ("sumSeries", "sum", "diffSeries", "difference", "multiplySeries", "multiply",
                    "divideSeries", "divide")


def _gexp(case: Case, *functions: str) -> bool:
    return case.kind.startswith("gexp") and any(f"{name}%28" in case.path or f"{name}(" in
                                                case.path for name in functions)


# test_gexp.py marks a difference with this when pytsd's answer, every value made absolute,
# agrees with OpenTSDB's
ALIAS_ABS = "OpenTSDB's alias printed absolute values"


DEPARTURES += [
    Departure("gexp-parse-error-is-400", "docs/differences.md",
              "`exp=` that does not parse, unknown function",
              lambda case, lines: case.kind == "gexp-malformed"
              and lines[0].startswith(("status 500 vs 400", "status 0 vs 400"))),
    Departure("gexp-time-shift", "docs/differences.md", "| `timeShift` / `shift` |",
              lambda case, lines: _gexp(case, "shift", "Shift")
              and "unknown time unit=" in lines[0]),
    Departure("gexp-alias-keeps-sign", "docs/differences.md", "`alias` keeps the sign",
              lambda case, lines: _gexp(case, "alias") and lines[0].startswith(ALIAS_ABS)),
    Departure("gexp-alias-with-arithmetic", "docs/differences.md",
              "`alias` with series arithmetic",
              lambda case, lines: _gexp(case, "alias") and lines[0].startswith(
                  ("status 400 vs 200: '-1'", 'status 400 vs 200: "Wrong id.length = 0'))),
    Departure("gexp-series-of-different-lengths", "docs/differences.md",
              "`*Series` functions over series of different lengths",
              lambda case, lines: _gexp(case, *SERIES_FUNCTIONS)
              and lines[0].startswith("status 400 vs 200: 'No more elements'")),
    Departure("gexp-post", "docs/differences.md", "POST to `/api/query/gexp`",
              lambda case, lines: case.kind == "gexp-malformed" and case.method == "POST"
              and lines[0].startswith("message ")),
]
