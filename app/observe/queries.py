"""The queries a server is running and has completed (OpenTSDB 2.4's ``QueryStats``), for
``/api/stats/query``, across the server's workers.

Each worker keeps its running queries and a ring of its last ``COMPLETED_RING`` completed
ones in memory and mirrors them into the server's run directory (``PYTSD_RUN_DIR/queries``):
``running-<pid>.json`` rewritten (atomically) when a query starts or ends, and
``completed-<pid>.jsonl`` appended, cut back to the ring when it doubles. Any worker reads
every worker's files, so the answer is the server's whichever worker gives it. Without a run
directory (tests, commands) the process's memory is the answer.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.observe import pid_alive

LOG = logging.getLogger("app.query.log")
COMPLETED_RING = 256  # OpenTSDB's COMPLETED_QUERY_CACHE_SIZE
RUN_DIR_ENV = "PYTSD_RUN_DIR"


@dataclass
class QueryRecord:
    """One query from its admission to its answer."""

    query: dict[str, Any]  # as OpenTSDB's TSQuery prints it
    remote: str
    headers: dict[str, str]
    user: str | None
    attribution: dict[str, str | None]  # dashboard, panel, org, user (Grafana's headers)
    lane: str = ""
    cost: int = 0
    started_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    started_s: float = field(default_factory=time.perf_counter)
    key: str = ""

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started_s) * 1000

    def running_json(self) -> dict[str, Any]:
        """OpenTSDB's shape of a running query, plus pytsd's attribution fields."""
        return {"query": self.query, "remote": self.remote, "user": self.user,
                "headers": self.headers, "queryStart": self.started_ms,
                "elapsed": round(self.elapsed_ms(), 3), **self._extra()}

    def completed_json(self, status: int, reason: str, exception: str | None,
                       stats: dict[str, Any], running: int) -> dict[str, Any]:
        """OpenTSDB's shape of a completed query (``QueryStats`` as Jackson prints it)."""
        return {"query": self.query, "exception": exception or "null", "executed": 1,
                "user": self.user, "requestHeaders": self.headers,
                "numRunningQueries": running,
                "httpResponse": {"code": status, "reasonPhrase": reason},
                "queryStartTimestamp": self.started_ms,
                "queryCompletedTimestamp": time.time_ns() // 1_000_000,
                "sentToClient": status < 400, "stats": stats, **self._extra()}

    def _extra(self) -> dict[str, Any]:
        return {**self.attribution, "remoteAddress": self.remote.rsplit(":", 1)[0],
                "lane": self.lane, "cost": self.cost, "worker": os.getpid()}


class QueryLog:
    """Running and completed queries of this process, mirrored to the run directory."""

    def __init__(self, run_dir: str | None) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, QueryRecord] = {}
        self._completed: deque[dict[str, Any]] = deque(maxlen=COMPLETED_RING)
        self._appended = 0
        self._next = 0
        self._mirror_failed = False
        self.folder = os.path.join(run_dir, "queries") if run_dir else None
        if self.folder:
            os.makedirs(self.folder, exist_ok=True)

    def start(self, record: QueryRecord) -> None:
        with self._lock:
            self._next += 1
            record.key = str(self._next)
            self._running[record.key] = record
            self._mirror(self._write_running)

    def finish(self, record: QueryRecord, status: int, reason: str, exception: str | None,
               stats: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._running.pop(record.key, None)
            done = record.completed_json(status, reason, exception, stats, len(self._running))
            self._completed.append(done)
            self._mirror(self._write_running)
            self._mirror(lambda: self._append_completed(done))
        return done

    def _mirror(self, write: Callable[[], object]) -> None:
        """Write the run directory's files; a failure (a full disk) costs the other workers'
        view of this one, never the query's answer, and is logged once."""
        try:
            write()
        except OSError as exc:
            if not self._mirror_failed:
                LOG.warning("Cannot write the running and completed queries to %s: %s",
                            self.folder, exc)
            self._mirror_failed = True

    def running_count(self) -> int:
        return len(self._running)

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """``{"completed": [...], "running": [...]}``, newest completed last."""
        if self.folder is None:
            with self._lock:
                running = [r.running_json() for r in self._running.values()]
                completed = list(self._completed)
            return {"completed": completed, "running": running}
        running = [q for path in self._files("running-*.json") if _alive(path)
                   for q in _read_json(path)]
        now_ms = time.time_ns() // 1_000_000
        for item in running:  # as of now, not as of the file's last write
            item["elapsed"] = float(now_ms - int(item.get("queryStart", now_ms)))
        completed = [q for path in self._files("completed-*.jsonl") for q in _read_lines(path)]
        completed.sort(key=lambda q: q.get("queryCompletedTimestamp", 0))
        return {"completed": completed[-COMPLETED_RING:], "running": running}

    def _files(self, pattern: str) -> list[str]:
        assert self.folder is not None
        return glob.glob(os.path.join(self.folder, pattern))

    def _write_running(self) -> None:
        if self.folder is None:
            return
        path = os.path.join(self.folder, f"running-{os.getpid()}.json")
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump([r.running_json() for r in self._running.values()], out)
        os.replace(temporary, path)

    def _append_completed(self, done: dict[str, Any]) -> None:
        if self.folder is None:
            return
        path = os.path.join(self.folder, f"completed-{os.getpid()}.jsonl")
        self._appended += 1
        if self._appended > 2 * COMPLETED_RING:  # cut the file back to the ring
            temporary = path + ".tmp"
            _write_lines(temporary, self._completed)
            os.replace(temporary, path)
            self._appended = len(self._completed)
            return
        _write_lines(path, [done], mode="a")


def _write_lines(path: str, items: Iterable[dict[str, Any]], mode: str = "w") -> None:
    with open(path, mode, encoding="utf-8") as out:
        out.write("".join(json.dumps(item) + "\n" for item in items))


def _read_json(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as source:
            return list(json.load(source))
    except (OSError, ValueError):
        return []  # a worker that just exited, or a file being replaced


def _read_lines(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as source:
            lines = source.readlines()[-COMPLETED_RING:]
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            found.append(json.loads(line))
        except ValueError:
            continue  # a line being appended right now
    return found


def _alive(path: str) -> bool:
    """Whether the worker that wrote ``running-<pid>.json`` still runs (a dead one's queries
    are not running any more)."""
    return pid_alive(int(os.path.basename(path)[len("running-"):-len(".json")]))
    return True


_LOGS: dict[int, QueryLog] = {}
_LOGS_LOCK = threading.Lock()


def query_log() -> QueryLog:
    """This process's log (made again after a fork: a worker's files carry its own pid)."""
    pid = os.getpid()
    with _LOGS_LOCK:
        log = _LOGS.get(pid)
        if log is None:
            log = _LOGS[pid] = QueryLog(os.environ.get(RUN_DIR_ENV) or None)
        return log
