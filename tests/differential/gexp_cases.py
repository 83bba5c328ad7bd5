"""The data and requests of the ``/api/query/gexp`` differential test (``test_gexp.py``).

Every series has a point each minute over two hours (integers, floats, and a series mixing
both; negative values too), so the functions that pair points (``*Series``, ``highest*``)
see the same timestamps in every series: OpenTSDB 2.4.1 pairs points by position and
interpolates, pytsd by timestamp, and on aligned series both agree.
"""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import quote

from tests.differential.data import DataSet, Series
from tests.differential.queries import Case

T0 = 1357084800
POINTS_PER_SERIES = 121  # one a minute, T0 .. T0 + 2 h
SERIES_OPS = ("sumSeries", "sum", "diffSeries", "difference", "multiplySeries", "multiply",
              "divideSeries", "divide")
SINGLE = ("scale", "absolute", "alias", "movingAverage", "highestCurrent", "highestMax",
          "timeShift", "shift")
SHIFT_WEIGHT = 0.3
PARAMS = {
    "scale": ["2", "-3", "0.5", "1.25", "0", "10", "-0.5"],
    "movingAverage": ["1", "2", "3", "5", "'2min'", "'5min'", "'10m'", "'1h'"],
    "highestCurrent": ["1", "2", "3", "10"],
    "highestMax": ["1", "2", "3", "10"],
    "alias": ["x", "cpu.@host", "@host.@dc", "m-@dc"],
    "timeShift": ["'1min'", "'2hr'", "'1day'"],
    "shift": ["'5min'"],
}
TAGS = ["{host=*}", "{dc=*}", "{host=*,dc=*}", "{host=web01}", "{dc=lga}",
        "{host=web01|web02}", ""]
METRICS = ["gx.int", "gx.float", "gx.mixed"]
DOWNSAMPLES = ["", "1m-avg", "5m-avg", "5m-sum-zero", "10m-max-nan", "10m-min", "5m-avg-nan"]

MALFORMED = [
    "foo(sum:gx.int)", "scale(sum:gx.int,2", "scale()", "sum:gx.int", " ",
    "scale(sum:gx.int{host=*}{dc=*},2)", "scale(sum:1m-avg:rate:gx.int:x,2)",
    "scale(sum:gx.int)", "scale(sum:gx.int,x)", "scale(sum:gx.int,1.2.3)",
    "scale(2,sum:gx.int)", "movingAverage(3,sum:gx.int)", "sumSeries(sum:gx.int)",
    "sumSeries(sum:gx.nope,sum:gx.int)", "absolute(sum:gx.int{host=nope})",
    "absolute(sum:gx.int{nope=web01})", "scale(nope:gx.int,2)",
    "movingAverage(sum:gx.int,0)", "movingAverage(sum:gx.int,'5y')",
    "movingAverage(sum:gx.int,'min')", "movingAverage(sum:gx.int,abc)",
    "highestMax(sum:gx.int{host=*},0)", "highestCurrent(sum:gx.int,x)", "alias(sum:gx.int)",
    "timeShift(sum:gx.int,1)", "timeShift(sum:gx.int,'x')", "timeShift(sum:gx.int)",
    "timeShift(sum:gx.int,'0min')", "scale(sum:gx.int,2) trailing text is ignored",
]


def data_set(seed: int) -> DataSet:
    rng = random.Random(seed)
    shapes = [("gx.int", {"host": h, "dc": dc})
              for h, dc in (("web01", "lga"), ("web02", "lga"), ("web03", "sjc"), ("web01", "sjc"))]
    shapes += [("gx.float", {"host": h, "dc": dc})
               for h, dc in (("web01", "lga"), ("web02", "lga"), ("web04", "sjc"))]
    shapes += [("gx.mixed", {"host": "web01"}), ("gx.mixed", {"host": "web02"})]
    series = [Series(metric, tags, metric.split(".")[1]) for metric, tags in shapes]
    points = []
    for s in series:
        for i in range(POINTS_PER_SERIES):
            if s.kind == "int" or (s.kind == "mixed" and i % 2):
                value: int | float = rng.randrange(-100, 1000)
            else:
                value = round(rng.uniform(-50, 500), 3)
            points.append({"metric": s.metric, "timestamp": T0 + 60 * i, "value": value,
                           "tags": dict(s.tags)})
    return DataSet(series, points)


class GexpGenerator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.count = 0

    def leaf(self, used: set[str], downsample: str | None = None) -> str:
        """A metric sub-query not used yet in this request (OpenTSDB 2.4.1 mixes up the
        results of repeated sub-queries)."""
        rng = self.rng
        while True:
            aggregator = rng.choice(["sum", "avg", "max", "min", "zimsum"])
            chosen = rng.choice(DOWNSAMPLES) if downsample is None else downsample
            middle = f"{chosen}:" if chosen else ""
            text = f"{aggregator}:{middle}{rng.choice(METRICS)}{rng.choice(TAGS)}"
            if text not in used:
                used.add(text)
                return text

    def single(self, name: str, inner: str) -> str:
        return f"{name}({inner},{self.rng.choice(PARAMS[name])})" if name in PARAMS \
            else f"{name}({inner})"

    def expression(self, used: set[str], depth: int = 0, downsample: str | None = None,
                   inside_single: bool = False) -> str:
        """Series arithmetic mostly over leaves with one downsampler (the same timestamps:
        OpenTSDB fails on series of different lengths), sometimes over any. No ``alias``
        inside a one-series function: OpenTSDB's alias changes values (docs/differences.md),
        which would change what the outer function computes."""
        rng = self.rng
        nested = depth == 0 and rng.random() < 0.25
        if rng.random() < 0.45:
            name = rng.choice(SERIES_OPS)
            if downsample is None and rng.random() < 0.85:
                downsample = rng.choice(DOWNSAMPLES)
            args = [self.expression(used, depth + 1, downsample) if nested and i == 0
                    else self.leaf(used, downsample) for i in range(rng.choice([2, 2, 3]))]
            return f"{name}({','.join(args)})"
        inner = self.expression(used, depth + 1, downsample, inside_single=True) if nested \
            else self.leaf(used, downsample)
        choices = [f for f in SINGLE if f != "alias"] if inside_single else list(SINGLE)
        # OpenTSDB fails every timeShift (docs/differences.md): fewer of them
        weights = [SHIFT_WEIGHT if "hift" in f else 1.0 for f in choices]
        return self.single(rng.choices(choices, weights)[0], inner)

    def case(self) -> Case:
        rng = self.rng
        self.count += 1
        used: set[str] = set()
        exps = [self.expression(used) for _ in range(rng.choice([1, 1, 1, 2]))]
        start = T0 + 60 * rng.randrange(0, 60)
        end = min(start + rng.choice([600, 1800, 3600, 5400]), T0 + 7200)
        flags = [flag for flag, p in (("ms", 0.1), ("arrays", 0.1), ("show_tsuids", 0.1))
                 if rng.random() < p]
        return Case(f"gexp-{self.count}", "gexp", "GET", _path(start, end, exps, flags))

    def generate(self, count: int) -> list[Case]:
        return [self.case() for _ in range(count)]


def _path(start: int | None, end: int | None, exps: list[str], flags: list[str]) -> str:
    params = [] if start is None else [f"start={start}"]
    params += [] if end is None else [f"end={end}"]
    params += [f"exp={quote(e, safe='')}" for e in exps] + flags
    return "/api/query/gexp?" + "&".join(params)


def malformed() -> list[Case]:
    cases = [Case(f"gexp-malformed-{i}", "gexp-malformed", "GET",
                  _path(T0, T0 + 3600, [exp], []))
             for i, exp in enumerate(MALFORMED)]
    cases.append(Case("gexp-malformed-no-start", "gexp-malformed", "GET",
                      _path(None, None, ["absolute(sum:gx.int)"], [])))
    cases.append(Case("gexp-malformed-no-exp", "gexp-malformed", "GET", _path(T0, None, [], [])))
    cases.append(Case("gexp-malformed-lexical", "gexp-malformed", "GET",
                      _path(T0, None, ["scale(sum:gx.int~,2)"], [])))
    body: Any = '{"start":1357084800,"queries":[{"metric":"gx.int","aggregator":"sum"}]}'
    cases.append(Case("gexp-malformed-post", "gexp-malformed", "POST", "/api/query/gexp", body))
    return cases
