"""A rollup configuration shared by the rollup tests (2.4's JSON layout)."""

from __future__ import annotations

import json

# Raw data is the default interval; 1m rows span an hour, 10m and 1h rows a day.
ROLLUP_CONFIG = {
    "aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
    "intervals": [
        {"table": "tsdb", "preAggregationTable": "tsdb-preagg", "interval": "1s",
         "rowSpan": "1h", "defaultInterval": True},
        {"table": "tsdb-rollup-1m", "preAggregationTable": "tsdb-rollup-agg-1m",
         "interval": "1m", "rowSpan": "1h"},
        {"table": "tsdb-rollup-10m", "preAggregationTable": "tsdb-rollup-agg-10m",
         "interval": "10m", "rowSpan": "1d"},
        {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-rollup-agg-1h",
         "interval": "1h", "rowSpan": "1d"},
    ],
}
ROLLUP_SETTINGS = {"tsd.rollups.enable": "true", "tsd.rollups.config": json.dumps(ROLLUP_CONFIG)}
