"""The plugin system end to end: a third-party package found through its entry point, and the
built-in UID filter and publishers, each through /api/put like a client would use them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from app import create_app
from app.config import load_config
from app.errors import TsdbError
from plugin import hookimpl
from plugin.manager import PluginHost, PluginLoadError
from tests.functional.plugin.conftest import NOW_S

EXAMPLE = '''
"""A third party's pytsd plugin: a write filter, a publisher and two HTTP endpoints."""
from flask import jsonify
from plugin import Route, hookimpl

SEEN = []


class Example:
    def __init__(self):
        self.prefix = "blocked."

    @hookimpl
    def pytsd_configure(self, config):
        self.prefix = config.get("tsd.custom.example.blocked_prefix") or self.prefix

    @hookimpl
    def pytsd_allow_data_point(self, point):
        if point.metric.startswith(self.prefix):
            return f"Refused by the example filter: {point.metric}"
        if point.metric == "explode":
            raise RuntimeError("a bug in the plugin")
        return None

    @hookimpl
    def pytsd_publish_points(self, points):
        SEEN.extend(p.metric for p in points)

    @hookimpl
    def pytsd_http_routes(self):
        return [Route("example/seen", lambda: jsonify(SEEN)),
                Route("example/boom", boom, methods=["POST"], role="write")]


def boom():
    raise ValueError("the plugin's view failed")


plugin = Example()
'''


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway package with a ``pytsd.plugins`` entry point, pip-installed into a folder."""
    source = tmp_path_factory.mktemp("example-src")
    (source / "tsd_example_plugin.py").write_text(EXAMPLE)
    (source / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "tsd-example-plugin"
        version = "0.1"
        [project.entry-points."pytsd.plugins"]
        example = "tsd_example_plugin:plugin"
        [tool.setuptools]
        py-modules = ["tsd_example_plugin"]
    '''))
    target = tmp_path_factory.mktemp("example-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(target), str(source)],
                   check=True, capture_output=True, timeout=300)
    return target


def put(client: FlaskClient, *points: dict[str, Any], **headers: str) -> Any:
    response = client.post("/api/put?details", json=list(points), headers=headers)
    return response.get_json()


def point(metric: str, host: str = "a", offset_s: int = 0) -> dict[str, Any]:
    return {"metric": metric, "timestamp": NOW_S + offset_s, "value": 1, "tags": {"host": host}}


def test_third_party_plugin_is_discovered_and_runs(
        make_client: Callable[[dict[str, Any]], FlaskClient], installed_example: Path) -> None:
    client = make_client({"tsd.core.plugin_path": str(installed_example),
                          "tsd.timeseriesfilter.enable": True,
                          "tsd.timeseriesfilter.plugin": "example",
                          "tsd.rtpublisher.enable": True, "tsd.rtpublisher.plugin": "example",
                          "tsd.http.rpc.plugins": "example",
                          "tsd.custom.example.blocked_prefix": "spam."})
    result = put(client, point("sys.cpu"), point("spam.x"), point("explode"))
    assert result["success"] == 1
    errors = {e["datapoint"]["metric"]: e["error"] for e in result["errors"]}
    assert errors == {"spam.x": "Refused by the example filter: spam.x",
                      "explode": "Plugin example failed; see the TSD logs"}
    seen = client.get("/plugin/example/seen").get_json()  # the module's list: one process
    assert "sys.cpu" in seen and "spam.x" not in seen and "explode" not in seen
    boom = client.post("/plugin/example/boom", json={})
    assert boom.status_code == 500
    assert boom.get_json()["error"]["message"] == "the plugin's view failed"
    stats = {(s["metric"], s["tags"].get("type")): s["value"]
             for s in client.get("/api/stats").get_json()}
    assert stats[("tsd.plugin.errors", "all")] == "1"


def test_imported_points_go_through_the_write_plugins_unless_told_not_to(
        tsd_config: dict[str, Any], installed_example: Path) -> None:
    # pytsd import writes through the one batch path: the write filter refuses a point, the
    # publisher sees the stored ones; --no-plugins (plugins=False) skips both.
    from app.tsdb.importer import Importer
    from app.tsdb.writer import PointWriter
    from tests.conftest import drop_tables, make_tsdb

    tsdb = make_tsdb({**tsd_config, "tsd.core.plugin_path": str(installed_example),
                      "tsd.timeseriesfilter.enable": True,
                      "tsd.timeseriesfilter.plugin": "example",
                      "tsd.rtpublisher.enable": True, "tsd.rtpublisher.plugin": "example",
                      "tsd.custom.example.blocked_prefix": "spam."})
    try:
        seen = sys.modules["tsd_example_plugin"].SEEN
        importer = Importer(PointWriter(tsdb))
        importer.add(f"imported.ok {NOW_S} 1 host=a", 1)
        importer.add(f"spam.imported {NOW_S} 2 host=a", 2)
        refused = importer.flush()
        assert [(r.number, r.error.message) for r in refused] == [
            (2, "Refused by the example filter: spam.imported")]
        assert importer.stored == 1 and "imported.ok" in seen
        unfiltered = Importer(PointWriter(tsdb, plugins=False))
        unfiltered.add(f"spam.backfill {NOW_S} 3 host=a", 1)
        assert unfiltered.flush() == [] and unfiltered.stored == 1
        assert "spam.backfill" not in seen
        assert tsdb.metrics.find_id("spam.backfill") is not None
    finally:
        drop_tables(tsdb)


def test_a_plugin_acts_only_in_the_roles_it_is_named_for(
        make_client: Callable[[dict[str, Any]], FlaskClient], installed_example: Path) -> None:
    """OpenTSDB loads a plugin per role: named as an HTTP RPC plugin only, the example's
    write filter and publisher hooks stay idle."""
    client = make_client({"tsd.core.plugin_path": str(installed_example),
                          "tsd.http.rpc.plugins": "example"})
    assert put(client, point("blocked.x"))["success"] == 1
    assert "blocked.x" not in client.get("/plugin/example/seen").get_json()


def test_unknown_plugin_stops_the_start(tmp_path: Path) -> None:
    config = {"tsd.storage": f"sqlite:///{tmp_path / 'x.db'}", "tsd.rtpublisher.enable": True,
              "tsd.rtpublisher.plugin": "no_such_plugin_anywhere"}
    with pytest.raises(PluginLoadError, match="no_such_plugin_anywhere"):
        create_app(config)
    with pytest.raises(PluginLoadError, match="names no plugin"):
        PluginHost(load_config({"tsd.rtpublisher.enable": "true"}, environ={}))
    with pytest.raises(TsdbError, match="does not compile"):
        PluginHost(load_config({"tsd.uidfilter.enable": "true",
                                "tsd.uidfilter.whitelist.tagv_patterns": "(["}, environ={}))


# --- the UID filter ------------------------------------------------------------------------


def test_uid_filter_whitelist_and_blacklist(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = make_client({"tsd.uidfilter.enable": True,
                          "tsd.uidfilter.whitelist.metric_patterns": "^sys\\.,cpu",
                          "tsd.uidfilter.blacklist.tagv_patterns": "^[0-9a-f]{32}$"})
    result = put(client, point("sys.cpu"), point("sys.mem"), point("app.cpu"),
                 point("sys.cpu", host="0123456789abcdef0123456789abcdef"))
    assert result["success"] == 1
    assert [e["error"] for e in result["errors"]] == [
        "Failed to assign ID for kind='metrics' name='sys.mem': Blocked by UID filter: metric "
        "does not match the whitelist pattern [cpu]",
        "Failed to assign ID for kind='metrics' name='app.cpu': Blocked by UID filter: metric "
        "does not match the whitelist pattern [^sys\\.]",
        "Failed to assign ID for kind='tagv' name='0123456789abcdef0123456789abcdef': Blocked "
        "by UID filter: tagv matches the blacklist pattern [^[0-9a-f]{32}$]"]
    assigned = client.get("/api/uid/assign?metric=sys.disk&tagv=ok").get_json()
    assert assigned["metric_errors"]["sys.disk"].startswith("Failed to assign ID")
    assert "tagv" in assigned and "ok" in assigned["tagv"]


def test_series_limit_per_metric(make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = make_client({"tsd.uidfilter.enable": True,
                          "tsd.uidfilter.series_limit.per_hour": 3})
    result = put(client, *[point("req.latency", host=f"h{i}") for i in range(5)],
                 point("other.metric", host="h9"))
    assert result["success"] == 4  # three new series of req.latency, one of other.metric
    assert [e["datapoint"]["tags"]["host"] for e in result["errors"]] == ["h3", "h4"]
    assert result["errors"][0]["error"] == (
        "Failed to assign ID for kind='tagv' name='h3': Blocked by UID filter: metric "
        "'req.latency' has created 3 new series this hour, the limit "
        "(tsd.uidfilter.series_limit.per_hour)")
    # Existing series keep working; so do new series made only of known names.
    again = put(client, point("req.latency", host="h0", offset_s=1),
                point("other.metric", host="h1", offset_s=1))
    assert again["success"] == 2


# --- the publishers ------------------------------------------------------------------------


def test_jsonl_publisher(make_client: Callable[[dict[str, Any]], FlaskClient],
                         tmp_path: Path) -> None:
    path = tmp_path / "published.jsonl"
    client = make_client({"tsd.rtpublisher.enable": True, "tsd.rtpublisher.plugin": "jsonl",
                          "tsd.rtpublisher.jsonl.path": str(path)})
    put(client, point("sys.cpu"), {"metric": "bad"}, point("sys.cpu", "b"))
    client.post("/api/annotation", json={"startTime": NOW_S, "description": "deploy"})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"type": "point", "metric": "sys.cpu", "timestamp": NOW_S, "value": 1,
         "tags": {"host": "a"}},
        {"type": "point", "metric": "sys.cpu", "timestamp": NOW_S, "value": 1,
         "tags": {"host": "b"}},
        {"type": "annotation", "tsuid": "", "description": "deploy", "notes": "",
         "endTime": 0, "startTime": NOW_S}]


class Receiver:
    """A real HTTP server that records POSTed JSON and fails the first ``failures`` calls."""

    def __init__(self, failures: int = 0) -> None:
        self.bodies: list[Any] = []
        self.failures = failures
        self.calls = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.calls += 1
                if receiver.calls <= receiver.failures:
                    self.send_response(503)
                else:
                    receiver.bodies.append((self.path, json.loads(body)))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(failures=1)
    yield found
    found.server.shutdown()
    found.server.server_close()


def webhook_plugin(client: FlaskClient) -> Any:
    return client.application.extensions["tsdb"].plugins.pm.get_plugin("webhook")


def stat(client: FlaskClient, metric: str) -> int:
    rows = [s for s in client.get("/api/stats").get_json() if s["metric"] == metric]
    return int(rows[0]["value"])


def test_webhook_batches_and_retries(make_client: Callable[[dict[str, Any]], FlaskClient],
                                     receiver: Receiver) -> None:
    client = make_client({"tsd.rtpublisher.enable": True, "tsd.rtpublisher.plugin": "webhook",
                          "tsd.rtpublisher.webhook.url": receiver.url + "/api/put",
                          "tsd.rtpublisher.webhook.annotation_url":
                              receiver.url + "/api/annotation/bulk",
                          "tsd.rtpublisher.webhook.batch_size": 2,
                          "tsd.rtpublisher.webhook.flush_interval_ms": 50})
    put(client, *[point("sys.cpu", host=f"h{i}") for i in range(5)])
    client.post("/api/annotation", json={"startTime": NOW_S, "description": "deploy"})
    assert webhook_plugin(client).flush(timeout_s=30)
    sent = [p for path, body in receiver.bodies if path == "/api/put" for p in body]
    assert sorted(p["tags"]["host"] for p in sent) == [f"h{i}" for i in range(5)]
    assert all(len(body) <= 2 for _, body in receiver.bodies)  # batched
    notes = [body for path, body in receiver.bodies if path == "/api/annotation/bulk"]
    assert notes == [[{"tsuid": "", "description": "deploy", "notes": "", "endTime": 0,
                       "startTime": NOW_S}]]
    assert receiver.calls == len(receiver.bodies) + 1  # the first POST failed, was retried
    assert stat(client, "tsd.rtpublisher.webhook.sent") == 6
    assert stat(client, "tsd.rtpublisher.webhook.dropped") == 0
    assert stat(client, "tsd.rtpublisher.webhook.failed_posts") == 1


def test_webhook_drops_are_counted(make_client: Callable[[dict[str, Any]], FlaskClient],
                                   receiver: Receiver) -> None:
    """A full queue drops new points, a POST failing every retry drops its batch: counted,
    and the writes themselves succeed."""
    receiver.failures = 10**6
    client = make_client({"tsd.rtpublisher.enable": True, "tsd.rtpublisher.plugin": "webhook",
                          "tsd.rtpublisher.webhook.url": receiver.url,
                          "tsd.rtpublisher.webhook.queue_size": 3,
                          "tsd.rtpublisher.webhook.batch_size": 100,
                          "tsd.rtpublisher.webhook.flush_interval_ms": 50,
                          "tsd.rtpublisher.webhook.retries": 1})
    result = put(client, *[point("sys.cpu", host=f"h{i}") for i in range(5)])
    assert result["success"] == 5
    assert webhook_plugin(client).flush(timeout_s=30)
    assert stat(client, "tsd.rtpublisher.webhook.dropped") == 5  # 2 at the queue, 3 at send
    assert stat(client, "tsd.rtpublisher.webhook.sent") == 0
    assert receiver.calls == 2  # one try and one retry


class BrokenPublisher:
    @hookimpl
    def pytsd_publish_points(self, points: Any) -> None:
        raise RuntimeError("the sink is gone")

    @hookimpl
    def pytsd_collect_stats(self) -> Any:
        raise RuntimeError("no stats either")


def test_a_failing_publisher_never_fails_a_write(client: FlaskClient) -> None:
    client.application.extensions["tsdb"].plugins.add("broken", BrokenPublisher())
    assert client.post("/api/put", json=point("sys.cpu")).status_code == 204
    assert client.get(f"/api/query?start={NOW_S - 1}&m=sum:sys.cpu").get_json()[0]["dps"]
    stats = client.get("/api/stats")
    assert stats.status_code == 200
    # The publish and the first /api/stats (the count is read before the stats hooks run).
    assert stat(client, "tsd.plugin.errors") == 2
