"""/api/aggregators, /api/config, /api/config/filters, /api/version, /api/serializers,
/api/stats and /api/dropcaches (spec §4.1, §7.3-7.5; OpenTSDB's RpcManager and StatsRpc)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.conftest import app_over, drop_tables, make_tsdb

# Spec §4.1: the 35 names of Aggregators.set() in 2.4.0/2.4.1.
OPENTSDB_AGGREGATORS = {
    "sum", "min", "max", "avg", "none", "median", "mult", "dev", "diff", "count", "zimsum",
    "mimmin", "mimmax", "first", "last", "pfsum", "squareSum", "p999", "p99", "p95", "p90", "p75",
    "p50", "ep999r3", "ep99r3", "ep95r3", "ep90r3", "ep75r3", "ep50r3", "ep999r7", "ep99r7",
    "ep95r7", "ep90r7", "ep75r7", "ep50r7"}
# Spec §7.3: the 7 filters 2.4.1 registers (pytsd adds not_key, which the docs promise).
OPENTSDB_FILTERS = {"literal_or", "iliteral_or", "not_literal_or", "not_iliteral_or", "regexp",
                    "wildcard", "iwildcard"}
LITERAL_OR_EXAMPLES = ('host=literal_or(web01),  host=literal_or(web01|web02|web03)  '
                       '{"type":"literal_or","tagk":"host","filter":"web01|web02|web03",'
                       '"groupBy":false}')
VERSION_KEYS = {"version", "short_revision", "full_revision", "timestamp", "repo_status", "user",
                "host", "repo", "branch"}


def ok(response: Any) -> Any:
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    return response.get_json()


def test_aggregators(client: FlaskClient) -> None:
    names = ok(client.get("/api/aggregators"))
    assert set(names) == OPENTSDB_AGGREGATORS
    assert names == sorted(names)  # what Grafana's browser path does with it anyway
    assert ok(client.post("/api/aggregators")) == names
    assert client.put("/api/aggregators").status_code == 405


def test_config_filters(client: FlaskClient) -> None:
    filters = ok(client.get("/api/config/filters"))
    assert OPENTSDB_FILTERS <= set(filters) <= OPENTSDB_FILTERS | {"not_key"}
    for body in filters.values():
        assert set(body) == {"examples", "description"}
        assert body["examples"] and body["description"]
    assert filters["literal_or"]["examples"] == LITERAL_OR_EXAMPLES
    assert ok(client.post("/api/config/filters")) == filters


@pytest.fixture
def secret_client(tsd_config: dict[str, Any]) -> Iterator[FlaskClient]:
    tsdb = make_tsdb({**tsd_config, "tsd.storage.hbase.kerberos.password": "s3cret",
                      "tsd.custom.PASSPHRASE": "also secret", "tsd.custom.plain": "shown"})
    app = app_over(tsdb)
    yield app.test_client()
    drop_tables(tsdb)


def test_config_masks_secrets(secret_client: FlaskClient) -> None:
    config = ok(secret_client.get("/api/config"))
    assert list(config) == sorted(config)
    assert all(isinstance(value, str) for value in config.values())
    # Keys containing "PASS" are masked (HttpJsonSerializer#formatConfigV1).
    assert config["tsd.storage.hbase.kerberos.password"] == "********"
    assert config["tsd.custom.PASSPHRASE"] == "********"
    assert config["tsd.custom.plain"] == "shown"
    assert config["tsd.storage.salt.width"] == "0"
    assert config["tsd.core.auto_create_metrics"] == "true"
    assert config["tsd.search.lookup.default_limit"] == "25"


def test_version(client: FlaskClient) -> None:
    version = ok(client.get("/api/version"))
    assert VERSION_KEYS <= set(version)
    assert all(isinstance(value, str) for value in version.values())
    assert version["version"].startswith("2.4")
    assert ok(client.post("/api/v1/version")) == version


def test_serializers(client: FlaskClient) -> None:
    [json_serializer] = ok(client.get("/api/serializers"))
    assert json_serializer["serializer"] == "json"
    assert json_serializer["response_content_type"] == "application/json; charset=UTF-8"
    assert "SuggestV1" in json_serializer["formatters"]
    assert "PutV1" in json_serializer["parsers"]


def stats(client: FlaskClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], str]:
    """``/api/stats`` as {(metric, tags without host): value}."""
    body = ok(client.get("/api/stats"))
    out = {}
    for point in body:
        assert set(point) == {"metric", "timestamp", "value", "tags"}
        assert isinstance(point["value"], str) and isinstance(point["timestamp"], int)
        tags = dict(point["tags"])
        assert tags.pop("host")
        out[(point["metric"], tuple(sorted(tags.items())))] = point["value"]
    return out


def test_stats_counts_requests_points_and_uids(client: FlaskClient) -> None:
    before = stats(client)
    points = [{"metric": m, "timestamp": 1356998400, "value": 1, "tags": {"host": "web01"}}
              for m in ("a.one", "a.two", "a.three")]
    assert client.post("/api/put", json=points).status_code == 204
    assert client.get("/api/suggest?type=nope").status_code == 400
    after = stats(client)
    # Counters are per process: compare differences, the figures of other tests are in there.
    added = ("tsd.datapoints.added", (("type", "all"),))
    assert int(after[added]) - int(before.get(added, "0")) == 3
    bad_suggest = ("tsd.http.requests", (("endpoint", "/api/suggest"), ("status", "400")))
    assert int(after[bad_suggest]) - int(before.get(bad_suggest, "0")) == 1
    # This store's UID table: three metrics, one tagk, one tagv assigned.
    assert after[("tsd.uid.ids-used", (("kind", "metrics"),))] == "3"
    assert after[("tsd.uid.ids-used", (("kind", "tagv"),))] == "1"
    assert after[("tsd.uid.ids-available", (("kind", "tagk"),))] == str(2**24 - 1 - 1)
    # ... each by this process (its TSDB is this test's), none burned by a lost race
    assert after[("tsd.uid.ids-created", (("kind", "metrics"),))] == "3"
    assert after[("tsd.uid.ids-burned", (("kind", "metrics"),))] == "0"
    assert ("tsd.http.latency_95pct", (("type", "all"),)) in after


def test_stats_cache_hits(client: FlaskClient) -> None:
    point = {"metric": "a.one", "timestamp": 1356998400, "value": 1, "tags": {"host": "web01"}}
    client.post("/api/put", json=point)
    key = ("tsd.uid.cache-hit", (("kind", "metrics"),))
    before = int(stats(client)[key])
    assert client.get("/api/search/lookup?m=a.one").status_code == 200
    assert int(stats(client)[key]) > before


def test_dropcaches(client: FlaskClient) -> None:
    client.post("/api/put", json={"metric": "a.one", "timestamp": 1356998400, "value": 1,
                                  "tags": {"host": "web01"}})
    assert int(stats(client)[("tsd.uid.cache-size", (("kind", "metrics"),))]) > 0
    assert ok(client.get("/api/dropcaches")) == {"message": "Caches dropped", "status": "200"}
    assert stats(client)[("tsd.uid.cache-size", (("kind", "metrics"),))] == "0"
    assert ok(client.delete("/api/dropcaches"))["message"] == "Caches dropped"
    assert client.post("/api/dropcaches").status_code == 405
    # The caches refill from storage: names still resolve.
    assert ok(client.get("/api/suggest?type=metrics")) == ["a.one"]
    assert client.post("/api/put", json={"metric": "a.one", "timestamp": 1356998410,
                                         "value": 2, "tags": {"host": "web01"}}
                       ).status_code == 204


def test_unknown_endpoint(client: FlaskClient) -> None:
    response = client.get("/api/nothing")
    assert response.status_code == 404
    assert response.get_json() == {"error": {"code": 404, "message": "Endpoint not found"}}


@pytest.mark.parametrize(("path", "status", "message"), [
    ("/api/v2/query", 501, "Requested API version is greater than the max implemented"),
    ("/api/v9/", 501, "Requested API version is greater than the max implemented"),
    # Only "v" then a digit is a version (HttpQuery.getQueryBaseRoute): "vx" is an endpoint.
    ("/api/vx/query", 404, "Endpoint not found"),
    ("/api/v1x/query", 400, "Invalid API version format supplied"),
])
def test_other_api_versions(client: FlaskClient, path: str, status: int, message: str) -> None:
    response = client.get(path)
    assert response.status_code == status
    assert response.get_json()["error"]["message"] == message


def test_api_v1_is_the_same_api(client: FlaskClient) -> None:
    assert client.get("/api/v1/aggregators").get_json() == client.get(
        "/api/aggregators").get_json()


def test_stats_report_the_stores_bytes_per_point(client: FlaskClient, backend: str) -> None:
    points = [{"metric": "a.one", "timestamp": 1356998400 + i, "value": i,
               "tags": {"host": "web01"}} for i in range(4)]
    assert client.post("/api/put", json=points).status_code == 204
    after = stats(client)
    if backend != "sqlite":  # HBase reports its own disk use
        assert ("tsd.storage.points", (("type", "embedded"),)) not in after
        return
    assert after[("tsd.storage.points", (("type", "embedded"),))] == "4"
    file_bytes = int(after[("tsd.storage.file_bytes", (("type", "embedded"),))])
    per_point = float(after[("tsd.storage.bytes_per_point", (("kind", "file"),))])
    assert file_bytes > 0 and per_point == pytest.approx(file_bytes / 4, rel=1e-3)
