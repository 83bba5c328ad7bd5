"""?jsonp=fn wraps JSON answers, errors included (TestHttpJsonSerializer#formatSuggestV1JSONP)."""

from __future__ import annotations

from flask.testing import FlaskClient


def test_jsonp_wraps_a_normal_answer(client: FlaskClient) -> None:
    response = client.get("/api/aggregators?jsonp=cb")
    assert response.status_code == 200
    assert response.mimetype == "application/javascript"
    text = response.get_data(as_text=True)
    assert text.startswith('cb(["') and text.endswith("])")


def test_jsonp_wraps_errors_and_query_results(client: FlaskClient) -> None:
    error = client.get("/api/query?start=1h-ago&m=sum:nope&jsonp=handle.it")
    assert error.status_code == 400
    assert error.get_data(as_text=True).startswith('handle.it({"error":{"code":400')
    client.post("/api/put", json={"metric": "m", "timestamp": 1346846400, "value": 1,
                                  "tags": {"a": "b"}})
    ok = client.get("/api/query?start=1346846400&end=1346846500&m=sum:m&jsonp=f")
    assert ok.get_data(as_text=True) == 'f([{"metric":"m","tags":{"a":"b"},' \
                                       '"aggregateTags":[],"dps":{"1346846400":1}}])'


def test_a_callback_that_is_not_an_identifier_is_ignored(client: FlaskClient) -> None:
    response = client.get("/api/aggregators?jsonp=alert(1)//")
    assert response.mimetype == "application/json"
