"""The split read's helper processes under the real server: each gunicorn worker starts one
at boot, a query answers the same with them, without them (one killed) and with the split
turned off, and they leave with their workers on a graceful stop."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import requests

from tests.e2e.tsd_process import gunicorn_server

# The demo data set: a day ending now at 10 s. Six whole hours of it, downsampled by the read;
# absolute and hour-aligned, so that answers asked for a minute apart cover the same points.
HOUR_S = 3600
END_S = int(time.time()) // HOUR_S * HOUR_S
QUERY = f"/api/query?start={END_S - 6 * HOUR_S}&end={END_S}&m=sum:1m-avg:sys.cpu.user{{dc=*}}"
SPLIT = {"TSD_QUERY_SPLIT_MIN_POINTS": "0", "TSD_CORE_AUTO_CREATE_METRICS": "true"}


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in
                Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _is_helper(pid: int) -> bool:
    """Whether ``pid`` runs a helper (an exited one, even a zombie, has no command line)."""
    try:
        return b"app.server.split_helper" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _helpers(master: int) -> dict[int, int]:
    """Each worker's helper process, by worker pid (workers with exactly one)."""
    found = {worker: [child for child in _children(worker) if _is_helper(child)]
             for worker in _children(master)}
    return {worker: helpers[0] for worker, helpers in found.items() if len(helpers) == 1}


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _answer(url: str) -> object:
    response = requests.get(url + QUERY, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_helpers_live_and_die_with_their_workers(demo_store: str, tmp_path: Path) -> None:
    env = {"TSD_STORAGE": demo_store, **SPLIT}
    with gunicorn_server({**env, "TSD_QUERY_SPLIT_ENABLE": "false"},
                         tmp_path / "alone.log") as alone:
        assert _helpers(alone.process.pid) == {}  # none started when splitting is off
        expected = _answer(alone.url)
    with gunicorn_server(env, tmp_path / "split.log") as tsd:
        workers = _children(tsd.process.pid)
        _wait_for("a helper per worker", lambda: len(_helpers(tsd.process.pid)) == len(workers))
        helpers = _helpers(tsd.process.pid)
        for _ in range(4):  # both workers, their helpers taking part when a core is idle
            assert _answer(tsd.url) == expected
        victim = next(iter(helpers.values()))
        os.kill(victim, signal.SIGKILL)
        for _ in range(4):  # the worker that lost its helper reads alone
            assert _answer(tsd.url) == expected
    _wait_for("the helpers to leave", lambda: not any(map(_is_helper, helpers.values())))


def _policies(pid: int) -> dict[int, int]:
    """The scheduling policy of each thread of ``pid`` by thread id (``/proc``'s stat field
    41)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = int(
                (task / "stat").read_text().rsplit(")", 1)[1].split()[38])
        except (OSError, IndexError):
            continue
    return found


def test_split_helpers_run_as_batch_work_and_the_worker_does_not(demo_store: str,
                                                                 tmp_path: Path) -> None:
    """The split helpers are SCHED_BATCH (3), so a light request that wakes preempts them
    (app/server/cpu_class.py); the worker's threads, once its queries are over, are
    SCHED_OTHER (0)."""
    with gunicorn_server({"TSD_STORAGE": demo_store, **SPLIT}, tmp_path / "batch.log",
                         workers=1) as tsd:
        (worker,) = _children(tsd.process.pid)
        _wait_for("the helper", lambda: len(_helpers(tsd.process.pid)) == 1)
        (helper,) = _helpers(tsd.process.pid).values()
        # its main thread, once it has imported what it reads with
        _wait_for("the helper as batch work", lambda: _policies(helper).get(helper) == 3)
        _answer(tsd.url)  # a query: its pool thread starts
        assert requests.get(tsd.url + "/api/version", timeout=10).status_code == 200
        assert set(_policies(worker).values()) == {0}
