"""The HTTP requests Grafana's OpenTSDB datasource sends, rebuilt from a dashboard's JSON.

A model of Grafana's code, not of pytsd's, following shared/notes/grafana-opentsdb-contract.md:

* path L (browser, Grafana <= 12.3 and 12.4+ with ``opentsdbBackendMigration`` off):
  FE/datasource.ts ``performTimeSeriesQuery`` / ``convertTargetToQuery`` /
  ``interpolateVariablesInQuery`` (contract §1.2), ``metricFindQuery`` (§1.3), annotations (§1.7);
* path B (Go backend, 12.4+ and the standalone plugin): BE/utils.go ``BuildMetric`` /
  ``CreateRequest`` (§3) and BE/callresource.go (§1.3).

Every function returns the request exactly as pytsd would receive it: a path with its raw query
string and, for POSTs, the body text. Nothing here imports pytsd.
"""

from __future__ import annotations

import copy
import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

# Grafana's variable syntaxes: $name, ${name} / ${name:format}, [[name]].
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]")
# metricFindQuery's regexes, in the order it tries them (contract §1.3).
_FIND_QUERIES = (
    ("metrics", re.compile(r"metrics\((.*)\)")),
    ("tag_names", re.compile(r"tag_names\((.*)\)")),
    ("tag_values", re.compile(r"tag_values\((.*?),\s?(.*)\)")),
    ("suggest_tagk", re.compile(r"suggest_tagk\((.*)\)")),
    ("suggest_tagv", re.compile(r"suggest_tagv\((.*)\)")),
)


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    body: str | None = None


@dataclass(frozen=True)
class Settings:
    """The provisioned ``jsonData`` (contract §4)."""

    tsdb_version: int
    tsdb_resolution: int
    lookup_limit: int


def interpolate(text: str, variables: dict[str, list[str]], fmt: str) -> str:
    """``templateSrv.replace`` for the formats the datasource uses; unknown names stay."""

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        if name not in variables:
            return match.group(0)
        values = variables[name]
        if fmt == "pipe":
            return "|".join(values)
        if fmt == "distributed":  # `k=$v` -> `k=a,k=b` (the first value keeps the text's `k=`)
            return ",".join(v if i == 0 else f"{name}={v}" for i, v in enumerate(values))
        return values[0] if len(values) == 1 else "{" + ",".join(values) + "}"  # glob

    return _VARIABLE.sub(value, text)


def interpolate_target(target: dict[str, Any], variables: dict[str, list[str]]) -> dict[str, Any]:
    """FE ``interpolateVariablesInQuery``: a deep clone of the whole target, interpolated."""
    query = copy.deepcopy(target)
    query["metric"] = interpolate(target.get("metric", ""), variables, "pipe")
    query["aggregator"] = interpolate(target["aggregator"], variables, "glob") \
        if target.get("aggregator") else "avg"
    if query.get("filters"):
        for flt in query["filters"]:
            flt["tagk"] = interpolate(flt["tagk"], variables, "pipe")
            flt["filter"] = interpolate(flt["filter"], variables, "pipe")
    elif query.get("tags"):
        query["tags"] = {k: interpolate(v, variables, "pipe") for k, v in query["tags"].items()}
    for key in ("downsampleInterval", "alias", "downsampleAggregator", "downsampleFillPolicy",
                "counterMax", "counterResetValue"):
        if target.get(key):
            query[key] = interpolate(target[key], variables, "glob")
    return query


# ---------------------------------------------------------------- path L: the browser
def _js_parse_int(text: str) -> int | None:
    """JavaScript ``parseInt(text, 10)``; ``None`` stands for NaN (serialized as null)."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else None


def legacy_sub_query(target: dict[str, Any], variables: dict[str, list[str]],
                     interval: str, settings: Settings) -> dict[str, Any] | None:
    """FE ``convertTargetToQuery`` (since PR #71232: the cloned target plus OpenTSDB keys)."""
    if not target.get("metric") or target.get("hide"):
        return None
    query = interpolate_target(target, variables)
    if target.get("shouldComputeRate"):
        query["rate"] = True
        options: dict[str, Any] = {"counter": bool(target.get("isCounter"))}
        if target.get("counterMax"):
            options["counterMax"] = _js_parse_int(target["counterMax"])
        if target.get("counterResetValue"):
            options["resetValue"] = _js_parse_int(target["counterResetValue"])
        if settings.tsdb_version >= 2:
            # The JS reads a misspelled `ResetValue`, so this reduces to !counterMax (§1.2).
            options["dropResets"] = not options.get("counterMax")
        query["rateOptions"] = options
    if not target.get("disableDownsampling"):
        ds_interval = interpolate(target.get("downsampleInterval") or interval, variables, "glob")
        if re.search(r"\.[0-9]+s", ds_interval):
            ds_interval = f"{float(ds_interval.rstrip('s')) * 1000:g}ms"
        # JS string concatenation: a missing aggregator becomes the text "undefined".
        downsample = f"{ds_interval}-{target.get('downsampleAggregator', 'undefined')}"
        fill = target.get("downsampleFillPolicy")
        if fill and fill != "none":
            downsample += f"-{fill}"
        query["downsample"] = downsample
    if target.get("explicitTags"):
        query["explicitTags"] = True
    return query


def legacy_query(queries: list[dict[str, Any]], start_ms: int, end_ms: int | None,
                 settings: Settings) -> Request:
    """FE ``performTimeSeriesQuery``: one POST for the whole panel, keys in this order."""
    body: dict[str, Any] = {"start": start_ms, "queries": queries,
                            "msResolution": settings.tsdb_resolution == 2,
                            "globalAnnotations": True}
    if settings.tsdb_version == 3:
        body["showQuery"] = True
    if end_ms is not None:  # omitted when the range ends at `now`
        body["end"] = end_ms
    return Request("POST", "/api/query", json.dumps(body, separators=(",", ":")))


def legacy_panel_request(targets: list[dict[str, Any]], variables: dict[str, list[str]],
                         interval: str, start_ms: int, settings: Settings) -> Request | None:
    """The one POST a panel refresh sends on path L, or None when no target has a metric."""
    queries = [q for t in targets
               if (q := legacy_sub_query(t, variables, interval, settings)) is not None]
    return legacy_query(queries, start_ms, None, settings) if queries else None


def legacy_annotation_request(metric: str, start_ms: int, settings: Settings) -> Request:
    """FE ``annotationEvent`` (legacy branch): sum over the metric, no downsample."""
    return legacy_query([{"aggregator": "sum", "metric": metric}], start_ms, None, settings)


def browser_query_string(params: list[tuple[str, Any]]) -> str:
    """@grafana/data ``toUrlParams``: encodeURIComponent, then Angular's re-allowed characters
    (``@ : $ , ;``), spaces as ``+``, and ``! ' ( ) *`` percent-encoded."""
    def encode(value: Any) -> str:
        return urllib.parse.quote(str(value), safe="-_.~@:$,; ").replace(" ", "+")
    return "&".join(f"{encode(k)}={encode(v)}" for k, v in params)


# ---------------------------------------------------------------- path B: the Go backend
def format_downsample_interval(interval_ms: int) -> str:
    """BE ``FormatDownsampleInterval``: the largest whole unit, truncating (90 s -> ``1m``)."""
    seconds = interval_ms // 1000
    if seconds < 60:
        return f"{seconds}s" if seconds >= 1 else f"{interval_ms}ms"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 24 else f"{hours // 24}d"


def _go_float(text: str) -> float | int | None:
    """``strconv.ParseFloat`` then ``json.Marshal``: integral floats print without ``.0``."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def _backend_rate_options(model: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"counter": bool(model.get("isCounter"))}
    counter_max = _go_float(model["counterMax"]) if model.get("counterMax") else None
    reset_value = _go_float(model["counterResetValue"]) if model.get("counterResetValue") else None
    if counter_max is not None:
        options["counterMax"] = counter_max
    if reset_value is not None:
        options["resetValue"] = reset_value
    if counter_max is None and not reset_value:
        options["dropResets"] = True  # never sent as false
    return options


def backend_metric(model: dict[str, Any], interval_ms: int) -> dict[str, Any]:
    """BE ``BuildMetric`` over an already interpolated query model (§3)."""
    metric: dict[str, Any] = {"metric": model.get("metric", ""),
                              "aggregator": model.get("aggregator", "")}
    if not model.get("disableDownsampling"):
        ds_interval = model.get("downsampleInterval", "")
        if not ds_interval:
            ds_interval = format_downsample_interval(interval_ms) if interval_ms > 0 else "1m"
        elif "." in ds_interval and ds_interval.endswith("s"):
            ds_interval = f"{int(float(ds_interval[:-1]) * 1000)}ms"
        downsample = f"{ds_interval}-{model.get('downsampleAggregator', '')}"
        fill = model.get("downsampleFillPolicy", "")
        metric["downsample"] = downsample + (f"-{fill}" if fill not in ("", "none") else "")
    if model.get("shouldComputeRate"):
        metric["rate"] = True
        metric["rateOptions"] = _backend_rate_options(model)
    if model.get("tags"):
        metric["tags"] = model["tags"]
    if model.get("filters"):
        metric["filters"] = model["filters"]
    if model.get("explicitTags"):
        metric["explicitTags"] = True
    return metric


def backend_query(metric: dict[str, Any], start_s: int, end_s: int, settings: Settings) -> Request:
    """BE ``QueryData`` + ``CreateRequest``: one POST per refId, Go map keys sorted."""
    queries = json.dumps(metric, sort_keys=True, separators=(",", ":"))
    body = f'{{"start":{start_s},"end":{end_s},"queries":[{queries}]}}'
    url = "/api/query?arrays=true" if settings.tsdb_version == 4 else "/api/query"
    return Request("POST", url, body)


def backend_panel_requests(targets: list[dict[str, Any]], variables: dict[str, list[str]],
                           interval_ms: int, start_s: int, end_s: int,
                           settings: Settings) -> list[Request]:
    """The POSTs a panel refresh causes on path B, one per visible target with a metric."""
    return [backend_query(backend_metric(interpolate_target(t, variables), interval_ms),
                          start_s, end_s, settings)
            for t in targets if t.get("metric") and not t.get("hide")]


def backend_annotation_request(metric: str, start_s: int, end_s: int,
                               settings: Settings) -> Request:
    """FE ``annotationEvent`` (backend branch) -> BuildMetric with downsampling disabled."""
    model = {"metric": metric, "aggregator": "sum", "disableDownsampling": True,
             "fromAnnotations": True}
    return backend_query(backend_metric(model, 0), start_s, end_s, settings)


def go_query_string(params: dict[str, Any]) -> str:
    """Go ``url.Values.Encode``: keys sorted, QueryEscape (spaces as ``+``)."""
    return urllib.parse.urlencode(sorted((k, str(v)) for k, v in params.items()))


# ---------------------------------------------------------------- variables (metricFindQuery)
def find_query_requests(query: str, variables: dict[str, list[str]],
                        settings: Settings) -> dict[str, Request]:
    """The request a variable query sends on each path, keyed "L" and "B" (contract §1.3)."""
    text = interpolate(query, variables, "distributed")
    for name, regex in _FIND_QUERIES:
        match = regex.search(text)
        if match:
            return _find_requests(name, match.groups(), settings)
    raise ValueError(f"not an OpenTSDB variable query: {query!r}")


def _lookup_m(metric: str, keys: str) -> str:
    key, *rest = [k.strip() for k in keys.split(",")]
    return f"{metric}{{{','.join([f'{key}=*', *rest])}}}"


def _find_requests(name: str, args: tuple[str, ...], settings: Settings) -> dict[str, Request]:
    limit = settings.lookup_limit
    if name == "tag_values":
        m = _lookup_m(*args)
        return {"L": Request("GET", "/api/search/lookup?"
                             + browser_query_string([("m", m), ("limit", limit)])),
                "B": Request("GET", "/api/search/lookup?"
                             + go_query_string({"m": m, "limit": limit}))}
    if name == "tag_names":
        return {"L": Request("GET", "/api/search/lookup?"
                             + browser_query_string([("m", args[0]), ("limit", 1000)])),
                "B": Request("GET", "/api/search/lookup?"
                             + go_query_string({"m": args[0], "limit": 1000}))}
    kind = {"metrics": "metrics", "suggest_tagk": "tagk", "suggest_tagv": "tagv"}[name]
    # Path B forwards the browser's query string verbatim (BE HandleSuggestQuery).
    url = "/api/suggest?" + browser_query_string([("type", kind), ("q", args[0]), ("max", limit)])
    return {"L": Request("GET", url), "B": Request("GET", url)}


def find_query_values(name_key: str | None, body: Any, path: str) -> list[str]:
    """What Grafana makes of a lookup response: L dedupes in order, B dedupes and sorts."""
    if name_key is None:  # suggest: the array is used as is
        return list(body)
    seen: list[str] = []
    for result in body["results"]:
        value = result["tags"].get(name_key)
        if (value is not None or path == "L") and value not in seen:
            seen.append(value)
    return sorted(seen) if path == "B" else seen


def variable_tag_key(query: str) -> str | None:
    """The tag key whose values a ``tag_values(...)`` query returns, else None."""
    match = _FIND_QUERIES[2][1].search(query)
    return match.group(2).split(",")[0].strip() if match else None
