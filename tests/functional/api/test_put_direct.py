"""``/api/put`` stored without Flask's request cycle (app/api/put_direct.py, app/server/
put_lane.py), in one process over a real store: which puts take it, that they skip every
Flask hook yet store their points and count them, and that puts written as one group are
each answered as Flask answers them alone."""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, request
from flask.testing import FlaskClient

from app.api.put_direct import DirectPuts
from app.observe import metrics
from app.server.put_lane import PutLane
from app.server.wsgi_bridge import Reply, Request, build_environ, call_app
from plugin.credentials import CredentialsFile
from tests.conftest import SyncerDisk

NOW_S = 1_700_000_000
HEADERS = [(b"host", b"tsd"), (b"content-type", b"application/json")]
PEER, SERVER = ("127.0.0.1", 5000), ("127.0.0.1", 4242)


def body(*points: Any) -> bytes:
    return json.dumps(list(points)).encode()


def point(metric: str = "sys.cpu", value: Any = 1, timestamp: int = NOW_S,
          host: str = "a") -> dict[str, Any]:
    return {"metric": metric, "timestamp": timestamp, "value": value, "tags": {"host": host}}


def count_hooks(app: Flask) -> list[str]:
    """Every request that reaches Flask's hooks, by path."""
    seen: list[str] = []
    app.before_request_funcs.setdefault(None, []).append(lambda: seen.append(request.path))
    return seen


def answer_together(lane: PutLane, requests: list[Request]) -> list[Reply]:
    """The requests handed to the lane at once, on a loop, as the worker does."""
    async def every() -> list[Reply]:
        return list(await asyncio.gather(*(lane.answer(r, PEER, SERVER) for r in requests)))
    # On a thread of its own: a session's browser (Playwright's sync API) keeps an event loop
    # running in the main thread, where asyncio.run refuses to start another.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, every()).result()


def lane_of(app: Flask) -> PutLane:
    def in_thread(func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().run_in_executor(None, func, *args)

    lane = PutLane.of(app, in_thread)
    assert lane is not None
    return lane


def flask_reply(app: Flask, request: Request) -> tuple[Any, ...]:
    return answer_of(call_app(app, build_environ(request, PEER, SERVER)))


def answer_of(reply: Reply) -> tuple[Any, ...]:
    """What the client gets (the status, headers and body; not how they were made)."""
    return reply.status, reply.reason, reply.headers, reply.body


def put_request(data: bytes, target: bytes = b"/api/put",
                headers: list[tuple[bytes, bytes]] = HEADERS) -> Request:
    return Request("POST", target, "1.1", headers, data)


def stored_values(client: FlaskClient, metric: str = "sys.cpu") -> list[float]:
    answer = client.get(f"/api/query?start={NOW_S - 10}&end={NOW_S + 3600}&m=sum:{metric}"
                        "{host=*}")
    assert answer.status_code == 200, answer.get_data()
    return sorted(v for series in answer.get_json() for v in series["dps"].values())


def test_a_plain_put_is_stored_and_counted_without_any_flask_hook(
        app: Flask, client: FlaskClient) -> None:
    lane = lane_of(app)
    seen = count_hooks(app)
    added = metrics.total("pytsd_datapoints_added_total")
    puts = metrics.total("pytsd_http_requests_total", route="/api/put", status="204")
    request = put_request(body(point(value=1), point(value=2.5, host="b")))
    assert lane.takes(request)
    [reply] = answer_together(lane, [request])
    assert (reply.status, reply.body) == (204, b"")
    assert seen == []
    assert metrics.total("pytsd_datapoints_added_total") - added == 2
    assert metrics.total("pytsd_http_requests_total", route="/api/put", status="204") \
        - puts == 1
    assert stored_values(client) == [1, 2.5]


def test_puts_of_one_group_are_each_answered_as_flask_answers_them_alone(
        app: Flask, client: FlaskClient) -> None:
    """Four puts written by one writer call: a clean one, one with a bad point, one that is
    not JSON, one with no point; each answer is the bytes Flask gives the same request."""
    lane = lane_of(app)
    bodies = [body(point(value=1)),
              body(point(value=2, host="b"), point(value="x", host="c")),
              b"[{not json",
              b"[]"]
    replies = answer_together(lane, [put_request(data) for data in bodies])
    # Flask's answers to the same requests, on a query-string target (which the lane leaves
    # to Flask), after the lane stored them: the same points again, the same outcome.
    for data, reply in zip(bodies, replies):
        request = put_request(data, b"/api/put?")
        assert not lane.takes(request)
        assert answer_of(reply) == flask_reply(app, request)
    assert [r.status for r in replies] == [204, 400, 400, 400]
    assert stored_values(client) == [1, 2]


def test_a_store_refusal_after_parsing_is_the_views_answer_with_details(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    """Unknown metrics (no auto-create) are refused by the writer, after the body parsed:
    the view answers from what was stored, ``?details`` or not as Flask does."""
    client = make_client({"tsd.core.auto_create_metrics": False})
    app = client.application
    assert client.post("/api/uid/assign", json={"metric": ["known"]}).status_code == 200
    lane = lane_of(app)
    data = body(point("known", 5), point("unknown", 6))
    [reply] = answer_together(lane, [put_request(data)])
    assert answer_of(reply) == flask_reply(app, put_request(data, b"/api/put?"))
    assert reply.status == 400 and b"details" in reply.body
    details = client.post("/api/put?details", data=data, content_type="application/json")
    assert details.get_json()["errors"][0]["error"] == "Unknown metric"
    assert stored_values(client, "known") == [5]


@pytest.mark.parametrize("headers", [
    [(b"host", b"tsd"), (b"content-type", b"text/plain")],
    [(b"host", b"tsd"), (b"origin", b"http://evil.example")],
    [(b"host", b"tsd"), (b"sec-fetch-site", b"cross-site")],
    [(b"host", b"tsd"), (b"content-encoding", b"gzip")],
])
def test_puts_whose_headers_a_hook_reads_go_through_flask(
        app: Flask, headers: list[tuple[bytes, bytes]]) -> None:
    lane = lane_of(app)
    assert not lane.takes(put_request(body(point()), headers=headers))


@pytest.mark.parametrize("target", [b"/api/put?details", b"/api/put?sync", b"/api/put/",
                                    b"/API/put", b"/api/v1/put"])
def test_other_targets_go_through_flask(app: Flask, target: bytes) -> None:
    assert not lane_of(app).takes(put_request(body(point()), target))


def test_json_and_untyped_bodies_are_taken(app: Flask) -> None:
    lane = lane_of(app)
    for headers in ([(b"host", b"tsd")],
                    [(b"host", b"tsd"), (b"content-type", b"Application/JSON; charset=utf-8")]):
        assert lane.takes(put_request(body(point()), headers=headers))


@pytest.mark.parametrize("settings", [
    {"tsd.mode": "ro"},
    {"tsd.http.request.enable_cors": True, "tsd.http.request.cors_domains": "*"},
    "authentication",
])
def test_settings_that_give_flask_a_say_in_every_put_turn_the_lane_off(
        make_client: Callable[[dict[str, Any]], FlaskClient], tmp_path: Path,
        settings: dict[str, Any] | str) -> None:
    if settings == "authentication":
        path = tmp_path / "auth.json"
        CredentialsFile(path).add_token("write", "write-token")
        settings = {"tsd.core.authentication.enable": True,
                    "tsd.core.authentication.file": str(path)}
    assert isinstance(settings, dict)
    assert DirectPuts.of(make_client(settings).application) is None
    assert DirectPuts.of(make_client({}).application) is not None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_put_stored_on_the_loop_is_answered_only_once_the_wal_sync_has_it(
        app: Flask, client: FlaskClient, syncer_disk: SyncerDisk) -> None:
    """On the embedded store the loop commits without syncing (app/storage/sqlite_sync.py):
    the 204 waits for a sync of the WAL file that began after the commit, the syncer's."""
    syncer_disk.hold()
    lane = lane_of(app)
    with ThreadPoolExecutor(1) as thread:
        answered = thread.submit(answer_together, lane, [put_request(body(point(value=7)))])
        with pytest.raises(TimeoutError):
            answered.result(timeout=0.3)  # committed, not synced: no answer yet
        assert syncer_disk.synced() == []
        syncer_disk.release()
        [reply] = answered.result(timeout=10)
    assert reply.status == 204
    assert [path.endswith("-wal") for path in syncer_disk.synced()] == [True]
    assert stored_values(client) == [7]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_failed_wal_sync_answers_the_put_with_the_stores_error(
        app: Flask, syncer_disk: SyncerDisk) -> None:
    syncer_disk.fail(errno.EIO)
    [reply] = answer_together(lane_of(app), [put_request(body(point(value=7)))])
    assert reply.status == 500
    error = json.loads(reply.body)["error"]
    assert error["message"] == "The embedded store could not sync its disk"
    assert "Input/output error" in error["details"]
