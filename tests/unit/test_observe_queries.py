"""The completed queries of /api/stats/query (app/observe/queries.py): a bounded ring over
every worker of a server, each worker a forked process writing into one run directory."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from app.observe.queries import COMPLETED_RING, QueryLog, QueryRecord

FORK = multiprocessing.get_context("fork")


def _finish_queries(run_dir: str, worker: str, count: int) -> None:
    log = QueryLog(run_dir)
    for index in range(count):
        record = QueryRecord(query={"index": index}, remote="127.0.0.1:1", headers={},
                             user=None, attribution={"dashboard": worker})
        log.start(record)
        log.finish(record, 200, "OK", None, {})


def _in_a_worker(run_dir: Path, worker: str, count: int) -> None:
    process = FORK.Process(target=_finish_queries, args=(str(run_dir), worker, count))
    process.start()
    process.join(30)
    assert process.exitcode == 0


def test_completed_queries_are_the_newest_ring_over_all_workers(tmp_path: Path) -> None:
    assert COMPLETED_RING == 256  # OpenTSDB's COMPLETED_QUERY_CACHE_SIZE
    _in_a_worker(tmp_path, "first", 600)  # past twice the ring: its file is cut back
    time.sleep(0.01)  # the second worker's queries complete in a later millisecond
    _in_a_worker(tmp_path, "second", 100)
    completed = QueryLog(str(tmp_path)).snapshot()["completed"]
    assert len(completed) == 256
    assert [q["query"]["index"] for q in completed if q["dashboard"] == "first"] == list(
        range(600 - 156, 600))
    assert [q["query"]["index"] for q in completed if q["dashboard"] == "second"] == list(
        range(100))
    for file in (tmp_path / "queries").glob("completed-*.jsonl"):  # bounded on disk too
        assert len(file.read_text().splitlines()) <= 2 * 256
