"""The seeded query generator: requests over OpenTSDB 2.4's query grammar and its neighbours.

Every request is absolute in time and bounded (a fill policy with no ``end`` would span to now:
OpenTSDB runs out of heap). ``back_scan`` stays small: a huge one overflows OpenTSDB's stack and
takes the TSD down (a declared OpenTSDB bug we do not send).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from tests.differential.data import METRIC_PREFIX, SPAN_S, T0, DataSet

AGGREGATORS = ["sum", "min", "max", "avg", "dev", "count", "zimsum", "mimmin", "mimmax", "none",
               "first", "last", "diff", "mult", "median", "squareSum", "pfsum",
               "p50", "p75", "p90", "p95", "p99", "p999",
               "ep50r3", "ep75r3", "ep90r3", "ep95r3", "ep99r3", "ep999r3",
               "ep50r7", "ep75r7", "ep90r7", "ep95r7", "ep99r7", "ep999r7"]
DS_FUNCTIONS = [a for a in AGGREGATORS if a not in ("none", "mult", "diff")] + ["mult", "diff"]
FILLS = ["", "-none", "-nan", "-null", "-zero"]
INTERVALS = ["1m", "5m", "10m", "15m", "30m", "1h", "2h", "6h", "1d", "0all"]
CALENDAR_INTERVALS = ["1hc", "30mc", "1dc", "2hc", "15mc"]
ZONES = ["UTC", "Asia/Kolkata", "America/New_York", "Europe/Berlin", "Australia/Adelaide"]
FILTER_TYPES = ["literal_or", "iliteral_or", "not_literal_or", "not_iliteral_or", "wildcard",
                "iwildcard", "regexp"]
METRICS = ["int", "float", "mixed", "counter", "ms", "sparse", "big"]
TAG_VALUES = {"host": ["web01", "web02", "web03", "WEB04", "web09"], "dc": ["lga", "sjc", "ams"],
              "env": ["prod", "dev"]}


@dataclass
class Case:
    """One request. ``kind`` names the generator; ``sub`` holds the parsed sub-queries (for the
    departures' predicates)."""

    ident: str
    kind: str
    method: str
    path: str
    body: str | None = None
    sub: list[dict[str, Any]] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.method} {self.path}" + (f" {self.body}" if self.body else "")


class QueryGenerator:
    def __init__(self, seed: int, data: DataSet) -> None:
        self.rng = random.Random(seed)
        self.data = data
        self.count = 0

    # ------------------------------------------------------------------ pieces
    def _ident(self, kind: str) -> str:
        self.count += 1
        return f"{kind}-{self.count}"

    def _range(self) -> tuple[int, int]:
        rng = self.rng
        start = T0 + rng.randrange(-3600, SPAN_S - 600)
        end = min(start + rng.choice([600, 3600, 7200, 4 * 3600, 8 * 3600]), T0 + SPAN_S + 3600)
        if rng.random() < 0.1:  # an empty range, after the data
            start, end = T0 + SPAN_S + 7200, T0 + SPAN_S + 9000
        return start, end

    def _time(self, seconds: int) -> int | str:
        """Seconds, milliseconds, or OpenTSDB's absolute date format."""
        choice = self.rng.random()
        if choice < 0.15:
            return seconds * 1000
        if choice < 0.25:
            import time as _time
            return _time.strftime("%Y/%m/%d-%H:%M:%S", _time.gmtime(seconds))
        return seconds

    def _filter(self) -> dict[str, Any]:
        rng = self.rng
        key = rng.choice(["host", "host", "dc", "env"])
        kind = rng.choice(FILTER_TYPES)
        values = TAG_VALUES[key]
        if kind in ("wildcard", "iwildcard"):
            expr = rng.choice(["*", "web*", "*01", "w*b0*", "WEB*", "*", "l*", "*c"])
        elif kind == "regexp":
            expr = rng.choice(["web0[12]", ".*", "^web", "sjc|lga", "0[34]$", "WEB.*"])
        else:
            picked = rng.sample(values, rng.randrange(1, min(3, len(values)) + 1))
            expr = "|".join(v.upper() if kind.startswith(("i", "not_i")) and rng.random() < 0.3
                            else v for v in picked)
        return {"type": kind, "tagk": key, "filter": expr, "groupBy": rng.random() < 0.5}

    def _downsample(self, calendar: bool) -> str | None:
        rng = self.rng
        if rng.random() < 0.4:
            return None
        interval = rng.choice(CALENDAR_INTERVALS if calendar else INTERVALS)
        return f"{interval}-{rng.choice(DS_FUNCTIONS)}{rng.choice(FILLS)}"

    def _rate(self, sub: dict[str, Any]) -> None:
        rng = self.rng
        if rng.random() < 0.25:
            sub["rate"] = True
            if rng.random() < 0.6:
                options: dict[str, Any] = {"counter": rng.random() < 0.7}
                if rng.random() < 0.5:
                    options["counterMax"] = rng.choice([1000, 5000, 100000])
                if rng.random() < 0.4:
                    options["resetValue"] = rng.choice([1, 100, 500])
                if rng.random() < 0.3:
                    options["dropResets"] = True
                sub["rateOptions"] = options

    def _sub_query(self, calendar: bool) -> dict[str, Any]:
        rng = self.rng
        sub: dict[str, Any] = {"metric": METRIC_PREFIX + rng.choice(METRICS),
                               "aggregator": rng.choice(AGGREGATORS)}
        ds = self._downsample(calendar)
        if ds:
            sub["downsample"] = ds
        self._rate(sub)
        shape = rng.random()
        if shape < 0.45:
            sub["filters"] = [self._filter() for _ in range(rng.choice([1, 1, 1, 2]))]
        elif shape < 0.65:
            key = rng.choice(["host", "dc"])
            value = rng.choice(["*", "web01|web02", "lga", "web0*", "sjc|ams", "web01"]
                               if key == "host" else ["*", "lga", "sjc|lga"])
            sub["tags"] = {key: value}
        if rng.random() < 0.1:
            sub["explicitTags"] = True
        return sub

    # ------------------------------------------------------------------ /api/query
    def query(self) -> Case:
        rng = self.rng
        start, end = self._range()
        if rng.random() < 0.45:
            return self._get_query(start, end)
        calendar = rng.random() < 0.2
        body: dict[str, Any] = {"start": self._time(start), "end": self._time(end),
                                "queries": [self._sub_query(calendar)
                                            for _ in range(rng.choice([1, 1, 1, 2]))],
                                "globalAnnotations": rng.random() < 0.3}
        if calendar:
            body["useCalendar"] = True
            body["timezone"] = rng.choice(ZONES)
        for flag in ("msResolution", "showTSUIDs", "showQuery", "noAnnotations"):
            if rng.random() < 0.2:
                body[flag] = True
        return Case(self._ident("post"), "query", "POST", "/api/query", json.dumps(body),
                    sub=body["queries"], flags=body)

    def _get_query(self, start: int, end: int) -> Case:
        rng = self.rng
        params = [f"start={self._time(start)}", f"end={self._time(end)}"]
        subs = []
        for _ in range(rng.choice([1, 1, 2])):
            sub = self._sub_query(False)
            subs.append(sub)
            params.append("m=" + quote(m_param(sub), safe=":{}=,|*"))
        flags = {}
        for flag in ("ms", "arrays", "show_tsuids", "show_query", "no_annotations",
                     "global_annotations"):
            if rng.random() < 0.15:
                params.append(flag)
                flags[flag] = True
        return Case(self._ident("get"), "query", "GET", "/api/query?" + "&".join(params),
                    sub=subs, flags=flags)

    # ------------------------------------------------------------------ neighbours
    def last(self) -> Case:
        rng = self.rng
        series = rng.choice(self.data.series)
        tags = ",".join(f"{k}={v}" for k, v in series.tags.items())
        if rng.random() < 0.5:
            params = [f"timeseries={series.metric}{{{tags}}}",
                      f"back_scan={rng.choice([0, 1, 24])}"]
            if rng.random() < 0.5:
                params.append("resolve")
            return Case(self._ident("last"), "last", "GET", "/api/query/last?" + "&".join(params))
        body = {"queries": [{"tsuids": [self.data.tsuid(series)]}],
                "resolveNames": rng.random() < 0.5, "backScan": rng.choice([0, 24])}
        return Case(self._ident("last"), "last", "POST", "/api/query/last", json.dumps(body))

    def suggest(self) -> Case:
        rng = self.rng
        kind = rng.choice(["metrics", "tagk", "tagv"])
        q = rng.choice(["", "df.", "df.s", "w", "web0", "h", "d", "zz"])
        params = f"type={kind}&q={q}"
        if rng.random() < 0.5:
            params += f"&max={rng.choice([1, 2, 25])}"
        return Case(self._ident("suggest"), "suggest", "GET", "/api/suggest?" + params)

    def lookup(self) -> Case:
        rng = self.rng
        metric = METRIC_PREFIX + rng.choice(METRICS)
        tags = rng.choice(["", "host=*", "host=web01", "dc=*", "*=web01", "dc=lga,host=*"])
        return Case(self._ident("lookup"), "lookup", "GET",
                    f"/api/search/lookup?m={metric}{{{tags}}}")

    def annotation(self) -> Case:
        rng = self.rng
        note = rng.choice(self.data.annotations)
        params = f"start_time={note['startTime']}"
        if "tsuid" in note:
            params += f"&tsuid={note['tsuid']}"
        return Case(self._ident("annotation"), "annotation", "GET", "/api/annotation?" + params)

    def generate(self, count: int) -> list[Case]:
        makers = [(0.84, self.query), (0.04, self.last), (0.05, self.suggest),
                  (0.04, self.lookup), (0.03, self.annotation)]
        cases = []
        for _ in range(count):
            roll, acc = self.rng.random(), 0.0
            for weight, maker in makers:
                acc += weight
                if roll < acc:
                    cases.append(maker())
                    break
            else:
                cases.append(self.query())
        return cases


def m_param(sub: dict[str, Any]) -> str:
    """The GET ``m=`` form of a JSON sub-query (filters in braces: group-by first)."""
    parts = [sub["aggregator"]]
    if sub.get("rate"):
        options = sub.get("rateOptions") or {}
        if options.get("counter"):
            inner = ["dropcounter" if options.get("dropResets") else "counter"]
            if "counterMax" in options or "resetValue" in options:
                inner.append(str(options.get("counterMax", "")))
            if "resetValue" in options:
                inner.append(str(options["resetValue"]))
            parts.append("rate{" + ",".join(inner) + "}")
        else:
            parts.append("rate")
    if sub.get("downsample"):
        parts.append(sub["downsample"])
    if sub.get("explicitTags"):
        parts.append("explicit_tags")
    text = ":".join(parts) + ":" + sub["metric"]
    grouped = {k: v for k, v in (sub.get("tags") or {}).items()}
    plain = ""
    for f in sub.get("filters", []):
        expr = f"{f['type']}({f['filter']})"
        if f["groupBy"]:
            grouped.setdefault(f["tagk"], expr)
        else:
            plain += ("," if plain else "") + f"{f['tagk']}={expr}"
    group_text = ",".join(f"{k}={v}" for k, v in grouped.items())
    if group_text or plain:
        text += "{" + group_text + "}"
    if plain:
        text += "{" + plain + "}"
    return text


def malformed() -> list[Case]:
    """Fixed malformed requests, compared by status and message."""
    m = METRIC_PREFIX
    gets = [
        "", "start=1357084800", f"m=sum:{m}int", f"start=1357084800&m=nosuch:{m}int",
        "start=1357084800&m=sum:df.nosuchmetric", f"start=1357084800&m=sum:{m}int{{nokey=x}}",
        f"start=1357084800&m=sum:{m}int{{host=nosuchvalue}}",
        f"start=1357084800&end=1357000000&m=sum:{m}int", f"start=1357084800&m=sum:1x-avg:{m}int",
        f"start=1357084800&m=sum:1m-nosuch:{m}int", f"start=1357084800&m=sum:1m-avg-bogus:{m}int",
        f"start=garbage&m=sum:{m}int", f"start=1357084800&end=junk&m=sum:{m}int",
        f"start=1357084800&m=sum:rate{{counter,abc}}:{m}int",
        f"start=1357084800&m=sum:{m}int{{host=foo(bar)}}",
        f"start=1357084800&m=sum:{m}int{{host=regexp([)}}",
        "start=1357084800&m=sum:", f"start=1357084800&m=sum:{m}int{{host}}",
        f"start=1357084800&m=sum:{m}int&tsuid=sum:000001",
        "start=1357084800&tsuid=sum:000001000001000001",
        "start=1357084800&tsuid=sum:ZZZ", "start=1357084800&tsuid=sum:0000010000010000",
        f"start=1357084800&m={m}int", f"start=1h-ago&m=sum:2x-ago:{m}int",
        f"start=1357084800&m=sum:0all-sum-none:{m}int&m=sum:{m}int{{host=*}}",
    ]
    cases = [Case(f"malformed-get-{i}", "malformed", "GET", "/api/query?" + q)
             for i, q in enumerate(gets)]
    posts = [
        "", "{", "[]", '{"start":1357084800}', '{"start":1357084800,"queries":[]}',
        '{"queries":[{"metric":"df.int","aggregator":"sum"}]}',
        '{"start":1357084800,"queries":[{"metric":"df.int"}]}',
        '{"start":1357084800,"queries":[{"aggregator":"sum"}]}',
        '{"start":1357084800,"queries":[{"metric":"df.int","aggregator":"sum",'
        '"filters":[{"type":"nosuch","tagk":"host","filter":"x"}]}]}',
        '{"start":1357084800,"queries":[{"metric":"df.int","aggregator":"sum",'
        '"downsample":"1m-avg-scalar"}]}',
        '{"start":1357084800,"timezone":"Nowhere/City","queries":[{"metric":"df.int",'
        '"aggregator":"sum"}]}',
        '{"start":"x","queries":[{"metric":"df.int","aggregator":"sum"}]}',
    ]
    cases += [Case(f"malformed-post-{i}", "malformed", "POST", "/api/query", body)
              for i, body in enumerate(posts)]
    others = ["/api/query/last", "/api/query/last?timeseries=df.nosuch",
              "/api/query/last?timeseries=df.int{host=nosuch}", "/api/suggest",
              "/api/suggest?type=bogus", "/api/suggest?type=metrics&max=x",
              "/api/search/lookup", "/api/search/lookup?m=df.nosuch",
              "/api/annotation", "/api/annotation?start_time=x",
              "/api/annotation?start_time=1357084800&tsuid=0000FF"]
    cases += [Case(f"malformed-other-{i}", "malformed", "GET", path)
              for i, path in enumerate(others)]
    # Puts that write nothing (every point is bad), so the tables stay the same.
    point = '{"metric":"df.int","timestamp":1357084800,"value":1,"tags":{"host":"web01"}}'
    puts = ["", "{", "[]", point.replace("df.int", "ds x"),
            point.replace("1357084800", "13570848000000"),
            point.replace('"value":1', '"value":"x"'),
            point.replace('{"host":"web01"}', "{}"), point.replace('"df.int"', '""'),
            point.replace('"host"', '"h st"')]
    cases += [Case(f"malformed-put-{i}", "malformed", "POST", "/api/put?details", body)
              for i, body in enumerate(puts)]
    return cases
