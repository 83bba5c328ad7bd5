"""``/api/query/gexp`` through a real gunicorn server (the ``live_server`` fixture)."""

from __future__ import annotations

import json

import requests

T0 = 1_600_000_000


def test_gexp_round_trip_and_errors(live_server: str) -> None:
    points = [{"metric": "e2e.gexp", "timestamp": T0 + 60 * i, "value": v, "tags": {"host": h}}
              for h, values in (("a", [1, -2, 3]), ("b", [10, 20, 30.5]))
              for i, v in enumerate(values)]
    put = requests.post(f"{live_server}/api/put?sync", data=json.dumps(points), timeout=30,
                        headers={"Content-Type": "application/json"})
    assert put.status_code == 204, put.text
    params = [("start", T0), ("end", T0 + 120),
              ("exp", "sumSeries(sum:e2e.gexp{host=a},sum:e2e.gexp{host=b})"),
              ("exp", "scale(sum:e2e.gexp{host=*},-2)")]
    answer = requests.get(f"{live_server}/api/query/gexp", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    assert [(s["tags"], s["dps"]) for s in answer.json()] == [
        ({"host": "a"}, {str(T0): 1.0, str(T0 + 60): -2.0, str(T0 + 120): 3.0}),
        ({}, {str(T0): 10.0, str(T0 + 60): 20.0, str(T0 + 120): 30.5}),
        ({"host": "a"}, {str(T0): -2, str(T0 + 60): 4, str(T0 + 120): -6}),
        ({"host": "b"}, {str(T0): -20, str(T0 + 60): -40, str(T0 + 120): -61.0})]
    assert '"1600000120":-61.0' in answer.text  # the float point stays a float
    bad = requests.get(f"{live_server}/api/query/gexp", timeout=30,
                       params={"start": T0, "exp": "scale(sum:e2e.gexp~,2)"})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == "Failed to parse scale(sum:e2e.gexp~,2)"
